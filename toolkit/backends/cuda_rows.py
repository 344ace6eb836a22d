"""The CUDA row kernel of :mod:`toolkit.backends.rows`: one block per row.

Each block takes rows ``blockIdx.x, blockIdx.x + gridDim.x, ...``. For a row, every thread sums
``p*p`` over its columns ``tid, tid + THREADS, ...`` in float64, the block adds the partial sums
in a fixed tree (so the same inputs give the same bits on every GPU, run after run), thread 0
applies ``reduce_row`` to the row's state and shares the row's factor through shared memory,
then every thread updates its columns. Loads are converted to the compute type (float32 for
float16 storage); with a ``mirror`` the float16 twin of a float32 master weight is written in the
same pass. Plain ``@cuda.jit`` (shared arrays and ``syncthreads`` only), with the CUDA backend's
compile policy and kernel cache (``toolkit.backends.cuda``).

This module imports numba-cuda: :mod:`toolkit.backends.rows` imports it only when a CUDA step
runs.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import cuda, types

from . import cuda as backend

__all__ = ["THREADS", "kernel_for", "run"]

#: Threads per block (a power of two: the partial sums are added in a tree). The simulator runs
#: every thread in Python: a small block there.
THREADS = 8 if backend.SIMULATOR else 128


def _source(prep, reduce_row, apply, f, nb_compute, mirror, threads):
    """The kernel of one row rule (see the module docstring)."""

    def kernel(w, g, h, rows, dense, nk, ncols, w_rs, w_cs, g_rs, g_cs, hp, w16):
        partial = cuda.shared.array(threads, numba.float64)
        factor = cuda.shared.array(1, nb_compute)
        tid = cuda.threadIdx.x
        n = numba.float64(ncols)
        k = numba.int64(cuda.blockIdx.x)
        while k < nk:
            r = k if dense else rows[k]
            gb = k * g_rs
            acc = numba.float64(0.0)
            j = tid
            while j < ncols:
                p = numba.float64(prep(f(g[gb + j * g_cs]), hp))
                acc += p * p
                j += threads
            partial[tid] = acc
            cuda.syncthreads()
            half = threads // 2
            while half > 0:
                if tid < half:
                    partial[tid] += partial[tid + half]
                cuda.syncthreads()
                half //= 2
            if tid == 0:
                hn, a0 = reduce_row(f(h[r]), partial[0], n, hp)
                h[r] = hn
                factor[0] = a0
            cuda.syncthreads()
            a = factor[0]
            wb = r * w_rs
            j = tid
            while j < ncols:
                i = wb + j * w_cs
                wi = apply(f(w[i]), prep(f(g[gb + j * g_cs]), hp), a, hp)
                w[i] = wi
                if mirror:
                    w16[i] = wi
                j += threads
            cuda.syncthreads()  # the shared arrays are reused by the next row
            k += cuda.gridDim.x
    return kernel


def kernel_for(factory, storage: tuple, compute, n_hyper: int, mirror: bool):
    """The compiled row kernel of ``factory`` (cached per process). ``storage``: the dtypes of
    ``(w, g, h, w16)``; ``compute``: the arithmetic dtype."""
    compute = np.dtype(compute)
    storage = tuple(np.dtype(s) for s in storage)
    key = ("rows", factory, storage, compute, n_hyper, bool(mirror))
    kernel = backend._kernels.get(key)
    if kernel is not None:
        return kernel
    with backend._lock:
        kernel = backend._kernels.get(key)
        if kernel is None:
            prep, reduce_row, apply = (cuda.jit(device=True)(fn) for fn in factory(compute.type))
            arrs = [backend._NB[s][::1] for s in storage]
            i64 = types.int64
            sig = types.void(arrs[0], arrs[1], arrs[2], i64[::1], types.boolean, i64, i64, i64,
                             i64, i64, i64, types.UniTuple(backend._NB[compute], n_hyper),
                             arrs[3])
            src = _source(prep, reduce_row, apply, compute.type, backend._NB[compute],
                          bool(mirror), THREADS)
            kernel = backend._kernels[key] = cuda.jit(sig, **backend.COMPILE_OPTIONS)(src)
    return kernel


_ALL_ROWS: list = []


def _strides(shape, c_order):
    return (shape[1], 1) if c_order else (1, shape[0])


def run(factory, w, g, h, rows, hyper, stream=0, mirror=None):
    """One row step on described CUDA arrays (``toolkit.backends.arrays.ArrayDesc``), in place,
    one launch on ``stream``: ``w`` ``(n_rows, ncols)`` (C or Fortran order), ``g``
    ``(len(rows), ncols)`` contiguous, ``h`` ``(n_rows, 1)``. ``rows``: None (every row), or the
    row indices as a device int64 array (a host one is copied to the device). ``mirror``: the
    float16 weight written from the float32 master ``w`` in the same pass."""
    n_rows, ncols = w.shape
    dense = rows is None
    if dense:
        if not _ALL_ROWS:
            _ALL_ROWS.append(cuda.to_device(np.zeros(1, np.int64)))
        dev_rows, nk = _ALL_ROWS[0], n_rows
    else:
        nk = int(rows.shape[0])
        dev_rows = (cuda.to_device(np.ascontiguousarray(rows, np.int64), stream=stream)
                    if isinstance(rows, np.ndarray) else rows)
    if nk == 0:
        return
    compute = backend.compute_dtype(w.dtype)
    m = mirror if mirror is not None else w
    kernel = kernel_for(factory, (w.dtype, g.dtype, h.dtype, m.dtype), compute, len(hyper),
                        mirror is not None)
    w_rs, w_cs = _strides(w.shape, w.order == "C")
    g_rs, g_cs = _strides(g.shape, g.order == "C")
    hp = tuple(compute.type(x) for x in hyper)
    blocks = min(nk, 2) if backend.SIMULATOR else min(nk, backend._block_cap())
    backend.launch(kernel, blocks, THREADS, stream, backend.flat(w), backend.flat(g),
                   backend.flat(h), dev_rows, dense, nk, ncols, w_rs, w_cs, g_rs, g_cs, hp,
                   backend.flat(m))
