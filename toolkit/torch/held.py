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

import warnings

import numpy as np
import torch

from ..backends import lowbit
from ..trainer import states_held
from .order import memory_order, ordered, unordered

__all__ = ["CODES", "ABSMAX", "QMAP", "ORDER", "tensors", "saved_extras", "extra_keys",
           "check_maps", "loaded", "from_bitsandbytes", "BITSANDBYTES_KEY"]

#: the suffixes of an int8 slot's keys: its codes, its block maxima; its map and the order its
#: blocks were cut in (the parameter's dimensions in memory order), in a state_dict only
CODES, ABSMAX, QMAP, ORDER = "_codes", "_absmax", "_qmap", "_order"

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


def saved_extras(slots, perm):
    """What ``state_dict()`` adds for the int8 slots among ``slots`` (``(name, array)`` pairs of
    a parameter of memory order ``perm``): ``n_qmap``, a copy of the map's values, and
    ``n_order``, the parameter's dimensions in the order its blocks were cut (its memory order;
    the codes' own strides say the same until something makes them contiguous)."""
    out = {}
    for n, a in slots:
        if type(a) is lowbit.Quantized:
            out[n + QMAP] = torch.from_numpy(np.array(a.qmap, np.float32))
            out[n + ORDER] = list(range(a.codes.ndim)) if perm is None else list(perm)
    return out


def extra_keys(named):
    """The keys of what a saved int8 slot brings beside its codes and block maxima (its map
    and block order), for the int8 slots among ``named`` (the keys ``opt.state`` shows): taken
    with the codes, never a user's own keys."""
    stems = [k[:-len(CODES)] for k in named if k.endswith(CODES)]
    return {n + x for n in stems for x in (QMAP, ORDER)}


def check_maps(slots, entry, where):
    """Check the int8 maps ``entry`` (an ``opt.state`` entry beside a bound state) holds for
    the int8 slots among ``slots``: each must be that slot's map bit for bit (a ValueError
    naming ``where``)."""
    for n, a in slots:
        if type(a) is lowbit.Quantized and n + QMAP in entry:
            if _signed(_tensor(entry, n + QMAP, where)) is not (a.qmap is lowbit.SIGNED):
                raise ValueError(f"{where}'s state {n + QMAP!r} is not the "
                                 f"{'signed' if a.qmap is lowbit.SIGNED else 'unsigned'} map "
                                 f"this optimizer holds {n!r} with, bit for bit")


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
    if v.device.type == "meta":
        raise ValueError(f"{where}'s state {key!r} is a meta tensor: it holds no values")
    return v.detach().cpu() if host else v


class _Saved:
    """One slot of a saved state, checked: its ``form`` (``states_held.Form``; a plain one's
    dtype is None), the ``keys`` it took from the entry, its tensors, and an int8 slot's block
    ``order`` (the dimensions in the order its blocks were cut: None, C order)."""

    def __init__(self, form, keys, tensors_, order=None):
        self.form, self.keys, self.tensors, self.order = form, keys, tensors_, order

    def values(self):
        """Its float64 values in the parameter's logical shape, exactly."""
        if self.form.kind != "int8":
            return self.tensors[0].detach().cpu().to(torch.float64)
        codes, absmax = self.tensors
        q = lowbit.Quantized(np.ascontiguousarray(ordered(codes, self.order).numpy()),
                             absmax.numpy().copy(),
                             lowbit.SIGNED if self.form.signed else lowbit.UNSIGNED)
        return unordered(torch.from_numpy(lowbit.dequantize(q).astype(np.float64)), self.order)


def _block_order(entry, n, codes, where):
    """The order in which the blocks of int8 slot ``n`` were cut: its saved ``n_order`` (a
    permutation of the dimensions), else its codes' memory order."""
    if n + ORDER not in entry:
        try:
            return memory_order(codes)
        except ValueError:
            raise ValueError(f"{where}'s state {n + CODES!r} has strides {codes.stride()}: "
                             "not dense in memory, so the order its blocks were cut in is "
                             f"unknown (a state_dict names it as {n + ORDER!r})") from None
    order = entry[n + ORDER]
    if isinstance(order, torch.Tensor):
        order = order.tolist()
    if not isinstance(order, (list, tuple)) or sorted(order) != list(range(codes.dim())) or \
            not all(type(d) is int for d in order):
        raise ValueError(f"{where}'s state {n + ORDER!r} is {order!r}; it must list the "
                         f"{codes.dim()} dimensions in the order the blocks were cut")
    return None if list(order) == list(range(codes.dim())) else tuple(order)


def _saved(entry, n, shape, where, signed=None):
    """The :class:`_Saved` slot ``n`` of the saved ``entry`` of a parameter of ``shape``,
    checked field by field (an int8 slot's codes, block maxima, map and block order), or None
    where the entry has none. ``signed``: the map an int8 slot without its own is taken with
    (an ``opt.state`` entry's; a state_dict's must name its map, and its block maxima must be
    finite and >= 0)."""
    if n + CODES not in entry:
        if n not in entry:
            return None
        t = _tensor(entry, n, where, host=False)  # (copied as it is, or converted)
        return _Saved(states_held.Form("bfloat16" if t.dtype == torch.bfloat16 else "plain",
                                       tuple(t.shape), None), (n,), (t,))
    if n in entry:
        raise ValueError(f"{where}'s state holds both {n!r} and {n + CODES!r}: one slot held "
                         "two ways")
    codes = _tensor(entry, n + CODES, where)
    if codes.dtype != torch.uint8 or tuple(codes.shape) != tuple(shape):
        raise ValueError(f"{where}'s state {n + CODES!r} is {tuple(codes.shape)} {codes.dtype};"
                         f" int8 codes are uint8 of the parameter's shape {tuple(shape)}")
    for key in (n + ABSMAX,) + ((n + QMAP,) if signed is None else ()):
        if key not in entry:
            raise ValueError(f"{where}'s state has {n + CODES!r} without {key!r}: an int8 slot "
                             "is saved as its codes, block maxima and map")
    absmax = _tensor(entry, n + ABSMAX, where)
    blocks = lowbit.blocks_of(codes.numel())
    if absmax.dtype != torch.float32 or tuple(absmax.shape) != (blocks,):
        raise ValueError(f"{where}'s state {n + ABSMAX!r} is {tuple(absmax.shape)} "
                         f"{absmax.dtype}; it must be float32 of shape ({blocks},), one block "
                         f"maximum per {lowbit.BLOCK} codes")
    keys = tuple(k for k in (n + CODES, n + ABSMAX, n + QMAP, n + ORDER) if k in entry)
    order = _block_order(entry, n, codes, where)
    if n + QMAP in entry:
        signed = _signed(_tensor(entry, n + QMAP, where))
        if signed is None:
            raise ValueError(f"{where}'s state {n + QMAP!r} is not a code map the toolkit holds "
                             "int8 states with (toolkit.backends.lowbit.SIGNED or UNSIGNED, "
                             "bitsandbytes 0.50.2's dynamic maps, bit for bit)")
        form = states_held.Form("int8", tuple(shape), np.dtype(np.uint8), signed)
        why = states_held.check_values(form, {n + states_held.ABSMAX: absmax.numpy()}, n)
        if why is not None:
            raise ValueError(f"{where}'s state: {why}")
    form = states_held.Form("int8", tuple(shape), np.dtype(np.uint8), signed)
    return _Saved(form, keys, (codes, absmax), order)


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
            saved.order == perm
    return own.kind == "plain" or saved.form.kind == own.kind


def loaded(slots, entry, p, convert, where, own_maps=False):
    """``entry`` (a saved state of parameter ``p``) with each slot of ``slots`` (``(name,
    array)`` pairs of the state this optimizer makes for ``p``) under the keys and in the form
    ``opt.state`` shows it: as saved where the forms are the same (a float tensor of another
    dtype is cast later, as torch casts it), else, with ``convert``, its values held as this
    optimizer holds them (each rounded to nearest, ``states_held.held_as``); int8 codes whose
    blocks were cut in another order than ``p``'s memory order are converted so always. With
    ``own_maps`` (an ``opt.state`` entry a user filled) an int8 slot without a map takes its
    own. A ValueError or TypeError naming ``where`` for a slot that does not check or
    convert."""
    out = dict(entry)
    perm = memory_order(p)
    for n, leaf in slots:
        own = states_held.form_of(leaf)
        saved = _saved(entry, n, p.shape, where, own.signed if own_maps else None)
        if saved is None:
            continue  # (missing: refused by the caller, which names every slot it needs)
        for key in saved.keys:
            del out[key]
        if _as_saved(saved, own, perm):
            keys = (n + CODES, n + ABSMAX) if own.kind == "int8" else (n,)
            out.update(zip(keys, saved.tensors))
            continue
        reorder = saved.form.kind == own.kind == "int8" and saved.form.signed == own.signed
        if reorder:
            warnings.warn(f"{where}: its int8 moment {n!r} was held in blocks cut in another "
                          "memory order than the parameter's now (its layout changed: "
                          "channels_last, a transpose); requantized in blocks of its order "
                          "(docs/state-dtype.md, 'In toolkit.torch')", UserWarning, stacklevel=2)
        if not (convert or reorder):
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


def from_bitsandbytes(moments, entry, where, scaled=()):
    """``entry``, a parameter's state in a bitsandbytes 8-bit optimizer's state_dict, under
    torch's keys (an entry without bitsandbytes' key as it is): its ``state<j>`` is the ``j``-th
    of ``moments`` (torch's names of the spec's moments in its order: first, then second), its
    codes with ``absmax<j>`` and ``qmap<j>`` (blocks of 256 cut in the parameter's logical
    order, as bitsandbytes 0.50.2 cuts them on the CPU; the map is checked bit for bit on load),
    or a float32 moment. Refused: a state quantized per tensor (bitsandbytes'
    ``block_wise=False``), codes of a moment the loading optimizer keeps as another quantity
    (``scaled``: SGD's momentum under MXNet's convention, ``-lr`` times torch's buffer), and
    non-contiguous codes on a GPU (whose block order bitsandbytes' CUDA kernels set)."""
    held = entry.get(BITSANDBYTES_KEY) if isinstance(entry, dict) else None
    if not isinstance(held, dict):
        return entry
    out = {k: v for k, v in entry.items() if k != BITSANDBYTES_KEY}
    for j, n in enumerate(moments, 1):
        state = held.get(f"state{j}")
        if state is None:
            continue
        if not (isinstance(state, torch.Tensor) and state.dtype == torch.uint8):
            out[n] = state
            continue
        if f"absmax{j}" not in held:
            raise ValueError(f"{where}: bitsandbytes' state{j} is quantized without block "
                             "maxima (block_wise=False, one scale per tensor); only its "
                             "blockwise states convert")
        if n in scaled:
            raise ValueError(f"{where}: bitsandbytes' state{j} holds torch's {n!r} in 8 bits; "
                             "this optimizer's convention keeps another quantity (-lr times "
                             "it): load it into convention='pytorch'")
        if state.device.type != "cpu" and not state.is_contiguous():
            raise ValueError(f"{where}: bitsandbytes' state{j} is a non-contiguous GPU tensor: "
                             "the order its blocks were cut in is unknown; save it from a "
                             "contiguous parameter")
        out[n + CODES], out[n + ABSMAX] = state.contiguous(), held[f"absmax{j}"]
        out[n + QMAP] = held.get(f"qmap{j}")
    return out
