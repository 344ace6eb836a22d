"""IEEE 754 binary16 (float16) conversions for the CPU kernels, by bit manipulation.

Numba's CPU target has no float16 type, so a float16 array reaches a kernel as its ``uint16``
view, and these two functions convert one element: ``half_to_single`` exactly (every float16 is
a float32), ``single_to_half`` with round-to-nearest-even, subnormals, overflow to infinity and
NaN payloads as numpy's ``astype(np.float16)`` does it (``tests/test_half.py`` checks every
float16 and the float32 values at and around every rounding boundary bit for bit;
``python tests/test_half.py --exhaustive`` checks all 2**32 float32 values). Every case is
computed and the right one selected, without branches, so the loops that use them vectorise.

Bit layout: float16 = sign(1) exponent(5, bias 15) mantissa(10); float32 = sign(1) exponent(8,
bias 127) mantissa(23); a float16 exponent ``e`` is the float32 exponent ``e + 112``.

* float16 -> float32: a normal or infinite/NaN float16 moves its exponent and mantissa into
  place (exponent + 112, or 255 for 31); a subnormal ``m * 2**-24`` is computed in float32,
  exactly.
* float32 -> float16, normal range: add ``0xFFF`` plus the lowest kept mantissa bit and drop 13
  bits (round to nearest, ties to even; a carry into the exponent is the right result).
  Subnormal range (below ``2**-14``): ``|x| + 0.5`` in float32 rounds ``|x|`` to a multiple of
  ``2**-24`` (the float32 spacing at 0.5), ties to even, and the bits above 0.5's are the
  float16 subnormal. ``|x| >= 65520`` overflows (65504 is odd, so its tie rounds up); NaNs keep
  the high bits of their payload (a payload that would vanish becomes 1).
"""
from __future__ import annotations

import numpy as np

__all__ = ["half_to_single", "single_to_half"]

_U32 = np.uint32
_U16 = np.uint16
_F32 = np.float32
_UNIT = np.float32(2.0 ** -24)      # the float16 subnormal step
_HALF = np.float32(0.5)
_HALF_BITS = np.uint32(0x3F000000)  # the bits of 0.5


def half_to_single(h):
    """The float32 value of the float16 with bits ``h`` (a uint16), exactly."""
    x = _U32(h)
    sign = _U32((x & _U32(0x8000)) << _U32(16))
    em = _U32(x & _U32(0x7FFF))
    moved = _U32((em << _U32(13)) + _U32(112 << 23))
    moved = _U32(moved + (_U32(112 << 23) if em >= _U32(0x7C00) else _U32(0)))
    sub = _F32(_F32(em) * _UNIT).view(_U32)
    return _U32((sub if em < _U32(0x400) else moved) | sign).view(_F32)


def single_to_half(v):
    """The bits (uint16) of float32 ``v`` rounded to float16, to nearest with ties to even."""
    f = _F32(v).view(_U32)
    sign = _U32((f >> _U32(16)) & _U32(0x8000))
    a = _U32(f & _U32(0x7FFFFFFF))
    normal = _U32((a + _U32(0xC8000FFF) + ((a >> _U32(13)) & _U32(1))) >> _U32(13))
    sub = _U32(_F32(_U32(a).view(_F32) + _HALF).view(_U32) - _HALF_BITS)
    nan = _U32(_U32(0x7C00) + ((a & _U32(0x7FFFFF)) >> _U32(13)))
    nan = _U32(nan + (_U32(1) if nan == _U32(0x7C00) else _U32(0)))
    big = nan if a > _U32(0x7F800000) else _U32(0x7C00)
    h = big if a >= _U32(0x477FF000) else (normal if a >= _U32(0x38800000) else sub)
    return _U16(h | sign)
