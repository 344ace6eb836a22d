"""The base class of the learning-rate schedules (MXNet 1.9.1's warmup, the mutable ``base_lr``,
saving and configuration) and the argument checks, which name the argument in the error."""
from __future__ import annotations

import math

import numpy as np

_WARMUP_MODES = ("linear", "constant")


# --------------------------------------------------------------------------------------------
# Argument checking
# --------------------------------------------------------------------------------------------

def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_real(x) -> bool:
    return (isinstance(x, (int, float, np.integer, np.floating))
            and not isinstance(x, (bool, np.bool_)))


def check_int(name: str, value, minimum: int) -> int:
    """``value`` as a Python ``int``, after checking it is an integer ``>= minimum``."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r} "
                        f"of type {type(value).__name__}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


def check_real(name: str, value, *, minimum: float = 0.0, maximum: float | None = None,
                strict_minimum: bool = False) -> float:
    """``value`` as a Python ``float``, after checking it is a finite real number in range."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a finite real number, got {value!r} "
                        f"of type {type(value).__name__}")
    value = float(value)
    low = ">" if strict_minimum else ">="
    expected = f"a finite real number {low} {minimum!r}"
    if maximum is not None:
        expected += f" and <= {maximum!r}"
    if (not math.isfinite(value)
            or (value <= minimum if strict_minimum else value < minimum)
            or (maximum is not None and value > maximum)):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return value


def check_lr(name: str, value) -> float:
    return check_real(name, value, minimum=0.0)


# --------------------------------------------------------------------------------------------
# Base class
# --------------------------------------------------------------------------------------------

class LRScheduler:
    r"""Base class: a learning rate as a function of the update count, with an optional warmup.

    A scheduler is called as ``scheduler(num_update)`` and returns the learning rate (a ``float``)
    for the update numbered ``num_update`` (the first update of a training run is number 1). For
    the first ``warmup_steps`` update counts, ``0 <= n < W``, every scheduler returns the warmup
    rate

    .. math::

        \text{linear:}\quad   \eta(n) = \eta_b + (\eta_f - \eta_b) \cdot n / W
        \qquad\qquad
        \text{constant:}\quad \eta(n) = \eta_b

    evaluated as ``b + ((f - b) * n) / W``. Glossary: :math:`n` = ``num_update``, :math:`W` =
    ``warmup_steps``, :math:`\eta_b` = ``warmup_begin_lr``, :math:`\eta_f` =
    ``warmup_final_lr`` (the constructor's ``base_lr``, fixed: overwriting ``base_lr`` later does
    not move the end of the ramp). The ramp stops at ``n = W - 1``, short of ``base_lr``. For
    ``n >= W`` the subclass's :meth:`_after_warmup` applies (here: ``NotImplementedError``, as in
    MXNet; ``python/mxnet/lr_scheduler.py:41-66``; docs/mxnet-facts.md, 8).

    Args:
        base_lr: the learning rate after warmup (before any decay); finite, ``>= 0``. A public,
            mutable attribute.
        warmup_steps: ``W``, the number of update counts ``0 .. W-1`` in warmup; integer ``>= 0``.
        warmup_begin_lr: ``eta_b``, finite, ``0 <= warmup_begin_lr <= base_lr``.
        warmup_mode: ``'linear'`` or ``'constant'``.

    Raises:
        TypeError: an argument of the wrong type (e.g. a float ``warmup_steps``, a bool).
        ValueError: an argument out of range, naming it and the expected range.

    Example:
        >>> class Constant(LRScheduler):
        ...     def _after_warmup(self, num_update):
        ...         return self.base_lr
        >>> sched = Constant(base_lr=0.1, warmup_steps=4, warmup_begin_lr=0.02)
        >>> [round(sched(n), 6) for n in range(6)]
        [0.02, 0.04, 0.06, 0.08, 0.1, 0.1]
    """

    def __init__(self, base_lr=0.01, warmup_steps=0, warmup_begin_lr=0, warmup_mode="linear"):
        base_lr = check_lr("base_lr", base_lr)
        warmup_steps = check_int("warmup_steps", warmup_steps, 0)
        warmup_begin_lr = check_lr("warmup_begin_lr", warmup_begin_lr)
        if warmup_begin_lr > base_lr:
            raise ValueError(f"warmup_begin_lr must be <= base_lr (the warmup ramps up to "
                             f"base_lr), got warmup_begin_lr={warmup_begin_lr!r} > "
                             f"base_lr={base_lr!r}")
        if not isinstance(warmup_mode, str) or warmup_mode not in _WARMUP_MODES:
            raise ValueError(f"warmup_mode must be one of {_WARMUP_MODES!r}, got {warmup_mode!r}")
        self._base_lr = base_lr
        self.warmup_steps = warmup_steps
        self.warmup_begin_lr = warmup_begin_lr
        self.warmup_final_lr = base_lr
        self.warmup_mode = warmup_mode

    # -- the mutable learning rate ------------------------------------------------------------
    @property
    def base_lr(self) -> float:
        """The current (for Factor/MultiFactor: already decayed) base learning rate.

        Assigning to it is how an optimizer imposes its ``learning_rate`` (MXNet does
        ``lr_scheduler.base_lr = learning_rate``); the value is checked (finite, ``>= 0``).
        """
        return self._base_lr

    @base_lr.setter
    def base_lr(self, value) -> None:
        self._base_lr = check_lr("base_lr", value)

    # -- evaluation ---------------------------------------------------------------------------
    def __call__(self, num_update) -> float:
        """The learning rate for update number ``num_update`` (an integer ``>= 0``)."""
        n = check_int("num_update", num_update, 0)
        if n < self.warmup_steps:
            return self._warmup_lr(n)
        return float(self._after_warmup(n))

    def get_warmup_lr(self, num_update) -> float:
        """The warmup rate for ``0 <= num_update < warmup_steps`` (see the class docstring)."""
        n = check_int("num_update", num_update, 0)
        if n >= self.warmup_steps:
            raise ValueError(f"num_update must be < warmup_steps={self.warmup_steps} for a "
                             f"warmup rate, got {n}")
        return self._warmup_lr(n)

    def _warmup_lr(self, n: int) -> float:
        if self.warmup_mode == "linear":
            # Same operation order as MXNet: ((final - begin) * n) / W, then begin + that.
            span = self.warmup_final_lr - self.warmup_begin_lr
            return self.warmup_begin_lr + span * float(n) / float(self.warmup_steps)
        return self.warmup_begin_lr

    def _after_warmup(self, num_update: int) -> float:
        """The rate for ``num_update >= warmup_steps``; subclasses implement it."""
        raise NotImplementedError(f"{type(self).__name__} defines no schedule after warmup: "
                                  "subclass LRScheduler and implement _after_warmup")

    # -- saving and restoring -----------------------------------------------------------------
    _STATE_KEYS: tuple = ("base_lr",)

    def state_dict(self) -> dict:
        """The mutable state as a new plain ``dict`` of Python numbers (JSON-serialisable).

        Keys: ``base_lr`` (float) for every scheduler; :class:`FactorScheduler` adds ``count``
        (int); :class:`MultiFactorScheduler` adds ``count`` and ``cur_step_ind`` (ints). The
        configuration (the constructor arguments) is not included: rebuild the scheduler with
        the same arguments, then :meth:`load_state_dict`. Restore it *after* building an
        optimizer that overwrites ``base_lr``, so the saved value wins, as it does when MXNet
        unpickles a saved optimizer.

        Example:
            >>> s = FactorScheduler(step=2, factor=0.5, base_lr=1.0)
            >>> s(5)
            0.25
            >>> s.state_dict()
            {'base_lr': 0.25, 'count': 4}
        """
        return {"base_lr": self._base_lr}

    def load_state_dict(self, state: dict) -> None:
        """Restore the state saved by :meth:`state_dict` (of a scheduler built the same way).

        The dict must hold exactly this scheduler's keys. Everything is checked before anything
        is assigned, so on error the scheduler is unchanged. Raises ``TypeError`` for a non-dict
        or a value of the wrong type and ``ValueError`` for a missing or unknown key, a value out
        of range, or counters that this scheduler's ``step`` could not have produced.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict as returned by state_dict(), got "
                            f"{type(state).__name__}")
        expected = set(self._STATE_KEYS)
        missing = sorted(expected - set(state))
        unknown = sorted(set(state) - expected, key=repr)
        if missing or unknown:
            raise ValueError(f"state for {type(self).__name__} must have exactly the keys "
                             f"{sorted(expected)}; missing {missing}, unknown {unknown}")
        checked = self._check_state(state)
        for key, value in checked.items():
            setattr(self, "_base_lr" if key == "base_lr" else key, value)

    def _check_state(self, state: dict) -> dict:
        return {"base_lr": check_lr("state['base_lr']", state["base_lr"])}

    # -- configuration ------------------------------------------------------------------------
    def config(self) -> dict:
        """The constructor's arguments, as a new JSON-serialisable ``dict``:
        ``{"type": <class name>, "args": {<argument>: <value>, ...}}``.

        ``type(s)(**s.config()["args"])`` builds a fresh one. ``base_lr`` is the constructor's
        value, not the current attribute (that one is state). A Trainer refuses a states file
        whose scheduler configuration differs from its own (``docs/trainer.md``). A subclass with
        constructor arguments of its own extends ``_config_args``.

        Example:
            >>> FactorScheduler(step=3, factor=0.5, base_lr=1.0).config()["args"]["step"]
            3
        """
        return {"type": type(self).__name__, "args": dict(self._config_args())}

    def _config_args(self):
        return [("base_lr", self.warmup_final_lr), ("warmup_steps", self.warmup_steps),
                ("warmup_begin_lr", self.warmup_begin_lr), ("warmup_mode", self.warmup_mode)]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._repr_args())
        return f"{type(self).__name__}({args})"

    def _repr_args(self):
        return [("base_lr", self._base_lr), ("warmup_steps", self.warmup_steps),
                ("warmup_begin_lr", self.warmup_begin_lr), ("warmup_mode", self.warmup_mode)]
