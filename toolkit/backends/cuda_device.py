"""The CUDA backend's compile policy and device plumbing, shared by its kernel families: the
simulator flag (:data:`SIMULATOR`), :data:`COMPILE_OPTIONS`, the grid (:data:`THREADS`,
:func:`launch_config`, :func:`block_cap`), compute dtypes, devices, streams, flat views without a
copy or a sync (:func:`flat`) and :func:`launch`. Imports numba-cuda and
:mod:`toolkit.backends.arrays` only.
"""
from __future__ import annotations

import os
import threading
import warnings
import weakref

import numpy as np
from numba import cuda, types
from numba.cuda.core.errors import NumbaPerformanceWarning

from . import arrays
from .arrays import ArrayDesc

__all__ = ["SIMULATOR", "COMPILE_OPTIONS", "THREADS", "BLOCKS_PER_SM", "NUMBA_TYPES", "row_tuple",
           "compute_dtype", "single_device", "device_of", "resolve_stream", "stream_handle", "flat",
           "launch", "launch_config", "block_cap", "tree_sum"]

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
if SIMULATOR:  # a block's shared arrays made under a lock (cuda_simulator.py says why)
    from . import cuda_simulator
    cuda_simulator.install()

#: The compile options of every CUDA kernel (the simulator ignores them).
COMPILE_OPTIONS = dict(fastmath=False, cache=not SIMULATOR)

#: Threads per block of the element-wise kernels; blocks are capped at BLOCKS_PER_SM per
#: multiprocessor (a grid-stride loop covers the rest). The simulator runs each thread as a Python
#: thread, so it gets a small grid (still two blocks, so the stride is exercised): 4 threads a
#: block, where 16 took 2.6 times as long in the simulator's two largest test files (its time is
#: the hand-over between threads, which waits for a core on a loaded machine).
THREADS = 4 if SIMULATOR else 256
BLOCKS_PER_SM = 16

if SIMULATOR:
    def row_tuple(row, n):
        """The first ``n`` values of a table row as a tuple (the simulator runs Python)."""
        return tuple(row[:n])
else:
    from numba.cuda.np.unsafe.ndarray import to_fixed_tuple as row_tuple

NUMBA_TYPES = {np.dtype(np.float16): types.float16, np.dtype(np.float32): types.float32,
       np.dtype(np.float64): types.float64}
_lock = threading.Lock()
_streams: dict = {}
_max_blocks: dict = {}


def compute_dtype(dtype):
    """The arithmetic dtype for a storage dtype: float32 for float16, else the dtype itself."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype == np.float16 else dtype


# --------------------------------------------------------------------------------------------
# devices, streams, views
# --------------------------------------------------------------------------------------------
_n_devices: list = []


def single_device():
    """Whether this process sees one GPU (then every device pointer is on device 0)."""
    if SIMULATOR:
        return True
    if not _n_devices:
        _n_devices.append(len(cuda.gpus))
    return _n_devices[0] == 1


def device_of(d: ArrayDesc):
    """The ordinal of the CUDA device that holds ``d``'s memory (0 under the simulator)."""
    if d.ptr == 0 or single_device():
        return 0
    from numba.cuda.cudadrv import driver
    cuda.current_context()
    attr = driver.binding.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    return int(driver.driver.cuPointerGetAttribute(attr, driver.binding.CUdeviceptr(d.ptr)))


def stream_handle(s):
    """The integer handle of a numba, CuPy or PyTorch stream, or of an integer handle."""
    if isinstance(s, (int, np.integer)):
        return int(s)
    for attr in ("ptr", "cuda_stream", "handle"):  # CuPy, PyTorch, numba
        h = getattr(s, attr, None)
        if h is not None:
            h = getattr(h, "value", h)
            return int(h) if h is not None else 0
    raise TypeError(f"stream must be a numba Stream, a CuPy or PyTorch stream, or an integer "
                    f"handle, got {type(s).__name__}")


def resolve_stream(stream, weight: ArrayDesc):
    """The stream a step is enqueued on: ``stream`` if given, else the one the weight exports
    (CuPy: its current stream), else for a PyTorch tensor PyTorch's current stream on its device
    (PyTorch's interface exports none), else the default stream.

    Handles follow the CUDA array interface: 1 is the legacy default stream, 2 the per-thread
    default stream.
    """
    if SIMULATOR:
        return 0
    if stream is None:
        stream = weight.stream
        if stream is None and weight.library == "torch":
            # PyTorch's interface (version 2) exports no stream: its current stream it is,
            # else a kernel on the legacy default stream would race PyTorch's non-blocking
            # side streams
            import torch
            stream = torch.cuda.current_stream(weight.obj.device).cuda_stream
    if isinstance(stream, cuda.cudadrv.driver.Stream):
        return stream
    h = 0 if stream is None else stream_handle(stream)
    s = _streams.get(h)
    if s is None:
        if h in (0, 1):
            s = cuda.default_stream() if h == 0 else cuda.legacy_default_stream()
        elif h == 2:
            s = cuda.per_thread_default_stream()
        else:
            s = cuda.external_stream(h)
        _streams[h] = s
    return s


_flat_views: dict = {}
_FLAT_CACHE = 4096


def flat(d: ArrayDesc):
    """A 1-D device array over ``d``'s memory in memory order, without a copy or a sync.

    Views are cached per (owner, pointer, length, dtype) while the owner lives (a weak
    reference), so a training loop does not rebuild them every step; a view does not keep the
    owner's memory alive (the caller holds the owner during the launch).
    """
    n = d.size
    if SIMULATOR:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
        return FakeCUDAArray(arrays.host_view(d)[:n])
    key = (id(d.obj), d.lo, n, d.dtype.str)
    hit = _flat_views.get(key)
    if hit is not None and hit[0]() is d.obj:
        return hit[1]
    desc = {"shape": (n,), "typestr": d.dtype.str, "data": (d.lo, False), "version": 3,
            "strides": None, "stream": None}
    try:
        ref = weakref.ref(d.obj)
    except TypeError:  # an owner without weak references: a fresh view that holds it
        return cuda.from_cuda_array_interface(desc, owner=d.obj, sync=False)
    view = cuda.from_cuda_array_interface(desc, owner=None, sync=False)
    with _lock:
        if len(_flat_views) >= _FLAT_CACHE:
            dead = [k for k, (r, _) in list(_flat_views.items()) if r() is None]
            for k in dead or list(_flat_views):
                _flat_views.pop(k, None)
        _flat_views[key] = (ref, view)
    return view


def launch(kernel, blocks, threads, stream, *args):
    """``kernel[blocks, threads, stream](*args)``. Small tensors need only a few blocks: numba's
    low-occupancy warning (below 128 blocks) is silenced for these launches only. ``blocks``
    and ``threads``: ints, or tuples for a 2-D grid."""
    if (blocks if isinstance(blocks, int) else blocks[0] * blocks[1]) >= 128:
        kernel[blocks, threads, stream](*args)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaPerformanceWarning)
        kernel[blocks, threads, stream](*args)


def launch_config(n: int):
    """``(blocks, threads)`` of a grid-stride element-wise kernel over ``n`` elements."""
    if SIMULATOR:
        return min(-(-n // THREADS), 2), THREADS
    return min(-(-n // THREADS), block_cap()), THREADS


def block_cap():
    dev_id = 0 if single_device() else cuda.get_current_device().id
    cap = _max_blocks.get(dev_id)
    if cap is None:
        dev = cuda.get_current_device()
        cap = _max_blocks[dev_id] = dev.MULTIPROCESSOR_COUNT * BLOCKS_PER_SM
    return cap


def _tree_sum(sums, tid, threads):
    # every thread of the block calls it, after writing sums[tid]
    cuda.syncthreads()
    h = threads // 2
    while h > 0:
        if tid < h:
            sums[tid] += sums[tid + h]
        cuda.syncthreads()
        h //= 2


#: ``tree_sum(sums, tid, threads)``, a device function every thread of a block calls after
#: writing its ``sums[tid]``: ``sums[0]`` becomes the sum of ``sums[:threads]`` (a power of two)
#: added in a fixed tree (``sums[i] += sums[i + h]``, ``h = threads/2, ..., 1``), the same on
#: every GPU.
tree_sum = cuda.jit(device=True)(_tree_sum)
