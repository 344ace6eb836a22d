"""The oracle's side of a regression test of a user's optimizer: its fixed cases, the
reference's weights on them, and the user's ``make_step`` run on them.

``mxopt regress record --target`` (:mod:`toolkit.tools.regress.users`) stores what
:func:`cases` and :func:`reference_weights` give, and :func:`run_user`'s weights, so that a
later run can say which weights moved and whether toward or away from the reference. The cases
are ``verify``'s (:func:`toolkit.oracle.cases.draw` at the same seed and domain: case ``k`` is
the same in every run and every process); the reference is the float64 oracle evaluated as
``verify`` evaluates it for ``dtype`` (:func:`reference.error_bound.track`: a convention that
forms its constants in the dtype forms them there), free-running from the case's weight.
"""
from __future__ import annotations

import numpy as np

from . import cases as _cases
from . import installed as _installed
from . import space as _space
from . import user as _user
from .core import RANGES, conventions_of
from .seeds import DEFAULT_SEED, resolve_seed

__all__ = ["cases", "equations", "reference_weights", "run_user", "COMMON"]

#: the hyperparameters every optimizer shares, MXNet's names (the others are the reference
#: module's ``HYPER``)
COMMON = ("learning_rate", "wd", "rescale_grad", "clip_gradient")


def _reference(optimizer):
    from ..optimizers.registry import spec_of
    conventions_of(optimizer)  # a known optimizer whose steps can be compared (no noise)
    _installed.ensure_reference()
    return spec_of(optimizer.lower()).reference_module()


def _constructible(optimizer):
    from .. import optimizer as _optimizer
    klass = _optimizer.registry().get(optimizer)

    def takes(hyper):
        if klass is None:
            return True
        try:
            klass(**hyper)
        except (ValueError, TypeError):
            return False
        return True
    return takes


def equations(optimizer, convention):
    """The convention whose equations the reference runs for ``convention``, as in
    ``verify``: itself, or for "pytorch" the one of ours that PyTorch's update is where the
    reference has no branch of its own; a ValueError where the optimizer has no such
    convention."""
    implemented, pytorch = conventions_of(optimizer)
    if convention == "pytorch" and pytorch is not None:
        return pytorch
    if convention not in implemented:
        raise ValueError(f"{optimizer} has the conventions {', '.join(implemented)}"
                         f"{'' if pytorch is None else ' and pytorch'}, not {convention!r}")
    return convention


def cases(optimizer, *, count, dtype="float32", fixed=None, seed=DEFAULT_SEED, domain="full"):
    """``[(k, case)]``: ``verify``'s cases 0 to ``count - 1`` of ``optimizer`` at ``seed`` in
    ``domain`` (:class:`toolkit.oracle.cases.Case`: ``hyper`` in MXNet's names, ``weight`` and
    ``grads`` as float64 values exact in ``dtype``), ``fixed`` hyperparameters pinned. An index
    whose draw the optimizer's constructor never takes beside the pinned values is left out,
    as in ``verify``."""
    ref = _reference(optimizer)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be an int >= 1, got {count!r}")
    dt = np.dtype(dtype)
    if dt.name not in RANGES:
        raise ValueError(f"dtype must be one of {tuple(RANGES)}, got {dtype!r}")
    fixed = dict(fixed or {})
    takes = _constructible(ref.NAME)
    if fixed and not takes(fixed):
        raise ValueError(f"fixed {fixed!r} is refused by the {ref.NAME} optimizer's constructor")
    space = _space.hyper_space(ref.NAME, fixed, domain)
    seed = resolve_seed(seed)
    out = []
    for k in range(count):
        case = _cases.draw(ref.NAME, space, dt, RANGES[dt.name], seed, domain, k, takes)
        if case is not None:
            out.append((k, case))
    return out


def reference_weights(optimizer, case, *, convention="mxnet", dtype="float32"):
    """The reference's weight after every step of ``case`` (float64 arrays) under
    ``convention`` (:func:`equations`), evaluated for ``dtype`` as ``verify`` evaluates it,
    free-running from the case's weight."""
    from reference.error_bound import Tracked, track
    ref = _reference(optimizer)
    convention = equations(optimizer, convention)
    dt = np.dtype(dtype)
    hyper = dict(case.hyper)
    own = {k: v for k, v in hyper.items() if k in ref.HYPER and k not in COMMON}
    w = track(case.weight, dt)
    state = {k: (track(v, dt) if isinstance(v, np.ndarray) else v)
             for k, v in ref.init_state(case.weight, **own).items()}
    out = []
    with np.errstate(all="ignore"):
        for t, g in enumerate(case.grads, start=1):
            w, state = ref.step(w, track(g, dt), state, t=t, lr=hyper["learning_rate"],
                                wd=hyper["wd"], rescale_grad=hyper["rescale_grad"],
                                clip_gradient=hyper["clip_gradient"], convention=convention,
                                **own)
            w = w if isinstance(w, Tracked) else track(w, dt)
            out.append(np.array(w.value, dtype=np.float64))
    return out


def run_user(make_step, case, *, dtype="float32", pinned=(), allow_wider=False):
    """``(weights, failure)``: the user's weight after every step of ``case`` in ``dtype`` (the
    dtype it returned, where it returned a wider one and ``allow_wider``), and None; or the
    weights of the steps that ran and what went wrong (an exception, a wrong shape or dtype:
    :func:`toolkit.oracle.user.run`). ``pinned``: the names ``fixed`` pinned; those
    ``make_step``'s signature does not take are not passed, as in ``verify``."""
    dt = np.dtype(dtype)
    drop = tuple(k for k in pinned if not _user.takes(make_step, k))
    outs, failure = _user.run(make_step, case, dt, allow_wider, drop)
    kept = np.dtype(getattr(outs, "returned", None) or dt)
    return [np.asarray(o, dtype=np.float64).astype(kept) for o in (outs or [])], failure
