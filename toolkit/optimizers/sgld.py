"""SGLD: stochastic gradient Langevin dynamics (MXNet ``sgld``; guide lines 276-278; Welling and Teh 2011).

mxnet (Python ops, spec section 2.14) and guide agree::

    g = clip(rescale_grad*grad, c)
    w = w - lr/2*(g + wd*w) + sqrt(lr)*z,     z ~ N(0, 1)  (the guide's N(0, lr) is a variance)

The noise is reproducible: ``z`` comes from the counter-based generator specified in
``reference/noise.py`` (SplitMix64 finaliser, Box-Muller), keyed by (seed, parameter index, t,
element index), implemented again here for the kernel, so every backend draws the same numbers.
"""
from __future__ import annotations

import math
import zlib

import numba
import numpy as np
from numba import prange, types

from ..backends import cpu
from .base import Optimizer, check_int, register

__all__ = ["SGLD"]

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_ONE, _TWO = np.uint64(1), np.uint64(2)
_TWO_M53 = 2.0 ** -53
_TWO_PI = 2.0 * math.pi


def _generator(jit):
    """The counter-based generator of ``reference/noise.py`` as ``normal(key, i)``, compiled by
    ``jit``: ``numba.njit(inline="always")`` for the CPU loop, ``cuda.jit(device=True)`` for the
    CUDA kernel (one source, so both backends draw the same numbers)."""
    def mix_source(x):
        x = x + _GAMMA
        x = (x ^ (x >> _S30)) * _C1
        x = (x ^ (x >> _S27)) * _C2
        return x ^ (x >> _S31)
    mix = jit(mix_source)

    def normal_source(key, i):
        """Draw ``i`` of the stream ``key``: Box-Muller on two SplitMix64 outputs, in float64."""
        h1 = mix(key + _TWO * i)
        h2 = mix(key + _TWO * i + _ONE)
        u1 = np.float64((h1 >> _S11) + _ONE) * _TWO_M53
        u2 = np.float64(h2 >> _S11) * _TWO_M53
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(_TWO_PI * u2)
    return jit(normal_source)


_normal = _generator(numba.njit(inline="always"))
_loops: dict = {}


def _loop(dtype, parallel):
    """The SGLD loop for ``dtype``: the rule plus the element's noise (C-order index ``i``)."""
    key_ = (np.dtype(dtype), bool(parallel))
    if key_ in _loops:
        return _loops[key_]
    f = np.dtype(dtype).type
    zero = f(0)

    def loop(w, g, hp, key, sqrt_lr):
        neg_half_lr, wd, rs, c = hp
        for i in prange(w.shape[0]):
            gi = rs * g[i]
            if c >= zero:
                gi = min(max(gi, -c), c)
            wi = w[i] + neg_half_lr * (gi + wd * w[i])
            w[i] = wi + f(sqrt_lr * _normal(key, np.uint64(i)))

    nb = numba.from_dtype(np.dtype(dtype))
    sig = types.void(nb[::1], nb[::1], types.UniTuple(nb, 4), types.uint64, types.float64)
    kernel = numba.njit([sig], parallel=bool(parallel), **cpu.COMPILE_OPTIONS)(loop)
    _loops[key_] = kernel
    return kernel


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


@register
class SGLD(Optimizer):
    """Stochastic gradient Langevin dynamics (MXNet ``sgld``).

    ``w = w - lr/2*(g + wd*w) + sqrt(lr)*z`` with ``g = clip(rs*grad, c)`` and ``z`` standard
    normal, in both conventions. ``seed`` keys the noise: draw ``i`` of parameter ``index`` at
    step ``t`` is a pure function of (seed, index, t, i), the same on every backend. No state.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> a, b = np.zeros(3), np.zeros(3)
        >>> for w in (a, b):
        ...     optimizer.SGLD(learning_rate=0.01, seed=7).update(0, w, np.ones(3), None)
        >>> bool((a == b).all())
        True
    """

    reference_name = "sgld"
    mxnet_kernel = False

    def __init__(self, seed=0, **kwargs):
        self.seed = check_int("seed", seed, 0)
        super().__init__(**kwargs)

    def _check_weight(self, weight):
        w = super()._check_weight(weight)
        if len(w.shape) > 1 and not w.c_contiguous:
            raise ValueError("SGLD needs a C-contiguous weight: its noise is indexed in C order")
        return w

    def _reference_call_kwargs(self, index, t):
        return {"seed": self.seed, "stream": stream_of(index)}

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        key = np.uint64(stream_key(self.seed, stream_of(index), t))
        hyper = (-(lr / 2.0), wd, self.rescale_grad, self._clip_bound())
        if self._launcher is not None and self._launcher.backend == "cuda":
            from . import sgld_cuda  # imports numba-cuda: only on the CUDA path
            self._launcher.run_kernel(sgld_cuda.kernel_source, weight, grad, hyper,
                                      (key, math.sqrt(lr)), (types.uint64, types.float64))
            return
        w = weight.reshape(-1)
        g = np.ascontiguousarray(grad).reshape(-1)
        dt = w.dtype.type
        kernel = _loop(w.dtype, w.shape[0] >= cpu.PARALLEL_THRESHOLD)
        kernel(w, g, tuple(dt(h) for h in hyper), key, math.sqrt(lr))
