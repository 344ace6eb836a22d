"""The space the oracle draws from: every optimizer's hyperparameters and inputs.

The spaces are declared in each optimizer's spec (``Spec.space``, ``Spec.fixed``,
``Spec.matrix``, ``Spec.dependent``; ``toolkit/optimizers/spec.py``) with the :class:`Space`
primitives of ``toolkit.optimizers.spec_spaces`` (re-exported here); this module combines them per
optimizer (:data:`COMMON`, then the optimizer's own, MXNet 1.9.1's constructor names, pins
applied). :data:`OWN`, :data:`MATRIX` and :data:`COMMON_FIXED` are live read-only views of the
specs.
"""
from __future__ import annotations

import math

import numbers
from collections.abc import Mapping

import numpy as np

from ..optimizers.spec_spaces import (COMMON, Decades, Interval, Ints, Just,  # noqa: F401
                                      MOMENTUM, OneOf, Shapes, Space)

__all__ = ["Space", "Decades", "Interval", "Ints", "Just", "OneOf", "Shapes", "COMMON", "OWN",
           "COMMON_FIXED", "MATRIX", "common_space", "hyper_space", "shape_space", "weight_shape",
           "array_over_decades", "powers_of_ten", "fix_dependent", "DOMAINS", "usual_space", "pinned_outside_usual",
           "inside", "nearest", "neighbours", "describe"]


class _FromSpecs(Mapping):
    """A read-only view of one field of every registered optimizer's spec, read live (an
    optimizer registered later is in it): ``{registry name: value}``, optimizers whose ``keep``
    is false left out."""

    def __init__(self, value, keep=lambda spec: True):
        self._value, self._keep = value, keep

    def _table(self):
        from ..optimizers import specs
        return {n: self._value(s) for n, s in specs().items() if self._keep(s)}

    def __getitem__(self, name):
        return self._table()[name]

    def __iter__(self):
        return iter(self._table())

    def __len__(self):
        return len(self._table())


#: each optimizer's own hyperparameters (MXNet 1.9.1's constructor names): ``Spec.space``
OWN = _FromSpecs(lambda s: dict(s.space), keep=lambda s: s.has_oracle)

#: optimizers whose weight must be a matrix (``Spec.matrix``; GroupAdaGrad keeps one accumulator
#: per row): their weights are drawn 2-D (:func:`shape_space`, :func:`weight_shape`)
MATRIX = _FromSpecs(lambda s: True, keep=lambda s: s.matrix)

#: common hyperparameters an optimizer does not take freely (``Spec.fixed``; GroupAdaGrad refuses
#: weight decay: MXNet 1.9.1 asserts wd == 0)
COMMON_FIXED = _FromSpecs(lambda s: dict(s.fixed), keep=lambda s: bool(s.fixed))


def _spec(name):
    from ..optimizers import spec_of
    return spec_of(name)


def common_space(name):
    """:data:`COMMON` for optimizer ``name``, with its :data:`COMMON_FIXED` values pinned."""
    return {**COMMON, **{k: Just(v) for k, v in _spec(name).fixed.items()}}


def shape_space(name, max_size):
    """The weight shapes drawn for optimizer ``name``: :class:`Shapes` of at most
    ``max_size`` elements, 2-D for the :data:`MATRIX` optimizers, of ranks 1 to 3 for those
    whose update depends on the rank (``Spec.tensor``); a spec's ``case_size`` replaces
    ``max_size`` where it is larger, its matrices then up to ``isqrt(case_size)`` rows."""
    spec = _spec(name)
    if spec.case_size > max_size:
        return Shapes(spec.case_size, spec.matrix, spec.tensor,
                      rows=max(4, math.isqrt(spec.case_size)))
    return Shapes(max_size, spec.matrix, spec.tensor)


def weight_shape(name, size):
    """The fixed weight shape of ``size`` elements for optimizer ``name`` (recorded inputs):
    ``(size,)``, or for a :data:`MATRIX` optimizer (and a ``Spec.tensor`` one, whose factored
    path a matrix takes) two rows of ``size // 2`` (one row when ``size`` is odd)."""
    if not (_spec(name).matrix or _spec(name).tensor):
        return (size,)
    rows = 2 if size >= 2 and size % 2 == 0 else 1
    return (rows, size // rows)


def max_steps(name, least):
    """The most steps a drawn case of optimizer ``name`` takes: ``least``, or more where a branch
    of its update begins later (``Spec.case_steps``: RAdam's rectified step)."""
    return max(int(least), _spec(name).case_steps)


def fix_dependent(name, hyper):
    """Hyperparameters that only make sense together (``Spec.dependent``; Signum's ``wd_lh`` is
    MXNet's decoupled weight decay of the momentum branch, so it is 0 without momentum)."""
    dependent = _spec(name).dependent
    return hyper if dependent is None else dependent(hyper)


#: the domains the oracle draws hyperparameters from: ``"full"`` (every value the optimizer
#: takes, aimed at branch points: ``Spec.space``) and ``"usual"`` (the ranges people train with:
#: ``Spec.usual`` over ``Spec.space``)
DOMAINS = ("usual", "full")


def hyper_space(name, fixed=None, domain="full", ranges=None):
    """``{hyperparameter: Space}`` of optimizer ``name``: :data:`COMMON` and its own, with the
    ``fixed`` ones pinned (an unknown fixed name is a ``ValueError`` naming the known ones).
    ``ranges`` (``{name: Space}``) replaces the full domain's space of those hyperparameters (a
    search aimed at a corner); it is checked in either domain but applies to the full one only.
    ``domain="usual"`` draws the hyperparameters its spec gives usual ranges for (``Spec.usual``)
    from those ranges instead, the others from their full spaces (:data:`DOMAINS`). A ``fixed``
    value pins its hyperparameter in either domain (:func:`pinned_outside_usual` names those
    outside their usual ranges)."""
    if name not in OWN:
        raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(sorted(OWN))}")
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    space = {**common_space(name), **OWN[name]}
    ranges = dict(ranges or {})
    unknown = sorted(set(ranges) - set(space))
    if unknown:
        raise ValueError(f"ranges names unknown hyperparameter(s) {unknown} of {name!r}; known: "
                         f"{sorted(space)}")
    for k, v in ranges.items():
        if not isinstance(v, Space):
            raise TypeError(f"ranges[{k!r}] must be a Space of toolkit.oracle.space (Decades, "
                            f"Interval, OneOf, Just, ...), got {type(v).__name__} {v!r}")
    both = sorted(set(ranges) & set(fixed or {}))
    if both:
        raise ValueError(f"{both} are both fixed and given ranges: pin a hyperparameter or give "
                         "it a range, not both")
    if domain == "usual":
        usual = _spec(name).usual
        # a hyperparameter with a usual range is drawn from it; one without is drawn from
        # where ``ranges`` aims it, as in the full domain (its usual range is its whole one;
        # the usual verdict names it: ``aimed_without_usual``)
        space.update({k: v for k, v in ranges.items() if k not in usual})
        space.update(usual)
    else:
        space.update(ranges)
    fixed = dict(fixed or {})
    flags = _spec(name).flags  # not drawn, held off unless fixed (Spec.flags)
    unknown = sorted(set(fixed) - set(space) - set(flags))
    if unknown:
        raise ValueError(f"fixed names unknown hyperparameter(s) {unknown} of {name!r}; known: "
                         f"{sorted(set(space) | set(flags))}")
    space.update({k: Just(v) for k, v in fixed.items()})
    return space


def powers_of_ten(exponents):
    """``10**e`` of each exponent, as a float64 array, by the C library's ``pow`` one value at
    a time: numpy's vectorised power takes its AVX-512 path where the CPU has one, which
    rounds some values one ulp away from the C library's (its AVX2 path calls the C library),
    so that a seed drew other cases on such a machine (the oracle's cases are the same on
    every machine with the same C library)."""
    return np.array([10.0 ** float(e) for e in np.asarray(exponents, np.float64).reshape(-1)])


def array_over_decades(rng, n, lo, hi, zeros=True):
    """A float64 array of ``n`` values with random signs and magnitudes over ``10**lo..10**hi``
    (every third element may be an exact zero), from numpy generator ``rng``."""
    x = rng.choice([-1.0, 1.0], n) * powers_of_ten(rng.uniform(lo, hi, n))
    if zeros:
        x[(rng.random(n) < 0.5) & (np.arange(n) % 3 == 0)] = 0.0
    return x


def pinned_outside_usual(name, fixed):
    """``{hyperparameter: value}`` of the ``fixed`` values of optimizer ``name`` that lie outside
    their usual ranges (``Spec.usual``): every case of the usual domain holds them, so its
    verdict names them (``DomainVerdict.pinned``)."""
    usual = _spec(name).usual
    return {k: v for k, v in dict(fixed or {}).items() if k in usual and not inside(usual[k], v)}


def aimed_without_usual(name, ranges):
    """``{hyperparameter: Space}`` of the ``ranges`` of optimizer ``name`` that aim a
    hyperparameter without a usual range: the usual domain draws it from there too (its usual
    range is its whole one), so its verdict names it (``DomainVerdict.pinned``)."""
    usual = _spec(name).usual
    return {k: v for k, v in dict(ranges or {}).items() if k not in usual}


def usual_space(name):
    """``{hyperparameter: Space}``: the usual ranges of optimizer ``name`` (``Spec.usual``)."""
    return dict(_spec(name).usual)


def inside(space, x):
    """Whether value ``x`` lies in ``space`` (a :class:`Decades` or :class:`Interval` range, a
    :class:`Just` value, or any option of a :class:`OneOf`)."""
    if isinstance(space, OneOf):
        return any(inside(o, x) for o in space.options)
    if isinstance(space, Just):
        return x == space.value
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return False
    if isinstance(space, Decades):
        return x > 0 and 10.0 ** space.lo <= x <= 10.0 ** space.hi
    if isinstance(space, (Interval, Ints)):
        return space.lo <= x <= space.hi
    return False


def nearest(space, x):
    """The value of ``space`` nearest to ``x`` (the bound of a range it lies beyond), or None
    when ``space`` holds no number."""
    if inside(space, x):
        return x
    if isinstance(space, OneOf):
        near = [n for n in (nearest(o, x) for o in space.options) if n is not None]
        return min(near, key=lambda n: abs(n - x)) if near else None
    if isinstance(space, Just):
        return space.value if isinstance(space.value, numbers.Real) and \
            not isinstance(space.value, bool) else None
    if isinstance(space, Decades):
        return min(max(x, 10.0 ** space.lo), 10.0 ** space.hi)
    if isinstance(space, (Interval, Ints)):
        return min(max(x, space.lo), space.hi)
    return None


def neighbours(space, x):
    """``(below, above)``: the value of ``space`` nearest to ``x`` from below (the largest one
    ``<= x``) and from above (the smallest one ``>= x``), each None where ``space`` holds no
    number on that side. Both are ``x`` when it lies in ``space``. A range with a gap
    (``OneOf(0.0, Interval(0.5, 0.99))``) gives the usual value on each side of a value in the gap
    (``0.0`` and ``0.5`` for ``0.1``), where :func:`nearest` gives only the closer one."""
    if inside(space, x):
        return x, x
    if isinstance(space, OneOf):
        sides = [neighbours(o, x) for o in space.options]
        below = [b for b, _ in sides if b is not None]
        above = [a for _, a in sides if a is not None]
        return (max(below) if below else None), (min(above) if above else None)
    if isinstance(space, Just):
        v = space.value
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            return None, None
        return (v, None) if v <= x else (None, v)
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return None, None
    if isinstance(space, Decades):
        lo, hi = 10.0 ** space.lo, 10.0 ** space.hi
    elif isinstance(space, (Interval, Ints)):
        lo, hi = space.lo, space.hi
    else:
        return None, None
    return (hi, None) if x > hi else (None, lo)


def describe(space):
    """A range as a reader writes it: ``[0.5, 0.99]``, ``[1e-08, 0.001]``."""
    if isinstance(space, Decades):
        return f"[{10.0 ** space.lo:.3g}, {10.0 ** space.hi:.3g}]"
    if isinstance(space, (Interval, Ints)):
        return f"[{space.lo:.6g}, {space.hi:.6g}]"
    if isinstance(space, Just):
        return repr(space.value)
    if isinstance(space, OneOf):
        return " or ".join(describe(o) for o in space.options)
    return repr(space)
