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

The modules of this package: :mod:`.base` (:class:`LRScheduler`, the warmup, and the checks of
the arguments), :mod:`.step` (Factor, MultiFactor) and :mod:`.decay` (Poly, Cosine). Every
schedule is imported from here, and its ``__module__`` is this package's name, as it was when
the package was one module: a states file records a schedule's type as
``toolkit.lr_scheduler.<class>``, and the optimizers take a schedule of this module for one
they can read once per count (``toolkit.optimizers.bookkeeping``).
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
