"""The CPU kernels of an element-wise rule whose state slots are held in low precision
(:mod:`.lowbit`): each slot a plain array of the weight's dtype, a float32 array (of a float64
weight), a bfloat16 array or a :class:`~.lowbit.Quantized` 8-bit slot, in any mix
(:func:`run_held`).

One pass over memory, block by block (:data:`~.lowbit.BLOCK` elements): load each slot (a code
as ``qmap[code] * absmax`` in float32, a bfloat16 widened; both exact, then converted to the
weight's dtype), run the rule element by element, write the weight, a plain slot and a
bfloat16 slot (rounded to float32, then to bfloat16: to nearest, or stochastically with a
``key``) at once, and keep an 8-bit slot's new float32 values in a small buffer with their
largest magnitude; then quantize the buffer (the packed table encoder of
:func:`.lowbit.packed`) and write the block's codes and scale. An 8-bit slot's block is
decoded into its buffer first, and its table lookups (decode and encode) are scalar loads in
loops of their own (:func:`_lookup`): vectorised, they were hardware gathers, slower here.
The same codes and scales as :func:`.lowbit.quantize` of the new values rounded to float32,
always. :func:`run_held_many` runs many tensors' steps in one call (the loop of
:mod:`.cpu_held_loop` over a table of their addresses), every array checked first.
"""
from __future__ import annotations

import bisect

import numpy as np
from numba import prange, types
from numba.extending import intrinsic, overload

from . import jit
from .bfloat16 import bfloat16_to_single
from .cpu_held_loop import CHUNK_BLOCKS, N, chunks, held_loop
from .jit import KERNELS, NUMBA_TYPES, by_value, cached, compile_kernel, inlined
from .lowbit import BFLOAT16, BLOCK, LOW_BITS, ONE_BITS, SIGNED, UNSIGNED, Quantized, \
    NAN_CELL, PACKED_CELLS, blocks_of, map_kind, packed

__all__ = ["run_held", "run_held_many", "prepare_held_many", "HeldCall", "held_kernel",
           "slot_kind", "encode_kernel", "CHUNK_BLOCKS"]


_F32, _U32, _U64 = np.float32, np.uint32, np.uint64
_ABS, _NAN_BITS = _U32(0x7FFFFFFF), _U32(0x7FC00000)
_INF_BITS = _U32(0x7F800000)
_LOW, _ONE_MAG = _U32(LOW_BITS), _U32(ONE_BITS)
_TINY = _F32(1e-38)
_GAMMA = _U64(0x9E3779B97F4A7C15)
_C1, _C2 = _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)
_S30, _S27, _S31 = _U64(30), _U64(27), _U64(31)


def _mix(x):
    """SplitMix64's finaliser (wrapping uint64), the counter-based generator of the noise."""
    x = x + _GAMMA
    x = (x ^ (x >> _S30)) * _C1
    x = (x ^ (x >> _S27)) * _C2
    return x ^ (x >> _S31)


def _lookup(table, index):
    """``table[index]`` (a 1-D contiguous array, a non-negative integer index, unchecked) as a
    scalar load: compiled, an atomic "monotonic" load (:func:`_scalar_load`), a plain ``mov``
    on x86-64 that LLVM's loop vectoriser leaves alone. A vectorised table lookup is a
    hardware gather, which on this CPU (AMD Zen 5) costs 0.57 ns an element against 0.22 for
    scalar loads (the decode and the encoder's lookup, benchmarks/results/README.md). A plain
    function with an overload, as :func:`.jit.fma`: a kernel's closure reaches it by name,
    where an intrinsic would pickle a per-process id into the on-disk cache key."""
    return table[index]


@intrinsic
def _scalar_load(typingctx, table, index):
    if not (isinstance(table, types.Array) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = builder.gep(ary.data, [i])
        return builder.load_atomic(ptr, "monotonic", table.dtype.bitwidth // 8)
    return table.dtype(table, index), codegen


@overload(_lookup, jit_options={}, inline="always")
def _lookup_overload(table, index):
    if isinstance(table, types.Array) and isinstance(index, types.Integer):
        return lambda table, index: _scalar_load(table, index)


def _narrow(v):
    """float32 ``v`` rounded to the nearest bfloat16 (ties to even), its bits; a NaN is
    ``0xFFFF``: :func:`.bfloat16.single_to_bfloat16`'s result, with the NaN case or-ed in
    instead of selected (a select there kept the held loop from vectorising)."""
    f = _F32(v).view(_U32)
    rounded = (f + _U32(0x7FFF) + ((f >> _U32(16)) & _U32(1))) >> _U32(16)
    nan = _U32((f & _ABS) > _INF_BITS)
    return np.uint16(rounded | (nan * _U32(0xFFFF)))


def slot_kind(slot, dtype):
    """The kind of a state slot for a weight of ``dtype``: "plain", "bfloat16", "single" (a
    float32 slot of a float64 weight), "signed" or "unsigned" (8-bit, by the identity of its
    map); a ValueError for anything else."""
    if isinstance(slot, Quantized):
        return map_kind(slot)
    if type(slot) is np.ndarray:
        if slot.dtype == dtype:
            return "plain"
        if slot.dtype == BFLOAT16:
            return "bfloat16"
        if slot.dtype == np.float32 and dtype == np.float64:
            return "single"
    raise ValueError(f"a state slot must be a numpy array of the weight's dtype ({dtype}), of "
                     f"bfloat16, or a Quantized; got {type(slot).__name__}"
                     + (f" of {slot.dtype}" if isinstance(slot, np.ndarray) else ""))


def _block_encoder(qmap):
    """``encode(codes, buf, r, cells)``: ``codes[j]`` = the code of ``buf[j] * r`` clipped to
    [-1, 1], for ``j < codes.shape[0]``, by :func:`.lowbit.packed`'s table (exact: see
    there); a NaN gives 255 (its own cell). Three passes over the block (``cells``: uint32
    scratch of ``2 * BLOCK``): each element's cell and compare value packed in one word
    (vectorised), the table lookups (scalar loads, :func:`_lookup`), the compares and codes
    (vectorised). In one loop LLVM made the lookup a hardware gather (0.57 ns an element
    against 0.22 for scalar loads); a scalar pass that also compared took 0.67 ns in all."""
    table = packed(qmap)
    n_cells, low_high, nan_cell = _U32(PACKED_CELLS), _U32(LOW_BITS >> 16), _U32(NAN_CELL)
    s13, s16, s31, half, mask = _U32(13), _U32(16), _U32(31), _U32(0xFFFF), _U32(0x1FFF)

    def encode(codes, buf, r, cells):
        m = codes.shape[0]
        for j in range(m):
            s = buf[j] * r
            u = _F32(s).view(_U32)
            mag = min(max(u & _ABS, _LOW), _ONE_MAG)
            cell = (mag >> s16) - low_high + (u >> s31) * n_cells
            x = (mag & half) ^ (half * (u >> s31))
            cells[j] = (x << s13) | (nan_cell if s != s else cell)
        for j in range(m):
            cells[j + BLOCK] = _lookup(table, cells[j] & mask)
        for j in range(m):
            e = cells[j + BLOCK]
            codes[j] = np.uint8((e >> s16) + ((cells[j] >> s13) > (e & half)))
    return encode


def _slot_functions(kind, ftype, index, stochastic):
    """``(scale, target, prepare, load, store, finish, encode)`` of one slot (plain Python,
    inlined in the loop), over its slice ``data`` of one block: ``scale(absmax, b)`` the
    block's scale, ``target(data, buf)`` the array the element loop stores into (an 8-bit
    slot's float32 buffer, else the slot), ``prepare(data, buf)`` decodes an 8-bit slot's
    block into its buffer, ``load(x, sc)`` the value in ``ftype`` of the target's ``x``,
    ``store(y, c)`` what to store of the new value ``y`` (``c``: the element's counter in the
    random stream), ``finish(absmax, b, buf, n)`` writes an 8-bit slot's block maximum of
    its ``n`` values and returns the reciprocal scale ``r``, ``encode(data, buf, r, cells)``
    its codes (:func:`_block_encoder`; ``cells``: uint32 scratch). Each is inlined in the loop
    itself: an inlined function calling another inlined one is typed again at every level
    (the encoder inside ``finish`` made an int8 kernel's compile 4.5 s of CPU, flat 3.0 s).
    The element loop passes these functions scalars only: an array argument of an inlined
    function there costs a reference count update per element (a call, which keeps the loop
    from vectorising)."""
    def no_scale(absmax, b):
        return _F32(0)

    def no_finish(absmax, b, buf, n):
        return _F32(0)

    def no_encode(data, buf, r, cells):
        return

    def no_prepare(data, buf):
        return

    def the_slot(data, buf):
        return data

    if kind == "plain":
        def load(x, sc):
            return x

        def store(y, c):
            return y
        return no_scale, the_slot, no_prepare, load, store, no_finish, no_encode
    if kind == "single":  # widened exactly on load, rounded to float32 on store
        def load(x, sc):
            return ftype(x)

        def store(y, c):
            return _F32(y)
        return no_scale, the_slot, no_prepare, load, store, no_finish, no_encode
    if kind == "bfloat16":
        widen = inlined(by_value(bfloat16_to_single))
        narrow = inlined(by_value(_narrow))
        mix = inlined(by_value(_mix))
        shift = _U64(16 * index)

        def load(x, sc):
            return ftype(widen(x))

        if stochastic:
            def store(y, c):
                u = _F32(y).view(_U32)
                r = _U32((mix(c) >> shift) & _U64(0xFFFF))
                nan = _U32((u & _ABS) > _INF_BITS)   # or-ed in: a select kept it scalar
                return np.uint16(((u + r) >> _U32(16)) | (nan * _U32(0xFFFF)))
        else:
            def store(y, c):
                return narrow(_F32(y))
        return no_scale, the_slot, no_prepare, load, store, no_finish, no_encode
    qmap = SIGNED if kind == "signed" else UNSIGNED
    def scale(absmax, b):
        return absmax[b]

    def the_buffer(data, buf):
        return buf

    def prepare(data, buf):   # scalar loads (a gather in the element loop costs more)
        for j in range(data.shape[0]):
            buf[j] = _lookup(qmap, data[j])

    def load(x, sc):
        return ftype(x * sc)

    def store(y, c):
        return _F32(y)

    def finish(absmax, b, buf, n):
        m = _U32(0)   # the largest magnitude's bits (a NaN's above every number's)
        for j in range(n):
            m = max(m, _F32(buf[j]).view(_U32) & _ABS)
        amax = _U32(_NAN_BITS if m > _INF_BITS else m).view(_F32)
        absmax[b] = amax
        return _F32(1) / (_TINY if amax < _TINY else amax)   # a NaN maximum stays NaN
    return scale, the_buffer, prepare, load, store, finish, _block_encoder(qmap)


#: the element type of a slot's data, by kind ("plain": the weight's)
_DATA_TYPES = {"bfloat16": np.uint16, "single": np.float32, "signed": np.uint8,
               "unsigned": np.uint8}


def held_kernel(factory, kinds, n_hyper, dtype, parallel, stochastic=False):
    """The compiled loop of ``factory``'s rule for ``dtype`` with slots of ``kinds`` (cached
    per process): ``loop(addrs, hyper, keys, chunks)`` over a table of steps
    (:func:`run_held_many`)."""
    dtype = np.dtype(dtype)
    kinds = tuple(kinds)
    key = ("held", factory, kinds, n_hyper, dtype, bool(parallel), bool(stochastic))

    def build():
        nb = NUMBA_TYPES[dtype]
        rule = inlined(factory(dtype.type))
        slots = [tuple(inlined(f) for f in _slot_functions(k, dtype.type, j, stochastic))
                 for j, k in enumerate(kinds)]
        element_types = (dtype.type, *(_DATA_TYPES.get(k, dtype.type) for k in kinds))
        sig = types.void(types.int64[:, ::1], nb[:, ::1], types.uint64[::1],
                         types.int64[:, ::1])
        return compile_kernel(sig, parallel)(held_loop(rule, slots, n_hyper, element_types))
    return cached(key, build)


def _flat(a, n, what):
    """``a`` as a 1-D view of ``n`` elements, refused unless C-contiguous and writeable."""
    if a.size != n or not a.flags.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous with {n} elements (the weight's), got "
                         f"shape {a.shape}" + ("" if a.flags.c_contiguous else ", strided"))
    if not a.flags.writeable:
        raise ValueError(f"{what} must be writeable")
    return a.reshape(-1)


def _arguments(weight, grad, states, key):
    """The kernel's arrays of a held step, every check made first (nothing written yet):
    ``(kinds, arrays)``: ``arrays`` the weight, the gradient, then the slots' data and block
    maxima in turn (None: a slot without maxima)."""
    if type(weight) is not np.ndarray or weight.dtype not in jit.DTYPES:
        raise ValueError("weight must be a numpy array of float32 or float64")
    if weight.ndim != 1 or not weight.flags.c_contiguous or not weight.flags.writeable:
        raise ValueError("weight must be 1-D, C-contiguous and writeable")
    n, dtype = weight.shape[0], weight.dtype
    if (type(grad) is not np.ndarray or grad.dtype != dtype or grad.shape != (n,)
            or not grad.flags.c_contiguous):
        raise ValueError(f"grad must be a 1-D C-contiguous {dtype} array of {n} elements")
    if not isinstance(states, (tuple, list)) or not 1 <= len(states) <= 3:
        raise ValueError("states must be a tuple of 1 to 3 state slots")
    if key is not None and (int(key) != key or not 0 <= key < 2 ** 64):
        raise ValueError(f"key must be None or an integer in [0, 2**64), got {key!r}")
    kinds, arrays = [], [weight, grad]
    for j, slot in enumerate(states):
        kind = slot_kind(slot, dtype)
        kinds.append(kind)
        if isinstance(slot, Quantized):
            codes, absmax = slot.codes, slot.absmax
            if type(codes) is not np.ndarray or codes.dtype != np.uint8:
                raise ValueError(f"states[{j}].codes must be a uint8 numpy array")
            if (type(absmax) is not np.ndarray or absmax.dtype != np.float32
                    or absmax.shape != (blocks_of(n),)):
                raise ValueError(f"states[{j}].absmax must be a float32 numpy array of shape "
                                 f"({blocks_of(n)},)")
            data = _flat(codes, n, f"states[{j}].codes")
            scales = _flat(absmax, absmax.size, f"states[{j}].absmax")
        else:
            data = _flat(slot, n, f"states[{j}]")
            scales = None
        arrays += [data, scales]
    return tuple(kinds), arrays


def _disjoint(written, read, name):
    """Refuse a call whose steps share memory where one writes it: ``written`` holds the
    ``(start, end, step)`` byte ranges each step writes (its weight and state slots),
    ``read`` those of the gradients; ``name(step)`` names a step in the message. No two
    written ranges may overlap, nor a gradient a range another step writes (the steps run in
    parallel, in no order)."""
    written.sort()
    for (_, end, s), (start, _, t) in zip(written, written[1:]):
        if start < end:
            which = f"{name(s)} and {name(t)} write the same memory" if s != t else \
                f"{name(s)} writes the same memory twice"
            raise ValueError(f"{which} (a weight or a state slot): the weights and the state "
                             "slots must not share memory")
    starts = [w[0] for w in written]
    ends = [w[1] for w in written]
    for start, end, s in read:  # the written ranges that overlap [start, end), all of them
        for _, _, t in written[bisect.bisect_right(ends, start):
                               bisect.bisect_left(starts, end)]:
            if t != s:
                raise ValueError(f"the gradient of {name(s)} shares memory with a weight or "
                                 f"a state slot that {name(t)} writes")


def run_held(factory, weight, grad, states, hyper, key=None):
    """Run ``factory``'s rule in place over a 1-D C-contiguous float32/float64 ``weight`` and
    ``grad`` with ``states`` (a tuple of 1 to 3 slots, each a plain array of the weight's
    dtype, a float32 array of a float64 weight, a bfloat16 array or a
    :class:`~.lowbit.Quantized`, in the rule's order);
    ``hyper``: Python floats, rounded to the weight's dtype. ``key``: None rounds bfloat16
    slots to nearest; an integer (``toolkit.backends.noise.stream_key(seed, stream, step)``)
    rounds them stochastically with :func:`.lowbit.rounding_bits` of slot ``j`` for
    ``states[j]``. Refuses (ValueError, writing nothing) a slot of another kind, dtype, size
    or layout, a read-only or overlapping one, or a map that is not SIGNED or UNSIGNED."""
    run_held_many(factory, [(weight, grad, states, hyper, key)])


def run_held_many(factory, steps, names=None):
    """:func:`run_held` of each ``(weight, grad, states, hyper, key)`` of ``steps`` (``key``:
    None, or the step's own), in one call per distinct ``(slot kinds, dtype, row length,
    rounding)``: one parallel loop over the blocks of all its steps when they hold
    :data:`~toolkit.backends.jit.PARALLEL_THRESHOLD` elements or more together, each block
    its own step's, so that a Trainer group or a torch param group with hundreds of held
    tensors waits for the threads once. :func:`prepare_held_many`, then its run. Returns the
    kernel calls made."""
    return prepare_held_many(factory, steps, names).run()


class HeldCall:
    """A checked :func:`run_held_many` call, not run yet: :meth:`run` runs it (and returns its
    kernel calls). It keeps every array the kernels read through their addresses alive."""

    __slots__ = ("_launches", "_arrays")

    def __init__(self, launches, arrays):
        self._launches, self._arrays = launches, arrays

    def run(self):
        for kernel, args in self._launches:
            kernel(*args)
        return len(self._launches)


def prepare_held_many(factory, steps, names=None):
    """The :class:`HeldCall` of :func:`run_held_many` over ``steps``: every step checked
    (:func:`run_held`'s refusals), no array one step writes shared with another's, nor a
    step's gradient with what another writes (ValueError, naming the steps by ``names``, one
    string each, else by position), the kernels compiled and their tables made; nothing is
    written until it runs."""
    calls, written, read, arrays = {}, [], [], []
    for s, (weight, grad, states, hyper, key) in enumerate(steps):
        kinds, checked = _arguments(weight, grad, states, key)
        arrays.append(checked)
        row = [weight.shape[0]]
        for j, x in enumerate(checked):  # the weight, the gradient, the slots' arrays
            if x is None:
                row.append(0)
                continue
            address = x.ctypes.data
            row.append(address)
            if x.size:
                (read if j == 1 else written).append((address, address + x.nbytes, s))
        hpa = np.array(hyper, weight.dtype)
        stochastic = key is not None and "bfloat16" in kinds
        calls.setdefault((kinds, weight.dtype, hpa.shape[0], stochastic), []).append(
            (row, hpa, 0 if key is None else int(key)))
    if len(arrays) > 1 or len(written) > 1:
        _disjoint(written, read, (lambda s: f"step {s} of the call") if names is None
                  else names.__getitem__)
    return HeldCall([_launch(factory, kinds, dtype, n_hyper, stochastic, rows)
                     for (kinds, dtype, n_hyper, stochastic), rows in calls.items()], arrays)


def _launch(factory, kinds, dtype, n_hyper, stochastic, rows):
    """``(kernel, args)`` of one kernel call over ``rows`` of ``([n, weight, grad, *slot
    addresses], hyper row, key)``."""
    addrs = np.array([row for row, _, _ in rows], np.int64)
    hyper = rows[0][1].reshape(1, n_hyper) if len(rows) == 1 else \
        np.array([hpa for _, hpa, _ in rows], dtype).reshape(len(rows), n_hyper)
    keys = np.array([key for _, _, key in rows], np.uint64)
    n = addrs[:, N]
    parallel = int(n.sum()) >= jit.PARALLEL_THRESHOLD
    kernel = KERNELS.get(("held", factory, kinds, n_hyper, dtype, parallel, stochastic))
    if kernel is None:
        kernel = held_kernel(factory, kinds, n_hyper, dtype, parallel, stochastic)
    return kernel, (addrs, hyper, keys, chunks(n))


def encode_kernel(qmap, parallel=False):
    """The kernels' encoder alone, compiled: ``encode(s, codes)`` writes the code of each
    float32 ``s`` (in [-1, 1], or NaN) into uint8 ``codes``; for the tests' proof and the
    benchmark's cycle count."""
    kind = slot_kind(Quantized(None, None, qmap), None)

    def build():
        encode = inlined(_block_encoder(qmap))

        def run(s, codes):
            n = s.shape[0]
            nb = (n + BLOCK - 1) // BLOCK
            for c in prange((nb + CHUNK_BLOCKS - 1) // CHUNK_BLOCKS):
                cells = np.empty(2 * BLOCK, np.uint32)
                for b in range(c * CHUNK_BLOCKS, min(c * CHUNK_BLOCKS + CHUNK_BLOCKS, nb)):
                    lo = b * BLOCK
                    encode(codes[lo:min(lo + BLOCK, n)], s[lo:], _F32(1), cells)
        sig = types.void(types.float32[::1], types.uint8[::1])
        return compile_kernel(sig, parallel)(run)
    return cached(("held-encoder", kind, bool(parallel)), build)
