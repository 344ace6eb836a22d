"""Deprecated alias of :mod:`toolkit.optimizers.spec_spaces` (the :class:`Space` primitives and
shared ranges an optimizer's spec declares its hyperparameters and weights with), kept for one
release. Its names are looked up on use (``from toolkit.optimizers.spaces import Interval``):
each use warns ``DeprecationWarning`` and gives the same object as ``spec_spaces``. Importing the
module alone does not warn (``toolkit.optimizers`` imports each of its modules).
"""
import warnings

from . import spec_spaces as _spec_spaces

__all__ = list(_spec_spaces.__all__)


def __getattr__(name):
    if name in __all__:
        warnings.warn("toolkit.optimizers.spaces is deprecated and will be removed in the next "
                      "release: use toolkit.optimizers.spec_spaces (the same names)",
                      DeprecationWarning, stacklevel=2)
        return getattr(_spec_spaces, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
