"""SGLD's CUDA kernel: the CPU loop of ``sgld.py`` as a grid-stride kernel, with the same
counter-based generator compiled as a device function (so both backends draw the same noise).

Kept apart from ``sgld.py`` because it imports numba-cuda, which the CPU path never does.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from .sgld import _generator

__all__ = ["kernel_source"]

normal = _generator(cuda.jit(device=True))


def kernel_source(f, mirror):
    """``kernel(w, g, hp, key, sqrt_lr, w16)`` for compute type ``f``: loads are widened to
    ``f``, and with ``mirror`` the new weight is also stored into the float16 ``w16``. The noise
    index ``i`` is the element's position in C order, as on the CPU."""
    zero = f(0)

    def kernel(w, g, hp, key, sqrt_lr, w16):
        neg_half_lr, wd, rs, c = hp
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        while i < w.shape[0]:
            wi = f(w[i])
            gi = rs * f(g[i])
            if c >= zero:
                gi = min(max(gi, -c), c)
            wi = wi + neg_half_lr * (gi + wd * wi)
            wi = wi + f(sqrt_lr * normal(key, np.uint64(i)))
            w[i] = wi
            if mirror:
                w16[i] = wi
            i += stride
    return kernel
