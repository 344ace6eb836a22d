"""The CPU's element-wise kernels: a rule's loop over flat arrays (:func:`elementwise_kernel`,
:func:`run_elementwise`), and the warm step of ``Optimizer.update`` built on it, a step of one
rule over numpy arrays that passed every check, prepared once (:class:`PreparedStep`) and run
again while the arrays stay as they were."""
from __future__ import annotations

import struct
import weakref

import numpy as np

from numba import prange, types
from numba.np.unsafe.ndarray import to_fixed_tuple

from . import jit
from .arrays import NUMPY_SIGNATURE
from .jit import KERNELS, NUMBA_TYPES, cached, call_readonly, compile_kernel, inlined

__all__ = ["elementwise_kernel", "run_elementwise", "PreparedStep"]


def _loop(rule, n_state, n_hyper):
    """The loop of a rule with ``n_state`` state arrays (``prange`` is ``range`` when serial).
    The hyperparameters arrive as a small array (cheaper to pass than a tuple of numpy scalars)
    and become a tuple once, so the loop keeps them in registers."""
    if n_state == 0:
        def loop(w, g, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                w[i] = rule(w[i], g[i], hp)
    elif n_state == 1:
        def loop(w, g, s0, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                w[i], s0[i] = rule(w[i], g[i], s0[i], hp)
    elif n_state == 2:
        def loop(w, g, s0, s1, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                w[i], s0[i], s1[i] = rule(w[i], g[i], s0[i], s1[i], hp)
    elif n_state == 3:
        def loop(w, g, s0, s1, s2, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                w[i], s0[i], s1[i], s2[i] = rule(w[i], g[i], s0[i], s1[i], s2[i], hp)
    else:
        raise ValueError(f"rules with {n_state} state arrays are not supported (0 to 3)")
    return loop


def elementwise_kernel(factory, n_state: int, n_hyper: int, dtype, parallel: bool):
    """The compiled loop of ``factory``'s rule for ``dtype`` (cached per process)."""
    dtype = np.dtype(dtype)
    key = (factory, n_state, n_hyper, dtype, bool(parallel))

    def build():
        nb = NUMBA_TYPES[dtype]
        arr = nb[::1]
        sig = types.void(arr, jit.read_only(arr), *([arr] * n_state), arr)
        rule = inlined(factory(dtype.type))
        kernel = compile_kernel(sig, parallel)(
            _loop(rule, n_state, n_hyper))
        return kernel
    return cached(key, build)


def run_elementwise(factory, weight, grad, states, hyper):
    """Run ``factory``'s rule in place over 1-D C-contiguous arrays of one length and dtype;
    ``hyper``: Python floats, rounded to the dtype once (as ``dtype.type(h)`` rounds)."""
    dtype = weight.dtype
    hpa = np.array(hyper, dtype)
    parallel = weight.shape[0] >= jit.PARALLEL_THRESHOLD
    # elementwise_kernel's own key, looked up first: a compiled kernel without the call
    kernel = KERNELS.get((factory, len(states), hpa.shape[0], dtype, parallel))
    if kernel is None:
        kernel = elementwise_kernel(factory, len(states), hpa.shape[0], dtype, parallel)
    try:
        kernel(weight, grad, *states, hpa)
    except TypeError:
        call_readonly(kernel, weight, grad, *states, hpa)


class PreparedStep:
    """A step of one rule over C-contiguous, writeable float32/float64 numpy arrays that passed
    every check, kept weakly: the next step of the same weight and state, unchanged, with the
    same gradient or a new one of its kind (:meth:`holds`), runs without a check or a lookup
    (:meth:`run`). ``Optimizer.update`` keeps one per weight."""

    __slots__ = ("weight", "grad", "states", "state_type", "signature", "size",
                 "flat", "dtype", "parallel", "n_state", "rule", "n_hyper", "kernel", "hpa",
                 "pack")

    def __init__(self, weight, grad, state):
        states = () if state is None else (state,) if type(state) is np.ndarray else state
        every = (weight, grad, *states)
        self.weight, self.grad = weakref.ref(weight), weakref.ref(grad)
        self.states = tuple(weakref.ref(a) for a in states)
        self.state_type = type(state)
        self.signature = list(map(NUMPY_SIGNATURE, every))
        self.size = weight.size
        self.flat = weight.ndim == 1
        self.dtype = weight.dtype
        self.parallel = weight.size >= jit.PARALLEL_THRESHOLD
        self.n_state = len(states)
        self.rule, self.n_hyper, self.kernel, self.hpa, self.pack = None, -1, None, None, None

    def holds(self, weight, grad, state, retry=False):
        """Whether these are the weight and state prepared for, unchanged, with the gradient or a
        new numpy array that shares no memory with them (``numpy.may_share_memory``, the
        contract's own test) of its shape, strides, dtype and writeable flag. ``retry``: the
        caller takes the step again from the start when :meth:`run` returns False; then 1-D
        arrays are compared by size (what else changes makes the kernel's dispatch refuse
        them)."""
        st = self.state_type
        if type(state) is not st or self.weight() is not weight:
            return False
        if st is tuple:
            if len(state) != self.n_state:
                return False
            for a, r in zip(state, self.states):
                if r() is not a:
                    return False
            every = (weight, grad, *state)
        elif state is None:
            every = (weight, grad)
        else:
            if self.states[0]() is not state:
                return False
            every = (weight, grad, state)
        if self.grad() is not grad:
            if type(grad) is not np.ndarray:
                return False
            if np.may_share_memory(grad, weight):
                return False
            for a in every[2:]:  # the state arrays (the gradient itself among them: shared)
                if np.may_share_memory(grad, a):
                    return False
        if retry and self.flat:  # 1-D then (else the kernel refuses it): the size is the shape
            n = self.size
            for a in every:
                if a.size != n:
                    return False
            return True
        return list(map(NUMPY_SIGNATURE, every)) == self.signature

    def run(self, rule, row, weight, grad, state):
        """``rule`` with the hyperparameter row ``row`` over the arrays :meth:`holds` took;
        False, having written nothing, when the compiled kernel refuses one of them (a 1-D
        array made read-only, or of another dtype or layout, since)."""
        n = len(row)
        if rule is not self.rule or n != self.n_hyper:
            self.kernel = elementwise_kernel(rule, self.n_state, n, self.dtype, self.parallel)
            self.rule, self.n_hyper = rule, n
            self.hpa = np.empty(n, self.dtype)
            # "=": standard sizes, where "f" refuses (OverflowError) what float32 cannot hold
            self.pack = struct.Struct("=" + ("f" if self.dtype == np.float32 else "d") * n
                                      ).pack_into
        hpa = self.hpa
        try:  # the C conversion to the dtype numpy makes, into the step's own small array
            self.pack(hpa, 0, *row)
        except OverflowError:  # a value beyond float32's range: numpy's infinity
            hpa = np.fromiter(row, self.dtype, n)
        states = () if state is None else (state,) if type(state) is np.ndarray else state
        if not self.flat:
            self.kernel(weight.reshape(-1), grad.reshape(-1), *[s.reshape(-1) for s in states],
                        hpa)
            return True
        try:
            self.kernel(weight, grad, *states, hpa)
        except TypeError:  # no compiled signature takes them: the dispatch ran nothing
            return False
        return True
