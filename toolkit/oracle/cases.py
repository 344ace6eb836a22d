"""``verify``'s cases, drawn by index: case ``k`` is a function of ``(seed, domain, k)`` alone
(its own numpy generator), so the cases of ``examples=N`` are the first ``N`` of any larger
count's and more examples never turn a failure into a pass.

The draw keeps the aim of the search space (:mod:`toolkit.oracle.space`): a hyperparameter lands
on or beside an end of its range a fifth of the time, a :class:`~toolkit.oracle.space.OneOf`
choice as often as each other option, and weights and gradients spread over their dtype's
decades with exact zeros. The arguments of a draw are checked here too (:func:`check_dtype`,
:func:`check_count`, :func:`check_fixed`, :func:`constructible`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import space as _space

__all__ = ["Case", "draw", "aimed", "DOMAIN_KEYS", "ATTEMPTS", "RANGES", "check_dtype",
           "check_count", "check_fixed", "optimizer_class", "constructible", "case_dict"]

#: the domains' keys in a case's generator (the usual domain's cases are drawn apart)
DOMAIN_KEYS = {"full": 0, "usual": 1}
#: draws of one index before it is given up (a drawn value its constructor refuses beside a
#: pinned one: LAMB's lower_bound above a pinned upper_bound)
ATTEMPTS = 100
#: weights and gradients: magnitudes 10**lo .. 10**hi per dtype (float16 keeps squares finite)
RANGES = {"float16": ((-2, 1), (-2, 1)), "float32": ((-3, 2), (-4, 3)),
          "float64": ((-3, 2), (-4, 3))}


@dataclass
class Case:
    """One case: ``hyper``, ``weight`` and ``grads`` (float64 values exact in the dtype)."""
    hyper: dict
    weight: np.ndarray
    grads: list


def aimed(space, rng):
    """One value of ``space`` drawn with ``rng``, aimed at the ends of ranges and at choices."""
    if isinstance(space, _space.OneOf):
        return aimed(space.options[int(rng.integers(len(space.options)))], rng)
    if isinstance(space, _space.Decades):
        return float(10.0 ** _aimed_in(space.lo, space.hi, rng))
    if isinstance(space, _space.Interval):
        return float(_aimed_in(space.lo, space.hi, rng))
    if isinstance(space, _space.Ints):
        r = rng.random()
        if r < 0.1:
            return int(space.lo)
        if r < 0.2:
            return int(space.hi)
        return int(rng.integers(space.lo, space.hi + 1))
    return space.sample(rng)  # Just, and any other space: its own draw


def _aimed_in(lo, hi, rng):
    """A float in ``[lo, hi]``: an end (10% each), just inside an end (5% each, 1e-16 to 1e-1
    of the width away), else uniform."""
    r = rng.random()
    if r < 0.1:
        return lo
    if r < 0.2:
        return hi
    if r < 0.3:
        near = (hi - lo) * 10.0 ** rng.uniform(-16, -1)
        return lo + near if r < 0.25 else hi - near
    return rng.uniform(lo, hi)


def _values(rng, n, lo, hi, dtype):
    """``n`` values with random signs and magnitudes over ``10**lo .. 10**hi`` (the ends of
    the decades a fifth of the time), every third element an exact zero half of the time,
    rounded to ``dtype``."""
    exps = [_aimed_in(lo, hi, rng) for _ in range(n)]
    signs = rng.choice([-1.0, 1.0], n)
    zero = (np.arange(n) % 3 == 0) & (rng.random(n) < 0.5)
    x = np.where(zero, 0.0, signs * _space.powers_of_ten(exps))
    return np.asarray(x, dtype=np.float64).astype(dtype).astype(np.float64)


def draw(name, hyper_space, dtype, ranges, seed, domain, k, constructible, max_size=8,
         max_steps=4):
    """Case ``k`` of optimizer ``name`` in ``domain`` at ``seed``: hyperparameters from
    ``hyper_space`` (``{name: Space}``), a weight of 1 to ``max_size`` elements (the shapes of
    :func:`~toolkit.oracle.space.shape_space`) and 1 to ``max_steps`` gradients (more where
    the spec says, :func:`~toolkit.oracle.space.max_steps`), their
    magnitudes over ``ranges`` (``((wlo, whi), (glo, ghi))`` decades) in ``dtype``. A draw
    ``constructible(hyper)`` refuses is drawn again (the same ``k``, the next attempt); None
    when none of :data:`ATTEMPTS` is taken."""
    (wlo, whi), (glo, ghi) = ranges
    shapes = _space.shape_space(name, max_size)
    for attempt in range(ATTEMPTS):
        rng = np.random.default_rng([int(seed), DOMAIN_KEYS[domain], int(k), attempt])
        hyper = _space.fix_dependent(name, {h: aimed(s, rng) for h, s in hyper_space.items()})
        if not constructible(hyper):
            continue
        shape = shapes.sample(rng)
        n = math.prod(shape)
        steps = int(rng.integers(1, _space.max_steps(name, max_steps) + 1))
        w = _values(rng, n, wlo, whi, dtype).reshape(shape)
        grads = [_values(rng, n, glo, ghi, dtype).reshape(shape) for _ in range(steps)]
        return Case(hyper, w, grads)
    return None


def case_dict(case, upto=None):
    """``case`` as a report's record: its hyperparameters, weight and gradients (the first
    ``upto``) as lists."""
    grads = case.grads if upto is None else case.grads[:upto]
    return {"hyperparameters": dict(case.hyper), "weight0": case.weight.tolist(),
            "grads": [g.tolist() for g in grads]}


def check_dtype(dtype):
    """``dtype`` as a numpy dtype, one of :data:`RANGES`' (else a ValueError)."""
    dt = np.dtype(dtype)
    if dt.name not in RANGES:
        raise ValueError(f"dtype must be one of {tuple(RANGES)}, got {dtype!r}")
    return dt


def check_count(name, value, least, also=""):
    """Check a count argument: an int (not a bool) >= ``least``, else a ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an int >= {least}{also}, got {value!r}")


def optimizer_class(name):
    """The toolkit optimizer class registered under ``name``, whose spec names the reference
    (its constructor's checks are the oracle's checks of ``fixed`` and of every drawn case)."""
    from .. import optimizer
    return optimizer.registry().get(name)


def _built(klass, hyper, convention=None):
    """The refusal of ``klass(**hyper)`` (under ``convention`` where given), or None."""
    try:
        klass(**hyper) if convention is None else klass(convention=convention, **hyper)
    except (ValueError, TypeError) as e:
        return e
    return None


def _other_conventions(klass):
    """The conventions ``klass`` implements beside its default (its spec's), in order."""
    spec = getattr(klass, "spec", None)
    return () if spec is None else tuple(spec.conventions[1:])


def constructible(klass, hyper, convention=None):
    """Whether the optimizer's constructor accepts ``hyper`` (a drawn case with ``fixed``
    values: a combination it refuses is not drawn): under ``convention`` where given, else
    under some convention it implements (Adam's ``amsgrad`` only outside "mxnet")."""
    if klass is None:
        return True
    if convention is not None:
        return _built(klass, hyper, convention) is None
    return _built(klass, hyper) is None or any(
        _built(klass, hyper, c) is None for c in _other_conventions(klass))


def refusing(klass, fixed, conventions):
    """The conventions among ``conventions`` whose optimizer takes its defaults but refuses
    ``fixed`` (Adam's ``amsgrad=True`` under "mxnet"): no reference of theirs is run."""
    if klass is None or not fixed:
        return ()
    return tuple(c for c in conventions
                 if not constructible(klass, fixed, c) and constructible(klass, {}, c))


def _drawable(name, space, klass, fixed, convention):
    """Whether some draw of ``space`` (``fixed`` pinned in it) is taken by the constructor,
    where ``fixed`` with the other hyperparameters at their defaults is not, each value alone
    passing its own check: a value tied to a drawn one (SGD's ``nesterov=True`` needs a
    momentum, whose default is 0), whose refused draws :func:`draw` draws again."""
    domains = klass.hyperparameter_domains()
    aliases = klass.hyperparameter_aliases()
    for k, v in fixed.items():
        attr = aliases.get(k, k)
        domain = domains.get(attr) or next(
            (d for a, d in domains.items() if d.keyword == k), None)
        if domain is None:
            return False
        try:
            domain.check(attr, v)
        except (TypeError, ValueError):
            return False
    for attempt in range(ATTEMPTS):
        rng = np.random.default_rng([0, attempt])
        hyper = _space.fix_dependent(name, {h: aimed(s, rng) for h, s in space.items()})
        if constructible(klass, hyper, convention):
            return True
    return False


def check_fixed(name, fixed, convention=None):
    """``fixed`` as a dict, checked: known names (:func:`space.hyper_space`) and values the
    optimizer's own constructor accepts, alone and together, under ``convention`` where given
    (else under some convention it implements), with the other hyperparameters at their
    defaults or, for values tied to another one, in some draw of the space (:func:`_drawable`). A refused value is the constructor's
    ValueError/TypeError, naming ``fixed[...]`` (and the convention, where one was given)."""
    if fixed is None:
        return {}
    if not isinstance(fixed, dict):
        raise TypeError(f"fixed must be a dict of hyperparameters (MXNet's names), got "
                        f"{type(fixed).__name__} {fixed!r}")
    fixed = dict(fixed)
    space = _space.hyper_space(name, fixed)  # unknown names
    klass = optimizer_class(name)
    if klass is None or constructible(klass, fixed, convention) or \
            _drawable(name, space, klass, fixed, convention):
        return fixed
    for k, v in fixed.items():
        alone = _built(klass, {k: v}, convention)
        if alone is not None and not _drawable(name, _space.hyper_space(name, {k: v}), klass,
                                               {k: v}, convention):
            # the convention named where another one takes the value (amsgrad under "mxnet")
            under = f" under convention {convention!r}" if convention is not None and \
                constructible(klass, {k: v}) else ""
            raise type(alone)(f"fixed[{k!r}] = {v!r} is refused by "
                              f"{klass.__name__}{under}: {alone}") from None
    under = "" if convention is None else f" under convention {convention!r}"
    e = _built(klass, fixed, convention)
    raise type(e)(f"fixed {fixed!r} is refused by {klass.__name__}{under} (each value alone "
                  f"is accepted): {e}") from None
