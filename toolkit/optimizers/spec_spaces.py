"""Declarative sets of values: what an optimizer's spec says its hyperparameters and weights
range over (:class:`toolkit.optimizers.spec.Spec`), read by the oracle and the tests.

A :class:`Space` becomes a hypothesis strategy (:meth:`Space.strategy`, the only importer of
hypothesis) or one value drawn with a numpy generator (:meth:`Space.sample`, for cheap
screening). ``toolkit.oracle.space`` re-exports its primitives; ``toolkit.optimizers.spaces`` is a
deprecated alias.
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Space", "Decades", "Interval", "Ints", "Just", "OneOf", "Shapes", "MOMENTUM", "COMMON",
           "USUAL_MOMENTUM", "USUAL_BETA1", "USUAL_BETA2"]


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
    ``(rows, cols)``, 1 to ``rows`` (4) rows of 1 to ``max_size // rows`` columns
    (GroupAdaGrad's weights: one accumulator per row), or with ``tensor`` each of a vector,
    such a matrix and a stack ``(b, rows, cols)`` of 1 to 3 of them, equally likely (Adafactor
    factors the last two dimensions)."""
    max_size: int
    matrix: bool = False
    tensor: bool = False
    rows: int = 4

    def strategy(self):
        from hypothesis import strategies as st
        if self.tensor:
            def stack(b):
                return Shapes(max(1, self.max_size // b), matrix=True).strategy().map(
                    lambda rc: (b,) + rc)
            return st.one_of(st.integers(1, self.max_size).map(lambda n: (n,)),
                             Shapes(self.max_size, matrix=True).strategy(),
                             st.integers(1, min(3, self.max_size)).flatmap(stack))
        if not self.matrix:
            return st.integers(1, self.max_size).map(lambda n: (n,))
        return st.integers(1, min(self.rows, self.max_size)).flatmap(
            lambda r: st.integers(1, max(1, self.max_size // r)).map(lambda c: (r, c)))

    def sample(self, rng):
        if self.tensor:
            rank = int(rng.integers(1, 4))
            if rank == 1:
                return Shapes(self.max_size).sample(rng)
            if rank == 2:
                return Shapes(self.max_size, matrix=True).sample(rng)
            b = int(rng.integers(1, min(3, self.max_size) + 1))
            return (b,) + Shapes(max(1, self.max_size // b), matrix=True).sample(rng)
        if not self.matrix:
            return (int(rng.integers(1, self.max_size + 1)),)
        r = int(rng.integers(1, min(self.rows, self.max_size) + 1))
        return (r, int(rng.integers(1, max(1, self.max_size // r) + 1)))


#: momentum: exactly 0 (the branch without state) or in [0, 0.99]
MOMENTUM = OneOf(0.0, Interval(0.0, 0.99))

#: the usual ranges (``Spec.usual``: what people train with) that several optimizers share. Each
#: spec that uses one says where its own defaults come from.
#:
#: momentum: off (0, plain SGD) or a heavy ball between 0.5 and 0.99. MXNet's examples and
#: torch.optim's documentation use 0.9; Sutskever, Martens, Dahl and Hinton (ICML 2013) train
#: with 0.9 to 0.99 (0.995 and 0.999 only late in a schedule); He et al. (2016) 0.9; Bernstein
#: et al. (Signum, 2018) 0.9. Values near 0 but not 0 are a corner nobody trains in.
USUAL_MOMENTUM = OneOf(0.0, Interval(0.5, 0.99))
#: the decay of a first moment (Adam's beta1 and its relatives): Kingma and Ba's 0.9, the default
#: of MXNet, torch.optim, optax and Keras; 0.5 to 0.99 covers what papers tune (GANs use 0.5)
USUAL_BETA1 = Interval(0.5, 0.99)
#: the decay of a second moment (beta2): 0.999 by default (Kingma and Ba; MXNet, torch.optim,
#: optax, Keras), 0.98 to 0.95 for transformers (Vaswani et al. 2017: 0.98), 0.9999 at most
USUAL_BETA2 = Interval(0.9, 0.9999)

#: the hyperparameters every optimizer shares, on and off
COMMON = {
    "learning_rate": Decades(-4, 0),
    "wd": OneOf(0.0, Decades(-5, -1)),
    "rescale_grad": OneOf(1.0, Decades(-2, 1)),
    "clip_gradient": OneOf(None, 0.0, Decades(-2, 1)),
}
