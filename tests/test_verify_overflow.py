"""``toolkit.verify.normalised_error`` on results beyond the dtype's range (issue 19 item 12):
an infinity is the correctly rounded result of a reference beyond the overflow threshold with
the same sign (error 0), and is as far from any other reference as the threshold is."""
from __future__ import annotations

import math

import numpy as np
import pytest

from reference.error_bound import track
from toolkit.verify import finite_score, normalised_error, overflow_threshold


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
