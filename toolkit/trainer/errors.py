"""The errors a Trainer raises, in a module of their own so that the Trainer and its distributed
kvstore need not import each other for them. ``toolkit`` exports :class:`StaleGradientError`
and :class:`ParamsError` (docs/api.md); :class:`DistMismatchError` is also
``toolkit.trainer.dist.DistMismatchError`` (docs/distributed.md).
"""
from __future__ import annotations

__all__ = ["StaleGradientError", "ParamsError", "DistMismatchError"]


class StaleGradientError(RuntimeError, UserWarning):
    """A parameter's gradient was not written since its last update (MXNet raises a
    ``UserWarning`` here; this is one, and a ``RuntimeError`` too)."""


class ParamsError(TypeError, ValueError):
    """``params`` is not a list or dict of Parameters (a ``TypeError``, and the ``ValueError``
    MXNet raises here: ``Trainer.__init__`` in python/mxnet/gluon/trainer.py at tag 1.9.1)."""


class DistMismatchError(ValueError):
    """The ranks' Trainers differ (parameters, optimizer or settings); raised on every rank."""

    raised_on_every_rank = True
