"""Check an optimizer implementation against the float64 oracle, with a rigorous error bound.

The oracle (``reference.<name>.step``) runs on :class:`reference.error_bound.Tracked` copies of
the inputs the implementation saw and yields the float64 result with a first-order bound ``E`` on
the rounding error in the implementation's precision. The *normalised error* of an element is
``|out - ref| / (C*E)``, ``C = 4`` (2 for the oracle's own rounding, 2 for the first-order
model); a check passes when it is at most 1 everywhere but at branch points (near ties).

``step_errors`` checks one step, ``trajectory_errors`` a free-running trajectory,
``check_function`` a user's update function. ``toolkit.verify`` is a deprecated alias of this
module.
"""
from __future__ import annotations

import numpy as np

from reference.error_bound import Tracked, track, unit_roundoff
from reference.error_bound import overflow_threshold as _overflow_threshold

from .backends.arrays import to_host

__all__ = ["SAFETY", "normalised_error", "element_errors", "overflowed", "overflow_mask",
           "overflow_threshold", "further_beyond", "depends", "finite_score", "compare", "reference_call", "step_errors", "trajectory_errors",
           "check_function"]

#: The factor C of the bound |out - ref| <= C*E (see the module docstring).
SAFETY = 4.0


def normalised_error(out, ref, storage=None, skip=None) -> tuple[float, int, int]:
    """``(worst |out-ref|/(C*E), elements checked, near ties exempted)`` for a Tracked ``ref``.

    ``skip``: a boolean mask of elements not compared (they depend on a value an earlier step
    correctly rounded to infinity, whose exact value is only known to be beyond the range:
    :func:`depends`); they count neither as checked nor as ties.

    ``storage``: a dtype narrower than the arithmetic that ``out`` was rounded to when stored
    (float16 weights without multi_precision: float32 arithmetic, float16 storage). That last
    rounding adds at most half an ulp of ``storage`` at the result, which the allowance adds to
    ``C*E`` exactly (nothing else is widened).

    An infinite ``out`` stands for every value from the dtype's overflow threshold on: where the
    reference lies beyond the range with the same sign it is exact (error 0), elsewhere it is as
    far from the reference as the threshold is. The per-element errors: :func:`element_errors`.
    """
    ratio = element_errors(out, ref, storage)
    tie = ref.tie
    if skip is not None:
        skip = np.broadcast_to(np.asarray(skip, dtype=bool), ratio.shape)
        ratio = np.where(skip, 0.0, ratio)
        tie = tie & ~skip
    skipped = int(np.count_nonzero(skip)) if skip is not None else 0
    worst = float(np.max(ratio)) if ratio.size else 0.0
    return (worst, int(ratio.size - skipped - np.count_nonzero(tie)),
            int(np.count_nonzero(tie)))


def element_errors(out, ref, storage=None) -> np.ndarray:
    """The normalised error of every element of ``out`` against Tracked ``ref`` (the array
    whose maximum :func:`normalised_error` reports): 0 at near ties, ``inf`` where the bound
    cannot hold (a NaN against a number), never NaN."""
    out = np.asarray(out, dtype=np.float64)
    v, e, tie = ref.value, ref.err, ref.tie
    allowed = SAFETY * e
    same = np.isnan(out) & np.isnan(v)
    if storage is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            rounded = v.astype(storage)
            # beyond the storage range round-to-nearest gives the infinity of the same sign
            same |= np.isinf(rounded) & (out == rounded)
            ulp = np.spacing(np.abs(np.where(np.isfinite(rounded), rounded, 0)))
        allowed = allowed + 0.5 * ulp.astype(np.float64)  # halved in float64: no underflow
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(out - v))
        # an infinity is every value from the overflow threshold on (round to nearest): it is
        # as far from the reference as the threshold is, so it is exact when the reference lies
        # beyond the dtype's range with the same sign (the correctly rounded result is inf)
        top = overflow_threshold(storage if storage is not None else _dtype_of(ref))
        gap = np.where(np.abs(v) >= top, 0.0, top - np.abs(v))
        diff = np.where(np.isinf(out) & (np.sign(out) == np.sign(v)), gap, diff)
    diff = np.where(np.isnan(diff), np.inf, diff)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, diff / allowed)
    ratio = np.where(np.isnan(ratio), np.inf, ratio)  # an infinite difference over infinite E
    return np.where(tie, 0.0, ratio)


def overflowed(out, ref, storage=None) -> bool:
    """Whether some element of ``out`` is the infinity that a reference beyond the dtype's range
    rounds to (:func:`overflow_mask`)."""
    return bool(np.any(overflow_mask(out, ref, storage)))


def overflow_mask(out, ref, storage=None) -> np.ndarray:
    """Per element of ``out``: whether it is the infinity that a reference beyond the dtype's
    range rounds to (exact by :func:`element_errors`). In a free-running trajectory such an
    element goes on from an infinity (and ``inf - inf`` is NaN) where the float64 reference goes
    on from a finite value, and the bound models no overflow: every later element whose
    reference depends on that value (:func:`depends`) is not compared; every other element is,
    as usual."""
    out = np.asarray(out, dtype=np.float64)
    v = ref.value
    top = overflow_threshold(storage if storage is not None else _dtype_of(ref))
    with np.errstate(invalid="ignore"):
        return np.isinf(out) & (np.sign(out) == np.sign(v)) & (np.abs(v) >= top)


def further_beyond(x, mask):
    """Tracked ``x`` with the elements of ``mask`` doubled: another value beyond the range with
    the same sign, as exact a stand-in for what the implementation's infinity means as the
    reference's own value. A trajectory continued from it beside the reference's tells which
    later elements depend on the overflowed ones (:func:`depends`)."""
    with np.errstate(over="ignore"):
        value = np.where(mask, 2.0 * x.value, x.value)
    return Tracked(value, x.err, x.tie, u=x.u, tiny=x.tiny)


def depends(a, b) -> np.ndarray:
    """Per element: whether two reference values (Tracked or arrays), computed from inputs that
    differ only in values beyond the range, differ (NaN equals NaN): the element depends on a
    value whose exact size is unknown, and is not compared."""
    a = a.value if isinstance(a, Tracked) else np.asarray(a, dtype=np.float64)
    b = b.value if isinstance(b, Tracked) else np.asarray(b, dtype=np.float64)
    return ~((a == b) | (np.isnan(a) & np.isnan(b)))


def overflow_threshold(dtype) -> float:
    """The smallest magnitude that ``dtype`` rounds to infinity (round to nearest): its largest
    finite value plus half an ulp; ``inf`` for float64 (no float64 value is beyond its range).
    The same threshold past which the oracle's bound flags what is computed from a value
    (``reference.error_bound.overflow_threshold``)."""
    return _overflow_threshold(dtype)


def _dtype_of(ref):
    """The precision a Tracked value's bound is for (its unit roundoff names it)."""
    for dt in (np.float16, np.float32):
        if ref.u == unit_roundoff(dt):
            return dt
    return np.float64


def finite_score(x) -> float:
    """``x`` as a value ``hypothesis.target`` accepts (a finite float): an infinite or NaN
    error is scored as the largest float, so the search still climbs towards it."""
    x = float(x)
    return x if np.isfinite(x) else float(np.finfo(np.float64).max)


def compare(outputs: dict, refs: dict, storage=None, skip=None) -> dict:
    """Normalised errors per named output: ``{name: (worst, checked, ties)}`` (``skip``: per
    name, the elements not compared, as :func:`normalised_error`)."""
    skip = skip or {}
    return {k: normalised_error(outputs[k], refs[k], storage, skip.get(k)) for k in refs}


def tracked_extra(extra, dtype):
    """The reference's bookkeeping with its arrays tracked (exact inputs of the step)."""
    return {k: (track(np.asarray(v, np.float64), dtype) if isinstance(v, np.ndarray) else v)
            for k, v in extra.items()}


def reference_of(opt):
    """The oracle module of toolkit optimizer ``opt`` (the one its spec names: a plug-in's may
    live outside the ``reference`` package)."""
    ref = opt.reference_module()
    if ref is None:
        raise ValueError(f"{type(opt).__name__} has no oracle (its spec names no reference "
                         "module): nothing to check it against")
    return ref


def _reference_of_name(name):
    """The oracle module of registry name ``name`` (its spec's ``reference``)."""
    from .optimizers.registry import specs
    spec = specs(oracle=True).get(str(name).lower())
    if spec is None:
        raise ValueError(f"unknown optimizer {name!r} (or one without an oracle); the oracle "
                         f"knows {', '.join(specs(oracle=True))}")
    return spec.reference_module()


def reference_call(opt, index, weight, grad, state, step, dtype):
    """Run the oracle for the step ``step`` (``opt.next_step(index, weight)``) of toolkit
    optimizer ``opt`` on Tracked copies of its inputs. ``state`` is the toolkit state before the
    step. Returns ``(w_ref, state_ref_dict)``."""
    ref = reference_of(opt)
    st = {name: track(np.asarray(a, dtype=np.float64), dtype)
          for name, a in zip(opt.state_slots(), opt.state_arrays(state))}
    st.update(tracked_extra(step.reference_state, dtype))
    return ref.step(track(weight.astype(np.float64), dtype),
                    track(grad.astype(np.float64), dtype), st, t=step.t, lr=step.lr,
                    wd=step.wd, rescale_grad=opt.rescale_grad, clip_gradient=opt.clip_gradient,
                    convention=opt.convention, **opt.reference_hyper_for(dtype),
                    **step.reference_kwargs)


def _copy_state(state):
    """A host snapshot of a (nested) state, never a view."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(_copy_state(s) for s in state)
    return to_host(state).copy()


def step_errors(opt, index, weight, grad, state, **update_kwargs):
    """Apply one ``update`` of ``opt`` in place and return the normalised errors of the weight
    and every state slot against the oracle: ``{name: (worst, checked, ties)}``.

    Works on every backend: CUDA arrays are copied to the host for the oracle and the comparison
    (the update itself runs on them in place). Float16 weights with multi_precision are checked
    through their float32 master copy (and the float16 weight must equal the rounded master
    exactly: reported as ``weight16``).
    """
    mp = opt.uses_master(weight)
    if mp:
        master, inner = opt.split_master(state)
        w_in, s_in, dtype = _copy_state(master), _copy_state(inner), np.float32
        g_in = to_host(grad).astype(np.float32)
    else:
        w_in, s_in, g_in = _copy_state(weight), _copy_state(state), _copy_state(grad)
        dtype = w_in.dtype if w_in.dtype != np.float16 else np.float32
    # the reference must see the optimizer's bookkeeping *before* the step
    w_ref, st_ref = reference_call(opt, index, w_in, g_in, s_in, opt.next_step(index, w_in),
                                   dtype)
    if mp:
        opt.update_multi_precision(index, weight, grad, state, **update_kwargs)
        out_w, out_state = master, inner
    else:
        opt.update(index, weight, grad, state, **update_kwargs)
        out_w, out_state = weight, state
    outputs = {"weight": to_host(out_w)}
    refs = {"weight": w_ref}
    for name, a in zip(opt.state_slots(), opt.state_arrays(out_state)):
        outputs[name] = to_host(a)
        refs[name] = st_ref[name]
    # float16 storage without a master copy: the result is rounded to float16 when stored
    storage = np.float16 if (not mp and w_in.dtype == np.float16) else None
    result = compare(outputs, refs, storage)
    if mp:
        same = np.array_equal(to_host(weight), outputs["weight"].astype(np.float16), equal_nan=True)
        result["weight16"] = (0.0 if same else np.inf, int(np.size(outputs["weight"])), 0)
    return result


def trajectory_errors(opt, index, weight, grads, state):
    """Free-running: ``len(grads)`` updates of ``opt`` from ``(weight, state)`` against one
    oracle trajectory whose error bound accumulates. Returns the worst normalised error per
    output over all steps. Where an output correctly overflows to infinity (:func:`overflow_mask`)
    the steps after it compare every element as usual except those whose reference depends on
    the overflowed values: a second trajectory goes on beside the oracle's with those values
    moved further beyond the range (:func:`further_beyond`), and the elements where the two
    differ are not compared (:func:`depends`)."""
    w_host = to_host(weight)
    dtype = w_host.dtype if w_host.dtype != np.float16 else np.float32
    w_ref = track(w_host.astype(np.float64), dtype)
    slots = opt.state_slots()
    st_ref = {n: track(to_host(a).astype(np.float64), dtype)
              for n, a in zip(slots, opt.state_arrays(state))}
    worst: dict = {}
    ref = reference_of(opt)
    shadow = None  # (weight, state) of the trajectory with the overflowed values moved further
    for grad in grads:
        step = opt.next_step(index, w_host)
        # the oracle's own bookkeeping (from its previous step) wins over the optimizer's
        extra = tracked_extra(step.reference_state, dtype)
        g_ref = track(to_host(grad).astype(np.float64), dtype)

        def oracle_step(w, st):
            return ref.step(w, g_ref, {**extra, **st}, t=step.t, lr=step.lr, wd=step.wd,
                            rescale_grad=opt.rescale_grad, clip_gradient=opt.clip_gradient,
                            convention=opt.convention, **opt.reference_hyper_for(dtype),
                            **step.reference_kwargs)
        w_ref, st_new = oracle_step(w_ref, st_ref)
        st_ref = {k: v for k, v in st_new.items()}
        if shadow is not None:
            with np.errstate(all="ignore"):
                w_sh, sh_new = oracle_step(*shadow)
            shadow = (w_sh, {k: v for k, v in sh_new.items()})
        opt.update(index, weight, grad, state)
        outputs = {"weight": to_host(weight)}
        refs = {"weight": w_ref}
        for name, a in zip(slots, opt.state_arrays(state)):
            outputs[name] = to_host(a)
            refs[name] = st_ref[name]
        skip = {}
        if shadow is not None:
            skip = {k: depends(shadow[0] if k == "weight" else shadow[1][k], refs[k])
                    for k in refs}
        for k, v in compare(outputs, refs, skip=skip).items():
            if k not in worst or v[0] > worst[k][0]:
                worst[k] = v
        new = {k: overflow_mask(outputs[k], refs[k]) & ~skip.get(k, False) for k in refs}
        if any(np.any(m) for m in new.values()):
            w_sh, st_sh = shadow if shadow is not None else (w_ref, st_ref)
            shadow = (further_beyond(w_sh, new["weight"]),
                      {k: (further_beyond(v, new[k]) if k in new else v)
                       for k, v in st_sh.items()})
    return worst


def check_function(update, name, weight, grads, *, dtype=None, convention=None, t0=0,
                   lr=0.01, wd=0.0, rescale_grad=1.0, clip_gradient=None, **hyper):
    """Check a user's own update function against the oracle, step by step (resynchronised).

    ``update(weight, grad, state, t)`` must update the numpy arrays ``weight`` and ``state``
    (a dict of arrays named as ``reference.<name>.STATE``) in place, in precision ``dtype``.
    Returns a list, per step, of ``{output: (worst normalised error, checked, ties)}``; a worst
    value above 1 means the function does not compute the equations of ``convention``. An
    infinity in the weight or state a step starts from (an earlier step correctly rounded a
    result beyond the range) is only known to be beyond the range: the elements whose result
    depends on it are not compared, every other element is.

    Example::

        >>> import numpy as np
        >>> from toolkit.error_bounds import check_function
        >>> def my_sgd(w, g, state, t):
        ...     w -= np.float32(0.1) * g
        >>> w = np.ones(4, np.float32)
        >>> res = check_function(my_sgd, "sgd", w, [np.ones(4, np.float32)] * 3, lr=0.1)
        >>> all(r["weight"][0] <= 1 for r in res)
        True
    """
    ref = _reference_of_name(name)
    if convention is None:  # the optimizer's default: its reference's first
        convention = ref.CONVENTIONS[0]
    dtype = np.dtype(dtype or weight.dtype)
    state = {k: np.asarray(v, dtype=dtype) for k, v in ref.init_state(weight, **hyper).items()
             if isinstance(v, np.ndarray)}
    extra = {k: v for k, v in ref.init_state(weight, **hyper).items() if not isinstance(v, np.ndarray)}
    results = []
    # an infinite input (a value an earlier step correctly rounded to infinity) is only known to
    # be beyond the range: the oracle runs from two stand-ins beyond it, and an element whose
    # result differs between them depends on it and is not compared (every other one is)
    far = overflow_threshold(dtype)
    far = 2.0 * far if np.isfinite(far) else np.finfo(np.float64).max / 4

    def tracked(a, size=1.0):
        a = np.asarray(a, dtype=np.float64)
        return track(np.where(np.isinf(a), np.sign(a) * far * size, a), dtype)
    for k, grad in enumerate(grads):
        t = t0 + k + 1
        runs = []
        for size in (1.0, 2.0):
            st_in = {n: tracked(a, size) for n, a in state.items()}
            st_in.update(extra)
            with np.errstate(all="ignore"):
                runs.append(ref.step(tracked(weight, size),
                                     track(np.asarray(grad, np.float64), dtype), st_in, t=t,
                                     lr=lr, wd=wd, rescale_grad=rescale_grad,
                                     clip_gradient=clip_gradient, convention=convention,
                                     **hyper))
            if not any(np.isinf(a).any() for a in (weight, *state.values())):
                break  # all inputs finite: one run
        (w_ref, st_ref) = runs[0]
        update(weight, grad, state, t)
        outputs = {"weight": weight, **state}
        refs = {"weight": w_ref, **{n: st_ref[n] for n in state}}
        skip = {}
        if len(runs) == 2:
            w2, st2 = runs[1]
            skip = {n: depends(refs[n], w2 if n == "weight" else st2[n]) for n in refs}
        results.append(compare(outputs, refs, skip=skip))
        extra = {k2: v for k2, v in st_ref.items() if k2 not in state and not isinstance(v, Tracked)}
    return results


def unit(dtype):
    """Unit roundoff of ``dtype`` (re-exported for reports)."""
    return unit_roundoff(dtype)
