"""bfloat16 conversions for the CPU kernels, by bit manipulation.

Numba has no bfloat16 type: a bfloat16 array reaches a kernel as its ``uint16`` view, and these
two functions convert one element. bfloat16 is the high half of a float32 (sign, the same 8
exponent bits, 7 mantissa bits), so

* :func:`bfloat16_to_single`: ``u32 = u16 << 16``, exactly (every bfloat16 is a float32);
* :func:`single_to_bfloat16`: round to nearest, ties to even, in integer arithmetic: add
  ``0x7FFF`` plus the lowest kept bit and keep the high 16 bits (a carry into the exponent is the
  right result, up to infinity; subnormals round the same way); a NaN becomes ``0xFFFF``, the NaN
  torch's CPU conversion (``Tensor.to(torch.bfloat16)``, its vectorised kernels) writes, whatever
  the NaN's sign and payload (``tests/test_bfloat16.py`` compares with torch's conversion).

Every case is computed and the right one selected, without branches, so the loops that use them
vectorise (as :mod:`toolkit.backends.half`).
"""
from __future__ import annotations

import numpy as np

__all__ = ["bfloat16_to_single", "single_to_bfloat16"]

_U32 = np.uint32
_U16 = np.uint16
_F32 = np.float32


def bfloat16_to_single(h):
    """The float32 value of the bfloat16 with bits ``h`` (a uint16), exactly."""
    return _U32(_U32(h) << _U32(16)).view(_F32)


def single_to_bfloat16(v):
    """The bits (uint16) of float32 ``v`` rounded to bfloat16, to nearest with ties to even; a
    NaN is ``0xFFFF``."""
    f = _F32(v).view(_U32)
    rounded = _U32((f + _U32(0x7FFF) + ((f >> _U32(16)) & _U32(1))) >> _U32(16))
    nan = (f & _U32(0x7FFFFFFF)) > _U32(0x7F800000)
    return _U16(_U32(0xFFFF) if nan else rounded)
