"""``toolkit.verify.normalised_error`` on results beyond the dtype's range (issue 19 item 12):
an infinity is the correctly rounded result of a reference beyond the overflow threshold with
the same sign (error 0), and is as far from any other reference as the threshold is."""
from __future__ import annotations

import math

import numpy as np
import pytest

from reference.error_bound import track
from toolkit.verify import finite_score, normalised_error, overflow_threshold, overflowed


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
    from toolkit.verify import trajectory_errors
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
