"""The oracle's side of a regression test of a user's optimizer: its fixed cases, the
reference's weights on them, and the user's ``make_step`` run on them (stored by
``mxopt regress record --target``, :mod:`toolkit.tools.regress.users`). The cases are
``verify``'s (:func:`toolkit.oracle.cases.draw`); the reference is evaluated as ``verify``
evaluates it for ``dtype`` (:func:`reference.error_bound.track`), free-running from the case's
weight.
"""
from __future__ import annotations

import numpy as np

from . import cases as _cases
from . import space as _space
from . import user as _user
from .seeds import DEFAULT_SEED, resolve_seed
from .trajectory import (convention_or_default, conventions_of, reference_module,
                         reference_trajectory, resolve_convention)

__all__ = ["cases", "equations", "reference_weights", "run_user", "COMMON"]

#: the hyperparameters every optimizer shares, MXNet's names (the others are the reference
#: module's ``HYPER``)
COMMON = ("learning_rate", "wd", "rescale_grad", "clip_gradient")


def equations(optimizer, convention):
    """The convention whose equations the reference runs for ``convention``, as in
    ``verify`` (:func:`toolkit.oracle.trajectory.resolve_convention`): itself, or for
    "pytorch" the one of ours that PyTorch's update is where the reference has no branch of its
    own; a ValueError where the optimizer has no such convention."""
    implemented, pytorch = conventions_of(optimizer)
    convention = convention_or_default(convention, optimizer)
    try:
        return resolve_convention(convention, implemented, pytorch, optimizer)
    except ValueError:
        raise ValueError(f"{optimizer} has the conventions {', '.join(implemented)}"
                         f"{'' if pytorch is None else ' and pytorch'}, not {convention!r}"
                         ) from None


def cases(optimizer, *, count, dtype="float32", fixed=None, seed=DEFAULT_SEED, domain="full"):
    """``[(k, case)]``: ``verify``'s cases 0 to ``count - 1`` of ``optimizer`` at ``seed`` in
    ``domain`` (:class:`toolkit.oracle.cases.Case`: ``hyper`` in MXNet's names, ``weight`` and
    ``grads`` as float64 values exact in ``dtype``), ``fixed`` hyperparameters pinned. An index
    whose draw the optimizer's constructor never takes beside the pinned values is left out,
    as in ``verify``."""
    ref = reference_module(optimizer)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be an int >= 1, got {count!r}")
    dt = _cases.check_dtype(dtype)
    fixed = dict(fixed or {})
    klass = _cases.optimizer_class(ref.NAME)

    def takes(hyper):
        return _cases.constructible(klass, hyper)
    if fixed and not takes(fixed):
        raise ValueError(f"fixed {fixed!r} is refused by the {ref.NAME} optimizer's constructor")
    space = _space.hyper_space(ref.NAME, fixed, domain)
    seed = resolve_seed(seed)
    out = []
    for k in range(count):
        case = _cases.draw(ref.NAME, space, dt, _cases.RANGES[dt.name], seed, domain, k, takes)
        if case is not None:
            out.append((k, case))
    return out


def reference_weights(optimizer, case, *, convention=None, dtype="float32"):
    """The reference's weight after every step of ``case`` (float64 arrays) under
    ``convention`` (:func:`equations`), evaluated for ``dtype`` as ``verify`` evaluates it
    (:func:`toolkit.oracle.trajectory.reference_trajectory`), free-running from the case's
    weight."""
    ref = reference_module(optimizer)
    convention = equations(optimizer, convention)
    return [np.array(w.value, dtype=np.float64)
            for w in reference_trajectory(ref, case, convention, np.dtype(dtype))]


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
