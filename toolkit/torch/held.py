"""Moments held in bfloat16 or int8 (``state_dtype``, docs/state-dtype.md) in ``toolkit.torch``:
how ``opt.state[p]`` shows them, what ``state_dict()`` adds, and how ``load_state_dict`` checks
a saved slot and converts it to the form this optimizer holds.

A state slot shown as ``n`` (torch's name where torch has the slot: Adam's ``exp_avg``) is

* held by the default rule or in float32: ``n``, a tensor of its dtype;
* held in bfloat16: ``n``, a ``torch.bfloat16`` tensor;
* held in int8: ``n_codes``, uint8 codes of the parameter's shape, and ``n_absmax``, float32,
  one block maximum per block of 256 elements cut in the parameter's memory order
  (``toolkit.backends.lowbit``). ``state_dict()`` adds ``n_qmap``: the 256 float32 values of
  the code map (bitsandbytes 0.50.2's signed dynamic map for a first moment, its unsigned one
  for a second), which a load checks bit for bit.

Every tensor ``opt.state[p]`` shows is a view of the array the kernels step (no copy).
"""
from __future__ import annotations

import numpy as np
import torch

from ..backends import lowbit
from ..trainer import states_held
from .order import memory_order, ordered, unordered

__all__ = ["CODES", "ABSMAX", "QMAP", "tensors", "maps", "map_keys", "check_maps",
           "loaded", "from_bitsandbytes", "BITSANDBYTES_KEY"]

#: the suffixes of an int8 slot's keys: its codes, its block maxima, its map (state_dict only)
CODES, ABSMAX, QMAP = "_codes", "_absmax", "_qmap"

_MAPS = ((True, lowbit.SIGNED), (False, lowbit.UNSIGNED))

#: the key under which bitsandbytes' 8-bit optimizers (0.50.2) keep a parameter's state in
#: their state_dict: ``state1``, ``state2`` (uint8 codes, or float32 below ``min_8bit_size``),
#: ``absmax1``, ``absmax2``, ``qmap1``, ``qmap2``
BITSANDBYTES_KEY = "__bnb_optimizer_quant_state__"


def tensors(named):
    """``{key: tensor}`` shown for ``named`` (slot name -> numpy array or
    ``lowbit.Quantized``), each a view of the array it shows (an int8 slot as its two keys)."""
    out = {}
    for n, a in named.items():
        if type(a) is lowbit.Quantized:
            out[n + CODES] = torch.from_numpy(a.codes)
            out[n + ABSMAX] = torch.from_numpy(a.absmax)
        elif a.dtype == lowbit.BFLOAT16:
            out[n] = torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
        else:
            out[n] = torch.from_numpy(a)
    return out


def maps(slots):
    """``{n_qmap: tensor}`` of the int8 slots among ``slots`` (``(name, array)`` pairs): the
    values of each one's map, a copy."""
    return {n + QMAP: torch.from_numpy(np.array(a.qmap, np.float32))
            for n, a in slots if type(a) is lowbit.Quantized}


def map_keys(named):
    """The keys of the maps of the int8 slots among ``named`` (the keys ``opt.state`` shows)."""
    return {k[:-len(CODES)] + QMAP for k in named if k.endswith(CODES)}


def check_maps(slots, entry, where):
    """The keys of the int8 maps ``entry`` (an ``opt.state`` entry a user or
    ``ZeroRedundancyOptimizer.load_state_dict`` filled) holds for the int8 slots among
    ``slots``, each checked to be that slot's map bit for bit (a ValueError naming ``where``);
    the step takes them, and they leave the entry when its state is bound."""
    keys = []
    for n, a in slots:
        if type(a) is lowbit.Quantized and n + QMAP in entry:
            if _signed(_tensor(entry, n + QMAP, where)) is not (a.qmap is lowbit.SIGNED):
                raise ValueError(f"{where}'s state {n + QMAP!r} is not the "
                                 f"{'signed' if a.qmap is lowbit.SIGNED else 'unsigned'} map "
                                 f"this optimizer holds {n!r} with, bit for bit")
            keys.append(n + QMAP)
    return keys


def _signed(qmap):
    """True or False for the signed or unsigned map (a tensor of its values, bit for bit),
    else None."""
    bits = qmap.numpy().view(np.uint32) if qmap.dtype == torch.float32 and \
        tuple(qmap.shape) == (256,) else None
    return next((s for s, m in _MAPS
                 if bits is not None and np.array_equal(bits, m.view(np.uint32))), None)


def _tensor(entry, key, where, host=True):
    v = entry[key]
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"{where}'s state {key!r} must be a tensor, got {type(v).__name__}")
    return v.detach().cpu() if host else v


class _Saved:
    """One slot of a saved state, checked: its ``form`` (``states_held.Form``; a plain one's
    dtype is None), the ``keys`` it took from the entry, its tensors."""

    def __init__(self, form, keys, tensors_):
        self.form, self.keys, self.tensors = form, keys, tensors_

    def values(self):
        """Its float64 values in the parameter's logical shape, exactly."""
        if self.form.kind != "int8":
            return self.tensors[0].detach().cpu().to(torch.float64)
        codes, absmax = self.tensors
        perm = memory_order(codes)  # the blocks were cut in the saving parameter's order
        q = lowbit.Quantized(np.ascontiguousarray(ordered(codes, perm).numpy()),
                             absmax.numpy().copy(),
                             lowbit.SIGNED if self.form.signed else lowbit.UNSIGNED)
        return unordered(torch.from_numpy(lowbit.dequantize(q).astype(np.float64)), perm)


def _saved(entry, n, shape, where):
    """The :class:`_Saved` slot ``n`` of the saved ``entry`` of a parameter of ``shape``,
    checked field by field (an int8 slot's codes, block maxima and map), or None where the
    entry has none."""
    if n + CODES not in entry:
        if n not in entry:
            return None
        t = _tensor(entry, n, where, host=False)  # (copied as it is, or converted)
        return _Saved(states_held.Form("bfloat16" if t.dtype == torch.bfloat16 else "plain",
                                       tuple(t.shape), None), (n,), (t,))
    codes = _tensor(entry, n + CODES, where)
    if codes.dtype != torch.uint8 or tuple(codes.shape) != tuple(shape):
        raise ValueError(f"{where}'s state {n + CODES!r} is {tuple(codes.shape)} {codes.dtype};"
                         f" int8 codes are uint8 of the parameter's shape {tuple(shape)}")
    for key in (n + ABSMAX, n + QMAP):
        if key not in entry:
            raise ValueError(f"{where}'s state has {n + CODES!r} without {key!r}: an int8 slot "
                             "is saved as its codes, block maxima and map")
    absmax = _tensor(entry, n + ABSMAX, where)
    blocks = lowbit.blocks_of(codes.numel())
    if absmax.dtype != torch.float32 or tuple(absmax.shape) != (blocks,):
        raise ValueError(f"{where}'s state {n + ABSMAX!r} is {tuple(absmax.shape)} "
                         f"{absmax.dtype}; it must be float32 of shape ({blocks},), one block "
                         f"maximum per {lowbit.BLOCK} codes")
    signed = _signed(_tensor(entry, n + QMAP, where))
    if signed is None:
        raise ValueError(f"{where}'s state {n + QMAP!r} is not a code map the toolkit holds "
                         "int8 states with (toolkit.backends.lowbit.SIGNED or UNSIGNED, "
                         "bitsandbytes 0.50.2's dynamic maps, bit for bit)")
    form = states_held.Form("int8", tuple(shape), np.dtype(np.uint8), signed)
    why = states_held.check_values(form, {n + states_held.ABSMAX: absmax.numpy()}, n)
    if why is not None:
        raise ValueError(f"{where}'s state: {why}")
    return _Saved(form, (n + CODES, n + ABSMAX, n + QMAP), (codes, absmax))


def _describe(form):
    if form.kind == "int8":
        return f"int8 ({'signed' if form.signed else 'unsigned'} map)"
    return "bfloat16" if form.kind == "bfloat16" else "a float tensor"


def _as_saved(saved, own, perm):
    """Whether a slot saved as ``saved`` loads as it is into one held as ``own`` (a parameter of
    memory order ``perm``): the same form (int8: the same map, its blocks cut in the same
    order), or float tensors, a bfloat16 one into a plain one included (cast later, exactly,
    as torch casts a state)."""
    if saved.form.kind == "int8" or own.kind == "int8":
        return saved.form.kind == own.kind and saved.form.signed == own.signed and \
            memory_order(saved.tensors[0]) == perm
    return own.kind == "plain" or saved.form.kind == own.kind


def loaded(slots, entry, p, convert, where):
    """``entry`` (a saved state of parameter ``p``) with each slot of ``slots`` (``(name,
    array)`` pairs of the state this optimizer makes for ``p``) under the keys and in the form
    ``opt.state`` shows it: as saved where the forms are the same (a float tensor of another
    dtype is cast later, as torch casts it), else, with ``convert``, its values held as this
    optimizer holds them (rounded as a step stores them, ``states_held.held_as``). A
    ValueError or TypeError naming ``where`` for a slot that does not check or convert."""
    out = dict(entry)
    perm = memory_order(p)
    for n, leaf in slots:
        saved = _saved(entry, n, p.shape, where)
        if saved is None:
            continue  # (missing: refused by the caller, which names every slot it needs)
        for key in saved.keys:
            del out[key]
        own = states_held.form_of(leaf)
        if _as_saved(saved, own, perm):
            keys = (n + CODES, n + ABSMAX) if own.kind == "int8" else (n,)
            out.update(zip(keys, saved.tensors))
            continue
        if not convert:
            raise ValueError(
                f"{where}'s state {n!r} was saved as {_describe(saved.form)}; this optimizer "
                f"holds it as {_describe(own)} (its state_dtype): "
                "load_state_dict(state_dict, convert_states=True) converts it")
        values = ordered(saved.values(), perm).numpy()
        if type(leaf) is lowbit.Quantized:
            (_, codes), (_, absmax) = states_held.held_as(leaf, values)
            out[n + CODES] = unordered(torch.from_numpy(codes), perm)
            out[n + ABSMAX] = torch.from_numpy(absmax)
        else:
            (_, held), = states_held.held_as(leaf, values)
            out[n] = unordered(tensors({n: held})[n], perm)
    return out


def from_bitsandbytes(moments, entry, where):
    """``entry``, a parameter's state in a bitsandbytes 8-bit optimizer's state_dict, under the
    keys ``opt.state`` shows (an entry without bitsandbytes' key as it is): its ``state<j>`` is
    the ``j``-th moment of ``moments`` (the names of the spec's moments in its order: first,
    then second), its codes with ``absmax<j>`` and ``qmap<j>`` (blocks of 256, the toolkit's
    own: they load as they are, and the map is checked bit for bit), or a float32 moment. A
    state quantized per tensor (bitsandbytes' ``block_wise=False``) does not convert."""
    held = entry.get(BITSANDBYTES_KEY) if isinstance(entry, dict) else None
    if not isinstance(held, dict):
        return entry
    out = {k: v for k, v in entry.items() if k != BITSANDBYTES_KEY}
    for j, n in enumerate(moments, 1):
        state = held.get(f"state{j}")
        if state is None:
            continue
        if isinstance(state, torch.Tensor) and state.dtype == torch.uint8:
            if f"absmax{j}" not in held:
                raise ValueError(f"{where}: bitsandbytes' state{j} is quantized without block "
                                 "maxima (block_wise=False, one scale per tensor); only its "
                                 "blockwise states convert")
            out[n + CODES], out[n + ABSMAX] = state, held[f"absmax{j}"]
            out[n + QMAP] = held.get(f"qmap{j}")
        else:
            out[n] = state
    return out
