"""The step schedules: :class:`FactorScheduler` (a factor every ``step`` updates, down to a
floor) and :class:`MultiFactorScheduler` (a factor after each listed update count), with the
counters they keep as state.
"""
from __future__ import annotations

from .base import LRScheduler, check_int, check_lr, check_real


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

    :math:`\eta_k` is a *repeated product* (``lr = lr * factor``, rounded each time), not
    ``base_lr * factor ** k``: they differ in the last bits for most factors, and MXNet returns
    the product. A decay happens when ``n > count + step``, so the rate changes on the update
    *after* each multiple of ``step`` (``step = 3``: first at ``n = 4``).

    Glossary: :math:`n` ``num_update``; :math:`s` ``step``; :math:`\gamma` ``factor``;
    :math:`\eta_{\text{stop}}` ``stop_factor_lr``; :math:`W` ``warmup_steps``;
    :math:`\eta_{\text{base}}` ``base_lr`` when decay starts (possibly overwritten by an
    optimizer); ``count``, an attribute, the update count of the last decay (``k(n) * step``).

    Notes on MXNet 1.9.1 (``python/mxnet/lr_scheduler.py:86-129``; docs/mxnet-facts.md, 8):

    * MXNet's docstring gives ``base_lr * pow(factor, floor(num_update/step))``, off by one at
      every multiple of ``step`` (``step=3, factor=0.5``: 0.5 promised at ``n=3``, 1.0 returned).
    * The decay counts from the raw ``n``, not ``n - warmup_steps``.
    * ``stop_factor_lr`` is a clamp after each multiplication: if ``base_lr < stop_factor_lr``
      the first decay *raises* the rate to it.
    * Decays are never undone by a smaller ``n``; a jump forward applies every decay in between,
      bit for bit as stepping one by one.

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
        self.step = check_int("step", step, 1)
        self.factor = check_real("factor", factor, minimum=0.0, maximum=1.0)
        self.stop_factor_lr = check_lr("stop_factor_lr", stop_factor_lr)
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
        count = check_int("state['count']", state["count"], 0)
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

    (a repeated product, as in :class:`FactorScheduler`, without a floor). The comparison is
    strict: the rate drops on update ``s_i + 1``.

    Glossary: :math:`n` ``num_update``; :math:`s_0 < s_1 < \dots` ``step``; :math:`\gamma`
    ``factor``; :math:`W` ``warmup_steps``; :math:`\eta_{\text{base}}` ``base_lr`` when decay
    starts; attributes ``cur_step_ind`` (:math:`k`, the steps passed) and ``count`` (the last
    step passed, ``step[k-1]``, or 0).

    Notes on MXNet 1.9.1 (``python/mxnet/lr_scheduler.py:131-188``; docs/mxnet-facts.md, 8):

    * MXNet's docstring says ``base_lr * factor**(k+1)`` when ``step[k] <= num_update <
      step[k+1]``; the code compares strictly (``step[k] < num_update <= step[k+1]``).
    * As for :class:`FactorScheduler`: decays count from the raw ``n``, are never undone, and a
      jump forward applies every decay in between.

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
            s = check_int(f"step[{i}]", s, 1)
            if steps and s <= steps[-1]:
                raise ValueError(f"step must be a list of strictly increasing integers >= 1, "
                                 f"got step[{i}]={s} <= step[{i - 1}]={steps[-1]}")
            steps.append(s)
        self.step = steps
        self.factor = check_real("factor", factor, minimum=0.0, maximum=1.0)
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
        ind = check_int("state['cur_step_ind']", state["cur_step_ind"], 0)
        if ind > len(self.step):
            raise ValueError(f"state['cur_step_ind'] must be <= len(step)={len(self.step)}, "
                             f"got {ind}")
        count = check_int("state['count']", state["count"], 0)
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
