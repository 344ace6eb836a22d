"""``Parameter``: a named weight with its gradient buffer, as Gluon's (``mxnet.gluon.Parameter``).

Once a :class:`~toolkit.trainer.Trainer` takes it, ``data()`` and ``grad()`` are views into the
Trainer's flat buffers, valid for the Trainer's life (``set_data`` copies into them). A gradient
is fresh (``docs/trainer.md``) once ``grad()`` has handed out the buffer, or ``set_grad`` copied
one in, since the last update; ``zero_grad()`` alone does not make it fresh.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..backends import arrays
from ..optimizers.validation import check_nonneg

__all__ = ["Parameter", "ParamDict", "GRAD_REQS", "DEVICES", "GRAD_STYPES"]

GRAD_REQS = ("write", "add", "null")
GRAD_STYPES = ("default", "row_sparse")
DEVICES = ("cpu", "cuda")


def _check_shape(shape):
    if shape is None:
        return None
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(
            isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise ValueError(f"shape must be a tuple of non-negative integers, got {shape!r}")
    return tuple(int(n) for n in shape)


class Parameter:
    """A named weight and its gradient (Gluon's ``Parameter``).

    Parameters
    ----------
    name : str
    shape : tuple of int, optional
        Needed unless ``init`` is an array (then its shape) or ``set_data`` is called first.
    dtype : {"float16", "float32", "float64"}, default "float32"
    init : None, number, array or callable, optional
        Initial value: zeros (None), a constant, a copy of an array, or ``init(shape, dtype)``
        returning an array.
    lr_mult, wd_mult : float, default 1.0
        Multipliers of the learning rate and the weight decay for this parameter.
    grad_req : {"write", "add", "null"}, default "write"
        "null": no gradient, never updated by the Trainer.
    device : {"cpu", "cuda"}, default "cpu"
        Where the arrays live: numpy arrays, or numba device arrays on the current GPU.
    grad_stype : {"default", "row_sparse"}, default "default"
        "row_sparse" (Gluon's keyword): the gradient is a ``toolkit.RowSparse`` given with
        ``set_grad``, and the optimizer updates the parameter as MXNet does for row-sparse
        gradients (lazily for SGD, Adam, AdaGrad, FTRL, GroupAdaGrad: ``docs/sparse.md``).

    Example::

        >>> import numpy as np
        >>> from toolkit import Parameter
        >>> p = Parameter("fc_weight", shape=(2, 3), init=0.5)
        >>> p.data()
        array([[0.5, 0.5, 0.5],
               [0.5, 0.5, 0.5]], dtype=float32)
        >>> p.grad()[:] = 1.0          # supply a gradient in place
    """

    def __init__(self, name, shape=None, dtype="float32", init=None, lr_mult=1.0, wd_mult=1.0,
                 grad_req="write", device="cpu", grad_stype="default"):
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str, got {name!r}")
        self.name = name
        try:
            self.dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"dtype must be float16, float32 or float64, got {dtype!r}") from None
        if self.dtype not in arrays.FLOAT_DTYPES:
            raise TypeError(f"dtype must be float16, float32 or float64, got {self.dtype}")
        self._lr_mult = _check_mult("lr_mult", lr_mult)
        self._wd_mult = _check_mult("wd_mult", wd_mult)
        if grad_req not in GRAD_REQS:
            raise ValueError(f"grad_req must be one of {GRAD_REQS}, got {grad_req!r}")
        self._grad_req = grad_req
        if grad_stype not in GRAD_STYPES:
            raise ValueError(f"grad_stype must be one of {GRAD_STYPES}, got {grad_stype!r}")
        if grad_stype == "row_sparse" and grad_req == "add":
            raise ValueError("grad_stype='row_sparse' takes grad_req 'write' or 'null' (a "
                             "row-sparse gradient is replaced each step, not added to)")
        self.grad_stype = grad_stype
        self._sparse_grad = None
        self._trainer = None
        if device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
        self.device = device
        self.shape = _check_shape(shape)
        self._data = None
        self._grad = None
        self._fresh_own = False
        self._fresh_at = None  # (flags, position) while a Trainer holds it
        if init is not None or self.shape is not None:
            self._data = self._new_array(self._initial(init))
            self._grad = self._new_array(np.zeros(self.shape, self.dtype)) \
                if grad_req != "null" else None

    def __repr__(self):
        return (f"Parameter({self.name!r}, shape={self.shape}, dtype={self.dtype.name}, "
                f"device={self.device!r})")

    # --- multipliers ------------------------------------------------------------------------
    @property
    def lr_mult(self):
        """This parameter's learning-rate multiplier (MXNet's ``Parameter.lr_mult``)."""
        return self._lr_mult

    @lr_mult.setter
    def lr_mult(self, value):
        self._lr_mult = _check_mult("lr_mult", value)  # as the constructor: refused before it lands
        _bump_multipliers()

    @property
    def wd_mult(self):
        """This parameter's weight-decay multiplier (MXNet's ``Parameter.wd_mult``)."""
        return self._wd_mult

    @wd_mult.setter
    def wd_mult(self, value):
        self._wd_mult = _check_mult("wd_mult", value)  # as the constructor: refused before it lands
        _bump_multipliers()

    # --- freshness --------------------------------------------------------------------------
    @property
    def _fresh(self):
        """Whether the gradient was written since the last update (kept in the holding
        Trainer's array of flags, so that a step reads all of them at once)."""
        at = self._fresh_at
        if at is None:
            return self._fresh_own
        return bool(at[0][at[1]])

    @_fresh.setter
    def _fresh(self, value):
        at = self._fresh_at
        if at is None:
            self._fresh_own = bool(value)
        else:
            at[0][at[1]] = value

    @property
    def trainer(self):
        """The Trainer that steps this parameter (the last one built with it), or None."""
        return self._trainer

    @property
    def grad_array(self):
        """The gradient buffer, without marking it written (what a Trainer reads); None with
        ``grad_req="null"``."""
        return self._grad

    @property
    def sparse_grad(self):
        """The ``RowSparse`` gradient last given to ``set_grad`` (``grad_stype="row_sparse"``),
        or None."""
        return self._sparse_grad

    def adopt(self, data, grad):
        """The Trainer's hook: from now on this parameter's weight and gradient are ``data``
        and ``grad`` (views of the Trainer's flat buffers, holding the same values). Arrays
        handed out before are detached, so the gradient counts as not written."""
        self._data, self._grad = data, grad
        self._fresh = False

    def hold(self, trainer, flags, position):
        """The Trainer's hook: ``trainer`` steps this parameter from now on (the last one
        built with it wins), and keeps its freshness at ``flags[position]`` (a numpy bool
        array), carried over from where it was kept before."""
        fresh = self._fresh
        self._fresh_at = (flags, position)
        self._fresh = fresh
        self._trainer = trainer
        global _HOLDS
        _HOLDS += 1

    @property
    def grad_req(self):
        """"write", "add" or "null"; fixed while a Trainer holds the parameter (its buffers are
        laid out by it): build a new Trainer to change it."""
        return self._grad_req

    @grad_req.setter
    def grad_req(self, value):
        if value not in GRAD_REQS:
            raise ValueError(f"grad_req must be one of {GRAD_REQS}, got {value!r}")
        if self._trainer is not None and value != self._grad_req:
            raise ValueError(f"parameter {self.name!r} belongs to a Trainer laid out for "
                             f"grad_req={self._grad_req!r}; build a new Trainer to change it")
        if value != "null" and self._grad is None and self._data is not None:
            self._grad = self._new_array(np.zeros(self.shape, self.dtype))
        self._grad_req = value

    # --- arrays ---------------------------------------------------------------------------
    def _initial(self, init):
        if init is None:
            if self.shape is None:
                raise ValueError(f"parameter {self.name!r} needs a shape or an init array")
            return np.zeros(self.shape, self.dtype)
        if isinstance(init, numbers.Real) and not isinstance(init, bool):
            if self.shape is None:
                raise ValueError(f"parameter {self.name!r}: a constant init needs a shape")
            return np.full(self.shape, init, self.dtype)
        if callable(init) and not hasattr(init, "shape"):
            if self.shape is None:
                raise ValueError(f"parameter {self.name!r}: a callable init needs a shape")
            init = init(self.shape, self.dtype)
        if isinstance(init, np.ndarray) or arrays.is_device_array(init):
            value = np.asarray(arrays.to_host(init))
        else:
            try:
                value = np.asarray(init, dtype=np.float64)
            except (TypeError, ValueError):
                raise TypeError(f"parameter {self.name!r}: init must be None, a number, an array "
                                f"or a callable, got {type(init).__name__}") from None
        if self.shape is None:
            self.shape = value.shape
        if value.shape != self.shape:
            raise ValueError(f"parameter {self.name!r}: init has shape {value.shape}, "
                             f"expected {self.shape}")
        if not np.all(np.isfinite(value.astype(np.float64))):
            raise ValueError(f"parameter {self.name!r}: init holds non-finite values")
        return value.astype(self.dtype)

    def _new_array(self, host):
        host = np.ascontiguousarray(host, dtype=self.dtype)
        if self.device == "cuda":
            from ..backends import cuda_available
            ok, why = cuda_available()
            if not ok:
                raise RuntimeError(f"parameter {self.name!r} has device='cuda' but {why}")
            from numba import cuda
            return cuda.to_device(host)
        return host

    def _require(self):
        if self._data is None:
            raise RuntimeError(f"parameter {self.name!r} has no data yet: give it a shape or an "
                               "init, or call set_data")

    def data(self):
        """The weight array (a view into the Trainer's buffer once a Trainer holds it)."""
        self._require()
        return self._data

    def grad(self):
        """The gradient buffer; handing it out marks the gradient as written for the next step
        (write into it in place). For ``grad_stype="row_sparse"``: the ``RowSparse`` last given
        to ``set_grad`` (None before), which does not mark anything."""
        self._require()
        if self._grad is None:
            raise RuntimeError(f"parameter {self.name!r} has grad_req='null': it has no gradient")
        if self.grad_stype == "row_sparse":
            return self._sparse_grad
        self._fresh = True
        return self._grad

    @property
    def grad_fresh(self):
        """Whether the gradient was written (``grad()`` handed out, ``set_grad``) since this
        parameter's last update: the next step updates it only then (read-only; see
        :meth:`mark_grad_stale`)."""
        return self._fresh

    def mark_grad_stale(self):
        """Count the gradient as not written since the last update, as an update does. A
        distributed step calls it on every rank for a gradient that is stale on some rank, so
        that every rank skips it (or refuses the step) alike."""
        self._fresh = False

    def set_data(self, value):
        """Copy ``value`` (an array of this shape, host or device) into the weight, in place:
        views handed out before stay valid."""
        value_host = value
        if self._data is None:
            self._data = self._new_array(self._initial(value))
            if self.grad_req != "null":
                self._grad = self._new_array(np.zeros(self.shape, self.dtype))
            return
        d = arrays.describe(value, "value")
        if d.shape != self.shape:
            raise ValueError(f"set_data: value has shape {d.shape}, parameter {self.name!r} has "
                             f"{self.shape}")
        host = np.asarray(arrays.to_host(value_host), dtype=self.dtype)
        if not np.all(np.isfinite(host.astype(np.float64))):
            raise ValueError(f"set_data: value for {self.name!r} holds non-finite values")
        _copy_into(self._data, host)
        if self._trainer is not None:
            self._trainer.data_changed(self)

    def set_grad(self, value):
        """Copy ``value`` into the gradient buffer; the gradient counts as written (only once
        the copy succeeded: a refused value leaves the gradient and its freshness as they were)."""
        self._require()
        if self._grad is None:
            raise RuntimeError(f"parameter {self.name!r} has grad_req='null': it has no gradient")
        if self.grad_stype == "row_sparse":
            return self._set_sparse_grad(value)
        d = arrays.describe(value, "value")
        if d.shape != self.shape:
            raise ValueError(f"set_grad: value has shape {d.shape}, parameter {self.name!r} has "
                             f"{self.shape}")
        _copy_into(self._grad, np.asarray(arrays.to_host(value), dtype=self.dtype))
        self._fresh = True

    def _set_sparse_grad(self, value):
        """Keep ``value`` (a ``RowSparse``, checked against the weight now) for the next step."""
        from ..sparse import RowSparse
        if not isinstance(value, RowSparse):
            raise TypeError(f"parameter {self.name!r} has grad_stype='row_sparse': set_grad "
                            f"takes a toolkit.RowSparse, got {type(value).__name__}")
        value.check(arrays.describe(self._data, "weight"))
        self._sparse_grad = value
        self._fresh = True

    def zero_grad(self):
        """Set the gradient to zero (it does not count as written)."""
        self._require()
        self._sparse_grad = None
        if self._grad is not None:
            _copy_into(self._grad, np.zeros(self.shape, self.dtype))


#: how many times a multiplier of any Parameter was set, and how many times a Trainer took a
#: Parameter (read by ``multipliers_version`` and ``holds_version``: a Trainer caches what it
#: derives from them)
_MULTIPLIERS = 0
_HOLDS = 0


def _bump_multipliers():
    global _MULTIPLIERS
    _MULTIPLIERS += 1


def multipliers_version():
    """A number that changes whenever any Parameter's ``lr_mult`` or ``wd_mult`` is set."""
    return _MULTIPLIERS


def holds_version():
    """A number that changes whenever a Trainer takes a Parameter (:meth:`Parameter.hold`)."""
    return _HOLDS


class ParamDict(dict):
    """The ``param_dict`` a Trainer gives its optimizer (index -> Parameter, MXNet's): a dict
    that counts its changes (``changes``), so that a step tells in O(1) that the multipliers
    it keeps per index are still the ones this dict gives. Every change through the dict's
    methods counts; a dict of the user's own set on the optimizer instead is told apart by
    identity."""
    __slots__ = ("changes",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.changes = 0

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.changes += 1

    def __delitem__(self, key):
        super().__delitem__(key)
        self.changes += 1

    def __ior__(self, other):
        self.changes += 1
        return super().__ior__(other)

    def pop(self, *args):
        self.changes += 1
        return super().pop(*args)

    def popitem(self):
        self.changes += 1
        return super().popitem()

    def clear(self):
        self.changes += 1
        super().clear()

    def update(self, *args, **kwargs):
        self.changes += 1
        super().update(*args, **kwargs)

    def setdefault(self, key, default=None):
        self.changes += 1
        return super().setdefault(key, default)

    def __reduce__(self):  # a copy is a plain ParamDict of the same items
        return (ParamDict, (dict(self),))


def _copy_into(dst, host):
    arrays.copy_from_host(dst, host)


def _check_mult(name, x):
    """``x`` as the float a step multiplies by (the optimizers' check of a hyperparameter:
    finite and >= 0 as that float), refused with a ValueError whatever is wrong with it."""
    try:
        return check_nonneg(name, x)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a finite number >= 0 ({e})") from None
