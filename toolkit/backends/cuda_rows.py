"""The CUDA row kernel of :mod:`toolkit.backends.rows`: one block per row (grid-stride over rows).

Every thread sums ``p*p`` over its columns in float64, the block adds the partial sums in a
fixed tree (the same bits on every GPU, run after run), thread 0 applies ``reduce_row`` and
shares the factor through shared memory, then every thread updates its columns; float16 storage
is computed in float32, and a ``mirror`` (the float16 twin of a float32 master) is written in the
same pass. Compile policy: :mod:`toolkit.backends.cuda_device`. Imported only when a CUDA step
runs, and importing only the layers below it (``cuda_device``, ``jit``).
"""
from __future__ import annotations

import numba
import numpy as np
from numba import cuda, types

from . import cuda_device as backend
from .cuda_device import row_tuple, tree_sum
from .jit import KernelCache

__all__ = ["THREADS", "kernel_for", "run", "run_segmented"]

#: Threads per block (a power of two: the partial sums are added in a tree). The simulator runs
#: every thread in Python: a small block there.
THREADS = 8 if backend.SIMULATOR else 128


def _row_source(prep, reduce_row, apply, f, mirror, threads):
    """The step of one row by one block (a device function of both kernels): gradient row at
    ``gb`` (column stride ``g_cs``) updates history ``h[r]`` and the weight row at ``wb``
    (column stride ``w_cs``); ``partial`` and ``factor`` are the block's shared arrays."""
    def row(w, g, h, r, wb, gb, ncols, w_cs, g_cs, hp, w16, partial, factor):
        tid = cuda.threadIdx.x
        acc = numba.float64(0.0)
        j = tid
        while j < ncols:
            p = numba.float64(prep(f(g[gb + j * g_cs]), hp))
            acc += p * p
            j += threads
        partial[tid] = acc
        tree_sum(partial, tid, threads)
        if tid == 0:
            hn, a0 = reduce_row(f(h[r]), partial[0], numba.float64(ncols), hp)
            h[r] = hn
            factor[0] = a0
        cuda.syncthreads()
        a = factor[0]
        j = tid
        while j < ncols:
            i = wb + j * w_cs
            wi = apply(f(w[i]), prep(f(g[gb + j * g_cs]), hp), a, hp)
            w[i] = wi
            if mirror:
                w16[i] = wi
            j += threads
        cuda.syncthreads()  # the shared arrays are reused by the next row
    return cuda.jit(device=True)(row)


def _source(row, nb_compute, threads):
    """The kernel of one tensor (see the module docstring)."""

    def kernel(w, g, h, rows, dense, nk, ncols, w_rs, w_cs, g_rs, g_cs, hp, w16):
        partial = cuda.shared.array(threads, numba.float64)
        factor = cuda.shared.array(1, nb_compute)
        k = numba.int64(cuda.blockIdx.x)
        while k < nk:
            r = k if dense else rows[k]
            row(w, g, h, r, r * w_rs, k * g_rs, ncols, w_cs, g_cs, hp, w16, partial, factor)
            k += cuda.gridDim.x
    return kernel


def _segmented_source(row, nb_compute, threads, n_hyper):
    """The kernel over a group's flat buffers: block ``b`` takes the group's rows ``b, b +
    gridDim, ...``; row ``r`` belongs to segment ``row_seg[r]`` (whose ``(active, *hp)`` is
    ``table[s]``), starts at element ``row_base[r]`` and keeps its history in ``h[r]``. Every
    thread of a block reads the same row, so all or none of them take the step."""

    def kernel(w, g, h, table, row_seg, row_base, ncols_of, w16):
        partial = cuda.shared.array(threads, numba.float64)
        factor = cuda.shared.array(1, nb_compute)
        k = numba.int64(cuda.blockIdx.x)
        while k < row_seg.shape[0]:
            s = row_seg[k]
            if table[s, 0] != 0:
                hp = row_tuple(table[s, 1:], n_hyper)
                b = row_base[k]
                row(w, g, h, k, b, b, ncols_of[s], 1, 1, hp, w16, partial, factor)
            k += cuda.gridDim.x
    return kernel


#: The row kernels, and apart from them (a kernel's build asks for its row function) the row
#: device functions, each built once per process.
_KERNELS = KernelCache()
_ROWS = KernelCache()


def _row_of(factory, compute, mirror):
    """The row device function of ``factory`` for ``compute`` (cached per process)."""
    key = ("rows-device", factory, compute, bool(mirror))

    def build():
        prep, reduce_row, apply = (cuda.jit(device=True)(fn) for fn in factory(compute.type))
        return _row_source(prep, reduce_row, apply, compute.type, bool(mirror), THREADS)
    return _ROWS.cached(key, build)


def kernel_for(factory, storage: tuple, compute, n_hyper: int, mirror: bool, segmented=False):
    """The compiled row kernel of ``factory`` (cached per process): one tensor's, or with
    ``segmented`` a group's. ``storage``: the dtypes of ``(w, g, h, w16)``; ``compute``: the
    arithmetic dtype."""
    compute = np.dtype(compute)
    storage = tuple(np.dtype(s) for s in storage)
    key = ("rows-segmented" if segmented else "rows", factory, storage, compute, n_hyper,
           bool(mirror))

    def build():
        row = _row_of(factory, compute, mirror)
        nb = backend.NUMBA_TYPES[compute]
        arrs = [backend.NUMBA_TYPES[s][::1] for s in storage]
        i64 = types.int64
        if segmented:
            sig = types.void(arrs[0], arrs[1], arrs[2], nb[:, ::1], i64[::1], i64[::1],
                             i64[::1], arrs[3])
            src = _segmented_source(row, nb, THREADS, n_hyper)
        else:
            sig = types.void(arrs[0], arrs[1], arrs[2], i64[::1], types.boolean, i64, i64, i64,
                             i64, i64, i64, types.UniTuple(nb, n_hyper), arrs[3])
            src = _source(row, nb, THREADS)
        return cuda.jit(sig, **backend.COMPILE_OPTIONS)(src)
    return _KERNELS.cached(key, build)


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
    blocks = min(nk, 2) if backend.SIMULATOR else min(nk, backend.block_cap())
    backend.launch(kernel, blocks, THREADS, stream, backend.flat(w), backend.flat(g),
                   backend.flat(h), dev_rows, dense, nk, ncols, w_rs, w_cs, g_rs, g_cs, hp,
                   backend.flat(m))


def run_segmented(factory, w, g, h, table, upload, layout, stream=0, mirror=None):
    """One launch of a row rule over a group's flat device buffers (described arrays, 1-D):
    ``layout`` a :class:`toolkit.backends.rows.GroupRows`; ``table`` the host ``(active, *hp)``
    rows in the compute dtype, sent through ``upload`` (``cuda.TableUpload``); ``mirror`` the
    float16 weight written from the float32 master ``w`` in the same pass."""
    n_rows = layout.n_rows
    if n_rows == 0:
        return
    compute = backend.compute_dtype(w.dtype)
    m = mirror if mirror is not None else w
    kernel = kernel_for(factory, (w.dtype, g.dtype, h.dtype, m.dtype), compute,
                        table.shape[1] - 1, mirror is not None, segmented=True)
    row_seg, row_base, ncols_of = layout.device_tables()
    blocks = min(n_rows, 2) if backend.SIMULATOR else min(n_rows, backend.block_cap())
    k, dev_table = upload.upload(table, stream)
    backend.launch(kernel, blocks, THREADS, stream, backend.flat(w), backend.flat(g),
                   backend.flat(h), dev_table, row_seg, row_base, ncols_of, backend.flat(m))
    upload.launched(k, stream)
