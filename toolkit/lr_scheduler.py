"""Learning-rate schedules that return, bit for bit, the numbers MXNet 1.9.1's schedulers return.

What this module is for: an optimizer asks its scheduler for the learning rate of every step,
``lr = scheduler(num_update)``, where ``num_update`` is the optimizer's update count after it has
been incremented for the step (so the first step asks for ``num_update = 1``; docs/mxnet-facts.md,
1.3).
The four schedules of ``mxnet.lr_scheduler`` are provided, with MXNet's warmup options:

* :class:`FactorScheduler`: multiply by ``factor`` every ``step`` updates, down to a floor;
* :class:`MultiFactorScheduler`: multiply by ``factor`` after each listed update count;
* :class:`PolyScheduler`: polynomial decay from ``base_lr`` to ``final_lr``;
* :class:`CosineScheduler`: half-cosine decay from ``base_lr`` to ``final_lr``.

Porting MXNet code gives MXNet's numbers: the step arithmetic (strict comparisons, repeated
multiplication, the order of every floating-point operation) and the *stateful* behaviour follow
MXNet 1.9.1 (``python/mxnet/lr_scheduler.py`` at tag 1.9.1; docs/mxnet-facts.md, section 8), and
``tests/test_lr_scheduler.py`` checks every value against numbers recorded from MXNet 1.9.1
(``tests/data/mxnet/lr_scheduler.json``). Several of MXNet's own docstrings describe a different
schedule from the one MXNet computes; each class docstring below says where.

Stateful behaviour, as in MXNet:

* ``base_lr`` is a public, mutable attribute. An optimizer built with both ``learning_rate`` and
  ``lr_scheduler`` overwrites it (docs/mxnet-facts.md, 1.1). That changes what
  :class:`FactorScheduler` and :class:`MultiFactorScheduler` return after warmup, but not the
  warmup ramp (which ends at ``warmup_final_lr``, fixed at construction) and not the decayed
  values of :class:`PolyScheduler` and :class:`CosineScheduler` (they decay from
  ``base_lr_orig``, also fixed at construction).
* Factor and MultiFactor keep counters and never undo a decay: call them with non-decreasing
  ``num_update`` (a smaller ``num_update`` after a larger one returns the current, already decayed
  rate). A jump forward applies all the decays in between, exactly as stepping one by one would.
* Poly and Cosine return the last value they computed once ``num_update > max_update``.
* :meth:`LRScheduler.state_dict` and :meth:`LRScheduler.load_state_dict` save and restore that
  state as a plain ``dict`` of numbers (no pickle), so that a resumed run continues exactly.

Differences from MXNet (none changes a rate MXNet would return): stricter argument checking, where
every bad argument raises
``TypeError`` or ``ValueError`` naming the argument and what was expected (MXNet uses bare
``assert`` for some checks and accepts, for example, a negative ``factor``, a non-finite rate, a
float ``step``, or a Poly/Cosine ``warmup_steps >= max_update``, which later divides by zero or
never decays), and every rate is returned as a Python ``float`` (MXNet returns an ``int`` when
every input is an ``int``; the value is the same).

Only :mod:`math` and :mod:`numpy` (for numpy scalar types) are imported.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = [
    "LRScheduler",
    "FactorScheduler",
    "MultiFactorScheduler",
    "PolyScheduler",
    "CosineScheduler",
]

_WARMUP_MODES = ("linear", "constant")


# --------------------------------------------------------------------------------------------
# Argument checking
# --------------------------------------------------------------------------------------------

def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_real(x) -> bool:
    return (isinstance(x, (int, float, np.integer, np.floating))
            and not isinstance(x, (bool, np.bool_)))


def _check_int(name: str, value, minimum: int) -> int:
    """``value`` as a Python ``int``, after checking it is an integer ``>= minimum``."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r} "
                        f"of type {type(value).__name__}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


def _check_real(name: str, value, *, minimum: float = 0.0, maximum: float | None = None,
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


def _check_lr(name: str, value) -> float:
    return _check_real(name, value, minimum=0.0)


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

    evaluated in floating point as ``b + ((f - b) * n) / W``. For ``n >= W`` the subclass's decay
    rule applies (this base class has none: calling it past the warmup raises
    ``NotImplementedError``, as in MXNet). Write a custom schedule by overriding
    :meth:`_after_warmup`.

    Glossary (symbol: argument or attribute):

    * :math:`n`: ``num_update``, the update count passed to the call (an integer ``>= 0``).
    * :math:`W`: ``warmup_steps``.
    * :math:`\eta_b`: ``warmup_begin_lr``.
    * :math:`\eta_f`: ``warmup_final_lr``, the ``base_lr`` given to the constructor. It is fixed
      at construction: overwriting ``base_lr`` later does not move the end of the ramp.

    MXNet 1.9.1 facts (``python/mxnet/lr_scheduler.py:41-66``; docs/mxnet-facts.md, 8):
    ``warmup_begin_lr > base_lr`` and a ``warmup_mode`` other than ``'linear'``/``'constant'``
    raise ``ValueError``.
    The ramp is linear in ``n`` up to ``n = W - 1``; it does not reach ``base_lr`` itself (at
    ``n = W`` the decay rule takes over).

    Args:
        base_lr: the learning rate after warmup (before any decay); finite, ``>= 0``. A public,
            mutable attribute (see the module docstring for the effect of overwriting it).
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
        base_lr = _check_lr("base_lr", base_lr)
        warmup_steps = _check_int("warmup_steps", warmup_steps, 0)
        warmup_begin_lr = _check_lr("warmup_begin_lr", warmup_begin_lr)
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
        self._base_lr = _check_lr("base_lr", value)

    # -- evaluation ---------------------------------------------------------------------------
    def __call__(self, num_update) -> float:
        """The learning rate for update number ``num_update`` (an integer ``>= 0``)."""
        n = _check_int("num_update", num_update, 0)
        if n < self.warmup_steps:
            return self._warmup_lr(n)
        return float(self._after_warmup(n))

    def get_warmup_lr(self, num_update) -> float:
        """The warmup rate for ``0 <= num_update < warmup_steps`` (see the class docstring)."""
        n = _check_int("num_update", num_update, 0)
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
        return {"base_lr": _check_lr("state['base_lr']", state["base_lr"])}

    # -- configuration ------------------------------------------------------------------------
    def config(self) -> dict:
        """The constructor's arguments, as a new JSON-serialisable ``dict``:
        ``{"type": <class name>, "args": {<argument>: <value>, ...}}``.

        Two schedulers with equal configurations compute the same schedule from the same state
        (:meth:`state_dict`); ``type(s)(**s.config()["args"])`` builds a fresh one. ``base_lr``
        is the constructor's value (where the warmup ramp ends), not the current, possibly
        decayed or overwritten, ``base_lr`` attribute: that one is state. A states file stores
        the configuration and a Trainer refuses a file whose scheduler configuration differs
        from its own (``docs/trainer.md``). A subclass whose constructor takes arguments of its
        own extends ``_config_args`` (or overrides this method) to add them.

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


# --------------------------------------------------------------------------------------------
# FactorScheduler
# --------------------------------------------------------------------------------------------

class FactorScheduler(LRScheduler):
    r"""Multiply the learning rate by ``factor`` every ``step`` updates, down to a floor.

    After warmup (``n >= W``), for calls with non-decreasing ``n``:

    .. math::

        k(n) = \max\bigl(0,\ \lceil n / s \rceil - 1\bigr), \qquad
        \eta(n) = \eta_{k(n)}, \qquad
        \eta_0 = \eta_{\text{base}}, \quad
        \eta_{j+1} = \max(\eta_j \cdot \gamma,\ \eta_{\text{stop}})

    so in exact arithmetic :math:`\eta(n) = \max(\eta_{\text{base}} \gamma^{k}, \eta_{\text{stop}})`
    for :math:`k \ge 1` and :math:`\eta_{\text{base}}` for :math:`k = 0`. In floating point
    :math:`\eta_k` is a *repeated product* (``lr = lr * factor`` once per decay, rounded each
    time), not ``base_lr * factor ** k``; the two differ in the last bits for most factors (e.g.
    0.9), and the repeated product is what MXNet returns. The decays are triggered by
    ``n > count + step`` (``count`` = ``k * step`` so far), so the rate changes on the update
    *after* each multiple of ``step``: with ``step = 3`` the first decay is at ``n = 4``.

    Glossary:

    * :math:`n`: ``num_update``; :math:`s`: ``step``; :math:`\gamma`: ``factor``;
      :math:`\eta_{\text{stop}}`: ``stop_factor_lr``; :math:`W`: ``warmup_steps``.
    * :math:`\eta_{\text{base}}`: ``base_lr`` as it stands when decay starts (an optimizer may
      have overwritten the constructor's value; the warmup ramp still ends at the constructor's).
    * ``count``: attribute, the update count at which the last decay was applied
      (``k(n) * step``).

    Notes on MXNet 1.9.1 (``python/mxnet/lr_scheduler.py:86-129``; docs/mxnet-facts.md, 8):

    * MXNet's docstring gives ``base_lr * pow(factor, floor(num_update/step))``. That is off by
      one at every multiple of ``step``: with ``step=3, factor=0.5`` it promises 0.5 at ``n=3``,
      MXNet returns 1.0 (the rate is ``k = ceil(n/step) - 1`` decays, above).
    * The decay counts from the raw ``n``, not from ``n - warmup_steps``: with ``warmup_steps=4,
      step=3`` the first rate after warmup (``n=4``) is already decayed once.
    * ``stop_factor_lr`` is a clamp applied after each multiplication, not a "stop": if
      ``base_lr < stop_factor_lr`` the first decay *raises* the rate to ``stop_factor_lr``.
    * A smaller ``n`` after a larger one returns the current rate (decays are never undone); a
      jump forward applies every decay in between, bit for bit as stepping one by one.

    Args:
        step: ``s``, an integer ``>= 1`` (MXNet also accepts floats; we require an integer).
        factor: ``gamma``, ``0 <= factor <= 1`` (MXNet only rejects ``factor > 1``).
        stop_factor_lr: the floor, finite, ``>= 0``.
        base_lr, warmup_steps, warmup_begin_lr, warmup_mode: as in :class:`LRScheduler`.

    Example:
        >>> sched = FactorScheduler(step=3, factor=0.5, base_lr=1.0)
        >>> [sched(n) for n in range(1, 11)]
        [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125]
        >>> sched = FactorScheduler(step=2, factor=0.1, stop_factor_lr=0.005, base_lr=1.0)
        >>> [sched(n) for n in (2, 3, 5, 7, 100)]
        [1.0, 0.1, 0.010000000000000002, 0.005, 0.005]
    """

    _STATE_KEYS = ("base_lr", "count")

    def __init__(self, step, factor=1, stop_factor_lr=1e-8, base_lr=0.01, warmup_steps=0,
                 warmup_begin_lr=0, warmup_mode="linear"):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        self.step = _check_int("step", step, 1)
        self.factor = _check_real("factor", factor, minimum=0.0, maximum=1.0)
        self.stop_factor_lr = _check_lr("stop_factor_lr", stop_factor_lr)
        self.count = 0

    def _after_warmup(self, num_update: int) -> float:
        n, step, factor, stop = num_update, self.step, self.factor, self.stop_factor_lr
        lr, count = self._base_lr, self.count
        while n > count + step:
            count += step
            new = lr * factor
            if new < stop:
                new = stop
            if new == lr:
                # A fixed point (factor 1, or clamped at the floor): every remaining decay
                # leaves the rate unchanged, so move the counter straight to its end value.
                count += step * ((n - count - 1) // step)
                break
            lr = new
        self._base_lr, self.count = lr, count
        return lr

    def _check_state(self, state: dict) -> dict:
        out = super()._check_state(state)
        count = _check_int("state['count']", state["count"], 0)
        if count % self.step:
            raise ValueError(f"state['count'] must be a multiple of step={self.step} (a state "
                             f"from a FactorScheduler with the same step), got {count}")
        out["count"] = count
        return out

    def state_dict(self) -> dict:
        return {"base_lr": self._base_lr, "count": self.count}

    state_dict.__doc__ = LRScheduler.state_dict.__doc__

    def _repr_args(self):
        return [("step", self.step), ("factor", self.factor),
                ("stop_factor_lr", self.stop_factor_lr)] + super()._repr_args()

    def _config_args(self):
        return [("step", self.step), ("factor", self.factor),
                ("stop_factor_lr", self.stop_factor_lr)] + super()._config_args()


# --------------------------------------------------------------------------------------------
# MultiFactorScheduler
# --------------------------------------------------------------------------------------------

class MultiFactorScheduler(LRScheduler):
    r"""Multiply the learning rate by ``factor`` once each listed update count has been passed.

    After warmup (``n >= W``), for calls with non-decreasing ``n``:

    .. math::

        k(n) = \#\{\, i : n > s_i \,\}, \qquad \eta(n) = \eta_{k(n)}, \qquad
        \eta_0 = \eta_{\text{base}}, \quad \eta_{j+1} = \eta_j \cdot \gamma

    (a repeated product, rounded at each decay, as in :class:`FactorScheduler`; there is no
    floor). The comparison is strict: the rate drops on update ``s_i + 1``.

    Glossary:

    * :math:`n`: ``num_update``; :math:`s_0 < s_1 < \dots`: ``step``; :math:`\gamma`: ``factor``;
      :math:`W`: ``warmup_steps``.
    * :math:`\eta_{\text{base}}`: ``base_lr`` as it stands when decay starts (an optimizer may
      have overwritten it; the warmup ramp still ends at the constructor's value).
    * ``cur_step_ind``: attribute, :math:`k`, the number of steps passed so far; ``count``:
      attribute, the last step passed (``step[k-1]``, or 0).

    Notes on MXNet 1.9.1 (``python/mxnet/lr_scheduler.py:131-188``; docs/mxnet-facts.md, 8):

    * MXNet's docstring says the rate is ``base_lr * factor**(k+1)`` when
      ``step[k] <= num_update < step[k+1]``. The code compares strictly, so the rate is
      ``base_lr * factor**(k+1)`` when ``step[k] < num_update <= step[k+1]``: at
      ``num_update == step[k]`` the rate has not dropped yet.
    * Decays count from the raw ``n``, not from ``n - warmup_steps``; decays are never undone by
      a smaller ``n``; a jump forward applies every decay in between.

    Args:
        step: a non-empty list or tuple of strictly increasing integers ``>= 1``.
        factor: ``gamma``, ``0 <= factor <= 1`` (MXNet only rejects ``factor > 1``).
        base_lr, warmup_steps, warmup_begin_lr, warmup_mode: as in :class:`LRScheduler`.

    Example:
        >>> sched = MultiFactorScheduler(step=[2, 5], factor=0.5, base_lr=1.0)
        >>> [sched(n) for n in range(1, 8)]
        [1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25]
    """

    _STATE_KEYS = ("base_lr", "count", "cur_step_ind")

    def __init__(self, step, factor=1, base_lr=0.01, warmup_steps=0, warmup_begin_lr=0,
                 warmup_mode="linear"):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if not isinstance(step, (list, tuple)) or len(step) == 0:
            raise TypeError(f"step must be a non-empty list of strictly increasing integers "
                            f">= 1, got {step!r}")
        steps = []
        for i, s in enumerate(step):
            s = _check_int(f"step[{i}]", s, 1)
            if steps and s <= steps[-1]:
                raise ValueError(f"step must be a list of strictly increasing integers >= 1, "
                                 f"got step[{i}]={s} <= step[{i - 1}]={steps[-1]}")
            steps.append(s)
        self.step = steps
        self.factor = _check_real("factor", factor, minimum=0.0, maximum=1.0)
        self.cur_step_ind = 0
        self.count = 0

    def _after_warmup(self, num_update: int) -> float:
        steps, lr, ind = self.step, self._base_lr, self.cur_step_ind
        while ind < len(steps) and num_update > steps[ind]:
            self.count = steps[ind]
            ind += 1
            lr = lr * self.factor
        self._base_lr, self.cur_step_ind = lr, ind
        return lr

    def _check_state(self, state: dict) -> dict:
        out = super()._check_state(state)
        ind = _check_int("state['cur_step_ind']", state["cur_step_ind"], 0)
        if ind > len(self.step):
            raise ValueError(f"state['cur_step_ind'] must be <= len(step)={len(self.step)}, "
                             f"got {ind}")
        count = _check_int("state['count']", state["count"], 0)
        expected = self.step[ind - 1] if ind else 0
        if count != expected:
            raise ValueError(f"state['count'] must be {expected} (step[cur_step_ind - 1], or 0) "
                             f"for cur_step_ind={ind} and step={self.step}, got {count}")
        out["cur_step_ind"] = ind
        out["count"] = count
        return out

    def state_dict(self) -> dict:
        return {"base_lr": self._base_lr, "count": self.count, "cur_step_ind": self.cur_step_ind}

    state_dict.__doc__ = LRScheduler.state_dict.__doc__

    def _repr_args(self):
        return [("step", list(self.step)), ("factor", self.factor)] + super()._repr_args()

    def _config_args(self):
        return [("step", list(self.step)), ("factor", self.factor)] + super()._config_args()


# --------------------------------------------------------------------------------------------
# Poly and Cosine: decay from the construction-time base lr to final_lr over [W, max_update]
# --------------------------------------------------------------------------------------------

class _DecayToFinal(LRScheduler):
    """Shared construction and ``n > max_update`` rule of Poly and Cosine."""

    def __init__(self, max_update, base_lr, final_lr, warmup_steps, warmup_begin_lr,
                 warmup_mode):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        self.max_update = _check_int("max_update", max_update, 1)
        if self.warmup_steps >= self.max_update:
            raise ValueError(f"warmup_steps must be < max_update (the decay runs over "
                             f"warmup_steps..max_update), got warmup_steps={self.warmup_steps}, "
                             f"max_update={self.max_update}")
        self.final_lr = _check_lr("final_lr", final_lr)
        self.base_lr_orig = self._base_lr
        self.max_steps = self.max_update - self.warmup_steps

    def _after_warmup(self, num_update: int) -> float:
        if num_update <= self.max_update:
            self._base_lr = self._decay(num_update)
        return self._base_lr

    def _decay(self, num_update: int) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def _config_args(self):
        return [("max_update", self.max_update), ("final_lr", self.final_lr)] + \
            super()._config_args()

    def _repr_args(self):
        return [("max_update", self.max_update), ("base_lr", self.base_lr_orig),
                ("final_lr", self.final_lr)] + super()._repr_args()[1:]


class PolyScheduler(_DecayToFinal):
    r"""Polynomial decay from ``base_lr`` to ``final_lr`` over ``warmup_steps .. max_update``.

    For :math:`W \le n \le M`:

    .. math::

        \eta(n) = \eta_{\text{final}} + (\eta_0 - \eta_{\text{final}})
                  \left(1 - \frac{n - W}{M - W}\right)^{p}

    evaluated in floating point as ``final + (orig - final) * (1.0 - (n - W) / (M - W)) ** p``
    (the power is C ``pow``, as in MXNet). For :math:`n > M` the scheduler returns the last value
    it computed, which is :math:`\eta_{\text{final}}` (exactly) once it has been called with
    :math:`n = M`. For :math:`n < W` it returns the warmup rate (:class:`LRScheduler`).

    Glossary:

    * :math:`n`: ``num_update``; :math:`M`: ``max_update``; :math:`W`: ``warmup_steps``;
      :math:`p`: ``pwr`` (attribute ``power``); :math:`\eta_{\text{final}}`: ``final_lr``.
    * :math:`\eta_0`: attribute ``base_lr_orig``, the ``base_lr`` given to the constructor. It is
      fixed: an optimizer overwriting ``base_lr`` does not change the decayed values.
    * ``base_lr``: attribute, the last value computed (the constructor's ``base_lr`` before the
      first decayed value).

    Notes on MXNet 1.9.1 (``python/mxnet/lr_scheduler.py:190-236``; docs/mxnet-facts.md, 8):

    * MXNet's docstring says the rate is ``final_lr + (start_lr - final_lr)*(1-nup/max_nup)^pwr
      if nup < max_nup, 0 otherwise``. It is never 0 by that rule: past ``max_update`` the last
      computed value is held (normally ``final_lr``), and the ramp is over ``n - W`` and
      ``M - W``, not ``n`` and ``M``.
    * If the first call after construction (or after an optimizer overwrote ``base_lr``) already
      has ``n > max_update``, the returned value is the current ``base_lr``, not ``final_lr``:
      restore a resumed run with :meth:`load_state_dict`.
    * We require ``warmup_steps < max_update`` and ``pwr > 0``. With ``warmup_steps ==
      max_update`` MXNet raises ``ZeroDivisionError`` at ``n == max_update``; with
      ``warmup_steps > max_update`` it never decays (after the warmup it returns ``base_lr``);
      ``pwr <= 0`` never reaches ``final_lr`` (``pwr < 0`` divides by zero at ``max_update``).

    Args:
        max_update: :math:`M`, an integer ``>= 1`` and ``> warmup_steps``.
        base_lr: :math:`\eta_0`, finite, ``>= 0``.
        pwr: :math:`p`, a finite real ``> 0`` (``1`` is linear decay, ``2`` MXNet's default).
        final_lr: finite, ``>= 0`` (may exceed ``base_lr``: then the rate rises).
        warmup_steps, warmup_begin_lr, warmup_mode: as in :class:`LRScheduler`.

    Example:
        >>> sched = PolyScheduler(max_update=4, base_lr=1.0, pwr=2, final_lr=0.0)
        >>> [sched(n) for n in range(1, 7)]
        [0.5625, 0.25, 0.0625, 0.0, 0.0, 0.0]
        >>> sched = PolyScheduler(max_update=6, base_lr=1.0, pwr=1, warmup_steps=2,
        ...                       warmup_mode='constant', warmup_begin_lr=0.1)
        >>> [sched(n) for n in range(0, 7)]
        [0.1, 0.1, 1.0, 0.75, 0.5, 0.25, 0.0]
    """

    def __init__(self, max_update, base_lr=0.01, pwr=2, final_lr=0, warmup_steps=0,
                 warmup_begin_lr=0, warmup_mode="linear"):
        super().__init__(max_update, base_lr, final_lr, warmup_steps, warmup_begin_lr,
                         warmup_mode)
        self.power = _check_real("pwr", pwr, minimum=0.0, strict_minimum=True)

    def _decay(self, num_update: int) -> float:
        frac = float(num_update - self.warmup_steps) / float(self.max_steps)
        # Builtin pow on floats is C pow(), as in MXNet (pow(float, int) converts the int).
        return self.final_lr + (self.base_lr_orig - self.final_lr) * pow(1 - frac, self.power)

    def _repr_args(self):
        args = super()._repr_args()
        return args[:2] + [("pwr", self.power)] + args[2:]

    def _config_args(self):
        return [("pwr", self.power)] + super()._config_args()


class CosineScheduler(_DecayToFinal):
    r"""Half-cosine decay from ``base_lr`` to ``final_lr`` over ``warmup_steps .. max_update``.

    For :math:`W \le n \le M`:

    .. math::

        \eta(n) = \eta_{\text{final}} + (\eta_0 - \eta_{\text{final}})
                  \cdot \frac{1 + \cos\bigl(\pi (n - W) / (M - W)\bigr)}{2}

    evaluated in floating point, like MXNet, as
    ``final + (orig - final) * (1 + cos(pi * (n - W) / (M - W))) / 2`` (left to right: the
    product is formed before the division by 2). For :math:`n > M` the scheduler returns the last
    value it computed, which is :math:`\eta_{\text{final}}` (exactly: ``cos(pi) == -1.0``) once it
    has been called with :math:`n = M`. For :math:`n < W` it returns the warmup rate.

    Glossary:

    * :math:`n`: ``num_update``; :math:`M`: ``max_update``; :math:`W`: ``warmup_steps``;
      :math:`\eta_{\text{final}}`: ``final_lr``.
    * :math:`\eta_0`: attribute ``base_lr_orig``, the ``base_lr`` given to the constructor, fixed
      (an optimizer overwriting ``base_lr`` does not change the decayed values; verified on MXNet
      1.9.1: ``Adam(lr_scheduler=CosineScheduler(base_lr=1.0))`` still decays from 1.0,
      ``tests/data/mxnet/facts.json`` key ``adam_cosine_lr_used``).
    * ``base_lr``: attribute, the last value computed.

    Notes on MXNet 1.9.1 (``python/mxnet/lr_scheduler.py:238-281``; docs/mxnet-facts.md, 8):

    * MXNet's docstring says ``... if nup < max_nup, 0 otherwise`` and presents ``max_update`` as
      the point where the rate has decayed to zero. The schedule ends at ``final_lr``, and past
      ``max_update`` the last computed value is held, not 0.
    * The same first-call-past-``max_update`` rule and the same stricter checks
      (``warmup_steps < max_update``) as :class:`PolyScheduler` apply.

    Args:
        max_update: :math:`M`, an integer ``>= 1`` and ``> warmup_steps``.
        base_lr: :math:`\eta_0`, finite, ``>= 0``.
        final_lr: finite, ``>= 0``.
        warmup_steps, warmup_begin_lr, warmup_mode: as in :class:`LRScheduler`.

    Example:
        >>> sched = CosineScheduler(max_update=4, base_lr=1.0, final_lr=0.2)
        >>> [round(sched(n), 12) for n in range(0, 6)]
        [1.0, 0.882842712475, 0.6, 0.317157287525, 0.2, 0.2]
    """

    def __init__(self, max_update, base_lr=0.01, final_lr=0, warmup_steps=0, warmup_begin_lr=0,
                 warmup_mode="linear"):
        super().__init__(max_update, base_lr, final_lr, warmup_steps, warmup_begin_lr,
                         warmup_mode)

    def _decay(self, num_update: int) -> float:
        angle = math.pi * (num_update - self.warmup_steps) / self.max_steps
        return self.final_lr + (self.base_lr_orig - self.final_lr) * (1 + math.cos(angle)) / 2
