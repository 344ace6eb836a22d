"""The reduction order and the chunking that every backend shares.

A segmented loop (many tensors in one call, the Trainer's flat buffers) hands out chunks of
:data:`CHUNK` elements that lie inside one segment (:func:`chunk_table`). A float64 reduction
(LARS's norms, LAMB's direction pass) sums each chunk, then adds the chunk sums of a segment in
chunk order from 0.0 (:func:`sum_partials`); the direction pass splits a chunk of
:data:`DIRECTION_CHUNK` elements into :data:`DIRECTION_LANES` running sums added pairwise. The
CPU and the CUDA kernels read these numbers from here, so their sums are the same, bit for bit,
for a tensor alone or inside a Trainer's group.

This module imports only :mod:`toolkit.backends.jit` (the compile policy of
:func:`sum_partials`).
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types

from .jit import COMPILE_OPTIONS

__all__ = ["CHUNK", "chunk_table", "single_chunks", "sum_partials", "DIRECTION_CHUNK",
           "DIRECTION_LANES"]

#: Elements per chunk of a segmented loop: a chunk lies inside one segment, and the parallel loop
#: hands out chunks.
CHUNK = 1 << 14

#: Elements per chunk of the direction pass, and the running sums a chunk is split into. The
#: CUDA kernel reduces with the same numbers (one block of DIRECTION_LANES threads per chunk),
#: so the float64 sums are the same on both backends, bit for bit, and for a tensor alone or
#: inside a Trainer's group.
DIRECTION_CHUNK = 1 << 12
DIRECTION_LANES = 1 << 8


def chunk_table(offsets, chunk=CHUNK):
    """``(n_chunks, 3)`` int64 rows ``(start, end, segment)`` covering ``[offsets[s],
    offsets[s+1])`` for every segment ``s`` in pieces of at most ``chunk`` elements."""
    rows = []
    for s in range(len(offsets) - 1):
        a, b = int(offsets[s]), int(offsets[s + 1])
        for start in range(a, b, chunk):
            rows.append((start, min(start + chunk, b), s))
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def single_chunks(n, chunk=CHUNK):
    """The :func:`chunk_table` of one segment of ``n`` elements (vectorised)."""
    starts = np.arange(0, max(n, 1), chunk, dtype=np.int64)
    rows = np.empty((starts.shape[0], 3), np.int64)
    rows[:, 0] = starts
    rows[:, 1] = np.minimum(starts + chunk, n)
    rows[:, 2] = 0
    return rows


@numba.njit(types.void(types.int64[:, ::1], types.float64[:, ::1], types.float64[:, ::1]),
            **COMPILE_OPTIONS)
def sum_partials(chunks, partial, out):
    """``out[s] = sum of partial[c]`` over segment ``s``'s chunks, in chunk order."""
    out[:, :] = 0.0
    for c in range(chunks.shape[0]):
        s = chunks[c, 2]
        out[s, 0] += partial[c, 0]
        out[s, 1] += partial[c, 1]
