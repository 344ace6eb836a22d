"""The loop of the held kernels (:mod:`.cpu_lowbit`) over a table of steps: a Trainer group's
or a torch param group's tensors, each given by the addresses of its checked arrays, in one
parallel loop over chunks of :data:`CHUNK_BLOCKS` blocks, a chunk never crossing two tensors
(:func:`chunks`), so that a step waits for the threads once however many tensors it has.

A row of the address table holds a step's element count (column :data:`N`), its weight's and
gradient's addresses, then per slot its data's and its block maxima's (0: none); the kernel
views them as arrays with :func:`.addressed.pointer` and ``numba.carray``. The slot functions
(loads, stores, the block's decode and encode) are :mod:`.cpu_lowbit`'s, inlined here.
"""
from __future__ import annotations

import numpy as np
from numba import carray, prange
from numba.np.unsafe.ndarray import to_fixed_tuple

from .addressed import pointer
from .jit import inlined
from .lowbit import BLOCK

__all__ = ["held_loop", "chunks", "N", "CHUNK_BLOCKS"]

#: blocks per iteration of the parallel loop (each allocates its scratch buffers once)
CHUNK_BLOCKS = 64

_U64 = np.uint64


def _view(address, kind, n):
    """The 1-D C-contiguous array of ``n`` elements of type ``kind`` (a numpy scalar type) at
    ``address``, in compiled code (:func:`.addressed.pointer`); a global of the loops, not a
    closure variable (an intrinsic there would pickle a per-process id into the cache key)."""
    return carray(pointer(address, 0, kind), n)


_view = inlined(_view)

#: the columns of a held call's address table (:func:`.cpu_lowbit.run_held_many`): each
#: step's element count, its weight's and gradient's addresses, then per slot its data's and
#: its block maxima's (0: none)
N, _W, _G, _SLOT0 = 0, 1, 2, 3


def held_loop(rule, slots, n_hyper, types):
    """The loop over the chunks of a table of steps of a rule with ``len(slots)`` held slots
    (``prange`` is ``range`` when serial): chunk ``c`` is blocks ``chunks[c, 1]`` to
    ``chunks[c, 2]`` of step ``chunks[c, 0]``, whose arrays are at the addresses of row
    ``addrs[s]`` (``types``: the weight's and each slot's data type), its
    hyperparameters ``hyper[s]`` and its rounding key ``keys[s]``. Each chunk has its own
    scratch buffers. The inner loop runs over a block's slices from 0 (an index known
    non-negative: no wraparound select, so that it vectorises)."""
    n_state = len(slots)
    wz = types[0]
    if n_state == 1:
        (sc0, tg0, pr0, ld0, st0, fi0, en0), = slots
        z0 = types[1]

        def loop(addrs, hyper, keys, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 0]
                n = addrs[s, N]
                nb = (n + BLOCK - 1) // BLOCK
                w, g = _view(addrs[s, _W], wz, n), _view(addrs[s, _G], wz, n)
                d0 = _view(addrs[s, _SLOT0], z0, n)
                a0 = _view(addrs[s, _SLOT0 + 1], np.float32, nb * (addrs[s, _SLOT0 + 1] != 0))
                hp = to_fixed_tuple(hyper[s], n_hyper)
                key = keys[s]
                b0 = np.empty(BLOCK, np.float32)
                cs = np.empty(2 * BLOCK, np.uint32)
                for b in range(chunks[c, 1], chunks[c, 2]):
                    lo = b * BLOCK
                    hi = min(lo + BLOCK, n)
                    wb, gb, e0 = w[lo:hi], g[lo:hi], d0[lo:hi]
                    s0, o0 = sc0(a0, b), tg0(e0, b0)
                    pr0(e0, b0)
                    ctr = key + _U64(lo)
                    for j in range(hi - lo):
                        wb[j], y0 = rule(wb[j], gb[j], ld0(o0[j], s0), hp)
                        o0[j] = st0(y0, ctr + _U64(j))
                    en0(e0, b0, fi0(a0, b, b0, hi - lo), cs)
    elif n_state == 2:
        (sc0, tg0, pr0, ld0, st0, fi0, en0), (sc1, tg1, pr1, ld1, st1, fi1, en1) = slots
        z0, z1 = types[1:]

        def loop(addrs, hyper, keys, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 0]
                n = addrs[s, N]
                nb = (n + BLOCK - 1) // BLOCK
                w, g = _view(addrs[s, _W], wz, n), _view(addrs[s, _G], wz, n)
                d0 = _view(addrs[s, _SLOT0], z0, n)
                a0 = _view(addrs[s, _SLOT0 + 1], np.float32, nb * (addrs[s, _SLOT0 + 1] != 0))
                d1 = _view(addrs[s, _SLOT0 + 2], z1, n)
                a1 = _view(addrs[s, _SLOT0 + 3], np.float32, nb * (addrs[s, _SLOT0 + 3] != 0))
                hp = to_fixed_tuple(hyper[s], n_hyper)
                key = keys[s]
                b0 = np.empty(BLOCK, np.float32)
                cs = np.empty(2 * BLOCK, np.uint32)
                b1 = np.empty(BLOCK, np.float32)
                for b in range(chunks[c, 1], chunks[c, 2]):
                    lo = b * BLOCK
                    hi = min(lo + BLOCK, n)
                    wb, gb, e0, e1 = w[lo:hi], g[lo:hi], d0[lo:hi], d1[lo:hi]
                    s0, s1 = sc0(a0, b), sc1(a1, b)
                    o0, o1 = tg0(e0, b0), tg1(e1, b1)
                    pr0(e0, b0)
                    pr1(e1, b1)
                    ctr = key + _U64(lo)
                    for j in range(hi - lo):
                        wb[j], y0, y1 = rule(wb[j], gb[j], ld0(o0[j], s0), ld1(o1[j], s1), hp)
                        o0[j] = st0(y0, ctr + _U64(j))
                        o1[j] = st1(y1, ctr + _U64(j))
                    en0(e0, b0, fi0(a0, b, b0, hi - lo), cs)
                    en1(e1, b1, fi1(a1, b, b1, hi - lo), cs)
    elif n_state == 3:
        ((sc0, tg0, pr0, ld0, st0, fi0, en0), (sc1, tg1, pr1, ld1, st1, fi1, en1),
         (sc2, tg2, pr2, ld2, st2, fi2, en2)) = slots
        z0, z1, z2 = types[1:]

        def loop(addrs, hyper, keys, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 0]
                n = addrs[s, N]
                nb = (n + BLOCK - 1) // BLOCK
                w, g = _view(addrs[s, _W], wz, n), _view(addrs[s, _G], wz, n)
                d0 = _view(addrs[s, _SLOT0], z0, n)
                a0 = _view(addrs[s, _SLOT0 + 1], np.float32, nb * (addrs[s, _SLOT0 + 1] != 0))
                d1 = _view(addrs[s, _SLOT0 + 2], z1, n)
                a1 = _view(addrs[s, _SLOT0 + 3], np.float32, nb * (addrs[s, _SLOT0 + 3] != 0))
                d2 = _view(addrs[s, _SLOT0 + 4], z2, n)
                a2 = _view(addrs[s, _SLOT0 + 5], np.float32, nb * (addrs[s, _SLOT0 + 5] != 0))
                hp = to_fixed_tuple(hyper[s], n_hyper)
                key = keys[s]
                b0 = np.empty(BLOCK, np.float32)
                cs = np.empty(2 * BLOCK, np.uint32)
                b1 = np.empty(BLOCK, np.float32)
                b2 = np.empty(BLOCK, np.float32)
                for b in range(chunks[c, 1], chunks[c, 2]):
                    lo = b * BLOCK
                    hi = min(lo + BLOCK, n)
                    wb, gb = w[lo:hi], g[lo:hi]
                    e0, e1, e2 = d0[lo:hi], d1[lo:hi], d2[lo:hi]
                    s0, s1, s2 = sc0(a0, b), sc1(a1, b), sc2(a2, b)
                    o0, o1, o2 = tg0(e0, b0), tg1(e1, b1), tg2(e2, b2)
                    pr0(e0, b0)
                    pr1(e1, b1)
                    pr2(e2, b2)
                    ctr = key + _U64(lo)
                    for j in range(hi - lo):
                        wb[j], y0, y1, y2 = rule(wb[j], gb[j], ld0(o0[j], s0), ld1(o1[j], s1),
                                                 ld2(o2[j], s2), hp)
                        o0[j] = st0(y0, ctr + _U64(j))
                        o1[j] = st1(y1, ctr + _U64(j))
                        o2[j] = st2(y2, ctr + _U64(j))
                    en0(e0, b0, fi0(a0, b, b0, hi - lo), cs)
                    en1(e1, b1, fi1(a1, b, b1, hi - lo), cs)
                    en2(e2, b2, fi2(a2, b, b2, hi - lo), cs)
    else:
        raise ValueError(f"a held step takes rules with 1 to 3 state slots, not {n_state}")
    return loop


def chunks(n):
    """The chunk table of steps of ``n`` elements (an int64 array): ``(step, first block,
    end block)`` rows of at most :data:`CHUNK_BLOCKS` blocks, each within its step."""
    blocks = (n + BLOCK - 1) // BLOCK
    if n.shape[0] == 1:  # one step: its chunks in turn
        first = np.arange(0, int(blocks[0]), CHUNK_BLOCKS, dtype=np.int64)
        return np.stack([np.zeros_like(first), first, np.minimum(first + CHUNK_BLOCKS,
                                                                 blocks[0])], axis=1)
    per_step = (blocks + CHUNK_BLOCKS - 1) // CHUNK_BLOCKS
    step = np.repeat(np.arange(n.shape[0], dtype=np.int64), per_step)
    first = (np.arange(step.shape[0]) - np.repeat(np.cumsum(per_step) - per_step, per_step)) \
        * CHUNK_BLOCKS
    return np.stack([step, first, np.minimum(first + CHUNK_BLOCKS, blocks[step])], axis=1)
