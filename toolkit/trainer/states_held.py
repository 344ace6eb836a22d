"""Held states (``state_dtype``) in the Trainer's states file: how each state slot is stored,
described in the metadata and checked, and the conversion of a file's moments to another
``state_dtype`` (``load_states(..., convert_states=True)``).

A slot is stored as it is held (``docs/trainer.md``, "Held states"):

* a plain array (the default rule, or ``state_dtype="float32"``): ``state/<i>/<j>`` of its
  dtype, described ``{"shape", "dtype"}`` exactly as in a version 2 file;
* bfloat16: ``state/<i>/<j>`` holds its bits as uint16, described ``"dtype": "bfloat16"``;
* int8 (``lowbit.Quantized``): ``state/<i>/<j>`` its uint8 codes (the weight's shape) and
  ``state/<i>/<j>/absmax`` its float32 block maxima (one per block of 256 elements of that
  parameter alone), described ``"dtype": "int8"`` with ``"map": "signed"`` or ``"unsigned"``
  (``lowbit.SIGNED``, ``lowbit.UNSIGNED``: the map is named, never stored as bytes).

A file that holds any slot so (an optimizer with ``state_dtype`` set) is version 3 and names
its ``state_dtype`` in the metadata; a file without is version 2, byte for byte as before.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..backends import arrays, lowbit
from ..optimizers.held import INT8_MIN_SIZE

__all__ = ["Form", "form_of", "forms", "members", "entry", "stored", "check_values",
           "values", "held_as", "copies", "ABSMAX"]

#: the suffix of an int8 slot's block maxima member
ABSMAX = "/absmax"


class Form(NamedTuple):
    """How one state slot is held: ``kind`` "plain", "bfloat16" or "int8", the slot's
    ``shape``, a plain slot's ``dtype`` (the stored dtype of the others: uint16, uint8), an int8
    slot's map (``signed``)."""
    kind: str
    shape: tuple
    dtype: np.dtype
    signed: bool = False


def form_of(leaf):
    """The :class:`Form` of a live state slot."""
    if type(leaf) is lowbit.Quantized:
        return Form("int8", tuple(leaf.codes.shape), np.dtype(np.uint8),
                    leaf.qmap is lowbit.SIGNED)
    d = arrays.describe(leaf)
    if np.dtype(d.dtype) == lowbit.BFLOAT16:
        return Form("bfloat16", tuple(d.shape), np.dtype(np.uint16))
    return Form("plain", tuple(d.shape), np.dtype(d.dtype))


def _kind(opt, state_dtype, name, weight):
    """How ``opt`` would hold slot ``name`` of ``weight`` with ``state_dtype`` (the rule of
    ``HeldStates.held_dtype``, for a ``state_dtype`` other than its own)."""
    if state_dtype is None or name not in opt.moment_signs():
        return None
    if state_dtype == "int8" and int(np.prod(weight.shape, dtype=np.int64)) < INT8_MIN_SIZE:
        return None
    return state_dtype


def forms(opt, param, leaves, state_dtype):
    """The forms of a parameter's state slots (its live ``leaves``) under ``state_dtype``:
    their own forms for the optimizer's own, else what that ``state_dtype`` would make of the
    moments (the other slots as they are); None when the slots are not the optimizer's
    ``state_slots()`` one for one (then no conversion)."""
    own = [form_of(leaf) for leaf in leaves]
    if state_dtype == opt.state_dtype:
        return own
    names = opt.state_slots()
    if len(names) != len(leaves):
        return None
    weight = param.data()
    out = []
    for name, form in zip(names, own):
        kind = _kind(opt, state_dtype, name, weight)
        if name not in opt.moment_signs():
            out.append(form)
        elif kind is None:
            out.append(Form("plain", form.shape, np.dtype(weight.dtype)))
        elif kind == "float32":
            out.append(Form("plain", form.shape, np.dtype(np.float32)))
        elif kind == "bfloat16":
            out.append(Form("bfloat16", form.shape, np.dtype(np.uint16)))
        else:
            out.append(Form("int8", form.shape, np.dtype(np.uint8), opt.moment_signs()[name]))
    return out


def members(name, form):
    """``{member name: (shape, dtype)}`` of slot ``name`` (``state/<i>/<j>``) held as
    ``form``."""
    out = {name: (form.shape, form.dtype)}
    if form.kind == "int8":
        n = int(np.prod(form.shape, dtype=np.int64))
        out[name + ABSMAX] = ((lowbit.blocks_of(n),), np.dtype(np.float32))
    return out


def entry(form):
    """The metadata entry of a slot held as ``form`` (a plain one's as in version 2)."""
    e = {"shape": [int(n) for n in form.shape],
         "dtype": form.dtype.name if form.kind == "plain" else form.kind}
    if form.kind == "int8":
        e["map"] = "signed" if form.signed else "unsigned"
    return e


def stored(name, leaf, copies=True):
    """``{member name: host array}`` of live slot ``leaf`` named ``name``: copies that no
    later step changes (``copies``), else the live arrays (a bfloat16 slot as its uint16
    bits, a view)."""
    def host(a):
        # np.array, not np.ascontiguousarray: that one makes a 0-d array 1-d
        return np.array(arrays.to_host(a), order="C", copy=True) if copies else a
    if type(leaf) is lowbit.Quantized:
        return {name: host(leaf.codes), name + ABSMAX: host(leaf.absmax)}
    if np.dtype(arrays.describe(leaf).dtype) == lowbit.BFLOAT16:
        return {name: host(np.asarray(leaf).view(np.uint16))}
    return {name: host(leaf)}


def check_values(form, loaded, name):
    """Why the arrays of slot ``name`` held as ``form`` are not valid values, or None: an int8
    slot's block maxima must be finite and >= 0 (a quantized block's maximum is)."""
    if form.kind != "int8":
        return None
    scales = loaded[name + ABSMAX]
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(scales) & (scales >= 0))
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        return (f"block maximum {k} of {name} is {float(scales[k])!r}; block maxima are finite "
                "and >= 0")
    return None


def values(form, loaded, name):
    """The float64 values slot ``name`` of the file stands for (held as ``form``), exactly."""
    a = loaded[name]
    if form.kind == "int8":
        q = lowbit.Quantized(a, loaded[name + ABSMAX],
                             lowbit.SIGNED if form.signed else lowbit.UNSIGNED)
        return lowbit.dequantize(q).astype(np.float64)
    if form.kind == "bfloat16":
        return np.asarray(a).view(lowbit.BFLOAT16).astype(np.float64)
    return np.asarray(a).astype(np.float64)


def held_as(leaf, vals):
    """``[(array of the live slot leaf, host array)]``: the float64 ``vals`` held as ``leaf``
    holds its values (``HeldStates.store_values``' rule: rounded to float32, then to bfloat16 or
    quantized with the slot's map; a plain slot rounded once to its dtype), ready to copy."""
    if type(leaf) is lowbit.Quantized:
        q = lowbit.quantize(vals.astype(np.float32), leaf.qmap)
        return [(leaf.codes, q.codes), (leaf.absmax, q.absmax)]
    if np.dtype(arrays.describe(leaf).dtype) == lowbit.BFLOAT16:
        return [(leaf, lowbit.to_bfloat16(vals.astype(np.float32)))]
    return [(leaf, vals.astype(arrays.describe(leaf).dtype))]


def copies(leaf, file_form, loaded, name):
    """``[(array of the live slot leaf, host array)]`` that put slot ``name`` of the file (held
    as ``file_form``) into ``leaf``: its arrays as they are when it is held as ``leaf`` is,
    else its values held as ``leaf`` holds them (:func:`held_as`)."""
    own = form_of(leaf)
    if own != file_form:
        return held_as(leaf, values(file_form, loaded, name))
    if own.kind == "int8":
        return [(leaf.codes, loaded[name]), (leaf.absmax, loaded[name + ABSMAX])]
    if own.kind == "bfloat16":
        return [(np.asarray(leaf).view(np.uint16), loaded[name])]
    return [(leaf, loaded[name])]
