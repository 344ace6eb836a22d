"""Row kernels: updates with a reduction along each row of a matrix weight (GroupAdaGrad keeps one
history value per row, fed by the mean of the row's squared gradient), on the CPU and on CUDA.

An optimizer supplies a *row rule factory*, ``factory(ftype) -> (prep, reduce_row, apply)``,
three plain Python functions of scalars using ``math`` only (inlined with ``numba.njit`` here,
``cuda.jit(device=True)`` for CUDA)::

    prep(g, hp) -> p                      the preprocessed gradient element (rescaled, clipped)
    reduce_row(h, s, n, hp) -> (h, a)     the row's new state value and its factor, from its
                                          state h, the float64 sum s of p*p over the row and the
                                          row length n (a float64)
    apply(w, p, a, hp) -> w               the new weight element

``hp`` is a tuple of per-step hyperparameters in the arithmetic type. ``s`` is summed in float64
in a fixed order: on the CPU four running sums (column ``j`` into sum ``j % 4``) added as
``(s0 + s1) + (s2 + s3)``; on CUDA a fixed tree over the block. Each backend gives the same bits
run after run (the two may differ in the last bit of ``s``, far below the arithmetic's rounding).

Gradient row ``k`` applies to weight and state row ``rows[k]`` (``rows``: int64, sorted, unique:
a lazy row-sparse update), or to row ``k`` when ``rows`` is None; other rows are not touched.
The weight may be C- or Fortran-ordered; the state is ``(rows, 1)``. The CPU loop is a
``prange`` over rows above :data:`toolkit.backends.jit.PARALLEL_THRESHOLD` elements; CUDA is
:mod:`toolkit.backends.cuda_rows`, imported only when a CUDA step runs.
"""
from __future__ import annotations

import warnings

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.core.errors import NumbaIRAssumptionWarning
from numba.extending import intrinsic, register_jitable
from numba.np.unsafe.ndarray import to_fixed_tuple

from . import jit

__all__ = ["GroupRows", "run_cpu", "run_cpu_segmented", "run_cuda", "cpu_kernel"]


# --------------------------------------------------------------------------------------------
# CPU
# --------------------------------------------------------------------------------------------
def _cpu_row(prep, reduce_row, apply, widen, narrow, mirror):
    """The step of one row (inlined into both loops): gradient row at ``gb`` (column stride
    ``g_cs``) updates history ``h[r]`` and the weight row at ``wb`` (column stride ``w_cs``).
    The row's preprocessed gradient is formed once into ``scratch`` (a loop that vectorises),
    its float64 sum of squares taken from there in the documented order (:func:`_row_squares`,
    on vector registers) and the weight updated from it. Contiguous rows (both strides 1) run
    over slices from 0, which vectorise; other strides index element by element. ``widen``
    loads a gradient element (float16 bits widened exactly for a float32 master, else as it
    is); with ``mirror`` the float16 copy ``o`` (uint16 bits, the weight's shape and order) of
    each new weight element is written in the same pass.

    Returns ``(row, rows)``: ``rows`` runs a block of rows of C-ordered matrices with the same
    arithmetic, software-pipelined."""
    def history(h, r, ps, ncols, hp):
        """Row ``r``'s new history from its preprocessed gradient ``ps``; its factor."""
        hn, a = reduce_row(h[r], _row_squares(ps), np.float64(ncols), hp)
        h[r] = hn
        return a
    history = jit.inlined(history)

    def apply_row(w, wb, ncols, ps, a, hp, o):
        """The contiguous weight row at ``wb`` (and its float16 copy) from ``ps`` and ``a``."""
        ws = w[wb:wb + ncols]
        if mirror:
            os = o[wb:wb + ncols]
            for j in range(ncols):
                x = apply(ws[j], ps[j], a, hp)
                ws[j] = x
                os[j] = narrow(x)
        else:
            for j in range(ncols):
                ws[j] = apply(ws[j], ps[j], a, hp)
    apply_row = jit.inlined(apply_row)

    def row(w, g, h, r, wb, gb, ncols, w_cs, g_cs, hp, o, scratch):
        ps = scratch[:ncols]
        if g_cs == 1:
            gs = g[gb:gb + ncols]
            for j in range(ncols):
                ps[j] = prep(widen(gs[j]), hp)
        else:  # strided: gathered once
            for j in range(ncols):
                ps[j] = prep(widen(g[gb + j * g_cs]), hp)
        a = history(h, r, ps, ncols, hp)
        if w_cs == 1:
            apply_row(w, wb, ncols, ps, a, hp, o)
        else:
            for j in range(ncols):
                i = wb + j * w_cs
                x = apply(w[i], ps[j], a, hp)
                w[i] = x
                if mirror:
                    o[i] = narrow(x)

    def rows(w, g, h, rows_, dense, first, end, ncols, w_rs, g_rs, hp, o, scratch):
        """Rows ``first`` to ``end - 1`` of C-ordered matrices (weight row ``rows_[k]``, or
        ``k`` when ``dense``), software-pipelined: one loop preprocesses the gradient row of
        ``k`` and applies row ``k - 1``'s step to its weight row, so the gradient and the
        weight stream together as in an element-wise step (row by row, the gradient's loop,
        the sum and the weight's loop each run alone and the memory waits between them).
        Every row's arithmetic is :func:`row`'s, so the bits are the same."""
        prev, cur = scratch[:ncols], scratch[ncols:2 * ncols]
        gs = g[first * g_rs:first * g_rs + ncols]
        for j in range(ncols):
            prev[j] = prep(widen(gs[j]), hp)
        r_prev = first if dense else rows_[first]
        a_prev = history(h, r_prev, prev, ncols, hp)
        for k in range(first + 1, end):
            gs = g[k * g_rs:k * g_rs + ncols]
            wb = r_prev * w_rs
            ws = w[wb:wb + ncols]
            if mirror:
                os = o[wb:wb + ncols]
                for j in range(ncols):
                    cur[j] = prep(widen(gs[j]), hp)
                    x = apply(ws[j], prev[j], a_prev, hp)
                    ws[j] = x
                    os[j] = narrow(x)
            else:
                for j in range(ncols):
                    cur[j] = prep(widen(gs[j]), hp)
                    ws[j] = apply(ws[j], prev[j], a_prev, hp)
            r_prev = k if dense else rows_[k]
            a_prev = history(h, r_prev, cur, ncols, hp)
            prev, cur = cur, prev
        apply_row(w, r_prev * w_rs, ncols, prev, a_prev, hp, o)
    return jit.inlined(row), jit.inlined(rows)


@intrinsic
def _square_lanes(typingctx, acc, x, n4):
    """``acc`` (4 float64) plus ``float64(x[4j + l])**2`` into ``acc[l]`` for ``j`` in
    ``range(n4)`` in order (``l`` = 0..3). The four running sums are one 4-wide float64
    vector, so each sum's additions stay in element order and the loop runs on vector
    instructions: written as four scalar sums in numba it stays scalar (numba turns LLVM's SLP
    vectoriser off, and the loop vectoriser may not reorder float additions)."""
    if not (isinstance(acc, types.UniTuple) and acc.count == 4 and acc.dtype == types.float64
            and isinstance(x, types.Array) and x.ndim == 1 and x.layout == "C"
            and x.dtype in (types.float32, types.float64)):
        return None
    sig = acc(acc, x, n4)

    def codegen(context, builder, sig, args):
        accv, xv, n4v = args
        i32 = ir.IntType(32)
        v4 = ir.VectorType(ir.DoubleType(), 4)
        intp = context.get_value_type(types.intp)
        aty = sig.args[1]
        elt = context.get_value_type(aty.dtype)
        data = context.make_array(aty)(context, builder, xv).data
        total = ir.Constant(v4, None)
        for lane in range(4):
            total = builder.insert_element(total, builder.extract_value(accv, lane), i32(lane))
        total = cgutils.alloca_once_value(builder, total)
        align = elt.get_abi_size(context.target_data)
        count = context.cast(builder, n4v, sig.args[2], types.intp)
        with cgutils.for_range(builder, count, intp=intp) as loop:
            p = builder.bitcast(builder.gep(data, [builder.mul(loop.index, intp(4))]),
                                ir.VectorType(elt, 4).as_pointer())
            part = builder.load(p, align=align)
            if aty.dtype != types.float64:
                part = builder.fpext(part, v4)
            builder.store(builder.fadd(builder.load(total), builder.fmul(part, part)), total)
        out = ir.Constant(context.get_value_type(sig.return_type), None)
        v = builder.load(total)
        for lane in range(4):
            out = builder.insert_value(out, builder.extract_element(v, i32(lane)), lane)
        return out
    return sig, codegen


@register_jitable(inline="always")
def _row_squares(src):
    """The float64 sum of ``src[j]**2`` over a row, column ``j`` into running sum ``j % 4`` (the
    last 0 to 3 columns into sum 0), added as ``(s0 + s1) + (s2 + s3)``: the order of every
    CPU row kernel (:func:`_square_lanes` does all but the last columns). Defined in this
    module, whose kernels refer to it by name, so that a change to it makes their on-disk
    cache stale."""
    ncols = src.shape[0]
    quads = ncols // 4
    z = 0.0
    s0, s1, s2, s3 = _square_lanes((z, z, z, z), src, quads)
    for j in range(4 * quads, ncols):
        p = np.float64(src[j])
        s0 += p * p
    return (s0 + s1) + (s2 + s3)


#: Rows per iteration of the parallel loop. Each iteration allocates its scratch (two rows)
#: and starts the pipelined loop afresh (its first and last rows run alone): 64 rows instead
#: of 16 took GroupAdaGrad at 2^24 from 0.80-0.82 to 0.89-0.95 of the floor on the 2-core
#: machine, and still leaves 4 iterations for 2^16 elements of 256 columns.
ROW_BLOCK = 64


def _cpu_loop(steps, n_hyper):
    """The row loop of one tensor (``prange`` is ``range`` when serial): C-ordered matrices a
    block of rows at a time, software-pipelined; others row by row."""
    row, pipelined = steps

    def loop(w, g, h, rows, dense, nk, ncols, w_rs, w_cs, g_rs, g_cs, hpa, o):
        hp = to_fixed_tuple(hpa, n_hyper)
        for bb in prange((nk + ROW_BLOCK - 1) // ROW_BLOCK):
            scratch = np.empty(2 * ncols, w.dtype)  # one per block of rows
            b = np.int64(bb)  # a parallel loop's index is unsigned: keep row indices int64
            first, end = b * ROW_BLOCK, min(nk, (b + 1) * ROW_BLOCK)
            if w_cs == 1 and g_cs == 1:
                pipelined(w, g, h, rows, dense, first, end, ncols, w_rs, g_rs, hp, o, scratch)
            else:
                for k in range(first, end):
                    r = k if dense else rows[k]
                    row(w, g, h, r, r * w_rs, k * g_rs, ncols, w_cs, g_cs, hp, o, scratch)
    return loop


def _cpu_segmented_loop(steps, n_hyper):
    """The row loop over flat buffers holding many C-ordered matrices (a Trainer's group): row
    ``r`` of the group belongs to segment ``row_seg[r]``, starts at element ``row_base[r]`` of
    the weight and of the gradient, and keeps its history in ``h[r]``; segment ``s`` has
    ``ncols_of[s]`` columns and reads ``(active, *hp)`` from ``table[s]``. Each row runs the
    same inlined step as a single tensor's, so the group's step equals the per-tensor steps bit
    for bit."""
    row = steps[0]

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
        arr = jit.NUMBA_TYPES[dtype][::1]
        i64, u16 = types.int64, types.uint16[::1]
        sig = types.void(arr, jit.read_only(u16 if mp else arr), arr, i64[::1], types.boolean,
                         i64, i64, i64,
                         i64, i64, i64, arr, u16)
        with warnings.catch_warnings():
            # numba's pedantic SSA check flags the float16 conversions' conditional
            # expressions when they are inlined into the row step inlined into the loop (a
            # check of numba's own IR, not a fault: tests/test_groupadagrad.py checks this
            # kernel bit for bit against the float32 step and numpy's rounding)
            warnings.simplefilter("ignore", NumbaIRAssumptionWarning)
            return jit.compile_kernel(sig, parallel)(_cpu_loop(_row_of(factory, dtype, mp),
                                                         n_hyper))
    return jit.cached(key, build)


def _row_of(factory, dtype, mp=False):
    from . import half
    prep, reduce_row, apply = (jit.inlined(fn) for fn in factory(dtype.type))
    widen = jit.inlined(jit.by_value(half.half_to_single) if mp else jit.by_value(_as_is))
    narrow = jit.inlined(jit.by_value(half.single_to_half))
    return _cpu_row(prep, reduce_row, apply, widen, narrow, bool(mp))


def _as_is(x):
    return x


def cpu_segmented_kernel(factory, n_hyper: int, dtype, parallel: bool):
    """The compiled segmented CPU row loop of ``factory`` for ``dtype`` (cached per process)."""
    dtype = np.dtype(dtype)
    key = ("rows-segmented", factory, n_hyper, dtype, bool(parallel))

    def build():
        arr = jit.NUMBA_TYPES[dtype][::1]
        i64 = types.int64[::1]
        sig = types.void(arr, arr, arr, jit.NUMBA_TYPES[dtype][:, ::1], i64, i64, i64,
                         types.uint16[::1])
        return jit.compile_kernel(sig, parallel)(_cpu_segmented_loop(_row_of(factory, dtype),
                                                               n_hyper))
    return jit.cached(key, build)


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
    parallel = nk * ncols >= jit.PARALLEL_THRESHOLD and nk > 1
    mp = mirror is not None
    # cpu_kernel's own key, looked up first: a compiled kernel without the call
    kernel = jit.KERNELS.get(("rows", factory, hpa.shape[0], dtype, parallel, mp))
    if kernel is None:
        kernel = cpu_kernel(factory, hpa.shape[0], dtype, parallel, mp)
    order = "C" if w_c else "F"
    g_flat = grad.reshape(-1, order="C" if g_c else "F")
    args = (weight.reshape(-1, order=order), g_flat.view(np.uint16) if mp else g_flat,
            history.reshape(-1), rows_arr, dense, nk, ncols, w_rs, w_cs, g_rs, g_cs, hpa,
            mirror.reshape(-1, order=order).view(np.uint16) if mp else _NO_COPY)
    try:
        kernel(*args)
    except TypeError:  # a read-only gradient (or row-sparse values): its variant, compiled once
        jit.call_readonly(kernel, *args)


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
    parallel = layout.size >= jit.PARALLEL_THRESHOLD and layout.n_rows > 1
    kernel = cpu_segmented_kernel(factory, table.shape[1] - 1, weight.dtype, parallel)
    kernel(weight, grad, history.reshape(-1), np.ascontiguousarray(table), layout.row_seg,
           layout.row_base, layout.ncols_of, _NO_COPY)
