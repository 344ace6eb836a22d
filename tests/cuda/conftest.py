"""The CUDA tests: run on a GPU, or under numba's simulator in their own process.

``NUMBA_ENABLE_CUDASIM=1`` must be set before numba is imported, so CI runs this folder in a
separate pytest process (``.ci/run``). Without a GPU and without the simulator every test here is
skipped with the reason ``toolkit.backends.cuda_available()`` gives, or, with
``MXOPT_CUDA_REQUIRED=1`` (CI sets it), the run fails with that reason.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # optim_db

from toolkit.backends import cuda_available  # noqa: E402

OK, WHY = cuda_available()
SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
if SIMULATOR:
    # The simulator runs each CUDA thread as a Python thread, and the thread running a block
    # polls them in a loop until all are blocked at syncthreads() or done: with Python's 5 ms
    # switch interval each barrier costs that loop's 5 ms slice (measured on the LARS and LAMB
    # Trainer tests: 10.7 s at 5 ms, 4.5 s at 0.1 ms, half the CPU time). The kernels'
    # results do not depend on it.
    sys.setswitchinterval(1e-4)



def pytest_configure(config):
    if SIMULATOR:
        # the simulator runs the uint64 noise generator on numpy scalars, which warn on the
        # intended wrap-around modulo 2**64
        config.addinivalue_line("filterwarnings",
                                "ignore:overflow encountered in scalar:RuntimeWarning")


def pytest_collection_modifyitems(config, items):
    if OK:
        return
    if os.environ.get("MXOPT_CUDA_REQUIRED") == "1":  # CI: a broken install is no "all skipped"
        raise pytest.UsageError(f"MXOPT_CUDA_REQUIRED=1 but the CUDA backend is unavailable: "
                                f"{WHY}")
    skip = pytest.mark.skip(reason=f"CUDA backend unavailable: {WHY}; run this folder with "
                                   "NUMBA_ENABLE_CUDASIM=1 for the simulator")
    for item in items:
        if "tests/cuda" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)
