"""The space the oracle draws from: every optimizer's hyperparameters and inputs, declared once.

A :class:`Space` is a small declarative description (decades, unit intervals, choices, exact
values) that becomes either a hypothesis strategy (:meth:`Space.strategy`, for ``verify`` and for
our own property tests, with shrinking and targeting) or a sampler driven by a numpy generator
(:meth:`Space.sample`, for ``identify``, which screens many candidate cases cheaply). The values
are aimed at branch points: momentum 0, exact zeros, ``clip_gradient`` off, 0 and on, epsilon over
eight decades.

Every optimizer's entry names the hyperparameters MXNet 1.9.1's constructor takes (the names a
user's ``make_step`` receives), on top of :data:`COMMON`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Space", "Decades", "Interval", "Ints", "Just", "OneOf", "Shapes", "COMMON", "OWN",
           "COMMON_FIXED", "MATRIX", "common_space", "hyper_space", "shape_space", "weight_shape",
           "array_over_decades", "fix_dependent"]


class Space:
    """A set of values: ``strategy()`` gives a hypothesis strategy, ``sample(rng)`` one value."""

    def strategy(self):  # pragma: no cover - every subclass overrides
        """A hypothesis strategy drawing from this space."""
        raise NotImplementedError

    def sample(self, rng):  # pragma: no cover
        """One value drawn with numpy generator ``rng``."""
        raise NotImplementedError


@dataclass(frozen=True)
class Decades(Space):
    """Positive floats spread evenly over the decades ``10**lo .. 10**hi``."""
    lo: float
    hi: float

    def strategy(self):
        from hypothesis import strategies as st
        return st.floats(self.lo, self.hi).map(lambda e: float(10.0 ** e))

    def sample(self, rng):
        return float(10.0 ** rng.uniform(self.lo, self.hi))


@dataclass(frozen=True)
class Interval(Space):
    """Floats in ``[lo, hi]`` (momentum and decay factors)."""
    lo: float
    hi: float

    def strategy(self):
        from hypothesis import strategies as st
        return st.floats(self.lo, self.hi)

    def sample(self, rng):
        return float(rng.uniform(self.lo, self.hi))


@dataclass(frozen=True)
class Ints(Space):
    """Integers in ``[lo, hi]``."""
    lo: int
    hi: int

    def strategy(self):
        from hypothesis import strategies as st
        return st.integers(self.lo, self.hi)

    def sample(self, rng):
        return int(rng.integers(self.lo, self.hi + 1))


@dataclass(frozen=True)
class Just(Space):
    """Exactly ``value``."""
    value: object

    def strategy(self):
        from hypothesis import strategies as st
        return st.just(self.value)

    def sample(self, rng):
        return self.value


@dataclass(frozen=True)
class OneOf(Space):
    """One of several spaces or plain values (a plain value is :class:`Just` that value)."""
    options: tuple = field(default=())

    def __init__(self, *options):
        object.__setattr__(self, "options",
                           tuple(o if isinstance(o, Space) else Just(o) for o in options))

    def strategy(self):
        from hypothesis import strategies as st
        return st.one_of(*[o.strategy() for o in self.options])

    def sample(self, rng):
        return self.options[int(rng.integers(len(self.options)))].sample(rng)


@dataclass(frozen=True)
class Shapes(Space):
    """Weight shapes of 1 to ``max_size`` elements: vectors ``(n,)``, or with ``matrix`` 2-D
    ``(rows, cols)``, 1 to 4 rows of 1 to ``max_size // rows`` columns (GroupAdaGrad's weights:
    one accumulator per row)."""
    max_size: int
    matrix: bool = False

    def strategy(self):
        from hypothesis import strategies as st
        if not self.matrix:
            return st.integers(1, self.max_size).map(lambda n: (n,))
        return st.integers(1, min(4, self.max_size)).flatmap(
            lambda r: st.integers(1, max(1, self.max_size // r)).map(lambda c: (r, c)))

    def sample(self, rng):
        if not self.matrix:
            return (int(rng.integers(1, self.max_size + 1)),)
        r = int(rng.integers(1, min(4, self.max_size) + 1))
        return (r, int(rng.integers(1, max(1, self.max_size // r) + 1)))


_MOMENTUM = OneOf(0.0, Interval(0.0, 0.99))

#: the hyperparameters every optimizer shares, on and off
COMMON = {
    "learning_rate": Decades(-4, 0),
    "wd": OneOf(0.0, Decades(-5, -1)),
    "rescale_grad": OneOf(1.0, Decades(-2, 1)),
    "clip_gradient": OneOf(None, 0.0, Decades(-2, 1)),
}

#: each optimizer's own hyperparameters (MXNet 1.9.1's constructor names)
OWN = {
    "sgd": {"momentum": _MOMENTUM},
    "nag": {"momentum": _MOMENTUM},
    "adagrad": {"eps": OneOf(1e-7, Decades(-10, -1))},
    "rmsprop": {"gamma1": Interval(0.0, 0.999), "gamma2": Interval(0.0, 0.99),
                "epsilon": Decades(-10, -2), "centered": OneOf(False, True),
                "clip_weights": OneOf(None, Decades(-1, 1))},
    "adadelta": {"rho": Interval(0.0, 0.999), "epsilon": Decades(-9, -3)},
    "adam": {"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999),
             "epsilon": Decades(-10, -2)},
    "adamax": {"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999)},
    "nadam": {"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999),
              "epsilon": Decades(-10, -2), "schedule_decay": OneOf(0.004, Interval(0.0, 0.1))},
    "signum": {"momentum": _MOMENTUM, "wd_lh": OneOf(0.0, Decades(-4, -1))},
    "lbsgd": {"momentum": _MOMENTUM,
              "warmup_strategy": OneOf("linear", "power2", "sqrt", "lars"),
              "warmup_epochs": Ints(0, 3), "batch_scale": Ints(1, 3),
              "updates_per_epoch": Ints(1, 4), "begin_epoch": Ints(0, 2)},
    "dcasgd": {"momentum": _MOMENTUM, "lamda": OneOf(0.04, Decades(-3, 1))},
    "ftrl": {"lamda1": OneOf(0.0, Decades(-4, 0)), "beta": OneOf(0.0, Decades(-2, 1))},
    "ftml": {"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999),
             "epsilon": Decades(-10, -2)},
    "sgld": {"seed": Ints(0, 2**32)},
    "adamw": {"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999),
              "epsilon": Decades(-10, -2), "eta": OneOf(1.0, Interval(0.0, 1.0))},
    "lars": {"momentum": _MOMENTUM, "eta": OneOf(0.001, Decades(-3, 0)),
             "eps": OneOf(0.0, Decades(-9, -3)), "momentum_correction": OneOf(True, False)},
    "groupadagrad": {"eps": OneOf(1e-5, Decades(-10, -1))},
    # the bounds on either side of 1, so lower_bound <= upper_bound always
    "lamb": {"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999),
             "epsilon": OneOf(1e-6, Decades(-10, -2)),
             "lower_bound": OneOf(None, Decades(-3, 0)), "upper_bound": OneOf(None, Decades(0, 2)),
             "bias_correction": OneOf(True, False)},
}


#: optimizers whose weight must be a matrix (GroupAdaGrad keeps one accumulator per row): their
#: weights are drawn 2-D (:func:`shape_space`, :func:`weight_shape`)
MATRIX = frozenset({"groupadagrad"})

#: common hyperparameters an optimizer does not take freely: GroupAdaGrad refuses weight decay
#: (MXNet 1.9.1 asserts wd == 0)
COMMON_FIXED = {"groupadagrad": {"wd": 0.0}}


def common_space(name):
    """:data:`COMMON` for optimizer ``name``, with its :data:`COMMON_FIXED` values pinned."""
    return {**COMMON, **{k: Just(v) for k, v in COMMON_FIXED.get(name, {}).items()}}


def shape_space(name, max_size):
    """The weight shapes drawn for optimizer ``name``: :class:`Shapes` of at most
    ``max_size`` elements, 2-D for the :data:`MATRIX` optimizers."""
    return Shapes(max_size, name in MATRIX)


def weight_shape(name, size):
    """The fixed weight shape of ``size`` elements for optimizer ``name`` (recorded inputs):
    ``(size,)``, or for a :data:`MATRIX` optimizer two rows of ``size // 2`` (one row when
    ``size`` is odd)."""
    if name not in MATRIX:
        return (size,)
    rows = 2 if size >= 2 and size % 2 == 0 else 1
    return (rows, size // rows)


def fix_dependent(name, hyper):
    """Hyperparameters that only make sense together: Signum's ``wd_lh`` is MXNet's decoupled
    weight decay of the momentum branch, so it is 0 without momentum."""
    if name == "signum" and hyper.get("momentum") == 0.0 and "wd_lh" in hyper:
        hyper = dict(hyper, wd_lh=0.0)
    return hyper


def hyper_space(name, fixed=None):
    """``{hyperparameter: Space}`` of optimizer ``name``: :data:`COMMON` and its own, with the
    ``fixed`` ones pinned (an unknown fixed name is a ``ValueError`` naming the known ones)."""
    if name not in OWN:
        raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(sorted(OWN))}")
    space = {**common_space(name), **OWN[name]}
    fixed = dict(fixed or {})
    unknown = sorted(set(fixed) - set(space))
    if unknown:
        raise ValueError(f"fixed names unknown hyperparameter(s) {unknown} of {name!r}; known: "
                         f"{sorted(space)}")
    space.update({k: Just(v) for k, v in fixed.items()})
    return space


def array_over_decades(rng, n, lo, hi, zeros=True):
    """A float64 array of ``n`` values with random signs and magnitudes over ``10**lo..10**hi``
    (every third element may be an exact zero), from numpy generator ``rng``."""
    x = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(lo, hi, n)
    if zeros:
        x[(rng.random(n) < 0.5) & (np.arange(n) % 3 == 0)] = 0.0
    return x
