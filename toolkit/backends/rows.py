"""Row kernels: updates with a reduction along each row of a matrix weight (GroupAdaGrad keeps one
history value per row, fed by the mean of the row's squared gradient), on the CPU and on CUDA.

An optimizer supplies a *row rule factory*, ``factory(ftype) -> (prep, reduce_row, apply)``,
three plain Python functions of scalars using ``math`` only (compiled with ``numba.njit`` inlined
here, and with ``cuda.jit(device=True)`` for CUDA, as the element-wise rules are)::

    prep(g, hp) -> p                      the preprocessed gradient element (rescaled, clipped)
    reduce_row(h, s, n, hp) -> (h, a)     the row's new state value and its factor, from its
                                          state h, the float64 sum s of p*p over the row and the
                                          row length n (a float64)
    apply(w, p, a, hp) -> w               the new weight element

``hp`` is a tuple of per-step hyperparameters in the arithmetic type (rounded from float64 once
on the host). The sum ``s`` is accumulated in float64 in a fixed order: on the CPU four running
sums (column ``j`` into sum ``j % 4``) added as ``(s0 + s1) + (s2 + s3)``; on CUDA each thread of
the row's block sums the columns ``tid, tid + T, ...`` and the block adds the partial sums in a
fixed tree. Each backend gives the same bits run after run (the two backends may differ in the
last bit of ``s``, far below the arithmetic's rounding).

Rows: gradient row ``k`` applies to weight row ``rows[k]`` and state row ``rows[k]`` (``rows``:
int64, sorted and unique; the lazy update of a row-sparse gradient), or, with ``rows`` None,
gradient row ``k`` to weight row ``k`` for every row (the dense step). Rows not listed are not
read or written. The weight may be C- or Fortran-ordered (its elements are addressed through
its row and column strides); the state is ``(rows, 1)``.

CPU: one ``prange`` over the rows above :data:`toolkit.backends.cpu.PARALLEL_THRESHOLD` elements,
serial below, with the CPU backend's compile policy (``cpu.COMPILE_OPTIONS``, explicit signatures,
kernels cached per (rule, dtype, serial/parallel)). CUDA (:mod:`toolkit.backends.cuda_rows`,
imported only when a CUDA step runs): one block per row, plain ``@cuda.jit``; float16 storage is
computed in float32, and a float16 twin of a float32 master weight (``mirror``) is written in
the same pass.
"""
from __future__ import annotations

import warnings

import numpy as np
from numba import prange, types
from numba.core.errors import NumbaIRAssumptionWarning
from numba.np.unsafe.ndarray import to_fixed_tuple

from . import cpu

__all__ = ["GroupRows", "run_cpu", "run_cpu_segmented", "run_cuda", "run_cuda_segmented",
           "cpu_kernel"]


# --------------------------------------------------------------------------------------------
# CPU
# --------------------------------------------------------------------------------------------
def _cpu_row(prep, reduce_row, apply, widen, narrow, mirror):
    """The step of one row (inlined into both loops): gradient row at ``gb`` (column stride
    ``g_cs``) updates history ``h[r]`` and the weight row at ``wb`` (column stride ``w_cs``).
    Contiguous rows (both strides 1) run over slices from 0, which vectorise; other strides
    index element by element. ``widen`` loads a gradient element (float16 bits widened exactly
    for a float32 master, else as it is); with ``mirror`` the float16 copy ``o`` (uint16 bits,
    the weight's shape and order) of each new weight element is written in the same pass."""
    def row(w, g, h, r, wb, gb, ncols, w_cs, g_cs, hp, o, scratch):
        n = np.float64(ncols)
        if w_cs == 1 and g_cs == 1:
            gs = g[gb:gb + ncols]
            ws = w[wb:wb + ncols]
            if mirror:  # widened and preprocessed once, in a loop that vectorises
                ps = scratch[:ncols]
                for j in range(ncols):
                    ps[j] = prep(widen(gs[j]), hp)
                hn, a = reduce_row(h[r], sum_ready(ps, hp), n, hp)
                h[r] = hn
                os = o[wb:wb + ncols]
                for j in range(ncols):
                    x = apply(ws[j], ps[j], a, hp)
                    ws[j] = x
                    os[j] = narrow(x)
            else:
                hn, a = reduce_row(h[r], sum_raw(gs, hp), n, hp)
                h[r] = hn
                for j in range(ncols):
                    ws[j] = apply(ws[j], prep(gs[j], hp), a, hp)
        else:  # strided: the row's preprocessed gradient gathered once
            ps = scratch[:ncols]
            for j in range(ncols):
                ps[j] = prep(widen(g[gb + j * g_cs]), hp)
            hn, a = reduce_row(h[r], sum_ready(ps, hp), n, hp)
            h[r] = hn
            for j in range(ncols):
                i = wb + j * w_cs
                x = apply(w[i], ps[j], a, hp)
                w[i] = x
                if mirror:
                    o[i] = narrow(x)
    sum_raw, sum_ready = _row_sum(prep), _row_sum(cpu._inlined(cpu._by_value(_ready)))
    return cpu._inlined(row)


def _ready(p, hp):
    return p


def _row_sum(prep):
    """``sum(src, hp)``: the float64 sum of ``prep(src[j], hp)**2`` over a row, column ``j``
    into running sum ``j % 4`` (the last 0 to 3 columns into sum 0), added as ``(s0 + s1) +
    (s2 + s3)``: the order of every row kernel."""
    def row_sum(src, hp):
        ncols = src.shape[0]
        quads = ncols // 4
        s0 = s1 = s2 = s3 = 0.0
        for q in range(quads):
            j = 4 * q
            p0, p1 = np.float64(prep(src[j], hp)), np.float64(prep(src[j + 1], hp))
            p2, p3 = np.float64(prep(src[j + 2], hp)), np.float64(prep(src[j + 3], hp))
            s0 += p0 * p0
            s1 += p1 * p1
            s2 += p2 * p2
            s3 += p3 * p3
        for j in range(4 * quads, ncols):
            p = np.float64(prep(src[j], hp))
            s0 += p * p
        return (s0 + s1) + (s2 + s3)
    return cpu._inlined(row_sum)


#: Rows per iteration of the parallel loop (each iteration allocates one scratch row).
ROW_BLOCK = 16


def _cpu_loop(row, n_hyper):
    """The row loop of one tensor (``prange`` is ``range`` when serial)."""
    def loop(w, g, h, rows, dense, nk, ncols, w_rs, w_cs, g_rs, g_cs, hpa, o):
        hp = to_fixed_tuple(hpa, n_hyper)
        for bb in prange((nk + ROW_BLOCK - 1) // ROW_BLOCK):
            scratch = np.empty(ncols, w.dtype)  # one per block of rows
            b = np.int64(bb)  # a parallel loop's index is unsigned: keep row indices int64
            for k in range(b * ROW_BLOCK, min(nk, (b + 1) * ROW_BLOCK)):
                r = k if dense else rows[k]
                row(w, g, h, r, r * w_rs, k * g_rs, ncols, w_cs, g_cs, hp, o, scratch)
    return loop


def _cpu_segmented_loop(row, n_hyper):
    """The row loop over flat buffers holding many C-ordered matrices (a Trainer's group): row
    ``r`` of the group belongs to segment ``row_seg[r]``, starts at element ``row_base[r]`` of
    the weight and of the gradient, and keeps its history in ``h[r]``; segment ``s`` has
    ``ncols_of[s]`` columns and reads ``(active, *hp)`` from ``table[s]``. Each row runs the
    same inlined step as a single tensor's, so the group's step equals the per-tensor steps bit
    for bit."""
    def loop(w, g, h, table, row_seg, row_base, ncols_of, o):
        n_rows = row_seg.shape[0]
        widest = 0
        for s in range(ncols_of.shape[0]):
            widest = max(widest, ncols_of[s])
        for bb in prange((n_rows + ROW_BLOCK - 1) // ROW_BLOCK):
            scratch = np.empty(widest, w.dtype)  # one per block of rows
            b = np.int64(bb)
            for r in range(b * ROW_BLOCK, min(n_rows, (b + 1) * ROW_BLOCK)):
                s = row_seg[r]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    base = row_base[r]
                    row(w, g, h, r, base, base, ncols_of[s], 1, 1, hp, o, scratch)
    return loop


def cpu_kernel(factory, n_hyper: int, dtype, parallel: bool, mp=False):
    """The compiled CPU row loop of ``factory`` for ``dtype`` (cached per process); ``mp``: a
    float32 master with a float16 gradient and a float16 weight copy written in the same pass
    (both as uint16 bits)."""
    dtype = np.dtype(dtype)
    key = ("rows", factory, n_hyper, dtype, bool(parallel), bool(mp))

    def build():
        arr = cpu._NUMBA_TYPES[dtype][::1]
        i64, u16 = types.int64, types.uint16[::1]
        sig = types.void(arr, u16 if mp else arr, arr, i64[::1], types.boolean, i64, i64, i64,
                         i64, i64, i64, arr, u16)
        with warnings.catch_warnings():
            # numba's pedantic SSA check flags the float16 conversions' conditional
            # expressions when they are inlined into the row step inlined into the loop (a
            # check of numba's own IR, not a fault: tests/test_groupadagrad.py checks this
            # kernel bit for bit against the float32 step and numpy's rounding)
            warnings.simplefilter("ignore", NumbaIRAssumptionWarning)
            return cpu._compile(sig, parallel)(_cpu_loop(_row_of(factory, dtype, mp),
                                                         n_hyper))
    return cpu._cached(key, build)


def _row_of(factory, dtype, mp=False):
    from . import half
    prep, reduce_row, apply = (cpu._inlined(fn) for fn in factory(dtype.type))
    widen = cpu._inlined(cpu._by_value(half.half_to_single) if mp else cpu._by_value(_as_is))
    narrow = cpu._inlined(cpu._by_value(half.single_to_half))
    return _cpu_row(prep, reduce_row, apply, widen, narrow, bool(mp))


def _as_is(x):
    return x


def cpu_segmented_kernel(factory, n_hyper: int, dtype, parallel: bool):
    """The compiled segmented CPU row loop of ``factory`` for ``dtype`` (cached per process)."""
    dtype = np.dtype(dtype)
    key = ("rows-segmented", factory, n_hyper, dtype, bool(parallel))

    def build():
        arr = cpu._NUMBA_TYPES[dtype][::1]
        i64 = types.int64[::1]
        sig = types.void(arr, arr, arr, cpu._NUMBA_TYPES[dtype][:, ::1], i64, i64, i64,
                         types.uint16[::1])
        return cpu._compile(sig, parallel)(_cpu_segmented_loop(_row_of(factory, dtype),
                                                               n_hyper))
    return cpu._cached(key, build)


def _strides(shape, c_order):
    """``(row stride, column stride)`` in elements of a contiguous 2-D array."""
    return (shape[1], 1) if c_order else (1, shape[0])


_ALL_ROWS = np.zeros(1, np.int64)  # the placeholder ``rows`` of a dense step


_NO_COPY = np.zeros(1, np.uint16)  # the placeholder float16 copy of a step without one


def run_cpu(factory, weight, grad, history, rows, hyper, mirror=None):
    """One row step on numpy arrays, in place.

    ``weight``: ``(n_rows, ncols)``, C- or Fortran-contiguous, float32 or float64; ``grad``:
    ``(len(rows), ncols)`` (``(n_rows, ncols)`` when ``rows`` is None) of the weight's dtype, any
    layout (copied to C order when not contiguous), or float16 for a float32 weight with a
    ``mirror``; ``history``: ``(n_rows, 1)`` contiguous; ``rows``: None or int64 indices;
    ``hyper``: Python floats, rounded to the dtype once. ``mirror``: the float16 copy of a
    float32 master ``weight`` (its shape and memory order), written from each new weight
    element in the same pass."""
    dtype = weight.dtype
    n_rows, ncols = weight.shape
    dense = rows is None
    rows_arr = _ALL_ROWS if dense else np.ascontiguousarray(rows, np.int64)
    nk = n_rows if dense else rows_arr.shape[0]
    if nk == 0:
        return
    if not (grad.flags.c_contiguous or grad.flags.f_contiguous):
        grad = np.ascontiguousarray(grad)
    w_c = bool(weight.flags.c_contiguous)
    g_c = bool(grad.flags.c_contiguous)
    w_rs, w_cs = _strides(weight.shape, w_c)
    g_rs, g_cs = _strides(grad.shape, g_c)
    hpa = np.array(hyper, dtype)
    parallel = nk * ncols >= cpu.PARALLEL_THRESHOLD and nk > 1
    mp = mirror is not None
    # cpu_kernel's own key, looked up first: a compiled kernel without the call
    kernel = cpu._kernels.get(("rows", factory, hpa.shape[0], dtype, parallel, mp))
    if kernel is None:
        kernel = cpu_kernel(factory, hpa.shape[0], dtype, parallel, mp)
    order = "C" if w_c else "F"
    g_flat = grad.reshape(-1, order="C" if g_c else "F")
    kernel(weight.reshape(-1, order=order), g_flat.view(np.uint16) if mp else g_flat,
           history.reshape(-1), rows_arr, dense, nk, ncols, w_rs, w_cs, g_rs, g_cs, hpa,
           mirror.reshape(-1, order=order).view(np.uint16) if mp else _NO_COPY)


def run_cuda(factory, w, g, h, rows, hyper, stream=0, mirror=None):
    """One row step on described CUDA arrays, one launch on ``stream``
    (:func:`toolkit.backends.cuda_rows.run`; imported here on first use)."""
    from . import cuda_rows
    cuda_rows.run(factory, w, g, h, rows, hyper, stream=stream, mirror=mirror)


# --------------------------------------------------------------------------------------------
# many matrices in one call (a Trainer's group)
# --------------------------------------------------------------------------------------------
class GroupRows:
    """The rows of a group's matrices laid end to end in flat buffers, C order: segment ``s``
    (shape ``shapes[s]``, 2-D) starts at element ``offsets[s]`` of the weight and the gradient;
    its history values are rows ``row_offsets[s]`` to ``row_offsets[s+1]`` of the group's flat
    history. ``row_seg``, ``row_base`` (int64, one per row) and ``ncols_of`` (one per segment)
    are the tables the segmented kernels read; made once per group."""

    def __init__(self, offsets, shapes):
        if any(len(shape) != 2 for shape in shapes):
            raise ValueError(f"a row step needs 2-D weights, got shapes {list(shapes)}")
        n_rows = np.array([shape[0] for shape in shapes], np.int64)
        self.ncols_of = np.array([shape[1] for shape in shapes], np.int64)
        self.row_offsets = np.concatenate([[0], np.cumsum(n_rows)]).astype(np.int64)
        self.row_seg = np.repeat(np.arange(len(shapes), dtype=np.int64), n_rows)
        local = np.arange(self.row_seg.shape[0], dtype=np.int64) - self.row_offsets[self.row_seg]
        self.row_base = (np.asarray(offsets, np.int64)[:-1][self.row_seg]
                         + local * self.ncols_of[self.row_seg])
        self.size = int(offsets[-1])
        self._device = None

    @property
    def n_rows(self):
        return int(self.row_seg.shape[0])

    def device_tables(self):
        """``(row_seg, row_base, ncols_of)`` on the current CUDA device (copied once)."""
        if self._device is None:
            from numba import cuda
            self._device = tuple(cuda.to_device(a) for a in
                                 (self.row_seg, self.row_base, self.ncols_of))
        return self._device


def run_cpu_segmented(factory, weight, grad, history, table, layout: GroupRows):
    """One call of a row rule over a group's flat numpy buffers: ``weight`` and ``grad`` (same
    dtype, 1-D), ``history`` (one value per row of every segment), ``table`` the
    ``(n_segments, 1 + n_hyper)`` rows ``(active, *hp)`` in the weight's dtype."""
    if layout.n_rows == 0:
        return
    parallel = layout.size >= cpu.PARALLEL_THRESHOLD and layout.n_rows > 1
    kernel = cpu_segmented_kernel(factory, table.shape[1] - 1, weight.dtype, parallel)
    kernel(weight, grad, history.reshape(-1), np.ascontiguousarray(table), layout.row_seg,
           layout.row_base, layout.ncols_of, _NO_COPY)


def run_cuda_segmented(factory, w, g, h, table, upload, layout: GroupRows, stream=0,
                       mirror=None):
    """One launch of a row rule over a group's flat device buffers (described arrays);
    ``table`` is sent through ``upload`` (a ``cuda.TableUpload``)
    (:func:`toolkit.backends.cuda_rows.run_segmented`)."""
    from . import cuda_rows
    cuda_rows.run_segmented(factory, w, g, h, table, upload, layout, stream=stream,
                            mirror=mirror)
