"""``verify``: check a user's optimizer against the oracle on drawn cases, after the
discriminating cases of the known variants, and explain a failure. The other responsibilities
have their own modules of this package (``identification``, ``cases``, ``trajectory``,
``explanation``, ``discriminating``, ``reports``, ``user``, ``variants``, ``space``,
``installed``, ``errors``); :mod:`toolkit.oracle.conformance` builds the audit on ``verify``.
"""
from __future__ import annotations

import math

from . import cases as _cases
from . import discriminating as _discriminating
from . import held as _held
from . import space as _space
from . import user as _user
from . import variants as _variants
from .cases import RANGES  # noqa: F401
from .errors import InternalError, bug_report as _bug_report
from .explanation import explain, locate, other_conventions, worst_under
from .identification import DISTINCT, identify, least_cases  # noqa: F401
from .reports import (FRAMEWORKS, KINDS, DomainVerdict, Explanation, IdentifyReport,
                      VerifyReport, finite, versions)
from .seeds import DEFAULT_SEED, resolve_seed
from .trajectory import (ORDER, compare, convention_or_default, conventions_of,  # noqa: F401
                         reference_module,
                         reference_trajectory, resolve_convention, spec_of)

__all__ = ["verify", "identify", "assert_matches_oracle", "VerifyReport", "IdentifyReport",
           "conventions_of", "OracleMismatch", "DEFAULT_SEED", "FRAMEWORKS", "versions",
           "Explanation", "DomainVerdict", "KINDS", "resolve_seed", "InternalError"]


class OracleMismatch(AssertionError):
    """Raised by :func:`assert_matches_oracle`; its message is the report's summary."""


def verify(make_step, optimizer, *, convention=None, fixed=None, dtype="float32",
           examples=100, seed=DEFAULT_SEED, usual_examples=None, ranges=None,
           allow_wider=False, timeout=None, progress=None, state_dtype=None, block=None,
           whole_blocks=False) -> VerifyReport:
    """Check a user's optimizer against the oracle on ``examples`` cases.

    Parameters
    ----------
    make_step : callable
        ``make_step(weight0, **hyperparameters) -> step``, ``step(grad) -> new_weight``.
    optimizer : str
        The registry name of the optimizer it implements ("adam", "sgd", ...; not "sgld").
    convention : {"mxnet", "guide", "pytorch", "paper"}, optional
        Which equations to hold it to (``docs/conventions.md``); "pytorch" where the reference
        has it (``conventions_of``). None (the default): the optimizer's first convention,
        "mxnet" for MXNet's family. When the implementation fails it but passes another
        convention, the report says which (``passes_under``).
    fixed : dict, optional
        Hyperparameters to pin instead of drawing (e.g. ``dict(wd=0.0, clip_gradient=None)``
        for an implementation without weight decay or clipping). Checked as the optimizer's
        own constructor checks them: a value it refuses (a NaN learning rate) is a ValueError
        naming ``fixed[...]``.
    dtype : {"float16", "float32", "float64"}
        The precision of the inputs handed to the implementation and of the error bound.
    examples : int
        How many cases are drawn over the full domain (each a fresh ``make_step`` and 1
        to 4 steps, up to 8 for RAdam: ``Spec.case_steps``); the cases of ``examples=N`` are the first ``N`` of any larger count's
        (:mod:`toolkit.oracle.cases`).
    seed : int or "random"
        The seed of the draw (default :data:`DEFAULT_SEED`: the same verdict every run);
        ``"random"`` draws a fresh one. The report records it.
    usual_examples : int, optional
        How many cases a second run draws over the usual domain (``Spec.usual``; default
        ``max(1, examples // 2)``). An optimizer whose spec gives no usual ranges has one domain,
        and its usual verdict is the full run's (no second run).
    ranges : dict, optional
        ``{hyperparameter: Space}`` (:mod:`toolkit.oracle.space`'s ``Decades``, ``Interval``,
        ``OneOf``, ``Just``) replacing the full domain's space of those hyperparameters, to aim
        the search at a corner (``{"beta1": Decades(-16, -1)}``); the usual domain ignores it
        (the spec's usual ranges, and the full spaces of the others). A name that is unknown or
        also in ``fixed`` is a ValueError. A ``fixed`` value pins its hyperparameter in both
        domains; one outside its usual range is named in the usual verdict (``pinned``), and a
        region is sought among the drawn hyperparameters only.
    allow_wider : bool
        Accept results of a wider floating dtype than ``dtype`` (float64 for float32 inputs),
        for an implementation that computes wider on purpose; they are held to ``dtype``'s
        bound and the report says so (``allow_wider``, ``wider``). By default a result of
        another dtype than the input's is a failed step that names both.
    timeout : float, optional
        Seconds one ``step`` call may take, checked after it returns: a slower step ends the
        run as a failure that says so. None (the default): no limit.
    progress : callable, optional
        Called with the number of cases run so far after each case (the command line shows
        it on a terminal).
    state_dtype : {None, "float32", "bfloat16", "int8"}
        How the implementation holds its moments between steps, for an optimizer whose spec
        names them (``Spec.moments``; :mod:`toolkit.oracle.held`): None (the default), in
        the weight's precision; else every case's reference holds each new moment so, after
        the weight's step, and the held cases (:func:`toolkit.oracle.held.cases`, of at least
        4096 elements) run first. ``block`` (int8 only; default 256): elements per block;
        ``whole_blocks``: only a weight that is whole blocks is held (torchao's rule).

    Each domain first runs the discriminating cases of the known variants that apply under
    ``convention`` (:mod:`toolkit.oracle.discriminating`), so a variant some case tells apart
    fails at any count; one the pins leave no such case for is named in
    ``report.indistinguishable``. A failed run is explained (``report.explanation``) and a
    failure in the full domain only is located (``report.region``).
    """
    ref = reference_module(optimizer)
    implemented, pytorch = conventions_of(optimizer)
    asked = convention = convention_or_default(convention, optimizer)
    convention = resolve_convention(convention, implemented, pytorch, ref.NAME)
    dt = _cases.check_dtype(dtype)
    _cases.check_count("examples", examples, 1)
    if usual_examples is None:
        usual_examples = max(1, examples // 2)
    else:
        _cases.check_count("usual_examples", usual_examples, 1, " or None (examples // 2)")
    fixed = _cases.check_fixed(ref.NAME, fixed, asked)
    # a convention refusing a fixed value (Adam's amsgrad under "mxnet") explains nothing
    refused = _cases.refusing(_cases.optimizer_class(ref.NAME), fixed, implemented)
    implemented = tuple(c for c in implemented if c not in refused)
    impl = _user.Implementation(make_step, allow_wider, pinned=fixed, timeout=timeout,
                                progress=progress)
    seed = resolve_seed(seed)
    _space.hyper_space(ref.NAME, fixed, "full", ranges)  # ranges checked before any run
    spec = spec_of(ref.NAME)
    declared = _variants.variants_of(spec)
    form = _held.check(ref.NAME, state_dtype, block, whole_blocks)
    held = [] if form is None else _held.cases(ref.NAME, dt, fixed)
    ref = ref if form is None else form.reference(ref)
    with _bug_report(f"verify of {ref.NAME}"):
        run = _verify_run(impl, ref, convention, fixed, dt, examples, seed, ranges=ranges,
                          held=() if spec.usual else held)
        full = _domain_verdict(run)
        if spec.usual:  # the held cases' hyperparameters are usual ones
            usual_run = _verify_run(impl, ref, convention, fixed, dt, usual_examples, seed,
                                    domain="usual", ranges=ranges, held=held)
            pinned = _space.pinned_outside_usual(ref.NAME, fixed)
            aimed = _space.aimed_without_usual(ref.NAME, ranges)
            usual = _domain_verdict(usual_run, "; ".join(
                [f"{k} pinned at {v!r}, outside its usual range {_space.describe(spec.usual[k])}"
                 for k, v in pinned.items()] +
                [f"{k} aimed at {_space.describe(v)} by ranges, as in the full domain (it has no "
                 "usual range)" for k, v in aimed.items()]) or None)
        else:  # one domain: the full one is the usual one
            usual_run, usual = run, full
        # the verdict is both domains': a failure of the usual domain is a failure (its cases
        # are drawn apart from the full domain's, which may not meet them)
        passed = full.passed and usual.passed
        max_error = max(full.max_error, usual.max_error)
        failure = run["failure"] or usual_run["failure"]
        seen = (run["seen"] if not full.passed else []) + \
            (usual_run["seen"] if not usual.passed and usual_run is not run else [])
        passes_under, under_error = None, None
        if not passed and failure is None:
            passes_under, under_error = _passing_convention(
                impl, ref, convention, pytorch, implemented, fixed, dt, examples, seed,
                seen, ranges, held)
        explanation = None
        if not passed and failure is None:
            explanation = explain(ref, convention, pytorch, implemented, dt, declared, seen,
                                  passes_under, under_error, max_error)
        region = None
        if usual.passed and not full.passed and run["failure"] is None and spec.usual:
            region = locate(impl, ref, convention, dt, run["record"], fixed)
        worse = run if full.max_error >= max_error else usual_run
        return VerifyReport(ref.NAME, asked, dt.name, passed=passed, max_error=max_error,
                            examples=run["n"], worst=worse["record"], failure=failure,
                            passes_under=passes_under, seed=seed, versions=versions(),
                            domains={"usual": usual, "full": full}, region=region,
                            explanation=explanation, allow_wider=allow_wider,
                            wider=impl.wider,
                            indistinguishable=_indistinguishable(ref.NAME, convention, dt,
                                                                 fixed, spec),
                            state_dtype=state_dtype, block=form and form.block,
                            states=form and form.text)


def assert_matches_oracle(make_step, optimizer, **kwargs):
    """``verify`` for a test suite: returns the report when it passes, else raises
    :class:`OracleMismatch` (an ``AssertionError``) whose message shows the worst case."""
    report = verify(make_step, optimizer, **kwargs)
    if not report.passed:
        raise OracleMismatch(report.summary)
    return report


def _indistinguishable(name, convention, dt, fixed, spec):
    """The variants the pins of ``fixed`` leave no discriminating case for, in either domain
    (told apart without them): :func:`toolkit.oracle.discriminating.indistinguishable`."""
    if not fixed:
        return []
    domains = ("full", "usual") if spec.usual else ("full",)
    gone = set()
    for domain in domains:
        gone.update(_discriminating.indistinguishable(name, convention, dt, domain, fixed))
    return [v.name for v in _variants.variants_of(spec) if v.name in gone]


def _domain_verdict(run, pinned=None):
    worst = max(run["worst"], 0.0)
    return DomainVerdict(passed=worst <= 1.0 and not run["failure"], max_error=worst,
                         examples=run["n"], worst=run["record"], pinned=pinned,
                         discriminating=run["discriminating"])


def _verify_run(impl, ref, convention, fixed, dt, examples, seed, domain="full",
                ranges=None, held=()):
    """One run of ``verify`` over ``domain``: the ``held`` cases and the discriminating cases,
    then drawn cases 0 to ``examples - 1`` of ``seed``, to the first outright failure. ``{"worst", "record",
    "failure", "n", "discriminating", "seen"}`` (``n``: the drawn cases run; ``seen``: every
    case with the user's outputs and its error, for :func:`_passing_convention` and
    :func:`toolkit.oracle.explanation.explain`)."""
    hyper_space = _space.hyper_space(ref.NAME, fixed, domain, ranges)
    klass = _cases.optimizer_class(ref.NAME)
    state = {"worst": -1.0, "record": None, "failure": None, "n": 0, "seen": [],
             "discriminating": 0}
    first = list(held) + _discriminating.cases(ref.NAME, convention, dt, domain, fixed)

    def drawn():
        for k in range(examples):
            case = _cases.draw(ref.NAME, hyper_space, dt, RANGES[dt.name], seed, domain, k,
                               lambda hyper: _cases.constructible(klass, hyper))
            if case is not None:  # else no hyperparameters the constructor takes beside the
                yield False, case  # pinned ones

    for is_first, case in [(True, c) for c in first] + list(drawn()):
        state["discriminating" if is_first else "n"] += 1
        refs = reference_trajectory(ref, case, convention, dt)
        outs, failure = impl.run(case, dt)
        if failure is not None:
            state["failure"] = failure
            state["worst"] = math.inf
            steps = len(outs or []) + 1
            state["record"] = {**_cases.case_dict(case, steps), "step": steps,
                               "element": None, "expected": None, "got": None,
                               "error": "inf"}
            break  # the implementation failed outright: nothing more to learn
        err, t, i, expected, got = compare(
            outs, refs, lambda moved: reference_trajectory(ref, case, convention, dt, moved))
        state["seen"].append((case, outs, err))
        if err > state["worst"]:
            state["worst"] = err
            state["record"] = {**_cases.case_dict(case, t), "step": t, "element": i,
                               "expected": expected, "got": got, "error": finite(err)}
    return state


def _passing_convention(impl, ref, convention, pytorch, implemented, fixed, dt, examples,
                        seed, seen, ranges=None, held=()):
    """``(convention, error)``: the first other convention (in :data:`ORDER`) that the user's
    outputs of the failed run ``seen`` all agree with and that a run of its own (same seed and
    examples) passes, with that run's worst error; ``(None, None)`` if there is none."""
    for c in other_conventions(convention, pytorch, implemented):
        if worst_under(ref, c, dt, seen) > 1.0:
            continue  # already off on the cases drawn: no second run
        again = _verify_run(impl, ref, c, fixed, dt, examples, seed, ranges=ranges, held=held)
        if again["failure"] is None and again["worst"] <= 1.0:
            return c, max(again["worst"], 0.0)
    return None, None
