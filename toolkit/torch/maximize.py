"""``maximize=True`` on the steady path: the rows of the negated gradients.

torch's ``maximize`` steps on ``-grad``. A rule that reads its gradient only through products
with fields of its row (``rs*g``, SGD's MXNet kernels' ``lrrs*g``) takes the negated gradient
bit for bit when those fields are negated instead: IEEE negation is exact, a product's rounding
does not depend on its factors' signs, and clipping is symmetric. The one exception is a NaN
gradient: the NaNs left in the weight and states then have the opposite sign bit of the
``-grad`` path's (NaNs either way; measured).

A rule declares those fields where it is written (``toolkit.optimizers.gradient.through``);
``tests/test_torch_maximize.py`` proves each declaration against the ``-grad`` path. A rule
that declares none (MXNet's signSGD) steps on ``-grad`` through the general path.
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
