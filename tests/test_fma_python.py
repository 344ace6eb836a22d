"""``toolkit.backends.jit.fma`` called from Python, as numba's CUDA simulator calls it (compiled
code calls LLVM's fused multiply-add): one rounding of the exact ``a*b + c``, and IEEE's fused
results for infinities, NaNs and results beyond the range (a float16 weight that overflowed
reached it through a "pytorch" rule's gradient, and the simulator raised OverflowError)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from toolkit.backends.jit import fma

INF, NAN = math.inf, math.nan


@pytest.mark.parametrize("a, b, c, expected", [
    (2.0, 3.0, 1.0, 7.0),
    (INF, 2.0, 1.0, INF), (INF, 0.0, 1.0, NAN), (INF, 1.0, -INF, NAN), (NAN, 1.0, 1.0, NAN),
    (1.0, 1.0, NAN, NAN),
    # a finite product does not cancel an infinite addend (unfused, 1e300*1e300 is inf first)
    (1e300, 1e300, -INF, -INF), (1e300, 1e300, INF, INF),
    # the exact result beyond float64's range: an infinity of its sign
    (1e300, 1e300, -1.0, INF), (-1e300, 1e300, 1.0, -INF),
    # a product beyond the range brought back by the addend: the exact result
    (1e308, 2.0, -1.7e308, float(Fraction(1e308) * 2 - Fraction(1.7e308))),
])
def test_special_values_are_ieee_fused(a, b, c, expected):
    got = fma(a, b, c)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == expected


def test_one_rounding_and_the_operands_type():
    # 1 + 2^-60 is not a float64; (1 + 2^-30)^2 - 1 rounded once keeps the 2^-60 term
    x = 1.0 + 2.0 ** -30
    assert fma(x, x, -1.0) == 2.0 ** -29 + 2.0 ** -60
    assert x * x - 1.0 == 2.0 ** -29  # unfused, it is lost
    got = fma(np.float32(2), np.float32(3), np.float32(1))
    assert type(got) is np.float32 and got == 7
    with np.errstate(over="ignore"):
        assert fma(np.float32(3e38), np.float32(10), np.float32(0)) == np.float32(np.inf)
