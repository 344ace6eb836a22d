"""Check a step with states held below float32 (``state_dtype``) against the oracle, code for
code.

:func:`held_step_errors` runs ``reference.lowbit.step``: the oracle's float64 step on Tracked
copies of the inputs, its held slots entering as the values they stand for, exactly; each new
slot is held again from the oracle's value. A kernel computes the new moments in its own
precision, within the oracle's bound of the exact values, and holds them: its held values
(bfloat16 values, int8 codes) must equal the oracle's except where the oracle finds that a
rounding within the bound could hold a value otherwise (``reference.lowbit.flips``: a value
within its bound of a bfloat16 rounding boundary or of a code's midpoint, or in a block whose
maximum is itself uncertain). Those are counted, never tolerated wholesale; the weight and an
int8 slot's block maxima are held to the bound as every output is
(:mod:`toolkit.error_bounds`).
"""
from __future__ import annotations

import numpy as np

from reference import lowbit as ref_lowbit
from reference.error_bound import track

from .error_bounds import SAFETY, reference_of, tracked_extra, normalised_error

__all__ = ["held_form", "held_step_errors"]


def held_form(a):
    """A toolkit state slot as ``reference.lowbit`` holds it: ``(codes, absmax)`` copies of an
    int8 slot, float32 values of a bfloat16 or float32 one."""
    codes = getattr(a, "codes", None)
    if codes is not None:
        return np.array(codes, np.uint8), np.array(a.absmax, np.float32)
    return np.asarray(a).astype(np.float32)


def _block_maxima(values, n):
    """Per block of the flattened ``values``: the largest magnitude."""
    flat = np.abs(np.asarray(values, np.float64).reshape(-1))
    cuts = range(ref_lowbit.BLOCK, n, ref_lowbit.BLOCK)
    return np.array([c.max() for c in np.split(flat, cuts)])


def _same(a, b):
    """Element-wise equality with a NaN equal to a NaN."""
    with np.errstate(invalid="ignore"):
        return (a == b) | (np.isnan(a) & np.isnan(b)) if a.dtype.kind == "f" else a == b


def held_step_errors(opt, index, weight, grad, state):
    """Apply one ``update`` of ``opt`` (numpy arrays, ``opt.state_dtype`` set) in place and
    check it against the oracle (module docstring): ``{name: (worst, checked, exempt)}`` as
    :func:`toolkit.error_bounds.compare` reports, where for a held slot ``worst`` is 0 when
    every held value is the oracle's or a counted flip (``exempt`` of them) and infinity
    otherwise, and ``"<slot>.absmax"`` is an int8 slot's block maxima against the bound."""
    ref = reference_of(opt)
    dtype = weight.dtype
    slots = opt.state_slots()
    arrays_ = opt.state_arrays(state)
    kinds = {n: opt.held_dtype(n, weight) for n in slots}
    held_kind = {k for k in kinds.values() if k is not None}
    if len(held_kind) != 1:
        raise ValueError(f"held_step_errors checks a step whose moments are held in one "
                         f"state_dtype; this one holds {sorted(map(str, kinds.values()))}")
    state_dtype = held_kind.pop()
    signs = opt.moment_signs()
    held = {n: held_form(a) for n, a in zip(slots, arrays_) if kinds[n] is not None}
    plain = {n: track(np.asarray(a, np.float64), dtype)
             for n, a in zip(slots, arrays_) if kinds[n] is None}
    step = opt.next_step(index, weight)
    extra = {**tracked_extra(step.reference_state, dtype), **plain}
    key = opt.rounding_key(index, step.t)  # a stochastic rounding's: the same bits as the kernel
    bits = None if key is None else {n: ref_lowbit.rounding_bits(key, weight.size, j)
                                     for j, n in enumerate(slots) if n in held}
    w_in, g_in = weight.astype(np.float64), np.asarray(grad).astype(np.float64)
    w_ref, ref_held, new, flipped = ref_lowbit.step(
        ref, track(w_in, dtype), track(g_in, dtype), held, state_dtype=state_dtype,
        signs={n: signs[n] for n in held}, scale=SAFETY, extra=extra, bits=bits, t=step.t,
        lr=step.lr,
        wd=step.wd, rescale_grad=opt.rescale_grad, clip_gradient=opt.clip_gradient,
        convention=opt.convention, **opt.reference_hyper_for(dtype), **step.reference_kwargs)
    opt.update(index, weight, grad, state)
    out = {"weight": normalised_error(weight, w_ref)}
    for name, a in zip(slots, opt.state_arrays(state)):
        if name not in held:
            out[name] = normalised_error(np.asarray(a), new[name])
            continue
        mine, theirs, x = held_form(a), ref_held[name], new[name]
        if state_dtype == "int8":
            n = mine[0].size
            top = _block_maxima(x.value, n)
            err = SAFETY * _block_maxima(x.err, n)
            if dtype != np.float32:  # the values were rounded to float32 before their maximum
                err = err + np.spacing(top.astype(np.float32)).astype(np.float64) / 2
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = np.where(_same(mine[1].astype(np.float64), top), 0.0,
                                 np.abs(mine[1] - top) / err)
            out[f"{name}.absmax"] = (float(np.nanmax(np.where(np.isnan(ratio), np.inf, ratio))),
                                     int(top.size), 0)
            mine, theirs = mine[0], theirs[0]
        if state_dtype == "float32":  # a float32 value: within the bound, its rounding added
            out[name] = normalised_error(mine, x, storage=np.float32)
            continue
        off = ~_same(mine.reshape(-1), np.asarray(theirs).reshape(-1))
        exempt = np.asarray(flipped[name]).reshape(-1)
        worst = np.inf if np.any(off & ~exempt) else 0.0
        out[name] = (worst, int(off.size - np.count_nonzero(exempt)),
                     int(np.count_nonzero(exempt)))
    return out
