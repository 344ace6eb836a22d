"""One process at a time: a module whose import compiles kernels (the registry's launches
planned with their first passes run for real) takes this lock first, so that of pytest-xdist's
workers, which each collect every module at the same moment, one compiles and the others load
the kernels from numba's on-disk cache instead of compiling them too."""
from __future__ import annotations

import contextlib
import os

try:
    import fcntl
except ImportError:  # not POSIX: no lock, each process compiles
    fcntl = None


@contextlib.contextmanager
def one_process_at_a_time(path):
    """An exclusive ``flock`` of the file at ``path`` (a module's own ``__file__``) while the
    block runs."""
    if fcntl is None:
        yield
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
