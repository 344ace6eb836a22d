"""The work of a factored step (``launches`` kind "factored", Adafactor's) as data: how each
weight is cut into matrices (:func:`shape_of`), what kind of segment each is, and the work
tables of one call over many weights (:class:`FactoredLayout`), with the reduction orders'
constants. ``toolkit.backends.cpu_factored`` runs them.

Every sum has a fixed order that no thread count changes. In float64 it is the order of torch
2.13's CPU reductions (measured bit for bit; docs/optimizers/adafactor.md, "Reductions"):

* a row (``torch.norm(x, dim=-1)``; also a whole tensor, ``x.norm()``, as one row): element
  ``k`` of the first ``len - len % 4`` into running sum ``k % 4`` (``s + x*x``, two roundings),
  the four added left to right, then each remaining element ``s = fma(x, x, s)``; one element
  alone is not squared (its norm is ``|x|``);
* a column of a matrix with more than one column (``dim=-2``): ``s + x*x`` down the rows (one
  column: the row order);
* the row statistics of a matrix (``mean(dim=-2)``): torch's ``cascade_sum`` of 4-wide vectors
  (``cpu_factored_sums.CASCADE``);
* a whole tensor in chunks of :data:`CHUNK` elements (whole rows), each as a row, the chunks'
  sums then added in order: one chunk below ``CHUNK``, where the sums are torch's.

In float32 the sums are float64 too (torch keeps them in float32: not its bits either way), in
the same orders with :data:`LANES_OF` running sums, and a whole tensor's sums of ``w^2`` and
``u^2`` are taken by the first pass (:data:`FUSED_OF`), each of its work items a chunk
(``FactoredLayout.fused``): ``u`` is summed while it is in cache (but for the 3 x 3 pass's,
stored non-temporally), and no pass of their own reads the weight and ``u`` again.
"""
from __future__ import annotations

import numpy as np

__all__ = ["LANES", "LANES_OF", "FUSED_OF", "CHUNK", "WORK", "SMALL", "VECTOR", "SINGLE", "TINY",
           "BLOCKS", "LARGE", "shape_of", "FactoredLayout", "layout_of"]

#: the running sums of a row's sum of squares (torch's AVX2 float64 width, which its CPU
#: reductions use on AVX-512 machines too)
LANES = 4
#: the most elements of one chunk of a whole tensor's float64 sums (whole rows); a tensor of at
#: most this many elements is one chunk, summed as torch sums it
CHUNK = 1 << 20
#: the running sums of every sum, per compute dtype: float64 takes torch's 4 (its float64 sums
#: are torch's, bit for bit); float32, whose sums torch keeps in float32 and the kernels in
#: float64, takes 64, whose loop LLVM vectorises (measured at 2^24 elements: 1.98 ms against
#: 4.4 ms with 16, 9.8 with 32)
LANES_OF = {np.dtype(np.float64): LANES, np.dtype(np.float32): 64}
#: per compute dtype, whether the whole tensors' sums are the first pass's (each of its work
#: items a chunk: ``FactoredLayout.fused``) rather than a pass's of their own in chunks of
#: :data:`CHUNK`: float32's, whose order is the toolkit's own (a pass fewer over the weight and
#: ``u``); float64 keeps torch's order, one chunk up to 2^20 elements
FUSED_OF = {np.dtype(np.float64): False, np.dtype(np.float32): True}
#: elements per work item of the parallel passes
WORK = 1 << 14
#: the most elements of a matrix stepped as one block (its rows, columns and update in one
#: pass over it, one thread); a larger one is stepped by rows and by blocks of columns
SMALL = 1 << 12
#: what a segment is (``FactoredLayout.seg`` column 8): a vector, matrices of one element
#: (both stepped element by element), tiny matrices (fewer than 4 rows and columns: a
#: convolution's 3 x 3 kernels, stepped many at once with each position's values gathered in a
#: vector of their own), small matrices (one at a time), large ones (by rows and columns)
VECTOR, SINGLE, TINY, BLOCKS, LARGE = 0, 1, 2, 3, 4


class FactoredLayout:
    """The segments of one factored call and its work tables, from the weights' shapes.

    ``seg`` rows ``(w_off, B, n, m, r_off, c_off, v_off, d_off, kind)``: segment ``s``'s first
    weight element, its ``B`` matrices of ``n x m`` (``m == 0``: a vector of ``n``), where its
    row, column and vector statistics start in their flat buffers, where its ``B``
    denominators start (``dens`` of them in all), and its kind (:data:`VECTOR`,
    :data:`SINGLE`, :data:`TINY`, :data:`BLOCKS`, :data:`LARGE`). The work tables, ``(K, 3)`` rows
    ``(segment, first, end)`` in segment order: ``elems`` the element ranges of the vectors and
    one-element matrices; ``tiny33``, ``tiny`` and ``blocks`` the matrix ranges of the 3 x 3,
    the other tiny and the small matrices; ``rows`` the row
    ranges and ``cols`` the column ranges (inside one matrix) of the large ones; ``sums`` the
    chunks of every segment's whole-tensor sums (whole rows, at most :data:`CHUNK` elements,
    as element ranges); ``fused`` the same where the first pass takes them (:data:`FUSED_OF`):
    its work items as element ranges, those of ``elems``, ``tiny``, ``tiny33``, ``blocks``
    and ``rows`` end to end, from ``fused_base[name]``; ``flat`` every segment's element ranges
    (the update); ``work`` the elements of each of the first pass's tables. ``r_size``,
    ``c_size``, ``v_size``: each statistics buffer's length; ``size`` the weights'.
    ``roots``: each segment's ``numel**0.5`` in float64, formed as torch forms it (Python's
    pow: numba would take ``x**0.5`` for sqrt, one ulp away at some sizes, 5579 elements
    among them)."""

    def __init__(self, shapes):
        segs = []
        w = r = c = v = d = 0
        sizes = []
        for shape in shapes:
            B, n, m = shape_of(shape)
            matrix = len(tuple(shape)) >= 2
            kind = VECTOR if not matrix else SINGLE if n * m == 1 else \
                TINY if n < 4 and m < 4 else BLOCKS if n * m <= SMALL else LARGE
            segs.append((w, B, n, m, r, c, v, d, kind))
            sizes.append(B * n * m if matrix else n)
            w += sizes[-1]
            if matrix:
                r, c, d = r + B * n, c + B * m, d + B
            else:
                v += n
        self.seg = np.array(segs, np.int64).reshape(-1, 9)
        self.roots = np.array([float(n) ** 0.5 for n in sizes], np.float64)
        self.r_size, self.c_size, self.v_size, self.dens, self.size = r, c, v, d, w

        def each(s, count, per):
            return [(s, a, min(count, a + per)) for a in range(0, count, per)]
        elems, tiny, tiny33, blocks, rows, cols = [], [], [], [], [], []
        sums, flat = [], []
        for s, (_, B, n, m, *_, kind) in enumerate(segs):
            if sizes[s] == 0:  # an empty weight: nothing to step
                continue
            if kind in (VECTOR, SINGLE):
                elems += each(s, sizes[s], WORK)
            elif kind == TINY and n == m == 3:  # whole blocks of 16 (cpu_factored_tiny.BLOCKS33 divide it)
                tiny33 += each(s, B, WORK // 9 // 16 * 16)
            elif kind == TINY:
                tiny += each(s, B, max(1, WORK // (n * m)))
            elif kind == BLOCKS:
                blocks += each(s, B, max(1, WORK // (n * m)))
            else:
                rows += each(s, B * n, max(1, WORK // m))
                per = max(256, WORK // n)
                cols += [(s, b * m + a, b * m + min(m, a + per)) for b in range(B)
                         for a in range(0, m, per)]
            row = max(m, 1)
            nrows, per = sizes[s] // row, max(1, CHUNK // row)
            sums += [(s, a * row, min(nrows, a + per) * row) for a in range(0, nrows, per)]
            flat += each(s, sizes[s], WORK)

        def table(rows_):
            return np.array(rows_, np.int64).reshape(-1, 3)
        self.elems, self.tiny, self.tiny33, self.blocks, self.rows, self.cols = map(
            table, (elems, tiny, tiny33, blocks, rows, cols))
        self.sums, self.flat = table(sums), table(flat)
        fused, self.fused_base = [], {}
        for name, items in (("elems", elems), ("tiny", tiny), ("tiny33", tiny33),
                            ("blocks", blocks), ("rows", rows)):
            self.fused_base[name] = len(fused)
            for s, a, z in items:  # as element ranges
                per = 1 if name == "elems" else segs[s][3] if name == "rows" else \
                    segs[s][2] * segs[s][3]
                fused.append((s, a * per, z * per))
        self.fused = table(fused)
        #: the elements each pass of the first steps (by the name of its work table; "rows"
        #: for the large matrices' four): a pass runs on one thread below
        #: ``jit.PARALLEL_THRESHOLD`` of them, as a whole call does
        self.work = {"elems": sum(z - a for _, a, z in elems),
                     "tiny": sum((z - a) * int(np.prod(segs[s][2:4])) for s, a, z in tiny),
                     "tiny33": sum((z - a) * 9 for _, a, z in tiny33),
                     "blocks": sum((z - a) * int(np.prod(segs[s][2:4])) for s, a, z in blocks),
                     "rows": sum((z - a) * segs[s][3] for s, a, z in rows)}

    def sums_of(self, dtype):
        """The chunks of the whole-tensor sums for weights of ``dtype``: :data:`CHUNK`
        elements (torch's order) in float64, the first pass's work items (``fused``) where
        it takes them (:data:`FUSED_OF`)."""
        return self.fused if FUSED_OF[np.dtype(dtype)] else self.sums



def shape_of(shape):
    """``(B, n, m)`` of a weight of ``shape`` for a factored step; ``(1, N, 0)`` for a
    weight of rank below 2 (``m == 0``: a vector of ``N`` elements)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) < 2:
        return 1, int(np.prod(shape, dtype=np.int64)), 0
    return int(np.prod(shape[:-2], dtype=np.int64)), shape[-2], shape[-1]


_LAYOUTS = {}


def layout_of(shape):
    """The :class:`FactoredLayout` of one weight of ``shape`` (kept per shape)."""
    lay = _LAYOUTS.get(shape)
    if lay is None:
        if len(_LAYOUTS) > 4096:
            _LAYOUTS.clear()
        lay = _LAYOUTS[shape] = FactoredLayout([shape])
    return lay


