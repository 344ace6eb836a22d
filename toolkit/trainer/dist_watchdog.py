"""What ends a distributed job when a rank fails: MPI's start-up (``import mpi4py.MPI``) under a
guard of its own, the abort hook (an uncaught exception on one rank aborts the whole job) and the
watchdog that aborts the job when a collective waits longer than ``MXOPT_DIST_TIMEOUT`` seconds
for a rank that never arrives. :class:`~toolkit.trainer.dist.DistKVStore` runs every collective
under :func:`watchdog`.
"""
from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

from .. import mpi_jobs

DEFAULT_TIMEOUT = 600.0


def mpi():
    """mpi4py's ``MPI`` module (importing it starts MPI)."""
    try:
        from mpi4py import MPI
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            "distributed training needs mpi4py and an MPI library: pip install "
            "'mxopt-toolkit[dist]' (installs mpi4py and MPICH), then start the script with "
            f"'mxopt launch -n N script.py' ({exc})") from exc
    return MPI


_hook_installed = False


def _abort(MPI, code=1, reason=None):
    """End the job from this rank: tell ``mxopt launch`` why (when it started this rank), then
    ``MPI_Abort`` (when MPI is running), then exit with ``code``."""
    if reason is not None:
        mpi_jobs.report("abort", reason=reason)
    sys.stderr.flush()
    sys.stdout.flush()
    # mpiexec forwards each rank's output asynchronously; MPI_Abort tears the job down at once,
    # so give the message just written a moment to reach the terminal
    time.sleep(0.5)
    try:
        if MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized() and (
                MPI.Query_thread() >= MPI.THREAD_MULTIPLE or
                threading.current_thread() is threading.main_thread()):
            MPI.COMM_WORLD.Abort(code)
    finally:
        os._exit(code)


def install_abort_hook(MPI, rank):
    """An uncaught exception prints its traceback, then aborts the MPI job: the other ranks,
    waiting in a collective, would otherwise wait forever (MPI_Finalize at exit does not end
    them)."""
    global _hook_installed
    if _hook_installed:
        return
    previous = sys.excepthook

    def hook(kind, value, tb):
        if getattr(value, "raised_on_every_rank", False):
            # every rank raised the same error at the same point: each exits by itself (status
            # 1), after printing it, and no rank is left waiting
            previous(kind, value, tb)
            return
        try:
            previous(kind, value, tb)
        finally:
            sys.stderr.write(f"mxopt dist: rank {rank} stopped on an uncaught {kind.__name__}; "
                             "aborting the MPI job so that no rank waits forever\n")
            _abort(MPI, 1)

    sys.excepthook = hook
    _hook_installed = True


class _Watchdog:
    """Aborts the job when one collective runs longer than ``timeout`` seconds."""

    def __init__(self, MPI, rank, timeout):
        self.MPI, self.rank, self.timeout = MPI, rank, timeout
        self._cond = threading.Condition()
        self._what = None
        self._deadline = 0.0
        self._thread = None

    def _start(self):
        self._thread = threading.Thread(target=self._run, name="mxopt-dist-watchdog",
                                        daemon=True)
        self._thread.start()

    def _run(self):
        with self._cond:
            while True:
                if self._what is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                what = f"{self._what} did not complete within {self.timeout:g} s"
                sys.stderr.write(
                    f"mxopt dist: rank {self.rank}: {what} (another rank died, exited or is "
                    "stuck; raise MXOPT_DIST_TIMEOUT if a rank legitimately takes longer "
                    "between steps); aborting the MPI job\n")
                _abort(self.MPI, 1, reason=f"the watchdog: {what}")

    def __call__(self, what):
        return _Guard(self, what)


class _Guard:
    __slots__ = ("dog", "what")

    def __init__(self, dog, what):
        self.dog, self.what = dog, what

    def __enter__(self):
        dog = self.dog
        if dog.timeout:
            if dog._thread is None:
                dog._start()
            with dog._cond:
                dog._what = self.what
                dog._deadline = time.monotonic() + dog.timeout
                dog._cond.notify()

    def __exit__(self, *exc):
        dog = self.dog
        if dog.timeout:
            with dog._cond:
                dog._what = None
        return False


class StartUpGuard:
    """The watchdog of MPI's start-up. ``import mpi4py.MPI`` calls ``MPI_Init`` holding the GIL,
    which waits for every rank: the watchdog thread cannot run meanwhile. A small shell process
    keeps the time instead: unless this process closes its pipe first (start-up done, or this
    process died), it prints why after ``timeout`` seconds and kills this process (SIGKILL),
    which ends the job (mpiexec ends every rank when one is killed; so does ``mxopt launch``).
    Nothing is started when MPI is already running, the watchdog is off, or there is no ``sh``."""

    _SCRIPT = ('exec 3<&0 4>&2 2>/dev/null; sleep "$2" & s=$!; (cat <&3 >/dev/null; kill $s) & '
               'if wait $s; then printf "%s\\n" "$1" >&4; kill -9 $PPID; fi')

    def __init__(self, timeout, rank):
        self.timeout, self.rank, self.proc = timeout, rank, None

    def __enter__(self):
        import shutil
        import subprocess
        mpi = sys.modules.get("mpi4py.MPI")
        if not self.timeout or (mpi is not None and mpi.Is_initialized()):
            return self
        sh = shutil.which("sh")
        if sh is None:  # pragma: no cover - no POSIX shell (mpi4py's wheels are POSIX only)
            return self
        msg = (f"mxopt dist: rank {self.rank}: MPI start-up (MPI_Init, at the import of "
               f"mpi4py.MPI) did not complete within {self.timeout:g} s (another rank died, "
               "exited or is stuck before starting MPI; raise MXOPT_DIST_TIMEOUT if a rank "
               "legitimately takes longer to get there); ending this rank")
        self.proc = subprocess.Popen([sh, "-c", self._SCRIPT, "sh", msg, repr(self.timeout)],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc):
        import subprocess
        if self.proc is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:  # pragma: no cover - a stuck shell
                self.proc.kill()
                self.proc.wait()
        return False


_dog = None


def watchdog(MPI, rank, timeout):
    """The process's one watchdog thread (started at the first guarded collective)."""
    global _dog
    if _dog is None:
        _dog = _Watchdog(MPI, rank, timeout)
    _dog.timeout = timeout
    return _dog


def timeout_from_env():
    """The watchdog's timeout in seconds: ``MXOPT_DIST_TIMEOUT`` (0: no watchdog)."""
    raw = os.environ.get("MXOPT_DIST_TIMEOUT", "")
    if raw == "":
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"MXOPT_DIST_TIMEOUT must be a number of seconds (0: no watchdog), got "
                         f"{raw!r}") from None
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"MXOPT_DIST_TIMEOUT must be >= 0, got {raw!r}")
    return value
