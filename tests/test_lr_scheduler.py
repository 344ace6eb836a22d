"""Tests for toolkit.lr_scheduler: closed forms, MXNet 1.9.1 parity, stateful facts, checks.

* Closed forms (``docs/mxnet-facts.md``, section 8; ``python/mxnet/lr_scheduler.py`` at tag 1.9.1)
  are checked against exact rational
  (``fractions``) or 40-digit ``decimal`` arithmetic, with hypothesis-drawn parameters, and a
  rounding bound derived for each formula (a few units of 2**-53, times the number of roundings).
* Parity: every rate recorded from MXNet 1.9.1 in ``tests/data/mxnet/lr_scheduler.json`` (made
  by ``tests/data/mxnet/lr_scheduler_gen.py``) is reproduced bit for bit.
* The stateful behaviour (counters, ``base_lr`` overwrites, holding the last value), every
  validation error, and the ``state_dict`` round trip.
"""
from __future__ import annotations

import decimal
import doctest
import json
import math
import pathlib
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, example, given, strategies as st

from toolkit import lr_scheduler
from toolkit.lr_scheduler import (CosineScheduler, FactorScheduler, LRScheduler,
                                  MultiFactorScheduler, PolyScheduler)

U = 2.0 ** -53  # unit roundoff of float64
TINY = 2.0 ** -1074  # smallest subnormal: a product that underflows is rounded by up to half of it
DATA = pathlib.Path(__file__).parent / "data" / "mxnet" / "lr_scheduler.json"
CLASSES = {c.__name__: c for c in (FactorScheduler, MultiFactorScheduler, PolyScheduler,
                                   CosineScheduler)}

# ------------------------------------------------------------------------------------------
# Strategies
# ------------------------------------------------------------------------------------------

lrs = st.one_of(st.just(0.0), st.floats(1e-6, 10.0))
factors = st.one_of(st.sampled_from([0.0, 0.5, 0.25, 1.0]), st.floats(0.0, 1.0))


@st.composite
def warmups(draw, base_lr, max_steps=30):
    """Warmup keyword arguments consistent with ``base_lr``."""
    w = draw(st.integers(0, max_steps))
    begin = draw(st.one_of(st.just(0.0), st.floats(0.0, 1.0))) * base_lr
    mode = draw(st.sampled_from(["linear", "constant"]))
    return dict(warmup_steps=w, warmup_begin_lr=begin, warmup_mode=mode)


@st.composite
def factor_kwargs(draw):
    base = draw(lrs)
    kw = dict(step=draw(st.integers(1, 20)), factor=draw(factors),
              stop_factor_lr=draw(st.one_of(st.just(0.0), st.floats(0.0, 2.0))) * base,
              base_lr=base)
    kw.update(draw(warmups(base)))
    return kw


@st.composite
def multifactor_kwargs(draw):
    base = draw(lrs)
    steps = sorted(draw(st.sets(st.integers(1, 120), min_size=1, max_size=6)))
    kw = dict(step=steps, factor=draw(factors), base_lr=base)
    kw.update(draw(warmups(base)))
    return kw


@st.composite
def poly_kwargs(draw):
    base = draw(lrs)
    kw = dict(base_lr=base, final_lr=draw(lrs),
              pwr=draw(st.one_of(st.integers(1, 4), st.floats(0.1, 5.0))))
    kw.update(draw(warmups(base)))
    kw["max_update"] = kw["warmup_steps"] + draw(st.integers(1, 150))
    return kw


@st.composite
def cosine_kwargs(draw):
    kw = draw(poly_kwargs())
    del kw["pwr"]
    return kw


def exact_warmup(kw, n):
    """The warmup rate as an exact rational (docs/mxnet-facts.md, 8, base class)."""
    begin, base = Fraction(kw.get("warmup_begin_lr", 0)), Fraction(kw.get("base_lr", 0.01))
    if kw.get("warmup_mode", "linear") == "constant":
        return begin
    return begin + (base - begin) * n / kw["warmup_steps"]


def assert_warmup(kw, n, value):
    # Three roundings: the difference, the product/quotient, the sum.
    exact = exact_warmup(kw, n)
    assert abs(Fraction(value) - exact) <= 4 * U * kw["base_lr"], (n, value, float(exact))


def ceil_div(a, b):
    return -(-a // b)


# ------------------------------------------------------------------------------------------
# Closed forms
# ------------------------------------------------------------------------------------------

@given(kw=factor_kwargs(), last=st.integers(0, 200))
@example(kw=dict(step=3, factor=0.5, stop_factor_lr=0.0, base_lr=1.0, warmup_steps=0,
                 warmup_begin_lr=0.0, warmup_mode="linear"), last=10)
@example(kw=dict(step=1, factor=5.717181562016897e-223, stop_factor_lr=0.0, base_lr=1.0,
                 warmup_steps=0, warmup_begin_lr=0.0, warmup_mode="linear"), last=3)  # underflow
def test_factor_closed_form(kw, last):
    """lr(n) = eta_k, k = max(0, ceil(n/step) - 1), eta_{j+1} = max(eta_j*factor, stop)."""
    sched = FactorScheduler(**kw)
    base, f, stop = Fraction(kw["base_lr"]), Fraction(kw["factor"]), Fraction(kw["stop_factor_lr"])
    for n in range(last + 1):
        value = sched(n)
        assert type(value) is float
        if n < kw["warmup_steps"]:
            assert_warmup(kw, n, value)
            continue
        k = max(0, ceil_div(n, kw["step"]) - 1)
        exact = base if k == 0 else max(base * f ** k, stop)
        # One rounding per decay (the clamp to stop is 1-Lipschitz and exact); relative, or
        # absolute in the subnormal range.
        tol = (k + 2) * U * exact + k * TINY
        assert abs(Fraction(value) - exact) <= tol, (n, k, value, float(exact))
        assert sched.count == k * kw["step"]
        if kw["factor"] in (0.0, 0.5, 0.25, 1.0) and float(base * f ** k) >= 2.0 ** -1000:
            assert value == float(exact)  # dyadic factors: every product is exact


def test_factor_docstring_is_off_by_one_at_multiples_of_step():
    """docs/mxnet-facts.md, 8: MXNet's docstring says floor(n/step); at n = step*j the rate is
    one decay higher than that."""
    sched = FactorScheduler(step=3, factor=0.5, base_lr=1.0)
    values = {n: sched(n) for n in range(1, 10)}
    assert values[3] == 1.0 and values[4] == 0.5 and values[6] == 0.5 and values[7] == 0.25


def test_factor_base_lr_below_stop_factor_lr_is_raised_to_it():
    sched = FactorScheduler(step=2, factor=0.5, stop_factor_lr=1e-3, base_lr=1e-4)
    assert [sched(n) for n in range(1, 6)] == [1e-4, 1e-4, 1e-3, 1e-3, 1e-3]


def test_factor_decays_count_from_raw_n_after_warmup():
    sched = FactorScheduler(step=3, factor=0.5, base_lr=1.0, warmup_steps=4)
    assert [sched(n) for n in range(8)] == [0.0, 0.25, 0.5, 0.75, 0.5, 0.5, 0.5, 0.25]


@given(kw=multifactor_kwargs(), last=st.integers(0, 150))
@example(kw=dict(step=[1], factor=2.2250738585e-313, base_lr=0.25, warmup_steps=0,
                 warmup_begin_lr=0.0, warmup_mode="linear"), last=2)  # subnormal product
def test_multifactor_closed_form(kw, last):
    """lr(n) = base * factor^#{i : n > step[i]} (strict), as a repeated product."""
    sched = MultiFactorScheduler(**kw)
    base, f = Fraction(kw["base_lr"]), Fraction(kw["factor"])
    for n in range(last + 1):
        value = sched(n)
        if n < kw["warmup_steps"]:
            assert_warmup(kw, n, value)
            continue
        k = sum(n > s for s in kw["step"])
        exact = base * f ** k
        tol = (k + 1) * U * exact + k * TINY
        assert abs(Fraction(value) - exact) <= tol, (n, k, value, float(exact))
        assert sched.cur_step_ind == k
        assert sched.count == (kw["step"][k - 1] if k else 0)


def test_multifactor_comparison_is_strict():
    """docs/mxnet-facts.md, 8: the rate drops at n = step[i] + 1, not at step[i] (docstring's
    <=)."""
    sched = MultiFactorScheduler(step=[2, 5], factor=0.5, base_lr=1.0)
    assert [sched(n) for n in range(1, 8)] == [1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25]


def _decimal(x):
    return decimal.Decimal(Fraction(x).numerator) / decimal.Decimal(Fraction(x).denominator)


@given(kw=poly_kwargs())
@example(kw=dict(max_update=40, base_lr=0.02, pwr=0.9, final_lr=1e-4, warmup_steps=5,
                 warmup_begin_lr=0.0, warmup_mode="linear"))
def test_poly_closed_form(kw):
    """lr = final + (base - final) * (1 - (n - W)/(M - W))^pwr for W <= n <= M, then held."""
    sched = PolyScheduler(**kw)
    W, M, p = kw["warmup_steps"], kw["max_update"], kw["pwr"]
    base, final = kw["base_lr"], kw["final_lr"]
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        for n in range(M + 5):
            value = sched(n)
            if n < W:
                assert_warmup(kw, n, value)
                continue
            if n > M:
                assert value == final  # held; (base - final) * 0.0 adds exactly nothing
                continue
            x = Fraction(M - n, M - W)
            ref = _decimal(final) + (_decimal(base) - _decimal(final)) * _decimal(x) ** _decimal(p)
            # x is rounded to within 2u (Sterbenz for x <= 1/2); pow adds 1 ulp, the
            # product and sum 1 each; pow's condition number is p, relative to x.
            amp = p * x ** (p - 1) if x > 0 else 0
            tol = (abs(base - final) * (2 * float(amp) + 4) + 4 * max(base, final)) * U
            assert abs(value - float(ref)) <= tol, (n, value, float(ref))
            if p == int(p) and x == 1:
                assert value == final + (base - final)  # n == W: pow(1.0, p) == 1.0 exactly


@given(kw=cosine_kwargs())
def test_cosine_closed_form(kw):
    """lr = final + (base - final) * (1 + cos(pi (n - W)/(M - W)))/2, checked against the
    independent form final + (base - final) * cos^2(pi (n - W)/(2 (M - W)))."""
    sched = CosineScheduler(**kw)
    W, M, base, final = kw["warmup_steps"], kw["max_update"], kw["base_lr"], kw["final_lr"]
    for n in range(M + 5):
        value = sched(n)
        if n < W:
            assert_warmup(kw, n, value)
        elif n > M:
            assert value == final
        else:
            ref = final + (base - final) * math.cos(math.pi * (n - W) / (2 * (M - W))) ** 2
            tol = 16 * U * (abs(base - final) + max(base, final))
            assert abs(value - ref) <= tol, (n, value, ref)
            if n == M:
                assert value == final  # cos(pi) == -1.0 exactly


# ------------------------------------------------------------------------------------------
# MXNet 1.9.1 parity
# ------------------------------------------------------------------------------------------

def _load_parity():
    with open(DATA) as f:
        return json.load(f)


PARITY = _load_parity()


def test_parity_data_provenance_and_coverage():
    prov = PARITY["provenance"]
    assert prov["mxnet_version"] == "1.9.1"
    for key in ("numpy_version", "python_version", "platform", "date_utc", "command"):
        assert prov[key]
    cases = PARITY["cases"]
    assert len(cases) >= 12
    assert {c["class"] for c in cases} == set(CLASSES)
    modes = {c["kwargs"].get("warmup_mode", "linear") for c in cases
             if c["kwargs"].get("warmup_steps")}
    assert modes == {"linear", "constant"}
    # A FactorScheduler case reaches stop_factor_lr; Poly has pwr 1 and 2 with final_lr.
    assert any(c["class"] == "FactorScheduler" and "stop_factor_lr" in c["kwargs"]
               and float.fromhex(c["lrs"][-1]) == c["kwargs"]["stop_factor_lr"]
               and float.fromhex(c["lrs"][0]) > c["kwargs"]["stop_factor_lr"] for c in cases)
    assert {c["kwargs"]["pwr"] for c in cases
            if c["class"] == "PolyScheduler" and c["kwargs"].get("final_lr")} >= {1, 2}
    assert any(c["class"] == "CosineScheduler" and c["kwargs"].get("final_lr") for c in cases)


@pytest.mark.parametrize("case", PARITY["cases"], ids=[c["name"] for c in PARITY["cases"]])
def test_matches_mxnet_bit_for_bit(case):
    """Every recorded MXNet 1.9.1 value, compared as float.hex(): no tolerance. (The Poly and
    Cosine values go through libm pow/cos; they matched exactly on the machine that recorded
    them, which used the same CPython and glibc.)"""
    sched = CLASSES[case["class"]](**case["kwargs"])
    if case["set_base_lr"] is not None:
        sched.base_lr = case["set_base_lr"]
    got = [sched(n).hex() for n in case["calls"]]
    mismatches = [(n, g, w) for n, g, w in zip(case["calls"], got, case["lrs"]) if g != w]
    assert not mismatches, mismatches


# ------------------------------------------------------------------------------------------
# Stateful behaviour
# ------------------------------------------------------------------------------------------

stateful_kwargs = st.one_of(st.tuples(st.just(FactorScheduler), factor_kwargs()),
                            st.tuples(st.just(MultiFactorScheduler), multifactor_kwargs()))


@given(cls_kw=stateful_kwargs,
       increments=st.lists(st.integers(0, 40), min_size=1, max_size=12))
def test_jumps_equal_stepping_one_by_one(cls_kw, increments):
    """A jump forward applies every decay in between, bit for bit; repeated n is idempotent."""
    cls, kw = cls_kw
    jumpy, stepper = cls(**kw), cls(**kw)
    stepped = [stepper(n) for n in range(sum(increments) + 1)]
    n = 0
    for inc in increments:
        n += inc
        assert jumpy(n) == stepped[n]
        assert jumpy(n) == stepped[n]
    assert jumpy.state_dict() == stepper.state_dict()


@given(cls_kw=stateful_kwargs, hi=st.integers(0, 150), lo=st.integers(0, 150))
def test_stateful_schedulers_never_undo_a_decay(cls_kw, hi, lo):
    """Factor and MultiFactor: a smaller n after a larger one returns the current rate
    (or the warmup rate, if it falls in the warmup)."""
    cls, kw = cls_kw
    assume(lo < hi)
    sched = cls(**kw)
    at_hi = sched(hi)
    if lo < kw["warmup_steps"]:
        assert sched(lo) == cls(**kw)(lo)
    else:
        assert sched(lo) == sched.base_lr
        if hi >= kw["warmup_steps"]:
            assert sched(lo) == at_hi


def test_factor_huge_jump_is_fast_and_exact():
    """The loop stops early once the rate is a fixed point (floor reached, or factor 1)."""
    sched = FactorScheduler(step=3, factor=0.5, stop_factor_lr=1e-6, base_lr=1.0)
    assert sched(10 ** 15) == 1e-6
    assert sched.count == 3 * (ceil_div(10 ** 15, 3) - 1)
    sched = FactorScheduler(step=7, factor=1, base_lr=0.3)
    assert sched(10 ** 12 + 5) == 0.3 and sched.count == 7 * (ceil_div(10 ** 12 + 5, 7) - 1)
    sched = FactorScheduler(step=2, factor=0.0, stop_factor_lr=0.0, base_lr=0.3)
    assert sched(2) == 0.3 and sched(3) == 0.0 and sched(10 ** 12) == 0.0
    assert sched.count == 10 ** 12 - 2


@pytest.mark.parametrize("cls", [FactorScheduler, MultiFactorScheduler])
def test_base_lr_overwrite_changes_factor_schedules_after_warmup_only(cls):
    """docs/mxnet-facts.md, 1.1 and 8: an optimizer overwrites base_lr. Factor/MultiFactor decay
    from the new value; the warmup ramp still ends at the constructor's base_lr."""
    kw = dict(step=3 if cls is FactorScheduler else [3, 6], factor=0.5, base_lr=1.0,
              warmup_steps=4)
    sched = cls(**kw)
    sched.base_lr = 0.001
    assert [sched(n) for n in range(4)] == [0.0, 0.25, 0.5, 0.75]
    assert sched.warmup_final_lr == 1.0
    assert [sched(n) for n in (4, 7, 8)] == [0.0005, 0.00025, 0.00025]


@pytest.mark.parametrize("cls,kw_strategy", [(PolyScheduler, poly_kwargs()),
                                             (CosineScheduler, cosine_kwargs())])
@given(data=st.data(), new_lr=lrs)
def test_base_lr_overwrite_does_not_change_poly_or_cosine(cls, kw_strategy, data, new_lr):
    """docs/mxnet-facts.md, 8: Poly and Cosine decay from base_lr_orig, fixed at construction."""
    kw = data.draw(kw_strategy)
    plain, overwritten = cls(**kw), cls(**kw)
    overwritten.base_lr = new_lr
    assert overwritten.base_lr_orig == kw["base_lr"]
    for n in range(kw["max_update"] + 3):
        assert overwritten(n) == plain(n)


def test_cosine_overwrite_example_from_spec():
    """docs/mxnet-facts.md, 8 (facts.json ``adam_cosine_lr_used``):
    Adam(lr_scheduler=Cosine(base_lr=1.0)) sets base_lr = 0.001, yet the rate at n=1 is about
    0.9755 (max_update=10 gives cos(pi/10) terms)."""
    sched = CosineScheduler(max_update=10, base_lr=1.0)
    sched.base_lr = 0.001
    assert sched(1) == pytest.approx((1 + math.cos(math.pi / 10)) / 2, abs=1e-15)
    assert round(sched(1), 4) == 0.9755


@pytest.mark.parametrize("cls", [PolyScheduler, CosineScheduler])
def test_poly_cosine_hold_the_last_computed_value(cls):
    sched = cls(max_update=10, base_lr=1.0, final_lr=0.1)
    at5 = sched(5)
    assert sched(11) == at5 and sched(1000) == at5  # not final_lr: n=10 was never seen
    assert sched(3) != at5  # inside [W, M] the value is recomputed (order does not matter)
    sched(10)
    assert sched(11) == 0.1
    first = cls(max_update=10, base_lr=1.0)
    first.base_lr = 0.25
    assert first(50) == 0.25  # a first call past max_update returns the current base_lr


# ------------------------------------------------------------------------------------------
# Argument checking
# ------------------------------------------------------------------------------------------

BAD_CONSTRUCTIONS = [
    # (id, constructor, exception, words the message must contain)
    ("base_lr negative", lambda: FactorScheduler(3, base_lr=-0.1), ValueError, "base_lr"),
    ("base_lr nan", lambda: PolyScheduler(10, base_lr=float("nan")), ValueError, "base_lr"),
    ("base_lr inf", lambda: CosineScheduler(10, base_lr=math.inf), ValueError, "base_lr"),
    ("base_lr str", lambda: FactorScheduler(3, base_lr="0.1"), TypeError, "base_lr"),
    ("base_lr bool", lambda: FactorScheduler(3, base_lr=True), TypeError, "base_lr"),
    ("base_lr None", lambda: MultiFactorScheduler([3], base_lr=None), TypeError, "base_lr"),
    ("warmup_steps negative", lambda: FactorScheduler(3, warmup_steps=-1), ValueError,
     "warmup_steps"),
    ("warmup_steps float", lambda: FactorScheduler(3, warmup_steps=2.0), TypeError,
     "warmup_steps"),
    ("warmup_steps bool", lambda: PolyScheduler(10, warmup_steps=True), TypeError,
     "warmup_steps"),
    ("warmup_begin_lr above base_lr",
     lambda: FactorScheduler(3, base_lr=0.1, warmup_begin_lr=0.2), ValueError,
     "warmup_begin_lr"),
    ("warmup_begin_lr negative", lambda: FactorScheduler(3, warmup_begin_lr=-1e-3), ValueError,
     "warmup_begin_lr"),
    ("warmup_begin_lr nan", lambda: CosineScheduler(10, warmup_begin_lr=math.nan), ValueError,
     "warmup_begin_lr"),
    ("warmup_mode unknown", lambda: FactorScheduler(3, warmup_mode="cosine"), ValueError,
     "warmup_mode"),
    ("warmup_mode None", lambda: PolyScheduler(10, warmup_mode=None), ValueError, "warmup_mode"),
    ("factor step zero", lambda: FactorScheduler(0), ValueError, "step"),
    ("factor step float", lambda: FactorScheduler(2.5), TypeError, "step"),
    ("factor above 1", lambda: FactorScheduler(3, factor=1.5), ValueError, "factor"),
    ("factor negative", lambda: FactorScheduler(3, factor=-0.5), ValueError, "factor"),
    ("factor nan", lambda: FactorScheduler(3, factor=math.nan), ValueError, "factor"),
    ("stop_factor_lr negative", lambda: FactorScheduler(3, stop_factor_lr=-1.0), ValueError,
     "stop_factor_lr"),
    ("stop_factor_lr inf", lambda: FactorScheduler(3, stop_factor_lr=math.inf), ValueError,
     "stop_factor_lr"),
    ("multi step empty", lambda: MultiFactorScheduler([]), TypeError, "step"),
    ("multi step int", lambda: MultiFactorScheduler(5), TypeError, "step"),
    ("multi step repeated", lambda: MultiFactorScheduler([3, 3]), ValueError, "step"),
    ("multi step decreasing", lambda: MultiFactorScheduler([5, 2]), ValueError, "step"),
    ("multi step zero", lambda: MultiFactorScheduler([0, 3]), ValueError, "step[0]"),
    ("multi step float", lambda: MultiFactorScheduler([1, 2.5]), TypeError, "step[1]"),
    ("multi factor above 1", lambda: MultiFactorScheduler([3], factor=2), ValueError, "factor"),
    ("poly max_update zero", lambda: PolyScheduler(0), ValueError, "max_update"),
    ("poly max_update float", lambda: PolyScheduler(10.0), TypeError, "max_update"),
    ("poly pwr zero", lambda: PolyScheduler(10, pwr=0), ValueError, "pwr"),
    ("poly pwr negative", lambda: PolyScheduler(10, pwr=-1), ValueError, "pwr"),
    ("poly pwr nan", lambda: PolyScheduler(10, pwr=math.nan), ValueError, "pwr"),
    ("poly pwr str", lambda: PolyScheduler(10, pwr="2"), TypeError, "pwr"),
    ("poly final_lr negative", lambda: PolyScheduler(10, final_lr=-0.1), ValueError,
     "final_lr"),
    ("poly warmup_steps == max_update", lambda: PolyScheduler(10, warmup_steps=10), ValueError,
     "warmup_steps"),
    ("cosine max_update negative", lambda: CosineScheduler(-3), ValueError, "max_update"),
    ("cosine final_lr nan", lambda: CosineScheduler(10, final_lr=math.nan), ValueError,
     "final_lr"),
    ("cosine warmup_steps > max_update", lambda: CosineScheduler(5, warmup_steps=8),
     ValueError, "warmup_steps"),
]


@pytest.mark.parametrize("make,exc,words", [c[1:] for c in BAD_CONSTRUCTIONS],
                         ids=[c[0] for c in BAD_CONSTRUCTIONS])
def test_bad_arguments_raise_naming_the_argument(make, exc, words):
    with pytest.raises(exc) as info:
        make()
    msg = str(info.value)
    assert words in msg
    assert re.search(r"must|expected", msg), msg  # says what was expected


ALL_SCHEDULERS = [lambda: FactorScheduler(3), lambda: MultiFactorScheduler([3]),
                  lambda: PolyScheduler(10), lambda: CosineScheduler(10)]


@pytest.mark.parametrize("make", ALL_SCHEDULERS, ids=list(CLASSES))
@pytest.mark.parametrize("n,exc", [(-1, ValueError), (1.5, TypeError), (2.0, TypeError),
                                   (True, TypeError), ("3", TypeError), (None, TypeError)])
def test_bad_num_update_raises(make, n, exc):
    sched = make()
    with pytest.raises(exc, match="num_update"):
        sched(n)


@pytest.mark.parametrize("make", ALL_SCHEDULERS, ids=list(CLASSES))
def test_numpy_integers_and_floats_are_accepted(make):
    sched, ref = make(), make()
    assert sched(np.int64(4)) == ref(4)
    assert FactorScheduler(np.int32(3), factor=np.float32(0.5), base_lr=np.float64(0.1))(4) \
        == 0.05


@pytest.mark.parametrize("make", ALL_SCHEDULERS, ids=list(CLASSES))
@pytest.mark.parametrize("value,exc", [(-0.1, ValueError), (math.nan, ValueError),
                                       (math.inf, ValueError), ("0.1", TypeError)])
def test_bad_base_lr_assignment_raises_and_keeps_the_old_value(make, value, exc):
    sched = make()
    with pytest.raises(exc, match="base_lr"):
        sched.base_lr = value
    assert sched.base_lr == 0.01


def test_get_warmup_lr_outside_warmup_raises():
    sched = FactorScheduler(3, warmup_steps=2)
    assert sched.get_warmup_lr(1) == 0.005
    with pytest.raises(ValueError, match="warmup_steps"):
        sched.get_warmup_lr(2)


def test_base_class_has_no_schedule_after_warmup():
    sched = LRScheduler(base_lr=0.1, warmup_steps=2)
    assert sched(1) == 0.05
    with pytest.raises(NotImplementedError):
        sched(2)


def test_rates_are_python_floats():
    """MXNet returns an int when every input is an int; the value is the same."""
    assert type(FactorScheduler(step=1, factor=1, base_lr=1)(5)) is float
    assert type(MultiFactorScheduler(step=[1], factor=1, base_lr=1)(5)) is float
    assert type(PolyScheduler(2, base_lr=1, pwr=1, warmup_steps=1, warmup_begin_lr=1,
                              warmup_mode="constant")(0)) is float


# ------------------------------------------------------------------------------------------
# state_dict / load_state_dict
# ------------------------------------------------------------------------------------------

any_kwargs = st.one_of(st.tuples(st.just(FactorScheduler), factor_kwargs()),
                       st.tuples(st.just(MultiFactorScheduler), multifactor_kwargs()),
                       st.tuples(st.just(PolyScheduler), poly_kwargs()),
                       st.tuples(st.just(CosineScheduler), cosine_kwargs()))


@given(cls_kw=any_kwargs, split=st.integers(0, 200), overwrite=st.one_of(st.none(), lrs))
def test_state_dict_round_trip_through_json_continues_exactly(cls_kw, split, overwrite):
    cls, kw = cls_kw
    original = cls(**kw)
    if overwrite is not None:
        original.base_lr = overwrite
    for n in range(split + 1):
        original(n)
    state = original.state_dict()
    assert all(type(k) is str and type(v) in (int, float) for k, v in state.items())
    text = json.dumps(state)
    restored = cls(**kw)
    restored.load_state_dict(json.loads(text))
    assert restored.state_dict() == state
    for n in range(split, split + 60):
        assert restored(n).hex() == original(n).hex()


def test_state_dict_is_a_copy():
    sched = FactorScheduler(2, factor=0.5, base_lr=1.0)
    sched(5)
    state = sched.state_dict()
    state["base_lr"] = 7.0
    assert sched.base_lr == 0.25 and sched.state_dict() == {"base_lr": 0.25, "count": 4}


def test_state_dict_restores_poly_past_max_update():
    """Why the state matters: a fresh Poly asked for n > max_update returns base_lr."""
    done = PolyScheduler(10, base_lr=1.0, final_lr=0.1)
    for n in range(11):
        done(n)
    fresh = PolyScheduler(10, base_lr=1.0, final_lr=0.1)
    assert fresh(20) == 1.0
    fresh.load_state_dict(done.state_dict())
    assert fresh(20) == 0.1


BAD_STATES = [
    ("not a dict", lambda: FactorScheduler(2), [("base_lr", 0.1)], TypeError, "dict"),
    ("missing key", lambda: FactorScheduler(2), {"base_lr": 0.1}, ValueError, "count"),
    ("unknown key", lambda: PolyScheduler(10), {"base_lr": 0.1, "count": 0}, ValueError,
     "count"),
    ("base_lr negative", lambda: CosineScheduler(10), {"base_lr": -1.0}, ValueError, "base_lr"),
    ("base_lr str", lambda: CosineScheduler(10), {"base_lr": "x"}, TypeError, "base_lr"),
    ("count float", lambda: FactorScheduler(2), {"base_lr": 0.1, "count": 2.0}, TypeError,
     "count"),
    ("count negative", lambda: FactorScheduler(2), {"base_lr": 0.1, "count": -2}, ValueError,
     "count"),
    ("count not a multiple of step", lambda: FactorScheduler(2), {"base_lr": 0.1, "count": 3},
     ValueError, "count"),
    ("cur_step_ind too large", lambda: MultiFactorScheduler([3, 6]),
     {"base_lr": 0.1, "count": 6, "cur_step_ind": 3}, ValueError, "cur_step_ind"),
    ("count inconsistent", lambda: MultiFactorScheduler([3, 6]),
     {"base_lr": 0.1, "count": 3, "cur_step_ind": 2}, ValueError, "count"),
]


@pytest.mark.parametrize("make,state,exc,words", [c[1:] for c in BAD_STATES],
                         ids=[c[0] for c in BAD_STATES])
def test_bad_state_raises_and_changes_nothing(make, state, exc, words):
    sched = make()
    sched(1)
    before = sched.state_dict()
    with pytest.raises(exc) as info:
        sched.load_state_dict(state)
    assert words in str(info.value)
    assert sched.state_dict() == before


# ------------------------------------------------------------------------------------------
# Documentation
# ------------------------------------------------------------------------------------------

def test_docstring_examples_run():
    # the classes are defined in the package's modules (base, step, decay) and re-exported:
    # their examples and their methods' run in the package's namespace, as from one module
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder(recurse=False).find(lr_scheduler):
        runner.run(test)
    for name in lr_scheduler.__all__:
        for test in finder.find(getattr(lr_scheduler, name), name, module=False,
                                globs=vars(lr_scheduler)):
            if test.examples:
                runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 25 and result.failed == 0


def test_module_and_classes_are_documented():
    assert lr_scheduler.__doc__.startswith("Learning-rate schedules")
    for cls in (LRScheduler, *CLASSES.values()):
        doc = cls.__doc__
        assert "Glossary" in doc and "Example" in doc and ">>>" in doc, cls
    assert "floor" in FactorScheduler.__doc__ and "<=" in MultiFactorScheduler.__doc__
    assert "0 otherwise" in PolyScheduler.__doc__ and "0 otherwise" in CosineScheduler.__doc__


def test_repr_round_trips_the_configuration():
    for sched in (FactorScheduler(3, factor=0.5), MultiFactorScheduler([2, 4]),
                  PolyScheduler(10, pwr=1.5), CosineScheduler(10, final_lr=0.001)):
        assert repr(eval(repr(sched), vars(lr_scheduler))) == repr(sched)
