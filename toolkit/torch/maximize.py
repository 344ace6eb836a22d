"""``maximize=True`` on the steady path: the rows of the negated gradients.

torch's ``maximize`` steps on ``-grad``. A rule that reads its gradient ``g`` only through
products with fields of its row (``rs*g``, and SGD's MXNet kernels' ``lrrs*g``) takes the
negated gradient bit for bit when those fields are negated instead: IEEE negation is exact, a
product's magnitude and rounding do not depend on the signs of its factors (its sign is the
exclusive or of theirs), and clipping to ``[-c, c]`` is symmetric. Everything else the rule
computes from ``g`` (squares, absolute values, signs, the weight decay added to it) then sees
the same numbers as with ``-grad``. One exception: a NaN gradient. ``-grad`` flips its sign bit
and the product keeps the NaN operand's sign, so where the gradient holds a NaN the NaNs this
path leaves in the weight and states have the opposite sign bit of the ``-grad`` path's (NaNs
either way; measured, and not covered by the bit-for-bit test, whose gradients hold infinities
and signed zeros but no NaN).

A rule declares those fields where it is written (``toolkit.optimizers.gradient.through``);
each declaration is proven against the ``-grad`` path by ``tests/test_torch_maximize.py`` (every
optimizer and convention whose step the steady path takes, with the options that reach each of
its rules, gradients with infinities and signed zeros included). A rule that declares none
(MXNet's signSGD reads the gradient's sign alone) steps on ``-grad`` through the general path,
as every maximize step did before.
"""
from __future__ import annotations

from ..optimizers.gradient import SIGN_FIELDS

__all__ = ["sign_fields", "negated_row"]


def sign_fields(factory):
    """The fields of ``factory``'s row that multiply the gradient, or None where the rule
    declares none."""
    return getattr(factory, SIGN_FIELDS, None)


def negated_row(factory, names, row):
    """``row`` (a tuple of ``factory``'s rule, its fields named ``names``) with the fields that
    multiply the gradient (:func:`sign_fields`) negated: the row of the negated gradient; None
    where the rule declares none (or its row does not name them)."""
    columns = _columns(factory, names)
    if columns is None:
        return None
    row = list(row)
    for k in columns:
        row[k] = -row[k]
    return tuple(row)


_COLUMNS = {}


def _columns(factory, names):
    """The positions in a row named ``names`` of ``factory``'s sign fields (a list), or None;
    kept per ``(factory, names)``."""
    key = (factory, names)
    try:
        return _COLUMNS[key]
    except KeyError:
        pass
    except TypeError:  # names that cannot be a key
        return None
    fields = sign_fields(factory)
    if not fields or names is None or not all(f in names for f in fields):
        columns = None
    else:
        columns = [names.index(f) for f in fields]
    _COLUMNS[key] = columns
    return columns
