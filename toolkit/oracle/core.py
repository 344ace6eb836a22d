"""The oracle's core: ``verify`` and ``identify`` and the case machinery they share (drawing
cases, the reference trajectory, the comparison in rounding bounds, the explanation of a
failure). ``toolkit.oracle`` (the package) is its public face; the audit of other frameworks
(:mod:`toolkit.oracle.conformance`) builds on it.

Modules of their own: the reports and their summaries (:mod:`~toolkit.oracle.reports`), running
the user's code (:mod:`~toolkit.oracle.user`), the region of a failure
(:mod:`~toolkit.oracle.region`), the known variants (:mod:`~toolkit.oracle.variants`), the search
space (:mod:`~toolkit.oracle.space`), the installed packages (:mod:`~toolkit.oracle.installed`)
and the oracle's own errors (:mod:`~toolkit.oracle.errors`).
"""
from __future__ import annotations

import math
import sys

import numpy as np

from . import cases as _cases
from . import installed as _installed
from . import region as _region_text
from . import space as _space
from . import user as _user
from . import variants as _variants
from .errors import InternalError, bug_report as _bug_report, unknown_optimizer
from .reports import KINDS, DomainVerdict, Explanation, IdentifyReport, VerifyReport, finite
from .seeds import DEFAULT_SEED, resolve_seed

#: where verify's discriminating cases come from (:mod:`toolkit.oracle.discriminating`, which
#: searches them with this module's reference and comparison and so sits above it; the package
#: ``toolkit.oracle`` installs it when it is imported, before any of its modules runs)
DISCRIMINATING = None

__all__ = ["verify", "identify", "assert_matches_oracle", "VerifyReport", "IdentifyReport",
           "conventions_of", "OracleMismatch", "DEFAULT_SEED", "FRAMEWORKS", "versions",
           "Explanation", "DomainVerdict", "KINDS", "resolve_seed", "InternalError"]

#: the order in which a convention is named when several match (ours first)
ORDER = ("mxnet", "guide", "pytorch")
#: two conventions are told apart by a case where they differ by more than this many bounds
DISTINCT = 16.0
#: weights and gradients: magnitudes 10**lo .. 10**hi per dtype (float16 keeps squares finite)
RANGES = {"float16": ((-2, 1), (-2, 1)), "float32": ((-3, 2), (-4, 3)),
          "float64": ((-3, 2), (-4, 3))}
#: frameworks whose version a report records when the implementation has imported them (the
#: audit's, :mod:`toolkit.oracle.frameworks`, among them: a test checks that)
FRAMEWORKS = ("torch", "optax", "jax", "jaxlib", "tensorflow", "mxnet", "cupy")


class OracleMismatch(AssertionError):
    """Raised by :func:`assert_matches_oracle`; its message is the report's summary."""


# --------------------------------------------------------------------------------------------
# the reference side
# --------------------------------------------------------------------------------------------
def _module(name):
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
                         "toolkit.verify with the noise of reference.noise")
    return spec.reference_module()


def conventions_of(name):
    """``(implemented, pytorch)``: the conventions the reference implements for optimizer
    ``name``, and what PyTorch's update is for it: "pytorch" (its own branch), one of ours when
    PyTorch's update is the same, or None (PyTorch has no such optimizer)."""
    ref = _module(name)
    implemented = tuple(getattr(ref, "CONVENTIONS", ("mxnet", "guide")))
    return implemented, getattr(ref, "PYTORCH", None)


def _dtype(dtype):
    dt = np.dtype(dtype)
    if dt.name not in RANGES:
        raise ValueError(f"dtype must be one of {tuple(RANGES)}, got {dtype!r}")
    return dt


def versions():
    """``{package: version}`` a verdict depends on: the toolkit, hypothesis, numpy, and each of
    :data:`FRAMEWORKS` that is imported (an implementation's framework, once it has run)."""
    import hypothesis

    from .. import __version__
    out = {"toolkit": __version__, "hypothesis": hypothesis.__version__,
           "numpy": np.__version__}
    for name in FRAMEWORKS:
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None) if module is not None else None
        if version is not None:
            out[name] = str(version)
    return out


def _optimizer_class(name):
    """The toolkit optimizer class registered under ``name``, whose spec names the reference
    (its constructor's checks are the oracle's checks of ``fixed`` and of every drawn case)."""
    from .. import optimizer
    return optimizer.registry().get(name)


def _check_fixed(name, fixed):
    """``fixed`` as a dict, checked: known names (:func:`space.hyper_space`) and values the
    optimizer's own constructor accepts, alone and together. A refused value is the
    constructor's ValueError/TypeError, naming ``fixed[...]``."""
    if fixed is None:
        return {}
    if not isinstance(fixed, dict):
        raise TypeError(f"fixed must be a dict of hyperparameters (MXNet's names), got "
                        f"{type(fixed).__name__} {fixed!r}")
    fixed = dict(fixed)
    _space.hyper_space(name, fixed)  # unknown names
    klass = _optimizer_class(name)
    if klass is None:
        return fixed
    try:
        klass(**fixed)
    except (ValueError, TypeError) as e:
        for k, v in fixed.items():
            try:
                klass(**{k: v})
            except (ValueError, TypeError) as alone:
                raise type(alone)(f"fixed[{k!r}] = {v!r} is refused by "
                                  f"{klass.__name__}: {alone}") from None
        raise type(e)(f"fixed {fixed!r} is refused by {klass.__name__} (each value alone "
                      f"is accepted): {e}") from None
    return fixed


def _constructible(klass, hyper):
    """Whether the optimizer's constructor accepts ``hyper`` (a drawn case with ``fixed``
    values: a combination it refuses is not drawn)."""
    if klass is None:
        return True
    try:
        klass(**hyper)
    except (ValueError, TypeError):
        return False
    return True


def _split(ref, hyper):
    """``(lr, wd, rs, c, own)``: the common hyperparameters and the module's own."""
    own = {k: v for k, v in hyper.items() if k in ref.HYPER and k != "learning_rate"}
    return (hyper["learning_rate"], hyper["wd"], hyper["rescale_grad"], hyper["clip_gradient"],
            own)


def _reference_trajectory(ref, case, convention, dtype, moved=None, variant=None):
    """The Tracked weight after every step of ``case`` under ``convention`` (free-running: the
    bound accumulates from step to step, as the user's state is not visible). ``moved``:
    ``{step: mask}``, weight elements moved further beyond the range after that step
    (:func:`toolkit.verify.further_beyond`), for :func:`_compare`. ``variant``: a
    :class:`~toolkit.oracle.variants.Variant` of the equations to run instead."""
    from reference.error_bound import Tracked, track

    from ..verify import further_beyond
    moved = moved or {}
    hyper, extra = (case.hyper, {}) if variant is None else variant.changes(case.hyper, ref)
    lr, wd, rs, c, own = _split(ref, hyper)
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


def _compare(outs, refs, rerun):
    """``(worst, step, element, expected, got)`` over the user's steps against a trajectory.
    Where the user's weight correctly overflows to infinity, the later steps compare every
    element except those whose reference depends on the overflowed values: ``rerun(moved)``
    (:func:`_reference_trajectory` with ``moved``) gives the trajectory with those values moved
    further beyond the range, and the elements where it differs are not compared."""
    from ..verify import depends, element_errors, overflow_mask
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


def _case_dict(case, upto=None):
    grads = case.grads if upto is None else case.grads[:upto]
    return {"hyperparameters": dict(case.hyper), "weight0": case.weight.tolist(),
            "grads": [g.tolist() for g in grads]}


# --------------------------------------------------------------------------------------------
# verify
# --------------------------------------------------------------------------------------------
def verify(make_step, optimizer, *, convention="mxnet", fixed=None, dtype="float32",
           examples=100, seed=DEFAULT_SEED, usual_examples=None, ranges=None,
           allow_wider=False, timeout=None, progress=None) -> VerifyReport:
    """Check a user's optimizer against the oracle on ``examples`` cases.

    Parameters
    ----------
    make_step : callable
        ``make_step(weight0, **hyperparameters) -> step``, ``step(grad) -> new_weight``.
    optimizer : str
        The registry name of the optimizer it implements ("adam", "sgd", ...; not "sgld").
    convention : {"mxnet", "guide", "pytorch"}
        Which equations to hold it to (``docs/conventions.md``); "pytorch" where the reference
        has it (``conventions_of``). When the implementation fails it but passes another
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
        to 4 steps). Case ``k`` depends on the seed, the domain and ``k`` only
        (:mod:`toolkit.oracle.cases`): the cases of ``examples=N`` are the first ``N`` of any
        larger count's, so more examples never turn a failure into a pass.
    seed : int or "random"
        The seed of the draw: by default :data:`DEFAULT_SEED`, so every run draws the same
        cases and gives the same verdict (in any process). ``"random"`` draws a fresh seed;
        the report records the seed used either way.
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

    Before its drawn cases each domain runs the discriminating cases of the known variants
    that apply under ``convention`` (:mod:`toolkit.oracle.discriminating`: found once per
    process, the same at every count and seed, with ``fixed`` pinned), so a variant some case
    tells apart fails at any count; a variant the pins leave no such case for is named in
    ``report.indistinguishable`` ("indistinguishable under these pins").

    A failed run is explained (``report.explanation``): its cases are compared with the other
    conventions and with each known variant of the equations its spec declares; a failure in
    the full domain only is located (``report.region``).
    """
    ref = _module(optimizer)
    implemented, pytorch = conventions_of(optimizer)
    asked, convention = convention, _resolve(convention, implemented, pytorch, ref.NAME)
    dt = _dtype(dtype)
    _count("examples", examples, 1)
    if usual_examples is None:
        usual_examples = max(1, examples // 2)
    else:
        _count("usual_examples", usual_examples, 1, " or None (examples // 2)")
    fixed = _check_fixed(ref.NAME, fixed)
    impl = _user.Implementation(make_step, allow_wider, pinned=fixed, timeout=timeout,
                                progress=progress)
    seed = resolve_seed(seed)
    _space.hyper_space(ref.NAME, fixed, "full", ranges)  # ranges checked before any run
    spec = _spec_of(ref.NAME)
    declared = _variants.variants_of(spec)
    with _bug_report(f"verify of {ref.NAME}"):
        run = _verify_run(impl, ref, convention, fixed, dt, examples, seed, ranges=ranges)
        full = _domain_verdict(run)
        if spec.usual:
            usual_run = _verify_run(impl, ref, convention, fixed, dt, usual_examples, seed,
                                    domain="usual", ranges=ranges)
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
                seen, ranges)
        explanation = None
        if not passed and failure is None:
            explanation = _explain(ref, convention, pytorch, implemented, dt, declared, seen,
                                   passes_under, under_error, max_error)
        region = None
        if usual.passed and not full.passed and run["failure"] is None and spec.usual:
            region = _region(impl, ref, convention, dt, run["record"], fixed)
        worse = run if full.max_error >= max_error else usual_run
        return VerifyReport(ref.NAME, asked, dt.name, passed=passed, max_error=max_error,
                            examples=run["n"], worst=worse["record"], failure=failure,
                            passes_under=passes_under, seed=seed, versions=versions(),
                            domains={"usual": usual, "full": full}, region=region,
                            explanation=explanation, allow_wider=allow_wider,
                            wider=impl.wider,
                            indistinguishable=_indistinguishable(ref.NAME, convention, dt,
                                                                 fixed, spec))


def _indistinguishable(name, convention, dt, fixed, spec):
    """The variants the pins of ``fixed`` leave no discriminating case for, in either domain
    (told apart without them): :func:`toolkit.oracle.discriminating.indistinguishable`."""
    if not fixed:
        return []
    domains = ("full", "usual") if spec.usual else ("full",)
    gone = set()
    for domain in domains:
        gone.update(DISCRIMINATING.indistinguishable(name, convention, dt, domain, fixed))
    return [v.name for v in _variants.variants_of(spec) if v.name in gone]


def _count(name, value, least, also=""):
    """Check a count argument: an int (not a bool) >= ``least``, else a ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an int >= {least}{also}, got {value!r}")


def _spec_of(name):
    from ..optimizers.registry import spec_of
    return spec_of(name)


def _domain_verdict(run, pinned=None):
    worst = max(run["worst"], 0.0)
    return DomainVerdict(passed=worst <= 1.0 and not run["failure"], max_error=worst,
                         examples=run["n"], worst=run["record"], pinned=pinned,
                         discriminating=run["discriminating"])


def _verify_run(impl, ref, convention, fixed, dt, examples, seed, domain="full",
                ranges=None):
    """One run of ``verify`` over ``domain``: the discriminating cases of the variants that
    apply under ``convention`` (:mod:`toolkit.oracle.discriminating`: the same at every seed
    and count), then cases 0 to ``examples - 1`` of ``seed`` (:func:`toolkit.oracle.cases.draw`:
    case ``k`` depends on the seed, the domain and ``k`` only, so a run's cases are the first
    of any longer run's), to the first outright failure. ``{"worst", "record", "failure", "n",
    "discriminating", "seen"}`` (``n``: the drawn cases run; ``seen``: every case with the
    user's outputs and its error, for :func:`_passing_convention` and :func:`_explain`)."""
    hyper_space = _space.hyper_space(ref.NAME, fixed, domain, ranges)
    klass = _optimizer_class(ref.NAME)
    state = {"worst": -1.0, "record": None, "failure": None, "n": 0, "seen": [],
             "discriminating": 0}
    first = DISCRIMINATING.cases(ref.NAME, convention, dt, domain, fixed)

    def drawn():
        for k in range(examples):
            case = _cases.draw(ref.NAME, hyper_space, dt, RANGES[dt.name], seed, domain, k,
                               lambda hyper: _constructible(klass, hyper))
            if case is not None:  # else no hyperparameters the constructor takes beside the
                yield False, case  # pinned ones

    for is_first, case in [(True, c) for c in first] + list(drawn()):
        state["discriminating" if is_first else "n"] += 1
        refs = _reference_trajectory(ref, case, convention, dt)
        outs, failure = impl.run(case, dt)
        if failure is not None:
            state["failure"] = failure
            state["worst"] = math.inf
            state["record"] = {**_case_dict(case, len(outs or []) + 1), "step": len(outs or []) + 1,
                               "element": None, "expected": None, "got": None,
                               "error": "inf"}
            break  # the implementation failed outright: nothing more to learn
        err, t, i, expected, got = _compare(
            outs, refs, lambda moved: _reference_trajectory(ref, case, convention, dt, moved))
        state["seen"].append((case, outs, err))
        if err > state["worst"]:
            state["worst"] = err
            state["record"] = {**_case_dict(case, t), "step": t, "element": i,
                               "expected": expected, "got": got, "error": finite(err)}
    return state


def _worst_under(ref, convention, dt, seen, variant=None, limit=1.0):
    """The worst normalised error of the user's outputs ``seen`` against ``convention`` (and
    ``variant``), stopping at the first case beyond ``limit`` (the worst cases of the run come
    first: a wrong explanation is dropped after one case)."""
    worst = 0.0
    for case, outs, _ in sorted(seen, key=lambda s: -s[2]):
        err = _compare(outs, _reference_trajectory(ref, case, convention, dt, variant=variant),
                       lambda moved, case=case: _reference_trajectory(
                           ref, case, convention, dt, moved, variant=variant))[0]
        worst = max(worst, err)
        if worst > limit:
            break
    return worst


def _passing_convention(impl, ref, convention, pytorch, implemented, fixed, dt, examples,
                        seed, seen, ranges=None):
    """``(convention, error)``: the first other convention (in :data:`ORDER`) that the user's
    outputs of the failed run ``seen`` all agree with and that a run of its own (same seed and
    examples) passes, with that run's worst error; ``(None, None)`` if there is none."""
    for c in _other_conventions(convention, pytorch, implemented):
        if _worst_under(ref, c, dt, seen) > 1.0:
            continue  # already off on the cases drawn: no second run
        again = _verify_run(impl, ref, c, fixed, dt, examples, seed, ranges=ranges)
        if again["failure"] is None and again["worst"] <= 1.0:
            return c, max(again["worst"], 0.0)
    return None, None


def _other_conventions(convention, pytorch, implemented):
    return [c for c in ORDER if c in implemented and c != convention
            and (c != "pytorch" or pytorch == "pytorch")]


def _explain(ref, convention, pytorch, implemented, dt, declared, seen, passes_under,
             under_error, max_error):
    """The :class:`Explanation` of a failed run whose cases and user outputs are ``seen``:
    another convention it passes (``passes_under``, found by :func:`_passing_convention`);
    else the first declared variant (:mod:`toolkit.oracle.variants`) of the asked convention's
    equations, then of another convention's, that every case agrees with; else another
    algorithm."""
    if passes_under is not None:
        return Explanation("convention", None, passes_under,
                           f"another convention: it passes the {passes_under!r} convention, "
                           f"not {convention!r}; pass convention={passes_under!r}",
                           under_error)
    tried = []
    for c in [convention] + _other_conventions(convention, pytorch, implemented):
        for v in declared:
            if not v.applies(ref, c) or (v.name in _variants.SAME_IN_FLOAT64 and dt == np.float64):
                continue  # the convention's own values in float64: it explains no failure
            tried.append(v.name)
            err = _worst_under(ref, c, dt, seen, variant=v)
            if err <= 1.0:
                what = ("the same equations, rounded differently" if v.rounding else
                        "the same algorithm, written differently")
                where = "" if c == convention else (
                    f", of the {c!r} convention's equations (pass convention={c!r})")
                return Explanation("variant", v.name, c,
                                   f"{what} (variant {v.name}: {v.description}){where}", err)
    others = _other_conventions(convention, pytorch, implemented)
    known = (f"no known variant of the equations ({', '.join(dict.fromkeys(tried))})"
             if tried else "no known variant of the equations (its spec declares none)")
    return Explanation("algorithm", None, None,
                       f"another algorithm (or a bug): {known} and no other convention "
                       f"({', '.join(others) or 'none'}) passes the failing cases", max_error)


def _region(impl, ref, convention, dt, record, fixed=None):
    """Where a failure of the full domain only lies: the worst case's hyperparameters that lie
    outside their usual ranges are moved, one at a time, to the usual value on each side of it
    (both pieces of a range with a gap, such as momentum's ``0.0 or [0.5, 0.99]``); the first
    whose move makes the case pass is bisected between its failing value and each passing usual
    value (:func:`toolkit.oracle.region.locate`: "only for beta1 < 1.1e-05", "only for momentum
    between 0 and 0.3"). Hyperparameters pinned by ``fixed`` are not moved: both domains' cases
    hold them, so they are not what tells the failing full domain from the passing usual one.
    None when nothing can be said."""
    usual = _space.usual_space(ref.NAME)
    case = _cases.Case(dict(record["hyperparameters"]), np.asarray(record["weight0"], dtype=np.float64),
                 [np.asarray(g, dtype=np.float64) for g in record["grads"]])
    klass = _optimizer_class(ref.NAME)

    def fails(**change):
        hyper = _space.fix_dependent(ref.NAME, {**case.hyper, **change})
        if not _constructible(klass, hyper):
            return True  # not a case the optimizer takes: not a passing one either
        c = _cases.Case(hyper, case.weight, case.grads)
        outs, failure = impl.run(c, dt)
        if failure is not None:
            return True
        return _compare(outs, _reference_trajectory(ref, c, convention, dt),
                        lambda moved: _reference_trajectory(ref, c, convention, dt,
                                                            moved))[0] > 1.0

    return _region_text.locate(case.hyper, usual, fixed or {}, fails, len(case.grads))


def _resolve(convention, implemented, pytorch, name):
    if convention == "pytorch":
        if pytorch is None:
            raise ValueError(f"PyTorch has no {name} optimizer: the oracle has no 'pytorch' "
                             f"convention for it (it has {implemented})")
        return pytorch  # "pytorch", or ours when PyTorch's update is the same
    if convention not in implemented:
        raise ValueError(f"convention must be one of {implemented} for {name}, got "
                         f"{convention!r}")
    return convention


def assert_matches_oracle(make_step, optimizer, **kwargs):
    """``verify`` for a test suite: returns the report when it passes, else raises
    :class:`OracleMismatch` (an ``AssertionError``) whose message shows the worst case."""
    report = verify(make_step, optimizer, **kwargs)
    if not report.passed:
        raise OracleMismatch(report.summary)
    return report


# --------------------------------------------------------------------------------------------
# identify
# --------------------------------------------------------------------------------------------
def _exact(x, dtype):
    """``x`` rounded to ``dtype`` and back: the inputs are exact in the user's precision."""
    return np.asarray(x, dtype=np.float64).astype(dtype).astype(np.float64)


def _sample_case(name, hyper_space, dtype, rng, max_size=6, max_steps=4):
    hyper = _space.fix_dependent(name, {k: v.sample(rng) for k, v in hyper_space.items()})
    shape = _space.shape_space(name, max_size).sample(rng)
    n = math.prod(shape)
    steps = int(rng.integers(2, max_steps + 1))
    (wlo, whi), (glo, ghi) = RANGES[dtype.name]
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
    from ..verify import normalised_error
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
    variant ``verify`` would fail does not match. See :func:`verify`
    for ``make_step``, ``fixed`` (checked the same way), ``dtype``, ``allow_wider``, ``timeout``
    and ``progress``.
    """
    ref = _module(optimizer)
    implemented, pytorch = conventions_of(optimizer)
    dt = _dtype(dtype)
    convs, pairs = _told_apart(implemented, pytorch)
    _count("cases", cases, least_cases(optimizer),
           f" for {ref.NAME} (one case per pair of its conventions {', '.join(convs)})")
    _count("screen", screen, 1)
    fixed = _check_fixed(ref.NAME, fixed)
    impl = _user.Implementation(make_step, allow_wider, pinned=fixed, timeout=timeout,
                                progress=progress)
    seed = resolve_seed(seed)
    klass = _optimizer_class(ref.NAME)
    with _bug_report(f"identify of {ref.NAME}"):
        rng = np.random.default_rng(seed)
        hyper_space = _space.hyper_space(ref.NAME, fixed)
        scored = []  # (case, {conv: trajectory}, {pair: distance})
        for _ in range(screen):
            case = _sample_case(ref.NAME, hyper_space, dt, rng)
            if not _constructible(klass, case.hyper):
                continue  # a fixed value beside a drawn one it excludes
            trajs = {c: _reference_trajectory(ref, case, c, dt) for c in convs}
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
        chosen += DISCRIMINATING.identify_cases(ref.NAME, convs, dt, fixed)
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
                err, t, i, expected, got = _compare(
                    outs, trajs[c],
                    lambda moved, case=case, c=c: _reference_trajectory(ref, case, c, dt, moved))
                seen[c].append((case, outs, err))
                if err > errors[c] or worst[c] is None:
                    errors[c] = max(errors[c], err)
                    worst[c] = {**_case_dict(case, t), "step": t, "element": i,
                                "expected": expected, "got": got, "error": finite(err)}
        matches = [c for c in convs if errors[c] <= 1.0 and failure is None]
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
            explanation = _explain(ref, closest, pytorch, implemented, dt,
                                   _variants.variants_of(_spec_of(ref.NAME)), seen[closest],
                                   None, None, errors[closest])
        return IdentifyReport(ref.NAME, dt.name, matches, named, errors, len(chosen),
                              closest=closest if named is None else None, pytorch=pytorch,
                              indistinguishable=indistinct, failure=failure,
                              worst=worst.get(closest) if named is None else None, seed=seed,
                              versions=versions(), allow_wider=allow_wider, wider=impl.wider,
                              explanation=explanation)


