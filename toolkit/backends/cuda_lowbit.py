"""The CUDA kernel of an element-wise rule whose state slots are held in low precision
(:mod:`.lowbit`), with the contract of :func:`.cpu_lowbit.run_held` on CUDA arrays
(:func:`run_held`): each slot a plain array of the weight's dtype, a float32 array (of a
float64 weight), a bfloat16 slot as a ``uint16`` device array (its bits) or a
:class:`~.lowbit.Quantized` of device arrays (uint8 codes, float32 block maxima; the map
:data:`~.lowbit.SIGNED` or :data:`~.lowbit.UNSIGNED` itself), in any mix.

One pass over memory, one CUDA thread block of :data:`~.lowbit.BLOCK` threads per block of
:data:`~.lowbit.BLOCK` elements (a block-stride loop when the grid is capped): each thread
loads its element's slots (a code as ``qmap[code] * absmax`` in float32, the maps in shared
memory; a bfloat16 widened; both exact, then converted to the weight's dtype), runs the rule
(:func:`.cuda_elementwise.device_rule`, the same per-element rule every backend compiles),
writes the weight, a plain slot and a bfloat16 slot (rounded to float32, then to bfloat16: to
nearest, or stochastically with the bits of :func:`.lowbit.rounding_bits`), and keeps an
8-bit slot's new float32 value in a register. A shared-memory tree reduction of the float32
bits of ``|value|`` finds the block maximum (a NaN's bits lie above every number's, so a NaN
anywhere makes it NaN); each thread then encodes its value by a binary search over the 255
float32 midpoints in shared memory (8 steps: ``code = #{k : mid_k < s}``, a tie going to the
lower code, 255 for a NaN) and thread 0 writes the block maximum: :func:`.lowbit.quantize`'s
codes and maxima of the new values rounded to float32, exactly.

Plain ``@cuda.jit`` only (shared arrays, ``syncthreads``, scalar ``view``). This module imports
numba-cuda; :class:`toolkit.backends.cuda.Launcher` dispatches held states to it.
"""
from __future__ import annotations

import numpy as np
from numba import cuda, types

from . import arrays
from .bfloat16 import bfloat16_to_single, single_to_bfloat16
from .cuda_device import COMPILE_OPTIONS, NUMBA_TYPES, SIMULATOR, block_cap, flat, launch
from .cuda_elementwise import device_rule
from .jit import KernelCache
from .lowbit import BLOCK, SIGNED, UNSIGNED, Quantized, blocks_of, map_kind, midpoints, mix

__all__ = ["run_held", "held_kernel", "device_kind", "code_tables"]

_F32, _U8, _U32, _U64 = np.float32, np.uint8, np.uint32, np.uint64
_ABS, _INF_BITS, _NAN_BITS = _U32(0x7FFFFFFF), _U32(0x7F800000), _U32(0x7FC00000)
_TINY, _ONE, _MINUS_ONE = _F32(1e-38), _F32(1), _F32(-1)
_HALF16, _ALL16 = _U32(16), _U32(0xFFFF)
#: the rows of the code tables (:func:`code_tables`): each map, then its midpoints
_MAP_ROW = {"signed": 0, "unsigned": 1}
_MID_ROW = {"signed": 2, "unsigned": 3}
_QUANTIZED = ("signed", "unsigned")

_KERNELS = KernelCache()  # the held kernels of this process
_tables: dict = {}
_spare: dict = {}
_helpers: list = []


def code_tables():
    """The float32 ``(4, BLOCK)`` device array the kernels copy into shared memory: the signed
    map, the unsigned map, then each map's 255 midpoints (:func:`.lowbit.midpoints`, the last
    column unused: the search never reads it), uploaded once per device."""
    dev = 0 if SIMULATOR else cuda.get_current_device().id
    t = _tables.get(dev)
    if t is None:
        host = np.full((4, BLOCK), np.inf, np.float32)
        host[0], host[1] = SIGNED, UNSIGNED
        host[2, :BLOCK - 1], host[3, :BLOCK - 1] = midpoints(SIGNED), midpoints(UNSIGNED)
        t = _tables[dev] = cuda.to_device(host)
    return t


def _unused_slot():
    """The ``(data, absmax)`` arguments of a slot a rule does not have (never read)."""
    dev = 0 if SIMULATOR else cuda.get_current_device().id
    pair = _spare.get(dev)
    if pair is None:
        pair = _spare[dev] = (cuda.to_device(np.zeros(1, np.uint8)),
                              cuda.to_device(np.zeros(1, np.float32)))
    return pair


# --------------------------------------------------------------------------------------------
# the kernel
# --------------------------------------------------------------------------------------------
def _stochastic_source(v, bits):
    """float32 ``v`` rounded to bfloat16 with the 16 random ``bits`` (uint32) added to its
    bits, then truncated (:func:`.lowbit.bfloat16_stochastic`); a NaN is ``0xFFFF``."""
    u = _F32(v).view(_U32)
    if (u & _ABS) > _INF_BITS:
        return np.uint16(_ALL16)
    return np.uint16((u + bits) >> _HALF16)


def _search_source(tab, row, s):
    """``#{k : tab[row, k] < s}`` over the 255 sorted midpoints of row ``row`` (``s`` not a
    NaN): a branch-light binary search, 8 steps, never reading column 255."""
    c = 0
    step = BLOCK // 2
    while step > 0:
        if tab[row, c + step - 1] < s:
            c += step
        step //= 2
    return c


def _slot_source(kind, f, slot, stochastic, to_single, to_bf16, to_bf16_random, mixer, search):
    """``(load, keep, mag, encode)`` of one slot of ``kind`` ("none": a slot the rule does not
    have), plain Python for ``cuda.jit(device=True)``: ``load(d, a, tab, i, b)`` the value in
    ``f`` of element ``i`` (block ``b``), ``keep(d, i, y, ctr)`` stores a new value that needs
    no block (``ctr``: the element's counter in the random stream), ``mag(y, valid)`` the
    float32 bits of an 8-bit slot's ``|y|`` (0 otherwise), ``encode(d, a, tab, i, b, y, top,
    valid, tid)`` writes an 8-bit slot's code and, from thread 0, its block maximum ``top``
    (float32 bits, NaN above every number)."""
    zero = f(0)
    shift = _U64(16 * slot)

    def load_nothing(d, a, tab, i, b):
        return zero

    def keep_nothing(d, i, y, ctr):
        return

    def no_mag(y, valid):
        return _U32(0)

    def no_encode(d, a, tab, i, b, y, top, valid, tid):
        return

    if kind == "none":
        return load_nothing, keep_nothing, no_mag, no_encode
    if kind in ("plain", "single"):
        def load(d, a, tab, i, b):
            return f(d[i])

        def keep(d, i, y, ctr):
            d[i] = y
        return load, keep, no_mag, no_encode
    if kind == "bfloat16":
        def load(d, a, tab, i, b):
            return f(to_single(d[i]))

        if stochastic:
            def keep(d, i, y, ctr):
                d[i] = to_bf16_random(_F32(y), _U32((mixer(ctr) >> shift) & _U64(0xFFFF)))
        else:
            def keep(d, i, y, ctr):
                d[i] = to_bf16(_F32(y))
        return load, keep, no_mag, no_encode
    map_row, mid_row = _MAP_ROW[kind], _MID_ROW[kind]

    def load(d, a, tab, i, b):
        return f(tab[map_row, d[i]] * a[b])

    def mag(y, valid):
        if valid:
            return _F32(y).view(_U32) & _ABS
        return _U32(0)

    def encode(d, a, tab, i, b, y, top, valid, tid):
        amax_bits = _NAN_BITS if top > _INF_BITS else top
        amax = _U32(amax_bits).view(_F32)
        if tid == 0:
            a[b] = amax
        if valid:
            r = _ONE / (_TINY if amax < _TINY else amax)   # a NaN maximum stays NaN
            s = _F32(y) * r
            if s != s:
                d[i] = _U8(255)
            else:
                d[i] = _U8(search(tab, mid_row, min(max(s, _MINUS_ONE), _ONE)))
    return load, keep_nothing, mag, encode


def _step_source(rule, n_state, f):
    """The rule called with its ``n_state`` slots, returning three (the missing ones 0)."""
    zero = f(0)
    if n_state == 1:
        def step(w, g, x0, x1, x2, hp):
            wi, y0 = rule(w, g, x0, hp)
            return wi, y0, zero, zero
    elif n_state == 2:
        def step(w, g, x0, x1, x2, hp):
            wi, y0, y1 = rule(w, g, x0, x1, hp)
            return wi, y0, y1, zero
    else:
        def step(w, g, x0, x1, x2, hp):
            return rule(w, g, x0, x1, x2, hp)
    return step


def _kernel_source(step, slots, f, quantized):
    """The kernel over slots ``slots`` (three ``(load, keep, mag, encode)``); ``quantized``:
    whether any is 8-bit (else no shared memory and no barriers)."""
    (ld0, kp0, mg0, en0), (ld1, kp1, mg1, en1), (ld2, kp2, mg2, en2) = slots
    zero = f(0)

    def kernel(w, g, d0, a0, d1, a1, d2, a2, hp, key, tables):
        tab = cuda.shared.array((4, BLOCK), types.float32)
        red = cuda.shared.array((3, BLOCK), types.uint32)
        tid = cuda.threadIdx.x
        if quantized:
            for r in range(4):
                tab[r, tid] = tables[r, tid]
            cuda.syncthreads()
        n = w.shape[0]
        nb = (n + BLOCK - 1) // BLOCK
        b = cuda.blockIdx.x
        while b < nb:
            i = b * BLOCK + tid
            valid = i < n
            y0 = y1 = y2 = zero
            if valid:
                wi, y0, y1, y2 = step(f(w[i]), f(g[i]), ld0(d0, a0, tab, i, b),
                                      ld1(d1, a1, tab, i, b), ld2(d2, a2, tab, i, b), hp)
                w[i] = wi
                ctr = key + _U64(i)
                kp0(d0, i, y0, ctr)
                kp1(d1, i, y1, ctr)
                kp2(d2, i, y2, ctr)
            if quantized:
                red[0, tid] = mg0(y0, valid)
                red[1, tid] = mg1(y1, valid)
                red[2, tid] = mg2(y2, valid)
                cuda.syncthreads()
                half = BLOCK // 2
                while half > 0:
                    if tid < half:
                        red[0, tid] = max(red[0, tid], red[0, tid + half])
                        red[1, tid] = max(red[1, tid], red[1, tid + half])
                        red[2, tid] = max(red[2, tid], red[2, tid + half])
                    cuda.syncthreads()
                    half //= 2
                en0(d0, a0, tab, i, b, y0, red[0, 0], valid, tid)
                en1(d1, a1, tab, i, b, y1, red[1, 0], valid, tid)
                en2(d2, a2, tab, i, b, y2, red[2, 0], valid, tid)
                cuda.syncthreads()   # the maxima are read before the next block's overwrite
            b += cuda.gridDim.x
    return kernel


_DATA_TYPES = {"single": types.float32, "bfloat16": types.uint16, "signed": types.uint8,
               "unsigned": types.uint8, "none": types.uint8}


def held_kernel(factory, kinds, n_hyper, dtype, stochastic=False):
    """The compiled kernel of ``factory``'s rule for ``dtype`` with slots of ``kinds`` (1 to
    3 of "plain", "single", "bfloat16", "signed", "unsigned"; cached per process):
    ``kernel[blocks, BLOCK](w, g, d0, a0, d1, a1, d2, a2, hp, key, tables)``."""
    dtype, kinds = np.dtype(dtype), tuple(kinds)
    key = ("held", factory, kinds, n_hyper, dtype, bool(stochastic))
    kernel = _KERNELS.get(key)
    if kernel is not None:
        return kernel

    def build():  # under the cache's lock, which also guards _helpers
        dev = cuda.jit(device=True)
        f = dtype.type
        if not _helpers:
            _helpers.extend(dev(fn) for fn in (bfloat16_to_single, single_to_bfloat16,
                                               _stochastic_source, mix, _search_source))
        padded = kinds + ("none",) * (3 - len(kinds))
        slots = [tuple(dev(fn) for fn in _slot_source(k, f, j, stochastic, *_helpers))
                 for j, k in enumerate(padded)]
        step = dev(_step_source(device_rule(factory, dtype), len(kinds), f))
        src = _kernel_source(step, slots, f, any(k in _QUANTIZED for k in kinds))
        nb = NUMBA_TYPES[dtype]
        args = []
        for k in padded:
            args += [_DATA_TYPES.get(k, nb)[::1], types.float32[::1]]
        sig = types.void(nb[::1], nb[::1], *args, types.UniTuple(nb, n_hyper),
                         types.uint64, types.float32[:, ::1])
        return cuda.jit(sig, **COMPILE_OPTIONS)(src)
    return _KERNELS.cached(key, build)


# --------------------------------------------------------------------------------------------
# the host side: checks, then one launch
# --------------------------------------------------------------------------------------------
def device_kind(slot, dtype):
    """The kind of a state slot on CUDA for a weight of ``dtype``: "plain", "single" (a
    float32 slot of a float64 weight), "bfloat16" (uint16 bits), "signed" or "unsigned"
    (8-bit, by the identity of its map); a ValueError for anything else."""
    if type(slot) is Quantized:
        return map_kind(slot)
    d = arrays.describe(slot, "state slot") if arrays.is_device_array(slot) else None
    if d is not None:
        if d.dtype == dtype:
            return "plain"
        if d.dtype == np.uint16:
            return "bfloat16"
        if d.dtype == np.float32 and dtype == np.float64:
            return "single"
    raise ValueError(f"a state slot on CUDA must be a CUDA array of the weight's dtype "
                     f"({np.dtype(dtype)}), a uint16 one (bfloat16 bits) or a Quantized of "
                     f"CUDA arrays; got {type(slot).__name__}"
                     + ("" if d is None else f" of {d.dtype}"))


def _flat_desc(a, n, dtype, w, what):
    """``a`` described, refused unless a writeable C-contiguous CUDA array of ``dtype`` with
    ``n`` elements on the weight's device."""
    if not arrays.is_device_array(a):
        raise ValueError(f"{what} must be a CUDA array, got {type(a).__name__}")
    d = arrays.describe(a, what)
    arrays.check_same_kind(what, d, w)
    if d.dtype != dtype or d.size != n or not d.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous {np.dtype(dtype)} with {n} elements, "
                         f"got {d.dtype} of shape {d.shape}")
    if d.readonly:
        raise ValueError(f"{what} must be writeable")
    return d


def _arguments(weight, grad, states, key):
    """The kinds and descriptions ``[(data, absmax or None)]`` of a held step, every check
    made first (nothing written yet)."""
    if not arrays.is_device_array(weight):
        raise ValueError(f"weight must be a CUDA array, got {type(weight).__name__}")
    w = arrays.describe(weight, "weight")
    if w.dtype not in (np.float32, np.float64) or len(w.shape) != 1 or not w.c_contiguous \
            or w.readonly:
        raise ValueError("weight must be a 1-D, C-contiguous, writeable float32 or float64 "
                         "CUDA array")
    n, dtype = w.size, w.dtype
    if not arrays.is_device_array(grad):
        raise ValueError(f"grad must be a CUDA array, got {type(grad).__name__}")
    g = arrays.describe(grad, "grad")
    arrays.check_same_kind("grad", g, w)
    if g.dtype != dtype or g.shape != (n,) or not g.c_contiguous:
        raise ValueError(f"grad must be a 1-D C-contiguous {dtype} CUDA array of {n} elements")
    if not isinstance(states, (tuple, list)) or not 1 <= len(states) <= 3:
        raise ValueError("states must be a tuple of 1 to 3 state slots")
    if key is not None and (int(key) != key or not 0 <= key < 2 ** 64):
        raise ValueError(f"key must be None or an integer in [0, 2**64), got {key!r}")
    kinds, slots, written = [], [], [("weight", w)]
    for j, slot in enumerate(states):
        kind = device_kind(slot, dtype)
        kinds.append(kind)
        if kind in _QUANTIZED:
            data = _flat_desc(slot.codes, n, np.uint8, w, f"states[{j}].codes")
            scales = _flat_desc(slot.absmax, blocks_of(n), np.float32, w, f"states[{j}].absmax")
            written += [(f"states[{j}].codes", data), (f"states[{j}].absmax", scales)]
        else:
            store = {"plain": dtype, "single": np.float32, "bfloat16": np.uint16}[kind]
            data, scales = _flat_desc(slot, n, store, w, f"states[{j}]"), None
            written.append((f"states[{j}]", data))
        slots.append((data, scales))
    try:
        arrays.check_disjoint(written)
    except ValueError:
        raise ValueError("the weight and the state slots must not share memory") from None
    return tuple(kinds), w, g, slots


def run_held(factory, weight, grad, states, hyper, key=None, stream=0):
    """Run ``factory``'s rule in place over a 1-D C-contiguous float32/float64 CUDA ``weight``
    and ``grad`` with ``states`` (a tuple of 1 to 3 slots, each a CUDA array of the weight's
    dtype, a float32 one of a float64 weight, a uint16 one holding bfloat16 bits or a
    :class:`~.lowbit.Quantized` of CUDA arrays, in the rule's order), one launch on
    ``stream``, not waited for: :func:`.cpu_lowbit.run_held`'s contract on CUDA. ``hyper``:
    Python floats, rounded to the weight's dtype; ``key``: None rounds bfloat16 slots to
    nearest, an integer rounds them stochastically with :func:`.lowbit.rounding_bits` of slot
    ``j`` for ``states[j]``. Refuses (ValueError, writing nothing) a slot of another kind,
    dtype, size, layout or device, a read-only or overlapping one, or a map that is not
    SIGNED or UNSIGNED."""
    kinds, w, g, slots = _arguments(weight, grad, states, key)
    if w.size == 0:
        return
    dtype = w.dtype
    hp = tuple(dtype.type(h) for h in hyper)
    stochastic = key is not None and "bfloat16" in kinds
    kernel = held_kernel(factory, kinds, len(hp), dtype, stochastic)
    spare = _unused_slot()
    args = [flat(w), flat(g)]
    for data, scales in slots:
        args += [flat(data), spare[1] if scales is None else flat(scales)]
    args += list(spare) * (3 - len(slots))
    nb = blocks_of(w.size)
    blocks = min(nb, 2) if SIMULATOR else min(nb, block_cap())
    launch(kernel, blocks, BLOCK, stream, *args, hp, _U64(0 if key is None else int(key)),
           code_tables())
