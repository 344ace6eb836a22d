"""``state_dtype``: every optimizer whose spec names its moments, stepped on the CPU with them
held in bfloat16 or 8-bit blockwise codes, against the oracle code for code
(``toolkit.held_bounds.held_step_errors``: ``reference.lowbit.step`` on Tracked inputs; a held
value may differ from the oracle's only where the oracle finds a rounding within its bound could
hold it otherwise, and those are counted); the reference backend equal to ``reference.lowbit``
exactly; the state's form; the refusals, each before anything is written.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from reference import lowbit as ref_lowbit
from toolkit import Parameter, Trainer
from toolkit.backends import lowbit
from toolkit.held_bounds import held_form, held_step_errors
from toolkit.optimizer import create, specs
from toolkit.optimizers.held import INT8_MIN_SIZE
from toolkit.sparse import RowSparse

HELD = {name: spec for name, spec in specs(oracle=True).items() if spec.moments}
SHAPE = (40, 130)  # 5200 elements: 20 blocks of 256 and a short one of 80


def _configs(spec):
    """The spec's fixed configurations that switch every slot on, each once."""
    out = []
    for extra in ({},) + tuple(spec.trainer) + tuple(spec.layouts):
        kw = {**spec.record, **extra}
        if kw not in out:
            out.append(kw)
    return out


def _cases():
    """Per held optimizer, each convention with the configuration that keeps the most slots
    (what the held kernel adds to a rule is the same for every rule: loads, stores, blocks;
    each is compiled once per rule, about a second, so a case per configuration would cost
    CI minutes for no new path)."""
    out = []
    for name, spec in HELD.items():
        for convention in spec.conventions:
            made = []
            for kw in _configs(spec):
                try:
                    opt = create(name, convention=convention, **kw)
                except ValueError:  # a flag the convention does not have (AMSGrad in mxnet)
                    continue
                made.append((len(opt.state_slots()), kw))
            out.append((name, convention, max(made, key=lambda m: m[0])[1]))
    return out


CASES = _cases()
#: the int8 cases a run takes: every optimizer and convention in the ``thorough`` hypothesis
#: profile; in CI (its time is budgeted: an int8 kernel compiles in about 3 s) each
#: optimizer's first convention and every one of Adam's (the held kernel adds the same loads,
#: stores and blocks to every rule; a rule itself is proven per convention elsewhere)
THOROUGH = os.environ.get("TOOLKIT_HYPOTHESIS_PROFILE", "ci") == "thorough"
INT8_CASES = CASES if THOROUGH else [
    c for c in CASES if c[0] == "adam" or c[1] == HELD[c[0]].conventions[0]]


def _grads(rng, steps, dtype):
    """Gradients over eight decades with exact zeros; the last step's is tiny everywhere but
    one block (a block maximum far above the rest)."""
    out = []
    for _ in range(steps):
        g = rng.standard_normal(SHAPE) * 10.0 ** rng.uniform(-5, 3, SHAPE)
        g[rng.random(SHAPE) < 0.05] = 0.0
        out.append(g.astype(dtype))
    out[-1] = out[-1] * 1e-6
    out[-1][3, :] *= 1e6
    return out


def _check_steps(name, convention, kw, state_dtype, dtype, steps=3, seed=0, **held):
    rng = np.random.default_rng(seed)
    opt = create(name, convention=convention, state_dtype=state_dtype, **held, **kw)
    w = rng.standard_normal(SHAPE).astype(dtype)
    state = opt.create_state(0, w)
    exempt = checked = 0
    for g in _grads(rng, steps, dtype):
        errors = held_step_errors(opt, 0, w, g, state)
        for out, (worst, n, ex) in errors.items():
            assert worst <= 1.0, (out, worst)
            if out in opt.moment_signs():
                exempt, checked = exempt + ex, checked + n
    return exempt, checked


@pytest.mark.parametrize("name,convention,kw", INT8_CASES,
                         ids=[f"{n}-{c}" for n, c, _ in INT8_CASES])
def test_int8_steps_are_the_oracles_code_for_code(name, convention, kw):
    """float32 weights, every held optimizer and convention: the weight within the bound,
    every code the oracle's but for counted possible flips, and those rare (measured: at most 1
    of 46,800 codes)."""
    exempt, checked = _check_steps(name, convention, kw, "int8", np.float32)
    assert exempt <= 0.001 * checked, (exempt, checked)


@pytest.mark.parametrize("name", sorted(HELD))
def test_bfloat16_steps_are_the_oracles_value_for_value(name):
    """The same with bfloat16 moments (each optimizer's first convention): a bfloat16 value
    keeps 8 bits, so a float32 error bound more often straddles a rounding boundary; the
    possible flips stay a small minority, else the check would check little (measured: 1.1%
    of Adam's values, 2.3% of centered RMSProp's, none of them an actual difference)."""
    name, convention, kw = next(c for c in CASES if c[0] == name)
    exempt, checked = _check_steps(name, convention, kw, "bfloat16", np.float32)
    assert exempt <= 0.05 * checked, (exempt, checked)


@pytest.mark.parametrize("name", ["adam", "rmsprop"])  # 2 and 3 slots (1: SGD's, below)
def test_stochastically_rounded_bfloat16_steps_are_the_oracles(name):
    """``state_rounding="stochastic"``: the oracle rounds with the same random bits
    (``reference.lowbit.rounding_bits`` of the step's key, slot by slot) and agrees value for
    value but for counted possible flips, as to nearest."""
    name, convention, kw = next(c for c in CASES if c[0] == name)
    exempt, checked = _check_steps(name, convention, kw, "bfloat16", np.float32,
                                   state_rounding="stochastic", state_seed=11)
    assert exempt <= 0.05 * checked, (exempt, checked)


def test_stochastic_rounding_is_reproducible_from_its_seed_and_unbiased():
    """The same seed, index and step round alike; another seed or index otherwise; and the
    rounding is unbiased: a momentum of a constant gradient held stochastically averages to
    the float32 one where to-nearest rounding is stuck a constant away."""
    def run(seed, index, rounding="stochastic", steps=1):
        opt = create("sgd", momentum=0.5, learning_rate=0.1, state_dtype="bfloat16",
                     state_rounding=rounding, state_seed=seed)
        w = np.zeros(SHAPE, np.float32)
        mom = opt.create_state(index, w)
        for _ in range(steps):
            opt.update(index, w, np.ones(SHAPE, np.float32), mom)
        return held_form(mom)
    a, b = run(5, 0), run(5, 0)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, run(6, 0)) and not np.array_equal(a, run(5, 1))
    # the new momentum -lr*g = float32(-0.1) lies between two bfloat16 values, 0.8 of the way
    # from the smaller magnitude: to nearest always the larger one
    exact = np.float64(np.float32(-0.1))
    nearest, stochastic = run(5, 0, "nearest"), a
    assert np.unique(nearest).size == 1 and np.unique(stochastic).size == 2
    assert abs(stochastic.astype(np.float64).mean() - exact) < \
        0.1 * abs(nearest.astype(np.float64).mean() - exact)


@pytest.mark.parametrize("name,state_dtype", [("rmsprop", "int8"), ("rmsprop", "float32"),
                                              ("adam", "bfloat16")])
def test_float64_weights_hold_their_moments_from_float32(name, state_dtype):
    """A float64 weight's held moments are its float64 values rounded to float32, then held."""
    spec = HELD[name]
    kw = _configs(spec)[-1]
    _check_steps(name, spec.conventions[0], kw, state_dtype, np.float64)


@pytest.mark.parametrize("state_dtype", ["int8", "bfloat16", "stochastic"])
def test_the_reference_backend_is_reference_lowbit(state_dtype):
    """backend="reference" holds the oracle's float64 moments as ``reference.lowbit.hold``
    holds them, exactly."""
    from reference import adam
    rng = np.random.default_rng(3)
    stochastic = state_dtype == "stochastic"
    if stochastic:
        state_dtype = "bfloat16"
    opt = create("adam", convention="guide", state_dtype=state_dtype, backend="reference",
                 learning_rate=0.01, state_rounding="stochastic" if stochastic else "nearest")
    w = rng.standard_normal(SHAPE).astype(np.float32)
    state = opt.create_state(0, w)
    signs = {"mean": True, "var": False}
    held = {k: held_form(s) for k, s in zip(("mean", "var"), state)}
    w_ref = w.astype(np.float64)
    for t, g in enumerate(_grads(rng, 3, np.float32), start=1):
        key = opt.rounding_key(0, t)
        bits = None if key is None else {k: ref_lowbit.rounding_bits(key, w.size, j)
                                         for j, k in enumerate(signs)}
        out, held, _, _ = ref_lowbit.step(adam, w_ref.astype(np.float32).astype(np.float64),
                                          g.astype(np.float64), held,
                                          state_dtype=state_dtype, signs=signs, t=t, lr=0.01,
                                          convention="guide", bits=bits)
        opt.update(0, w, g, state)
        w_ref = out
        assert np.array_equal(w, out.astype(np.float32))
        for k, s in zip(("mean", "var"), state):
            mine = held_form(s)
            if state_dtype == "int8":
                assert np.array_equal(mine[0], held[k][0]) and \
                    np.array_equal(mine[1], held[k][1])
            else:
                assert np.array_equal(mine, held[k], equal_nan=True)


def test_the_state_s_form():
    w = np.zeros(SHAPE, np.float32)
    m, v = create("adam", state_dtype="int8").create_state(0, w)
    assert type(m) is lowbit.Quantized and m.qmap is lowbit.SIGNED and v.qmap is lowbit.UNSIGNED
    assert m.codes.shape == SHAPE and m.codes.dtype == np.uint8
    assert m.absmax.shape == (21,) and m.absmax.dtype == np.float32
    assert np.all(lowbit.dequantize(m) == 0) and np.all(lowbit.dequantize(v) == 0)
    m, v = create("adam", state_dtype="bfloat16").create_state(0, w)
    assert m.dtype == lowbit.BFLOAT16 and m.shape == SHAPE
    (n,) = create("rmsprop", state_dtype="float32").create_state(0, w.astype(np.float64))
    assert n.dtype == np.float32
    # below the size int8 holds: the default state
    small = np.zeros(INT8_MIN_SIZE - 1, np.float32)
    m, v = create("adam", state_dtype="int8").create_state(0, small)
    assert type(m) is np.ndarray and m.dtype == np.float32
    # a single-slot state is the slot itself
    mom = create("sgd", momentum=0.9, state_dtype="int8").create_state(0, w)
    assert type(mom) is lowbit.Quantized


def _untouched(opt, w, g, state, error, match):
    before = (w.copy(), [held_form(s) for s in opt.state_arrays(state)])
    with pytest.raises(error, match=match):
        opt.update(0, w, g, state)
    assert np.array_equal(w, before[0])
    for s, b in zip(opt.state_arrays(state), before[1]):
        a = held_form(s)
        assert all(np.array_equal(x, y) for x, y in zip(a, b)) if isinstance(a, tuple) else \
            np.array_equal(a, b)


def test_refusals_leave_everything_as_it_was():
    w = np.ones(SHAPE, np.float32)
    g = np.ones(SHAPE, np.float32)
    opt = create("adam", state_dtype="int8")
    m, v = opt.create_state(0, w)
    _untouched(opt, w, g, (v, m), ValueError, "qmap is not the signed")
    short = lowbit.Quantized(m.codes, m.absmax[:-1], m.qmap)
    _untouched(opt, w, g, (short, v), ValueError, r"absmax must be float32 of shape \(21,\)")
    _untouched(opt, w, g, (np.zeros_like(w), v), TypeError, "must be a toolkit.backends")
    _untouched(opt, w, g, (m, lowbit.Quantized(m.codes, v.absmax, v.qmap)), ValueError,
               "shares memory")
    f_order = np.asfortranarray(w)
    with pytest.raises(ValueError, match="C order"):
        opt.update(0, f_order, np.asfortranarray(g), (m, v))
    rs = RowSparse(np.array([1]), np.ones((1, SHAPE[1]), np.float32), SHAPE)
    _untouched(create("adam", state_dtype="bfloat16", lazy_update=True), w, rs,
               create("adam", state_dtype="bfloat16").create_state(0, w), NotImplementedError,
               "row-sparse")


def test_what_cannot_hold_its_states_low_says_so():
    with pytest.raises(ValueError, match="no element-wise moments.*adam"):
        create("adafactor", state_dtype="int8")
    with pytest.raises(ValueError, match="state_dtype must be one of"):
        create("adam", state_dtype="float16")
    with pytest.raises(ValueError, match="rounds bfloat16 states"):
        create("adam", state_dtype="int8", state_rounding="stochastic")
    with pytest.raises(ValueError, match="state_seed"):
        create("adam", state_dtype="bfloat16", state_rounding="stochastic", state_seed=-1)
    opt = create("adam", state_dtype="int8")
    opt.create_state(0, np.zeros(SHAPE, np.float32))
    with pytest.raises(ValueError, match="state_dtype cannot change"):
        opt.state_dtype = "bfloat16"
    # a Trainer holds them on the CPU, for float32 and float64 weights, in one process
    with pytest.raises(TypeError, match="parameter 'h' is float16"):
        Trainer([Parameter("w", shape=(4,)), Parameter("h", shape=(4,), dtype="float16")],
                "adam", {"state_dtype": "int8"})
    with pytest.raises(NotImplementedError, match="distributed kvstore"):
        Trainer([Parameter("w", shape=(4,))], "adam", {"state_dtype": "bfloat16"},
                kvstore="dist_sync")
    with pytest.raises(NotImplementedError, match="row-sparse"):
        Trainer([Parameter("w", shape=(4,), grad_stype="row_sparse")], "adam",
                {"state_dtype": "bfloat16"})
    mp = create("adam", state_dtype="bfloat16", multi_precision=True)
    with pytest.raises(NotImplementedError, match="master copy"):
        mp.create_state_multi_precision(0, np.zeros(SHAPE, np.float16))
    with pytest.raises(TypeError, match="float32 and float64 weights"):
        create("adam", state_dtype="bfloat16").create_state(0, np.zeros(SHAPE, np.float16))


def test_a_0d_weight_holds_its_moments_in_bfloat16():
    """A scalar weight (0-d) with bfloat16 moments: made and stepped like any other, against
    the oracle (int8 keeps its default state: one element is below the int8 size)."""
    opt = create("adam", state_dtype="bfloat16", learning_rate=0.1)
    w = np.array(0.5, np.float32)
    state = opt.create_state(0, w)
    assert state[0].shape == () and state[0].dtype == lowbit.BFLOAT16
    for g in (0.25, -3.0, 1e-3):
        errors = held_step_errors(opt, 0, w, np.array(g, np.float32), state)
        assert all(worst <= 1.0 for worst, _, _ in errors.values()), errors


def test_copied_and_pickled_int8_states_step_as_the_originals():
    """``copy.deepcopy`` and pickle of an int8 state (a user's checkpoint): independent arrays,
    the map the module's own object, and the next step the same as the original's."""
    import copy
    import pickle
    opt = create("adam", state_dtype="int8")
    w = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    g = np.full(SHAPE, 0.1, np.float32)
    state = opt.create_state(0, w)
    opt.update(0, w, g, state)
    results = []
    for copied in (copy.deepcopy(state), pickle.loads(pickle.dumps(state)), state):
        assert copied[0].qmap is lowbit.SIGNED and copied[1].qmap is lowbit.UNSIGNED
        assert copied is state or not np.shares_memory(copied[0].codes, state[0].codes)
        w2 = w.copy()
        create("adam", state_dtype="int8").update(0, w2, g, copied)
        results.append((w2, held_form(copied[0]), held_form(copied[1])))
    for r in results[:2]:
        assert np.array_equal(r[0], results[2][0])
        assert all(np.array_equal(a, b) for x, y in zip(r[1:], results[2][1:])
                   for a, b in zip(x, y))


@pytest.mark.parametrize("state_dtype", ["bfloat16", "float32"])
def test_f_ordered_weights_hold_their_moments_in_their_memory_order(state_dtype):
    """A Fortran-ordered (or transposed) weight takes bfloat16 and float32 moments laid out as
    it is (``create_state`` made them in C order, which ``update`` then refused), and steps as
    a C-ordered copy of it does, bit for bit."""
    rng = np.random.default_rng(3)
    for make in (np.asfortranarray, lambda a: np.ascontiguousarray(a.T).T):
        w = make(rng.standard_normal((80, 70)).astype(np.float32))
        c = np.ascontiguousarray(w)
        opt = create("adam", learning_rate=0.1, state_dtype=state_dtype)
        twin = create("adam", learning_rate=0.1, state_dtype=state_dtype)
        s, sc = opt.create_state(0, w), twin.create_state(0, c)
        assert all(a.flags.f_contiguous for a in s)
        for _ in range(2):
            g = rng.standard_normal(w.shape).astype(np.float32)
            opt.update(0, w, np.asfortranarray(g), s)
            twin.update(0, c, g, sc)
        assert np.array_equal(w, c)
        for a, b in zip(s, sc):
            assert np.array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))
