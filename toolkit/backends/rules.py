"""Small per-element rules that the backends and optimizers share (same form as every update rule:
``factory(ftype) -> rule(w, g, hp) -> w``), so a buffer operation runs on whichever backend holds
the arrays without a line of backend code."""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["FillRow", "fill_rule", "copy_rule", "add_rule", "DirectionPass"]


class DirectionPass(NamedTuple):
    """The first pass of a two-pass step (LAMB): a launcher's ``direction_norms(pass, weight,
    grad, states)`` evaluates ``direction`` (``rule(w, g, s0, s1, hp) -> (u, s0', s1')``) on every
    element and returns ``(sum w^2, sum u^2)`` in float64, reduced in a fixed order
    (``toolkit.backends.cpu.direction_kernel``); it writes nothing (the second pass, an ordinary
    rule, forms the same values again and stores them). ``hyper`` is the rule's ``hp`` (its
    named row, e.g. ``toolkit.optimizers.lamb.LambRow``). A Trainer receives it from
    ``Optimizer.norm_inputs`` and runs it for a whole group in one segmented call."""
    direction: object
    hyper: tuple


class FillRow(NamedTuple):
    """The scalars of :func:`fill_rule`."""
    value: float  #: what every element becomes


def fill_rule(f):
    """``w = value`` (``hp`` a :class:`FillRow`)."""
    def rule(w, g, hp):
        return FillRow(*hp).value
    return rule


def copy_rule(f):
    """``w = g`` (converted to ``w``'s dtype when storing). ``hp`` is not read (a launch passes
    one placeholder value); so for :func:`add_rule`."""
    def rule(w, g, hp):
        return g
    return rule


def add_rule(f):
    """``w = w + g``."""
    def rule(w, g, hp):
        return w + g
    return rule

