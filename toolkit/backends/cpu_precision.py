"""The CPU kernels of multi-precision in one pass: a float32 master updated by a rule that reads
the float16 gradient, widening each element exactly, and writes the float16 weight, rounded to
nearest even from the new master, in the same pass (:func:`mp_kernel`, run by
``cpu.MirrorLauncher``); and the vectorised float16 <-> float32 conversions
(:func:`to_single`, :func:`to_half_into`). The conversions themselves are
:mod:`toolkit.backends.half`'s, closed over by value (a change in them changes the cache key).
"""
from __future__ import annotations

import numpy as np
from numba import prange, types
from numba.np.unsafe.ndarray import to_fixed_tuple

from . import jit
from .jit import by_value, cached, call_readonly, compile_kernel, inlined

__all__ = ["mp_kernel", "to_single", "to_half_into"]


def _mp_loop(rule, n_state, n_hyper, widen, narrow):
    """The loop of a rule over a float32 master ``w`` with a float16 gradient and a float16
    weight copy (both as their uint16 bits): ``widen``/``narrow`` are the exact float16 ->
    float32 conversion and the round-to-nearest-even float32 -> float16 one (``half.py``),
    closed over so that a change in them changes the cache key."""
    if n_state == 0:
        def loop(w, g16, w16, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                x = rule(w[i], widen(g16[i]), hp)
                w[i] = x
                w16[i] = narrow(x)
    elif n_state == 1:
        def loop(w, g16, s0, w16, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                x, s0[i] = rule(w[i], widen(g16[i]), s0[i], hp)
                w[i] = x
                w16[i] = narrow(x)
    elif n_state == 2:
        def loop(w, g16, s0, s1, w16, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                x, s0[i], s1[i] = rule(w[i], widen(g16[i]), s0[i], s1[i], hp)
                w[i] = x
                w16[i] = narrow(x)
    elif n_state == 3:
        def loop(w, g16, s0, s1, s2, w16, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                x, s0[i], s1[i], s2[i] = rule(w[i], widen(g16[i]), s0[i], s1[i], s2[i], hp)
                w[i] = x
                w16[i] = narrow(x)
    else:
        raise ValueError(f"rules with {n_state} state arrays are not supported (0 to 3)")
    return loop


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


def mp_kernel(factory, n_state: int, n_hyper: int, parallel: bool):
    """The compiled multi-precision loop of ``factory``'s float32 rule (cached per process)."""
    key = ("mp", factory, n_state, n_hyper, bool(parallel))

    def build():
        from . import half
        f32, u16 = types.float32[::1], types.uint16[::1]
        sig = types.void(f32, u16, *([f32] * n_state), u16, f32)
        rule = inlined(factory(np.float32))
        kernel = compile_kernel(sig, parallel)(
            _mp_loop(rule, n_state, n_hyper, inlined(by_value(half.half_to_single)),
                     inlined(by_value(half.single_to_half))))
        return kernel
    return cached(key, build)
