"""The CPU kernels of a factored step (``launches`` kind "factored"): a second moment kept as row
and column statistics of each matrix (Adafactor), the update clipped by its own RMS and scaled
by the weight's. What is stepped how, and the orders of the sums, are
:mod:`toolkit.backends.factored_layout`'s.

One call steps every segment of a :class:`~toolkit.backends.factored_layout.FactoredLayout`
(one weight, or a Trainer group's) in three passes:

1. statistics and direction: each row's and column's sum of squares of the gradient, the row
   and column statistics (a vector's moment) updated from them, each matrix's denominator, and
   the unclipped direction ``u`` written to a scratch array like the weight (reused: a thread's
   own, kept);
2. sums: ``sum w^2`` and ``sum u^2`` of each weight, chunk by chunk, then its two scalars;
3. apply: ``w`` decayed and moved by ``k*u``.

The gradient is read twice (once more for a large matrix's columns), the weight twice and
written once, ``u`` written once and read twice. The rule (``factory(ftype)``) supplies the
arithmetic around the sums (:class:`FactoredRule`); its row of hyperparameters is float64, each
value rounded where the rule's model rounds it.
"""
from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np
from numba import prange, types
from numba.np.unsafe.ndarray import to_fixed_tuple

from . import jit
from .factored_layout import LANES, LANES_OF, LARGE, VECTOR, layout_of
from .jit import NUMBA_TYPES, cached, compile_kernel, fma, inlined

__all__ = ["FactoredRule", "factored_kernel", "run_factored", "run_segmented"]

class FactoredRule(NamedTuple):
    """What a factored rule factory returns (each a plain function, inlined; ``hp`` the float64
    row; ``f`` the compute dtype): ``prep(g, hp)``, the gradient element as the step reads it
    (rescaled, clipped); ``stat(s, x0, count, hp)``, a statistic in ``f`` from the float64 sum
    of squares ``s`` of ``count`` elements (``x0`` the element when ``count == 1``);
    ``moment(old, stat, hp)``, the new statistic; ``vstat(g, hp)``, a vector's element
    statistic; ``den(s, n, hp)``, a matrix's denominator from the float64 sum of its ``n`` row
    statistics; ``estimate(r, c, den, hp)``, the rebuilt second moment of a matrix element;
    ``direction(g, v, hp)``, the element of ``u``; ``scales(sw, w0, su, u0, numel, hp)``, the
    float64 ``(decay, k)`` of ``apply(w, u, decay, k, hp)``, the new weight (``w0``, ``u0``:
    the elements of a one-element tensor)."""
    prep: object
    stat: object
    moment: object
    vstat: object
    den: object
    estimate: object
    direction: object
    scales: object
    apply: object


@inlined
def _add_four(acc, x, base):
    """Vectors ``j`` = 0..3 of 4 at ``x[base:]`` into partial ``j`` of level 0."""
    for j in range(4):
        for k in range(LANES):
            acc[0, j, k] = acc[0, j, k] + np.float64(x[base + j * LANES + k])


def _cascade(x, a, count):
    """``sum x[a:a+count]`` in float64 as torch's ``cascade_sum`` adds a contiguous row
    (aten/src/ATen/native/cpu/SumKernel.cpp): 4-wide vectors summed four at a time (element
    ``k`` of vector ``4i + j`` into lane ``k`` of partial ``j``) with four levels of pairwise
    carries once there are 16 or more of each (``multi_row_sum``), the vectors left over into
    partial 0, the partials added left to right; then ``0 +`` the scalar tail in order, the
    four lanes in order. Fewer than 4 elements: the same over scalars."""
    if count < LANES:
        s = 0.0
        for k in range(count):
            s = s + np.float64(x[a + k])
        return 0.0 + s
    nvec = count // LANES
    size = nvec // 4
    levels = 4
    c = 1
    while (1 << c) < size:
        c += 1
    power = max(4, (c if size > 2 else 1) // levels)
    step = 1 << power
    mask = step - 1
    acc = np.zeros((levels, 4, LANES))
    i = 0
    while i + step <= size:
        for _ in range(step):
            _add_four(acc, x, a + 4 * i * LANES)
            i += 1
        for lev in range(1, levels):
            for j in range(4):
                for k in range(LANES):
                    acc[lev, j, k] = acc[lev, j, k] + acc[lev - 1, j, k]
                    acc[lev - 1, j, k] = 0.0
            if (i & (mask << (lev * power))) != 0:
                break
    while i < size:
        _add_four(acc, x, a + 4 * i * LANES)
        i += 1
    for lev in range(1, levels):
        for j in range(4):
            for k in range(LANES):
                acc[0, j, k] = acc[0, j, k] + acc[lev, j, k]
    for v in range(size * 4, nvec):   # the vectors left over: into partial 0
        for k in range(LANES):
            acc[0, 0, k] = acc[0, 0, k] + np.float64(x[a + v * LANES + k])
    for j in range(1, 4):
        for k in range(LANES):
            acc[0, 0, k] = acc[0, 0, k] + acc[0, j, k]
    s = 0.0
    for k in range(nvec * LANES, count):
        s = s + np.float64(x[a + k])
    for k in range(LANES):
        s = s + acc[0, 0, k]
    return 0.0 + s


def _lanes_of(prep, lanes):
    """``lanes_sum(x, a, count, hp)``: ``sum prep(x[a:a+count])^2`` in the row order (module
    docstring) with ``lanes`` running sums: element ``k`` of the first ``count - count % lanes``
    into sum ``k % lanes`` (``s + x*x``), the sums added left to right, ``fma(x, x, s)`` for
    the rest."""
    def lanes_sum(x, a, count, hp):
        y = x[a:a + count]  # a view of its own: the loops vectorise (offsets into x do not)
        full = count - count % lanes
        acc = np.zeros(lanes)
        for k in range(0, full, lanes):
            for j in range(lanes):
                v = np.float64(prep(y[k + j], hp))
                acc[j] = acc[j] + v * v
        s = acc[0]
        for j in range(1, lanes):
            s = s + acc[j]
        for k in range(full, count):
            v = np.float64(prep(y[k], hp))
            s = fma(v, v, s)
        return s
    return inlined(lanes_sum)


def _plain(x, hp):
    return x


def _loop(rule, n_hyper, lanes):
    prep, stat, moment, vstat, den_of, estimate, direction, scales, apply = rule
    row_sum = _lanes_of(prep, lanes)
    flat_sum = _lanes_of(inlined(_plain), lanes)
    cascade = inlined(_cascade)

    def step(w, g, r, c, v, u, seg, elems, tiny, blocks, rows, cols, sums, flat, table, dens):
        den = np.empty(dens, w.dtype)
        # 1. statistics and the direction u (into u): vectors and one-element matrices, element
        # by element
        for k in prange(elems.shape[0]):
            s = elems[k, 0]
            if table[s, 0] == 0.0:
                continue
            hp = to_fixed_tuple(table[s, 1:], n_hyper)
            wo, kind, ro, co, vo = seg[s, 0], seg[s, 8], seg[s, 4], seg[s, 5], seg[s, 6]
            a, z = elems[k, 1], elems[k, 2]
            gk, uk = g[wo + a:wo + z], u[wo + a:wo + z]  # views: the loops vectorise
            if kind == VECTOR:
                vk = v[vo + a:vo + z]
                for e in range(z - a):
                    x = prep(gk[e], hp)
                    ve = moment(vk[e], vstat(x, hp), hp)
                    vk[e] = ve
                    uk[e] = direction(x, ve, hp)
            else:  # B matrices of 1 x 1: a row, a column and a mean of one element each
                # (two loops, each writing few arrays: LLVM vectorises a loop only while the
                # runtime checks that its arrays do not overlap stay few)
                rk, ck = r[ro + a:ro + z], c[co + a:co + z]
                for e in range(z - a):
                    x = prep(gk[e], hp)
                    xx = np.float64(x)
                    st = stat(xx * xx, x, 1, hp)
                    rk[e] = moment(rk[e], st, hp)
                    ck[e] = moment(ck[e], st, hp)
                for e in range(z - a):
                    d = den_of(0.0 + np.float64(rk[e]), 1, hp)
                    uk[e] = direction(prep(gk[e], hp), estimate(rk[e], ck[e], d, hp), hp)
        # tiny matrices (fewer than 4 rows and columns), many at once: position p of matrix
        # bb gathered in G[p, bb], so that every line below is a loop over bb that vectorises;
        # each row and column is all "tail" in the row order (fma after fma), each column of
        # several down the rows, each mean of fewer than 4 a plain running sum
        for k in prange(tiny.shape[0]):
            s = tiny[k, 0]
            if table[s, 0] == 0.0:
                continue
            hp = to_fixed_tuple(table[s, 1:], n_hyper)
            wo, n, m, ro, co = seg[s, 0], seg[s, 2], seg[s, 3], seg[s, 4], seg[s, 5]
            b0, b1 = tiny[k, 1], tiny[k, 2]
            nb, nm = b1 - b0, n * m
            gk = g[wo + b0 * nm:wo + b1 * nm]
            G = np.empty((nm, nb), gk.dtype)
            for p in range(nm):  # (strided loads, contiguous stores: they vectorise)
                Gp = G[p]
                for bb in range(nb):
                    Gp[bb] = prep(gk[bb * nm + p], hp)
            rk, ck = r[ro + b0 * n:ro + b1 * n], c[co + b0 * m:co + b1 * m]
            R = np.empty((n, nb), gk.dtype)
            C = np.empty((m, nb), gk.dtype)
            for i in range(n):  # the statistics gathered too, updated in place below
                Ri = R[i]
                for bb in range(nb):
                    Ri[bb] = rk[bb * n + i]
            for j in range(m):
                Cj = C[j]
                for bb in range(nb):
                    Cj[bb] = ck[bb * m + j]
            S = np.zeros(nb)
            for i in range(n):
                for bb in range(nb):
                    S[bb] = 0.0
                for j in range(m):
                    Gp = G[i * m + j]
                    for bb in range(nb):
                        x = np.float64(Gp[bb])
                        S[bb] = fma(x, x, S[bb])
                Ri, G0 = R[i], G[i * m]
                for bb in range(nb):
                    Ri[bb] = moment(Ri[bb], stat(S[bb], G0[bb], m, hp), hp)
            for j in range(m):
                for bb in range(nb):
                    S[bb] = 0.0
                for i in range(n):
                    Gp = G[i * m + j]
                    if m == 1:
                        for bb in range(nb):
                            x = np.float64(Gp[bb])
                            S[bb] = fma(x, x, S[bb])
                    else:
                        for bb in range(nb):
                            x = np.float64(Gp[bb])
                            S[bb] = S[bb] + x * x
                Cj, Gj = C[j], G[j]
                for bb in range(nb):
                    Cj[bb] = moment(Cj[bb], stat(S[bb], Gj[bb], n, hp), hp)
            for bb in range(nb):
                S[bb] = 0.0
            for i in range(n):
                Ri = R[i]
                for bb in range(nb):
                    S[bb] = S[bb] + np.float64(Ri[bb])
            D = np.empty(nb, gk.dtype)
            for bb in range(nb):
                D[bb] = den_of(0.0 + S[bb], n, hp)
            for i in range(n):
                Ri = R[i]
                for j in range(m):
                    Gp, Cj = G[i * m + j], C[j]
                    for bb in range(nb):  # the direction, back in G
                        Gp[bb] = direction(Gp[bb], estimate(Ri[bb], Cj[bb], D[bb], hp), hp)
            uk = u[wo + b0 * nm:wo + b1 * nm]
            for p in range(nm):
                Gp = G[p]
                for bb in range(nb):
                    uk[bb * nm + p] = Gp[bb]
            for i in range(n):
                Ri = R[i]
                for bb in range(nb):
                    rk[bb * n + i] = Ri[bb]
            for j in range(m):
                Cj = C[j]
                for bb in range(nb):
                    ck[bb * m + j] = Cj[bb]
        # small matrices, one at a time: rows, columns, denominator, then u
        for k in prange(blocks.shape[0]):
            s = blocks[k, 0]
            if table[s, 0] == 0.0:
                continue
            hp = to_fixed_tuple(table[s, 1:], n_hyper)
            wo, n, m, ro, co, do = seg[s, 0], seg[s, 2], seg[s, 3], seg[s, 4], seg[s, 5], \
                seg[s, 7]
            acc = np.zeros(m)
            for b in range(blocks[k, 1], blocks[k, 2]):
                e0 = wo + b * n * m
                for j in range(m):
                    acc[j] = 0.0
                for i in range(n):
                    a = e0 + i * m
                    r[ro + b * n + i] = moment(r[ro + b * n + i], stat(
                        row_sum(g, a, m, hp), prep(g[a], hp), m, hp), hp)
                    if m > 1:
                        for j in range(m):
                            x = np.float64(prep(g[a + j], hp))
                            acc[j] = acc[j] + x * x
                for j in range(m):
                    t = row_sum(g, e0, n, hp) if m == 1 else acc[j]
                    c[co + b * m + j] = moment(c[co + b * m + j], stat(
                        t, prep(g[e0 + j], hp), n, hp), hp)
                d = den_of(cascade(r, ro + b * n, n), n, hp)
                den[do + b] = d
                for i in range(n):
                    rq = r[ro + b * n + i]
                    a = e0 + i * m
                    for j in range(m):
                        u[a + j] = direction(prep(g[a + j], hp),
                                             estimate(rq, c[co + b * m + j], d, hp), hp)
        # large matrices: rows, then blocks of columns, then each matrix's denominator
        for k in prange(rows.shape[0]):
            s = rows[k, 0]
            if table[s, 0] == 0.0:
                continue
            hp = to_fixed_tuple(table[s, 1:], n_hyper)
            wo, m, ro = seg[s, 0], seg[s, 3], seg[s, 4]
            for q in range(rows[k, 1], rows[k, 2]):
                a = wo + q * m
                r[ro + q] = moment(r[ro + q], stat(row_sum(g, a, m, hp), prep(g[a], hp), m, hp),
                                   hp)
        for k in prange(cols.shape[0]):
            s = cols[k, 0]
            if table[s, 0] == 0.0:
                continue
            hp = to_fixed_tuple(table[s, 1:], n_hyper)
            wo, n, m, co = seg[s, 0], seg[s, 2], seg[s, 3], seg[s, 5]
            q0, q1 = cols[k, 1], cols[k, 2]
            b = q0 // m
            j0, j1 = q0 - b * m, q1 - b * m
            e0 = wo + b * n * m
            if m == 1:
                c[co + q0] = moment(c[co + q0], stat(row_sum(g, e0, n, hp), prep(g[e0], hp),
                                                     n, hp), hp)
                continue
            acc = np.zeros(j1 - j0)
            for i in range(n):
                a = e0 + i * m
                gi = g[a + j0:a + j1]
                for j in range(j1 - j0):
                    x = np.float64(prep(gi[j], hp))
                    acc[j] = acc[j] + x * x
            for j in range(j0, j1):
                c[co + b * m + j] = moment(c[co + b * m + j], stat(
                    acc[j - j0], prep(g[e0 + j], hp), n, hp), hp)
        for s in range(seg.shape[0]):
            if seg[s, 8] != LARGE or table[s, 0] == 0.0:
                continue
            hp = to_fixed_tuple(table[s, 1:], n_hyper)
            n, ro, do = seg[s, 2], seg[s, 4], seg[s, 7]
            for b in range(seg[s, 1]):
                den[do + b] = den_of(cascade(r, ro + b * n, n), n, hp)
        for k in prange(rows.shape[0]):
            s = rows[k, 0]
            if table[s, 0] == 0.0:
                continue
            hp = to_fixed_tuple(table[s, 1:], n_hyper)
            wo, n, m, ro, co, do = seg[s, 0], seg[s, 2], seg[s, 3], seg[s, 4], seg[s, 5], \
                seg[s, 7]
            for q in range(rows[k, 1], rows[k, 2]):
                b = q // n
                rq, d, a, cb = r[ro + q], den[do + b], wo + q * m, co + b * m
                gq, uq, cq = g[a:a + m], u[a:a + m], c[cb:cb + m]
                for j in range(m):
                    uq[j] = direction(prep(gq[j], hp), estimate(rq, cq[j], d, hp), hp)
        # 2. the whole tensors' sums of w^2 and u^2, chunk by chunk
        part = np.zeros((sums.shape[0], 2))
        for k in prange(sums.shape[0]):
            s = sums[k, 0]
            if table[s, 0] == 0.0:
                continue
            hp = to_fixed_tuple(table[s, 1:], n_hyper)
            a = seg[s, 0] + sums[k, 1]
            count = sums[k, 2] - sums[k, 1]
            part[k, 0] = flat_sum(w, a, count, hp)
            part[k, 1] = flat_sum(u, a, count, hp)
        coef = np.zeros((seg.shape[0], 2))
        k = 0
        while k < sums.shape[0]:
            s = sums[k, 0]
            sw, su = part[k, 0], part[k, 1]
            k += 1
            while k < sums.shape[0] and sums[k, 0] == s:
                sw = sw + part[k, 0]
                su = su + part[k, 1]
                k += 1
            if table[s, 0] == 0.0:
                continue
            hp = to_fixed_tuple(table[s, 1:], n_hyper)
            wo, B, n, m = seg[s, 0], seg[s, 1], seg[s, 2], seg[s, 3]
            coef[s, 0], coef[s, 1] = scales(sw, w[wo], su, u[wo], B * n * max(m, 1), hp)
        # 3. the update
        for k in prange(flat.shape[0]):
            s = flat[k, 0]
            if table[s, 0] == 0.0:
                continue
            hp = to_fixed_tuple(table[s, 1:], n_hyper)
            a, z = seg[s, 0] + flat[k, 1], seg[s, 0] + flat[k, 2]
            decay, kk = coef[s, 0], coef[s, 1]
            wk, uk = w[a:z], u[a:z]
            for e in range(z - a):
                wk[e] = apply(wk[e], uk[e], decay, kk, hp)

    return step


def factored_kernel(factory, n_hyper: int, dtype, parallel: bool):
    """The compiled factored step of ``factory``'s rule for ``dtype`` (cached per process):
    ``(w, g, r, c, v, u, seg, elems, tiny, blocks, rows, cols, sums, flat, table, dens)`` over the
    segments of a :class:`FactoredLayout`, ``u`` a scratch array like ``w``, ``table`` one
    float64 ``(active, *hp)`` row per segment."""
    dtype = np.dtype(dtype)
    key = ("factored", factory, n_hyper, dtype, bool(parallel))

    def build():
        arr = NUMBA_TYPES[dtype][::1]
        ints = types.int64[:, ::1]
        sig = types.void(arr, arr, arr, arr, arr, arr, types.int64[:, ::1], ints, ints, ints,
                         ints, ints, ints, ints, types.float64[:, ::1], types.int64)
        rule = FactoredRule(*(inlined(fn) for fn in factory(dtype.type)))
        return compile_kernel(sig, parallel)(_loop(rule, n_hyper, LANES_OF[dtype]))
    return cached(key, build)


_EMPTY = {}
_SCRATCH = threading.local()


def _empty(dtype):
    e = _EMPTY.get(dtype)
    if e is None:
        e = _EMPTY[dtype] = np.zeros(0, dtype)
    return e


def _scratch(size, dtype):
    """A scratch array of ``size`` elements of ``dtype`` for the direction ``u``, kept per
    thread and dtype and reused (a fresh one each step would fault its pages in again)."""
    held = getattr(_SCRATCH, "arrays", None)
    if held is None:
        held = _SCRATCH.arrays = {}
    a = held.get(dtype)
    if a is None or a.shape[0] < size:
        a = held[dtype] = np.empty(max(size, 1), dtype)
    return a[:size]


def run_segmented(factory, weight, grad, states, table, layout):
    """One factored call over flat C-contiguous buffers: ``weight`` and ``grad`` holding the
    segments of ``layout`` (a :class:`FactoredLayout`) end to end, ``states`` the flat row,
    column and vector statistics laid out as it says, ``table`` one float64
    ``(active, *hp)`` row per segment."""
    if layout.size == 0:
        return
    dtype = weight.dtype
    parallel = layout.size >= jit.PARALLEL_THRESHOLD
    kernel = factored_kernel(factory, table.shape[1] - 1, dtype, parallel)
    r, c, v = (a if a.size else _empty(dtype) for a in states)
    kernel(weight, grad, r, c, v, _scratch(layout.size, dtype), layout.seg, layout.elems,
           layout.tiny, layout.blocks, layout.rows, layout.cols, layout.sums_of(dtype),
           layout.flat,
           np.ascontiguousarray(table, np.float64), layout.dens)


def run_factored(factory, weight, grad, states, hyper):
    """One factored step in place: ``weight`` and ``grad`` C-contiguous of one shape and
    dtype, ``states`` the ``(row, col, vector)`` statistics (C-contiguous; those the weight's
    rank does not use are empty), ``hyper`` the float64 row."""
    table = np.empty((1, 1 + len(hyper)), np.float64)
    table[0, 0] = 1.0
    table[0, 1:] = hyper
    run_segmented(factory, weight.reshape(-1), grad.reshape(-1),
                  tuple(a.reshape(-1) for a in states), table, layout_of(tuple(weight.shape)))
