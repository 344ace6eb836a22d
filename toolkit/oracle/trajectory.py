"""The reference side of the oracle: an optimizer's reference module and conventions, the
reference trajectory of a case (each weight with its rounding bound), and the comparison of a
user's weights with it, in bounds."""
from __future__ import annotations

import numpy as np

from ..optimizers.spec import CONVENTIONS, DEFAULT_CONVENTIONS
from . import installed as _installed
from .errors import unknown_optimizer

__all__ = ["ORDER", "reference_module", "spec_of", "conventions_of", "convention_or_default",
           "resolve_convention",
           "split", "reference_trajectory", "compare"]

#: the order in which a convention is named when several match (ours first): every known
#: convention, in the order :data:`toolkit.optimizers.spec.CONVENTIONS` lists them
ORDER = CONVENTIONS


def reference_module(name):
    """The reference module of optimizer ``name`` (the installed ``reference`` package's, even
    where a user's module of that name is on ``sys.path``: :mod:`toolkit.oracle.installed`)."""
    from ..optimizers.registry import specs
    _installed.ensure_reference()
    if not isinstance(name, str):
        raise TypeError(f"optimizer must be a registry name such as 'adam', got {name!r}")
    spec = specs(oracle=True).get(name.lower())
    if spec is None:
        raise ValueError(unknown_optimizer(name, specs(oracle=True)))
    if spec.noise:
        raise ValueError(f"{spec.name} adds random noise to every step, so its result cannot be "
                         "compared with an implementation's own draws; verify its deterministic "
                         "part as the optimizer without the noise (sgld: sgd), or use "
                         "toolkit.error_bounds with the noise of reference.noise")
    return spec.reference_module()


def spec_of(name):
    """The registry's spec of optimizer ``name``."""
    from ..optimizers.registry import spec_of as registry_spec_of
    return registry_spec_of(name)


def conventions_of(name):
    """``(implemented, pytorch)``: the conventions the reference implements for optimizer
    ``name``, and what PyTorch's update is for it: "pytorch" (its own branch), one of ours when
    PyTorch's update is the same, or None (PyTorch has no such optimizer)."""
    ref = reference_module(name)
    implemented = tuple(getattr(ref, "CONVENTIONS", DEFAULT_CONVENTIONS))
    return implemented, getattr(ref, "PYTORCH", None)


def convention_or_default(convention, name):
    """``convention``, or where it is None the optimizer's default: the first its reference
    implements ("mxnet" for MXNet's family, "pytorch" or "paper" for the newer ones)."""
    return conventions_of(name)[0][0] if convention is None else convention


def resolve_convention(convention, implemented, pytorch, name):
    """The convention whose equations the reference runs for ``convention``: itself, or for
    "pytorch" the one of ours that PyTorch's update is where the reference has no branch of its
    own; a ValueError where optimizer ``name`` has no such convention."""
    if convention == "pytorch":
        if pytorch is None:
            raise ValueError(f"PyTorch has no {name} optimizer: the oracle has no 'pytorch' "
                             f"convention for it (it has {implemented})")
        return pytorch  # "pytorch", or ours when PyTorch's update is the same
    if convention not in implemented:
        raise ValueError(f"convention must be one of {implemented} for {name}, got "
                         f"{convention!r}")
    return convention


def split(ref, hyper):
    """``(lr, wd, rs, c, own)``: the common hyperparameters and the module's own."""
    own = {k: v for k, v in hyper.items() if k in ref.HYPER and k != "learning_rate"}
    return (hyper["learning_rate"], hyper["wd"], hyper["rescale_grad"], hyper["clip_gradient"],
            own)


def reference_trajectory(ref, case, convention, dtype, moved=None, variant=None):
    """The Tracked weight after every step of ``case`` under ``convention`` (free-running: the
    bound accumulates from step to step, as the user's state is not visible). ``moved``:
    ``{step: mask}``, weight elements moved further beyond the range after that step
    (:func:`toolkit.error_bounds.further_beyond`), for :func:`compare`. ``variant``: a
    :class:`~toolkit.oracle.variants.Variant` of the equations to run instead."""
    from reference.error_bound import Tracked, track

    from ..error_bounds import further_beyond
    moved = moved or {}
    hyper, extra = (case.hyper, {}) if variant is None else variant.changes(case.hyper, ref)
    lr, wd, rs, c, own = split(ref, hyper)
    w = track(case.weight, dtype)
    state = {k: (track(v, dtype) if isinstance(v, np.ndarray) else v)
             for k, v in ref.init_state(case.weight, **own).items()}
    out = []
    with np.errstate(all="ignore"):
        for t, g in enumerate(case.grads, start=1):
            w, state = ref.step(w, track(g, dtype), state, t=t, lr=lr, wd=wd, rescale_grad=rs,
                                clip_gradient=c, convention=convention, **extra, **own)
            state = {k: v for k, v in state.items()}
            w = w if isinstance(w, Tracked) else track(w, dtype)
            if t in moved:
                w = further_beyond(w, moved[t])
            out.append(w)
    return out


def compare(outs, refs, rerun):
    """``(worst, step, element, expected, got)`` over the user's steps against a trajectory.
    Where the user's weight correctly overflows to infinity, the later steps compare every
    element except those whose reference depends on the overflowed values: ``rerun(moved)``
    (:func:`reference_trajectory` with ``moved``) gives the trajectory with those values moved
    further beyond the range, and the elements where it differs are not compared."""
    from ..error_bounds import depends, element_errors, overflow_mask
    worst = (0.0, None, None, None, None)
    moved, shadow = {}, None
    for t, (out, ref) in enumerate(zip(outs, refs), start=1):
        skip = (depends(shadow[t - 1], ref) if shadow is not None
                else np.zeros(ref.shape, dtype=bool))
        with np.errstate(all="ignore"):
            per = np.where(skip, 0.0, element_errors(out, ref)).reshape(-1)
        err = float(np.max(per)) if per.size else 0.0
        if err > worst[0] or worst[1] is None:
            i = int(np.argmax(per))
            worst = max(worst, (err, t, i, float(ref.value.reshape(-1)[i]),
                                float(out.reshape(-1)[i])), key=lambda w: w[0])
        new = overflow_mask(out, ref) & ~skip
        if np.any(new) and t < len(outs):
            moved[t] = new
            shadow = rerun(dict(moved))
    return worst
