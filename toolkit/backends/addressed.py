"""The addressed CPU kernels: one parallel call of a per-element rule over many tensors that lie
anywhere in memory, each given by its raw address (the ``toolkit.torch`` step reads them with
``data_ptr()``).

Why: a numpy view of a torch tensor costs about 1 us and ``data_ptr()`` about 0.07 us, so views
of 2000 tensors x 4 arrays cost 8 ms a step. The small intrinsic :func:`pointer` (llvmlite's
``inttoptr``, as ``cpu_norms._norm_lanes``) turns an int64 address into a typed pointer inside
the kernel, where ``numba.carray`` makes it an array; numba has no public way to do that, so the
intrinsic stays here, next to the kernels that use it (these, and the held loop of
:mod:`toolkit.backends.cpu_lowbit`).

The same loops run a Trainer's flat buffers (:func:`toolkit.backends.cpu.run_segmented`, every
row of ``ptrs`` the buffers' starts: :func:`starts`) and a multi-precision step of one tensor
(``cpu.MirrorLauncher``); chunks are :data:`toolkit.backends.order.CHUNK`'s, the compile policy
:mod:`toolkit.backends.jit`'s, and the results equal the element-wise loop's for each tensor
alone, bit for bit. Every address is
checked first by a compiled serial pass (:mod:`toolkit.backends.addressed_tables`): nothing is
written when a check fails.

Public: :func:`run_rule_addressed`, :func:`run_rule_addressed_mp` (float16 or bfloat16 weights
with a float32 master, :mod:`toolkit.backends.bfloat16`) and :func:`run_noise_addressed` (SGLD).
"""
from __future__ import annotations

import inspect
from typing import NamedTuple

import numpy as np
from numba import carray, prange, types
from numba.core.errors import TypingError
from numba.extending import intrinsic
from numba.np.unsafe.ndarray import to_fixed_tuple

from . import jit
from .addressed_tables import alignment, checked_tables, plan_chunks
from .jit import COMPILE_OPTIONS, KERNELS, NUMBA_TYPES, by_value, cached, compile_kernel, inlined

__all__ = ["pointer", "run_rule_addressed", "run_rule_addressed_mp", "run_noise_addressed",
           "starts", "flat_buffers",
           "plan_rule_addressed", "plan_rule_addressed_mp", "Planned",
           "addressed_kernel", "addressed_mp_kernel", "addressed_noise_kernel", "plan_chunks"]


@intrinsic
def pointer(typingctx, address, offset, like):
    """A pointer to element ``offset`` of an array of ``like``'s dtype (an array, or a number
    class such as ``np.uint16``) that starts at the int64 ``address``."""
    if isinstance(like, types.Array):
        dtype = like.dtype
    elif isinstance(like, types.NumberClass):
        dtype = like.instance_type
    else:
        return None
    if not (isinstance(address, types.Integer) and isinstance(offset, types.Integer)):
        return None
    sig = types.CPointer(dtype)(address, offset, like)

    def codegen(context, builder, sig, args):
        start = context.cast(builder, args[0], sig.args[0], types.intp)
        first = context.cast(builder, args[1], sig.args[1], types.intp)
        ptr = builder.inttoptr(start, context.get_value_type(sig.return_type))
        return builder.gep(ptr, [first])
    return sig, codegen


# --------------------------------------------------------------------------------------------
# the loops
# --------------------------------------------------------------------------------------------
def _addressed_loop(rule, n_state, n_hyper):
    """The loop of a rule over the chunks of addressed tensors: ``ptrs[s]`` holds the addresses
    of tensor ``s``'s weight, gradient and states, ``table[s]`` its ``(active, *hp)`` row, and a
    chunk ``(a, b, s)`` elements ``a`` to ``b`` of tensor ``s`` (of flat buffers, with every row
    of ``ptrs`` their starts: :func:`starts`). The hyperparameters a tuple once per chunk, the
    inner loop over arrays from 0 (it vectorises)."""
    if n_state == 0:
        def loop(ptrs, table, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    a, n = chunks[c, 0], chunks[c, 1] - chunks[c, 0]
                    wc = carray(pointer(ptrs[s, 0], a, table), n)
                    gc = carray(pointer(ptrs[s, 1], a, table), n)
                    for i in range(wc.shape[0]):
                        wc[i] = rule(wc[i], gc[i], hp)
    elif n_state == 1:
        def loop(ptrs, table, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    a, n = chunks[c, 0], chunks[c, 1] - chunks[c, 0]
                    wc = carray(pointer(ptrs[s, 0], a, table), n)
                    gc = carray(pointer(ptrs[s, 1], a, table), n)
                    x0 = carray(pointer(ptrs[s, 2], a, table), n)
                    for i in range(wc.shape[0]):
                        wc[i], x0[i] = rule(wc[i], gc[i], x0[i], hp)
    elif n_state == 2:
        def loop(ptrs, table, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    a, n = chunks[c, 0], chunks[c, 1] - chunks[c, 0]
                    wc = carray(pointer(ptrs[s, 0], a, table), n)
                    gc = carray(pointer(ptrs[s, 1], a, table), n)
                    x0 = carray(pointer(ptrs[s, 2], a, table), n)
                    x1 = carray(pointer(ptrs[s, 3], a, table), n)
                    for i in range(wc.shape[0]):
                        wc[i], x0[i], x1[i] = rule(wc[i], gc[i], x0[i], x1[i], hp)
    elif n_state == 3:
        def loop(ptrs, table, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    a, n = chunks[c, 0], chunks[c, 1] - chunks[c, 0]
                    wc = carray(pointer(ptrs[s, 0], a, table), n)
                    gc = carray(pointer(ptrs[s, 1], a, table), n)
                    x0 = carray(pointer(ptrs[s, 2], a, table), n)
                    x1 = carray(pointer(ptrs[s, 3], a, table), n)
                    x2 = carray(pointer(ptrs[s, 4], a, table), n)
                    for i in range(wc.shape[0]):
                        wc[i], x0[i], x1[i], x2[i] = rule(wc[i], gc[i], x0[i], x1[i], x2[i], hp)
    else:  # pragma: no cover - the caller checked
        raise ValueError(f"rules with {n_state} state arrays are not supported (0 to 3)")
    return loop


def _addressed_mp_loop(rule, n_state, n_hyper, widen, narrow):
    """:func:`_addressed_loop` over a float32 master (column 0) with a float16 gradient
    (column 1) widened exactly on load and the float16 weight (the last column) written from the
    new master rounded to nearest even (``half.single_to_half``); the float16 arrays read and
    written as their uint16 bits."""
    if n_state == 0:
        def loop(ptrs, table, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    a, n = chunks[c, 0], chunks[c, 1] - chunks[c, 0]
                    wc = carray(pointer(ptrs[s, 0], a, table), n)
                    gc = carray(pointer(ptrs[s, 1], a, np.uint16), n)
                    hc = carray(pointer(ptrs[s, 2], a, np.uint16), n)
                    for i in range(wc.shape[0]):
                        x = rule(wc[i], widen(gc[i]), hp)
                        wc[i] = x
                        hc[i] = narrow(x)
    elif n_state == 1:
        def loop(ptrs, table, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    a, n = chunks[c, 0], chunks[c, 1] - chunks[c, 0]
                    wc = carray(pointer(ptrs[s, 0], a, table), n)
                    gc = carray(pointer(ptrs[s, 1], a, np.uint16), n)
                    x0 = carray(pointer(ptrs[s, 2], a, table), n)
                    hc = carray(pointer(ptrs[s, 3], a, np.uint16), n)
                    for i in range(wc.shape[0]):
                        x, x0[i] = rule(wc[i], widen(gc[i]), x0[i], hp)
                        wc[i] = x
                        hc[i] = narrow(x)
    elif n_state == 2:
        def loop(ptrs, table, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    a, n = chunks[c, 0], chunks[c, 1] - chunks[c, 0]
                    wc = carray(pointer(ptrs[s, 0], a, table), n)
                    gc = carray(pointer(ptrs[s, 1], a, np.uint16), n)
                    x0 = carray(pointer(ptrs[s, 2], a, table), n)
                    x1 = carray(pointer(ptrs[s, 3], a, table), n)
                    hc = carray(pointer(ptrs[s, 4], a, np.uint16), n)
                    for i in range(wc.shape[0]):
                        x, x0[i], x1[i] = rule(wc[i], widen(gc[i]), x0[i], x1[i], hp)
                        wc[i] = x
                        hc[i] = narrow(x)
    elif n_state == 3:
        def loop(ptrs, table, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    a, n = chunks[c, 0], chunks[c, 1] - chunks[c, 0]
                    wc = carray(pointer(ptrs[s, 0], a, table), n)
                    gc = carray(pointer(ptrs[s, 1], a, np.uint16), n)
                    x0 = carray(pointer(ptrs[s, 2], a, table), n)
                    x1 = carray(pointer(ptrs[s, 3], a, table), n)
                    x2 = carray(pointer(ptrs[s, 4], a, table), n)
                    hc = carray(pointer(ptrs[s, 5], a, np.uint16), n)
                    for i in range(wc.shape[0]):
                        x, x0[i], x1[i], x2[i] = rule(wc[i], widen(gc[i]), x0[i], x1[i], x2[i],
                                                      hp)
                        wc[i] = x
                        hc[i] = narrow(x)
    else:  # pragma: no cover - the caller checked
        raise ValueError(f"rules with {n_state} state arrays are not supported (0 to 3)")
    return loop


def _checked_rule(factory, ftype, n_args, what):
    """``factory(ftype)``, refused with a ValueError unless it takes ``n_args`` arguments."""
    rule = factory(ftype)
    try:
        params = inspect.signature(rule).parameters
    except (TypeError, ValueError):  # pragma: no cover - a rule is a plain function
        return rule
    if len(params) != n_args:
        raise ValueError(
            f"{what}: the rule of {getattr(factory, '__qualname__', factory)!r} takes "
            f"{len(params)} arguments, but the address table gives it {n_args} (weight, grad, "
            f"{n_args - 3} states, hp); give ptrs one column per array the rule reads")
    return rule


def _compiled(factory, n_hyper, compile_):
    """``compile_()``, a rule's compile error (a row of the wrong length: the named row's
    constructor refuses it) raised again as a ValueError that names the table's columns."""
    try:
        return compile_()
    except (TypeError, TypingError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"table: the rule of {getattr(factory, '__qualname__', factory)!r} does not compile "
            f"with {n_hyper} hyperparameter columns ({first}); give table 1 + len(hp) columns, "
            "hp as the optimizer's step passes it") from e


_SIG_ARGS = {dt: (types.int64[:, ::1], NUMBA_TYPES[dt][:, ::1], types.int64[:, ::1])
             for dt in jit.DTYPES}


def addressed_kernel(factory, n_state: int, n_hyper: int, dtype, parallel: bool):
    """The compiled addressed loop of ``factory``'s rule for ``dtype`` (cached per process)."""
    dtype = np.dtype(dtype)
    key = ("addressed", factory, n_state, n_hyper, dtype, bool(parallel))

    def build():
        rule = inlined(_checked_rule(factory, dtype.type, 3 + n_state, "ptrs"))
        return _compiled(factory, n_hyper, lambda: compile_kernel(
            types.void(*_SIG_ARGS[dtype]), parallel)(_addressed_loop(rule, n_state, n_hyper)))
    return cached(key, build)


def addressed_mp_kernel(factory, n_state: int, n_hyper: int, parallel: bool,
                        weight: str = "float16"):
    """The compiled multi-precision addressed loop of ``factory``'s float32 rule (cached):
    ``weight`` "float16" or "bfloat16", the type of the weight and gradient (uint16 bits)."""
    key = ("addressed-mp", factory, n_state, n_hyper, bool(parallel)) if weight == "float16" \
        else ("addressed-mp", factory, n_state, n_hyper, bool(parallel), weight)

    def build():
        if weight == "bfloat16":
            from . import bfloat16
            widen, narrow = bfloat16.bfloat16_to_single, bfloat16.single_to_bfloat16
        else:
            from . import half
            widen, narrow = half.half_to_single, half.single_to_half
        rule = inlined(_checked_rule(factory, np.float32, 3 + n_state, "ptrs"))
        loop = _addressed_mp_loop(rule, n_state, n_hyper, inlined(by_value(widen)),
                                  inlined(by_value(narrow)))
        return _compiled(factory, n_hyper, lambda: compile_kernel(
            types.void(*_SIG_ARGS[np.dtype(np.float32)]), parallel)(loop))
    return cached(key, build)


def addressed_noise_kernel(factory, n_hyper: int, n_aux: int, dtype, parallel: bool):
    """The compiled addressed loop of a noise rule (``rule(w, g, z, hp, aux)``, as
    ``cpu_noise.noise_segmented_kernel``): element ``i`` of tensor ``s`` draws ``normal(keys[s],
    i)``, so the draws are the same as for the tensor alone or inside a flat buffer."""
    dtype = np.dtype(dtype)
    key = ("addressed-noise", factory, n_hyper, n_aux, dtype, bool(parallel))

    def build():
        from . import noise
        rule = inlined(factory(dtype.type))
        normal = noise.generator(inlined, "cpu")

        def loop(ptrs, table, chunks, keys, aux):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    au = to_fixed_tuple(aux[s], n_aux)
                    a, n = chunks[c, 0], chunks[c, 1] - chunks[c, 0]
                    wc = carray(pointer(ptrs[s, 0], a, table), n)
                    gc = carray(pointer(ptrs[s, 1], a, table), n)
                    for i in range(wc.shape[0]):
                        z = normal(keys[s], np.uint64(a + i))
                        wc[i] = rule(wc[i], gc[i], z, hp, au)
        sig = types.void(*_SIG_ARGS[dtype], types.uint64[::1], types.float64[:, ::1])
        return _compiled(factory, n_hyper, lambda: compile_kernel(sig, parallel)(loop))
    return cached(key, build)


# --------------------------------------------------------------------------------------------
# the calls
# --------------------------------------------------------------------------------------------


def starts(arrays, rows=1):
    """int64 ``(rows, len(arrays))``, every row the start addresses of ``arrays`` (contiguous
    numpy arrays): the ``ptrs`` of one tensor (``rows`` 1), or of flat buffers whose chunk rows
    hold offsets into the buffers themselves (one row per segment, all alike), so that the
    addressed loops also run a Trainer's flat buffers and a single tensor."""
    return np.tile(np.array([a.ctypes.data for a in arrays], np.int64), (rows, 1))


def flat_buffers(arrays, dtypes, what, read=(1,), chunks=None):
    """Refuse anything but 1-D C-contiguous numpy arrays (subclasses too) of one length with the
    given dtypes, each writeable but those at the indices ``read`` (the gradient's), and
    ``chunks`` rows (``(start, end, segment)``) outside them: the addressed loops read raw
    addresses, so these checks are theirs, made where compiled signatures and slices made them
    before. TypeError for an array, ValueError for a chunk row."""
    n = arrays[0].shape[0] if arrays and getattr(arrays[0], "ndim", 0) == 1 else -1
    for k, (a, dt) in enumerate(zip(arrays, dtypes)):
        if not (isinstance(a, np.ndarray) and a.ndim == 1 and a.flags.c_contiguous
                and a.dtype == dt and a.shape[0] == n):
            raise TypeError(
                f"{what}: array {k} must be a 1-D C-contiguous {np.dtype(dt)} numpy array of "
                f"{n} elements, got {type(a).__name__} {getattr(a, 'dtype', '')} "
                f"{getattr(a, 'shape', '')}")
        if k not in read and not a.flags.writeable:
            raise TypeError(f"{what}: array {k} is read-only; the step writes it")
    if chunks is not None and chunks.shape[0] and (
            int(chunks[:, 0].min()) < 0 or int(chunks[:, 1].max()) > n):
        raise ValueError(f"{what}: a chunk row reaches outside the buffers of {n} elements "
                         f"(starts from {int(chunks[:, 0].min())}, ends up to "
                         f"{int(chunks[:, 1].max())})")


def run_rule_addressed(factory, dtype, ptrs, sizes, table):
    """One call of ``factory``'s rule over ``n`` tensors at raw addresses, in place.

    ``ptrs``: int64 ``(n, 2 + n_states)``, tensor ``s``'s weight, gradient and states (in the
    rule's order) as addresses of contiguous arrays of ``dtype`` (float32 or float64) with
    ``sizes[s]`` elements each (``sizes``: int64 ``(n,)``). ``table``: ``(n, 1 + len(hp))`` in
    ``dtype``, as :func:`toolkit.backends.cpu.run_segmented` takes it: column 0 updates the
    tensor (1) or skips it (0: its addresses are not read, and may be 0), the rest is the rule's
    row. The result is ``run_segmented``'s over a flat buffer holding the same tensors, bit for
    bit. The caller keeps the tensors alive and unaliased for the call (no two arrays may
    overlap). Everything is checked before anything is written.
    """
    planned = plan_rule_addressed(factory, dtype, ptrs, sizes, table)
    if planned is not None:
        planned.run(ptrs, table)


class Planned(NamedTuple):
    """The checked launch of an addressed call (:func:`plan_rule_addressed`): its compiled
    kernel and chunk table. ``run(ptrs, table)`` runs it again on arrays of the same shapes,
    sizes and active flags whose addresses the caller has checked (each a multiple of its
    column's item size, none 0 in an active row)."""
    kernel: object
    chunks: np.ndarray

    def run(self, ptrs, table):
        self.kernel(ptrs, table, self.chunks)


def plan_rule_addressed(factory, dtype, ptrs, sizes, table):
    """:func:`run_rule_addressed`'s checks and plan, without the call: a :class:`Planned`, or
    None when no tensor is active."""
    dtype = np.dtype(dtype) if not isinstance(dtype, np.dtype) else dtype
    if dtype not in jit.DTYPES:
        raise TypeError(f"dtype must be float32 or float64, got {dtype}; a float16 weight "
                        "with a float32 master runs through run_rule_addressed_mp")
    ptrs, sizes, table, n_state = checked_tables(ptrs, sizes, table, dtype, 2,
                                                 "run_rule_addressed")
    total, chunks = plan_chunks(ptrs, sizes, table, alignment(ptrs.shape[1], dtype.itemsize))
    if chunks.shape[0] == 0:
        return None
    parallel = total >= jit.PARALLEL_THRESHOLD and chunks.shape[0] > 1
    n_hyper = table.shape[1] - 1
    kernel = KERNELS.get(("addressed", factory, n_state, n_hyper, dtype, parallel))
    if kernel is None:
        kernel = addressed_kernel(factory, n_state, n_hyper, dtype, parallel)
    return Planned(kernel, chunks)


def run_rule_addressed_mp(factory, ptrs, sizes, table, weight="float16"):
    """:func:`run_rule_addressed` for float16 weights with a float32 master: ``ptrs`` int64
    ``(n, 3 + n_states)``, per tensor the float32 master, the float16 gradient, the float32
    states and the float16 weight; ``table`` float32. The rule updates the master from the
    gradient widened exactly, and the weight becomes the new master rounded to nearest even in
    the same pass (``cpu.MirrorLauncher``'s kernel; the Trainer's CPU path rounds its master
    into the weight the same way after its float32 step), bit for bit. ``weight="bfloat16"``:
    the weight and the gradient are bfloat16 (:mod:`toolkit.backends.bfloat16`: widened
    exactly, the weight rounded to nearest even from the master as ``Tensor.to(torch.bfloat16)``
    rounds it, a NaN written as torch's CPU conversion writes it)."""
    planned = plan_rule_addressed_mp(factory, ptrs, sizes, table, weight)
    if planned is not None:
        planned.run(ptrs, table)


def plan_rule_addressed_mp(factory, ptrs, sizes, table, weight="float16"):
    """:func:`run_rule_addressed_mp`'s checks and plan, without the call: a
    :class:`Planned`, or None when no tensor is active."""
    if weight not in ("float16", "bfloat16"):
        raise ValueError(f"weight must be 'float16' or 'bfloat16', got {weight!r}")
    f32 = np.dtype(np.float32)
    ptrs, sizes, table, n_state = checked_tables(ptrs, sizes, table, f32, 3,
                                                 "run_rule_addressed_mp")
    total, chunks = plan_chunks(ptrs, sizes, table,
                                alignment(ptrs.shape[1], 4, (1, ptrs.shape[1] - 1)))
    if chunks.shape[0] == 0:
        return None
    parallel = total >= jit.PARALLEL_THRESHOLD and chunks.shape[0] > 1
    n_hyper = table.shape[1] - 1
    kernel = KERNELS.get(("addressed-mp", factory, n_state, n_hyper, parallel)
                         if weight == "float16" else
                         ("addressed-mp", factory, n_state, n_hyper, parallel, weight))
    if kernel is None:
        kernel = addressed_mp_kernel(factory, n_state, n_hyper, parallel, weight)
    return Planned(kernel, chunks)


def run_noise_addressed(factory, dtype, ptrs, sizes, table, keys, aux):
    """A noise rule (SGLD) over ``n`` tensors at raw addresses: ``ptrs`` int64 ``(n, 2)``
    (weight, gradient), ``table`` as :func:`run_rule_addressed`'s, ``keys`` uint64 ``(n,)`` the
    stream of each tensor's draws, ``aux`` float64 ``(n, n_aux)`` the scalars beside its row
    (``cpu.run_noise_segmented``'s arguments); element ``i`` of tensor ``s`` draws
    ``normal(keys[s], i)``, so the result equals ``run_noise_segmented``'s bit for bit."""
    from .cpu_noise import NOISE_PARALLEL_THRESHOLD
    dtype = np.dtype(dtype) if not isinstance(dtype, np.dtype) else dtype
    if dtype not in jit.DTYPES:
        raise TypeError(f"dtype must be float32 or float64, got {dtype}")
    ptrs, sizes, table, n_state = checked_tables(ptrs, sizes, table, dtype, 2,
                                                 "run_noise_addressed")
    if n_state != 0:
        raise ValueError(f"ptrs has {ptrs.shape[1]} columns; a noise rule reads 2 (weight, "
                         "gradient)")
    n = ptrs.shape[0]
    if not isinstance(keys, np.ndarray) or keys.dtype != np.uint64 or keys.shape != (n,):
        raise TypeError(f"keys must be a uint64 numpy array of shape ({n},), got "
                        f"{getattr(keys, 'dtype', type(keys).__name__)} "
                        f"{getattr(keys, 'shape', '')}; one stream key per tensor")
    if not isinstance(aux, np.ndarray) or aux.dtype != np.float64 or aux.ndim != 2 \
            or aux.shape[0] != n:
        raise TypeError(f"aux must be a 2-D float64 numpy array with {n} rows, got "
                        f"{getattr(aux, 'dtype', type(aux).__name__)} "
                        f"{getattr(aux, 'shape', '')}; the noise rule's scalars per tensor")
    total, chunks = plan_chunks(ptrs, sizes, table, alignment(2, dtype.itemsize))
    if chunks.shape[0] == 0:
        return
    parallel = total >= NOISE_PARALLEL_THRESHOLD and chunks.shape[0] > 1
    kernel = addressed_noise_kernel(factory, table.shape[1] - 1, aux.shape[1], dtype, parallel)
    kernel(ptrs, table, chunks, np.ascontiguousarray(keys), np.ascontiguousarray(aux))
