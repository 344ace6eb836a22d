"""CUDA reductions: LARS's per-tensor norms (``run_norms``, ``lars_norms``) and the first pass
of a two-pass step such as LAMB's (``direction_kernel``, ``run_direction``,
``direction_norms``), each summing in float64 in a fixed order, the same on every GPU.

This module imports numba-cuda; :mod:`toolkit.backends.cuda` re-exports its entry points.
"""
from __future__ import annotations

import warnings

import numba
import numpy as np
from numba import cuda, types
from numba.cuda.core.errors import NumbaPerformanceWarning

from .arrays import ArrayDesc
from .cuda_device import (COMPILE_OPTIONS, NUMBA_TYPES, SIMULATOR, block_cap, compute_dtype,
                          flat, launch, row_tuple)
from .cuda_elementwise import device_rule
from .jit import KernelCache
from .order import DIRECTION_CHUNK, DIRECTION_LANES, single_chunks, sum_partials

#: The fixed grid of the sum-of-squares reduction: fixed (not derived from the device) so the
#: float64 partial sums are added in the same order on every GPU, run after run. Under the
#: simulator, which runs every thread of a block as a Python thread and every syncthreads() as
#: a hand-over between them, 2 blocks of 4 threads: the same code (a tree of any power of two),
#: a sixth of the simulator's time of 16 threads.
REDUCE_BLOCKS, REDUCE_THREADS = (2, 4) if SIMULATOR else (256, 256)

_KERNELS = KernelCache()  # the reduction kernels of this process


# --------------------------------------------------------------------------------------------
# LARS norms (LBSGD): |w|^2 and |g|^2 per tensor, float64, fixed order, on the device
# --------------------------------------------------------------------------------------------
def _norms_sources(f, with_cum):
    """Block ``(b, s)`` sums its grid-stride share of segment ``s`` (``b`` of REDUCE_BLOCKS)
    and reduces it in a fixed tree; ``final`` adds a segment's block sums in order. The grid is
    fixed, not derived from the device, so the float64 sums are the same on every GPU, and a
    single tensor (one segment) gets the same numbers as inside a Trainer's group."""
    threads = REDUCE_THREADS

    def partial(x, y, cum, table, offsets, out):
        s = cuda.blockIdx.y
        sx = cuda.shared.array(threads, numba.float64)
        sy = cuda.shared.array(threads, numba.float64)
        tid = cuda.threadIdx.x
        ax = numba.float64(0.0)
        ay = numba.float64(0.0)
        if table[s, 0] != 0:
            bs = f(table[s, 1])
            i = offsets[s] + cuda.blockIdx.x * cuda.blockDim.x + tid
            stride = cuda.gridDim.x * cuda.blockDim.x
            while i < offsets[s + 1]:
                vx = numba.float64(x[i])
                if with_cum and bs != 0:  # batch_scale 0: this segment's gradient norms
                    vy = numba.float64((f(cum[i]) + f(y[i])) / bs)
                else:
                    vy = numba.float64(y[i])
                ax += vx * vx
                ay += vy * vy
                i += stride
        sx[tid] = ax
        sy[tid] = ay
        cuda.syncthreads()
        h = threads // 2
        while h > 0:
            if tid < h:
                sx[tid] += sx[tid + h]
                sy[tid] += sy[tid + h]
            cuda.syncthreads()
            h //= 2
        if tid == 0:
            out[s, 0, cuda.blockIdx.x] = sx[0]
            out[s, 1, cuda.blockIdx.x] = sy[0]

    def final(out, res):
        s = cuda.grid(1)
        if s < out.shape[0]:
            ax = numba.float64(0.0)
            ay = numba.float64(0.0)
            for b in range(out.shape[2]):
                ax += out[s, 0, b]
                ay += out[s, 1, b]
            res[s, 0] = ax
            res[s, 1] = ay
    return partial, final


def _norms_kernels(dx, dy, dc, with_cum):
    key = ("norms", dx, dy, dc, bool(with_cum))
    k = _KERNELS.get(key)
    if k is not None:
        return k

    def build():
        partial, final = _norms_sources(compute_dtype(dx).type, bool(with_cum))
        out3 = types.float64[:, :, ::1]
        sig = types.void(NUMBA_TYPES[dx][::1], NUMBA_TYPES[dy][::1], NUMBA_TYPES[dc][::1],
                         types.float64[:, ::1], types.int64[::1], out3)
        return (cuda.jit(sig, **COMPILE_OPTIONS)(partial),
                cuda.jit(types.void(out3, types.float64[:, ::1]), **COMPILE_OPTIONS)(final))
    return _KERNELS.cached(key, build)


def run_norms(w: ArrayDesc, g: ArrayDesc, cum, table, offsets, stream=0):
    """Per-segment ``(sum w^2, sum gm^2)`` of flat device buffers, as a host ``(n_seg, 2)``
    array (``gm = (cum + g)/table[s, 1]`` when ``cum`` is given and ``table[s, 1]`` is not 0,
    else ``g``). Copying the
    result back is the one synchronisation (MXNet's LARS reads its norms on the host too)."""
    n_seg = table.shape[0]
    c = cum if cum is not None else w
    partial, final = _norms_kernels(w.dtype, g.dtype, c.dtype, cum is not None)
    dev_table = cuda.to_device(np.ascontiguousarray(table, np.float64), stream=stream)
    dev_offsets = offsets if not isinstance(offsets, np.ndarray) else \
        cuda.to_device(offsets.astype(np.int64), stream=stream)
    out = cuda.device_array((n_seg, 2, REDUCE_BLOCKS), np.float64, stream=stream)
    res = cuda.device_array((n_seg, 2), np.float64, stream=stream)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaPerformanceWarning)
        partial[(REDUCE_BLOCKS, n_seg), REDUCE_THREADS, stream](flat(w), flat(g), flat(c),
                                                                dev_table, dev_offsets, out)
        final[max(1, -(-n_seg // 32)), 32, stream](out, res)
    host = res.copy_to_host(stream=stream)
    if not SIMULATOR:
        stream.synchronize() if hasattr(stream, "synchronize") else cuda.synchronize()
    return host


def lars_norms(w: ArrayDesc, g: ArrayDesc, cum, batch_scale, stream=0):
    """``(sum w^2, sum gm^2)`` of one tensor (one segment of :func:`run_norms`)."""
    res = run_norms(w, g, cum, np.array([[1.0, float(batch_scale)]]),
                    np.array([0, w.size], np.int64), stream=stream)
    return float(res[0, 0]), float(res[0, 1])


# --------------------------------------------------------------------------------------------
# two-pass steps (LAMB): pass 1 reduces |w|^2 and |u|^2 per tensor, writing nothing
# --------------------------------------------------------------------------------------------
#: Threads per block of the direction pass: one per lane on a GPU; under the simulator (which
#: runs every thread as a Python thread) 16, each keeping 16 lanes' sums: the same additions
#: in the same order, so the same sums, in a fraction of the simulator's time.
DIRECTION_THREADS = 16 if SIMULATOR else None


def _direction_source(toward, n_hyper, f, lanes, threads):
    """Block ``b`` takes chunks ``b, b + gridDim, ...`` (rows ``(start, end, segment)`` of the
    CPU backend's chunk table with ``DIRECTION_CHUNK``); lane ``l`` of ``lanes`` forms ``u`` of
    elements ``start + l, start + l + lanes, ...`` and adds ``w^2`` and ``u^2`` into its float64
    sums in that order; the block then adds the sums pairwise in shared memory
    (``sum[l] += sum[l + h]``, ``h = lanes/2, ..., 1``): the order of
    ``toolkit.backends.cpu.direction_kernel``, so both give the same sums. Thread ``t`` of the
    block's ``threads`` keeps lanes ``t, t + threads, ...`` (one lane per thread when ``threads
    == lanes``). Only ``partial`` is written."""
    per = lanes // threads

    def kernel(w, g, s0, s1, table, chunks, partial):
        sw = cuda.shared.array(lanes, numba.float64)
        su = cuda.shared.array(lanes, numba.float64)
        tid = cuda.threadIdx.x
        c = cuda.blockIdx.x
        while c < chunks.shape[0]:
            s = chunks[c, 2]
            active = table[s, 0] != 0
            for m in range(per):
                lane = tid + m * threads
                aw = numba.float64(0.0)
                au = numba.float64(0.0)
                if active:
                    hp = row_tuple(table[s, 1:], n_hyper)
                    i = chunks[c, 0] + lane
                    while i < chunks[c, 1]:
                        wi = f(w[i])
                        u, _, _ = toward(wi, f(g[i]), f(s0[i]), f(s1[i]), hp)
                        vw = numba.float64(wi)
                        vu = numba.float64(u)
                        aw += vw * vw
                        au += vu * vu
                        i += lanes
                sw[lane] = aw
                su[lane] = au
            cuda.syncthreads()
            h = lanes // 2
            while h > 0:
                for m in range(per):
                    j = tid + m * threads
                    if j < h:
                        sw[j] += sw[j + h]
                        su[j] += su[j + h]
                cuda.syncthreads()
                h //= 2
            if tid == 0 and active:
                partial[c, 0] = sw[0]
                partial[c, 1] = su[0]
            cuda.syncthreads()  # the sums are reused by the block's next chunk
            c += cuda.gridDim.x
    return kernel


def direction_kernel(direction, storage: tuple, compute, n_hyper: int):
    """The compiled first pass of a two-pass step (cached per process); ``storage``: the dtypes
    of ``(w, g, s0, s1)``."""
    compute = np.dtype(compute)
    storage = tuple(np.dtype(s) for s in storage)
    key = ("direction", direction, storage, compute, n_hyper)
    kernel = _KERNELS.get(key)
    if kernel is not None:
        return kernel

    def build():
        src = _direction_source(device_rule(direction, compute), n_hyper, compute.type,
                                DIRECTION_LANES, DIRECTION_THREADS or DIRECTION_LANES)
        sig = types.void(*[NUMBA_TYPES[s][::1] for s in storage], NUMBA_TYPES[compute][:, ::1],
                         types.int64[:, ::1], types.float64[:, ::1])
        return cuda.jit(sig, **COMPILE_OPTIONS)(src)
    return _KERNELS.cached(key, build)


def run_direction(direction, w: ArrayDesc, g: ArrayDesc, states, table, chunks,
                  host_chunks, stream=0):
    """Pass 1 of a two-pass step over flat device buffers (``states``: two arrays, read only):
    the host ``(n_seg, 2)`` array of every active segment's ``(sum w^2, sum u^2)``. ``table``:
    the host ``(active, *hp)`` rows (compute dtype); ``chunks`` and ``host_chunks``: the device
    and host copies of the chunk table (``DIRECTION_CHUNK``). The per-chunk sums are added on the
    host in chunk order (as on the CPU); copying them back is the one synchronisation."""
    if len(states) != 2:
        raise ValueError(f"a direction pass takes two state arrays, got {len(states)}")
    out = np.zeros((table.shape[0], 2))
    n_chunks = host_chunks.shape[0]
    if w.size == 0 or n_chunks == 0:
        return out
    compute = compute_dtype(w.dtype)
    kernel = direction_kernel(direction, (w.dtype, g.dtype) + tuple(
        s.dtype for s in states), compute, table.shape[1] - 1)
    dev_table = cuda.to_device(np.ascontiguousarray(table, compute), stream=stream)
    partial = cuda.to_device(np.zeros((n_chunks, 2)), stream=stream)
    blocks = min(n_chunks, 2) if SIMULATOR else min(n_chunks, block_cap())
    launch(kernel, blocks, DIRECTION_THREADS or DIRECTION_LANES, stream, flat(w), flat(g),
           flat(states[0]),
           flat(states[1]), dev_table, chunks, partial)
    host = partial.copy_to_host(stream=stream)
    if not SIMULATOR:
        stream.synchronize() if hasattr(stream, "synchronize") else cuda.synchronize()
    sum_partials(np.ascontiguousarray(host_chunks, np.int64), host, out)
    return out


def direction_norms(direction, w: ArrayDesc, g: ArrayDesc, states, hyper, stream=0):
    """:func:`run_direction` over one tensor: ``(sum w^2, sum u^2)``."""
    compute = compute_dtype(w.dtype)
    table = np.array([(1.0,) + tuple(hyper)], compute)
    host_chunks = single_chunks(w.size, DIRECTION_CHUNK)
    res = run_direction(direction, w, g, states, table,
                        cuda.to_device(host_chunks, stream=stream), host_chunks, stream=stream)
    return float(res[0, 0]), float(res[0, 1])
