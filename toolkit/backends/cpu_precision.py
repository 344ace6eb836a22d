"""The vectorised float16 <-> float32 conversions of multi-precision steps (:func:`to_single`,
:func:`to_half_into`). The conversions themselves are :mod:`toolkit.backends.half`'s, closed
over by value (a change in them changes the cache key). A multi-precision step in one pass (a
float32 master updated from the float16 gradient widened on load, the float16 weight rounded
from it on store) is the addressed loop's (``addressed.addressed_mp_kernel``, run by
``cpu.MirrorLauncher`` for one tensor and by ``toolkit.torch`` for many).
"""
from __future__ import annotations

import numpy as np
from numba import prange, types

from . import jit
from .jit import by_value, cached, call_readonly, compile_kernel, inlined

__all__ = ["to_single", "to_half_into"]


def _convert_kernel(to_half: bool, parallel: bool):
    """The compiled loop ``loop(src, out)`` converting float16 bits (uint16) to float32 exactly,
    or (``to_half``) float32 to float16 bits rounded to nearest even (cached per process)."""
    key = ("to-half" if to_half else "to-single", bool(parallel))

    def build():
        from . import half
        convert = inlined(by_value(half.single_to_half if to_half else half.half_to_single))

        def loop(src, out):
            for i in prange(src.shape[0]):
                out[i] = convert(src[i])
        f32, u16 = types.float32[::1], types.uint16[::1]
        sig = types.void(f32, u16) if to_half else types.void(u16, f32)
        return compile_kernel(sig, parallel)(loop)
    return cached(key, build)


def _same_flat_order(a, b):
    """The memory order in which ``a`` and ``b`` are both contiguous, or None."""
    if a.flags.c_contiguous and b.flags.c_contiguous:
        return "C"
    if a.flags.f_contiguous and b.flags.f_contiguous:
        return "F"
    return None


def to_single(a16, out=None):
    """``a16`` (float16) as float32, exactly (``a16.astype(np.float32)``, or written into
    ``out``), by a vectorised kernel where both arrays are contiguous in one order: numpy's
    conversion takes about 2.5 ns per element on the development machine, the kernel about
    what copying the bytes takes."""
    if out is None:
        out = np.empty(a16.shape, np.float32, order="F" if (
            a16.flags.f_contiguous and not a16.flags.c_contiguous) else "C")
    order = _same_flat_order(a16, out)
    if order is None or a16.dtype != np.float16 or out.dtype != np.float32:
        out[...] = a16
    elif a16.size:
        kernel = _convert_kernel(False, a16.size >= jit.PARALLEL_THRESHOLD)
        args = (a16.reshape(-1, order=order).view(np.uint16), out.reshape(-1, order=order))
        try:
            kernel(*args)
        except TypeError:
            call_readonly(kernel, *args)
    return out


def to_half_into(out16, a32):
    """``out16[...] = a32`` rounded to float16, to nearest with ties to even (numpy's
    ``copyto(..., casting="same_kind")``), by a vectorised kernel where both arrays are
    contiguous in one order."""
    order = _same_flat_order(a32, out16)
    if order is None or a32.dtype != np.float32 or out16.dtype != np.float16:
        np.copyto(out16, a32, casting="same_kind")
    elif a32.size:
        _convert_kernel(True, a32.size >= jit.PARALLEL_THRESHOLD)(
            a32.reshape(-1, order=order), out16.reshape(-1, order=order).view(np.uint16))
