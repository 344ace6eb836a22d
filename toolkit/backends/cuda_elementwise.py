"""Element-wise CUDA kernels: a rule factory's per-element rule compiled by numba-cuda
(:func:`device_rule`) and the grid-stride kernel that runs it over flat arrays, optionally by
rows (a lazy row-sparse step) and writing a float16 mirror (:func:`elementwise_kernel`).

Kernels are compiled on first use and cached per process. This module imports numba-cuda;
:mod:`toolkit.backends.cuda` (the launcher) runs them.
"""
from __future__ import annotations

import numpy as np
from numba import cuda, types

from .cuda_device import COMPILE_OPTIONS, NUMBA_TYPES
from .jit import KernelCache

_KERNELS = KernelCache()  # the element-wise kernels of this process
_device_rules: dict = {}


def device_rule(factory, dtype):
    """``factory``'s rule for compute ``dtype`` as a CUDA device function (cached)."""
    dtype = np.dtype(dtype)
    key = (factory, dtype)
    fn = _device_rules.get(key)
    if fn is None:
        fn = _device_rules[key] = cuda.jit(device=True)(factory(dtype.type))
    return fn


def _source(rule, n_state, f, mirror, by_rows):
    """The grid-stride loop of a rule with ``n_state`` state arrays over the gradient's
    elements. Every load is converted to the compute type ``f``; with ``mirror`` the new weight
    is also stored into ``w16``. With ``by_rows`` (a lazy row-sparse step) gradient element
    ``e`` is column ``e % ncols`` of row ``rows[e // ncols]`` of the weight and the states, else
    element ``e`` of all of them (``rows`` and ``ncols`` unused)."""
    def at(e, rows, ncols):
        if by_rows:
            k = e // ncols
            return rows[k] * ncols + (e - k * ncols)
        return e
    at = cuda.jit(device=True)(at)

    if n_state == 0:
        def kernel(w, g, hp, w16, rows, ncols):
            e = cuda.grid(1)
            stride = cuda.gridsize(1)
            while e < g.shape[0]:
                i = at(e, rows, ncols)
                wi = rule(f(w[i]), f(g[e]), hp)
                w[i] = wi
                if mirror:
                    w16[i] = wi
                e += stride
    elif n_state == 1:
        def kernel(w, g, s0, hp, w16, rows, ncols):
            e = cuda.grid(1)
            stride = cuda.gridsize(1)
            while e < g.shape[0]:
                i = at(e, rows, ncols)
                wi, a = rule(f(w[i]), f(g[e]), f(s0[i]), hp)
                w[i] = wi
                s0[i] = a
                if mirror:
                    w16[i] = wi
                e += stride
    elif n_state == 2:
        def kernel(w, g, s0, s1, hp, w16, rows, ncols):
            e = cuda.grid(1)
            stride = cuda.gridsize(1)
            while e < g.shape[0]:
                i = at(e, rows, ncols)
                wi, a, b = rule(f(w[i]), f(g[e]), f(s0[i]), f(s1[i]), hp)
                w[i] = wi
                s0[i] = a
                s1[i] = b
                if mirror:
                    w16[i] = wi
                e += stride
    elif n_state == 3:
        def kernel(w, g, s0, s1, s2, hp, w16, rows, ncols):
            e = cuda.grid(1)
            stride = cuda.gridsize(1)
            while e < g.shape[0]:
                i = at(e, rows, ncols)
                wi, a, b, c = rule(f(w[i]), f(g[e]), f(s0[i]), f(s1[i]), f(s2[i]), hp)
                w[i] = wi
                s0[i] = a
                s1[i] = b
                s2[i] = c
                if mirror:
                    w16[i] = wi
                e += stride
    else:
        raise ValueError(f"rules with {n_state} state arrays are not supported (0 to 3)")
    return kernel


def elementwise_kernel(factory, storage: tuple, compute, n_hyper: int, mirror: bool,
                       by_rows: bool = False):
    """The compiled kernel of ``factory``'s rule (cached per process, compiled on first use).

    ``storage``: the dtypes of ``(w, g, s0, ..., w16)``; ``compute``: the arithmetic dtype;
    ``by_rows``: the lazy row-sparse variant (see :func:`_source`).
    """
    compute = np.dtype(compute)
    storage = tuple(np.dtype(s) for s in storage)
    key = (factory, storage, compute, n_hyper, bool(mirror), bool(by_rows))
    kernel = _KERNELS.get(key)
    if kernel is not None:
        return kernel

    def build():
        rule = device_rule(factory, compute)
        n_state = len(storage) - 3
        arrs = [NUMBA_TYPES[s][::1] for s in storage]
        hp = types.UniTuple(NUMBA_TYPES[compute], n_hyper)
        sig = types.void(*arrs[:-1], hp, arrs[-1], types.int64[::1], types.int64)
        src = _source(rule, n_state, compute.type, bool(mirror), bool(by_rows))
        return cuda.jit(sig, **COMPILE_OPTIONS)(src)
    return _KERNELS.cached(key, build)
