"""Moments held below the weight's precision (``state_dtype``) in a Trainer.

A group whose optimizer holds some member's moments low keeps each member's state as the
member's own ``create_state_multi_precision`` for its own weight view (a view of the group's
flat weight buffer): an int8 slot's blocks of 256 elements never straddle two parameters, each
parameter's block maxima are its own, and a parameter below ``held.INT8_MIN_SIZE`` elements
keeps its default state, exactly as per-parameter ``optimizer.update`` calls keep them. The
weights and gradients stay in the group's flat buffers; a step plans each member's launch, the
launch ``optimizer.update`` would run, and runs them together (``plan.StepWork``: one parallel
call of ``cpu_lowbit.run_held_many`` over every block of the group's members, one more for the
members below the int8 size), so the numbers are those of the per-parameter calls, bit for
bit and code for code.

What a held state is refused with, before anything is made or written: CUDA parameters (no
held kernels there yet), float16 parameters (the held kernels step float32 and float64
weights), row-sparse gradients (a row touches part of a block) and the distributed kvstores
(their broadcasts and digests read flat state buffers).
"""
from __future__ import annotations

import numpy as np

from ..backends import lowbit

__all__ = ["refuse_unsupported", "check_convert", "per_member", "state_arrays"]


def refuse_unsupported(opt, params, distributed):
    """Raise, before any group is built, when ``opt.state_dtype`` is set and a parameter of
    ``params`` (those with a gradient) or the kvstore (``distributed``) cannot hold it."""
    sd = getattr(opt, "state_dtype", None)
    if sd is None:
        return
    if distributed:
        raise NotImplementedError(
            f"state_dtype={sd!r} with a distributed kvstore is not implemented (its broadcasts "
            "and checks read flat float state buffers): use kvstore='device', or "
            "state_dtype=None")
    for p in params:
        if p.grad_req == "null":
            continue
        if p.device == "cuda":
            raise NotImplementedError(
                f"state_dtype={sd!r} holds states on the CPU only; parameter {p.name!r} lives on "
                "the GPU (CUDA has no held kernels yet): use state_dtype=None for GPU parameters")
        if np.dtype(p.dtype) == np.float16:
            raise TypeError(
                f"state_dtype={sd!r} steps float32 and float64 weights; parameter {p.name!r} is "
                "float16 (for float16 weights use multi_precision=True without state_dtype)")
        if p.grad_stype == "row_sparse":
            raise NotImplementedError(
                f"state_dtype={sd!r} with a row-sparse gradient (parameter {p.name!r}) is not "
                "implemented: a row touches part of a block; use grad_stype='default' or "
                "state_dtype=None")


def check_convert(convert_states, distributed):
    """``load_states``' ``convert_states``: True or False; a distributed load converts
    nothing (a distributed Trainer holds no ``state_dtype``)."""
    if convert_states is not True and convert_states is not False:
        raise TypeError(f"convert_states must be True or False, got {convert_states!r}")
    if convert_states and distributed:
        raise NotImplementedError("convert_states=True with a distributed kvstore is not "
                                  "implemented: convert the file in one process (load it "
                                  "with convert_states=True, save_states) first")


def per_member(opt, members):
    """Whether a group of ``members`` (``[(index, Parameter)]``) keeps each member's state on
    its own: when ``opt`` holds any member's moments otherwise than by the default rule. (A
    group whose every parameter is below the int8 size keeps the default state, in flat
    buffers, as without ``state_dtype``.)"""
    if getattr(opt, "state_dtype", None) is None:
        return False
    return any(opt.holds_low(p.data()) for _, p in members)


def state_arrays(state):
    """The arrays of a (nested) state, in order, an int8 slot's codes and block maxima in
    turn (``buffers.state_leaves``, with each ``Quantized`` opened)."""
    if state is None:
        return []
    if isinstance(state, tuple):
        return [a for s in state for a in state_arrays(s)]
    if type(state) is lowbit.Quantized:
        return [state.codes, state.absmax]
    return [state]
