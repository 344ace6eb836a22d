"""``toolkit.error_bounds.normalised_error`` on results beyond the dtype's range (issue 19 item 12):
an infinity is the correctly rounded result of a reference beyond the overflow threshold with
the same sign (error 0), and is as far from any other reference as the threshold is."""
from __future__ import annotations

import math

import numpy as np
import pytest

from reference.error_bound import track
from toolkit.error_bounds import finite_score, normalised_error, overflow_threshold, overflowed


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_overflow_threshold_is_where_rounding_gives_infinity(dtype):
    top = overflow_threshold(dtype)
    with np.errstate(over="ignore"):
        assert np.isinf(np.float64(top).astype(dtype))
        assert np.isfinite(np.nextafter(top, 0).astype(dtype))
    assert overflow_threshold(np.float64) == math.inf


def test_an_infinity_beyond_the_range_is_exact():
    ref = track(np.array([2.2e39, -5e38, 1.0]), np.float32)
    out = np.array([np.inf, -np.inf, 1.0], dtype=np.float32)
    assert normalised_error(out, ref)[0] == 0.0
    # the wrong sign, or a reference inside the range, is an infinite error
    assert normalised_error(np.array([-np.inf, -np.inf, 1.0]), ref)[0] == math.inf
    inside = track(np.array([1e38]), np.float32)
    assert normalised_error(np.array([np.inf]), inside)[0] == math.inf
    # a float64 infinity against a float64 reference that overflowed too
    assert normalised_error(np.array([np.inf]), track(np.array([np.inf]), np.float64))[0] == 0.0


def test_an_infinity_near_the_threshold_is_as_far_as_the_threshold():
    top = overflow_threshold(np.float32)
    ref = track(np.array([top * (1 - 2.0 ** -30)]), np.float32) * 1.0  # one rounding: err u*|v|
    err = normalised_error(np.array([np.inf]), ref)[0]
    assert 0 < err < 1  # |v| + 4E reaches the threshold: inf is within the bound


def test_float16_storage_overflow_is_exact():
    ref = track(np.array([7e4]), np.float32)
    assert normalised_error(np.array([np.inf], np.float16), ref, storage=np.float16)[0] == 0.0


def test_finite_score_gives_target_a_finite_float():
    assert finite_score(0.5) == 0.5
    assert math.isfinite(finite_score(math.inf)) and math.isfinite(finite_score(math.nan))
    assert finite_score(math.inf) >= 1e308


def test_overflowed_is_the_exact_infinity_only():
    ref = track(np.array([2.2e39, 1.0]), np.float32)
    assert overflowed(np.array([np.inf, 1.0], np.float32), ref)
    assert not overflowed(np.array([-np.inf, 1.0], np.float32), ref)          # wrong sign
    assert not overflowed(np.array([np.inf, 1.0], np.float32), track(np.array([1e38, 1.0]),
                                                                     np.float32))
    assert not overflowed(np.array([3e38, 1.0], np.float32), ref)


def _dcasgd_run(large):
    """The thorough profile's DCASGD regime (issue 19 item 12): learning_rate 1, rescale_grad
    10, lamda 0.04, 24 weights of -1, gradients -1 but element 0 of some steps, five steps
    repeated three times; the float64 trajectory leaves float32's range."""
    from toolkit import optimizer
    from toolkit.error_bounds import trajectory_errors
    grads = [-np.ones(24, np.float32) for _ in range(5)]
    for k, x in large.items():
        grads[k][0] = x
    opt = optimizer.create("dcasgd", convention="mxnet", backend="cpu", momentum=0.0,
                           lamda=0.04, learning_rate=1.0, wd=0.0, rescale_grad=10.0,
                           clip_gradient=None)
    w = -np.ones(24, np.float32)
    state = opt.create_state(0, w)
    with np.errstate(all="ignore"):
        res = trajectory_errors(opt, 0, w, grads * 3, state)
    return res, w


@pytest.mark.parametrize("large", [{3: -100.0, 4: -1000.0}, {1: -100.0, 4: -1000.0},
                                   {1: -100.0, 2: -1000.0}], ids=["inf-at-15", "inf-at-10",
                                                                  "nan-after-inf"])
def test_a_trajectory_that_leaves_the_range_is_compared_up_to_its_overflow(large):
    """The reference reaches about 2e39 (or -5e38 one step before): the kernel's infinity is
    exact, and a NaN after it (``inf - inf`` in DCASGD's ``w - w_prev``) is not compared with a
    float64 reference that went on from a finite value."""
    res, w = _dcasgd_run(large)
    assert not np.all(np.isfinite(w))  # the kernel did leave the range
    assert all(err <= 1.0 for err, _, _ in res.values()), res


# --------------------------------------------------------------------------------------------
# after an element correctly overflows, every other element is still compared (per element)
# --------------------------------------------------------------------------------------------
W0 = [3e38, 1.0, 2.0]            # element 0 leaves float32's range at the first step (lr 1)
GRAD = [-1e38, 1.0, 1.0]


def _sgd_kernel_run(wrong_after_overflow):
    """The SGD kernel, free-running from W0; planted: once the weight holds an infinity, element
    1 is off by 0.5 (an implementation that mishandles the other elements after one blew up)."""
    from toolkit import optimizer
    from toolkit.error_bounds import trajectory_errors
    opt = optimizer.create("sgd", backend="cpu", learning_rate=1.0)
    update = opt.update

    def planted(index, weight, grad, state, **kw):
        blown = not np.all(np.isfinite(weight))
        update(index, weight, grad, state, **kw)
        if wrong_after_overflow and blown:
            weight[1] += np.float32(0.5)
    opt.update = planted
    w = np.array(W0, np.float32)
    state = opt.create_state(0, w)
    with np.errstate(all="ignore"):
        return trajectory_errors(opt, 0, w, [np.array(GRAD, np.float32)] * 3, state)


def test_a_trajectory_compares_the_other_elements_after_an_overflow():
    assert _sgd_kernel_run(False)["weight"][0] <= 1.0
    assert _sgd_kernel_run(True)["weight"][0] > 1e3


def _numpy_sgd(wrong_after_overflow):
    def update(w, g, state, t):
        with np.errstate(all="ignore"):
            new = w - np.float32(1.0) * g   # no wd term: inf stays inf (MXNet's 0*inf is NaN)
        if wrong_after_overflow and t >= 2:
            new[1] += np.float32(0.5)
        w[...] = new
    return update


def test_check_function_compares_the_other_elements_after_an_overflow():
    """Resynchronised: a step that starts from the infinity gets no verdict on the elements that
    depend on it (here element 0 only: inf - g or NaN are both what an overflowed value gives),
    and the usual one on every other element."""
    from toolkit.error_bounds import check_function
    grads = [np.array(GRAD, np.float32)] * 3
    good = check_function(_numpy_sgd(False), "sgd", np.array(W0, np.float32), grads, lr=1.0)
    assert all(r["weight"][0] <= 1.0 for r in good), good
    assert [r["weight"][1] for r in good] == [3, 2, 2]   # element 0 not compared after step 1
    bad = check_function(_numpy_sgd(True), "sgd", np.array(W0, np.float32), grads, lr=1.0)
    assert bad[0]["weight"][0] <= 1.0 and bad[1]["weight"][0] > 1e3 and bad[2]["weight"][0] > 1e3


#: learning rate 1 and rescale_grad 1e36: gradients above about 0.34 take their weight beyond
#: float32's range at once, the smaller ones do not
OVERFLOWING = {"momentum": 0.0, "wd": 0.0, "clip_gradient": None, "learning_rate": 1.0,
               "rescale_grad": 1e36}


def _make_sgd(freeze_after_overflow):
    def make_step(w0, learning_rate, wd, rescale_grad, clip_gradient, momentum):
        w = w0.copy()

        def step(g):
            if freeze_after_overflow and not np.all(np.isfinite(w)):
                return w.copy()     # "the weights blew up": the others stop moving too
            with np.errstate(all="ignore"):
                w[...] = w - np.float32(learning_rate) * (np.float32(rescale_grad) * g)
            return w.copy()
        return step
    return make_step


def test_the_oracle_compares_the_other_elements_after_an_overflow():
    from toolkit import oracle
    good = oracle.verify(_make_sgd(False), "sgd", convention="guide", fixed=OVERFLOWING,
                         examples=30)
    assert good.passed, good.summary
    bad = oracle.verify(_make_sgd(True), "sgd", convention="guide", fixed=OVERFLOWING,
                        examples=30)
    assert not bad.passed and bad.max_error > 1e3 and bad.worst["step"] >= 2, bad.summary
    assert "guide" in oracle.identify(_make_sgd(False), "sgd", fixed=OVERFLOWING).matches
    named = oracle.identify(_make_sgd(True), "sgd", fixed=OVERFLOWING)
    assert named.matches == [] and named.convention is None, named.summary


def test_overflow_mask_and_depends_are_per_element():
    from toolkit.error_bounds import depends, further_beyond, overflow_mask
    ref = track(np.array([2.2e39, 1.0, -5e38]), np.float32)
    out = np.array([np.inf, 1.0, np.inf], np.float32)
    assert overflow_mask(out, ref).tolist() == [True, False, False]   # -5e38 -> -inf only
    moved = further_beyond(ref, overflow_mask(out, ref))
    assert moved.value.tolist() == [4.4e39, 1.0, -5e38]
    assert depends(moved, ref).tolist() == [True, False, False]
    assert not depends(np.array([np.nan]), np.array([np.nan]))[0]


# --------------------------------------------------------------------------------------------
# an intermediate beyond the range: what is computed from it is not bounded (exempt), the rest is
# --------------------------------------------------------------------------------------------
def test_what_is_computed_from_a_value_beyond_the_range_is_exempt():
    """``n - gbar*gbar`` with both squares past float32's range (centered RMSProp, gamma1 0): the
    float64 reference's difference is 0, a float32 evaluation's is ``inf - inf`` = NaN. Element 0
    is flagged and exempt; element 1 (in range) is compared as usual."""
    from reference.error_bound import overflow_threshold as top_of
    assert top_of(np.float32) == overflow_threshold(np.float32)
    g = track(np.array([1.1e21, 1.5]), np.float32)
    var = g * g - g * g
    assert var.tie.tolist() == [True, False]
    assert (g * g).tie.tolist() == [False, False]   # a result beyond the range is compared itself
    assert (0.0 * (g * g)).tie.tolist() == [True, False]   # 0*inf is NaN
    assert np.sqrt(g * g).tie.tolist() == [True, False]
    assert np.sum(g * g).tie
    small = track(np.array([1.5, 2.0]), np.float32)
    assert not np.sum(small * small).tie
    with np.errstate(all="ignore"):
        out = (np.float32([1.1e21, 1.5]) * np.float32([1.1e21, 1.5])
               - np.float32([1.1e21, 1.5]) * np.float32([1.1e21, 1.5]))
    assert np.isnan(out[0]) and out[1] == 0.0
    assert normalised_error(out, var) == (0.0, 1, 1)
    # the element in range is still compared: a wrong value there fails
    assert normalised_error(np.array([np.nan, 1e-3]), var)[0] > 100
    # an operand whose bound reaches the threshold may be an infinity too
    near = track(np.array([overflow_threshold(np.float32) * (1 - 2.0 ** -30)]), np.float32) * 1.0
    assert (near - near).tie.tolist() == [True]
    # float64 has no threshold below infinity
    assert not (track(np.array([1e300]), np.float64) * 1.0).tie.any()
