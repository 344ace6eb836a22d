"""The registry: registry name -> optimizer class and its :class:`~toolkit.optimizers.spec.Spec`.

``register`` is MXNet's decorator (the lower-case class name is the registry name); a class that
declares a spec (``spec = SPEC`` in its body) is registered with it, one that does not with a
bare spec (no oracle: it steps and trains, the tools that compare against an oracle skip it).
Importing ``toolkit.optimizers`` imports every module of the package and so registers every
built-in optimizer; :func:`specs` is what every table of the toolkit reads.
"""
from __future__ import annotations

import warnings

from .spec import Spec

__all__ = ["register", "unregister", "registry", "create", "specs", "spec_of"]

_CLASSES: dict[str, type] = {}
_SPECS: dict[str, Spec] = {}


def _is_optimizer(klass):
    # the Optimizer base class is found by name along the MRO: this module sits below base.py
    # (base imports nothing from here), so it cannot import the class itself
    return isinstance(klass, type) and any(
        c.__name__ == "Optimizer" and c.__module__ == "toolkit.optimizers.base"
        for c in klass.__mro__)


def register(klass):
    """Register an optimizer class under its lower-case class name (MXNet's rule); a decorator.

    The class's own ``spec`` (declared in its body) is registered with it; its name must be the
    registry name. Registering a second class under a taken name replaces it with a warning, as
    MXNet does.
    """
    if not _is_optimizer(klass):
        raise TypeError(f"register expects an Optimizer subclass, got {klass!r}")
    name = klass.__name__.lower()
    spec = klass.__dict__.get("spec")
    if spec is None:
        spec = Spec.bare(name)
    elif not isinstance(spec, Spec):
        raise TypeError(f"{klass.__name__}.spec must be a toolkit.optimizers.spec.Spec, "
                        f"got {type(spec).__name__}")
    elif spec.name != name:
        raise ValueError(f"{klass.__name__}.spec is named {spec.name!r}; the registry name of "
                         f"{klass.__name__} is {name!r} (its lower-case class name)")
    if name in _CLASSES and _CLASSES[name] is not klass:
        warnings.warn(f"optimizer {name!r} was already registered by "
                      f"{_CLASSES[name].__module__}.{_CLASSES[name].__name__}; replacing it",
                      UserWarning, stacklevel=2)
    _CLASSES[name] = klass
    _SPECS[name] = spec
    return klass


def unregister(name):
    """Remove ``name`` from the registry (a test's or a plug-in's clean-up); returns its class.
    An unknown name is a ValueError."""
    key = str(name).lower()
    if key not in _CLASSES:
        raise ValueError(f"{name!r} is not registered")
    _SPECS.pop(key)
    return _CLASSES.pop(key)


def registry() -> dict:
    """A copy of the registry: lower-case name -> class, sorted by name."""
    return {n: _CLASSES[n] for n in sorted(_CLASSES)}


def specs(*, oracle=False) -> dict:
    """``{registry name: Spec}`` sorted by name; with ``oracle`` only the optimizers whose spec
    names a reference module (those ``check``, ``accuracy`` and ``regress`` run)."""
    return {n: _SPECS[n] for n in sorted(_SPECS) if _SPECS[n].has_oracle or not oracle}


def spec_of(name_or_class) -> Spec:
    """The spec of a registry name (case-insensitive), a registered class or an instance of
    one; a ValueError names the known optimizers."""
    key = name_or_class
    if not isinstance(key, str):
        klass = key if isinstance(key, type) else type(key)
        key = klass.__name__
    spec = _SPECS.get(key.lower())
    if spec is None:
        raise ValueError(f"unknown optimizer {name_or_class!r}; known optimizers: "
                         f"{', '.join(sorted(_SPECS))}")
    return spec


def create(name, **kwargs):
    """Create an optimizer by registry name (case-insensitive), e.g. ``create("adam", learning_rate=0.01)``."""
    if _is_optimizer(type(name)):
        return name
    if not isinstance(name, str):
        raise TypeError(f"optimizer name must be a string, got {type(name).__name__}")
    klass = _CLASSES.get(name.lower())
    if klass is None:
        raise ValueError(f"unknown optimizer {name!r}; known optimizers: "
                         f"{', '.join(sorted(_CLASSES))}")
    return klass(**kwargs)
