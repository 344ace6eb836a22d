"""The CPU kernels of rules with low-precision state slots (toolkit/backends/lowbit.py,
toolkit/backends/cpu_lowbit.py): the maps are the oracle's data, the table encoder is
``searchsorted`` everywhere it can be asked (a proof over every cell's ends and every
midpoint's neighbours), and ``run_held`` equals, bit for bit and code for code, widening the
slots, the float kernel, and rounding or quantizing the new slots with the oracle's
functions."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from reference import lowbit as ref
from toolkit.backends import cpu_elementwise, cpu_lowbit, lowbit
from toolkit.optimizers import adam, sgd

#: sha256 of the maps' float32 bytes (bitsandbytes 0.50.2's create_dynamic_map), for both
#: modules: the toolkit's copy must not drift from the oracle's
CHECKSUMS = {True: "e732639a65f497b4ad684bb166a4467708255edd5207757de8b8f0c7e1fda89c",
             False: "305f002cc11278fb769d13b25b9fd0c7c83c8402c40a878fe086f4039fde6398"}

MAPS = {True: lowbit.SIGNED, False: lowbit.UNSIGNED}


def _bits(a):
    a = np.asarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _same(a, b):
    """Bit for bit (NaNs included)."""
    return a.shape == b.shape and np.array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("signed", [True, False])
def test_the_maps_are_the_oracles(signed):
    m = MAPS[signed]
    assert m.dtype == np.float32 and m.shape == (256,) and not m.flags.writeable
    assert hashlib.sha256(m.tobytes()).hexdigest() == CHECKSUMS[signed]
    assert hashlib.sha256(ref.code_map(signed).tobytes()).hexdigest() == CHECKSUMS[signed]


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("n", [1, 255, 256, 257, 5000])
def test_quantize_and_dequantize_are_the_oracles(signed, n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 10.0 ** rng.uniform(-45, 38, n)).astype(np.float32)
    x[::13] = 0.0
    if n > 300:
        x[3], x[280], x[400] = np.nan, np.inf, -np.inf
    x = x if signed else np.abs(x)
    q = lowbit.quantize(x, MAPS[signed])
    codes, absmax = ref.quantize(x, signed)
    assert _same(q.codes, codes) and _same(q.absmax, absmax) and q.qmap is MAPS[signed]
    assert _same(lowbit.dequantize(q), ref.dequantize(codes, absmax, signed))


def test_quantize_refuses_another_map():
    with pytest.raises(ValueError, match="SIGNED or UNSIGNED"):
        lowbit.quantize(np.zeros(3), lowbit.SIGNED.copy())


def _proof_points(enc, qmap):
    """Every cell's lowest and highest float32, every midpoint with its float32 neighbours,
    and the special values."""
    mid = lowbit.midpoints(qmap)
    c = np.arange(enc.cells, dtype=np.int64)
    small = lowbit.LOW_BITS + (c << enc.shift)
    small[0] = 0
    large = np.minimum(lowbit.LOW_BITS + ((c + 1) << enc.shift) - 1, lowbit.ONE_BITS)
    ends = np.concatenate([small, large]).astype(np.uint32)
    ends = np.concatenate([ends, ends | np.uint32(0x80000000)]).view(np.float32)
    near = np.concatenate([mid, np.nextafter(mid, np.float32(-2)),
                           np.nextafter(mid, np.float32(2))])
    special = np.array([0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1.1754944e-38, np.nan],
                       np.float32)
    return np.concatenate([ends, near, -near, special]).astype(np.float32)


@pytest.mark.parametrize("signed", [True, False])
def test_the_table_encoder_is_searchsorted(signed):
    """The proof of :func:`lowbit.encoder`: at every cell's two ends (the monotone code is
    then right in between, with at most K thresholds crossed) and at every midpoint and its
    neighbours, plus 2 million random values over every binade, the numpy encoder and the
    compiled one (the kernels') give ``searchsorted(mid, s, side="left")``, 255 for NaN."""
    qmap = MAPS[signed]
    enc = lowbit.encoder(qmap)
    mid = lowbit.midpoints(qmap)
    rng = np.random.default_rng(7)
    n = 2_000_000
    rand = (rng.uniform(-1, 1, n) * 2.0 ** -rng.integers(0, 40, n)).astype(np.float32)
    for s in (_proof_points(enc, qmap), rand):
        want = np.where(np.isnan(s), 255, np.searchsorted(mid, s, side="left"))
        assert np.array_equal(lowbit.encode(s, enc), want)
        codes = np.empty(s.size, np.uint8)
        cpu_lowbit.encode_kernel(qmap)(s, codes)
        assert np.array_equal(codes, want)
    # K: the thresholds every cell keeps, from the tables (no cell crosses more)
    assert enc.thr.shape == (1, 2 * enc.cells)


@pytest.mark.parametrize("signed", [True, False])
def test_the_packed_encoder_is_searchsorted(signed):
    """The proof of :func:`lowbit.packed` (the kernels' encoder, one lookup a code): its
    cells are the table encoder's (every cell's ends, every midpoint and its neighbours prove
    it as above), and its numpy form gives ``searchsorted`` there and on every float32 whose
    high 16 bits are a midpoint's (all 65,536 low halves: the compare of the low halves is
    the whole argument), 255 for NaN; the compiled encoder is checked in the test above."""
    qmap = MAPS[signed]
    table = lowbit.packed(qmap)
    mid = lowbit.midpoints(qmap)
    assert table.dtype == np.uint32 and not table.flags.writeable
    high = np.unique(mid.view(np.uint32) >> 16).astype(np.uint32)
    low = np.arange(1 << 16, dtype=np.uint32)
    cells = ((high[:, None] << np.uint32(16)) | low).reshape(-1).view(np.float32)
    for s in (_proof_points(lowbit.encoder(qmap), qmap), cells):
        want = np.where(np.isnan(s), 255, np.searchsorted(mid, s, side="left"))
        assert np.array_equal(lowbit.encode_packed(s, table), want)


# --------------------------------------------------------------------------------------------
# run_held against the composition: widen, float kernel, round or quantize with the oracle
# --------------------------------------------------------------------------------------------
ADAM = (0.001, 0.01, 1.0, -1.0, 0.9, 0.1, 0.999, 0.001, 1e-8)          # MxnetRow
ADAM_CLIP = (0.01, 0.0, 0.5, 3.0, 0.9, 0.1, 0.999, 0.001, 1e-6)
TORCH_ADAM = (1.0, 0.0, 1.0, -1.0, 0.1, 0.999, 0.001, 1e-8, 0.0316, -0.001)  # PytorchRow
SGD_MOM = tuple(sgd.MxnetMomentumRow(lr=0.1, lrwd=0.001, rescale=1.0, clip_bound=-1.0, mu=0.9,
                                     lrrs=0.1))
#: (factory, hyper, the slots' signs: True a first moment, False a second)
RULES = {"mxnet": (adam.mxnet_rule, ADAM, (True, False)),
         "mxnet-clip": (adam.mxnet_rule, ADAM_CLIP, (True, False)),
         "pytorch": (adam.pytorch_rule, TORCH_ADAM, (True, False)),
         "amsgrad": (adam.pytorch_amsgrad_rule, TORCH_ADAM, (True, False, False)),
         "sgd-momentum": (sgd.mxnet_momentum_rule, SGD_MOM, (True,))}


def _grad(rng, n, dtype):
    g = (rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 2, n)).astype(dtype)
    g[::11] = 0.0
    if n > 2:
        g[1], g[-1] = 3e35, 1e-40
    if n > 600:
        g[300], g[555] = np.nan, np.inf     # a NaN in one block, an inf in another
    return g


def _slots(rng, n, kinds, signs):
    """The held slots (kinds "plain", "bfloat16", "int8") of moments of plausible sizes."""
    out = []
    for kind, signed in zip(kinds, signs):
        x = (rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 0, n)).astype(np.float32)
        x = x if signed else x * x
        x[::7] = 0.0
        if kind == "int8":
            out.append(lowbit.quantize(x, MAPS[signed]))
        elif kind == "bfloat16":
            out.append(x.astype(lowbit.BFLOAT16))
        else:
            out.append(x)
    return out


def _expected(factory, w, g, held, hyper, signs, dtype, key=None):
    """The composition: each slot widened exactly (to ``dtype``), the float kernel, each new
    slot rounded to float32 and held again with the oracle's functions."""
    values = []
    for h in held:
        if isinstance(h, lowbit.Quantized):
            values.append(lowbit.dequantize(h).astype(dtype))
        elif h.dtype == lowbit.BFLOAT16:
            values.append(h.astype(np.float32).astype(dtype))
        else:
            values.append(h.astype(dtype).copy())
    w = w.copy()
    cpu_elementwise.run_elementwise(factory, w, g, tuple(values), hyper)
    new = []
    for j, (h, v, signed) in enumerate(zip(held, values, signs)):
        if isinstance(h, lowbit.Quantized):
            with np.errstate(over="ignore"):
                codes, absmax = ref.quantize(v.astype(np.float32), signed)
            new.append(lowbit.Quantized(codes, absmax, h.qmap))
        elif h.dtype == lowbit.BFLOAT16:
            if key is None:  # the oracle's nearest bfloat16; a NaN stored as 0xFFFF
                r = ref.bfloat16(v)
                bits = r.astype(lowbit.BFLOAT16).view(np.uint16)
                bits[np.isnan(r)] = 0xFFFF
            else:
                bits = lowbit.bfloat16_stochastic(v, key, j)
            new.append(bits.view(lowbit.BFLOAT16))
        else:
            new.append(v)
    return w, new


def _check(factory, hyper, signs, kinds, n, dtype, seed, key=None):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3, n)).astype(dtype)
    g = _grad(rng, n, dtype)
    held = _slots(rng, n, kinds, signs)
    held = [h if k != "plain" else h.astype(dtype) for h, k in zip(held, kinds)]
    want_w, want = _expected(factory, w, g, held, hyper, signs, dtype, key)
    cpu_lowbit.run_held(factory, w, g, tuple(held), hyper, key=key)
    assert _same(w, want_w), (kinds, n, dtype)
    for j, (h, e) in enumerate(zip(held, want)):
        if isinstance(h, lowbit.Quantized):
            assert _same(h.codes, e.codes), (j, kinds, n, np.flatnonzero(h.codes != e.codes))
            assert _same(h.absmax, e.absmax), (j, kinds, n)
        else:
            assert _same(h, e), (j, kinds, n)


SIZES = [1, 255, 256, 257, 5000]
#: (rule, slot kind, dtype, whether the parallel kernel (2**15 + 3 elements) runs too): each
#: kernel compiles in a second or two, so the cases are chosen, not crossed
CASES = [("mxnet", "int8", np.float32, True), ("mxnet", "int8", np.float64, False),
         ("mxnet", "bfloat16", np.float32, True), ("mxnet", "bfloat16", np.float64, False),
         ("mxnet", "plain", np.float32, False), ("amsgrad", "int8", np.float32, False),
         ("sgd-momentum", "int8", np.float64, True), ("sgd-momentum", "bfloat16", np.float32,
                                                      False)]


@pytest.mark.parametrize("rule, kind, dtype, parallel", CASES)
def test_held_step_is_the_composition(rule, kind, dtype, parallel):
    factory, hyper, signs = RULES[rule]
    for n in SIZES + [2 ** 15 + 3] * parallel:
        _check(factory, hyper, signs, (kind,) * len(signs), n, dtype, n)


@pytest.mark.parametrize("rule", ["mxnet-clip", "pytorch"])
def test_other_rules_int8(rule):
    factory, hyper, signs = RULES[rule]
    _check(factory, hyper, signs, ("int8",) * len(signs), 5000, np.float32, 2)


def test_mixed_slot_kinds_in_one_call():
    factory, hyper, signs = RULES["amsgrad"]
    _check(factory, hyper, signs, ("int8", "bfloat16", "plain"), 2 ** 15 + 3, np.float32, 3)
    _check(factory, hyper, signs, ("plain", "int8", "bfloat16"), 5000, np.float64, 4)


def test_zero_and_nonfinite_states():
    """Blocks of zeros (absmax 0), a state that becomes inf or NaN, subnormal moments."""
    factory, hyper, signs = RULES["mxnet"]
    n = 1000
    w = np.ones(n, np.float32)
    g = np.zeros(n, np.float32)
    g[600], g[700], g[900] = np.inf, np.nan, 1e-30
    m = lowbit.quantize(np.zeros(n, np.float32), lowbit.SIGNED)
    v = lowbit.quantize(np.full(n, 1e-41, np.float32), lowbit.UNSIGNED)
    want_w, want = _expected(factory, w, g, [m, v], hyper, signs, np.float32)
    cpu_lowbit.run_held(factory, w, g, (m, v), hyper)
    assert _same(w, want_w)
    for h, e in zip((m, v), want):
        assert _same(h.codes, e.codes) and _same(h.absmax, e.absmax)
    assert np.isnan(m.absmax[2]) and np.all(m.codes[512:768] == 255)


def test_stochastic_rounding_is_the_counter_based_bits():
    """bfloat16 slots rounded stochastically: each slot's 16 bits of ``mix(key + i)`` added to
    the float32 bits, then truncated; the mean error of many keys is near zero where nearest
    rounding's is not."""
    factory, hyper, signs = RULES["amsgrad"]
    _check(factory, hyper, signs, ("bfloat16", "bfloat16", "int8"), 5000, np.float32, 5,
           key=0x1234_5678_9ABC_DEF0)
    x = np.full(1 << 16, np.float32(1.0) + np.float32(2 ** -10), np.float32)  # 1/8 of a gap
    up = np.mean(lowbit.bfloat16_stochastic(x, 99, 1).view(lowbit.BFLOAT16).astype(np.float64))
    assert abs(up - float(x[0])) < 2e-5


def test_refusals_write_nothing():
    factory, hyper, _ = RULES["mxnet"]
    n = 600
    rng = np.random.default_rng(0)
    w, g = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    m = lowbit.quantize(rng.standard_normal(n), lowbit.SIGNED)
    v = lowbit.quantize(np.abs(rng.standard_normal(n)), lowbit.UNSIGNED)
    before = [a.copy() for a in (w, m.codes, m.absmax, v.codes, v.absmax)]
    bad = [
        ((w, g, (m.replace(qmap=lowbit.SIGNED.copy()), v)), "SIGNED or UNSIGNED"),
        ((w, g, (m, np.zeros(n, np.float64))), "state slot"),
        ((w, g.astype(np.float64), (m, v)), "grad"),
        ((w[::2], g[::2], (m, v)), "weight"),
        ((w, g, (m.replace(codes=m.codes[:-1]), v)), "elements"),
        ((w, g, (m.replace(absmax=m.absmax[:-1]), v)), "absmax"),
        ((w, g, (m, m)), "share memory"),
        ((w, g, (m, np.zeros(n, np.float16))), "state slot"),
        ((w, g, (m, v, m, v)), "1 to 3"),
        ((w, g, ()), "1 to 3"),
    ]
    ro = m.codes.copy()
    ro.flags.writeable = False
    bad.append(((w, g, (m.replace(codes=ro), v)), "writeable"))
    for args, match in bad:
        with pytest.raises(ValueError, match=match):
            cpu_lowbit.run_held(factory, *args, hyper)
    with pytest.raises(ValueError, match="key"):
        cpu_lowbit.run_held(factory, w, g, (m, v), hyper, key=-1)
    for a, b in zip((w, m.codes, m.absmax, v.codes, v.absmax), before):
        assert _same(a, b)


def test_a_read_only_gradient_is_taken():
    factory, hyper, signs = RULES["mxnet"]
    rng = np.random.default_rng(1)
    n = 300
    w, g = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    g.flags.writeable = False
    held = _slots(rng, n, ("int8", "int8"), signs)
    want_w, want = _expected(factory, w, g, held, hyper, signs, np.float32)
    cpu_lowbit.run_held(factory, w, g, tuple(held), hyper)
    assert _same(w, want_w) and _same(held[0].codes, want[0].codes)


def _step_case(rng, n, kinds, signs, dtype):
    w = (rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3, n)).astype(dtype)
    held = _slots(rng, n, kinds, signs)
    return w, _grad(rng, n, dtype), [h if k != "plain" else h.astype(dtype)
                                     for h, k in zip(held, kinds)]


def _copy_slot(h):
    return h.replace(codes=h.codes.copy(), absmax=h.absmax.copy()) \
        if isinstance(h, lowbit.Quantized) else h.copy()


def test_many_steps_in_one_call_equal_each_alone():
    """``run_held_many``: steps of many sizes (an empty one, short blocks, a parallel one,
    several whose sum alone passes the parallel threshold), of two slot kinds and two
    rounding keys, each with its own row, equal each step run alone bit for bit and code for
    code; one kernel call per distinct (kinds, dtype, row length, rounding)."""
    factory, hyper, signs = RULES["mxnet"]
    rng = np.random.default_rng(11)
    sizes = [0, 1, 255, 257, 5000, 2 ** 15 + 3, 9000, 9001, 12000]
    kinds = [("int8", "int8"), ("plain", "plain"), ("int8", "int8"), ("bfloat16", "bfloat16")]
    steps, alone = [], []
    for j, n in enumerate(sizes):
        kind = kinds[j % len(kinds)]
        w, g, held = _step_case(rng, n, kind, signs, np.float32)
        row = tuple(h * (1 + 0.25 * j) for h in hyper)
        key = None if j % 3 else 1000 + j
        steps.append((w, g, tuple(held), row, key))
        alone.append((w.copy(), g, tuple(_copy_slot(h) for h in held), row, key))
    calls = cpu_lowbit.run_held_many(factory, steps)
    # int8 (a key changes nothing there) | plain | bfloat16 nearest | bfloat16 stochastic
    assert calls == 4
    for (w, _, held, _, _), (w1, g1, held1, row, key) in zip(steps, alone):
        cpu_lowbit.run_held(factory, w1, g1, held1, row, key=key)
        assert _same(w, w1)
        for h, h1 in zip(held, held1):
            if isinstance(h, lowbit.Quantized):
                assert _same(h.codes, h1.codes) and _same(h.absmax, h1.absmax)
            else:
                assert _same(h, h1)


def test_many_steps_refuse_before_writing_anything():
    """A bad step anywhere, or two steps writing the same memory, writes nothing at all."""
    factory, hyper, signs = RULES["mxnet"]
    rng = np.random.default_rng(12)
    a = _step_case(rng, 5000, ("int8", "int8"), signs, np.float32)
    b = _step_case(rng, 600, ("int8", "int8"), signs, np.float32)
    c = _step_case(rng, 600, ("int8", "int8"), signs, np.float32)
    first = [(x[0], x[1], tuple(x[2]), hyper, None) for x in (a, b)]
    written = (a[0], a[2][0].codes, a[2][1].absmax, b[0], b[2][0].codes, b[2][1].absmax)
    before = [x.copy() for x in written]
    bad_c = (c[0], c[1], (c[2][0].replace(absmax=c[2][0].absmax[:-1]), c[2][1]), hyper, None)
    shared = (c[0], c[1], (b[2][0], c[2][1]), hyper, None)   # b's first slot again
    weight_twice = (a[0][:600], c[1], tuple(c[2]), hyper, None)
    for bad, match in ((bad_c, "absmax"), (shared, "share memory"),
                       (weight_twice, "share memory")):
        with pytest.raises(ValueError, match=match):
            cpu_lowbit.run_held_many(factory, first + [bad])
        assert all(_same(x, y) for x, y in zip(written, before))


def test_steps_from_a_generator_keep_their_temporaries_alive():
    """Steps given by a generator whose gradients are temporaries (64 MiB each: the allocator
    returns such blocks to the system when freed, so a read after that crashes): the call keeps
    every array it reads until its kernels return."""
    factory, hyper, signs = RULES["mxnet"]
    n = 1 << 24
    weights = [np.zeros(n, np.float32) for _ in range(2)]
    held = [[lowbit.quantize(np.zeros(n, np.float32), MAPS[s]) for s in signs]
            for _ in range(2)]

    def steps():
        for w, h in zip(weights, held):
            yield w, np.full(n, 0.5, np.float32), tuple(h), hyper, None
    cpu_lowbit.run_held_many(factory, steps())
    want = np.zeros(8, np.float32)
    cpu_lowbit.run_held(factory, want, np.full(8, 0.5, np.float32),
                        tuple(lowbit.quantize(np.zeros(8, np.float32), MAPS[s]) for s in signs),
                        hyper)
    assert all(np.all(w == want[0]) for w in weights)


def test_a_gradient_written_by_another_step_is_refused():
    factory, hyper, signs = RULES["mxnet"]
    rng = np.random.default_rng(13)
    a = _step_case(rng, 600, ("int8", "int8"), signs, np.float32)
    b = _step_case(rng, 600, ("int8", "int8"), signs, np.float32)
    before = [x.copy() for x in (a[0], b[0])]
    with pytest.raises(ValueError, match="the gradient of step 1 of the call shares memory "
                                         "with a weight or a state slot that step 0 of the "
                                         "call writes"):
        cpu_lowbit.run_held_many(factory, [(a[0], a[1], tuple(a[2]), hyper, None),
                                           (b[0], a[0], tuple(b[2]), hyper, None)])
    assert _same(a[0], before[0]) and _same(b[0], before[1])
    # a step's gradient may be read by another step too (only reads)
    cpu_lowbit.run_held_many(factory, [(a[0], a[1], tuple(a[2]), hyper, None),
                                       (b[0], a[1], tuple(b[2]), hyper, None)])


def test_held_kernels_pickle_by_name_for_the_disk_cache():
    """numba's on-disk cache keys a kernel by the pickled bytes of its closure: an intrinsic or
    a dispatcher in it (reached from the slot functions, pickled by value) pickles a
    per-process id, and every process then compiled the int8 kernels again (an intrinsic
    called directly by the encoder did). The table lookup is a plain function with an
    overload, pickled by name (the same kernel as the composition test's: no compile)."""
    from numba.core.serialize import dumps
    factory, hyper, _ = RULES["mxnet"]
    kernel = cpu_lowbit.held_kernel(factory, ("signed", "unsigned"), len(hyper), np.float32,
                                    False)
    blob = dumps(tuple(c.cell_contents for c in kernel.py_func.__closure__))
    assert b"_Intrinsic" not in blob and b"Dispatcher" not in blob
