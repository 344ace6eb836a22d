"""The factored kernel kind (``toolkit.backends.cpu_factored``, its work and orders
``toolkit.backends.factored_layout``): its reduction orders, bit for bit
against numpy written from the documented orders, through a probe rule that writes each sum
where it can be read (the rows', the columns', the matrices' denominators, the whole tensor's
sums of ``w^2`` and ``u^2``); above one chunk (2^20 elements) too, where torch's single-row order
stops and the chunks' sums are added in order; and one segmented call over many weights equal
to each weight's own call."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from toolkit.backends import cpu_factored as cf
from toolkit.backends import factored_layout as fl

CHUNK = fl.CHUNK
#: (running sums, elements of a chunk of the whole-tensor sums: None for the first pass's work
#: items, :func:`first_pass_item`) per dtype
ORDER = {np.float64: (4, fl.CHUNK), np.float32: (64, None)}
#: what the probe's update writes into every weight element
WRITES_SW, WRITES_SU, WRITES_DEN = 0.0, 1.0, 2.0


def probe(f):
    """A factored rule that hands the kernel's sums back: the row and column statistics are
    their sums of squares, a vector's moment its gradient, ``u`` the gradient (or, with mode
    ``WRITES_DEN``, its matrix's denominator), and the update writes ``sum w^2``, ``sum u^2``
    or ``u`` by the row's mode."""
    def prep(g, hp):
        return g

    def stat(s, x0, count, hp):
        return f(s)

    def moment(old, st, hp):
        return st

    def vstat(g, hp):
        return g

    def den(s, n, hp):
        return f(s)

    def estimate(r, c, d, hp):
        return d

    def direction(g, v, hp):
        return v if hp[0] == 2.0 else g

    def scales(sw, w0, su, u0, numel, root, hp):
        return sw, su

    def apply(w, u, decay, k, hp):
        if hp[0] == 0.0:
            return f(decay)
        if hp[0] == 1.0:
            return f(k)
        return u
    return cf.FactoredRule(prep, stat, moment, vstat, den, estimate, direction, scales, apply)


# --- the documented orders, in numpy --------------------------------------------------------
def fma(a, b, c):
    return float(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def row_order(x, lanes=4):
    """A row's sum of squares in float64: element k of the first len - len % lanes into running
    sum k % lanes (s + x*x, two roundings), the sums added left to right, then fma(x, x, s) for
    the rest."""
    x = np.asarray(x, np.float64).reshape(-1)
    full = x.size - x.size % lanes
    sums = [float(np.cumsum(x[j:full:lanes] ** 2)[-1]) if full else 0.0 for j in range(lanes)]
    s = sums[0]
    for t in sums[1:]:
        s = s + t
    for v in x[full:]:
        s = fma(v, v, s)
    return s


def cascade(x):
    """torch's cascade_sum of a contiguous float64 row (aten/src/ATen/native/cpu/SumKernel.cpp):
    4-wide vectors, four partials of interleaved vectors with four levels of carries every
    2^max(4, ceil(log2(k))//4) of them, the leftover vectors into partial 0, the partials added
    left to right; then 0 + the scalar tail, then + each lane."""
    x = [float(v) for v in np.asarray(x, np.float64).reshape(-1)]
    if len(x) < 4:
        s = 0.0
        for v in x:
            s = s + v
        return 0.0 + s
    vecs = [np.array(x[4 * i:4 * i + 4]) for i in range(len(x) // 4)]
    k = len(vecs) // 4
    power = max(4, (1 if k <= 2 else (k - 1).bit_length()) // 4)
    step = 1 << power
    acc = [[np.zeros(4) for _ in range(4)] for _ in range(4)]  # [level][partial]
    i = 0
    while i + step <= k:
        for _ in range(step):
            for j in range(4):
                acc[0][j] = acc[0][j] + vecs[4 * i + j]
            i += 1
        for lev in range(1, 4):
            for j in range(4):
                acc[lev][j] = acc[lev][j] + acc[lev - 1][j]
                acc[lev - 1][j] = np.zeros(4)
            if i & ((step - 1) << (lev * power)):
                break
    while i < k:
        for j in range(4):
            acc[0][j] = acc[0][j] + vecs[4 * i + j]
        i += 1
    for lev in range(1, 4):
        for j in range(4):
            acc[0][j] = acc[0][j] + acc[lev][j]
    for v in vecs[4 * k:]:
        acc[0][0] = acc[0][0] + v
    p = ((acc[0][0] + acc[0][1]) + acc[0][2]) + acc[0][3]
    s = 0.0
    for v in x[len(vecs) * 4:]:
        s = s + v
    for v in p:
        s = s + float(v)
    return 0.0 + s


def first_pass_item(shape):
    """The elements of a work item of the first pass over a weight of ``shape``, each a chunk
    of float32's whole-tensor sums: ``WORK`` of a vector or of one-element matrices; as many
    whole matrices of fewer than 4 rows and columns as fit in ``WORK`` (3 x 3: in blocks of
    16), and of other matrices up to ``SMALL`` elements; as many whole rows of a larger one
    (at least one of each)."""
    _, n, m = fl.shape_of(shape)
    if m == 0 or n * m == 1:
        return fl.WORK
    if n == m == 3:
        return fl.WORK // 9 // 16 * 16 * 9
    if (n < 4 and m < 4) or n * m <= fl.SMALL:
        return max(1, fl.WORK // (n * m)) * n * m
    return max(1, fl.WORK // m) * m


def whole_order(x, m, lanes=4, chunk=CHUNK):
    """The whole tensor's sum: chunks of whole rows of m (at most ``chunk`` elements), each in
    the row order, added in order."""
    x = np.asarray(x, np.float64).reshape(-1)
    per = max(1, chunk // max(m, 1)) * max(m, 1)
    parts = [row_order(x[a:a + per], lanes) for a in range(0, x.size, per)]
    s = parts[0]
    for p in parts[1:]:
        s = s + p
    return s


def run(shape, mode, w, g):
    lay = fl.layout_of(tuple(shape))
    r, c, v = (np.zeros(k, w.dtype) for k in (lay.r_size, lay.c_size, lay.v_size))
    w = w.copy()
    table = np.array([[1.0, mode]])
    cf.run_segmented(probe, w.reshape(-1), g.reshape(-1), (r, c, v), table, lay)
    return w, r, c, v


#: above one float64 chunk, cascade carries (300 rows), one column, one row, tiny matrices
#: (stepped many at once), a vector above one float64 chunk, 1 x 1 matrices
SHAPES = [(1100, 1000), (3, 300, 7), (2, 5, 1), (1, 9), (7, 3), (5, 3, 2), (4097,), (CHUNK + 5,),
          (3,), (70000, 1, 1), (40, 1000), (2000, 3, 3), (30, 700, 3)]


#: float32 above one work item of its first pass with the last four; the two largest shapes,
#: there for
#: float64's chunk of 2^20, in float64 only (their numpy orders take seconds)
CASES = [(s, np.float64) for s in SHAPES] + [(s, np.float32) for s in SHAPES
                                              if np.prod(s) < CHUNK]


@pytest.mark.parametrize("shape, dtype", CASES, ids=lambda x: getattr(x, "__name__", str(x)))
def test_the_sums_are_the_documented_orders(shape, dtype):
    """float64: torch's orders (4 running sums, chunks of 2^20); float32: the same orders with
    64 running sums and the whole tensors' sums in chunks of the first pass's work items, in
    float64, each sum rounded to float32 once where the probe stores it."""
    lanes, chunk = ORDER[dtype]
    chunk = chunk or first_pass_item(shape)
    rng = np.random.default_rng(sum(shape))
    w = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)).astype(dtype)
    g = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)).astype(dtype)
    B, n, m = fl.shape_of(shape)
    out, r, c, v = run(shape, WRITES_SW, w, g)
    assert np.all(out == dtype(whole_order(w, m, lanes, chunk)))
    out, *_ = run(shape, WRITES_SU, w, g)
    assert np.all(out == dtype(whole_order(g, m, lanes, chunk)))
    if m == 0:
        assert np.array_equal(v, g.reshape(-1))
        return
    mats = g.reshape(B, n, m).astype(np.float64)
    assert np.array_equal(r, np.array([row_order(row, lanes) for row in mats.reshape(-1, m)],
                                      dtype))
    if m == 1:
        cols = [row_order(mat[:, 0], lanes) for mat in mats]
    else:
        cols = np.cumsum(mats * mats, axis=1)[:, -1, :].reshape(-1)
    assert np.array_equal(c, np.asarray(cols, dtype))
    out, *_ = run(shape, WRITES_DEN, w, g)
    dens = np.array([cascade(rows) for rows in r.reshape(B, n)], dtype)
    assert np.array_equal(out.reshape(B, n * m), np.repeat(dens, n * m).reshape(B, n * m))


def test_one_segmented_call_equals_each_weight_alone():
    shapes = [(6, 5), (2, 3, 4), (7,), (), (1, 9), (300, 7)]
    rng = np.random.default_rng(3)
    ws = [np.asarray(rng.standard_normal(s)) for s in shapes]
    gs = [np.asarray(rng.standard_normal(s)) for s in shapes]
    lay = fl.FactoredLayout(shapes)
    for mode in (WRITES_SW, WRITES_SU, WRITES_DEN):
        w = np.concatenate([a.reshape(-1) for a in ws])
        g = np.concatenate([a.reshape(-1) for a in gs])
        states = (np.zeros(lay.r_size), np.zeros(lay.c_size), np.zeros(lay.v_size))
        table = np.tile([1.0, mode], (len(shapes), 1))
        table[3, 0] = 0.0  # the scalar is inactive: left as it is
        cf.run_segmented(probe, w, g, states, table, lay)
        start = 0
        for k, (shape, w0, g0) in enumerate(zip(shapes, ws, gs)):
            size = w0.size
            alone = w0.reshape(-1) if k == 3 else run(shape, mode, w0, g0)[0].reshape(-1)
            assert np.array_equal(w[start:start + size], alone), (mode, shape)
            start += size


def test_float32s_whole_tensor_sums_are_the_first_pass_items_in_float64(monkeypatch):
    """In float32 the first pass sums ``w^2`` and ``u^2`` over each of its work items
    (``FactoredLayout.fused``): every item's two float64 sums, as the kernel hands them to the
    scalars' pass, are the documented order over that item's elements (64 running sums, then
    fma), bit for bit, for every kind of segment and on either thread count."""
    from toolkit.optimizers.adafactor import Adafactor, pytorch_rule
    shapes = [(70000, 1, 1), (40, 1000), (30, 700, 3), (2000, 3, 3), (5, 3, 2), (4097,), (7,),
              (1, 1)]
    lay = fl.FactoredLayout(shapes)
    assert all(lay.fused_base[k] < lay.fused.shape[0] for k in ("elems", "tiny", "tiny33",
                                                                 "blocks", "rows"))
    rng = np.random.default_rng(11)
    seen = []
    real = cf.factored_kernel

    def spied(factory, name, n_hyper, dtype, parallel):
        kernel = real(factory, name, n_hyper, dtype, parallel)
        if name != "coef":
            return kernel
        return lambda w, u, seg, sums, table, part, roots, coef: (
            seen.append((w.copy(), u.copy(), sums.copy(), part.copy())),
            kernel(w, u, seg, sums, table, part, roots, coef))[1]
    monkeypatch.setattr(cf, "factored_kernel", spied)
    row = Adafactor().kernel_row(3, 1e-2, 0.0)[1]
    for threshold in (1 << 40, 1):  # one thread, then every pass parallel
        monkeypatch.setattr(cf.jit, "PARALLEL_THRESHOLD", threshold)
        w = (rng.standard_normal(lay.size) * 10.0 ** rng.uniform(-3, 3, lay.size)).astype(
            np.float32)
        g = (rng.standard_normal(lay.size) * 10.0 ** rng.uniform(-3, 3, lay.size)).astype(
            np.float32)
        states = tuple(np.zeros(k, np.float32) for k in (lay.r_size, lay.c_size, lay.v_size))
        cf.run_segmented(pytorch_rule, w, g, states, np.tile([1.0, *row], (len(shapes), 1)),
                         lay)
        w0, u, sums, part = seen.pop()
        assert np.array_equal(sums, lay.fused)
        for (s, a, z), (sw, su) in zip(sums, part):
            o = lay.seg[s, 0]
            assert (sw, su) == (row_order(w0[o + a:o + z], 64), row_order(u[o + a:o + z], 64)), \
                (shapes[s], a, z)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=lambda x: x.__name__)
def test_the_3x3_pass_equals_the_tiny_pass(dtype):
    """The 3 x 3 matrices' own pass (``cpu_factored_tiny.tiny33_pass_of``: whole blocks
    transposed by vector shuffles, a tail after them) steps them bit for bit as the pass of
    every tiny shape does, serial and parallel, for both of Adafactor's rules and the probe,
    with this machine's block size (``BLOCK33``) and, for torch's rule on one thread, every
    other (``BLOCKS33``), tails of 1 to 15 matrices after the last whole block."""
    from toolkit.backends.cpu_factored_tiny import BLOCK33, BLOCKS33
    from toolkit.optimizers.adafactor import Adafactor, paper_rule, pytorch_rule
    shapes = [(40, 3, 3), (5, 3, 3), (3, 3), (2000, 3, 3), (2, 4, 3, 3), (7, 3, 3), (15, 3, 3)]
    lay = fl.FactoredLayout(shapes)
    assert lay.tiny.shape[0] == 0 and lay.tiny33.shape[0] > len(shapes)
    per = fl.WORK // 9
    every = np.array([(s, a, min(B, a + per)) for s, (_, B, *_) in enumerate(lay.seg)
                      for a in range(0, B, per)], np.int64)  # the tiny pass's own work items
    rng = np.random.default_rng(9)
    g = (rng.standard_normal(lay.size) * 10.0 ** rng.uniform(-4, 2, lay.size)).astype(dtype)
    g[::29] = 0.0
    r0, c0 = (rng.uniform(0, 2, size).astype(dtype) for size in (lay.r_size, lay.c_size))
    r0[::11] = 0.0
    for convention, rule in (("pytorch", pytorch_rule), ("paper", paper_rule), (None, probe)):
        if convention is None:
            table = np.tile([1.0, WRITES_SU], (len(shapes), 1))
        else:
            opt = Adafactor(convention=convention, clip_gradient=0.5, rescale_grad=0.75)
            table = np.tile([1.0, *opt.kernel_row(4, 1e-2, 0.0)[1]], (len(shapes), 1))
        table[1, 0] = 0.0  # an inactive weight: left as it is
        nh = table.shape[1] - 1
        for parallel in (False, True) if convention == "pytorch" else (False,):
            outs = []
            # this machine's block everywhere, the other with torch's rule on one thread
            blocks = BLOCKS33 if convention == "pytorch" and not parallel else (BLOCK33,)
            for name, work, block in (("tiny", every, None),
                                      *(("tiny33", lay.tiny33, b) for b in blocks)):
                r, c, u = r0.copy(), c0.copy(), np.zeros(lay.size, dtype)
                w, part = np.zeros(lay.size, dtype), np.zeros((work.shape[0], 2))
                kernel = cf.factored_kernel(rule, name, nh, dtype, parallel,
                                            **({} if block is None else {"block33": block}))
                kernel(g, r, c, u, lay.seg, work, table, w, part, 0)
                outs.append((u, r, c))
            for out, block in zip(outs[1:], blocks):
                for a, b in zip(outs[0], out):
                    assert a.tobytes() == b.tobytes(), (convention, parallel, block)
