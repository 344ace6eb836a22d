"""Running error analysis: how far may a lower-precision implementation stray from the oracle?

An optimizer step evaluated in float32 differs from the float64 oracle by rounding. How much it may
differ depends on the data: ``beta1*m + (1-beta1)*g`` loses all its relative accuracy when the two
terms cancel, and a plain ULP bound then fails (one float32 FTRL step: p99 error 483 ULP, max
about 9e5 ULP). So instead of a fixed tolerance the oracle computes, alongside every value, a
first-order bound on the absolute error that a correctly rounded evaluation of the same formula
in a precision with unit roundoff ``u`` can accumulate (Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., section 3.3, "running error analysis"):

=====================  ==================================================================
operation              error bound of the result (``v`` its value, ``e`` input errors)
=====================  ==================================================================
``a +- b``             ``e_a + e_b + u|v|``
``a * b``              ``|a| e_b + |b| e_a + e_a e_b + u|v|``
``a / b``              ``(e_a + |v| e_b) / (|b| - e_b) + u|v|`` (infinite if ``e_b >= |b|``)
``sqrt(a)``            ``min(e_a / (2 v), sqrt(e_a)) + u|v|``
``max, min, clip``     ``max(e_a, e_b)`` (1-Lipschitz, so no new rounding)
``abs, -a``            ``e_a``
``sign(a)``            exact, but a *near tie* where ``|a| <= e_a``
``a > b`` and friends  exact, but a *near tie* where ``|a - b| <= e_a + e_b``
=====================  ==================================================================

Every rounding also adds the smallest subnormal of the target type (gradual underflow), and every
operand that is not :class:`Tracked` (a Python float, a float array: hyperparameters and host
precomputed scalars, which an implementation rounds to its own precision once) carries that one
rounding, ``u|v|`` plus the smallest subnormal: a hyperparameter below the target's range
underflows (``rho = 5.7e-47`` is 0 in float32, so ``rho*acc_g`` is 0 where the oracle's is
``5.7e-47*acc_g``). Integers, booleans and exact zeros are exact, and stay so: a product with
an exact zero factor and a sum with an exact zero operand add no rounding (``0*y`` and ``x + 0``
are exact in every precision), so an exact zero made of exact zeros (Lion's interpolation of a
zero moment and a zero gradient) is no near tie of ``sign``.

A result whose value depends on a comparison that is a near tie is flagged (``tie``); its value is
either branch, so a check exempts it. The bound models no overflow, so a result computed from an
operand that may lie beyond the target type's range (``|v| + e`` at or past its overflow threshold,
:func:`overflow_threshold`: the implementation may hold an infinity there, and ``inf - inf``,
``0*inf`` and ``inf/inf`` are NaN in IEEE arithmetic) is flagged the same way, and so is everything
computed from it: its value is not bounded, and a check exempts it. A result that itself lies
beyond the range is not flagged (its correctly rounded value is the infinity of its sign).

A step function written with the operators above and the numpy functions ``sqrt, abs, sign,
maximum, minimum, clip, where, square, sum`` (``sum`` also along an ``axis``, with ``keepdims``)
runs unchanged on :class:`Tracked` inputs: that is how the reference modules are written.

Example::

    >>> import numpy as np
    >>> from reference.error_bound import Tracked
    >>> a = Tracked(np.array([1.0, 1.0]), u=2.0**-24)
    >>> d = a - np.array([1.0, 0.5])          # exact cancellation in the first element
    >>> bool(d.err[0] >= 2.0**-24)            # the constant 1.0 carried rounding u
    True
"""
from __future__ import annotations

import numpy as np

__all__ = ["Tracked", "Cond", "unit_roundoff", "tiny", "overflow_threshold", "track", "value",
           "error", "ties"]


def unit_roundoff(dtype) -> float:
    """Unit roundoff ``u = eps/2`` of a floating dtype (2**-24 for float32)."""
    return float(np.finfo(np.dtype(dtype)).eps) / 2.0


def tiny(dtype) -> float:
    """Smallest positive subnormal of ``dtype``: the absolute error bound of gradual underflow."""
    return float(np.finfo(np.dtype(dtype)).smallest_subnormal)


def overflow_threshold(dtype) -> float:
    """The smallest magnitude that ``dtype`` rounds to infinity (round to nearest): its largest
    finite value plus half an ulp; ``inf`` for float64 (no float64 value is beyond its range)."""
    dt = np.dtype(dtype)
    big = np.finfo(dt).max
    ulp = np.float64(big) - np.float64(np.nextafter(big, dt.type(0)))
    with np.errstate(over="ignore"):
        return float(np.float64(big) + ulp / 2)


#: the overflow threshold of the precision a unit roundoff names (a Tracked knows its ``u``)
_TOP = {unit_roundoff(dt): overflow_threshold(dt) for dt in (np.float16, np.float32, np.float64)}


def _is_exact(x) -> bool:
    if isinstance(x, (bool, int, np.bool_, np.integer)):
        return True
    if isinstance(x, np.ndarray) and x.dtype.kind in "biu":
        return True
    return False


class Cond:
    """A boolean mask from a comparison, with the mask of near ties (either answer possible)."""

    __array_priority__ = 1000

    def __init__(self, mask, tie):
        self.mask = np.asarray(mask, dtype=bool)
        self.tie = np.asarray(tie, dtype=bool)

    def _other(self, o):
        if isinstance(o, Cond):
            return o.mask, o.tie
        return np.asarray(o, dtype=bool), np.zeros(np.shape(o), dtype=bool)

    def __and__(self, o):
        m, t = self._other(o)
        return Cond(self.mask & m, self.tie | t)

    __rand__ = __and__

    def __or__(self, o):
        m, t = self._other(o)
        return Cond(self.mask | m, self.tie | t)

    __ror__ = __or__

    def __invert__(self):
        return Cond(~self.mask, self.tie)

    def __mul__(self, o):
        # ``cond * x`` selects x where the condition holds, else exact zero.
        if isinstance(o, Tracked):
            return _where(self, o, 0)
        return self.mask * np.asarray(o)

    __rmul__ = __mul__

    def __array__(self, dtype=None, copy=None):
        return self.mask if dtype is None else self.mask.astype(dtype)


class Tracked:
    """A float64 value with a bound ``err`` on the absolute rounding error of evaluating it with
    unit roundoff ``u``, and a ``tie`` mask of elements that sit on a branch point."""

    __array_priority__ = 1000

    def __init__(self, value, err=None, tie=None, *, u: float, tiny: float = 0.0):
        self.value = np.asarray(value, dtype=np.float64)
        shape = self.value.shape
        self.err = np.zeros(shape) if err is None else _filled(err, np.float64, shape)
        self.tie = np.zeros(shape, dtype=bool) if tie is None else _filled(tie, bool, shape)
        self.u = float(u)
        self.tiny = float(tiny)

    # --- construction helpers -------------------------------------------------------------
    def _new(self, value, err, tie):
        return Tracked(value, err, tie, u=self.u, tiny=self.tiny)

    def _lift(self, x):
        """An operand as (value, err, tie): a float constant carries one rounding to the target
        precision (``u|v|`` plus the smallest subnormal: a hyperparameter below the target's
        range, such as ``rho = 5.7e-47`` in float32, rounds to 0 or a subnormal, an error far
        beyond ``u|v|``); an exact zero and integers carry none."""
        if isinstance(x, Tracked):
            return x.value, x.err, x.tie
        if isinstance(x, Cond):
            return x.mask.astype(np.float64), 0.0, x.tie
        v = np.asarray(x, dtype=np.float64)
        e = 0.0 if _is_exact(x) else np.where(v == 0, 0.0, self._round(v))
        return v, e, False

    def _round(self, v):
        return self.u * np.abs(v) + self.tiny

    @property
    def top(self) -> float:
        """The overflow threshold of the precision whose unit roundoff is ``u`` (``inf`` for
        float64 and for a ``u`` that names no IEEE type)."""
        return _TOP.get(self.u, np.inf)

    def _beyond(self, v, e):
        """Where an operand ``(v, e)`` may lie beyond the range (``|v| + e >= top``): the
        implementation may hold an infinity, and what is computed from it is not bounded."""
        with np.errstate(invalid="ignore", over="ignore"):
            return np.abs(v) + e >= self.top

    def _beyond2(self, va, ea, vb, eb):
        """``_beyond(va, ea) | _beyond(vb, eb)``, the same operations under one errstate."""
        with np.errstate(invalid="ignore", over="ignore"):
            top = self.top
            return (np.abs(va) + ea >= top) | (np.abs(vb) + eb >= top)

    # --- shape-like conveniences ----------------------------------------------------------
    @property
    def shape(self):
        """The value's shape."""
        return self.value.shape

    @property
    def size(self):
        """The value's number of elements."""
        return self.value.size

    @property
    def ndim(self):
        """The value's number of dimensions."""
        return self.value.ndim

    def copy(self):
        """A copy with the same value, bound and near-tie flags."""
        return self._new(self.value.copy(), self.err, self.tie)

    def __len__(self):
        return len(self.value)

    def __repr__(self):
        return f"Tracked(value={self.value!r}, err={self.err!r})"

    # --- arithmetic -----------------------------------------------------------------------
    def _add(self, a, b, sign):
        va, ea, ta = self._lift(a)
        vb, eb, tb = self._lift(b)
        v = va + sign * vb
        beyond = self._beyond2(va, ea, vb, eb)
        # x + 0 is x exactly: an exact zero operand (no error: the implementation holds 0 too)
        # adds no rounding, so an exact zero built from exact zeros stays exact
        rounding = np.where(_exact_zero(va, ea) | _exact_zero(vb, eb), 0.0, self._round(v))
        return self._new(v, ea + eb + rounding, ta | tb | beyond)

    def _mul(self, a, b):
        va, ea, ta = self._lift(a)
        vb, eb, tb = self._lift(b)
        v = va * vb
        aa, ab = np.abs(va), np.abs(vb)
        # an exact zero factor contributes nothing, even against an infinite error (0*inf is NaN)
        # (_scaled's and _beyond's operations, under their one errstate entered once)
        with np.errstate(invalid="ignore", over="ignore"):
            s1, s2, s3 = _scaled_raw(aa, eb), _scaled_raw(ab, ea), _scaled_raw(ea, eb)
            beyond = (aa + ea >= self.top) | (ab + eb >= self.top)   # 0*inf is NaN
        e = s1 + s2 + s3
        # 0*y is 0 exactly (y finite; an infinite y is flagged beyond): no rounding, not even
        # the smallest subnormal, so that sign(0) of exact zeros is not taken for a near tie
        rounding = np.where(_exact_zero(va, ea) | _exact_zero(vb, eb), 0.0, self._round(v))
        return self._new(v, e + rounding, ta | tb | beyond)

    def _div(self, a, b):
        va, ea, ta = self._lift(a)
        vb, eb, tb = self._lift(b)
        with np.errstate(divide="ignore", invalid="ignore"):
            v = va / vb
            margin = np.abs(vb) - eb
            e = np.where(margin > 0, (ea + np.abs(v) * eb) / np.where(margin > 0, margin, 1.0),
                         np.inf)
        beyond = self._beyond2(va, ea, vb, eb)
        return self._new(v, e + self._round(v), ta | tb | beyond)

    def __add__(self, o):
        return self._add(self, o, 1.0)

    def __radd__(self, o):
        return self._add(o, self, 1.0)

    def __sub__(self, o):
        return self._add(self, o, -1.0)

    def __rsub__(self, o):
        return self._add(o, self, -1.0)

    def __mul__(self, o):
        if isinstance(o, Cond):
            return _where(o, self, 0)
        return self._mul(self, o)

    def __rmul__(self, o):
        if isinstance(o, Cond):
            return _where(o, self, 0)
        return self._mul(o, self)

    def __truediv__(self, o):
        return self._div(self, o)

    def __rtruediv__(self, o):
        return self._div(o, self)

    def __neg__(self):
        return self._new(-self.value, self.err, self.tie)

    def __pos__(self):
        return self

    def __abs__(self):
        return self._new(np.abs(self.value), self.err, self.tie)

    def __pow__(self, p):
        if p == 2:
            return self._mul(self, self)
        raise TypeError("Tracked supports only x**2; write other powers out explicitly")

    # --- comparisons ----------------------------------------------------------------------
    def _cmp(self, a, b, op):
        va, ea, ta = self._lift(a)
        vb, eb, tb = self._lift(b)
        mask = op(va, vb)
        # two operands that may both be infinities compare either way
        both = self._beyond(va, ea) & self._beyond(vb, eb)
        tie = (np.abs(va - vb) <= ea + eb) & ((ea + eb) > 0) | ta | tb | both
        return Cond(mask, tie)

    def __gt__(self, o):
        return self._cmp(self, o, np.greater)

    def __ge__(self, o):
        return self._cmp(self, o, np.greater_equal)

    def __lt__(self, o):
        return self._cmp(self, o, np.less)

    def __le__(self, o):
        return self._cmp(self, o, np.less_equal)

    # --- numpy protocols ------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None:
            return NotImplemented
        name = ufunc.__name__
        if name == "add":
            return self._add(inputs[0], inputs[1], 1.0)
        if name == "subtract":
            return self._add(inputs[0], inputs[1], -1.0)
        if name == "multiply":
            a, b = inputs
            if isinstance(a, Cond) or isinstance(b, Cond):
                c, x = (a, b) if isinstance(a, Cond) else (b, a)
                return _where(c, x, 0)
            return self._mul(a, b)
        if name in ("divide", "true_divide"):
            return self._div(inputs[0], inputs[1])
        if name == "negative":
            return -_as_tracked(inputs[0], self)
        if name in ("absolute", "fabs"):
            return abs(_as_tracked(inputs[0], self))
        if name == "square":
            x = _as_tracked(inputs[0], self)
            return x._mul(x, x)
        if name == "sqrt":
            x = _as_tracked(inputs[0], self)
            v = np.sqrt(x.value)
            with np.errstate(divide="ignore", invalid="ignore"):
                lin = np.where(v > 0, x.err / (2.0 * np.where(v > 0, v, 1.0)), np.inf)
            return self._new(v, np.minimum(lin, np.sqrt(x.err)) + self._round(v),
                             x.tie | self._beyond(x.value, x.err))
        if name == "sign":
            x = _as_tracked(inputs[0], self)
            return self._new(np.sign(x.value), 0.0, x.tie | ((np.abs(x.value) <= x.err) & (x.err > 0)))
        if name in ("maximum", "minimum"):
            va, ea, ta = self._lift(inputs[0])
            vb, eb, tb = self._lift(inputs[1])
            f = np.maximum if name == "maximum" else np.minimum
            v = f(va, vb)
            # The error of the branch taken; both errors where the two are within reach.
            near = np.abs(va - vb) <= ea + eb
            e = np.where(near, np.maximum(ea, eb), np.where(v == va, ea, eb))
            return self._new(v, e, ta | tb)
        if name in ("greater", "greater_equal", "less", "less_equal"):
            return self._cmp(inputs[0], inputs[1], ufunc)
        return NotImplemented

    def __array_function__(self, func, types, args, kwargs):
        if func is np.where:
            return _where(*args)
        if func is np.clip:
            x, lo, hi = args[0], args[1], args[2]
            return np.minimum(np.maximum(_as_tracked(x, self), lo), hi)
        if func is np.sum:
            # a recursive sum in any order: |error| <= (n-1) u sum|x_i| (first order), for the
            # whole array or along ``axis`` (GroupAdaGrad's row sums); n subnormal roundings
            x = args[0]
            axis = kwargs.get("axis", args[1] if len(args) > 1 else None)
            keepdims = bool(kwargs.get("keepdims", False))
            if set(kwargs) - {"axis", "keepdims"} or len(args) > 2:
                return NotImplemented
            n = x.value.size if axis is None else x.value.shape[axis]

            def red(a, f=np.sum):
                return f(a, axis=axis, keepdims=keepdims)
            v = red(x.value)
            e = red(x.err) + self.u * max(n - 1, 1) * red(np.abs(x.value)) + n * self.tiny
            return self._new(v, e, red(x.tie | self._beyond(x.value, x.err), np.any))
        if func in (np.shape, np.ndim, np.size):
            return func(self.value)
        return NotImplemented


def _filled(x, dtype, shape):
    """A new array of ``shape`` and ``dtype`` holding ``x`` (broadcast; a copy of an array of
    that shape already, without the broadcast's cost)."""
    x = np.asarray(x, dtype=dtype)
    return x.copy() if x.shape == shape else np.broadcast_to(x, shape).copy()


def _exact_zero(v, e):
    """Where an operand ``(v, e)`` is an exact zero: the value 0 with no error, so that every
    implementation holds 0 there too."""
    return (v == 0) & (np.asarray(e) == 0)


def _scaled(a, b):
    """``a*b`` for non-negative magnitudes, with ``0*inf = 0`` (an exact zero stays exact)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return _scaled_raw(a, b)


def _scaled_raw(a, b):
    """:func:`_scaled` without its errstate (for a caller that has entered it)."""
    return np.where((np.asarray(a) == 0) | (np.asarray(b) == 0), 0.0, np.multiply(a, b))


def _as_tracked(x, like: Tracked) -> Tracked:
    if isinstance(x, Tracked):
        return x
    v, e, t = like._lift(x)
    return like._new(v, e, t)


def _where(cond, a, b):
    like = next(x for x in (a, b) if isinstance(x, Tracked))
    if isinstance(cond, Cond):
        mask, ctie = cond.mask, cond.tie
    else:
        mask, ctie = np.asarray(cond, dtype=bool), False
    va, ea, ta = like._lift(a)
    vb, eb, tb = like._lift(b)
    v = np.where(mask, va, vb)
    e = np.where(mask, ea, eb)
    t = np.where(mask, ta, tb) | ctie
    return like._new(v, e, t)


def track(x, dtype) -> Tracked:
    """Wrap an exact input array for a check of an implementation computing in ``dtype``."""
    return Tracked(np.asarray(x, dtype=np.float64), u=unit_roundoff(dtype), tiny=tiny(dtype))


def value(x):
    """The float64 value of a Tracked (or of a plain array)."""
    return x.value if isinstance(x, Tracked) else np.asarray(x, dtype=np.float64)


def error(x):
    """The error bound of a Tracked (zeros for a plain array)."""
    return x.err if isinstance(x, Tracked) else np.zeros(np.shape(x))


def ties(x):
    """The near-tie mask of a Tracked (all False for a plain array)."""
    return x.tie if isinstance(x, Tracked) else np.zeros(np.shape(x), dtype=bool)
