"""The non-finite guard's pre-pass: does a gradient hold a NaN or an infinity?

``skip_nonfinite=True`` (docs/trainer.md, "Skipping non-finite gradients") reads every gradient
once before the step: one flag per tensor, or per member of a Trainer group (a segmented pass
over its chunk table). The test is on the bits (all-ones exponent), an integer test that
vectorises and raises no float exceptions. The CPU kernels follow ``jit``'s policy and compile
on first use; on CUDA one kernel writes a flag per block or chunk (``syncthreads_or``) and the
flags come back in one copy, the step's one synchronisation (as PyTorch's GradScaler's).
"""
from __future__ import annotations

import threading
import types as pytypes

import numba
import numpy as np
from numba import prange, types

from . import jit

__all__ = ["all_finite", "finite_segments", "BITS"]

#: float dtype -> (its bits' unsigned dtype, the exponent mask: all ones = NaN or infinity)
BITS = {np.dtype(np.float16): (np.dtype(np.uint16), 0x7C00),
        np.dtype(np.float32): (np.dtype(np.uint32), 0x7F800000),
        np.dtype(np.float64): (np.dtype(np.uint64), 0x7FF0000000000000)}

_NB = {np.dtype(np.uint16): types.uint16, np.dtype(np.uint32): types.uint32,
       np.dtype(np.uint64): types.uint64}

_lock = threading.Lock()
_kernels: dict = {}


def _compiled(key, fn, sig, parallel):
    """``fn`` compiled for ``sig`` under the CPU compile policy, once per process; the serial
    and the parallel variant get their own names (numba's cache index ignores ``parallel``)."""
    kernel = _kernels.get(key)
    if kernel is None:
        with _lock:
            kernel = _kernels.get(key)
            if kernel is None:
                fn = pytypes.FunctionType(fn.__code__, fn.__globals__, fn.__name__)
                fn.__qualname__ = f"{fn.__name__}.{'parallel' if parallel else 'serial'}"
                kernel = _kernels[key] = numba.njit(
                    [sig], parallel=bool(parallel), **jit.COMPILE_OPTIONS)(fn)
    return kernel


def _all_finite_bits(bits, mask):
    """Whether no element of ``bits`` (float bits) is a NaN or an infinity: the least
    ``(x & mask) ^ mask`` is 0 exactly when some exponent is all ones (a min reduction: it
    vectorises, where counting the hits does not)."""
    lo = mask
    for i in prange(bits.shape[0]):
        lo = min(lo, (bits[i] & mask) ^ mask)
    return lo != 0


def _segment_flags(bits, mask, chunks, flags):
    """``flags[s] = 1`` for every segment ``s`` with a NaN or infinity in one of its chunks
    (rows ``(start, end, segment)`` of ``chunks``); other flags are left as they are."""
    n_chunks = chunks.shape[0]
    bad = np.zeros(n_chunks, np.uint8)
    for c in prange(n_chunks):
        x = bits[chunks[c, 0]:chunks[c, 1]]
        lo = mask
        for i in range(x.shape[0]):
            lo = min(lo, (x[i] & mask) ^ mask)
        if lo == 0:
            bad[c] = 1
    for c in range(n_chunks):
        if bad[c] != 0:
            flags[chunks[c, 2]] = 1


def _bits(a):
    """``(flat uint bits of a contiguous float array, mask)``, or None when ``a`` is not a
    contiguous float16/32/64 numpy array."""
    spec = BITS.get(a.dtype)
    if spec is None:
        return None
    flags = a.flags
    if flags.c_contiguous:
        flat = a.reshape(-1)
    elif flags.f_contiguous:
        flat = a.reshape(-1, order="F")
    else:
        return None
    return flat.view(spec[0]), spec[0].type(spec[1])


def _host_all_finite(a):
    got = _bits(a)
    if got is None:  # another layout or dtype: numpy's test, one pass and a temporary
        return bool(np.isfinite(a).all()) if a.dtype.kind in "fc" else True
    bits, mask = got
    if bits.shape[0] == 0:
        return True
    parallel = bits.shape[0] >= jit.PARALLEL_THRESHOLD
    nb = _NB[bits.dtype]
    kernel = _compiled(("all", bits.dtype, parallel), _all_finite_bits,
                       types.boolean(nb[::1], nb), parallel)
    return bool(kernel(bits, mask))


def all_finite(grad, stream=None):
    """Whether every element of ``grad`` (a numpy array, a device array, or a
    ``toolkit.RowSparse``: its values) is finite. On a device, reads one small flag array
    back (a synchronisation of ``stream``)."""
    if type(grad) is np.ndarray:
        return _host_all_finite(grad)
    from ..sparse import RowSparse
    from . import arrays
    if type(grad) is RowSparse:
        return all_finite(grad.values, stream)
    if arrays.is_device_array(grad):
        from . import cuda
        d = arrays.describe(grad, "grad")
        if not d.contiguous:
            raise ValueError("skip_nonfinite needs a contiguous device gradient")
        return _cuda_all_finite(cuda.flat(d), cuda.resolve_stream(stream, d))
    arrays.describe(grad, "grad")   # anything but an array is refused, naming the gradient
    return _host_all_finite(np.asarray(arrays.to_host(grad)))


def finite_segments(flat_grad, offsets, chunks, stream=None):
    """One bool per segment of a flat gradient buffer (segment ``s``: elements
    ``offsets[s]:offsets[s+1]``): True when all its elements are finite. ``chunks``: the
    buffer's chunk table (``order.chunk_table`` rows on the host; for a numba device buffer the
    device table of ``cuda.chunk_table(offsets)``)."""
    n_seg = len(offsets) - 1
    if type(flat_grad) is np.ndarray:
        got = _bits(flat_grad)
        if got is None:
            return np.array([bool(np.isfinite(flat_grad[int(offsets[s]):int(offsets[s + 1])])
                                  .all()) for s in range(n_seg)], bool)
        bits, mask = got
        flags = np.zeros(n_seg, np.uint8)
        if chunks.shape[0]:
            parallel = bits.shape[0] >= jit.PARALLEL_THRESHOLD and chunks.shape[0] > 1
            nb = _NB[bits.dtype]
            kernel = _compiled(("segments", bits.dtype, parallel), _segment_flags,
                               types.void(nb[::1], nb, types.int64[:, ::1], types.uint8[::1]),
                               parallel)
            kernel(bits, mask, chunks, flags)
        return flags == 0
    return _cuda_finite_segments(flat_grad, offsets, chunks, stream)


# --------------------------------------------------------------------------------------------
# CUDA (imported on first use: the CPU path never needs a driver)
# --------------------------------------------------------------------------------------------
_cuda_kernels: dict = {}
cuda = None  # numba.cuda, bound on first use (the kernels below read it as a global)


def _flat_flags(bits, mask, out):
    """``out[b]``: whether block ``b``'s grid-stride share of ``bits`` holds a NaN or an
    infinity."""
    bad = False
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < bits.shape[0]:
        if (bits[i] & mask) == mask:
            bad = True
        i += step
    any_bad = cuda.syncthreads_or(bad)
    if cuda.threadIdx.x == 0:
        out[cuda.blockIdx.x] = 1 if any_bad else 0


def _chunk_flags(bits, mask, chunks, out):
    """``out[c]``: whether chunk ``c`` (row ``(start, end, segment)`` of ``chunks``) holds a
    NaN or an infinity; the blocks take the chunks in turn."""
    c = cuda.blockIdx.x
    while c < chunks.shape[0]:
        bad = False
        i = chunks[c, 0] + cuda.threadIdx.x
        while i < chunks[c, 1]:
            if (bits[i] & mask) == mask:
                bad = True
            i += cuda.blockDim.x
        any_bad = cuda.syncthreads_or(bad)
        if cuda.threadIdx.x == 0:
            out[c] = 1 if any_bad else 0
        c += cuda.gridDim.x


def _cuda_kernel(name):
    global cuda
    kernel = _cuda_kernels.get(name)
    if kernel is None:
        from numba import cuda as numba_cuda
        cuda = numba_cuda
        kernel = _cuda_kernels[name] = numba_cuda.jit(
            _flat_flags if name == "flat" else _chunk_flags)
    return kernel


def _device_bits(flat):
    spec = BITS.get(np.dtype(flat.dtype))
    if spec is None:
        raise TypeError(f"skip_nonfinite reads float16/32/64 gradients, got {flat.dtype}")
    return flat.view(spec[0]), spec[0].type(spec[1])


def _cuda_all_finite(flat, stream):
    from numba import cuda as nbcuda
    from . import cuda
    n = flat.shape[0]
    if n == 0:
        return True
    bits, mask = _device_bits(flat)
    blocks, threads = cuda.launch_config(n)
    out = nbcuda.device_array(blocks, np.uint8, stream=stream)
    cuda.launch(_cuda_kernel("flat"), blocks, threads, stream, bits, mask, out)
    return not out.copy_to_host(stream=stream).any()   # the one device-to-host read


_host_chunks: dict = {}


def _cuda_finite_segments(flat, offsets, chunks, stream):
    from numba import cuda as nbcuda
    from . import cuda
    n_seg = len(offsets) - 1
    n_chunks = chunks.shape[0]
    if n_chunks == 0:
        return np.ones(n_seg, bool)
    key = np.asarray(offsets, np.int64).tobytes()
    seg = _host_chunks.get(key)
    if seg is None:
        if len(_host_chunks) > 256:
            _host_chunks.clear()
        seg = _host_chunks[key] = cuda.chunk_table(offsets)[:, 2].copy()
    bits, mask = _device_bits(flat)
    stream = cuda.resolve_stream(0 if stream is None else stream, None)
    blocks = min(n_chunks, cuda.launch_config(n_chunks * cuda.THREADS)[0])
    out = nbcuda.device_array(n_chunks, np.uint8, stream=stream)
    cuda.launch(_cuda_kernel("chunks"), blocks, cuda.THREADS, stream, bits, mask, chunks, out)
    bad = out.copy_to_host(stream=stream)                   # the one device-to-host read
    return np.bincount(seg, weights=bad, minlength=n_seg) == 0
