"""``identify``: name the convention a user's implementation follows, by running it on cases
where the conventions' reference trajectories lie far apart."""
from __future__ import annotations

import math

import numpy as np

from . import cases as _cases
from . import discriminating as _discriminating
from . import held as _held
from . import space as _space
from . import user as _user
from . import variants as _variants
from .errors import bug_report as _bug_report
from .explanation import explain, worst_under
from .reports import IdentifyReport, finite, versions
from .seeds import DEFAULT_SEED, resolve_seed
from .trajectory import ORDER, compare, conventions_of, reference_module, reference_trajectory, \
    spec_of

__all__ = ["identify", "least_cases", "DISTINCT"]

#: two conventions are told apart by a case where they differ by more than this many bounds
DISTINCT = 16.0


def _exact(x, dtype):
    """``x`` rounded to ``dtype`` and back: the inputs are exact in the user's precision."""
    return np.asarray(x, dtype=np.float64).astype(dtype).astype(np.float64)


def _sample_case(name, hyper_space, dtype, rng, max_size=6, max_steps=4):
    hyper = _space.fix_dependent(name, {k: v.sample(rng) for k, v in hyper_space.items()})
    shape = _space.shape_space(name, max_size).sample(rng)
    n = math.prod(shape)
    steps = int(rng.integers(2, _space.max_steps(name, max_steps) + 1))
    (wlo, whi), (glo, ghi) = _cases.RANGES[dtype.name]
    w = _exact(_space.array_over_decades(rng, n, wlo, whi), dtype).reshape(shape)
    grads = [_exact(_space.array_over_decades(rng, n, glo, ghi), dtype).reshape(shape)
             for _ in range(steps)]
    return _cases.Case(hyper, w, grads)


def _told_apart(implemented, pytorch):
    """``(conventions, pairs)`` ``identify`` tells apart: "pytorch" is a convention of its own
    only where PyTorch's update is not one of ours."""
    convs = [c for c in ORDER if c in implemented and (c != "pytorch" or pytorch == "pytorch")]
    return convs, [(a, b) for i, a in enumerate(convs) for b in convs[i + 1:]]


def least_cases(optimizer):
    """The least ``cases`` :func:`identify` takes for ``optimizer``: one per pair of the
    conventions it tells apart (at least 1)."""
    return max(1, len(_told_apart(*conventions_of(optimizer))[1]))


def _distance(a, b):
    """How many bounds trajectory ``a``'s values lie from trajectory ``b`` (both ways)."""
    from ..error_bounds import normalised_error
    d = 0.0
    with np.errstate(all="ignore"):
        for x, y in zip(a, b):
            d = max(d, normalised_error(x.value, y)[0], normalised_error(y.value, x)[0])
    return d


def identify(make_step, optimizer, *, fixed=None, dtype="float32", cases=24, screen=400,
             seed=DEFAULT_SEED, allow_wider=False, timeout=None,
             progress=None) -> IdentifyReport:
    """Name the convention a user's implementation follows.

    ``screen`` candidate cases are drawn (numpy generator ``seed``: by default
    :data:`DEFAULT_SEED`, the same cases every run; ``"random"`` for a fresh seed, recorded in
    the report) and run through every convention of the reference; those on which two
    conventions differ by more than :data:`DISTINCT` bounds are kept (up to ``cases``, spread
    over the pairs), and the user's implementation runs on them. ``cases`` is at least the
    number of pairs of conventions (one case each), ``screen`` at least 1. The discriminating
    cases of every convention's known variants follow
    (:func:`toolkit.oracle.discriminating.identify_cases`), so that a
    variant ``verify`` would fail does not match. For an optimizer whose spec names its moments,
    the held cases (:func:`toolkit.oracle.held.cases`, of 4096 elements and more) then say how
    it holds them: in the weight's precision, or in one of :func:`toolkit.oracle.held.forms`
    (``state_dtype``, ``block``; ``held_cases``, ``held_error``), the first that all its cases
    agree with, under the convention named (or, where none is, under the first convention
    that a held form makes every case agree with). See :func:`verify`
    for ``make_step``, ``fixed`` (checked the same way), ``dtype``, ``allow_wider``, ``timeout``
    and ``progress``.
    """
    ref = reference_module(optimizer)
    implemented, pytorch = conventions_of(optimizer)
    dt = _cases.check_dtype(dtype)
    convs, pairs = _told_apart(implemented, pytorch)
    _cases.check_count("cases", cases, least_cases(optimizer),
                       f" for {ref.NAME} (one case per pair of its conventions "
                       f"{', '.join(convs)})")
    _cases.check_count("screen", screen, 1)
    fixed = _cases.check_fixed(ref.NAME, fixed)
    impl = _user.Implementation(make_step, allow_wider, pinned=fixed, timeout=timeout,
                                progress=progress)
    seed = resolve_seed(seed)
    klass = _cases.optimizer_class(ref.NAME)
    # a fixed value some convention refuses (Adam's amsgrad under "mxnet"): that convention
    # is no candidate
    refused = _cases.refusing(klass, fixed, convs)
    convs = [c for c in convs if c not in refused]
    pairs = [p for p in pairs if p[0] in convs and p[1] in convs]
    with _bug_report(f"identify of {ref.NAME}"):
        rng = np.random.default_rng(seed)
        hyper_space = _space.hyper_space(ref.NAME, fixed)
        scored = []  # (case, {conv: trajectory}, {pair: distance})
        for _ in range(screen):
            case = _sample_case(ref.NAME, hyper_space, dt, rng)
            if not _cases.constructible(klass, case.hyper):
                continue  # a fixed value beside a drawn one it excludes
            trajs = {c: reference_trajectory(ref, case, c, dt) for c in convs}
            if any(not np.all(np.isfinite(t[-1].value)) for t in trajs.values()):
                continue  # an overflow in the reference tells nothing about conventions
            scored.append((case, trajs, {p: _distance(trajs[p[0]], trajs[p[1]]) for p in pairs}))
        chosen, indistinct = [], []
        per_pair = max(1, cases // max(1, len(pairs)))
        for p in pairs:
            apart = sorted((s for s in scored if s[2][p] > DISTINCT), key=lambda s: -s[2][p])
            if not apart:
                indistinct.append(p)
            for s in apart[:per_pair]:
                if all(s is not c for c in chosen):
                    chosen.append(s)
        for s in scored[:max(2, cases - len(chosen))]:  # and some ordinary cases
            if len(chosen) >= cases:
                break
            if all(s is not c for c in chosen):
                chosen.append(s)
        chosen += _discriminating.identify_cases(ref.NAME, convs, dt, fixed)
        errors = {c: 0.0 for c in convs}
        worst = {c: None for c in convs}
        seen = {c: [] for c in convs}  # (case, outputs, error) per convention, to explain
        failure = None
        for case, trajs, _ in chosen:
            outs, failure = impl.run(case, dt)
            if failure is not None:
                errors = {c: math.inf for c in convs}
                break
            for c in convs:
                err, t, i, expected, got = compare(
                    outs, trajs[c],
                    lambda moved, case=case, c=c: reference_trajectory(ref, case, c, dt, moved))
                seen[c].append((case, outs, err))
                if err > errors[c] or worst[c] is None:
                    errors[c] = max(errors[c], err)
                    worst[c] = {**_cases.case_dict(case, t), "step": t, "element": i,
                                "expected": expected, "got": got, "error": finite(err)}
        matches = [c for c in convs if errors[c] <= 1.0 and failure is None]
        named0 = next((c for c in ORDER if c in matches), None)
        held = None if failure is not None else _held_phase(impl, ref, convs, named0, dt,
                                                             fixed, seen)
        if held is not None and named0 is None and held[1] is not None:
            matches = [held[0]]  # the convention whose equations it follows, held low
        # the smallest worst error; a tie (inf: a NaN on one case fails every convention) goes
        # to the convention with the fewest failing cases
        closest = min(convs, key=lambda c: (errors[c], sum(e > 1.0 for _, _, e in seen[c]),
                                            convs.index(c))) if convs else None
        if pytorch not in (None, "pytorch") and pytorch in errors:
            errors["pytorch"] = errors[pytorch]  # PyTorch's update is that one of ours
            if pytorch in matches:
                matches.append("pytorch")
        named = next((c for c in ORDER if c in matches), None)
        explanation = None
        if named is None and failure is None and closest is not None:  # as verify would
            explanation = explain(ref, closest, pytorch, implemented, dt,
                                  _variants.variants_of(spec_of(ref.NAME)), seen[closest],
                                  None, None, errors[closest])
        return IdentifyReport(ref.NAME, dt.name, matches, named, errors, len(chosen),
                              closest=closest if named is None else None, pytorch=pytorch,
                              indistinguishable=indistinct, failure=failure,
                              worst=worst.get(closest) if named is None else None, seed=seed,
                              versions=versions(), allow_wider=allow_wider, wider=impl.wider,
                              explanation=explanation, **_held_fields(held))


def _held_phase(impl, ref, convs, named, dt, fixed, seen):
    """``(convention, form, error, cases, failure)``: how the implementation holds its moments
    on the held cases (``form`` None: in the weight's precision), under ``named``, or where
    it is None under the first convention of ``convs`` whose drawn cases (``seen``) and held
    cases some held form makes agree; None where the optimizer has no moments, or nothing is
    found and no convention was named."""
    forms = _held.forms(ref.NAME, dt)
    if not forms:
        return None
    runs = []
    for case in _held.cases(ref.NAME, dt, fixed):
        outs, failure = impl.run(case, dt)
        if failure is not None:
            return (named, None, math.inf, len(runs) + 1, failure) if named else None
        runs.append((case, outs, 0.0))
    plain = None
    for c in [named] if named else convs:
        for form in [None] + forms:
            if form is None and named is None:
                continue  # its drawn cases already disagree with c's equations
            r = ref if form is None else form.reference(ref)
            if form is not None and worst_under(r, c, dt, seen[c]) > 1.0:
                continue
            err = worst_under(r, c, dt, runs)
            plain = err if form is None else plain
            if err <= 1.0:
                return c, form, err, len(runs), None
    return (named, None, plain, len(runs), None) if named else None


def _held_fields(held):
    """The report's fields of :func:`_held_phase`'s answer."""
    if held is None:
        return {}
    _, form, err, n, failure = held
    return {"state_dtype": form and form.state_dtype, "block": form and form.block,
            "whole_blocks": bool(form and form.whole), "states": form and form.text,
            "held_cases": n, "held_error": err, "held_failure": failure}
