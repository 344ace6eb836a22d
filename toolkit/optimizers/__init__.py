"""The optimizers, one module each; importing this package registers every built-in one.

Every module of the package is imported here (an optimizer's module registers its class and
spec with ``@register``), so a new optimizer is one new module: no list to extend.
"""
import importlib as _importlib
import pkgutil as _pkgutil

from .base import Optimizer  # noqa: F401
from .registry import create, register, registry, spec_of, specs, unregister  # noqa: F401
from .spec import BenchSetting, Spec  # noqa: F401

for _module in _pkgutil.iter_modules(__path__):
    _importlib.import_module(f"{__name__}.{_module.name}")

#: every registered class by its class name (``toolkit.optimizers.Adam``, ...)
globals().update({_klass.__name__: _klass for _klass in registry().values()})
