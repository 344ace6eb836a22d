"""Reproducible Gaussian noise for SGLD: a counter-based generator keyed by (seed, stream, step, i).

A sequential generator makes the noise depend on the order in which elements, parameters and
backends draw it. A counter-based generator (Salmon et al., "Parallel random numbers: as easy as
1, 2, 3", SC 2011) makes draw ``i`` a pure function of its key, so a CPU loop, a parallel loop and
a CUDA grid all produce the same numbers. This one is built from the SplitMix64 finaliser
(Steele, Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014), all
arithmetic modulo 2**64:

    mix(x)   = x += 0x9E3779B97F4A7C15; x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9;
               x = (x ^ (x >> 27)) * 0x94D049BB133111EB; return x ^ (x >> 31)
    key      = mix(mix(mix(seed) ^ stream) ^ step)
    h1, h2   = mix(key + 2*i), mix(key + 2*i + 1)
    u1       = ((h1 >> 11) + 1) * 2**-53          in (0, 1]
    u2       = (h2 >> 11) * 2**-53                in [0, 1)
    z_i      = sqrt(-2*log(u1)) * cos(2*pi*u2)    (Box-Muller, one normal per element)

``stream`` is the parameter index, ``step`` the per-index update count ``t``, ``i`` the element's
position in C order. The transform is computed in float64 on every backend; backends may differ by
the last-ulp behaviour of their ``log`` and ``cos`` (the toolkit's kernels use their own, within
1 ulp of ``math.log`` and ``math.cos``, and draw within 4 ulp of ``normal`` here).

This module is the specification; the kernels implement it again independently.
"""
from __future__ import annotations

import numpy as np

__all__ = ["splitmix64", "stream_key", "normal"]

_M64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB


def splitmix64(x):
    """The SplitMix64 finaliser of a Python int or a uint64 array (wrapping arithmetic)."""
    if isinstance(x, np.ndarray):
        x = x.astype(np.uint64) + np.uint64(_GAMMA)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(_C1)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(_C2)
        return x ^ (x >> np.uint64(31))
    x = (int(x) + _GAMMA) & _M64
    x = ((x ^ (x >> 30)) * _C1) & _M64
    x = ((x ^ (x >> 27)) * _C2) & _M64
    return x ^ (x >> 31)


def stream_key(seed: int, stream: int, step: int) -> int:
    """The 64-bit key of one (seed, stream, step) triple."""
    for name, v in (("seed", seed), ("stream", stream), ("step", step)):
        if int(v) != v or v < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
    return splitmix64(splitmix64(splitmix64(seed & _M64) ^ (stream & _M64)) ^ (step & _M64))


def normal(seed: int, stream: int, step: int, size: int) -> np.ndarray:
    """``size`` standard normal draws (float64) for the key (seed, stream, step)."""
    key = np.uint64(stream_key(seed, stream, step))
    i = np.arange(int(size), dtype=np.uint64)
    with np.errstate(over="ignore"):
        h1 = splitmix64(key + np.uint64(2) * i)
        h2 = splitmix64(key + np.uint64(2) * i + np.uint64(1))
    u1 = ((h1 >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0 ** -53
    u2 = (h2 >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
