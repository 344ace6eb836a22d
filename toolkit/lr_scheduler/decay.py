"""The decay schedules: :class:`PolyScheduler` (polynomial) and :class:`CosineScheduler`
(half-cosine), from ``base_lr`` to ``final_lr`` over ``max_update`` updates, on their shared
base ``_DecayToFinal``.
"""
from __future__ import annotations

import math

from .base import LRScheduler, check_int, check_lr, check_real


# --------------------------------------------------------------------------------------------
# Poly and Cosine: decay from the construction-time base lr to final_lr over [W, max_update]
# --------------------------------------------------------------------------------------------

class _DecayToFinal(LRScheduler):
    """Shared construction and ``n > max_update`` rule of Poly and Cosine."""

    def __init__(self, max_update, base_lr, final_lr, warmup_steps, warmup_begin_lr,
                 warmup_mode):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        self.max_update = check_int("max_update", max_update, 1)
        if self.warmup_steps >= self.max_update:
            raise ValueError(f"warmup_steps must be < max_update (the decay runs over "
                             f"warmup_steps..max_update), got warmup_steps={self.warmup_steps}, "
                             f"max_update={self.max_update}")
        self.final_lr = check_lr("final_lr", final_lr)
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

    Glossary: :math:`n` ``num_update``; :math:`M` ``max_update``; :math:`W` ``warmup_steps``;
    :math:`p` ``pwr`` (attribute ``power``); :math:`\eta_{\text{final}}` ``final_lr``;
    :math:`\eta_0` attribute ``base_lr_orig``, the constructor's ``base_lr`` (fixed: an optimizer
    overwriting ``base_lr`` does not change the decayed values); attribute ``base_lr``, the last
    value computed.

    Notes on MXNet 1.9.1 (``python/mxnet/lr_scheduler.py:190-236``; docs/mxnet-facts.md, 8):

    * MXNet's docstring says ``final_lr + (start_lr - final_lr)*(1-nup/max_nup)^pwr if nup <
      max_nup, 0 otherwise``: in fact the last value is held past ``max_update``, and the ramp is
      over ``n - W`` and ``M - W``.
    * A first call (after construction, or after ``base_lr`` was overwritten) with ``n >
      max_update`` returns the current ``base_lr``: restore a resumed run with
      :meth:`load_state_dict`.
    * ``warmup_steps < max_update`` and ``pwr > 0`` are required: otherwise MXNet divides by zero
      or never decays.

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
        self.power = check_real("pwr", pwr, minimum=0.0, strict_minimum=True)

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

    Glossary: as :class:`PolyScheduler`'s (:math:`\eta_0` = ``base_lr_orig`` is fixed; verified
    on MXNet 1.9.1, ``tests/data/mxnet/facts.json`` key ``adam_cosine_lr_used``).

    Notes on MXNet 1.9.1 (``python/mxnet/lr_scheduler.py:238-281``; docs/mxnet-facts.md, 8):
    MXNet's docstring says ``... if nup < max_nup, 0 otherwise``, but the schedule ends at
    ``final_lr`` and holds the last value past ``max_update``; the first-call rule and the checks
    are :class:`PolyScheduler`'s.

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
