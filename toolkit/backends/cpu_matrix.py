"""The CPU kernels of a matrix step (``launches`` kind "matrix"): a 2-D weight's direction
orthogonalised by a quintic Newton-Schulz iteration (Muon), its matrix products through BLAS,
its element-wise parts compiled from the rule.

One call steps one weight ``W`` (``n x m``) in place:

1. moment pass (compiled from the rule): ``buf, x = moment(g, buf)`` per element, ``x`` written to
   a scratch matrix ``X``, and the float64 sum of ``x^2`` in a fixed order (chunks of 2^16
   elements, each summed serially, the chunks' sums added in order: the same on any number of
   threads);
2. ``X = X / max(|X|_F, eps)`` (``clamp``) or ``X / (|X|_F + eps)``, the norm and its clamp in
   float64, each quotient rounded to the dtype;
3. ``steps`` iterations, on the small Gram matrix's side (``n <= m``: ``A = X X^T``,
   ``X = M X``; else ``A = X^T X``, ``X = X M``, the same thing transposed, without moving
   ``X``), with ``M = a I + b A + c A A`` formed in one compiled pass over the small matrices:
   ``a X + (b A + c A A) X`` as one product, so that no pass over ``X`` is left between two
   products. ``A``, ``A A`` and ``M X`` by ``numpy.matmul`` (the BLAS numpy links, in the
   weight's dtype);
4. apply pass (compiled from the rule): ``w = apply(w, o)`` with ``o`` the last iterate.

``a X + B X`` and ``(a I + B) X`` differ in rounding only (``a + b_ii`` rounded once more on the
diagonal); both lie within the oracle's bound of the iteration (``reference.muon``), whose model
of a product is ``(n + 3) u (|a||X| + |B||X|)``.

The rule factory returns a :class:`MatrixRule`; the float64 row (a NamedTuple) holds the
iteration's ``a, b, c, eps, steps, clamp`` by name besides what the rule reads.
"""
from __future__ import annotations

import math
import threading
from typing import NamedTuple

import numpy as np
from numba import prange, types
from numba.np.unsafe.ndarray import to_fixed_tuple

from . import jit
from .jit import NUMBA_TYPES, cached, compile_kernel

__all__ = ["MatrixRule", "run_matrix", "compiled_pass", "polynomial_kernel", "CHUNK"]

#: elements per chunk of the moment pass's sum of squares (its order: module docstring)
CHUNK = 1 << 16


class MatrixRule(NamedTuple):
    """What a matrix rule factory returns for compute dtype ``f`` (plain functions, inlined;
    ``hp`` the float64 row as a tuple): ``moment(g, buf, hp) -> (buf, x)``, the new state and
    the element of the matrix to orthogonalise; ``apply(w, o, hp) -> w``, the new weight from
    the orthogonalised element ``o``."""
    moment: object
    apply: object


def _moment_pass(rule, n_hyper):
    moment = rule.moment

    def moment_pass(g, buf, x, hp_in, partial):
        hp = to_fixed_tuple(hp_in, n_hyper)
        n = g.shape[0]
        for k in prange(partial.shape[0]):
            a = k * CHUNK
            z = min(n, a + CHUNK)
            gk, bk, xk = g[a:z], buf[a:z], x[a:z]
            s = 0.0
            for e in range(z - a):
                b, v = moment(gk[e], bk[e], hp)
                bk[e] = b
                xk[e] = v
                vv = np.float64(v)
                s += vv * vv
            partial[k] = s
    return moment_pass


def _apply_pass(rule, n_hyper):
    apply = rule.apply

    def apply_pass(w, o, hp_in):
        hp = to_fixed_tuple(hp_in, n_hyper)
        n = w.shape[0]
        nchunks = (n + CHUNK - 1) // CHUNK
        for k in prange(nchunks):
            a = k * CHUNK
            z = min(n, a + CHUNK)
            wk, ok = w[a:z], o[a:z]
            for e in range(z - a):
                wk[e] = apply(wk[e], ok[e], hp)
    return apply_pass


def _polynomial(B, A, a, b, c):
    # B = a I + b A + c B (B holding A A), row by row
    k = A.shape[0]
    for i in prange(k):
        Bi, Ai = B[i], A[i]
        for j in range(k):
            Bi[j] = b * Ai[j] + c * Bi[j]
        Bi[i] = Bi[i] + a


def compiled_pass(factory, name, n_hyper, dtype, parallel=False):
    """The compiled pass ``name`` ("moment", "apply") of ``factory``'s rule for ``dtype``
    (cached per process; ``benchmarks/muon_cpu.py`` times them alone)."""
    dtype = np.dtype(dtype)
    key = ("matrix", name, factory, n_hyper, dtype, bool(parallel))

    def build():
        arr, f = NUMBA_TYPES[dtype][::1], NUMBA_TYPES[dtype]
        rule = MatrixRule(*(jit.inlined(fn) for fn in factory(dtype.type)))
        hp = types.float64[::1]
        if name == "moment":
            fn, sig = _moment_pass(rule, n_hyper), types.void(jit.read_only(arr), arr, arr, hp,
                                                             types.float64[::1])
        else:
            fn, sig = _apply_pass(rule, n_hyper), types.void(arr, arr, hp)
        return compile_kernel(sig, parallel)(fn)
    return cached(key, build)


def polynomial_kernel(dtype, parallel=False):
    """The compiled pass ``B = a I + b A + c B`` over a Gram matrix of ``dtype``."""
    dtype = np.dtype(dtype)

    def build():
        mat, f = NUMBA_TYPES[dtype][:, ::1], NUMBA_TYPES[dtype]
        return compile_kernel(types.void(mat, mat, f, f, f), parallel)(
            jit.by_value(_polynomial))
    return cached(("matrix", "polynomial", dtype, bool(parallel)), build)


_SCRATCH = threading.local()


def _scratch(name, size, dtype):
    """A scratch array of ``size`` elements of ``dtype``, kept per thread, name and dtype and
    reused (a fresh one each step would fault its pages in again)."""
    held = getattr(_SCRATCH, "arrays", None)
    if held is None:
        held = _SCRATCH.arrays = {}
    a = held.get((name, dtype))
    if a is None or a.shape[0] < size:
        a = held[(name, dtype)] = np.empty(max(size, 1), dtype)
    return a[:size]


def run_matrix(factory, weight, grad, buf, hyper):
    """One matrix step (module docstring) in place on the C-contiguous 2-D ``weight`` and
    ``buf`` (the state), from the C-contiguous ``grad`` of the same dtype; ``hyper`` the
    float64 row (a NamedTuple with the iteration's fields)."""
    dtype = weight.dtype
    f = dtype.type
    n, m = weight.shape
    size = n * m
    # the compiled passes run on one thread at every size: between two BLAS calls a parallel
    # loop waits for threads that BLAS's spinning pool holds (measured at 768 x 768: the
    # polynomial's pass 4.8 ms parallel, 0.04 ms serial), and serially they stay a small part
    # of a step bound by its products (a pass over n*m elements against products of n*m*k)
    parallel = False
    row = np.asarray(tuple(hyper), np.float64)
    nh = row.shape[0]
    x = _scratch("x", size, dtype)
    y = _scratch("y", size, dtype)
    partial = np.zeros(max(1, (size + CHUNK - 1) // CHUNK))
    w1, g1, b1 = weight.reshape(-1), grad.reshape(-1), buf.reshape(-1)
    if size:
        moment = compiled_pass(factory, "moment", nh, dtype, parallel)
        try:
            moment(g1, b1, x, row, partial)
        except TypeError:  # a read-only gradient (only read): its read-only variant
            jit.call_readonly(moment, g1, b1, x, row, partial)
    # the norm in float64 (the chunks' sums, in order), clamped there: a float32 update whose
    # norm lies beyond float32's range is still divided by it (rounded to the dtype, its
    # quotient would be u/inf = 0), each quotient rounded once to the dtype
    norm = math.sqrt(sum(partial.tolist()))
    eps = float(hyper.eps)
    if hyper.clamp:
        if norm < eps:  # max(|X|, eps); a NaN norm stays NaN (torch's clamp)
            norm = eps
    else:
        norm = norm + eps
    X, Y = x.reshape(n, m), y.reshape(n, m)
    np.divide(X, np.float64(norm), out=X, casting="same_kind")
    a, b, c = f(hyper.a), f(hyper.b), f(hyper.c)
    k = min(n, m)
    A = _scratch("A", k * k, dtype).reshape(k, k)
    B = _scratch("B", k * k, dtype).reshape(k, k)
    polynomial = polynomial_kernel(dtype, parallel)
    wide = n <= m
    for _ in range(int(hyper.steps)):
        if wide:
            np.matmul(X, X.T, out=A)
        else:
            np.matmul(X.T, X, out=A)
        np.matmul(A, A, out=B)
        polynomial(B, A, a, b, c)
        if wide:
            np.matmul(B, X, out=Y)
        else:
            np.matmul(X, B, out=Y)
        X, Y = Y, X
    if size:
        compiled_pass(factory, "apply", nh, dtype, parallel)(w1, X.reshape(-1), row)
