"""Learning-rate schedules that return, bit for bit, MXNet 1.9.1's numbers.

An optimizer calls ``lr = scheduler(num_update)`` with its update count after the increment (the
first step asks for 1; docs/mxnet-facts.md, 1.3). The four schedules of ``mxnet.lr_scheduler``
(``python/mxnet/lr_scheduler.py`` at tag 1.9.1) are here with MXNet's warmup options and its
stateful behaviour (docs/mxnet-facts.md, section 8; ``base_lr`` is overwritten by an optimizer
given ``learning_rate`` too, docs/mxnet-facts.md, 1.1): :class:`FactorScheduler`,
:class:`MultiFactorScheduler`, :class:`PolyScheduler`, :class:`CosineScheduler`.
``tests/test_lr_scheduler.py`` checks them against ``tests/data/mxnet/lr_scheduler.json``.

Differences from MXNet, none of which changes a rate MXNet returns: every bad argument raises
``TypeError`` or ``ValueError`` (MXNet asserts some, and accepts e.g. a negative ``factor`` or a
Poly/Cosine ``warmup_steps >= max_update``), and rates are Python floats.

Each schedule's ``__module__`` is this package: a states file records its type as
``toolkit.lr_scheduler.<class>``.
"""
from __future__ import annotations

from .base import LRScheduler
from .decay import CosineScheduler, PolyScheduler
from .step import FactorScheduler, MultiFactorScheduler

__all__ = [
    "LRScheduler",
    "FactorScheduler",
    "MultiFactorScheduler",
    "PolyScheduler",
    "CosineScheduler",
]

for _cls in (LRScheduler, FactorScheduler, MultiFactorScheduler, PolyScheduler, CosineScheduler):
    _cls.__module__ = __name__
del _cls
