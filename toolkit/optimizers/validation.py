"""Hyperparameter validation: the checks, and each optimizer's declared domains.

An optimizer class declares the values each of its hyperparameters may take once, as data
(``domains = {"beta1": unit(), "epsilon": nonneg()}``); :class:`~toolkit.optimizers.base.Optimizer`
turns every declared name into a checked attribute, so the constructor and every later
assignment (``opt.beta1 = float("nan")``) run the same check, and
:meth:`~toolkit.optimizers.base.Optimizer.settings` lists them. Each check raises a
``ValueError`` or ``TypeError`` that names the argument and the value, before anything is
assigned.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import numbers
import operator
import sys

import numpy as np

__all__ = ["spelled", "spelling", "Domain", "AliasAttribute", "alias_attribute", "nonneg", "positive", "unit", "integer", "choice", "reals", "flag", "callable_or_none",
           "real", "check_nonneg", "check_positive", "check_unit", "check_int", "check_choice",
           "check_real", "check_reals"]


#: ``{keyword: how the caller spells it}`` while :func:`spelled` is in force
_SPELLED = contextvars.ContextVar("spelled", default=None)


@contextlib.contextmanager
def spelled(names):
    """Within it, a check that ties two hyperparameters together names the keyword ``k`` as
    ``names[k]`` where there is one (``{"etaminus": "etas[0]"}``: ``toolkit.torch`` names the
    keywords torch's users give, MXNet's in parentheses; :func:`spelling`)."""
    token = _SPELLED.set(dict(names))
    try:
        yield
    finally:
        _SPELLED.reset(token)


def spelling(keyword):
    """How an error message names the hyperparameter ``keyword``: the keyword, or where
    :func:`spelled` gives another name for it, that name with the keyword in parentheses
    (``etas[0] (etaminus)``)."""
    given = (_SPELLED.get() or {}).get(keyword)
    return keyword if given is None or given == keyword else f"{given} ({keyword})"


# --------------------------------------------------------------------------------------------
# the checks: each raises a ValueError/TypeError that names the argument, else returns the value
# --------------------------------------------------------------------------------------------
def _real(name, x):
    """``x`` as a finite float: the one place a hyperparameter becomes a float."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__} {x!r}")
    try:
        x = float(x)
    except OverflowError:  # an int (or a Fraction) beyond float64's range: not finite either
        raise ValueError(f"{name} must be finite, got {_abbreviated(x)}, beyond the float range "
                         f"(largest {sys.float_info.max!r})") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {x!r}")
    return x


def _abbreviated(x):
    """``x`` for an error message: a huge int as its magnitude (its digits may be thousands
    long, and Python refuses to print more than 4300 of them), anything else as its repr, cut
    short."""
    if isinstance(x, numbers.Integral):
        x = int(x)
        return f"an int of about {'-' if x < 0 else ''}1e+{int(math.log10(abs(x)))}"
    text = repr(x)
    return text if len(text) <= 60 else f"{text[:40]}...{text[-12:]} ({len(text)} characters)"


def check_nonneg(name, x):
    x = _real(name, x)
    if x < 0:
        raise ValueError(f"{name} must be >= 0, got {x!r}")
    return x


def check_positive(name, x):
    x = _real(name, x)
    if x <= 0:
        raise ValueError(f"{name} must be > 0, got {x!r}")
    return x


def check_real(name, x, minimum=None, maximum=None):
    """A finite real in ``[minimum, maximum]`` (None: no bound on that side)."""
    x = _real(name, x)
    if minimum is not None and x < minimum:
        raise ValueError(f"{name} must be >= {minimum!r}, got {x!r}")
    if maximum is not None and x > maximum:
        raise ValueError(f"{name} must be <= {maximum!r}, got {x!r}")
    return x


def check_unit(name, x, *, closed=False):
    """A decay/momentum factor: in [0, 1) (or [0, 1] when ``closed``)."""
    x = _real(name, x)
    if x < 0 or x > 1 or (x == 1 and not closed):
        raise ValueError(f"{name} must be in [0, 1{']' if closed else ')'}, got {x!r}")
    return x


def check_int(name, x, minimum, maximum=None):
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(x).__name__} {x!r}")
    if x < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {x!r}")
    if maximum is not None and x > maximum:
        top = maximum if maximum < 2 ** 32 else f"2**{maximum.bit_length() - 1}" \
            if maximum & (maximum - 1) == 0 else maximum
        raise ValueError(f"{name} must be <= {top}, got {int(x)!r}")
    return int(x)


def check_choice(name, x, choices):
    if x not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {x!r}")
    return x


def check_reals(name, x, length):
    """``x`` as a tuple of ``length`` finite reals (Muon's ``ns_coefficients``)."""
    if isinstance(x, (str, bytes)) or not hasattr(x, "__len__"):
        raise TypeError(f"{name} must be a sequence of {length} numbers, got {x!r}")
    if len(x) != length:
        raise ValueError(f"{name} must be {length} numbers, got {len(x)}: {tuple(x)!r}")
    return tuple(_real(name, v) for v in x)


def _check_flag(name, x, strict):
    if strict and not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {x!r}")
    return bool(x)


def _check_callable(name, x):
    if x is not None and not callable(x):
        raise TypeError(f"{name} must be callable (an LRScheduler) or None, got {x!r}")
    return x


# --------------------------------------------------------------------------------------------
# domains: what one hyperparameter may take, as data
# --------------------------------------------------------------------------------------------
class Domain:
    """The values one hyperparameter may take.

    ``kind`` is one of ``"nonneg"`` (a finite real >= 0), ``"positive"`` (> 0), ``"real"`` (a
    finite real between ``minimum`` and ``maximum``, either None for no bound), ``"unit"``
    ([0, 1), or [0, 1] when ``closed``), ``"int"`` (an integer >= ``minimum``, and <=
    ``maximum`` where one is given), ``"choice"``
    (one of ``choices``), ``"reals"`` (a sequence of ``minimum`` finite reals, kept as a
    tuple of floats), ``"flag"`` (a bool; ``strict`` refuses anything but a bool, else any
    value is taken for its truth), ``"callable"`` (a callable or None). ``none`` also admits
    None: True, or a hint that error messages give (``"use None to disable clipping"``);
    ``keyword`` is the constructor's name for it where the attribute is named otherwise
    (AdaGrad's ``eps`` is kept as ``float_stable_eps``); ``aliases`` are further names the
    constructor accepts for it (RMSProp's guide spelling ``rho`` of ``gamma1``). The keyword and
    every alias are attributes too (:func:`alias_attribute`): reading one gives the value,
    assigning one runs this check and sets the value (the keyword is not made an attribute
    where the class defines that name itself: ``learning_rate``, the scheduler's current
    value). ``numeric=False`` marks a setting that does not change the numbers (the backend),
    which :meth:`Optimizer.settings` leaves out. ``reference=False`` marks one that
    :meth:`Optimizer.reference_hyper` does not hand the reference step as a hyperparameter (the
    dense oracle has no ``lazy_update``; SGLD gives its ``seed`` with each index's noise stream).
    """

    __slots__ = ("kind", "minimum", "closed", "choices", "strict", "none", "keyword", "aliases",
                 "numeric", "maximum", "reference")

    def __init__(self, kind, *, minimum=None, closed=False, choices=None, strict=True, none=None,
                 keyword=None, aliases=(), numeric=True, maximum=None, reference=True):
        if kind not in _CHECKS:
            raise ValueError(f"unknown domain kind {kind!r}; one of {tuple(_CHECKS)}")
        if isinstance(aliases, str) or not all(isinstance(a, str) for a in aliases):
            raise TypeError(f"aliases must be a tuple of names, got {aliases!r}")
        self.kind, self.minimum, self.closed = kind, minimum, closed
        self.maximum, self.reference = maximum, reference
        self.choices = None if choices is None else tuple(choices)
        self.strict, self.none, self.keyword, self.numeric = strict, none, keyword, numeric
        self.aliases = tuple(aliases)

    def label(self, attr, alias=None, given=None):
        """How error messages name the hyperparameter held in attribute ``attr``: by its
        keyword; given as ``alias``, that name and the keyword it stands for; given through
        ``given``, a keyword of another framework's that sets it (``toolkit.torch``'s ``lr``,
        ``betas[0]``), that keyword with this one in parentheses."""
        name = self.keyword or attr
        notes = []
        if given is not None and given != name:
            name, notes = given, [name]
        elif alias is not None and alias != name:
            name = f"{alias} (an alias of {name})"
        if isinstance(self.none, str):
            notes.append(self.none)
        return f"{name} ({'; '.join(notes)})" if notes else name

    def other_names(self, attr):
        """The names besides ``attr`` that the hyperparameter goes by: the keyword, then the
        aliases."""
        names = ([self.keyword] if self.keyword and self.keyword != attr else []) + list(self.aliases)
        return tuple(dict.fromkeys(names))

    def check(self, attr, value, alias=None, given=None):
        """``value`` as the optimizer keeps it, or a ValueError/TypeError naming it (by
        ``alias`` or ``given`` where it was given under that name: :meth:`label`)."""
        if value is None and self.none is not None:
            return None
        return _CHECKS[self.kind](self, self.label(attr, alias, given), value)

    def invalid_examples(self):
        """Values this domain refuses, each with the error :meth:`check` raises for it,
        ``((value, ValueError or TypeError), ...)``, derived from the kind: for a real, a
        negative (a real >= 0; with 0 too for one > 0; -0.1, 1.5 and, for [0, 1), 1 for a unit
        interval), NaN, +-inf and a string; for an integer, the integer just below the minimum
        (and -1 where that is not negative), the one above the maximum, a float and a bool; for
        a choice, a non-member, a member in another case and None (each where it is not a
        member); for a strict flag an int and a string; for a callable a number. None is refused
        too where the domain does not admit it (a real, an integer). The validation tests run
        every one of them against every optimizer's constructor (tests/test_validation.py)."""
        nan, inf = float("nan"), float("inf")
        kind, out = self.kind, []
        if kind in ("nonneg", "positive", "unit"):
            below = (-0.1,) if kind == "unit" else (-1.0, -1e-8)
            out += [(v, ValueError) for v in below]
            if kind == "positive":
                out.append((0.0, ValueError))
            if kind == "unit":
                out += [(v, ValueError) for v in ((1.5,) if self.closed else (1.0, 1.5))]
            out += [(v, ValueError) for v in (nan, inf, -inf)]
            out += [(v, TypeError) for v in ("0.5",) + (("0.9",) if kind == "unit" else ())]
            if self.none is None:
                out.append((None, TypeError))
        elif kind == "real":
            if self.minimum is not None:
                out.append((self.minimum - 1.0, ValueError))
            if self.maximum is not None:
                out.append((self.maximum + 1.0, ValueError))
            out += [(v, ValueError) for v in (nan, inf, -inf)]
            out.append(("0.5", TypeError))
            if self.none is None:
                out.append((None, TypeError))
        elif kind == "int":
            low = self.minimum - 1
            out += [(v, ValueError) for v in dict.fromkeys((low, min(low, -1)))]
            if self.maximum is not None:
                out.append((self.maximum + 1, ValueError))
            out += [(v, TypeError) for v in (float(self.minimum + 1), True)]
            if self.none is None:
                out.append((None, TypeError))
        elif kind == "choice":
            members = set(self.choices)
            text = [c for c in self.choices if isinstance(c, str)]
            candidates = ["bogus"] + [c.swapcase() for c in text[:1]] + [None]
            out += [(v, ValueError) for v in candidates
                    if v not in members and not (v is None and self.none is not None)]
        elif kind == "reals":
            n = self.minimum
            out += [((1.0,) * (n + 1), ValueError), ((float("nan"),) * n, ValueError),
                    ("abc", TypeError), (1.0, TypeError)]
            if self.none is None:
                out.append((None, TypeError))
        elif kind == "flag" and self.strict:
            out += [(v, TypeError) for v in (1, "yes")]
        elif kind == "callable":
            out.append((0.1, TypeError))
        return tuple(out)

    def __repr__(self):
        shown = [f"{k}={getattr(self, k)!r}" for k in self.__slots__[1:]
                 if getattr(self, k) != _DEFAULTS[k]]
        return f"Domain({', '.join([repr(self.kind)] + shown)})"


_DEFAULTS = {"minimum": None, "closed": False, "choices": None, "strict": True, "none": None,
             "keyword": None, "aliases": (), "numeric": True, "maximum": None,
             "reference": True}

_CHECKS = {
    "nonneg": lambda d, name, x: check_nonneg(name, x),
    "positive": lambda d, name, x: check_positive(name, x),
    "unit": lambda d, name, x: check_unit(name, x, closed=d.closed),
    "real": lambda d, name, x: check_real(name, x, d.minimum, d.maximum),
    "int": lambda d, name, x: check_int(name, x, d.minimum, d.maximum),
    "choice": lambda d, name, x: check_choice(name, x, d.choices),
    "reals": lambda d, name, x: check_reals(name, x, d.minimum),
    "flag": lambda d, name, x: _check_flag(name, x, d.strict),
    "callable": lambda d, name, x: _check_callable(name, x),
}


def nonneg(**kw):
    """A finite real >= 0."""
    return Domain("nonneg", **kw)


def positive(**kw):
    """A finite real > 0."""
    return Domain("positive", **kw)


def real(*, minimum=None, maximum=None, **kw):
    """A finite real in ``[minimum, maximum]`` (None: unbounded on that side)."""
    return Domain("real", minimum=minimum, maximum=maximum, **kw)


def unit(*, closed=False, **kw):
    """A decay or momentum factor in [0, 1) ([0, 1] when ``closed``)."""
    return Domain("unit", closed=closed, **kw)


def integer(minimum, **kw):
    """An integer (not a bool) >= ``minimum`` (and <= ``maximum=`` where given)."""
    return Domain("int", minimum=minimum, **kw)


def choice(choices, **kw):
    """One of ``choices``."""
    return Domain("choice", choices=choices, **kw)


def reals(length, **kw):
    """A sequence of ``length`` finite reals, kept as a tuple of floats."""
    return Domain("reals", minimum=length, **kw)


def flag(*, strict=True, **kw):
    """A bool (``strict=False``: any value, taken for its truth, as MXNet does)."""
    return Domain("flag", strict=strict, **kw)


def callable_or_none(**kw):
    """A callable (a learning-rate scheduler) or None."""
    return Domain("callable", **kw)


def storage(attr):
    """Where a checked attribute keeps its value in the instance ``__dict__``."""
    return "_hp_" + attr


def checked_attribute(attr, domain, after_set):
    """A property for hyperparameter ``attr``: reads are one C-level attribute lookup (as fast
    as a plain attribute), assignments run ``domain.check`` first, then
    ``after_set(optimizer, attr, old_value)``, which may refuse the new value (it is then put
    back)."""
    key = storage(attr)
    missing = object()

    def set_value(self, value):
        value = domain.check(attr, value)
        d = self.__dict__
        old = d.get(key, missing)
        d[key] = value
        if old is missing:
            return
        try:
            after_set(self, attr, old)
        except BaseException:
            d[key] = old
            raise

    return property(operator.attrgetter(key), set_value,
                    doc=f"Hyperparameter ``{domain.keyword or attr}``: {domain!r}; checked on "
                        "every assignment.")


class AliasAttribute(property):
    """The property :func:`alias_attribute` makes (a class tells its aliases from its own
    attributes by this type)."""


def alias_attribute(alias, attr):
    """A property for ``alias``, another name of hyperparameter ``attr``: reading it gives the
    value of ``attr``; assigning it runs the check of ``attr``'s domain (the most derived
    class's, an error naming ``alias``) and then assigns ``attr`` (its own check, relations and
    layout checks included), so no name of a hyperparameter escapes its checks."""
    key = storage(attr)

    def set_value(self, value):
        domain = type(self).hyperparameter_domains()[attr]
        setattr(self, attr, domain.check(attr, value, alias))

    return AliasAttribute(operator.attrgetter(key), set_value,
                          doc=f"Another name of hyperparameter ``{attr}``: reads and assigns it "
                              "(checked on every assignment).")
