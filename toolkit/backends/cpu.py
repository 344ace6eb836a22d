"""The Numba CPU backend: one compile policy, and loops built around per-element update rules.

An optimizer supplies a *rule factory*: ``factory(ftype) -> rule``, where ``ftype`` is the numpy
scalar type of the arithmetic (``np.float32`` or ``np.float64``) and ``rule`` is a plain Python
function of scalars using ``math`` only::

    rule(w, g, s0, ..., s{k-1}, hp) -> (w_new, s0_new, ..., s{k-1}_new)

``hp`` is a tuple of per-step hyperparameters that the host computed in float64 and cast to
``ftype`` once, so float32 arithmetic stays float32 (a Python float literal inside the rule would
promote the loop to float64: constants the rule needs are made by the factory as ``ftype(1)``).

The same rule source is compiled here with ``numba.njit(inline="always")`` into a loop over the
flattened arrays: a serial loop below :data:`PARALLEL_THRESHOLD` elements and a ``prange`` loop
above it. Compile policy (DESIGN section 4), in one place: explicit signatures,
``error_model="numpy"`` (the python error model blocks vectorisation), no fastmath, on-disk cache.
Kernels are compiled lazily, once per (rule, dtype, serial/parallel).
"""
from __future__ import annotations

import threading

import numba
import numpy as np
from numba import prange, types

__all__ = ["COMPILE_OPTIONS", "PARALLEL_THRESHOLD", "elementwise_kernel", "run_elementwise",
           "sum_of_squares", "DTYPES", "Launcher", "LAUNCHER"]

#: The compile options of every CPU kernel.
COMPILE_OPTIONS = dict(error_model="numpy", fastmath=False, cache=True, nogil=True,
                       boundscheck=False)

#: Below this many elements a parallel loop costs more than it saves (DESIGN section 4: the
#: break-even measured on a 2-core machine lies between 2**15 and 2**16).
PARALLEL_THRESHOLD = 1 << 15

#: Arithmetic dtypes with compiled kernels.
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

_NUMBA_TYPES = {np.dtype(np.float32): types.float32, np.dtype(np.float64): types.float64}
_lock = threading.Lock()
_kernels: dict = {}


def _loop(rule, n_state):
    """The loop of a rule with ``n_state`` state arrays (``prange`` is ``range`` when serial)."""
    if n_state == 0:
        def loop(w, g, hp):
            for i in prange(w.shape[0]):
                w[i] = rule(w[i], g[i], hp)
    elif n_state == 1:
        def loop(w, g, s0, hp):
            for i in prange(w.shape[0]):
                w[i], s0[i] = rule(w[i], g[i], s0[i], hp)
    elif n_state == 2:
        def loop(w, g, s0, s1, hp):
            for i in prange(w.shape[0]):
                w[i], s0[i], s1[i] = rule(w[i], g[i], s0[i], s1[i], hp)
    elif n_state == 3:
        def loop(w, g, s0, s1, s2, hp):
            for i in prange(w.shape[0]):
                w[i], s0[i], s1[i], s2[i] = rule(w[i], g[i], s0[i], s1[i], s2[i], hp)
    else:
        raise ValueError(f"rules with {n_state} state arrays are not supported (0 to 3)")
    return loop


def elementwise_kernel(factory, n_state: int, n_hyper: int, dtype, parallel: bool):
    """The compiled loop of ``factory``'s rule for ``dtype`` (cached per process)."""
    dtype = np.dtype(dtype)
    key = (factory, n_state, n_hyper, dtype, bool(parallel))
    kernel = _kernels.get(key)
    if kernel is not None:
        return kernel
    with _lock:
        kernel = _kernels.get(key)
        if kernel is None:
            nb = _NUMBA_TYPES[dtype]
            arr = nb[::1]
            sig = types.void(arr, arr, *([arr] * n_state), types.UniTuple(nb, n_hyper))
            rule = numba.njit(inline="always")(factory(dtype.type))
            kernel = numba.njit([sig], parallel=bool(parallel), **COMPILE_OPTIONS)(
                _loop(rule, n_state))
            _kernels[key] = kernel
    return kernel


def run_elementwise(factory, weight, grad, states, hyper):
    """Run ``factory``'s rule over flat contiguous arrays of one dtype, in place.

    ``weight``, ``grad`` and every array of ``states`` are 1-D C-contiguous views of the same
    length and dtype; ``hyper`` is a sequence of Python floats (cast to the dtype here, once).
    """
    dtype = weight.dtype
    hp = tuple(dtype.type(h) for h in hyper)
    parallel = weight.shape[0] >= PARALLEL_THRESHOLD
    kernel = elementwise_kernel(factory, len(states), len(hp), dtype, parallel)
    kernel(weight, grad, *states, hp)


@numba.njit([types.float64(types.float32[::1]), types.float64(types.float64[::1])],
            **COMPILE_OPTIONS)
def sum_of_squares(x):
    """``sum(x*x)`` accumulated in float64, serially, in a fixed order (reproducible)."""
    acc = 0.0
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        acc += v * v
    return acc


class Launcher:
    """Runs one optimizer step's rules on the CPU backend (numpy arrays, any memory order)."""

    backend = "cpu"

    def compute_dtype(self, a):
        return a.dtype

    def run_rule(self, factory, weight, grad, states, hyper):
        """Run a per-element rule over ``weight``, ``grad`` and ``states`` in place."""
        order = "F" if (weight.flags.f_contiguous and not weight.flags.c_contiguous) else "C"
        g = grad if grad.flags[f"{order}_CONTIGUOUS"] else np.asarray(grad, order=order)
        flat = lambda a: a.reshape(-1, order=order)  # noqa: E731 - contiguous: a view
        run_elementwise(factory, flat(weight), flat(g), tuple(flat(s) for s in states), hyper)

    @staticmethod
    def zeros_like(a, dtype=None):
        return np.zeros_like(a, dtype=dtype)

    @staticmethod
    def sum_of_squares(x, y):
        return (sum_of_squares(x.reshape(-1, order="A")),
                sum_of_squares(np.ascontiguousarray(y).reshape(-1)))


#: The launcher of every CPU step (it holds nothing per step).
LAUNCHER = Launcher()
