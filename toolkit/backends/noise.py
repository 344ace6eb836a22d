"""The counter-based Gaussian generator of ``reference/noise.py``, written once for the kernels and
compiled by each backend (``generator(numba.njit(inline="always"))`` on the CPU,
``generator(cuda.jit(device=True))`` on CUDA), so every backend draws the same numbers.

``normal(key, i)`` is draw ``i`` of the stream ``key``; ``stream_key(seed, stream, step)`` makes
the key of one tensor's draws at one step (in Python integers, on the host). A *noise rule*
(``rule(w, g, z, hp, aux) -> w``, SGLD's) receives ``z = normal(key, i)`` for its element ``i``
(the position in C order within its tensor) from the backend's loop.
"""
from __future__ import annotations

import math
import zlib

import numpy as np

__all__ = ["generator", "stream_key", "stream_of"]

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_ONE, _TWO = np.uint64(1), np.uint64(2)
_TWO_M53 = 2.0 ** -53
_TWO_PI = 2.0 * math.pi
_generators: dict = {}


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

    def normal_source(key, i):
        h1 = mix(key + _TWO * i)
        h2 = mix(key + _TWO * i + _ONE)
        u1 = np.float64((h1 >> _S11) + _ONE) * _TWO_M53
        u2 = np.float64(h2 >> _S11) * _TWO_M53
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(_TWO_PI * u2)
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
