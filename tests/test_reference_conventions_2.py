"""The reference modules nadam, signum, lbsgd, dcasgd, ftrl, ftml and sgld: hand-computed steps in
both conventions, the convention relations of docs/conventions.md (agreements and asserted
differences), Tracked inputs, purity and state layout, and MXNet 1.9.1 parity on the golden data.

Agreement "within rounding" is decided rigorously: both conventions are run on
``reference.error_bound.Tracked`` float64 inputs, so each result carries a bound on its own
rounding error; two evaluations of the same exact quantity differ by at most the sum of the two
bounds (elements flagged as near ties of a branch are exempt). A *difference* is asserted when it
exceeds that sum.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

import mxnet_data
from reference import dcasgd, ftml, ftrl, lbsgd, nadam, sgld, signum  # checked against the registry by tests/test_reference_conventions_1.py::test_modules_share_the_recorded_optimizers
from reference.error_bound import Tracked, error, ties, track, unit_roundoff, value
from toolkit.optimizer import registry

#: this file's share of the optimizers MXNet 1.9.1 ran through tests/data/mxnet/generate.py
#: (tests/test_reference_conventions_1.py tests the others and checks the two shares)
MODULES = {m.NAME: m for m in (  # checked against the registry by tests/test_reference_conventions_1.py::test_modules_share_the_recorded_optimizers
    nadam, signum, lbsgd, dcasgd, ftrl, ftml, sgld)}
F64 = np.float64


# ------------------------------------------------------------------------------------------------
# strategies
# ------------------------------------------------------------------------------------------------

def decades(lo, hi):
    return st.floats(lo, hi).map(lambda e: float(10.0 ** e))


def unit(lo, hi):
    return st.floats(lo, hi)


@st.composite
def arrays(draw, n, lo=-6, hi=3, zeros=True):
    """n values with random signs, magnitudes over 10**lo..10**hi, some exact zeros."""
    exps = np.array(draw(st.lists(st.floats(lo, hi), min_size=n, max_size=n)))
    signs = np.array(draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=n, max_size=n)))
    x = signs * 10.0 ** exps
    if zeros:
        mask = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        x[mask & (np.arange(n) % 2 == 0)] = 0.0
    return x


def f32r(x):
    return None if x is None else float(np.float32(x))


@st.composite
def commons(draw, clip=st.one_of(st.none(), st.just(0.0), decades(-3, 2)),
            wd=st.one_of(st.just(0.0), decades(-5, -1)),
            rs=st.one_of(st.just(1.0), decades(-2, 1)), f32_exact=False):
    c = {"lr": draw(decades(-4, 0)), "wd": draw(wd), "rescale_grad": draw(rs),
         "clip_gradient": draw(clip)}
    if f32_exact:
        c = {k: f32r(v) for k, v in c.items()}
    return c


HYPERS = {  # checked against the registry by test_tables_cover_the_modules
    "nadam": st.fixed_dictionaries({
        "beta1": unit(0.0, 0.99), "beta2": unit(0.5, 0.9999), "epsilon": decades(-10, -3),
        "schedule_decay": st.one_of(st.just(0.004), unit(0.0, 0.1))}),
    "signum": st.one_of(
        st.fixed_dictionaries({"momentum": st.just(0.0)}),
        st.fixed_dictionaries({"momentum": unit(0.05, 0.99),
                               "wd_lh": st.one_of(st.just(0.0), decades(-4, -1))})),
    "lbsgd": st.fixed_dictionaries({
        "momentum": st.one_of(st.just(0.0), unit(0.1, 0.95)),
        "warmup_strategy": st.sampled_from(["linear", "power2", "sqrt", "lars", "other"]),
        "warmup_epochs": st.integers(0, 3), "batch_scale": st.integers(1, 4),
        "updates_per_epoch": st.integers(1, 4), "begin_epoch": st.integers(0, 2)}),
    "dcasgd": st.fixed_dictionaries({"momentum": st.one_of(st.just(0.0), unit(0.1, 0.95)),
                                     "lamda": st.one_of(st.just(0.0), st.just(0.04),
                                                        decades(-3, 1))}),
    "ftrl": st.fixed_dictionaries({"lamda1": st.one_of(st.just(0.0), decades(-4, 1)),
                                   "beta": decades(-2, 1)}),
    "ftml": st.fixed_dictionaries({"beta1": unit(0.05, 0.95), "beta2": unit(0.3, 0.9999),
                                   "epsilon": decades(-10, -3)}),
    "sgld": st.just({}),
}


@st.composite
def problems(draw, name, steps=(3, 10), **common_kw):
    n = draw(st.integers(1, 6))
    w0 = draw(arrays(n, -3, 2))
    grads = [draw(arrays(n, -6, 3)) for _ in range(draw(st.integers(*steps)))]
    hyper = draw(HYPERS[name])
    common = draw(commons(**common_kw))
    return w0, grads, hyper, common


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------

def _wrap(x, dtype):
    if isinstance(x, Tracked):
        return x
    if isinstance(x, np.ndarray):
        return track(x, dtype)
    return x


def trajectory(mod, w0, grads, hyper, common, *, convention, hyper_f32=False, tracked=None,
               state0=None, t0=0, extra_per_step=None, **extra):
    """[(w, state)] after each step; with ``tracked`` (a dtype) every input is Tracked and the
    error bound accumulates along the trajectory."""
    w = w0 if tracked is None else track(w0, tracked)
    state = mod.init_state(w0, **hyper) if state0 is None else state0
    if tracked is not None:
        state = {k: _wrap(v, tracked) for k, v in state.items()}
    out = []
    lr = common["lr"]
    rest = {k: v for k, v in common.items() if k != "lr"}
    for k, g in enumerate(grads):
        gg = g if tracked is None else track(g, tracked)
        kw = dict(extra)
        if extra_per_step is not None:
            kw.update(extra_per_step[k])
        w, state = mod.step(w, gg, state, t=t0 + k + 1, lr=lr, convention=convention,
                            hyper_f32=hyper_f32, **rest, **hyper, **kw)
        out.append((w, state))
    return out


def agree(a, b, what=""):
    """Assert two Tracked results are the same exact quantity up to their rounding bounds."""
    va, vb = value(a), value(b)
    tie = ties(a) | ties(b)
    bound = error(a) + error(b)
    both_nan = np.isnan(va) & np.isnan(vb)
    bad = ~(np.abs(va - vb) <= bound) & ~tie & ~both_nan
    assert not np.any(bad), (f"{what}: differ beyond rounding at {np.flatnonzero(bad)}: "
                             f"{va[bad]} vs {vb[bad]} (bound {bound[bad]})")


def differ(a, b):
    """True where two Tracked results differ by more than their rounding bounds (no tie)."""
    va, vb = value(a), value(b)
    return (np.abs(va - vb) > error(a) + error(b)) & ~(ties(a) | ties(b))


def run_plain(mod, w, g, state, **kw):
    return mod.step(np.array(w, dtype=F64), np.array(g, dtype=F64), state, **kw)


# ------------------------------------------------------------------------------------------------
# interface, purity, state layout, Tracked (all seven)
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_interface(name):
    mod = MODULES[name]
    assert mod.NAME == name
    assert isinstance(mod.STATE, tuple) and isinstance(mod.HYPER, dict)
    w = np.array([1.0, -2.0, 0.5])
    with pytest.raises(TypeError, match="bogus"):
        mod.step(w, w, mod.init_state(w), t=1, lr=0.1, bogus=1.0)
    with pytest.raises(TypeError, match="bogus"):
        mod.init_state(w, bogus=1)
    with pytest.raises(TypeError, match="bogus"):
        mod.state_slots(bogus=1)
    with pytest.raises(ValueError, match="convention"):
        mod.step(w, w, mod.init_state(w), t=1, lr=0.1, convention="bogus")
    if "pytorch" not in mod.CONVENTIONS:  # only where torch.optim has the optimizer
        with pytest.raises(ValueError, match="convention"):
            mod.step(w, w, mod.init_state(w), t=1, lr=0.1, convention="pytorch")
    for slot in mod.state_slots():
        assert slot in mod.STATE


def test_state_slots():
    assert nadam.state_slots() == ("m", "v")
    assert nadam.init_state(np.ones(2))["m_schedule"] == 1.0
    assert signum.state_slots() == ("mom",) and signum.state_slots(momentum=0.0) == ()
    assert lbsgd.state_slots() == () and lbsgd.state_slots(momentum=0.9) == ("mom",)
    s = lbsgd.init_state(np.ones(3), begin_epoch=2, updates_per_epoch=5)
    assert s["ncum"] == 10 and isinstance(s["ncum"], int) and s["cum"].dtype == F64
    assert dcasgd.state_slots() == ("w_prev",)
    assert dcasgd.state_slots(momentum=0.5) == ("mom", "w_prev")
    w = np.array([1.0, -3.0], dtype=np.float32)
    s = dcasgd.init_state(w)
    assert s["w_prev"].dtype == F64 and np.array_equal(s["w_prev"], w)
    assert not np.shares_memory(s["w_prev"], w)
    assert ftrl.state_slots() == ("z", "n") and ftml.state_slots() == ("d", "v", "z")
    assert sgld.state_slots() == () and sgld.init_state(np.ones(2)) == {}


def _check_pure_step(mod, w, g, state, kw):
    w_c, g_c = w.copy(), g.copy()
    st_c = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()}
    w_new, s_new = mod.step(w, g, state, **kw)
    assert np.array_equal(w, w_c, equal_nan=True) and np.array_equal(g, g_c, equal_nan=True)
    assert state.keys() == st_c.keys()
    for k in state:
        if isinstance(state[k], np.ndarray):
            assert np.array_equal(state[k], st_c[k], equal_nan=True), k
        else:
            assert state[k] == st_c[k]
    assert isinstance(w_new, np.ndarray) and w_new.dtype == F64 and w_new.shape == w.shape
    for arr in (w, g, *[v for v in state.values() if isinstance(v, np.ndarray)]):
        assert not np.shares_memory(w_new, arr)
    assert set(s_new) == set(state)
    for k, v in s_new.items():
        if isinstance(v, np.ndarray):
            assert v.dtype == F64 and v.shape == w.shape, k
            for arr in (w, g, *[x for x in state.values() if isinstance(x, np.ndarray)]):
                assert not np.shares_memory(v, arr), k
    return w_new, s_new


#: (optimizer, convention) pairs that step: nadam refuses convention="guide" (its guide form
#: needs the gradient at two points), which test_nadam_guide_refused_for_drawn_problems checks
STEPPING = [(name, convention) for name in sorted(MODULES) for convention in ("mxnet", "guide")
            if (name, convention) != ("nadam", "guide")]


@pytest.mark.parametrize("name, convention", STEPPING)
@given(data=st.data())
def test_purity_and_state_layout(name, convention, data):
    mod = MODULES[name]
    w0, grads, hyper, common = data.draw(problems(name, steps=(2, 4)))
    state = mod.init_state(w0, **hyper)
    expected = set(mod.state_slots(**hyper)) | {"nadam": {"m_schedule"},
                                               "lbsgd": {"cum", "ncum"}}.get(name, set())
    assert set(state) == expected
    for k in mod.state_slots(**hyper):
        assert state[k].dtype == F64 and state[k].shape == w0.shape
    w = w0.astype(np.float32).astype(F64)  # exercise a float32-origin array too
    rest = {k: v for k, v in common.items() if k != "lr"}
    for k, g in enumerate(grads):
        kw = dict(t=k + 1, lr=common["lr"], convention=convention, **rest, **hyper)
        w, state = _check_pure_step(mod, w, g, state, kw)


@pytest.mark.parametrize("name, convention", STEPPING)
@pytest.mark.parametrize("hyper_f32", [True, False])
@given(data=st.data())
def test_tracked_inputs_same_values(name, convention, hyper_f32, data):
    """(c): step runs on Tracked inputs and yields the plain run's values, bit for bit."""
    mod = MODULES[name]
    w0, grads, hyper, common = data.draw(problems(name, steps=(3, 8)))
    plain = trajectory(mod, w0, grads, hyper, common, convention=convention, hyper_f32=hyper_f32)
    trk = trajectory(mod, w0, grads, hyper, common, convention=convention, hyper_f32=hyper_f32,
                     tracked=np.float32)
    for k, ((wp, sp), (wt, stt)) in enumerate(zip(plain, trk)):
        assert isinstance(wt, Tracked)
        assert np.array_equal(wp, value(wt), equal_nan=True), f"weight, step {k + 1}"
        assert np.all(error(wt)[np.isfinite(value(wt))] >= 0)
        for key in sp:
            if isinstance(sp[key], np.ndarray):
                assert np.array_equal(sp[key], value(stt[key]), equal_nan=True), (key, k + 1)
            else:
                assert sp[key] == stt[key], (key, k + 1)


def test_tracked_bound_is_meaningful():
    """The Tracked bound covers a float32 evaluation of the same step (FTRL, one step)."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal(200).astype(np.float32)
    g = (rng.standard_normal(200) * 3).astype(np.float32)
    n = np.abs(rng.standard_normal(200)).astype(np.float32)
    z = rng.standard_normal(200).astype(np.float32)
    tw, ts = ftrl.step(track(w, np.float32), track(g, np.float32),
                       {"z": track(z, np.float32), "n": track(n, np.float32)},
                       t=1, lr=0.5, lamda1=0.25, beta=1.0, hyper_f32=True)
    f = np.float32
    lr, l1, beta = f(0.5), f(0.25), f(1.0)
    z32 = z + (g - ((np.sqrt(n + g * g) - np.sqrt(n)) * w) / lr)
    n32 = n + g * g
    w32 = ((np.sign(z32) * l1 - z32) / ((beta + np.sqrt(n32)) / lr + f(0))) * (np.abs(z32) > l1)
    for r, x in ((tw, w32), (ts["z"], z32), (ts["n"], n32)):
        ok = (np.abs(value(r) - x.astype(F64)) <= error(r)) | ties(r)
        assert ok.all()
    assert np.max(error(tw)) > 0


@pytest.mark.parametrize("x", [1e-45, 3e-44, 1e-40, 0.9, 1.0 - 1e-9])
def test_a_constant_formed_in_float32_is_bounded_as_a_tracked_constant(x):
    """``formed_in`` (the ``constants_in_dtype`` variant's constants) bounds the rounding of
    ``x`` to float32 as Tracked bounds a float constant: ``u*|x|`` plus the smallest subnormal,
    so a constant below float32's range (1e-45 rounds to 1.4e-45) is covered."""
    from reference._util import formed_in
    like = track(np.float32(0.0), np.float32)
    c = formed_in(x, like)
    assert abs(float(np.float32(x)) - x) <= float(error(c))
    assert float(error(c)) == like.u * x + float(np.finfo(np.float32).smallest_subnormal)
    assert float(error(formed_in(0.0, like))) == 0.0 and formed_in(x, 1.0) == x


# ------------------------------------------------------------------------------------------------
# Nadam
# ------------------------------------------------------------------------------------------------

def test_nadam_hand_first_step():
    """First step from zero state, by hand: (1-mu1)*g_hat = g, v_hat = g^2 (exactly in reals),
    so w1 = w0 - lr*(g + mu2*(1-beta1)*g/(1 - mu1*mu2))/(|g| + eps)."""
    w0 = np.array([1.0, -2.0, 0.5, 3.0])
    g = np.array([0.5, -4.0, 0.0, 1e-3])
    lr, b1, b2, eps, sd = 0.1, 0.9, 0.999, 1e-8, 0.004
    mu1 = b1 * (1 - 0.5 * 0.96 ** (1 * sd))
    mu2 = b1 * (1 - 0.5 * 0.96 ** (2 * sd))
    expect = w0 - lr * (g + mu2 * (1 - b1) * g / (1 - mu1 * mu2)) / (np.abs(g) + eps)
    w1, s1 = nadam.step(w0, g, nadam.init_state(w0), t=1, lr=lr)
    np.testing.assert_allclose(w1, expect, rtol=1e-14, atol=0)
    assert s1["m_schedule"] == mu1
    np.testing.assert_allclose(s1["m"], (1 - b1) * g, rtol=1e-15)
    np.testing.assert_allclose(s1["v"], (1 - b2) * g * g, rtol=1e-15)
    # wd before clipping, python-op gating: clip_gradient=0.0 zeroes the gradient -> no move
    w1, _ = nadam.step(w0, g, nadam.init_state(w0), t=1, lr=lr, wd=0.5, clip_gradient=0.0)
    assert np.array_equal(w1, w0)
    # with wd and a clip: g = clip(rs*grad + wd*w, c) enters exactly like a raw gradient
    geff = np.clip(0.5 * g + 0.25 * w0, -0.5, 0.5)
    w1, _ = nadam.step(w0, g, nadam.init_state(w0), t=1, lr=lr, wd=0.25, rescale_grad=0.5,
                       clip_gradient=0.5)
    w1b, _ = nadam.step(w0, geff, nadam.init_state(w0), t=1, lr=lr)
    assert np.array_equal(w1, w1b)


def test_nadam_guide_refused():
    w = np.ones(3)
    with pytest.raises(NotImplementedError, match="two points"):
        nadam.step(w, w, nadam.init_state(w), t=1, lr=0.1, convention="guide")


@pytest.mark.parametrize("tracked", [None, np.float32], ids=["plain", "tracked"])
@pytest.mark.parametrize("hyper_f32", [True, False])
@given(data=st.data())
def test_nadam_guide_refused_for_drawn_problems(tracked, hyper_f32, data):
    """The cases STEPPING leaves out: nadam with convention="guide" refuses the problems the
    other tests draw, plain and Tracked, at its first step, and leaves its inputs unchanged."""
    w0, grads, hyper, common = data.draw(problems("nadam", steps=(2, 4)))
    w0_c, g0_c = w0.copy(), grads[0].copy()
    with pytest.raises(NotImplementedError, match="two points"):
        trajectory(nadam, w0, grads, hyper, common, convention="guide", hyper_f32=hyper_f32,
                   tracked=tracked)
    assert np.array_equal(w0, w0_c, equal_nan=True)
    assert np.array_equal(grads[0], g0_c, equal_nan=True)


def test_nadam_clip_bound_rounded_to_float32():
    """Python-op optimizer: only the clip bound is rounded (nd.clip takes float32 bounds)."""
    w0 = np.array([0.0])
    g = np.array([5.0])
    c = 0.1  # not float32-representable
    kw = dict(t=1, lr=0.3, epsilon=1.0)    # a large epsilon makes the step depend on |g|
    a, _ = nadam.step(w0, g, nadam.init_state(w0), clip_gradient=c, hyper_f32=True, **kw)
    b, _ = nadam.step(w0, g, nadam.init_state(w0), clip_gradient=c, hyper_f32=False, **kw)
    c32, _ = nadam.step(w0, g, nadam.init_state(w0), clip_gradient=f32r(c), hyper_f32=False,
                        **kw)
    assert np.array_equal(a, c32) and not np.array_equal(a, b)
    # lr is NOT rounded for a Python-op optimizer
    a, _ = nadam.step(np.array([1.0]), np.array([2.0]), nadam.init_state(w0), t=1, lr=0.1)
    b, _ = nadam.step(np.array([1.0]), np.array([2.0]), nadam.init_state(w0), t=1,
                      lr=f32r(0.1), hyper_f32=False)
    assert not np.array_equal(a, b)


# ------------------------------------------------------------------------------------------------
# Signum / SignSGD
# ------------------------------------------------------------------------------------------------

def test_signum_hand():
    w0 = np.array([1.0, -1.0, 2.0])
    g = np.array([4.0, 0.0, -0.5])
    kw = dict(t=1, lr=0.25, wd=0.5, rescale_grad=0.5, clip_gradient=1.0, momentum=0.5,
              wd_lh=0.25)
    # mxnet: clip(rs*g) = [1, 0, -0.25]; mom = -0.25*w - 0.5*clip = [-0.75, 0.25, -0.375]
    w1, s1 = signum.step(w0, g, signum.init_state(w0, momentum=0.5), **kw)
    assert np.array_equal(s1["mom"], [-0.75, 0.25, -0.375])
    assert np.array_equal(w1, [0.6875, -0.6875, 1.625])        # 0.9375*w + 0.25*sign(mom)
    # guide: G = clip + wd*w = [1.5, -0.5, 0.75]; v = 0.5*G = -mom
    w1g, s1g = signum.step(w0, g, signum.init_state(w0, momentum=0.5), convention="guide", **kw)
    assert np.array_equal(s1g["mom"], [0.75, -0.25, 0.375])
    assert np.array_equal(w1g, [0.6875, -0.6875, 1.625])
    # second step from those states
    g2 = np.array([-1.0, 3.0, 0.0])
    w2, s2 = signum.step(w1, g2, s1, **{**kw, "t": 2})
    clip2 = np.clip(0.5 * g2, -1, 1)
    mom2 = 0.5 * s1["mom"] - 0.25 * w1 - 0.5 * clip2
    assert np.array_equal(s2["mom"], mom2)
    assert np.array_equal(w2, 0.9375 * w1 + 0.25 * np.sign(mom2))


def test_signsgd_hand():
    w0 = np.array([1.0, -1.0, 2.0])
    g = np.array([4.0, 0.0, -0.5])
    kw = dict(t=1, lr=0.25, wd=0.5, rescale_grad=0.5, clip_gradient=1.0, momentum=0.0)
    w1, s1 = signum.step(w0, g, {}, **kw)
    assert s1 == {}
    assert np.array_equal(w1, [0.625, -0.875, 2.0])            # 0.875*w - 0.25*sign(g)
    w1g, _ = signum.step(w0, g, {}, convention="guide", **kw)
    assert np.array_equal(w1g, [0.75, -0.75, 1.75])            # w - 0.25*sign([1.5,-.5,.75])
    for conv in ("mxnet", "guide"):
        with pytest.raises(ValueError, match="wd_lh"):
            signum.step(w0, g, {}, **{**kw, "wd_lh": 0.1}, convention=conv)


def test_signsgd_mxnet_ignores_rescale_and_clip():
    w0 = np.array([1.0, -1.0, 2.0, 0.0])
    g = np.array([4.0, -1e-3, 0.0, 7.0])
    base, _ = signum.step(w0, g, {}, t=1, lr=0.1, wd=0.01, momentum=0.0)
    for rs, c in ((0.5, None), (-2.0, None), (0.0, None), (1.0, 0.0), (3.0, 1e-3)):
        w1, _ = signum.step(w0, g, {}, t=1, lr=0.1, wd=0.01, momentum=0.0, rescale_grad=rs,
                            clip_gradient=c)
        assert np.array_equal(w1, base)


@given(p=problems("signum", clip=st.one_of(st.none(), decades(-3, 2))))
def test_signum_conventions_agree(p):
    """Signum (momentum > 0): mxnet mom == -guide v, same weights, when clip is not 0."""
    w0, grads, hyper, common = p
    assume(hyper["momentum"] != 0)
    mx = trajectory(signum, w0, grads, hyper, common, convention="mxnet", tracked=F64)
    gd = trajectory(signum, w0, grads, hyper, common, convention="guide", tracked=F64)
    for k, ((wm, sm), (wg, sg)) in enumerate(zip(mx, gd)):
        agree(sm["mom"], -sg["mom"], f"mom step {k + 1}")
        agree(wm, wg, f"w step {k + 1}")


@given(p=problems("signum", wd=st.just(0.0), rs=decades(-2, 1),
                  clip=st.one_of(st.none(), decades(-3, 2))))
def test_signsgd_conventions_agree_without_wd(p):
    w0, grads, hyper, common = p
    hyper = {"momentum": 0.0}
    mx = trajectory(signum, w0, grads, hyper, common, convention="mxnet", tracked=F64)
    gd = trajectory(signum, w0, grads, hyper, common, convention="guide", tracked=F64)
    for k, ((wm, _), (wg, _)) in enumerate(zip(mx, gd)):
        agree(wm, wg, f"w step {k + 1}")


def test_signum_and_signsgd_differences():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal(16)
    grads = [rng.standard_normal(16) * 3 for _ in range(4)]
    # Signum, clip_gradient=0: off in MXNet's kernel gating, clip-to-zero in the guide
    hyper = {"momentum": 0.9}
    common = {"lr": 0.1, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": 0.0}
    mx = trajectory(signum, w0, grads, hyper, common, convention="mxnet", tracked=F64)
    gd = trajectory(signum, w0, grads, hyper, common, convention="guide", tracked=F64)
    # MXNet moves every element by lr; the guide's v is exactly 0 (a sign "tie" for Tracked,
    # hence checked on the values): no move at all
    assert np.all(np.abs(value(mx[0][0]) - w0) > 0.099)
    assert np.array_equal(value(gd[0][0]), w0)
    # SignSGD with wd: decoupled (MXNet) vs inside the sign (guide)
    hyper = {"momentum": 0.0}
    for common in ({"lr": 0.1, "wd": 0.5, "rescale_grad": 1.0, "clip_gradient": None},
                   {"lr": 0.1, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": 0.0},
                   {"lr": 0.1, "wd": 0.0, "rescale_grad": -1.0, "clip_gradient": None}):
        mx = trajectory(signum, w0, grads, hyper, common, convention="mxnet", tracked=F64)
        gd = trajectory(signum, w0, grads, hyper, common, convention="guide", tracked=F64)
        assert differ(mx[0][0], gd[0][0]).any(), common
    # Signum with wd_lh, wd: agree (wd enters both averages the same way)
    hyper = {"momentum": 0.9, "wd_lh": 0.01}
    common = {"lr": 0.1, "wd": 0.1, "rescale_grad": 0.5, "clip_gradient": 0.6}
    mx = trajectory(signum, w0, grads, hyper, common, convention="mxnet", tracked=F64)
    gd = trajectory(signum, w0, grads, hyper, common, convention="guide", tracked=F64)
    for (wm, _), (wg, _) in zip(mx, gd):
        agree(wm, wg)


def test_signum_hyper_rounding():
    """Kernel optimizer: lr, wd, rs, clip, momentum, wd_lh are rounded to float32."""
    w0 = np.array([0.3, -0.7])
    g = np.array([0.2, 0.1])
    kw = dict(t=1, lr=0.1, wd=0.1, rescale_grad=0.3, clip_gradient=0.7, momentum=0.9, wd_lh=0.1)
    a, sa = signum.step(w0, g, signum.init_state(w0), **kw)
    r = {k: (f32r(v) if isinstance(v, float) else v) for k, v in kw.items()}
    b, sb = signum.step(w0, g, signum.init_state(w0), hyper_f32=False, **r)
    c, sc = signum.step(w0, g, signum.init_state(w0), hyper_f32=False, **kw)
    assert np.array_equal(a, b) and np.array_equal(sa["mom"], sb["mom"])
    assert not np.array_equal(sa["mom"], sc["mom"])


# ------------------------------------------------------------------------------------------------
# LBSGD
# ------------------------------------------------------------------------------------------------

def test_lbmult_hand():
    kw = dict(warmup_epochs=2, updates_per_epoch=4, batch_scale=5)  # nwup = 8, M = 5
    assert lbsgd.lbmult(2, warmup_strategy="linear", **kw) == 1 + 4 * 2 / 8
    assert lbsgd.lbmult(2, warmup_strategy="power2", **kw) == 1 + 4 * 4 / 64
    assert lbsgd.lbmult(2, warmup_strategy="sqrt", **kw) == 1 + 4 * math.sqrt(0.25)
    assert lbsgd.lbmult(2, warmup_strategy="other", **kw) == 1.0
    assert lbsgd.lbmult(2, warmup_strategy="lars", **kw) == 1.0
    for s in ("linear", "power2", "sqrt", "other"):
        assert lbsgd.lbmult(8, warmup_strategy=s, **kw) == 5.0
        assert lbsgd.lbmult(100, warmup_strategy=s, **kw) == 5.0
        assert lbsgd.lbmult(0, warmup_strategy=s, warmup_epochs=1, updates_per_epoch=1,
                            batch_scale=5) == 1.0                 # nwup <= 1, nup < nwup
        assert lbsgd.lbmult(1, warmup_strategy=s, warmup_epochs=1, updates_per_epoch=1,
                            batch_scale=5) == 5.0                 # nup >= nwup comes first
        assert lbsgd.lbmult(0, warmup_strategy=s, warmup_epochs=0, updates_per_epoch=3,
                            batch_scale=3) == 3.0


def test_lars_mult_hand():
    w = np.array([3.0, 4.0])
    assert float(lbsgd.lars_mult(w, np.array([0.0, 1.0]), 0.0)) == pytest.approx(5.0, rel=1e-15)
    assert float(lbsgd.lars_mult(w, np.array([0.0, 1.0]), 0.04)) == pytest.approx(
        math.sqrt(25 / (1 + 1.0)), rel=1e-15)
    assert float(lbsgd.lars_mult(w, np.array([0.0, 1e-9]), 0.0)) == 100.0
    assert float(lbsgd.lars_mult(w, np.array([1e6, 0.0]), 0.0)) == 0.01
    assert float(lbsgd.lars_mult(np.zeros(2), np.zeros(2), 0.0)) == 0.01    # 0/(1e-18) -> 0
    tw = lbsgd.lars_mult(track(w, np.float32), track(np.array([0.0, 1.0]), np.float32), 0.0)
    assert isinstance(tw, Tracked) and float(value(tw)) == pytest.approx(5.0, rel=1e-15)


def test_lbsgd_hand():
    hyper = dict(batch_scale=2, warmup_strategy="linear", warmup_epochs=1, updates_per_epoch=4)
    w0 = np.array([1.0, 2.0])
    g1, g2 = np.array([2.0, -4.0]), np.array([6.0, 0.0])
    common = dict(lr=0.5, wd=0.25, rescale_grad=0.5)
    s0 = lbsgd.init_state(w0, **hyper)
    w1, s1 = lbsgd.step(w0, g1, s0, t=1, **common, **hyper)
    assert np.array_equal(w1, w0) and s1["ncum"] == 1 and np.array_equal(s1["cum"], g1)
    w2, s2 = lbsgd.step(w1, g2, s1, t=2, **common, **hyper)
    # gm = [4, -2], mult = 1 + 1*2/4 = 1.5, lr = 0.75: w = 0.8125*w - 0.375*gm
    assert np.array_equal(w2, [-0.6875, 2.375])
    assert s2["ncum"] == 2 and np.array_equal(s2["cum"], [0.0, 0.0])
    # guide: every call is an SGD step with lr*mult(ncum); mult(1) = 1.25
    w1g, s1g = lbsgd.step(w0, g1, s0, t=1, convention="guide", **common, **hyper)
    assert np.array_equal(w1g, [0.21875, 2.9375]) and s1g["ncum"] == 1
    assert np.array_equal(s1g["cum"], [0.0, 0.0])
    # with momentum: mom = momentum*mom - (lr*wd)*w - lr*rs*gm ; w = w + mom
    hm = dict(hyper, momentum=0.5)
    s0 = lbsgd.init_state(w0, **hm)
    _, s1 = lbsgd.step(w0, g1, s0, t=1, **common, **hm)
    assert np.array_equal(s1["mom"], [0.0, 0.0])
    w2, s2 = lbsgd.step(w0, g2, s1, t=2, **common, **hm)
    mom = 0.5 * 0 - 0.75 * 0.25 * w0 - 0.75 * 0.5 * np.array([4.0, -2.0])
    assert np.array_equal(s2["mom"], mom) and np.array_equal(w2, w0 + mom)
    # begin_epoch: the counter starts at begin_epoch*updates_per_epoch
    s = lbsgd.init_state(w0, begin_epoch=3, updates_per_epoch=4)
    _, s1 = lbsgd.step(w0, g1, s, t=1, lr=0.1, begin_epoch=3, updates_per_epoch=4)
    assert s1["ncum"] == 13


def test_lbsgd_lr_rounded_after_multiplier():
    """MXNet passes lr*mult to the kernel, which rounds the product to float32."""
    hyper = dict(batch_scale=3, warmup_strategy="sqrt", warmup_epochs=1, updates_per_epoch=7)
    w0 = np.array([0.3, -0.2])
    s = lbsgd.init_state(w0, **hyper)
    for k in range(3):
        w, s = lbsgd.step(w0, np.array([0.1, 0.7]), s, t=k + 1, lr=0.1, **hyper)
    mult = 1 + 2 * math.sqrt(3 / 7)
    lr_k = f32r(0.1 * mult)
    g = np.array([0.1, 0.7])
    gm = (((0.0 + g) + g) + g) / 3
    expect = (1.0 - lr_k * 0.0) * w0 - (lr_k * 1.0) * gm
    assert np.array_equal(w, expect)


@given(p=problems("lbsgd", clip=st.one_of(st.none(), decades(-3, 2))))
def test_lbsgd_conventions_agree_batch_scale_1(p):
    """batch_scale = 1: mult is 1 for the warmup strategies, and 'lars' is evaluated on the same
    gradient by both conventions, so they agree (clip not 0)."""
    w0, grads, hyper, common = p
    hyper = dict(hyper, batch_scale=1)
    mx = trajectory(lbsgd, w0, grads, hyper, common, convention="mxnet", tracked=F64)
    gd = trajectory(lbsgd, w0, grads, hyper, common, convention="guide", tracked=F64)
    for k, ((wm, sm), (wg, sg)) in enumerate(zip(mx, gd)):
        agree(wm, wg, f"w step {k + 1}")
        if "mom" in sm:
            agree(sm["mom"], sg["mom"], f"mom step {k + 1}")
        assert sm["ncum"] == sg["ncum"]


def test_lbsgd_differences():
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal(8)
    grads = [rng.standard_normal(8) for _ in range(6)]
    common = {"lr": 0.1, "wd": 0.01, "rescale_grad": 1.0, "clip_gradient": None}
    for hyper in ({"batch_scale": 2}, {"batch_scale": 2, "warmup_strategy": "lars"},
                  {"batch_scale": 3, "momentum": 0.9, "warmup_strategy": "sqrt"}):
        mx = trajectory(lbsgd, w0, grads, hyper, common, convention="mxnet", tracked=F64)
        gd = trajectory(lbsgd, w0, grads, hyper, common, convention="guide", tracked=F64)
        assert np.array_equal(value(mx[0][0]), w0)            # MXNet accumulates first
        assert differ(mx[0][0], gd[0][0]).all()
        assert differ(mx[-1][0], gd[-1][0]).any()
    # clip_gradient = 0: off for MXNet's kernel, clip-to-zero for the guide
    common = {"lr": 0.1, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": 0.0}
    mx = trajectory(lbsgd, w0, grads, {}, common, convention="mxnet", tracked=F64)
    gd = trajectory(lbsgd, w0, grads, {}, common, convention="guide", tracked=F64)
    assert differ(mx[0][0], gd[0][0]).all() and np.array_equal(value(gd[0][0]), w0)


# ------------------------------------------------------------------------------------------------
# DCASGD
# ------------------------------------------------------------------------------------------------

def test_dcasgd_hand():
    w0 = np.array([1.0, -2.0])
    kw = dict(lr=0.5, wd=0.25, lamda=0.5)
    s0 = dcasgd.init_state(w0)
    w1, s1 = dcasgd.step(w0, np.array([2.0, 1.0]), s0, t=1, **kw)
    assert np.array_equal(w1, [-0.125, -2.25]) and np.array_equal(s1["w_prev"], w0)
    w2, s2 = dcasgd.step(w1, np.array([1.0, -2.0]), s1, t=2, **kw)
    assert np.array_equal(w2, [-0.328125, -0.71875]) and np.array_equal(s2["w_prev"], w1)
    # momentum variant (MXNet's intent): mom = momentum*mom + step; w = w + mom
    s0 = dcasgd.init_state(w0, momentum=0.5)
    w1, s1 = dcasgd.step(w0, np.array([2.0, 1.0]), s0, t=1, momentum=0.5, **kw)
    assert np.array_equal(s1["mom"], [-1.125, -0.25]) and np.array_equal(w1, [-0.125, -2.25])
    w2, s2 = dcasgd.step(w1, np.array([1.0, -2.0]), s1, t=2, momentum=0.5, **kw)
    step2 = np.array([-0.203125, 1.53125])
    assert np.array_equal(s2["mom"], 0.5 * s1["mom"] + step2)
    assert np.array_equal(w2, w1 + 0.5 * s1["mom"] + step2)
    # guide with an explicit delayed weight: G = g + wd*w; w - lr*(G + lamda*G^2*(w - w_grad))
    G = np.array([1.0, -2.0]) + 0.25 * w1
    wg, sg = dcasgd.step(w1, np.array([1.0, -2.0]), s1 | {"mom": np.zeros(2)}, t=2,
                         convention="guide", w_grad=w0, momentum=0.5, **kw)
    assert np.allclose(wg, w1 - 0.5 * (G + 0.5 * G * G * (w1 - w0)), rtol=1e-15, atol=0)
    # guide default: no delay, no compensation (plain SGD step with wd)
    wg, _ = dcasgd.step(w1, np.array([1.0, -2.0]), s1, t=2, convention="guide", **kw)
    assert np.array_equal(wg, w1 - 0.5 * G)
    with pytest.raises(TypeError, match="w_grad"):
        dcasgd.step(w1, np.array([1.0, -2.0]), s1, t=2, w_grad=w0, **kw)
    # python-op gating: clip_gradient = 0 clips the gradient to 0 -> only the wd term acts
    w1, _ = dcasgd.step(w0, np.array([2.0, 1.0]), dcasgd.init_state(w0), t=1, clip_gradient=0.0,
                        **kw)
    assert np.array_equal(w1, w0 - 0.5 * 0.25 * w0)


def _dcasgd_pair(w0, grads, hyper, common):
    """MXNet's run, and the guide run fed w_grad = the MXNet-convention w_prev of each step."""
    mx = trajectory(dcasgd, w0, grads, hyper, common, convention="mxnet", tracked=F64)
    prevs = [track(w0, F64)] + [s["w_prev"] for _, s in mx[:-1]]
    # the weight before step k is mx[k-1][0]; its w_prev is the weight before step k-1
    w_grads = [{"w_grad": track(w0, F64)}] + [{"w_grad": prevs[k]} for k in range(1, len(grads))]
    gd = trajectory(dcasgd, w0, grads, hyper, common, convention="guide", tracked=F64,
                    extra_per_step=w_grads)
    return mx, gd


@given(p=problems("dcasgd", wd=st.just(0.0), clip=st.one_of(st.none(), decades(-3, 2))))
def test_dcasgd_conventions_agree_with_delay_one(p):
    """wd = 0, clip not 0: MXNet equals the guide with w_grad = w_prev (a delay of one)."""
    w0, grads, hyper, common = p
    mx, gd = _dcasgd_pair(w0, grads, hyper, common)
    for k, ((wm, sm), (wg, sg)) in enumerate(zip(mx, gd)):
        agree(wm, wg, f"w step {k + 1}")
        agree(sm["w_prev"], sg["w_prev"], f"w_prev step {k + 1}")
        if "mom" in sm:
            agree(sm["mom"], sg["mom"], f"mom step {k + 1}")


def test_dcasgd_differences():
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal(8)
    grads = [rng.standard_normal(8) * 2 for _ in range(4)]
    hyper = {"lamda": 0.5}
    common = {"lr": 0.1, "wd": 0.3, "rescale_grad": 1.0, "clip_gradient": None}
    mx, gd = _dcasgd_pair(w0, grads, hyper, common)
    agree(mx[0][0], gd[0][0])                  # first step: no compensation in either
    assert differ(mx[1][0], gd[1][0]).all()    # then MXNet squares g, the guide G = g + wd*w
    # the guide's default (no delay) differs from MXNet's implicit delay of one
    gd0 = trajectory(dcasgd, w0, grads, hyper, {**common, "wd": 0.0}, convention="guide",
                     tracked=F64)
    mx0 = trajectory(dcasgd, w0, grads, hyper, {**common, "wd": 0.0}, convention="mxnet",
                     tracked=F64)
    assert differ(mx0[1][0], gd0[1][0]).all()


# ------------------------------------------------------------------------------------------------
# FTRL
# ------------------------------------------------------------------------------------------------

def _ftrl_by_coordinate(w0, grads, lr, l1, beta, l2):
    """McMahan's Algorithm 1 written per coordinate with Python floats (independent of the
    reference's array code)."""
    out = []
    w = [float(x) for x in w0]
    z = [0.0] * len(w)
    n = [0.0] * len(w)
    for g in grads:
        for k in range(len(w)):
            gk = float(g[k])
            sigma = (math.sqrt(n[k] + gk * gk) - math.sqrt(n[k])) / lr
            z[k] += gk - sigma * w[k]
            n[k] += gk * gk
            if abs(z[k]) <= l1:
                w[k] = 0.0
            else:
                w[k] = -(z[k] - math.copysign(l1, z[k])) / ((beta + math.sqrt(n[k])) / lr + l2)
        out.append((list(w), list(z), list(n)))
    return out


def test_ftrl_hand():
    w0 = np.array([0.0, 1.0, 0.5])
    g = np.array([1.0, -0.125, 3.0])
    w1, s1 = ftrl.step(w0, g, ftrl.init_state(w0), t=1, lr=0.5, lamda1=0.25, beta=1.0)
    # coord 0: z = 1, n = 1, w = (0.25 - 1)/4; coord 1: z = -0.375, w = 0.125/2.25; coord 2: z = 0
    np.testing.assert_allclose(w1, [-0.1875, 0.125 / 2.25, 0.0], rtol=1e-15, atol=0)
    assert w1[2] == 0.0
    assert np.array_equal(s1["z"], [1.0, -0.375, 0.0]) and np.array_equal(s1["n"], g * g)
    for conv, l2, wd in (("mxnet", 0.5, 0.5), ("guide", 0.0, 0.0), ("mxnet", 0.0, 0.0)):
        grads = [g, np.array([-2.0, 0.5, 0.25]), np.array([0.0, 1e-3, -7.0])]
        traj = trajectory(ftrl, w0, grads, {"lamda1": 0.25, "beta": 1.0},
                          {"lr": 0.5, "wd": wd, "rescale_grad": 1.0, "clip_gradient": None},
                          convention=conv)
        ind = _ftrl_by_coordinate(w0, grads, 0.5, 0.25, 1.0, l2)
        for (w, s), (wi, zi, ni) in zip(traj, ind):
            np.testing.assert_allclose(w, wi, rtol=1e-13, atol=1e-300)
            np.testing.assert_allclose(s["z"], zi, rtol=1e-13, atol=1e-300)
            np.testing.assert_allclose(s["n"], ni, rtol=1e-15)
    # guide with wd: the L2 term is linearised into G = g + wd*w
    w1g, _ = ftrl.step(w0, g, ftrl.init_state(w0), t=1, lr=0.5, wd=0.5, lamda1=0.25, beta=1.0,
                       convention="guide")
    ind = _ftrl_by_coordinate(w0, [g + 0.5 * w0], 0.5, 0.25, 1.0, 0.0)
    np.testing.assert_allclose(w1g, ind[0][0], rtol=1e-14, atol=0)


@given(p=problems("ftrl", wd=st.just(0.0), clip=st.one_of(st.none(), decades(-3, 2))))
def test_ftrl_conventions_agree_without_wd(p):
    w0, grads, hyper, common = p
    mx = trajectory(ftrl, w0, grads, hyper, common, convention="mxnet", tracked=F64)
    gd = trajectory(ftrl, w0, grads, hyper, common, convention="guide", tracked=F64)
    for k, ((wm, sm), (wg, sg)) in enumerate(zip(mx, gd)):
        agree(wm, wg, f"w step {k + 1}")
        agree(sm["z"], sg["z"], f"z step {k + 1}")
        agree(sm["n"], sg["n"], f"n step {k + 1}")


def _ftrl_guide_literal(w0, grads, lr, l1, beta):
    """guide:239-241 exactly as printed: z += (sqrt(eta + g^2) - sqrt(eta))*w/lr."""
    w, z, n = w0.copy(), np.zeros_like(w0), np.zeros_like(w0)
    out = []
    for g in grads:
        z = z + (np.sqrt(n + g * g) - np.sqrt(n)) * w / lr
        n = n + g * g
        w = (np.abs(z) > l1) * (-lr / (beta + np.sqrt(n)) * (z - l1 * np.sign(z)))
        out.append(w)
    return out


def test_ftrl_differences():
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal(16)
    grads = [rng.standard_normal(16) * 3 for _ in range(4)]
    hyper = {"lamda1": 0.01, "beta": 1.0}
    # wd: MXNet's exact L2 term (denominator) vs the guide's linearised one (gradient)
    common = {"lr": 0.1, "wd": 0.1, "rescale_grad": 1.0, "clip_gradient": None}
    mx = trajectory(ftrl, w0, grads, hyper, common, convention="mxnet", tracked=F64)
    gd = trajectory(ftrl, w0, grads, hyper, common, convention="guide", tracked=F64)
    assert differ(mx[0][0], gd[0][0]).sum() >= 12
    # the guide's literal z-update is a different (wrong) algorithm
    common = {"lr": 0.1, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": None}
    gd = trajectory(ftrl, w0, grads, hyper, common, convention="guide")
    lit = _ftrl_guide_literal(w0, grads, 0.1, 0.01, 1.0)
    for (w, _), wl in zip(gd, lit):
        assert np.max(np.abs(w - wl)) > 0.1
    # the literal update ignores the gradient's sign: flipping every gradient leaves it unchanged
    lit_neg = _ftrl_guide_literal(w0, [-g for g in grads], 0.1, 0.01, 1.0)
    assert all(np.array_equal(a, b) for a, b in zip(lit, lit_neg))
    # clip_gradient = 0: off for MXNet's kernel, clip-to-zero for the guide
    common = {"lr": 0.1, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": 0.0}
    mx = trajectory(ftrl, w0, grads, hyper, common, convention="mxnet", tracked=F64)
    gd = trajectory(ftrl, w0, grads, hyper, common, convention="guide", tracked=F64)
    assert differ(mx[0][0], gd[0][0]).all()


# ------------------------------------------------------------------------------------------------
# FTML
# ------------------------------------------------------------------------------------------------

def test_ftml_hand():
    """First step from zero state: d1 = (1-b1)/lr*(|g| + eps), z = (1-b1)*g - d1*w, so
    w1 = w0 - lr*g/(|g| + eps)."""
    w0 = np.array([1.0, -2.0, 0.5, 0.0])
    g = np.array([0.5, -4.0, 0.0, 1e-3])
    for conv in ("mxnet", "guide"):
        w1, s1 = ftml.step(w0, g, ftml.init_state(w0), t=1, lr=0.25, beta1=0.5, beta2=0.75,
                           epsilon=1e-8, convention=conv)
        np.testing.assert_allclose(w1, w0 - 0.25 * g / (np.abs(g) + 1e-8), rtol=1e-15, atol=0)
        np.testing.assert_allclose(s1["d"], 0.5 / 0.25 * (np.abs(g) + 1e-8), rtol=1e-15)
        assert np.array_equal(s1["v"], 0.25 * g * g)
    # second step by hand (python floats, per coordinate)
    g2 = np.array([-1.0, 2.0, 3.0, 0.0])
    w2, s2 = ftml.step(w1, g2, s1, t=2, lr=0.25, beta1=0.5, beta2=0.75, epsilon=1e-8)
    for k in range(4):
        v = 0.75 * s1["v"][k] + 0.25 * g2[k] ** 2
        d = (1 - 0.25) / 0.25 * (math.sqrt(v / (1 - 0.5625)) + 1e-8)
        z = 0.5 * s1["z"][k] + 0.5 * g2[k] - (d - 0.5 * s1["d"][k]) * w1[k]
        assert w2[k] == pytest.approx(-z / d, rel=1e-14, abs=1e-300)
    # mxnet: wd before clipping; guide: after
    kw = dict(t=1, lr=0.25, wd=0.5, rescale_grad=1.0, clip_gradient=0.25, beta1=0.5,
              beta2=0.75, epsilon=0.0)
    w1m, s1m = ftml.step(w0, g, ftml.init_state(w0), **kw)
    w1g, s1g = ftml.step(w0, g, ftml.init_state(w0), convention="guide", **kw)
    assert np.array_equal(s1m["v"], 0.25 * np.clip(g + 0.5 * w0, -0.25, 0.25) ** 2)
    assert np.array_equal(s1g["v"], 0.25 * (np.clip(g, -0.25, 0.25) + 0.5 * w0) ** 2)


def test_ftml_epsilon_not_rounded():
    """FTML's epsilon is a double in MXNet's kernel; lr and betas are float32."""
    w0 = np.array([0.5, 1.0])
    g = np.array([0.0, 0.0])
    kw = dict(t=1, lr=0.1, beta1=0.6, beta2=0.999)
    a, sa = ftml.step(w0, g, ftml.init_state(w0), epsilon=0.1, **kw)
    b, sb = ftml.step(w0, g, ftml.init_state(w0), epsilon=0.1, hyper_f32=False,
                      **{k: (f32r(v) if isinstance(v, float) else v) for k, v in kw.items()})
    assert np.array_equal(sa["d"], sb["d"])
    c, sc = ftml.step(w0, g, ftml.init_state(w0), epsilon=f32r(0.1), hyper_f32=False,
                      **{k: (f32r(v) if isinstance(v, float) else v) for k, v in kw.items()})
    assert not np.array_equal(sa["d"], sc["d"])


@given(p=problems("ftml", clip=st.none()))
@example(p=(np.array([1.0, -2.0]), [np.array([3.0, 0.0]), np.array([-1e-6, 5.0]),
                                    np.array([0.0, 1e3])],
            {"beta1": 0.9, "beta2": 0.5, "epsilon": 1e-8},
            {"lr": 0.01, "wd": 0.1, "rescale_grad": 2.0, "clip_gradient": None}))
def test_ftml_conventions_agree_without_clipping(p):
    w0, grads, hyper, common = p
    mx = trajectory(ftml, w0, grads, hyper, common, convention="mxnet", tracked=F64)
    gd = trajectory(ftml, w0, grads, hyper, common, convention="guide", tracked=F64)
    for k, ((wm, sm), (wg, sg)) in enumerate(zip(mx, gd)):
        agree(wm, wg, f"w step {k + 1}")
        for key in ("d", "v", "z"):
            agree(sm[key], sg[key], f"{key} step {k + 1}")


@given(p=problems("ftml", wd=st.just(0.0), clip=decades(-3, 2)))
def test_ftml_conventions_agree_clipped_without_wd(p):
    w0, grads, hyper, common = p
    mx = trajectory(ftml, w0, grads, hyper, common, convention="mxnet", tracked=F64)
    gd = trajectory(ftml, w0, grads, hyper, common, convention="guide", tracked=F64)
    for k, ((wm, _), (wg, _)) in enumerate(zip(mx, gd)):
        agree(wm, wg, f"w step {k + 1}")


def test_ftml_differences():
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal(16)
    grads = [rng.standard_normal(16) * 3 for _ in range(4)]
    hyper = {"beta1": 0.6, "beta2": 0.999, "epsilon": 1e-8}
    for common in ({"lr": 0.1, "wd": 0.1, "rescale_grad": 1.0, "clip_gradient": 0.5},
                   {"lr": 0.1, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": 0.0}):
        mx = trajectory(ftml, w0, grads, hyper, common, convention="mxnet", tracked=F64)
        gd = trajectory(ftml, w0, grads, hyper, common, convention="guide", tracked=F64)
        assert differ(mx[0][0], gd[0][0]).sum() >= 8, common


# ------------------------------------------------------------------------------------------------
# SGLD
# ------------------------------------------------------------------------------------------------

def test_sgld_hand():
    w0 = np.array([1.0, -2.0, 0.0])
    g = np.array([4.0, 1.0, -8.0])
    z = np.array([1.0, -2.0, 0.5])
    for conv in ("mxnet", "guide"):
        w1, s1 = sgld.step(w0, g, {}, t=1, lr=0.25, wd=0.5, rescale_grad=0.5, clip_gradient=1.0,
                           noise=z, convention=conv)
        # clip(0.5*g, 1) = [1, 0.5, -1]; + wd*w = [1.5, -0.5, -1]; -lr/2 * that + 0.5*z
        assert np.array_equal(w1, [1.0 - 0.1875 + 0.5, -2.0 + 0.0625 - 1.0, 0.125 + 0.25])
        assert s1 == {}
    # python-op gating: clip_gradient = 0 -> the gradient is dropped, wd remains
    w1, _ = sgld.step(w0, g, {}, t=1, lr=0.25, wd=0.5, clip_gradient=0.0, noise=np.zeros(3))
    assert np.array_equal(w1, w0 - 0.0625 * w0)
    with pytest.raises(ValueError, match="shape"):
        sgld.step(w0, g, {}, t=1, lr=0.25, noise=np.zeros(2))


def test_sgld_default_noise_is_the_counter_based_draw():
    from reference import noise
    w0 = np.zeros((3, 4))
    g = np.zeros((3, 4))
    for seed, stream, t in ((0, 0, 1), (7, 3, 12), (2**40, 1, 5)):
        w1, _ = sgld.step(w0, g, {}, t=t, lr=0.04, seed=seed, stream=stream)
        assert np.array_equal(w1, 0.2 * noise.normal(seed, stream, t, 12).reshape(3, 4))
        w1b, _ = sgld.step(w0, g, {}, t=t, lr=0.04, seed=seed, stream=stream)
        assert np.array_equal(w1, w1b)                   # reproducible
    a, _ = sgld.step(w0, g, {}, t=1, lr=0.04, seed=1, stream=0)
    b, _ = sgld.step(w0, g, {}, t=1, lr=0.04, seed=1, stream=1)
    c, _ = sgld.step(w0, g, {}, t=2, lr=0.04, seed=1, stream=0)
    d, _ = sgld.step(w0, g, {}, t=1, lr=0.04, seed=2, stream=0)
    assert not (np.array_equal(a, b) or np.array_equal(a, c) or np.array_equal(a, d))


def test_sgld_noise_variance_is_lr():
    """The injected noise w1 - (deterministic part) has variance lr. For N i.i.d. normal draws
    the sample variance s^2 satisfies (N-1)s^2/lr ~ chi2(N-1); the test asserts that statistic
    lies within the central 1 - 1e-6 of that distribution (two-sided), for several lr and seeds.
    A wrong scale (e.g. lr instead of sqrt(lr) as the standard deviation) fails by far."""
    from scipy import stats
    N = 200_000
    lo, hi = stats.chi2.ppf([0.5e-6, 1 - 0.5e-6], N - 1)
    w0 = np.linspace(-1.0, 1.0, N)
    g = np.cos(np.arange(N))
    for lr, seed in ((0.04, 0), (1e-4, 1), (0.5, 2)):
        w1, _ = sgld.step(w0, g, {}, t=3, lr=lr, wd=0.1, seed=seed, stream=5)
        det, _ = sgld.step(w0, g, {}, t=3, lr=lr, wd=0.1, noise=np.zeros(N))
        eta = w1 - det
        stat = (N - 1) * np.var(eta, ddof=1) / lr
        assert lo < stat < hi, (lr, stat / (N - 1))
        # the mean is zero: |mean| < 5 standard errors
        assert abs(np.mean(eta)) < 5 * math.sqrt(lr / N)


@given(p=problems("sgld"), seed=st.integers(0, 2**63))
def test_sgld_conventions_agree(p, seed):
    """Bit for bit with hyper_f32=False (same equations, same order up to an exact negation)."""
    w0, grads, hyper, common = p
    a = trajectory(sgld, w0, grads, hyper, common, convention="mxnet", seed=seed, stream=2)
    b = trajectory(sgld, w0, grads, hyper, common, convention="guide", seed=seed, stream=2)
    for (wa, _), (wb, _) in zip(a, b):
        assert np.array_equal(wa, wb, equal_nan=True)


# ------------------------------------------------------------------------------------------------
# MXNet 1.9.1 parity (golden data written by tests/data/mxnet/generate.py)
# ------------------------------------------------------------------------------------------------

#: MXNet's Python-op optimizers: their lr, wd, rescale_grad and own hyperparameters are doubles
_PYTHON_OPS = {name for name in MODULES if not registry()[name].mxnet_kernel}

#: whether the reference reproduces MXNet's float64 golden cases bit for bit (as measured; the
#: others are within the Tracked bound: a scalar parsed an ulp apart, or pow/exp in the step)
F64_BIT_FOR_BIT = {  # checked against the registry by test_tables_cover_the_modules
    "nadam": False, "signum": True, "lbsgd": True, "dcasgd": True, "ftrl": False, "ftml": True,
    "sgld": False}


def test_tables_cover_the_modules():
    """The per-optimizer tables of this file hold exactly its modules."""
    for table in (HYPERS, F64_BIT_FOR_BIT):
        assert set(table) == set(MODULES)


def _dmlc_parser():
    """dmlc-core's ParseFloat as re-implemented by the golden-data probe
    (tests/data/mxnet/verify_formulas.py), or None if that probe is absent."""
    import importlib.util
    import os
    path = os.path.join(mxnet_data.DATA_DIR, "verify_formulas.py")
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("_mx_verify_formulas", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, "parse_dmlc", None)
_BASE = {"learning_rate", "wd", "rescale_grad", "clip_gradient", "multi_precision"}
_GOLDEN = [(name, case["id"]) for name in sorted(MODULES) if name in mxnet_data.available()
           for case in mxnet_data.load_cases(name)]


@pytest.mark.skipif(not _GOLDEN, reason="no golden MXNet data")
@pytest.mark.parametrize("name,case_id", _GOLDEN, ids=[c for _, c in _GOLDEN])
def test_mxnet_golden(name, case_id, monkeypatch):
    """Each call from MXNet's own previous weight and state (resynchronised every call): the
    "mxnet" reference on Tracked inputs of the case's dtype (float32 for the fp16
    multi-precision master copy) must contain MXNet's weight and state within its rounding
    bound. float64 cases are bit for bit except where MXNet's scalar parser rounds a scalar
    differently by one ulp (Tracked's constants carry that ulp). FTML's float32 kernel computes
    ``beta**t`` in float32 inside the kernel (the toolkit precomputes it in double), so for
    float32 the power is made a Tracked quantity. Also checked exactly: Nadam's shared
    ``m_schedule`` and LBSGD's call counter.

    The ``*-parse*`` cases are built so that MXNet's hyperparameter parsing matters: MXNet
    passes every scalar as ``str(x)`` and parses it with dmlc-core's ``ParseFloat``, which is not
    correctly rounded (tests/data/mxnet/README.md, item 1). The contract's rounding is
    ``r(x) = float64(float32(x))``, so for these cases only, the test substitutes the parser:
    the module's float32 rounding becomes ``ParseFloat<float>(str(x))`` and the double scalars
    of the Python-op optimizers are passed pre-parsed with ``ParseFloat<double>``; the result
    must then be bit for bit."""
    mod = MODULES[name]
    case = mxnet_data.load_case(case_id)
    kw = dict(case["kwargs"])
    lr = kw.get("learning_rate", mxnet_data.default_lr(name))
    common = dict(wd=kw.get("wd", 0.0), rescale_grad=kw.get("rescale_grad", 1.0),
                  clip_gradient=kw.get("clip_gradient"))
    hyper = {k: v for k, v in kw.items() if k not in _BASE}
    parse_case = "parse" in case_id
    if parse_case:
        parse = _dmlc_parser()
        if parse is None:
            pytest.skip("the dmlc ParseFloat emulation (verify_formulas.py) is absent")
        monkeypatch.setattr(mod, "f32", lambda x: None if x is None else
                            float(parse(repr(float(x)), np.float32)))
        if name in _PYTHON_OPS:
            def dbl(x):
                return x if x is None else float(parse(repr(float(x)), np.float64))
            lr = dbl(lr)
            common = {k: (dbl(v) if k != "clip_gradient" else v) for k, v in common.items()}
            hyper = {k: (dbl(v) if isinstance(v, float) else v) for k, v in hyper.items()}
    mp = case["multi_precision"]
    dtype = np.float32 if mp else np.dtype(case["dtype"]).type
    if name == "ftml" and dtype == np.float32:
        u = unit_roundoff(np.float32)
        monkeypatch.setattr(ftml, "_power",
                            lambda b, t: Tracked(np.float64(b ** t), u * b ** t, u=u))
    W = {k: np.asarray(v, dtype=F64) for k, v in mxnet_data.initial_weights(case).items()}
    if mp:  # the master copy starts as float32(weight)
        W = {k: v.astype(np.float32).astype(F64) for k, v in W.items()}
    S = {k: mod.init_state(W[k], **hyper) for k in W}
    m_schedule = 1.0
    exact = True
    for call in case["calls"]:
        i, t = call["index"], call["extras"]["t"]
        state = dict(S[i])
        extra = {}
        if name == "nadam":
            state["m_schedule"] = m_schedule
        if name == "sgld":
            extra["noise"] = call["noise"].astype(F64) / math.sqrt(lr)
        g = call["grad"].astype(np.float32 if mp else F64).astype(F64)
        tw = track(W[i], dtype)
        tstate = {k: _wrap(v, dtype) for k, v in state.items()}
        w_new, s_new = mod.step(tw, track(g, dtype), tstate, t=t, lr=lr, **common, **hyper,
                                **extra)
        mx_states = dict(call["states"])
        mx_w = mx_states.pop("weight32") if mp else call["weight"]
        if mp:
            assert np.array_equal(call["weight"], mx_w.astype(np.float16))
        pairs = [("weight", w_new, mx_w)] + [(k, s_new[k], mx_states[k]) for k in mx_states]
        for key, r, m in pairs:
            m = m.astype(F64)
            ok = (np.abs(value(r) - m) <= error(r)) | ties(r)
            assert ok.all(), f"{key} at call {call}: {value(r)[~ok]} vs {m[~ok]}"
            exact &= bool(np.array_equal(value(r), m))
        if name == "nadam":
            m_schedule = s_new["m_schedule"]
            assert m_schedule == call["extras"]["m_schedule"]
        if name == "lbsgd":
            assert s_new["ncum"] == call["extras"]["num_cums"]
        W[i] = mx_w.astype(F64)
        S[i] = {k: (value(v) if isinstance(v, Tracked) else v) for k, v in s_new.items()}
        S[i].update({k: v.astype(F64) for k, v in mx_states.items()})
    if dtype == F64 and (parse_case or F64_BIT_FOR_BIT[name]):
        assert exact, "float64 cases of these optimizers are bit for bit"


# Measured with MXNet 1.9.1 (float64, CPU) for this file: without clipping, MXNet's sgd_update /
# sgd_mom_update / signum_update kernels compute the gradient term as ``(lr*rs)*grad`` (signum:
# ``((1-momentum)*rs)*grad``), not ``lr*(rs*grad)``; rescale_grad = 0.3 makes the two orders
# differ. Values are float.hex(); generated by ``mx.optimizer.create(name, **kwargs)`` and
# ``get_updater``, three calls on index 0 from ``w0`` with ``grads``.
_NOCLIP_MXNET = {'w0': ['0x1.427a31c1ffc58p-10', '0x1.31ea59a5b303ep-2', '-0x1.18b7980d81558p-2',
        '-0x1.c7fba74b18102p-1', '-0x1.d19537e309692p-2', '-0x1.fbb918e5cd3f0p-1',
        '0x1.ecb246c7071e5p-5', '0x1.571858a941e07p+0', '-0x1.f804fc5039525p-2',
        '-0x1.3daee2d56e58bp-1', '0x1.f5992787010aap-2', '0x1.6d73c9b1a8b33p-2'],
 'grads': [['0x1.43d5237fbd918p-2', '-0x1.654cbb0cfe015p+1', '-0x1.677246e7c0673p-4',
            '0x1.0aff15d18106fp+1', '-0x1.0216d55b8c331p+2', '-0x1.5f72eb6767d9ap+0',
            '-0x1.6d08e66d64612p+2', '-0x1.ef2eb7cd00583p+1', '-0x1.619cf5e868dc4p+2',
            '-0x1.6919981d45be2p-1', '-0x1.e6b30f14d8b1ep+1', '0x1.a0a97c7241f8dp-1'],
           ['0x1.e18a120ff64d9p-2', '-0x1.1f203d02c6b80p-1', '-0x1.e337c5f765fcfp+2',
            '-0x1.9db75536bf1bap+0', '-0x1.29fd6417be94ep-3', '0x1.5c15cffeb9bc8p-2',
            '-0x1.25c93baf76d55p+2', '-0x1.6eea1db85e26bp+0', '-0x1.77c056e625e3cp+1',
            '-0x1.3697ef9cae07cp+1', '0x1.97629409b8d14p+1', '-0x1.3617e383679b1p+1'],
           ['-0x1.8fa07017419b6p-4', '0x1.539b0fbffc9c9p+1', '-0x1.c034838db1191p+0',
            '-0x1.5725fcd45c627p-2', '0x1.5358897fa5696p-2', '0x1.87e00e7c26fd3p-3',
            '-0x1.d66be3515b7c8p+1', '0x1.d3ce3a3119881p-3', '0x1.04e4e38a1064ep+2',
            '-0x1.290d41560e847p+2', '0x1.4a00c179b3b68p+1', '0x1.6ea7d33c2732ep-2']],
 'signum': {'kwargs': {'learning_rate': 0.1,
                       'wd': 0.1,
                       'rescale_grad': 0.3,
                       'momentum': 0.7,
                       'wd_lh': 0.05},
            'weights': [['-0x1.9496244e74de5p-4', '0x1.96c92dc6aa7e8p-2', '-0x1.61d3c04cabfa0p-3',
                         '-0x1.f8e73205bd12dp-1', '-0x1.68dadf2ed14f8p-2', '-0x1.c5fc02f54dad6p-1',
                         '0x1.475bb50133426p-3', '0x1.6efac8e1273f2p+0', '-0x1.8f1970b4f6766p-2',
                         '-0x1.08e50d2a9c13ep-1', '0x1.2cbec127047cap-1', '0x1.05399bc82d53bp-2'],
                        ['-0x1.9614efb3538dep-3', '0x1.fb26e4aee54c8p-2', '-0x1.26841a6dd903cp-4',
                         '-0x1.c32db81e0c30bp-1', '-0x1.00a693b9338e9p-2', '-0x1.9083b616c82ddp-1',
                         '0x1.0942bea0d3f26p-2', '0x1.86bea69dd480ep+0', '-0x1.26b43151c7ba0p-2',
                         '-0x1.a8bd926a823fep-2', '0x1.f0153377a9414p-2', '0x1.6a51a40f7bad2p-2'],
                        ['-0x1.306cf9e8b50fep-2', '0x1.923756a2836a4p-2', '0x1.d239ea57fdc34p-6',
                         '-0x1.8db902a991c66p-1', '-0x1.31ef53d83a3edp-3', '-0x1.5b4fda3ea072ep-1',
                         '0x1.6e559c7e14a3ep-2', '0x1.9e6419012f1fdp+0', '-0x1.7da9247ffd31ep-3',
                         '-0x1.403780f0982a1p-2', '0x1.8733d08b9527ep-2', '0x1.cee845e58a36cp-2']],
            'mom': [['-0x1.d2ec7033e7233p-6', '0x1.f0281f117a1a9p-3', '0x1.08251bfcd7c7ep-6',
                     '-0x1.49c1c57844feep-3', '0x1.819daf379d50dp-2', '0x1.39f851dac9ed4p-3',
                     '0x1.05e6b819bc56dp-1', '0x1.3b5c297c9ad61p-2', '0x1.0629696437978p-1',
                     '0x1.503c6826492f6p-4', '0x1.4f602cb95b5b3p-2', '-0x1.57d9d9ec94782p-4'],
                    ['-0x1.e5db3ddfb9790p-5', '0x1.aa44948c68c48p-3', '0x1.645948a539401p-1',
                     '0x1.fe89677ec8636p-5', '0x1.262a964c901a2p-2', '0x1.a7341d6f6751cp-4',
                     '0x1.8866d3b1d2f1ap-1', '0x1.34cdbdff939bap-2', '0x1.44c52c8ca7d7cp-1',
                     '0x1.2a5cc0b15a6e7p-2', '-0x1.326562e558edcp-4', '0x1.3683583e20464p-3'],
                    ['-0x1.b6dfab348ad60p-6', '-0x1.ba25d0bb656fap-4', '0x1.4b39ba22e2872p-1',
                     '0x1.9a81101a12791p-4', '0x1.6e26512b73384p-3', '0x1.41d414628672cp-4',
                     '0x1.b80dd1cd6d7b1p-1', '0x1.2871a36a35013p-3', '0x1.5f53d709ea29cp-4',
                     '0x1.44acdad22a6f6p-1', '-0x1.321a9b8b46c12p-2', '0x1.033e76a3ba79ep-4']]},
 'lbsgd_mom': {'kwargs': {'learning_rate': 0.1, 'wd': 0.1, 'rescale_grad': 0.3, 'momentum': 0.7},
               'weights': [['-0x1.0ef9041351555p-7', '0x1.849bb4062822ap-2',
                            '-0x1.1336d225327e7p-2', '-0x1.e37677b4554e9p-1',
                            '-0x1.510b53060e6d8p-2', '-0x1.e18f121e7898bp-1',
                            '0x1.d8603142920e6p-3', '0x1.716006be063f1p+0', '-0x1.493eb6563c352p-2',
                            '-0x1.2fac5e8457033p-1', '0x1.32b1f075c5834p-1',
                            '0x1.50cc4ce9e21d2p-2'],
                           ['-0x1.da381efe76e1cp-6', '0x1.cbd5aae5cff72p-2',
                            '-0x1.255289629df8cp-5', '-0x1.d90a7e0ae28a2p-1',
                            '-0x1.de742b5f09782p-3', '-0x1.cfa64f0ffcabfp-1',
                            '0x1.f1105b531ad09p-2', '0x1.8b15b4a28a16ep+0', '-0x1.c5b85dc3f4502p-4',
                            '-0x1.fb1df118a8aaap-2', '0x1.25de7bac73687p-1',
                            '0x1.83cb6400f228dp-2'],
                           ['-0x1.495141e372b84p-5', '0x1.a796e3c8a89aep-2', '0x1.70f0b88b7d1b7p-3',
                            '-0x1.c7de3c20752bep-1', '-0x1.6515f202b608ap-3',
                            '-0x1.c16a6ed0fa26cp-1', '0x1.89cdc652833cep-1', '0x1.97605edc71e8dp+0',
                            '-0x1.59d1617ebe866p-4', '-0x1.214cd72a60c20p-2',
                            '0x1.e4b422a9e7fb3p-2', '0x1.989d48e7226c7p-2']],
               'mom': [['-0x1.37484a4b914e0p-7', '0x1.4ac56981d47b2p-4', '0x1.60317a13b5c28p-8',
                        '-0x1.b7ad0693d3e6bp-5', '0x1.0113c9b9f5f75p-3', '0x1.a2a06c754a64bp-5',
                        '0x1.5d339f90d046dp-3', '0x1.a47ae14c45ea7p-4', '0x1.5d8c8bf3fa3a7p-3',
                        '0x1.c0508a22eab08p-6', '0x1.bf2ae59227ef7p-4', '-0x1.ca77cc7c69608p-6'],
                       ['-0x1.52bb9cf4ce372p-6', '0x1.1ce7db7e9f51ep-4', '0x1.dd1901f1bd7ebp-3',
                        '0x1.4d7f352e588eap-6', '0x1.8744f55a26c5bp-4', '0x1.1e8c30e7becbcp-5',
                        '0x1.04e042b1d1c96p-2', '0x1.9b5ade483d7cdp-4', '0x1.afa13dca7e423p-3',
                        '0x1.90eb2fc0156eep-4', '-0x1.9a6e992a435a0p-6', '0x1.97f8b8b8805d8p-5'],
                       ['-0x1.70d4c990dd1d8p-7', '-0x1.21f638e93ae23p-5', '0x1.ba455ae42499ap-3',
                        '0x1.12c41ea6d5e3cp-5', '0x1.e578e5714dbe2p-5', '0x1.c77c07e050a6fp-6',
                        '0x1.228b3151eba94p-2', '0x1.8955473cfa3ebp-5', '0x1.af9bf114d7270p-6',
                        '0x1.b3a233dc8fd15p-3', '-0x1.9c2352bbfb56cp-4', '0x1.4d1e4e63043a1p-6']]},
 'lbsgd': {'kwargs': {'learning_rate': 0.1, 'wd': 0.1, 'rescale_grad': 0.3},
           'weights': [['-0x1.0ef9041351555p-7', '0x1.849bb4062822bp-2', '-0x1.1336d225327e8p-2',
                        '-0x1.e37677b4554e9p-1', '-0x1.510b53060e6d8p-2', '-0x1.e18f121e7898bp-1',
                        '0x1.d8603142920e6p-3', '0x1.716006be063f1p+0', '-0x1.493eb6563c352p-2',
                        '-0x1.2fac5e8457033p-1', '0x1.32b1f075c5834p-1', '0x1.50cc4ce9e21d3p-2'],
                       ['-0x1.6d45384ff1a79p-6', '0x1.91f31ee607da2p-2', '-0x1.4423aa6ebca40p-5',
                        '-0x1.c5ce1f60503b5p-1', '-0x1.493435ca18d81p-2', '-0x1.e1f6ed6315ebdp-1',
                        '0x1.76d7e39cf0ae2p-2', '0x1.78b054660ef77p+0', '-0x1.d78b5d60739b6p-3',
                        '-0x1.075d885be429fp-1', '0x1.fd7bdc0f485f5p-2', '0x1.97da3b53dbac2p-2'],
                       ['-0x1.39a998330c693p-6', '0x1.3c6cc0e8ee37bp-2', '0x1.b5841f0024af8p-7',
                        '-0x1.bc1eb100b2922p-1', '-0x1.50179fce78b11p-2', '-0x1.e0157f9a59a91p-1',
                        '0x1.e3fefc2150a58p-2', '0x1.732ae9b90acf8p+0', '-0x1.66a4c61fc9f00p-2',
                        '-0x1.7ae0e8fd0fa0ep-2', '0x1.a93032cfbbbb6p-2', '0x1.88c636e8eec0ep-2']],
           'mom': None}}


@pytest.mark.parametrize("key", ["signum", "lbsgd_mom", "lbsgd"])
def test_mxnet_noclip_gradient_term_order(key):
    d = _NOCLIP_MXNET
    w = np.array([float.fromhex(x) for x in d["w0"]])
    kw = dict(d[key]["kwargs"])
    name = "signum" if key == "signum" else "lbsgd"
    mod = MODULES[name]
    lr = kw.pop("learning_rate")
    common = {k: kw.pop(k) for k in ("wd", "rescale_grad")}
    state = mod.init_state(w, **kw)
    for k, (g, expect) in enumerate(zip(d["grads"], d[key]["weights"])):
        g = np.array([float.fromhex(x) for x in g])
        w, state = mod.step(w, g, state, t=k + 1, lr=lr, **common, **kw)
        assert np.array_equal(w, [float.fromhex(x) for x in expect]), f"call {k + 1}"
        if d[key]["mom"] is not None:
            mom = [float.fromhex(x) for x in d[key]["mom"][k]]
            assert np.array_equal(state["mom"], mom), f"mom, call {k + 1}"


def _f32_hyper(h):
    return {k: (f32r(v) if isinstance(v, float) and k != "epsilon" else v) for k, v in h.items()}


@pytest.mark.parametrize("name", sorted(MODULES))
@given(data=st.data())
def test_hyper_f32_rounds_only_the_documented_values(name, data):
    """With float32-representable hyperparameters, rounding them is a no-op: hyper_f32 True and
    False give the same bits (so the flag changes precision, never the equations). FTML's
    epsilon and the Python-op optimizers' lr, wd, rescale_grad and own hyperparameters are
    doubles in MXNet and are drawn arbitrary here: they must not be rounded."""
    mod = MODULES[name]
    w0, grads, hyper, _ = data.draw(problems(name, steps=(2, 5)))
    common = data.draw(commons(f32_exact=True))
    if name in _PYTHON_OPS:
        common = dict(data.draw(commons()), clip_gradient=common["clip_gradient"])
    else:
        hyper = _f32_hyper(hyper)
    if name == "lbsgd":
        # MXNet rounds the product lr*mult (test_lbsgd_lr_rounded_after_multiplier), which is
        # not float32-representable in general: keep mult = 1 here
        hyper = dict(hyper, batch_scale=1, warmup_strategy="linear")
    a = trajectory(mod, w0, grads, hyper, common, convention="mxnet", hyper_f32=True, seed=1) \
        if name == "sgld" else trajectory(mod, w0, grads, hyper, common, convention="mxnet",
                                          hyper_f32=True)
    b = trajectory(mod, w0, grads, hyper, common, convention="mxnet", hyper_f32=False, seed=1) \
        if name == "sgld" else trajectory(mod, w0, grads, hyper, common, convention="mxnet",
                                          hyper_f32=False)
    for (wa, sa), (wb, sb) in zip(a, b):
        assert np.array_equal(wa, wb, equal_nan=True)
        for k in sa:
            if isinstance(sa[k], np.ndarray):
                assert np.array_equal(sa[k], sb[k], equal_nan=True), k
