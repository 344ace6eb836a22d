"""The CPU reductions: per-tensor norms in float64 in one fixed order, one tensor or many in one
call. LARS norms (LBSGD's 'lars', LARS): ``|w|^2`` and ``|g|^2`` per tensor
(:func:`lars_norms`, :func:`run_norms`), on vector registers through an llvmlite intrinsic
(:func:`_norm_lanes`); the first pass of a two-pass step (LAMB): ``|w|^2`` and ``|u|^2`` of the
direction rule's ``u``, writing nothing (:func:`direction_norms`, :func:`run_direction`). The
per-tensor and the segmented kernels add in the same order, so a Trainer's norms equal the
per-tensor ones bit for bit; the chunking is :mod:`toolkit.backends.order`'s, shared with CUDA.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic, register_jitable
from numba.np.unsafe.ndarray import to_fixed_tuple

from . import jit
from .jit import KERNELS, NUMBA_TYPES, by_value, cached, call_readonly, compile_kernel, inlined
from .order import CHUNK, DIRECTION_CHUNK, DIRECTION_LANES, sum_partials

__all__ = ["norms_kernel", "tensor_norms_kernel", "lars_norms", "run_norms", "direction_kernel",
           "tensor_direction_kernel", "run_direction", "direction_norms"]


# --------------------------------------------------------------------------------------------
# LARS norms (LBSGD): |w|^2 and |g|^2 per tensor, float64 accumulation in index order
# --------------------------------------------------------------------------------------------
def _widen_half(builder, bits):
    """The float32 values (``<n x float>``) of float16 given as ``<n x i16>`` bits, exactly:
    :func:`toolkit.backends.half.half_to_single`'s steps on vector registers."""
    width = bits.type.count
    v4i = ir.VectorType(ir.IntType(32), width)

    def k(x):
        return ir.Constant(v4i, [ir.IntType(32)(x)] * width)
    x = builder.zext(bits, v4i)
    sign = builder.shl(builder.and_(x, k(0x8000)), k(16))
    em = builder.and_(x, k(0x7FFF))
    moved = builder.add(builder.shl(em, k(13)), k(112 << 23))
    moved = builder.add(moved, builder.select(builder.icmp_unsigned(">=", em, k(0x7C00)),
                                              k(112 << 23), k(0)))
    f4 = ir.VectorType(ir.FloatType(), width)
    unit = ir.Constant(f4, [ir.FloatType()(2.0 ** -24)] * width)
    sub = builder.bitcast(builder.fmul(builder.uitofp(em, f4), unit), v4i)
    out = builder.or_(builder.select(builder.icmp_unsigned("<", em, k(0x400)), sub, moved), sign)
    return builder.bitcast(out, f4)


#: Groups of 4 elements that :func:`_norm_lanes` loads, converts and divides at once (16
#: elements: a 512-bit register of float32), before it squares and adds them group by group.
_NORM_GROUPS = 4


@intrinsic
def _norm_lanes(typingctx, acc, w, g, cum, bs, a, n4):
    """``acc`` (8 float64) plus, for ``j`` in ``range(n4)`` in order and ``i = a + 4j + l``
    (``l`` = 0..3): ``float64(w[i])**2`` into ``acc[l]`` and ``float64(gm)**2`` into ``acc[4 +
    l]``, where ``gm = (cum[i] + g[i])/bs`` in ``w``'s dtype (``g[i]`` when ``cum`` is None);
    ``g`` of ``w``'s dtype, or uint16 (float16 bits, widened exactly, for a float32 ``w``).
    Each array's four running sums are one 4-wide float64 vector, so every sum's additions
    stay in element order and the loop runs on vector instructions: written as four scalar
    sums in numba it stays scalar (numba turns LLVM's SLP vectoriser off, and the loop
    vectoriser may not reorder float additions), 3x slower than memory."""
    fl = (types.float32, types.float64)
    if not (isinstance(acc, types.UniTuple) and acc.count == 8 and acc.dtype == types.float64
            and all(isinstance(x, types.Array) and x.ndim == 1 and x.layout == "C"
                    for x in (w, g) + (() if cum is types.none else (cum,)))
            and w.dtype in fl and (g.dtype == w.dtype or (g.dtype == types.uint16
                                                          and w.dtype == types.float32))
            and (cum is types.none or cum.dtype == w.dtype)):
        return None
    sig = acc(acc, w, g, cum, bs, a, n4)

    def codegen(context, builder, sig, args):
        accv, wv, gv, cv, bsv, av, n4v = args
        f64, i32 = ir.DoubleType(), ir.IntType(32)
        v4 = ir.VectorType(f64, 4)
        intp = context.get_value_type(types.intp)
        ftype = sig.args[1].dtype
        fty = context.get_value_type(ftype)
        start = context.cast(builder, av, sig.args[5], types.intp)

        def base(arr, aty):
            return (builder.gep(context.make_array(aty)(context, builder, arr).data, [start]),
                    context.get_value_type(aty.dtype))
        streams = [base(wv, sig.args[1]), base(gv, sig.args[2])]
        with_cum = sig.args[3] is not types.none
        if with_cum:
            streams.append(base(cv, sig.args[3]))
            b = context.cast(builder, bsv, sig.args[4], ftype)
        sums = []
        for k in range(2):
            v = ir.Constant(v4, None)
            for lane in range(4):
                v = builder.insert_element(v, builder.extract_value(accv, 4 * k + lane),
                                           i32(lane))
            sums.append(cgutils.alloca_once_value(builder, v))

        def step(first, width):
            """Elements ``first .. first + width - 1`` (``width`` a multiple of 4): loaded,
            converted and divided ``width`` at a time, squared and added 4 at a time, in
            order."""
            loads = []
            for ptr, elt in streams:
                p = builder.bitcast(builder.gep(ptr, [first]),
                                    ir.VectorType(elt, width).as_pointer())
                loads.append(builder.load(p, align=elt.get_abi_size(context.target_data)))
            x, y = loads[0], loads[1]
            if sig.args[2].dtype == types.uint16:
                y = _widen_half(builder, y)
            if with_cum:
                fw = ir.VectorType(fty, width)
                divisor = builder.insert_element(ir.Constant(fw, None), b, i32(0))
                divisor = builder.shuffle_vector(
                    divisor, ir.Constant(fw, None),
                    ir.Constant(ir.VectorType(i32, width), [i32(0)] * width))
                y = builder.fdiv(builder.fadd(loads[2], y), divisor)
            for q in range(width // 4):
                for s, v in zip(sums, (x, y)):
                    if width > 4:
                        v = builder.shuffle_vector(
                            v, v, ir.Constant(ir.VectorType(i32, 4),
                                              [i32(4 * q + lane) for lane in range(4)]))
                    if ftype != types.float64:
                        v = builder.fpext(v, v4)
                    builder.store(builder.fadd(builder.load(s), builder.fmul(v, v)), s)

        count = context.cast(builder, n4v, sig.args[6], types.intp)
        wide = 4 * _NORM_GROUPS
        with cgutils.for_range(builder, builder.sdiv(count, intp(_NORM_GROUPS)),
                               intp=intp) as loop:
            step(builder.mul(loop.index, intp(wide)), wide)
        done = builder.mul(builder.sdiv(count, intp(_NORM_GROUPS)), intp(_NORM_GROUPS))
        with cgutils.for_range(builder, builder.sub(count, done), intp=intp) as loop:
            step(builder.mul(builder.add(done, loop.index), intp(4)), 4)
        out = ir.Constant(context.get_value_type(sig.return_type), None)
        for k, s in enumerate(sums):
            v = builder.load(s)
            for lane in range(4):
                out = builder.insert_value(out, builder.extract_element(v, i32(lane)),
                                           4 * k + lane)
        return out
    return sig, codegen


@register_jitable(inline="always")
def _norm_squares4(acc, w, g, cum, bs, a, n4):
    """:func:`_norm_lanes` as a module-level function: a kernel's closure refers to it by
    name, so it pickles to the same bytes in every process (the intrinsic object itself does
    not, which would defeat the on-disk cache)."""
    return _norm_lanes(acc, w, g, cum, bs, a, n4)


def _as_is(x):
    return x


def _norms_sums(dtype, with_cum, g16):
    """``sums(w, g, cum, a, b, bs) -> (sum w^2, sum gm^2)`` over elements ``a:b`` (one chunk)
    in float64: element ``a + i`` into running sum ``i % 4`` (the last ``(b - a) % 4`` elements
    into sum 0, after the others), the sums added as ``(s0 + s1) + (s2 + s3)``; ``gm = (cum +
    g)/bs`` in the arithmetic dtype when ``with_cum`` and ``bs`` is not 0, else ``g``; ``g``
    float16 (as uint16 bits, widened exactly) when ``g16``. :func:`_norm_lanes` does all but
    the last elements."""
    from .half import half_to_single
    f = dtype.type
    widen = inlined(by_value(half_to_single) if g16 else by_value(_as_is))

    def sums(w, g, cum, a, b, bs):
        m = b - a
        z = 0.0
        acc = (z, z, z, z, z, z, z, z)
        use_cum = with_cum and bs != 0  # 0: a member that takes the norms of its gradient
        if use_cum:
            acc = _norm_squares4(acc, w, g, cum, bs, a, m // 4)
        else:
            acc = _norm_squares4(acc, w, g, None, bs, a, m // 4)
        w0, w1, w2, w3, g0, g1, g2, g3 = acc
        for i in range(a + m // 4 * 4, b):  # the last 0 to 3 elements
            x = np.float64(w[i])
            w0 += x * x
            y = f(widen(g[i]))
            if use_cum:
                y = (cum[i] + y) / bs
            v = np.float64(y)
            g0 += v * v
        return (w0 + w1) + (w2 + w3), (g0 + g1) + (g2 + g3)
    return inlined(sums)


def _norms_types(dtype, g16):
    nb = NUMBA_TYPES[dtype]
    return nb[::1], jit.read_only(types.uint16[::1] if g16 else nb[::1])


def norms_kernel(dtype, with_cum, parallel, g16=False):
    """``loop(w, g, cum, table, chunks, partial)``: for each chunk ``c`` (rows of
    :func:`toolkit.backends.order.chunk_table`: ``start, end, segment``) of a segment ``s`` with ``table[s, 0]`` set,
    ``partial[c] = (sum w^2, sum gm^2)`` over its elements, accumulated in float64 in four
    running sums (element ``i`` of the chunk into sum ``i % 4``, the tail into sum 0) added as
    ``(s0 + s1) + (s2 + s3)`` (:func:`_norms_sums`),
    where ``gm = (cum + g)/table[s, 1]`` in the arithmetic dtype when ``with_cum`` (and
    ``table[s, 1]`` is not 0), else ``g`` (``g16``: a float16 gradient as its uint16 bits,
    widened exactly).
    The chunks run in parallel; :func:`run_norms` then adds each segment's partial sums in chunk
    order. The order of every addition is fixed by the chunk table alone, and a single tensor is
    one segment with the same chunks, so a Trainer's norms equal the per-tensor ones
    (:func:`lars_norms`) bit for bit."""
    dtype = np.dtype(dtype)
    key = ("norms", dtype, bool(with_cum), bool(parallel), bool(g16))

    def build():
        f = dtype.type
        sums = _norms_sums(dtype, bool(with_cum), bool(g16))

        def loop(w, g, cum, table, chunks, partial):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    partial[c, 0], partial[c, 1] = sums(w, g, cum, chunks[c, 0], chunks[c, 1],
                                                        f(table[s, 1]))
        arr, garr = _norms_types(dtype, g16)
        sig = types.void(arr, garr, arr, types.float64[:, ::1], types.int64[:, ::1],
                         types.float64[:, ::1])
        return compile_kernel(sig, parallel)(loop)
    return cached(key, build)


def tensor_norms_kernel(dtype, with_cum, parallel, g16=False):
    """``loop(w, g, cum, bs) -> (sum w^2, sum gm^2)`` of one tensor in one call: the sums of
    :func:`norms_kernel` over the chunks of :func:`toolkit.backends.order.single_chunks` (in parallel), added in chunk
    order from 0.0 as :func:`run_norms` adds them, so the same numbers, bit for bit, without
    the tables and the second call."""
    dtype = np.dtype(dtype)
    key = ("tensor-norms", dtype, bool(with_cum), bool(parallel), bool(g16))

    def build():
        f = dtype.type
        sums = _norms_sums(dtype, bool(with_cum), bool(g16))
        chunk = CHUNK

        def loop(w, g, cum, bs):
            n = w.shape[0]
            nc = (n + chunk - 1) // chunk
            partial = np.empty((nc, 2))
            b = f(bs)
            for c in prange(nc):
                a = c * chunk
                partial[c, 0], partial[c, 1] = sums(w, g, cum, a, min(a + chunk, n), b)
            return _chunk_totals(partial)
        arr, garr = _norms_types(dtype, g16)
        sig = types.UniTuple(types.float64, 2)(arr, garr, arr, types.float64)
        return compile_kernel(sig, parallel)(loop)
    return cached(key, build)


@register_jitable(inline="always")
def _chunk_totals(partial):
    """``(sum of partial[:, 0], sum of partial[:, 1])`` added in chunk order from 0.0: one
    tensor's chunks, as :func:`toolkit.backends.order.sum_partials` adds a segment's."""
    s0 = 0.0
    s1 = 0.0
    for c in range(partial.shape[0]):
        s0 += partial[c, 0]
        s1 += partial[c, 1]
    return s0, s1



def lars_norms(weight, grad, cum, batch_scale):
    """``(sum w^2, sum gm^2)`` of one tensor (``gm = (cum + grad)/batch_scale`` when ``cum`` is
    given, else ``grad``; ``grad`` may be float16 for a float32 weight), float64, in index
    order (:func:`tensor_norms_kernel`: one call, parallel from :data:`PARALLEL_THRESHOLD`)."""
    if weight.ndim == 1 and weight.flags.c_contiguous and grad.flags.c_contiguous:
        w, g, c = weight, grad, cum  # flat already: no views needed
    else:
        w = weight.reshape(-1, order="A")
        order = "F" if (weight.flags.f_contiguous and not weight.flags.c_contiguous) else "C"
        g = np.asarray(grad, order=order).reshape(-1, order=order)
        c = None if cum is None else cum.reshape(-1, order="A")
    g16 = g.dtype.char == "e" and w.dtype.char != "e"
    key = (w.dtype.char, c is not None, w.shape[0] >= jit.PARALLEL_THRESHOLD, g16)
    kernel = _tensor_norms.get(key)  # a cheap key: this runs on every LARS step
    if kernel is None:
        kernel = _tensor_norms[key] = tensor_norms_kernel(w.dtype, *key[1:])
    args = (w, g.view(np.uint16) if g16 else g, w if c is None else c, float(batch_scale))
    try:
        return kernel(*args)
    except TypeError:
        return call_readonly(kernel, *args)


_tensor_norms: dict = {}


def run_norms(w, g, cum, table, chunks, out, with_cum):
    """The segmented norms of flat buffers into ``out`` (see :func:`norms_kernel`); ``chunks``
    is the buffers' :func:`toolkit.backends.order.chunk_table`; ``g`` may be float16 for float32 ``w``."""
    partial = np.zeros((chunks.shape[0], 2))
    g16 = g.dtype == np.float16 and w.dtype != np.float16
    kernel = norms_kernel(w.dtype, with_cum,
                          w.shape[0] >= jit.PARALLEL_THRESHOLD and chunks.shape[0] > 1, g16)
    args = (w, g.view(np.uint16) if g16 else g, cum, table, chunks, partial)
    try:
        kernel(*args)
    except TypeError:
        call_readonly(kernel, *args)
    sum_partials(chunks, partial, out)


# --------------------------------------------------------------------------------------------
# two-pass steps (LAMB): pass 1 reduces |w|^2 and |u|^2 per tensor, writing nothing
# --------------------------------------------------------------------------------------------
def _direction_sums(direction, dtype, g16):
    """``sums(w, g, s0, s1, a, b, hp) -> (sum w^2, sum u^2)`` over elements ``a:b`` (one chunk)
    in float64, ``u`` from the ``direction`` rule: element ``j`` of the chunk adds into running
    sum ``j % DIRECTION_LANES`` (in element order), and the sums are then added pairwise,
    ``sum[l] += sum[l + h]`` for ``h = LANES/2, LANES/4, ..., 1``. ``g16``: ``g`` holds a
    float16 gradient as its uint16 bits, widened exactly on load (a float32 master's step)."""
    from .half import half_to_single
    lanes = DIRECTION_LANES
    toward = inlined(direction(dtype.type))
    widen = inlined(by_value(half_to_single) if g16 else by_value(_as_is))

    def sums(w, g, s0, s1, a, b, hp):
        wc, gc, x0, x1 = w[a:b], g[a:b], s0[a:b], s1[a:b]
        sw = np.zeros(lanes)
        su = np.zeros(lanes)
        m = wc.shape[0]
        for j in range(0, m, lanes):
            for lane in range(min(lanes, m - j)):
                i = j + lane
                wi = wc[i]
                u, _, _ = toward(wi, widen(gc[i]), x0[i], x1[i], hp)
                vw, vu = np.float64(wi), np.float64(u)
                sw[lane] += vw * vw
                su[lane] += vu * vu
        h = lanes // 2
        while h > 0:
            for lane in range(h):
                sw[lane] += sw[lane + h]
                su[lane] += su[lane + h]
            h //= 2
        return sw[0], su[0]
    return inlined(sums)


def direction_kernel(direction, n_hyper: int, dtype, parallel: bool):
    """``loop(w, g, s0, s1, table, chunks, partial)``: for each chunk ``c`` (rows
    ``(start, end, segment)`` of :func:`toolkit.backends.order.chunk_table` with :data:`DIRECTION_CHUNK`) of a segment
    ``s`` with ``table[s, 0]`` set, ``partial[c] = (sum w^2, sum u^2)`` in float64, in the
    order of :func:`_direction_sums`. :func:`run_direction` adds a segment's partials in chunk
    order. No array but ``partial`` is written."""
    dtype = np.dtype(dtype)
    key = ("direction", direction, n_hyper, dtype, bool(parallel))

    def build():
        sums = _direction_sums(direction, dtype, False)

        def loop(w, g, s0, s1, table, chunks, partial):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    partial[c, 0], partial[c, 1] = sums(w, g, s0, s1, chunks[c, 0],
                                                        chunks[c, 1], hp)
        nb = NUMBA_TYPES[dtype]
        arr = nb[::1]
        sig = types.void(arr, jit.read_only(arr), arr, arr, nb[:, ::1], types.int64[:, ::1],
                         types.float64[:, ::1])
        return compile_kernel(sig, parallel)(loop)
    return cached(key, build)


def tensor_direction_kernel(direction, n_hyper: int, dtype, parallel: bool, g16=False):
    """``loop(w, g, s0, s1, hpa) -> (sum w^2, sum u^2)`` of one tensor in one call: the sums of
    :func:`direction_kernel` over chunks of :data:`DIRECTION_CHUNK` elements (in parallel),
    added in chunk order from 0.0 as :func:`run_direction` adds them, so the same numbers, bit
    for bit, without the tables and the second call. ``g16``: a float16 gradient (as uint16
    bits) of a float32 master, widened on load instead of copied."""
    dtype = np.dtype(dtype)
    key = ("tensor-direction", direction, n_hyper, dtype, bool(parallel), bool(g16))

    def build():
        sums = _direction_sums(direction, dtype, bool(g16))
        chunk = DIRECTION_CHUNK

        def loop(w, g, s0, s1, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            n = w.shape[0]
            nc = (n + chunk - 1) // chunk
            partial = np.empty((nc, 2))
            for c in prange(nc):
                a = c * chunk
                partial[c, 0], partial[c, 1] = sums(w, g, s0, s1, a, min(a + chunk, n), hp)
            return _chunk_totals(partial)
        nb = NUMBA_TYPES[dtype]
        arr = nb[::1]
        sig = types.UniTuple(types.float64, 2)(
            arr, jit.read_only(types.uint16[::1] if g16 else arr), arr, arr, arr)
        return compile_kernel(sig, parallel)(loop)
    return cached(key, build)


def run_direction(direction, w, g, states, table, chunks, out):
    """Pass 1 of a two-pass step over flat buffers (:func:`direction_kernel`; ``states``: two
    arrays, read only): ``out[s] = (sum w^2, sum u^2)`` of every active segment.
    ``table``: the ``(active, *hp)`` rows in the arrays' dtype; ``chunks``: their
    :func:`toolkit.backends.order.chunk_table` with :data:`DIRECTION_CHUNK`."""
    if len(states) != 2:
        raise ValueError(f"a direction pass takes two state arrays, got {len(states)}")
    partial = np.zeros((chunks.shape[0], 2))
    parallel = w.shape[0] >= jit.PARALLEL_THRESHOLD and chunks.shape[0] > 1
    # direction_kernel's own key, looked up first: a compiled kernel without the call
    kernel = KERNELS.get(("direction", direction, table.shape[1] - 1, w.dtype, parallel))
    if kernel is None:
        kernel = direction_kernel(direction, table.shape[1] - 1, w.dtype, parallel)
    try:
        kernel(w, g, states[0], states[1], table, chunks, partial)
    except TypeError:
        call_readonly(kernel, w, g, states[0], states[1], table, chunks, partial)
    sum_partials(chunks, partial, out)


def direction_norms(direction, w, g, states, hyper):
    """Pass 1 of a two-pass step over one flat tensor (:func:`tensor_direction_kernel`; one
    call, parallel from :data:`PARALLEL_THRESHOLD`): ``(sum w^2, sum u^2)``, the numbers
    :func:`run_direction` gives for the tensor as one segment. ``g`` may be float16 for a
    float32 ``w`` (widened on load)."""
    if len(states) != 2:
        raise ValueError(f"a direction pass takes two state arrays, got {len(states)}")
    dtype = w.dtype
    hpa = np.array(hyper, dtype)
    g16 = g.dtype.char == "e" and dtype.char != "e"
    key = (direction, hpa.shape[0], dtype, w.shape[0] >= jit.PARALLEL_THRESHOLD, g16)
    kernel = _tensor_directions.get(key)  # a cheap key: this runs on every LAMB step
    if kernel is None:
        kernel = _tensor_directions[key] = tensor_direction_kernel(*key)
    args = (w, g.view(np.uint16) if g16 else g, states[0], states[1], hpa)
    try:
        return kernel(*args)
    except TypeError:
        return call_readonly(kernel, *args)


_tensor_directions: dict = {}
