"""The CPU kernels of a factored step (``launches`` kind "factored"): a second moment kept as row
and column statistics of each matrix (Adafactor), the update clipped by its own RMS and scaled
by the weight's. What is stepped how, and the orders of the sums, are
:mod:`toolkit.backends.factored_layout`'s.

One call steps every segment of a :class:`~toolkit.backends.factored_layout.FactoredLayout`
(one weight, or a Trainer group's) in three passes:

1. statistics and direction: each row's and column's sum of squares of the gradient, the row
   and column statistics (a vector's moment) updated from them, each matrix's denominator, and
   the unclipped direction ``u`` written to a scratch array like the weight (reused: a thread's
   own, kept); the tiny matrices' passes (a convolution's 3 x 3 kernels among them) are
   :mod:`toolkit.backends.cpu_factored_tiny`'s. In float32 (``FUSED_OF``) each work item then
   sums ``w^2`` and ``u^2`` over its elements (``u`` still in cache), its chunk of the whole
   tensors' sums;
2. sums (float64): ``sum w^2`` and ``sum u^2`` of each weight, chunk by chunk in torch's order;
   then each weight's two scalars from its chunks' sums;
3. apply: ``w`` decayed and moved by ``k*u``.

The gradient is read once (twice for a large matrix: its rows, then its columns), ``u``
written once and read once (float64: twice), the weight read twice and written once. The rule (``factory(ftype)``) supplies the
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
from .cpu_factored_tiny import BLOCK33, tiny_pass_of, tiny33_pass_of
from .cpu_factored_sums import CASCADE, lanes_of, pair_of
from .factored_layout import FUSED_OF, LANES_OF, LARGE, VECTOR, layout_of
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
    ``direction(g, v, hp)``, the element of ``u``; ``scales(sw, w0, su, u0, numel, root, hp)``,
    the float64 ``(decay, k)`` of ``apply(w, u, decay, k, hp)``, the new weight (``w0``,
    ``u0``: the elements of a one-element tensor; ``root``: ``numel**0.5`` as the host forms
    it, ``FactoredLayout.roots``)."""
    prep: object
    stat: object
    moment: object
    vstat: object
    den: object
    estimate: object
    direction: object
    scales: object
    apply: object


def _passes(rule, n_hyper, lanes, fused, block33):
    """The passes of a factored step, each a plain function compiled on its own (on first use,
    by :func:`factored_kernel`): a step compiles only the passes its segments need, each far
    faster to compile than one function holding them all (measured: 28 s serial, 65 s
    parallel for the one function, float32). ``fused``: the first pass's work items take the
    whole tensors' sums (into ``part[base + k]``), else they write none. ``block33``: the 3 x 3
    pass's transposes' block (``cpu_factored_tiny.BLOCKS33``)."""
    prep, stat, moment, vstat, den_of, estimate, direction, scales, apply = rule
    row_sum = lanes_of(prep, lanes)
    pair_sum = pair_of(lanes)
    fused_sum = pair_of(lanes, called=True)
    cascade = CASCADE  # (a function of its own, not inlined: compiled once, not per pass)

    def elems_pass(g, r, c, v, u, seg, elems, table, w, part, base):
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
                # (one loop writing three arrays: LLVM vectorises it, with the runtime checks
                # that they do not overlap; two loops, the statistics then u, took 1.1-1.3x
                # as long)
                rk, ck = r[ro + a:ro + z], c[co + a:co + z]
                for e in range(z - a):
                    x = prep(gk[e], hp)
                    xx = np.float64(x)
                    st = stat(xx * xx, x, 1, hp)
                    re = moment(rk[e], st, hp)
                    ce = moment(ck[e], st, hp)
                    rk[e] = re
                    ck[e] = ce
                    uk[e] = direction(x, estimate(re, ce, den_of(0.0 + np.float64(re), 1, hp),
                                                  hp), hp)
            if fused:  # this item's chunk of the whole tensors' sums, u still in cache
                part[base + k, 0], part[base + k, 1] = fused_sum(w, u, wo + a, z - a)

    def blocks_pass(g, r, c, u, seg, blocks, table, w, part, base):
        # small matrices, one at a time: rows, columns, denominator, then u
        for k in prange(blocks.shape[0]):
            s = blocks[k, 0]
            if table[s, 0] == 0.0:
                continue
            hp = to_fixed_tuple(table[s, 1:], n_hyper)
            wo, n, m, ro, co = seg[s, 0], seg[s, 2], seg[s, 3], seg[s, 4], seg[s, 5]
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
                for i in range(n):
                    rq = r[ro + b * n + i]
                    a = e0 + i * m
                    for j in range(m):
                        u[a + j] = direction(prep(g[a + j], hp),
                                             estimate(rq, c[co + b * m + j], d, hp), hp)
            if fused:
                a = wo + blocks[k, 1] * n * m
                part[base + k, 0], part[base + k, 1] = fused_sum(
                    w, u, a, (blocks[k, 2] - blocks[k, 1]) * n * m)

    def rowcols_pass(g, r, c, seg, rows, cols, table):
        # large matrices: rows and blocks of columns (one parallel loop over both tables: they
        # write different statistics), then each matrix's denominator
        nr = rows.shape[0]
        for k in prange(nr + cols.shape[0]):
            if k < nr:
                s = rows[k, 0]
                if table[s, 0] != 0.0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    wo, m, ro = seg[s, 0], seg[s, 3], seg[s, 4]
                    for q in range(rows[k, 1], rows[k, 2]):
                        a = wo + q * m
                        r[ro + q] = moment(r[ro + q], stat(row_sum(g, a, m, hp), prep(g[a], hp),
                                                           m, hp), hp)
            else:
                s = cols[k - nr, 0]
                if table[s, 0] != 0.0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    wo, n, m, co = seg[s, 0], seg[s, 2], seg[s, 3], seg[s, 5]
                    q0, q1 = cols[k - nr, 1], cols[k - nr, 2]
                    b = q0 // m
                    j0, j1 = q0 - b * m, q1 - b * m
                    e0 = wo + b * n * m
                    if m == 1:
                        c[co + q0] = moment(c[co + q0], stat(row_sum(g, e0, n, hp),
                                                             prep(g[e0], hp), n, hp), hp)
                    else:
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

    def dens_pass(r, seg, table, den):
        for s in range(seg.shape[0]):
            if seg[s, 8] != LARGE or table[s, 0] == 0.0:
                continue
            hp = to_fixed_tuple(table[s, 1:], n_hyper)
            n, ro, do = seg[s, 2], seg[s, 4], seg[s, 7]
            for b in range(seg[s, 1]):
                den[do + b] = den_of(cascade(r, ro + b * n, n), n, hp)

    def dirs_pass(g, r, c, u, seg, rows, table, den, w, part, base):
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
            if fused:
                a = wo + rows[k, 1] * m
                part[base + k, 0], part[base + k, 1] = fused_sum(
                    w, u, a, (rows[k, 2] - rows[k, 1]) * m)

    def sums_pass(w, u, seg, sums, table, part):
        # 2. the whole tensors' sums of w^2 and u^2, chunk by chunk (float64: torch's chunks)
        for k in prange(sums.shape[0]):
            s = sums[k, 0]
            if table[s, 0] == 0.0:
                continue
            a = seg[s, 0] + sums[k, 1]
            count = sums[k, 2] - sums[k, 1]
            part[k, 0], part[k, 1] = pair_sum(w, u, a, count)

    def coef_pass(w, u, seg, sums, table, part, roots, coef):
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
            coef[s, 0], coef[s, 1] = scales(sw, w[wo], su, u[wo], B * n * max(m, 1), roots[s],
                                            hp)

    def apply_pass(w, u, seg, flat, table, coef):
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


    return {"elems": elems_pass, "tiny": tiny_pass_of(rule, n_hyper, fused, fused_sum),
            "tiny33": tiny33_pass_of(rule, n_hyper, fused, fused_sum, block33),
            "blocks": blocks_pass,
            "rowcols": rowcols_pass, "dens": dens_pass, "dirs": dirs_pass, "sums": sums_pass,
            "coef": coef_pass, "apply": apply_pass}


#: each pass's argument types, by name (``a``: an array of the weight's dtype, ``i``: a work
#: table, ``h``: the float64 rows, ``f``: a float64 matrix, ``d``: a vector of the dtype,
#: ``r``: a float64 vector, ``n``: an int64); the first pass's end in ``afn``: the weight, the
#: sums' parts, the item's first part
_SIGNATURES = {"elems": "aaaaaiihafn", "tiny": "aaaaiihafn", "tiny33": "aaaaiihafn",
               "blocks": "aaaaiihafn", "rowcols": "aaaiiih", "dens": "aihd",
               "dirs": "aaaaiihdafn", "sums": "aaiihf",
               "coef": "aaiihfrf", "apply": "aaiihf"}
#: passes that loop over one segment at a time on one thread (no parallel variant)
_SERIAL = ("dens", "coef")


def factored_kernel(factory, name, n_hyper: int, dtype, parallel: bool, block33=BLOCK33):
    """The compiled pass ``name`` (:data:`_SIGNATURES`) of ``factory``'s rule for ``dtype``
    (cached per process, compiled on first use); ``block33``: the 3 x 3 pass's transposes'
    block, this machine's (``cpu_factored_tiny.BLOCK33``) unless given (the tests compile
    every one of ``BLOCKS33``)."""
    dtype = np.dtype(dtype)
    parallel = bool(parallel) and name not in _SERIAL
    key = ("factored", name, factory, n_hyper, dtype, parallel, block33)

    def build():
        arr = NUMBA_TYPES[dtype][::1]
        kinds = {"a": arr, "d": arr, "i": types.int64[:, ::1], "h": types.float64[:, ::1],
                 "f": types.float64[:, ::1], "r": types.float64[::1], "n": types.int64}
        sig = types.void(*(kinds[k] for k in _SIGNATURES[name]))
        rule = FactoredRule(*(inlined(fn) for fn in factory(dtype.type)))
        fn = _passes(rule, n_hyper, LANES_OF[dtype], FUSED_OF[dtype], block33)[name]
        return compile_kernel(sig, parallel)(fn)
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
    """One factored step over flat C-contiguous buffers: ``weight`` and ``grad`` holding the
    segments of ``layout`` (a :class:`~toolkit.backends.factored_layout.FactoredLayout`) end to
    end, ``states`` the flat row, column and vector statistics laid out as it says, ``table``
    one float64 ``(active, *hp)`` row per segment. Runs the passes whose work tables are not
    empty, in order."""
    if layout.size == 0:
        return
    dtype = weight.dtype
    parallel = layout.size >= jit.PARALLEL_THRESHOLD
    table = np.ascontiguousarray(table, np.float64)
    nh = table.shape[1] - 1
    r, c, v = (a if a.size else _empty(dtype) for a in states)
    u = _scratch(layout.size, dtype)
    seg = layout.seg
    sums = layout.sums_of(dtype)
    part = np.zeros((sums.shape[0], 2))
    base = layout.fused_base  # (float64: the first pass writes no part)

    def run(name, *args, work=None):
        # a pass of the first over few elements runs on one thread (a parallel loop's start
        # costs more than it saves; on a busy machine it waits for a thread, 6-8 ms measured)
        par = parallel and (work is None or layout.work[work] >= jit.PARALLEL_THRESHOLD)
        factored_kernel(factory, name, nh, dtype, par)(*args)
    if layout.elems.shape[0]:
        run("elems", grad, r, c, v, u, seg, layout.elems, table, weight, part, base["elems"],
            work="elems")
    if layout.tiny.shape[0]:
        run("tiny", grad, r, c, u, seg, layout.tiny, table, weight, part, base["tiny"],
            work="tiny")
    if layout.tiny33.shape[0]:
        run("tiny33", grad, r, c, u, seg, layout.tiny33, table, weight, part, base["tiny33"],
            work="tiny33")
    if layout.blocks.shape[0]:
        run("blocks", grad, r, c, u, seg, layout.blocks, table, weight, part, base["blocks"],
            work="blocks")
    if layout.rows.shape[0]:
        den = np.empty(max(layout.dens, 1), dtype)
        run("rowcols", grad, r, c, seg, layout.rows, layout.cols, table, work="rows")
        run("dens", r, seg, table, den)
        run("dirs", grad, r, c, u, seg, layout.rows, table, den, weight, part, base["rows"],
            work="rows")
    coef = np.zeros((seg.shape[0], 2))
    if not FUSED_OF[dtype]:
        run("sums", weight, u, seg, sums, table, part)
    run("coef", weight, u, seg, sums, table, part, layout.roots, coef)
    run("apply", weight, u, seg, layout.flat, table, coef)


def run_factored(factory, weight, grad, states, hyper):
    """One factored step in place: ``weight`` and ``grad`` C-contiguous of one shape and
    dtype, ``states`` the ``(row, col, vector)`` statistics (C-contiguous; those the weight's
    rank does not use are empty), ``hyper`` the float64 row."""
    table = np.empty((1, 1 + len(hyper)), np.float64)
    table[0, 0] = 1.0
    table[0, 1:] = hyper
    run_segmented(factory, weight.reshape(-1), grad.reshape(-1),
                  tuple(a.reshape(-1) for a in states), table, layout_of(tuple(weight.shape)))
