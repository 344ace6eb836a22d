"""A user's optimizer in ``mxopt regress``: its ``make_step`` recorded on the oracle's fixed
cases with the reference's weight beside each step (:func:`record_user`), rerun (:func:`rerun`)
and compared like any entry, with whether each moved weight went toward the reference or away
(:func:`direction`).

A user's entry has backend ``"user"`` (format version 2): ``hyper`` the keywords of
``make_step``, ``case`` the index of ``verify``'s case, ``fixed`` the pinned names, ``reference``
the oracle's weight after each step (float.hex of float64), ``error_ulps`` the recorded weight's
largest distance from it in ulps of the weight's dtype. The scope names the target so that
``compare`` can load it again.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from .._support import UsageError
from .fileformat import USER, decode, document, encode, entry_id, ulp_distance, write
from .recording import RecordResult

__all__ = ["DEFAULT_CASES", "USER_DTYPES", "Direction", "record_user", "user_entries",
           "rerun", "direction", "load_make_step"]

#: the oracle's cases recorded by default (verify's first 20 at its seed)
DEFAULT_CASES = 20
#: the dtypes a user's implementation is given, as in ``verify``
USER_DTYPES = ("float16", "float32", "float64")


def _oracle():
    from ...oracle import regression
    return regression


def _json_hyper(hyper):
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in hyper.items()}


def _error_ulps(weight, reference):
    """Largest distance of ``weight`` from ``reference`` (float64) rounded to its dtype, in
    ulps of that dtype: an int, or "inf" (NaN against a number)."""
    with np.errstate(over="ignore", invalid="ignore"):
        d = ulp_distance(weight, reference.astype(weight.dtype))
    worst = float(np.max(d)) if d.size else 0.0
    return "inf" if worst == np.inf else int(worst)


def _error_at(x, reference, dtype):
    """``|x - reference|`` in ulps of ``dtype`` at the reference (a float: 0.5 is half the
    spacing of ``dtype``'s numbers there; inf where either is not finite)."""
    with np.errstate(over="ignore", invalid="ignore"):
        spacing = float(np.spacing(np.abs(np.asarray(reference).astype(dtype))))
        err = abs(float(x) - float(reference))
    return err / spacing if np.isfinite(err) and np.isfinite(spacing) else float("inf")


def user_entries(make_step, optimizer, *, convention=None, dtype="float32", fixed=None,
                 cases=DEFAULT_CASES, seed=None, allow_wider=False) -> list:
    """The entries of ``make_step`` on the oracle's cases 0 to ``cases - 1`` (at ``seed``,
    default ``verify``'s), each run and filled. A case the implementation fails outright (an
    exception, a wrong shape or dtype) is a :class:`UsageError` that says which and why:
    there is nothing to record."""
    oracle = _oracle()
    if dtype not in USER_DTYPES:
        raise UsageError(f"dtype must be one of {', '.join(USER_DTYPES)}, got {dtype!r}")
    if not callable(make_step):
        raise UsageError("make_step must be callable: make_step(weight0, **hyper) -> step(grad)")
    fixed = dict(fixed or {})
    try:
        drawn = oracle.cases(optimizer, count=cases, dtype=dtype, fixed=fixed,
                             **({} if seed is None else {"seed": seed}))
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    try:
        convention = oracle.convention_or_default(convention, optimizer)
        oracle.equations(optimizer, convention)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    name = optimizer.lower()
    dt = np.dtype(dtype)
    out = []
    for k, case in drawn:
        weights, failure = oracle.run_user(make_step, case, dtype=dt, pinned=tuple(fixed),
                                           allow_wider=allow_wider)
        if failure is not None:
            raise UsageError(f"case {k} of {name} cannot be recorded: {failure}")
        refs = oracle.reference_weights(name, case, convention=convention, dtype=dt)
        out.append({
            "id": entry_id(name, convention, USER, dt.name, k), "optimizer": name,
            "convention": convention, "backend": USER, "dtype": dt.name, "ulps": 0,
            "hyper": _json_hyper(case.hyper), "common": {}, "encoding": "bits",
            "shape": list(case.weight.shape),
            "arrays": {"weight": weights[0].dtype.name if weights else dt.name},
            "w0": encode(case.weight.astype(dt)),
            "grads": [encode(g.astype(dt)) for g in case.grads],
            "steps": [{"weight": encode(w)} for w in weights],
            "case": k, "fixed": sorted(fixed),
            "reference": [encode(r, "float.hex") for r in refs],
            "error_ulps": [_error_ulps(w, r) for w, r in zip(weights, refs)]})
    return out


def record_user(path, make_step, optimizer, *, convention=None, dtype="float32", fixed=None,
                cases=DEFAULT_CASES, seed=None, target=None, allow_wider=False,
                overwrite=False, command=None) -> RecordResult:
    """Record ``make_step`` (a user's optimizer, ``make_step(weight0, **hyper) ->
    step(grad)``, implementing registry ``optimizer`` under ``convention``) on the oracle's
    cases into the file ``path``. ``target``: the ``module:function`` it was loaded from,
    stored so that ``compare`` can load it again (None: ``compare`` must be given the
    function). Refuses to overwrite an existing file unless ``overwrite``."""
    path = os.fspath(path)
    if not path.endswith(".json"):
        raise UsageError(f"a user's recording is one .json file, got {path!r}")
    if os.path.exists(path) and not overwrite:
        raise UsageError(f"{path} exists; refusing to overwrite recorded trajectories without "
                         "--force (a changed file means changed numerics)")
    from ...oracle import DEFAULT_SEED, resolve_seed
    try:
        seed = resolve_seed(DEFAULT_SEED if seed is None else seed)  # "random": recorded
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        convention = _oracle().convention_or_default(convention, optimizer)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    t0 = time.perf_counter()
    entries = user_entries(make_step, optimizer, convention=convention, dtype=dtype,
                           fixed=fixed, cases=cases, seed=seed, allow_wider=allow_wider)
    scope = {"target": target, "optimizer": optimizer.lower(), "convention": convention,
             "backends": [USER], "dtypes": [dtype], "fixed": _json_hyper(dict(fixed or {})),
             "cases": cases, "seed": seed, "domain": "full",
             "allow_wider": allow_wider, "layout": "file"}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write(path, document(entries, scope=scope, command=command))
    return RecordResult([path], len(entries), [USER], {}, time.perf_counter() - t0)


def load_make_step(target):
    """The function ``target`` (``module:function`` or ``file.py:function``) names, loaded as
    ``mxopt verify`` loads it; a :class:`UsageError` where it cannot be."""
    from ...oracle import cli
    try:
        return cli.load_target(target)
    except cli.UsageError as exc:
        raise UsageError(str(exc)) from None


def rerun(entry, make_step, allow_wider=False) -> list:
    """``make_step`` on ``entry``'s stored inputs now: per step ``{"weight": array}``; a
    RuntimeError saying why where the implementation fails outright."""
    from ...oracle.cases import Case
    sd = np.dtype(entry["dtype"])
    shape = tuple(entry["shape"])
    w0 = decode(entry["w0"], sd, entry["encoding"]).reshape(shape)
    grads = [decode(g, sd, entry["encoding"]).reshape(shape) for g in entry["grads"]]
    case = Case(dict(entry["hyper"]), w0.astype(np.float64), [g.astype(np.float64)
                                                              for g in grads])
    weights, failure = _oracle().run_user(make_step, case, dtype=sd,
                                          pinned=tuple(entry["fixed"]), allow_wider=allow_wider)
    if failure is not None:
        raise RuntimeError(failure)
    return [{"weight": w} for w in weights]


@dataclass
class Direction:
    """Where a user's moved weight went: at the element that moved most (``step``, ``index``),
    its distance from the reference in the file and now (ulps of its dtype at the reference,
    fractional: 0.5 is half a spacing), and over every element that moved, how many came
    closer to the reference and how many went further."""
    direction: str         # "toward", "away" or "neither" (as far as before)
    step: int
    index: int
    stored_error_ulps: float  # inf where not finite
    now_error_ulps: float
    toward: int
    away: int

    def text(self):
        where = {"toward": "toward the reference", "away": "away from the reference",
                 "neither": "as far from the reference as before"}[self.direction]
        return (f"{where} (error {self.stored_error_ulps:.3g} -> {self.now_error_ulps:.3g} "
                f"ulps; elements moved toward it {self.toward}, away {self.away})")


def direction(entry, outputs, worst) -> Direction:
    """How the weights of ``outputs`` (a rerun of the user's ``entry``) moved against the
    reference stored beside them; ``worst``: the change with the largest distance
    (:class:`~toolkit.tools.regress.comparing.ArrayChange`)."""
    sd = np.dtype(entry["arrays"]["weight"])
    toward = away = 0
    found = None
    for k, (stored, now) in enumerate(zip(entry["steps"], outputs), 1):
        ref = decode(entry["reference"][k - 1], np.float64, "float.hex")
        a = decode(stored["weight"], sd, entry["encoding"]).astype(np.float64)
        b = np.ascontiguousarray(now["weight"]).ravel().astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            da, db = np.abs(a - ref), np.abs(b - ref)
        da, db = np.nan_to_num(da, nan=np.inf), np.nan_to_num(db, nan=np.inf)
        toward += int(np.count_nonzero(db < da))
        away += int(np.count_nonzero(db > da))
        if k == worst.step:
            i = worst.index
            way = "toward" if db[i] < da[i] else "away" if db[i] > da[i] else "neither"
            found = (way, k, i, _error_at(a[i], ref[i], sd), _error_at(b[i], ref[i], sd))
    return Direction(*found, toward, away)
