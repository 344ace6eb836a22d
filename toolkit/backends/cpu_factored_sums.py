"""The sums of a factored step (``toolkit.backends.cpu_factored``) in their fixed orders
(``toolkit.backends.factored_layout``'s docstring), as compiled code calls them: a row's (and a
chunk's) sum of squares with running sums (:func:`lanes_of`), and torch's ``cascade_sum`` of a
matrix's row statistics (:data:`CASCADE`)."""
from __future__ import annotations

import numpy as np
from numba.extending import register_jitable

from .factored_layout import LANES
from . import jit
from .jit import fma, inlined

__all__ = ["CASCADE", "lanes_of", "pair_of", "plain"]


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


#: :func:`_cascade` as compiled code calls it: a function of its own, not inlined (compiled
#: once for all the passes that call it)
CASCADE = register_jitable(_cascade)


def lanes_of(prep, lanes):
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


def pair_of(lanes, called=False):
    """``pair_sum(x, y, a, count)``: ``sum x[a:a+count]^2`` and ``sum y[a:a+count]^2`` in the
    order of :func:`lanes_of` (``prep`` the identity), the two in one loop (their running sums
    side by side, each sum's order its own): a whole tensor's sums of ``w^2`` and ``u^2``, in
    0.8x the time of one loop after the other (measured serial, float32). With few running
    sums (float64's 4) one loop after the other, which took 0.7x the time of one loop.
    ``called``: compiled as a function of its own (:func:`toolkit.backends.jit.called`), as the
    first pass's items call it (inlined into the 3 x 3 pass's body its loop was left scalar:
    that pass took 1.6 times as long)."""
    if lanes < 16:
        flat = lanes_of(plain, lanes)

        def two_sums(x, y, a, count):
            return flat(x, a, count, 0.0), flat(y, a, count, 0.0)
        return inlined(two_sums)

    def pair_sum(x, y, a, count):
        xs, ys = x[a:a + count], y[a:a + count]  # views: the loops vectorise
        full = count - count % lanes
        ax = np.zeros(lanes)
        ay = np.zeros(lanes)
        for k in range(0, full, lanes):
            for j in range(lanes):
                v = np.float64(xs[k + j])
                z = np.float64(ys[k + j])
                ax[j] = ax[j] + v * v
                ay[j] = ay[j] + z * z
        sx, sy = ax[0], ay[0]
        for j in range(1, lanes):
            sx = sx + ax[j]
            sy = sy + ay[j]
        for k in range(full, count):
            v = np.float64(xs[k])
            z = np.float64(ys[k])
            sx = fma(v, v, sx)
            sy = fma(z, z, sy)
        return sx, sy
    return jit.called(pair_sum) if called else inlined(pair_sum)


def _plain(x, hp):
    return x


#: the identity ``prep``: a sum of squares of the values as they are
plain = inlined(_plain)
