"""The counter-based Gaussian generator of ``reference/noise.py``, written once for the kernels and
compiled by each backend (``generator(numba.njit(inline="always"))`` on the CPU,
``generator(cuda.jit(device=True))`` on CUDA), so every backend draws the same numbers.

``normal(key, i)`` is draw ``i`` of the stream ``key``; ``stream_key(seed, stream, step)`` makes
the key of one tensor's draws at one step (on the host). A *noise rule* (``rule(w, g, z, hp,
aux) -> w``, SGLD's) receives ``z = normal(key, i)`` for its element ``i`` (C order).

``log`` and ``cos`` are this module's own (:func:`log53`, :func:`cos_0_2pi`): llvmlite has no
vector math library, so ``math.log``/``math.cos`` are scalar libm calls that keep the CPU loop
from vectorising (14 ns per draw and core against 4 ns). Being float64 arithmetic and selects
only, they are the same source on every backend: CPU and simulator draw bit-identical numbers, a
GPU the same up to FMA contraction. Both are within 1 ulp of ``math.log``/``math.cos``
(tests/test_noise_math.py), the last-ulp freedom the specification allows.
"""
from __future__ import annotations

import math
import types as pytypes
import zlib

import numpy as np

__all__ = ["generator", "stream_key", "stream_of", "log53", "cos_0_2pi"]

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_ONE, _TWO = np.uint64(1), np.uint64(2)
_TWO_M53 = 2.0 ** -53
_TWO_PI = 2.0 * math.pi
_generators: dict = {}


# --------------------------------------------------------------------------------------------
# log and cos for the transform: branch-free float64, vectorisable, the same on every backend
# --------------------------------------------------------------------------------------------
# The polynomials are minimax approximations on the reduced intervals (Remez exchange, then each
# coefficient rounded to float64), derived by tests/noise_coefficients.py: two or three terms fewer
# than the Taylor series of the same accuracy (2/(2j+1), (-1)**j/(2j+1)!, (-1)**j/(2j)!, which
# they stay close to).
#
# log(1 + f) = 2 atanh(s), s = f / (2 + f): 2s + s*R(s*s), R(z) = sum_{j>=1} 2 z**j / (2j + 1),
# |s| <= (sqrt(2) - 1) / (sqrt(2) + 1) = 0.1716, z <= 0.0295: R(z) = z*(_LOG1 + ... + _LOG7 z**6)
# within 2**-57.9, which is below 2**-58.9 of log(1 + f).
_LOG1, _LOG2, _LOG3, _LOG4, _LOG5, _LOG6, _LOG7 = (
    float.fromhex("0x1.5555555555592p-1"), float.fromhex("0x1.999999997fdb7p-2"),
    float.fromhex("0x1.24924941f12d7p-2"), float.fromhex("0x1.c71c520955707p-3"),
    float.fromhex("0x1.74663eea22870p-3"), float.fromhex("0x1.39a1ba88230d7p-3"),
    float.fromhex("0x1.2f05657ea5701p-3"))
#: ln 2 = _LN2_HI + _LN2_LO; _LN2_HI has 42 significant bits, so n * _LN2_HI is exact for the
#: exponents |n| <= 53 that occur.
_LN2_HI = float.fromhex("0x1.62e42fefa38p-1")
_LN2_LO = float.fromhex("0x1.ef35793c7673p-45")
_SQRT2 = math.sqrt(2.0)


def log53(m):
    """``log(m * 2**-53)`` for an integer-valued float64 ``m`` in ``[1, 2**53]`` (the uniform
    ``u1`` of the specification is ``m * 2**-53``); ``log53(2**53) = 0`` exactly.

    ``m = 2**e * x`` with ``x`` in ``[1, 2)``, found by a binary search of selects (``x`` is ``m``
    scaled by powers of two: exact), then ``x`` halved above sqrt(2), so that ``f = x - 1`` (exact)
    lies in ``[-0.293, 0.415]``. ``log(u1) = n ln 2 + log(1 + f)`` with ``n = e - 53`` and
    ``log(1 + f) = 2s + s*R`` written as ``f - (f*f/2 - s*(f*f/2 + R))`` (because ``2s = f - s*f``
    and ``s*f = f*f/2 - s*f*f/2``): the leading ``f`` is exact and the rest is a small correction.
    """
    x = m
    c = x >= 4294967296.0          # 2**32
    x = x * 2.3283064365386963e-10 if c else x
    e = 32.0 if c else 0.0
    c = x >= 65536.0               # 2**16
    x = x * 1.52587890625e-05 if c else x
    e = e + 16.0 if c else e
    c = x >= 256.0
    x = x * 0.00390625 if c else x
    e = e + 8.0 if c else e
    c = x >= 16.0
    x = x * 0.0625 if c else x
    e = e + 4.0 if c else e
    c = x >= 4.0
    x = x * 0.25 if c else x
    e = e + 2.0 if c else e
    c = x >= 2.0
    x = x * 0.5 if c else x
    e = e + 1.0 if c else e
    c = x > _SQRT2
    x = x * 0.5 if c else x
    n = (e + 1.0 if c else e) - 53.0
    f = x - 1.0
    s = f / (2.0 + f)
    z = s * s
    r = z * (_LOG1 + z * (_LOG2 + z * (_LOG3 + z * (_LOG4 + z * (_LOG5 + z * (
        _LOG6 + z * _LOG7))))))
    hfsq = 0.5 * f * f
    return n * _LN2_HI + (f - (hfsq - (s * (hfsq + r) + n * _LN2_LO)))


# sin t = t + t*z*S(z), cos t = 1 - z/2 + z*z*C(z), z = t*t, |t| <= pi/4: S (to t**13) and C (to
# t**14) within 2**-57.2 of sin t and 2**-59.4 of cos t (relative).
_SIN1, _SIN2, _SIN3, _SIN4, _SIN5, _SIN6 = (
    float.fromhex("-0x1.5555555555549p-3"), float.fromhex("0x1.111111110f881p-7"),
    float.fromhex("-0x1.a01a019c126afp-13"), float.fromhex("0x1.71de3578743b7p-19"),
    float.fromhex("-0x1.ae5e66d4bfb0cp-26"), float.fromhex("0x1.5d932f3c68b91p-33"))
_COS1, _COS2, _COS3, _COS4, _COS5, _COS6 = (
    float.fromhex("0x1.555555555554cp-5"), float.fromhex("-0x1.6c16c16c15184p-10"),
    float.fromhex("0x1.a01a019cb26ecp-16"), float.fromhex("-0x1.27e4f80a7636ep-22"),
    float.fromhex("0x1.1ee9ec479b388p-29"), float.fromhex("-0x1.8faecf233ed86p-37"))
#: pi/2 = _PIO2_1 + _PIO2_2 + _PIO2_3 + _PIO2_4 (+ less than 2**-140): _PIO2_1 a multiple of
#: 2**-26, _PIO2_2 of 2**-53, _PIO2_3 of 2**-86 (33 bits each at most), so that k * _PIO2_j
#: (j <= 3) is exact for k <= 4 and the first two subtractions below are exact.
_PIO2_1 = float.fromhex("0x1.921fb54p+0")
_PIO2_2 = float.fromhex("0x1.10b46p-30")
_PIO2_3 = float.fromhex("0x1.1a626331p-54")
_PIO2_4 = float.fromhex("0x1.1701b839a252p-88")
_TWO_OVER_PI = 2.0 / math.pi
_ROUNDER = 6755399441055744.0      # 1.5 * 2**52: (y + _ROUNDER) - _ROUNDER rounds y to an integer


def cos_0_2pi(x):
    """``cos(x)`` for a float64 ``x`` in ``[0, 2*pi]`` (the specification's ``2*pi*u2``).

    ``k = round(x / (pi/2))`` in 0..4 and ``t = x - k*pi/2`` in ``[-pi/4, pi/4]``, with pi/2 in
    four parts (Cody and Waite's reduction): ``x - k*_PIO2_1`` and the next subtraction are exact
    (every term is a multiple of 2**-53 below 2 in magnitude), ``t = a + c`` is kept as a rounded
    ``a`` and its correction ``c``, so that ``t`` near a zero of the cosine (``x`` near pi/2 or
    3*pi/2) keeps its full relative accuracy. ``cos x`` is ``cos t``, ``-sin t``, ``-cos t``,
    ``sin t`` for ``k mod 4`` = 0, 1, 2, 3; both polynomials are evaluated and one is selected.
    """
    k = (x * _TWO_OVER_PI + _ROUNDER) - _ROUNDER
    u = (x - k * _PIO2_1) - k * _PIO2_2
    kp3 = k * _PIO2_3
    a = u - kp3
    c = ((u - a) - kp3) - k * _PIO2_4
    z = a * a
    sin_t = a + (c + a * z * (_SIN1 + z * (_SIN2 + z * (_SIN3 + z * (_SIN4 + z * (
        _SIN5 + z * _SIN6))))))
    hz = 0.5 * z
    w = 1.0 - hz
    cos_t = w + ((((1.0 - w) - hz) - a * c) + z * z * (_COS1 + z * (_COS2 + z * (_COS3 + z * (
        _COS4 + z * (_COS5 + z * _COS6))))))
    v = sin_t if (k == 1.0) | (k == 3.0) else cos_t
    return -v if (k == 1.0) | (k == 2.0) else v


def _fresh(fn):
    """A copy of module-level ``fn`` for one backend to compile: each backend registers its own
    object, and a kernel closing over a copy is cached under its code, not its name."""
    return pytypes.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                                fn.__closure__)


def generator(jit, tag):
    """``normal(key, i)`` compiled by ``jit`` (cached under ``tag``): Box-Muller on two
    SplitMix64 outputs, in float64."""
    fn = _generators.get(tag)
    if fn is not None:
        return fn

    def mix_source(x):
        x = x + _GAMMA
        x = (x ^ (x >> _S30)) * _C1
        x = (x ^ (x >> _S27)) * _C2
        return x ^ (x >> _S31)
    mix = jit(mix_source)
    log_u1 = jit(_fresh(log53))
    cos_x = jit(_fresh(cos_0_2pi))

    def normal_source(key, i):
        h1 = mix(key + _TWO * i)
        h2 = mix(key + _TWO * i + _ONE)
        u2 = np.float64(h2 >> _S11) * _TWO_M53
        # log(u1), u1 = ((h1 >> 11) + 1) * 2**-53
        return math.sqrt(-2.0 * log_u1(np.float64((h1 >> _S11) + _ONE))) * cos_x(_TWO_PI * u2)
    fn = _generators[tag] = jit(normal_source)
    return fn


def stream_of(index):
    """The noise stream of a parameter index: the index itself, or a CRC-32 of a str name."""
    if isinstance(index, str):
        return zlib.crc32(index.encode("utf-8"))
    return int(index)


def stream_key(seed, stream, step):
    """``mix(mix(mix(seed) ^ stream) ^ step)`` (reference/noise.py), in Python integers."""
    m = (1 << 64) - 1

    def mix(x):
        x = (x + 0x9E3779B97F4A7C15) & m
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
        return x ^ (x >> 31)
    return mix(mix(mix(seed & m) ^ (stream & m)) ^ (step & m))
