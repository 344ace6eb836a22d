"""The discriminating cases of the known variants: for an optimizer, a convention, a dtype, a
domain and the pinned hyperparameters, one case per declared variant
(:mod:`toolkit.oracle.variants`) on which that variant lies beyond the rounding bound of the
convention's equations. :func:`~toolkit.oracle.verify` runs them before its drawn cases, so a
variant some case tells apart is caught however few cases are drawn.

Candidates are the cases of :func:`toolkit.oracle.cases.draw` at :data:`SEARCH_SEED` (indices 0
to :data:`BUDGET` - 1). A variant written as other values takes the first candidate beyond
:data:`MARGIN` bounds, else the worst beyond one; one written as a wider bound is scored by the
ratio of bounds over :data:`SPREAD` (a measure, not a proof: :data:`NOT_GUARANTEED`), except
those in :data:`CONCRETE`. A variant with no such candidate is indistinguishable there
(:func:`indistinguishable`; docs/oracle.md's table, :func:`markdown`).

The indices of every setting without pins are stored in
:mod:`toolkit.oracle._discriminating_indices` (written by :func:`write`,
``python -m toolkit.oracle.discriminating``); pinned settings are searched once per process.
:func:`variant_make_step` is a variant as an implementation, which the tests plant.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from . import cases as _cases
from . import space as _space
from . import variants as _variants
from .trajectory import (compare, conventions_of, reference_module, reference_trajectory, spec_of,
                         split)

__all__ = ["SEARCH_SEED", "BUDGET", "MARGIN", "SPREAD", "find", "cases", "identify_cases",
           "indistinguishable",
           "variant_make_step", "settings", "table", "markdown", "write"]

#: the seed of the candidates (fixed: the same discriminating cases in every run and process)
SEARCH_SEED = 20240917
#: how many candidates are tried per setting before a variant is called indistinguishable
BUDGET = 96
#: a candidate beyond this many bounds is taken at once (a margin for an implementation of the
#: variant that rounds differently from the reference's); else the worst beyond one bound
MARGIN = 4.0
#: a variant the reference writes as a wider bound (:func:`_bound_only`) is told apart where its
#: bound is this many times the convention's (score ``spread / SPREAD``, taken as the others')
SPREAD = 64.0
#: variants that are the convention's own equations in float64 (:mod:`toolkit.oracle.variants`)
SAME_IN_FLOAT64 = _variants.SAME_IN_FLOAT64
#: variants written as a wider bound whose rounding every implementation in the dtype makes
#: alike: the lerp ``m + c*(g - m)`` takes ``c = 1 - beta1`` rounded to the dtype (numpy float32
#: and torch's ``lerp_``), so it is scored by the trajectory with that constant
#: (:func:`_in_dtype`) over :data:`CONCRETE_BUDGET` candidates (its corner is rare), and only
#: beyond :data:`MARGIN`: other roundings can land a case between 1 and the margin either way
#: (a numpy Adamax in torch's convention passes one at 2.9 bounds)
CONCRETE = ("lerp",)
CONCRETE_BUDGET = 256
#: ``(optimizer, variant, convention, dtype)`` whose cases, chosen by the width of the
#: variant's bound, do not make an implementation of it fail (measured with the numpy
#: implementations of tests/test_oracle_discriminating_more.py): run like the others, shown as
#: "not guaranteed" in docs/oracle.md's table. (A float16 AdamW with float16 bias corrections
#: stays inside torch's convention's bound: float16's own roundings are wider there.)
NOT_GUARANTEED = (("adamw", "constants_in_dtype", "pytorch", "float16"),)


def _applicable(ref, spec, convention):
    return [v for v in _variants.variants_of(spec) if v.applies(ref, convention)]


@functools.lru_cache(maxsize=None)
def _search(name, convention, dtype, domain, fixed_items):
    """``{variant: k}``: the index at :data:`SEARCH_SEED` of each variant's discriminating
    candidate, in the spec's variant order (a variant no candidate tells apart is absent)."""
    ref = reference_module(name)
    spec = spec_of(ref.NAME)
    dt = np.dtype(dtype)
    todo = {v.name: v for v in _applicable(ref, spec, convention)
            if not (v.name in SAME_IN_FLOAT64 and dt == np.float64)}
    if fixed_items:  # under pins: only what some case tells apart without them, the first
        unpinned = _indices(name, convention, dtype, domain, ())  # case beyond the margin
        todo = {n: v for n, v in todo.items() if n in unpinned}
    found, best = {}, {}
    budget = max((_budget(v) for v in todo.values()), default=0)
    for k, case in _candidates(ref, dt, domain, dict(fixed_items), range(budget)):
        refs = reference_trajectory(ref, case, convention, dt)
        for vname, v in list(todo.items()):
            if k >= _budget(v):
                continue
            if v.name in CONCRETE:
                err = _variant_error(ref, _in_dtype(case, dt), convention, dt, refs, v, case)
            elif _bound_only(v):
                err = _spread(ref, case, convention, dt, refs, v) / SPREAD
            else:
                err = _variant_error(ref, case, convention, dt, refs, v)
            if err > MARGIN and (fixed_items or not _bound_only(v) or v.name in CONCRETE):
                found[vname] = k
                del todo[vname]
            elif err > 1.0 and err > best.get(vname, (0.0, None))[0] and \
                    v.name not in CONCRETE:  # its rounding may land either side of a bound
                best[vname] = (err, k)
        if not any(k + 1 < _budget(v) for v in todo.values()):
            break
    for vname in todo:
        if vname in best:
            found[vname] = best[vname][1]
    return {v.name: found[v.name] for v in _applicable(ref, spec, convention) if v.name in found}


def _budget(variant):
    """How many candidates are tried for ``variant``."""
    return CONCRETE_BUDGET if variant.name in CONCRETE else BUDGET


def _in_dtype(case, dt):
    """``case`` with ``beta1`` moved to ``1 - c``, ``c = 1 - beta1`` rounded to ``dt``: the
    constant every implementation of a :data:`CONCRETE` variant in ``dt`` multiplies by."""
    hyper = dict(case.hyper)
    hyper["beta1"] = 1.0 - float(dt.type(1.0 - hyper["beta1"]))
    return dataclasses.replace(case, hyper=hyper)


def _candidates(ref, dt, domain, fixed, only=None):
    """``(k, case)`` for the candidates at :data:`SEARCH_SEED` (those of indices ``only``)."""
    klass = _cases.optimizer_class(ref.NAME)
    hyper_space = _space.hyper_space(ref.NAME, fixed, domain)
    for k in (range(BUDGET) if only is None else only):
        case = _cases.draw(ref.NAME, hyper_space, dt, _cases.RANGES[dt.name], SEARCH_SEED,
                           domain, k, lambda hyper: _cases.constructible(klass, hyper))
        if case is not None:
            yield k, case


def _indices(name, convention, dtype, domain, fixed_items):
    """:func:`_search`'s answer: read from the stored table for a setting without pins
    (:mod:`toolkit.oracle._discriminating_indices`, written by :func:`write`), else searched."""
    if not fixed_items:
        from ._discriminating_indices import INDICES
        stored = INDICES.get(f"{name} {convention} {dtype} {domain}")
        if stored is not None:
            return dict(stored)
    return _search(name, convention, dtype, domain, fixed_items)


@functools.lru_cache(maxsize=None)
def _find(name, convention, dtype, domain, fixed_items):
    ref = reference_module(name)
    indices = _indices(name, convention, dtype, domain, fixed_items)
    drawn = dict(_candidates(ref, np.dtype(dtype), domain, dict(fixed_items),
                             sorted(set(indices.values()))))
    return {v: drawn[k] for v, k in indices.items()}


def _variant_error(ref, case, convention, dt, refs, variant, drawn=None):
    """How many bounds the variant's trajectory on ``case``, rounded to ``dt``, lies from
    ``refs`` (the convention's on ``drawn``, by default ``case``)."""
    drawn = case if drawn is None else drawn
    with np.errstate(all="ignore"):
        outs = [np.asarray(w.value).astype(dt.type).astype(np.float64) for w in
                reference_trajectory(ref, case, convention, dt, variant=variant)]
    if not all(np.all(np.isfinite(o)) for o in outs):
        return 0.0  # an overflow of the variant tells nothing a user's code could show
    return compare(outs, refs, lambda moved: reference_trajectory(
        ref, drawn, convention, dt, moved))[0]


def _bound_only(variant):
    """Whether the reference writes ``variant`` as a wider bound around the same value (a
    rounding made in the reference: a lerp, constants formed in the dtype), not as other
    values (the hyperparameters' precision, a term elsewhere)."""
    return variant.rounding and variant.in_reference


def _spread(ref, case, convention, dt, refs, variant):
    """How many times the convention's bound the variant's bound is, at worst (the rounding it
    allows that the convention's equations do not): an implementation of the variant lands
    beyond the convention's bound where this is large."""
    worst = 0.0
    with np.errstate(all="ignore"):
        for w, r in zip(reference_trajectory(ref, case, convention, dt, variant=variant), refs):
            ok = (np.isfinite(w.value) & np.isfinite(r.value) & ~r.tie & ~w.tie & (r.err > 0)
                  & np.isfinite(w.err))
            if np.any(ok):
                worst = max(worst, float(np.max(w.err[ok] / r.err[ok])))
    return worst


def _key(name, convention, dtype, domain, fixed):
    return (name, convention, np.dtype(dtype).name, domain,
            tuple(sorted((fixed or {}).items(), key=lambda kv: kv[0])))


def find(name, convention, dtype, domain="full", fixed=None):
    """``{variant: Case}``: the discriminating case of each variant of optimizer ``name`` that
    applies under ``convention`` (a resolved one) and that some candidate tells apart, in
    ``dtype`` over ``domain`` with ``fixed`` pinned (cached per process)."""
    return dict(_find(*_key(name, convention, dtype, domain, fixed)))


def cases(name, convention, dtype, domain="full", fixed=None):
    """The discriminating cases :func:`find` gives, each once, in the variants' order."""
    out = []
    for case in find(name, convention, dtype, domain, fixed).values():
        if all(case is not c for c in out):
            out.append(case)
    return out


def identify_cases(name, conventions, dtype, fixed=None):
    """``[(case, {convention: trajectory}, None)]`` for :func:`~toolkit.oracle.identify`: the
    discriminating cases of each convention's variants (full domain, as ``verify`` runs them
    first), each once, with every convention's reference trajectory (a case on which one
    overflows is left out, as identify's screen leaves it), so that an implementation ``verify``
    fails as a variant of a convention does not match that convention."""
    ref = reference_module(name)
    dt = np.dtype(dtype)
    out = []
    for c in conventions:
        for case in cases(name, c, dt, "full", fixed or None):
            if any(case is o[0] for o in out):
                continue
            trajs = {k: reference_trajectory(ref, case, k, dt) for k in conventions}
            if all(np.all(np.isfinite(t[-1].value)) for t in trajs.values()):
                out.append((case, trajs, None))
    return out


def indistinguishable(name, convention, dtype, domain="full", fixed=None):
    """The variants that apply under ``convention`` but that no candidate tells apart there;
    with ``fixed``, only those the pins make so (told apart without them)."""
    ref = reference_module(name)
    spec = spec_of(ref.NAME)
    told = find(name, convention, dtype, domain, fixed)
    out = [v.name for v in _applicable(ref, spec, convention) if v.name not in told]
    if fixed:
        unpinned = find(name, convention, dtype, domain)
        out = [v for v in out if v in unpinned]
    return out


def variant_make_step(name, variant, convention, dtype):
    """A ``make_step`` that computes ``variant`` of optimizer ``name``'s equations under
    ``convention`` (resolved): the reference's own step with the variant, each weight rounded to
    ``dtype`` as it is returned (the state kept unrounded, as the reference keeps it)."""
    from reference.error_bound import Tracked, track

    ref = reference_module(name)
    v = _variants.VARIANTS[variant]
    dt = np.dtype(dtype)

    def make(w0, **hyper):
        hyper, extra = v.changes(hyper, ref)
        lr, wd, rs, c, own = split(ref, hyper)
        box = {"w": track(np.asarray(w0, dtype=np.float64), dt), "t": 0,
               "state": {k: (track(x, dt) if isinstance(x, np.ndarray) else x)
                         for k, x in ref.init_state(np.asarray(w0, np.float64), **own).items()}}

        def step(g):
            box["t"] += 1
            with np.errstate(all="ignore"):
                w, state = ref.step(box["w"], track(np.asarray(g, np.float64), dt), box["state"],
                                    t=box["t"], lr=lr, wd=wd, rescale_grad=rs, clip_gradient=c,
                                    convention=convention, **extra, **own)
                box["w"] = w if isinstance(w, Tracked) else track(w, dt)
                box["state"] = dict(state)
                return np.asarray(box["w"].value).astype(dt.type)
        return step
    return make


def _resolved_conventions(name):
    implemented, pytorch = conventions_of(name)
    return [c for c in implemented if c != "pytorch"] + (
        ["pytorch"] if pytorch == "pytorch" else [])


DTYPES = ("float16", "float32", "float64")
#: the lines around the table in docs/oracle.md that :func:`write` rewrites
MARKERS = ("<!-- indistinguishable variants: python -m toolkit.oracle.discriminating -->",
           "<!-- end of the indistinguishable variants -->")


def settings():
    """``[(optimizer, convention, dtype, domain)]``: every setting without pins (an optimizer
    without usual ranges has the full domain only)."""
    from ..optimizers.registry import specs
    out = []
    for name, spec in specs(oracle=True).items():
        if spec.noise:
            continue
        for convention in _resolved_conventions(name):
            for dtype in DTYPES:
                for domain in (("usual", "full") if spec.usual else ("full",)):
                    out.append((name, convention, dtype, domain))
    return out


def table():
    """``[(optimizer, variant, convention, dtype, domain)]``: every setting without pins where
    a declared variant applies and no candidate tells it apart, the rows of docs/oracle.md's
    table of indistinguishable variants."""
    return [(name, v, convention, dtype, domain)
            for name, convention, dtype, domain in settings()
            for v in indistinguishable(name, convention, dtype, domain)]


def markdown(rows=None):
    """:func:`table` as docs/oracle.md shows it: one line per optimizer, variant and convention,
    the domains where it is indistinguishable under each dtype (:func:`_cell`)."""
    rows = table() if rows is None else rows
    cells = {}
    for name, v, convention, dtype, domain in rows:
        cells.setdefault((name, v, convention), {}).setdefault(dtype, []).append(domain)
    lines = ["| optimizer | variant | convention | " + " | ".join(DTYPES) + " |",
             "|---|---|---|" + "---|" * len(DTYPES)]
    for (name, v, convention), by in cells.items():
        lines.append(f"| {name} | `{v}` | {convention} | " +
                     " | ".join(_cell(name, v, convention, d, by.get(d, [])) for d in DTYPES)
                     + " |")
    return "\n".join(lines)


def _cell(name, variant, convention, dtype, domains):
    """A cell of :func:`markdown`: the domains where ``variant`` is indistinguishable, else "told
    apart"; for :data:`NOT_GUARANTEED` the domains where it has cases follow as "not
    guaranteed: ..." (all of them: "not guaranteed")."""
    if (name, variant, convention, dtype) not in NOT_GUARANTEED:
        return ", ".join(domains) or "told apart"
    every = ("usual", "full") if spec_of(name).usual else ("full",)
    rest = [d for d in every if d not in domains]
    if not rest:
        return ", ".join(domains)
    return "; ".join(x for x in (", ".join(domains),
                                 "not guaranteed" + (": " + ", ".join(rest) if domains else ""))
                     if x)


def write(docs="docs/oracle.md"):
    """Search every setting without pins (a few minutes: the lerp tries 256 candidates per
    setting) and write the indices (:mod:`toolkit.oracle._discriminating_indices`) and the table
    in ``docs``."""
    import pathlib
    import pprint
    indices = {f"{n} {c} {d} {dom}": _search(n, c, d, dom, ())
               for n, c, d, dom in settings()}
    path = pathlib.Path(__file__).with_name("_discriminating_indices.py")
    path.write_text('"""The discriminating candidates\' indices of every setting without pins '
                    '(toolkit.oracle.discriminating).\n\nGenerated by ``python -m '
                    'toolkit.oracle.discriminating``: do not edit."""\nINDICES = ' +
                    pprint.pformat(indices, width=96, sort_dicts=False) + "\n")
    from ._discriminating_indices import INDICES
    INDICES.clear()
    INDICES.update(indices)  # this process reads what was written
    _find.cache_clear()
    doc = pathlib.Path(docs)
    text = doc.read_text()
    head, rest = text.split(MARKERS[0] + "\n", 1)
    _, tail = rest.split(MARKERS[1], 1)
    doc.write_text(head + MARKERS[0] + "\n" + markdown() + "\n" + MARKERS[1] + tail)


if __name__ == "__main__":
    write()
