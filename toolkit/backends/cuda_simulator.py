"""A fix to numba-cuda's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), installed by
:mod:`toolkit.backends.cuda_device` when the simulator runs.

The simulator runs each CUDA thread of a block as a Python thread, and the blocks of a launch
one after another. A block's threads must share one array per ``cuda.shared.array`` call site
(the simulator keeps one per call site for the whole launch, which its blocks reuse in turn);
it makes the array on the first call, by
looking the call site up in a dict and inserting a new ``numpy.empty`` array when it is absent,
with no lock between the look-up and the insert (``FakeCUDAShared.array``, numba-cuda 0.30.4).
When Python hands the interpreter to another thread of the block between the two, both threads
make an array: each writes its partial sums into its own, and the thread that reduces them reads
the slots the other wrote from an array nobody wrote (uninitialised memory). That is what made
LARS and LAMB (the kernels with shared memory: the norms and LAMB's first pass) fail about one
simulator run in five with errors from 5 to 1e13 bounds, not reproducible on a second call
(hypothesis's FlakyFailure). A real GPU has no such step: shared memory exists before the block
runs.

:func:`install` replaces that method by one that does the same look-up and insert under a lock
(and names the call site from the calling frame, without formatting the whole stack). The
simulator's other behaviour is kept: dynamic shared memory (``shape`` 0) is the block's one
byte buffer; an explicit ``alignment`` is refused. ``tests/cuda/test_cuda_simulator.py`` forces
the thread switch by making ``numpy.empty`` slow: without the fix every such launch sums
uninitialised memory.
"""
from __future__ import annotations

import inspect
import threading

import numpy as np

__all__ = ["install", "shared_array"]

_lock = threading.Lock()


def shared_array(self, shape, dtype, alignment=None):
    """``cuda.shared.array(shape, dtype)`` in a simulated block (a method of the simulator's
    ``FakeCUDAShared``): one array per call site (file and line) for all the block's threads."""
    from numba.cuda import types  # the simulator's own imports (simulator/kernelapi.py)
    from numba.cuda.np import numpy_support

    if alignment is not None:
        raise RuntimeError("Array alignment is not supported in cudasim")
    if isinstance(dtype, types.Type):
        dtype = numpy_support.as_dtype(dtype)
    dtype = np.dtype(dtype)
    if shape == 0:  # dynamic shared memory: one buffer, every such array over it
        return np.frombuffer(self._dynshared.data, dtype=dtype,
                             count=self._dynshared_size // dtype.itemsize)
    frame = inspect.currentframe().f_back  # the kernel's, at the call
    site = (frame.f_code.co_filename, frame.f_lineno)
    with _lock:
        arr = self._allocations.get(site)
        if arr is None:
            arr = self._allocations[site] = np.empty(shape, dtype)
    return arr


def install():
    """Make the simulator's shared arrays one per call site under a lock (idempotent)."""
    from numba.cuda.simulator import kernelapi

    kernelapi.FakeCUDAShared.array = shared_array
