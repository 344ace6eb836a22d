"""The oracle never crashes on what a user's code does: whatever ``make_step`` or ``step``
returns or raises, ``verify`` and ``identify`` return a report (docs/oracle.md, "What the oracle
refuses"); only ``SystemExit`` and ``KeyboardInterrupt`` pass through."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit import oracle
from toolkit.oracle import region
from toolkit.oracle.space import Decades

from examples_budget import scaled
from test_oracle import make_adam


def test_bisection_between_far_apart_ends_stays_inside_them():
    # sqrt(bad*good) underflowed to 0 once the ends were 1e-300 and 1e-150 apart, and the next
    # ratio max/min divided by it (ZeroDivisionError)
    edge = region.bisect(lambda x: x < 1e-200, 1e-300, 0.5)
    assert 1e-200 <= edge <= 1.02e-200
    assert region.bisect(lambda x: x < 1e-320 or x == 0.0, 5e-324, 1e308) >= 1e-320
    assert 0.3 <= region.bisect(lambda x: x < 0.3, 0.0, 0.5) <= 0.3005


def _adam_wrong_below(limit):
    correct = make_adam()

    def make(w, **hyper):
        step = correct(w, **hyper)
        return lambda g: step(g) * (1.5 if hyper["beta1"] < limit else 1.0)
    return make


def test_a_failure_only_for_beta1_below_1e_200_is_located_not_a_crash():
    # the Adam: verify ended in ZeroDivisionError at the region's bisection
    r = oracle.verify(_adam_wrong_below(1e-200), "adam", convention="guide", dtype="float64",
                      examples=10, ranges={"beta1": Decades(-310, -290)})
    assert r.domains["usual"].passed and not r.domains["full"].passed
    # the bisection stops within 1% of the edge, from wherever the drawn case starts it
    edge = float(r.region.split("only for beta1 < ")[1].split(" ")[0])
    assert 1e-200 <= edge <= 1.02e-200, r.region


# --------------------------------------------------------------------------------------------
# adversarial implementations: each call of step does what the plan says
# --------------------------------------------------------------------------------------------
class _Odd(BaseException):
    """An exception outside Exception's tree (neither SystemExit nor KeyboardInterrupt)."""


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no message either")


class _Unreadable:
    def __array__(self, *args, **kwargs):
        raise RuntimeError("no array here")


def _result(kind, w, g, right):
    """What step returns for ``kind``; ``right`` is the correct implementation's result."""
    table = {
        "right": lambda: right,
        "nan": lambda: np.full_like(w, np.nan),
        "inf": lambda: np.full_like(w, np.inf),
        "-inf": lambda: np.full_like(w, -np.inf),
        "zero": lambda: np.zeros_like(w),
        "huge": lambda: np.full(w.shape, 1e308),
        "tiny": lambda: np.full_like(w, 5e-324 if w.dtype == np.float64 else 1e-45),
        "one wrong element": lambda: np.where(np.arange(w.size).reshape(w.shape) == 0,
                                              right * 3.0 + 1.0, right),
        "wrong shape": lambda: np.zeros(w.size + 1, w.dtype),
        "scalar": lambda: 1.0,
        "string": lambda: "weights",
        "none": lambda: None,
        "list of strings": lambda: ["a"] * w.size,
        "ints": lambda: np.zeros(w.shape, dtype=np.int64),
        "complex": lambda: right + 1e-3j,
        "object": lambda: object(),
        "unreadable": lambda: _Unreadable(),
        "float64": lambda: np.asarray(right, np.float64),
        "float16": lambda: np.asarray(right, np.float16),
        "gradient": lambda: g,
    }
    if kind == "raise":
        raise RuntimeError("the user's bug")
    if kind == "raise odd":
        raise _Odd("not an Exception")
    if kind == "raise unprintable":
        raise _Unprintable()
    if kind == "seterr raise":
        np.seterr(all="raise")  # the user's code changes numpy's global error state
        return right
    return table[kind]()


KINDS = ["right", "nan", "inf", "-inf", "zero", "huge", "tiny", "one wrong element",
         "wrong shape", "scalar", "string", "none", "list of strings", "ints", "complex",
         "object", "unreadable", "float64", "float16", "gradient", "raise", "raise odd",
         "raise unprintable", "seterr raise"]
#: what may pass: the right values (a result of another dtype than the input's fails)
MAY_PASS = {"right", "seterr raise"}


def _adversary(correct, plan, make_plan):
    """A make_step that follows ``correct`` but returns what ``plan`` says on each step call
    (cycling), and on each make_step call does what ``make_plan`` says."""
    calls = {"make": 0, "step": 0}

    def make(w, **hyper):
        what = make_plan[calls["make"] % len(make_plan)]
        calls["make"] += 1
        if what == "raise":
            raise ValueError("make_step refuses")
        if what == "not callable":
            return 42
        step = correct(w, **hyper)

        def adversarial(g):
            kind = plan[calls["step"] % len(plan)]
            calls["step"] += 1
            return _result(kind, w, g, step(g))
        return adversarial
    return make


def _correct(name):
    from test_oracle import make_sgd
    return make_adam() if name == "adam" else make_sgd()


@settings(max_examples=scaled(30), deadline=None, derandomize=True, database=None)
@given(name=st.sampled_from(["sgd", "adam"]),
       plan=st.lists(st.sampled_from(KINDS), min_size=1, max_size=4),
       make_plan=st.lists(st.sampled_from(["ok", "ok", "ok", "raise", "not callable"]),
                          min_size=1, max_size=3),
       dtype=st.sampled_from(["float16", "float32", "float64"]),
       seed=st.integers(0, 3))
def test_verify_and_identify_return_a_report_whatever_the_user_does(name, plan, make_plan,
                                                                      dtype, seed):
    saved = np.geterr()
    try:
        make = _adversary(_correct(name), plan, make_plan)
        r = oracle.verify(make, name, convention="guide", dtype=dtype, examples=3, seed=seed)
        assert isinstance(r.summary, str) and r.to_dict()["passed"] == r.passed
        same = {"float64": dtype == "float64", "float16": dtype == "float16"}
        if {k for k in plan if not same.get(k, False)} - MAY_PASS or set(make_plan) != {"ok"}:
            assert not r.passed, plan  # every other behaviour is wrong at once
        i = oracle.identify(make, name, dtype=dtype, cases=6, screen=50, seed=seed)
        assert isinstance(i.summary, str) and i.to_dict()["matches"] == i.matches
    finally:
        np.seterr(**saved)


@pytest.mark.parametrize("stop", [SystemExit(3), KeyboardInterrupt()], ids=type)
@pytest.mark.parametrize("where", ["make_step", "step"])
def test_system_exit_and_keyboard_interrupt_pass_through(stop, where):
    def make(w, **hyper):
        if where == "make_step":
            raise stop

        def step(g):
            raise stop
        return step
    for run in (oracle.verify, oracle.identify):
        with pytest.raises(type(stop)):
            run(make, "sgd")


# --------------------------------------------------------------------------------------------
# strict about what the user returns: the input's dtype, unless wider results are allowed
# --------------------------------------------------------------------------------------------
def _adam_returning(dtype):
    correct = make_adam()

    def make(w, **hyper):
        step = correct(w.astype(dtype), **hyper)
        return lambda g: step(g.astype(dtype))
    return make


@pytest.mark.parametrize("given, returned", [("float32", "float64"), ("float16", "float64"),
                                             ("float16", "float32"), ("float32", "float16"),
                                             ("float64", "float32")])
def test_a_result_of_another_dtype_fails_naming_both(given, returned):
    make = _adam_returning(returned)
    r = oracle.verify(make, "adam", convention="guide", dtype=given, examples=5)
    assert not r.passed
    assert f"returned {returned} for {given} input" in r.failure, r.failure
    if np.dtype(returned).itemsize > np.dtype(given).itemsize:
        assert "allow_wider=True" in r.failure
    i = oracle.identify(make, "adam", dtype=given, cases=4, screen=50)
    assert i.convention is None and f"returned {returned} for {given} input" in i.failure


def test_allow_wider_accepts_a_wider_result_and_says_so():
    make = _adam_returning("float64")
    r = oracle.verify(make, "adam", convention="guide", dtype="float32", examples=10,
                      allow_wider=True)
    assert r.passed, r.summary
    assert r.allow_wider and r.wider == "float64" and r.to_dict()["wider"] == "float64"
    assert "wider results allowed (allow_wider=True): yours are float64 for float32" in r.summary
    # a narrower result is refused even then
    narrow = oracle.verify(_adam_returning("float16"), "adam", convention="guide",
                           dtype="float32", examples=5, allow_wider=True)
    assert not narrow.passed and "returned float16 for float32 input" in narrow.failure
    # the same dtype: allowed, and said to be the input's
    same = oracle.verify(make_adam(), "adam", convention="guide", dtype="float32", examples=5,
                         allow_wider=True)
    assert same.passed and same.wider is None and "yours were all float32" in same.summary
    i = oracle.identify(make, "adam", dtype="float32", cases=4, screen=50, allow_wider=True)
    assert i.convention == "guide" and i.wider == "float64"


@pytest.mark.parametrize("kwargs", [dict(cases=0), dict(cases=-1), dict(cases=2), dict(cases=True),
                                    dict(cases=2.0), dict(screen=0), dict(screen=None)])
def test_identify_counts_are_checked(kwargs):
    # sgd has three conventions of its own (mxnet, guide, pytorch): three pairs, a case each
    with pytest.raises(ValueError, match="must be an int >= "):
        oracle.identify(make_adam(), "sgd", **kwargs)


@pytest.mark.parametrize("kwargs", [dict(examples=0), dict(examples=2.0), dict(examples=False),
                                    dict(usual_examples=0), dict(usual_examples="5")])
def test_verify_counts_are_checked(kwargs):
    with pytest.raises(ValueError, match="must be an int >= 1"):
        oracle.verify(make_adam(), "adam", **kwargs)


def test_allow_wider_must_be_a_bool():
    with pytest.raises(TypeError, match="allow_wider"):
        oracle.verify(make_adam(), "adam", allow_wider="yes")


# --------------------------------------------------------------------------------------------
# pinned hyperparameters that make_step does not take are not passed to it
# --------------------------------------------------------------------------------------------
def _torch_style_adam(w, learning_rate, beta1, beta2, epsilon, wd):
    """Adam with PyTorch's argument list (no rescale_grad, no clip_gradient)."""
    return make_adam()(w, learning_rate, wd, 1.0, None, beta1, beta2, epsilon)


PINS = dict(rescale_grad=1.0, clip_gradient=None)


def test_a_pinned_hyperparameter_make_step_does_not_take_is_not_passed():
    r = oracle.verify(_torch_style_adam, "adam", convention="guide", examples=10, fixed=PINS)
    assert r.passed, r.summary
    i = oracle.identify(_torch_style_adam, "adam", cases=4, screen=50, fixed=PINS)
    assert i.convention == "guide", i.summary
    # **kwargs and a named parameter still get the pinned value
    seen = []

    def keeps(w, rescale_grad, **rest):
        seen.append((rescale_grad, rest["clip_gradient"]))
        return _torch_style_adam(w, **{k: rest[k] for k in ("learning_rate", "beta1", "beta2",
                                                             "epsilon", "wd")})
    assert oracle.verify(keeps, "adam", convention="guide", examples=3, fixed=PINS).passed
    assert seen and set(seen) == {(1.0, None)}


def test_a_drawn_hyperparameter_make_step_does_not_take_says_what_to_do():
    r = oracle.verify(_torch_style_adam, "adam", convention="guide", examples=3,
                      fixed=dict(rescale_grad=1.0))
    assert not r.passed
    assert "it takes no 'clip_gradient'" in r.failure, r.failure
    assert "**kwargs" in r.failure and "fixed={'clip_gradient': value}" in r.failure


# --------------------------------------------------------------------------------------------
# a time limit per step, and progress
# --------------------------------------------------------------------------------------------
def _slow_adam(seconds):
    import time
    correct = make_adam()

    def make(w, **hyper):
        step = correct(w, **hyper)

        def slow(g):
            time.sleep(seconds)
            return step(g)
        return slow
    return make


def test_a_step_over_the_time_limit_fails_the_run_saying_so():
    r = oracle.verify(_slow_adam(0.05), "adam", convention="guide", examples=50, timeout=0.01)
    assert not r.passed and r.max_error == np.inf
    assert "step 1 took" in r.failure and "over the limit of 0.01 s per step" in r.failure
    # the run ended at the first slow step (of the first case: a discriminating one, where
    # the optimizer has some, runs before the drawn ones)
    assert r.examples + r.domains["full"].discriminating == 1
    i = oracle.identify(_slow_adam(0.05), "adam", cases=4, screen=50, timeout=0.01)
    assert i.convention is None and "over the limit" in i.failure
    assert oracle.verify(_slow_adam(0.0), "adam", convention="guide", examples=5,
                         timeout=10.0).passed


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "1"])
def test_a_timeout_is_a_positive_number_of_seconds(bad):
    with pytest.raises(ValueError, match="timeout must be"):
        oracle.verify(make_adam(), "adam", timeout=bad)


def test_progress_is_called_with_the_cases_run():
    seen = []
    r = oracle.verify(make_adam(), "adam", convention="guide", examples=6, progress=seen.append)
    assert r.passed and seen == list(range(1, len(seen) + 1)) and len(seen) >= 6 + 3
    with pytest.raises(TypeError, match="progress must be callable"):
        oracle.verify(make_adam(), "adam", progress="yes")


# --------------------------------------------------------------------------------------------
# verify inside a user's own hypothesis test
# --------------------------------------------------------------------------------------------
@settings(max_examples=2, deadline=None, database=None)
@given(st.integers(0, 3))
def test_verify_runs_inside_a_hypothesis_test(seed):
    # verify drew its cases with a @given of its own, which hypothesis refused inside another
    # (FailedHealthCheck nested_given); its cases are drawn by index now
    assert oracle.verify(make_adam(), "adam", convention="guide", examples=2, seed=seed).passed
