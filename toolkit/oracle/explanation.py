"""The explanation of a failed run: the user's outputs of its cases compared with the other
conventions and with each known variant of the equations (:func:`explain`), and the region of
a failure of the full domain only (:func:`locate`)."""
from __future__ import annotations

import numpy as np

from . import cases as _cases
from . import region as _region_text
from . import space as _space
from . import variants as _variants
from .reports import Explanation
from .trajectory import ORDER, compare, reference_trajectory

__all__ = ["worst_under", "other_conventions", "explain", "locate"]


def worst_under(ref, convention, dt, seen, variant=None, limit=1.0):
    """The worst normalised error of the user's outputs ``seen`` against ``convention`` (and
    ``variant``), stopping at the first case beyond ``limit`` (the worst cases of the run come
    first: a wrong explanation is dropped after one case)."""
    worst = 0.0
    for case, outs, _ in sorted(seen, key=lambda s: -s[2]):
        err = compare(outs, reference_trajectory(ref, case, convention, dt, variant=variant),
                      lambda moved, case=case: reference_trajectory(
                          ref, case, convention, dt, moved, variant=variant))[0]
        worst = max(worst, err)
        if worst > limit:
            break
    return worst


def other_conventions(convention, pytorch, implemented):
    """The conventions other than ``convention``, in :data:`ORDER` ("pytorch" only where the
    reference has a branch of its own for it)."""
    return [c for c in ORDER if c in implemented and c != convention
            and (c != "pytorch" or pytorch == "pytorch")]


def explain(ref, convention, pytorch, implemented, dt, declared, seen, passes_under,
            under_error, max_error):
    """The :class:`Explanation` of a failed run whose cases and user outputs are ``seen``:
    another convention it passes (``passes_under``, found by ``verify``); else the first
    declared variant (:mod:`toolkit.oracle.variants`) of the asked convention's equations, then
    of another convention's, that every case agrees with; else the asked convention with the
    gradient's preprocessing not applied (``variants.CONTRACT``), or two declared variants at
    once, or both (:func:`_combinations`); else with the moments held otherwise
    (:func:`_held_explanation`); else another algorithm."""
    if passes_under is not None:
        return Explanation("convention", None, passes_under,
                           f"another convention: it passes the {passes_under!r} convention, "
                           f"not {convention!r}; pass convention={passes_under!r}",
                           under_error)
    tried = []
    for c in [convention] + other_conventions(convention, pytorch, implemented):
        for v in declared:
            if not v.applies(ref, c) or (v.name in _variants.SAME_IN_FLOAT64 and dt == np.float64):
                continue  # the convention's own values in float64: it explains no failure
            tried.append(v.name)
            err = worst_under(ref, c, dt, seen, variant=v)
            if err <= 1.0:
                what = ("the same equations, rounded differently" if v.rounding else
                        "the same algorithm, written differently")
                where = "" if c == convention else (
                    f", of the {c!r} convention's equations (pass convention={c!r})")
                return Explanation("variant", v.name, c,
                                   f"{what} (variant {v.name}: {v.description}){where}", err)
    found = _combinations(ref, convention, dt, declared, seen) or \
        _held_explanation(ref, convention, dt, seen)
    if found is not None:
        return found
    others = other_conventions(convention, pytorch, implemented)
    known = (f"no known variant of the equations ({', '.join(dict.fromkeys(tried))})"
             if tried else "no known variant of the equations (its spec declares none)")
    return Explanation("algorithm", None, None,
                       f"another algorithm (or a bug): {known} and no other convention "
                       f"({', '.join(others) or 'none'}) passes the failing cases", max_error)


def _applicable(ref, convention, dt, declared):
    """The declared variants that change the asked convention's equations at ``dt``."""
    return [v for v in declared if v.applies(ref, convention) and not (
        v.name in _variants.SAME_IN_FLOAT64 and dt == np.float64)]


#: how a contract variant reads in an explanation
_CONTRACT_TEXT = {"gradient_as_given": "the gradient taken as given",
                  "clip_not_applied": "the gradient never clipped"}


def _parts(v):
    """The single variants of ``v`` (a Variant, or a ``Together`` of them), in order."""
    if isinstance(v, _variants.Together):
        return _parts(v.first) + _parts(v.second)
    return [v]


def _text(candidate):
    """The explanation's line for ``candidate``: a contract variant (what was not applied, and
    the fix), with the declared ones it came with; or declared variants at once."""
    parts = _parts(candidate)
    head, rest = parts[0], parts[1:]
    listed = " and ".join(f"variant {v.name} ({v.description})" for v in rest)
    if head.name in _CONTRACT_TEXT:
        text = f"{_CONTRACT_TEXT[head.name]} (variant {head.name}: {head.description})"
        return text + (f", and {listed}" if rest else "")
    return (f"{['', '', 'two', 'three'][len(parts)]} variants at once ({candidate.name}): "
            f"variant {head.name} ({head.description}) and {listed}")


def _combinations(ref, convention, dt, declared, seen):
    """The explanation (or None) after the single variants, in the asked
    convention: the gradient's preprocessing not applied (``variants.CONTRACT``, where a case
    of the run holds what is not applied; never clipped first, the narrower), alone, then
    with each declared variant; two declared variants at once (where the reference's step
    takes a tuple of forms: a pair it does not take is skipped); each contract variant with
    such a pair. The first that every case agrees with explains the run."""
    clipped = any(case.hyper.get("clip_gradient") is not None for case, _, _ in seen)
    rescaled = any(case.hyper.get("rescale_grad", 1.0) != 1.0 for case, _, _ in seen)
    holds = {_variants.CLIP_NOT_APPLIED.name: clipped,
             _variants.GRADIENT_AS_GIVEN.name: clipped or rescaled}
    held = [v for v in _variants.CONTRACT if holds[v.name]]
    own = _applicable(ref, convention, dt, declared)
    pairs = [_variants.Together(a, b) for i, a in enumerate(own) for b in own[i + 1:]]
    candidates = (held + [_variants.Together(c, v) for v in own for c in held] + pairs +
                  [_variants.Together(c, p) for p in pairs for c in held])
    for candidate in candidates:
        try:
            err = worst_under(ref, convention, dt, seen, variant=candidate)
        except ValueError:  # the reference takes one form at a time
            continue
        if err <= 1.0:
            return Explanation("variant", candidate.name, convention, _text(candidate), err)
    return None


def _held_explanation(ref, convention, dt, seen):
    """The explanation (or None) by the moments held otherwise than ``ref`` holds them, in the
    asked convention: in the weight's precision where ``ref`` holds them low, else each of
    :func:`toolkit.oracle.held.forms` that changes some case of the run (int8 changes only a
    weight of 4096 elements or more)."""
    from . import held as _held
    plain, asked = getattr(ref, "plain", ref), getattr(ref, "form", None)
    options = [None] if asked is not None else []
    options += [f for f in _held.forms(plain.NAME, dt) if f != asked and any(
        f.holds(case.weight.size) for case, _, _ in seen)]
    for form in options:
        err = worst_under(plain if form is None else form.reference(plain), convention, dt,
                          seen)
        if err > 1.0:
            continue
        if form is None:
            return Explanation("variant", "states_not_held", convention,
                               "the moments not held low: kept in the weight's precision "
                               "(pass state_dtype=None)", err)
        return Explanation("variant", form.name, convention,
                           f"the same equations {form.text} (variant {form.name}: "
                           f"{form.description}); pass {form.keywords}", err)
    return None


def locate(impl, ref, convention, dt, record, fixed=None):
    """Where a failure of the full domain only lies: the worst case's hyperparameters that lie
    outside their usual ranges are moved, one at a time, to the usual value on each side of it
    (both pieces of a range with a gap, such as momentum's ``0.0 or [0.5, 0.99]``); the first
    whose move makes the case pass is bisected between its failing value and each passing usual
    value (:func:`toolkit.oracle.region.locate`: "only for beta1 < 1.1e-05", "only for momentum
    between 0 and 0.3"). Hyperparameters pinned by ``fixed`` are not moved: both domains' cases
    hold them, so they are not what tells the failing full domain from the passing usual one.
    None when nothing can be said."""
    usual = _space.usual_space(ref.NAME)
    case = _cases.Case(dict(record["hyperparameters"]),
                       np.asarray(record["weight0"], dtype=np.float64),
                       [np.asarray(g, dtype=np.float64) for g in record["grads"]])
    klass = _cases.optimizer_class(ref.NAME)

    def fails(**change):
        hyper = _space.fix_dependent(ref.NAME, {**case.hyper, **change})
        if not _cases.constructible(klass, hyper):
            return True  # not a case the optimizer takes: not a passing one either
        c = _cases.Case(hyper, case.weight, case.grads)
        outs, failure = impl.run(c, dt)
        if failure is not None:
            return True
        return compare(outs, reference_trajectory(ref, c, convention, dt),
                       lambda moved: reference_trajectory(ref, c, convention, dt,
                                                          moved))[0] > 1.0

    return _region_text.locate(case.hyper, usual, fixed or {}, fails, len(case.grads))
