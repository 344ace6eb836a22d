"""Small per-element rules that the backends and optimizers share (same form as every update rule:
``factory(ftype) -> rule(w, g, hp) -> w``), so a buffer operation runs on whichever backend holds
the arrays without a line of backend code."""
from __future__ import annotations

__all__ = ["fill_rule", "copy_rule", "add_rule"]


def fill_rule(f):
    """``w = hp[0]``."""
    def rule(w, g, hp):
        return hp[0]
    return rule


def copy_rule(f):
    """``w = g`` (converted to ``w``'s dtype when storing)."""
    def rule(w, g, hp):
        return g
    return rule


def add_rule(f):
    """``w = w + g``."""
    def rule(w, g, hp):
        return w + g
    return rule

