"""Adapters from other frameworks' optimizers to the oracle: what ``mxopt audit`` runs.

One module per framework (``torch``, ``optax``), each defining ``FRAMEWORK``, a
:class:`Framework` (importable here or not, versions, :class:`Adapter` s). An adapter names a
framework optimizer (``label``), the toolkit optimizer it is audited as (``optimizer``; from
``Spec.torch`` where the spec maps it), the hyperparameters the framework lacks (``fixed``), its
dtypes, and ``make(dtype) -> make_step`` for :func:`toolkit.oracle.verify`, translating MXNet's
names to the framework's. A module of your own defining ``FRAMEWORK = Framework(name=<its import
path>, ...)`` is audited when named to ``mxopt audit --frameworks`` by that path. A framework
whose float64 needs process-wide state (JAX's x64) sets ``env``: that dtype runs in a subprocess
(``python -m toolkit.oracle.frameworks NAME DTYPE``).
"""
from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from dataclasses import dataclass, field
from typing import Callable, Mapping

__all__ = ["Adapter", "Framework", "names", "get", "in_process"]


@dataclass(frozen=True)
class Adapter:
    """One framework optimizer in one configuration, audited as toolkit optimizer
    ``optimizer``. ``make(dtype)`` returns ``make_step``; ``fixed`` pins what the framework
    lacks; ``dtypes`` the precisions it is audited in; ``note`` what the translation assumes;
    ``held``: how the framework says it holds its moments, as ``verify``'s keywords
    (``{"state_dtype": "int8", "block": 256}``), audited so where ``identify`` finds no held
    form of its own (:mod:`toolkit.oracle.held`)."""
    label: str
    optimizer: str
    make: Callable[[str], Callable]
    fixed: Mapping = field(default_factory=dict)
    dtypes: tuple = ("float32", "float64")
    note: str = ""
    held: Mapping = field(default_factory=dict)


def in_process(dtype):
    """The default ``Framework.env``: every dtype runs in this process (None)."""
    return None


@dataclass(frozen=True)
class Framework:
    """A framework the audit can run: ``name`` (its module here), ``module`` (what must be
    importable), ``adapters()`` (a list of :class:`Adapter`), ``versions()`` (``{package:
    version}``), ``env(dtype)`` (environment variables a dtype needs in a fresh process, or
    None: run in this one), ``install`` (how to install it, for the message when it is
    missing), ``package``: the distribution that must provide ``module`` (a PyPI name; None:
    any module of that name will do), so that a user's ``adopt.py`` is not taken for
    torch-adopt's ``adopt``."""
    name: str
    module: str
    adapters: Callable[[], list]
    versions: Callable[[], dict]
    env: Callable[[str], dict | None] = in_process
    install: str = ""
    package: str | None = None

    def available(self):
        """Whether the framework is importable here (without importing it), from ``package``
        where one is named."""
        try:
            spec = importlib.util.find_spec(self.module)
        except (ImportError, ValueError):
            return False
        if spec is None:
            return False
        if self.package is None:
            return True
        from ..installed import installed_by
        return installed_by(spec.origin, self.package)


def names():
    """The frameworks that have an adapter module here (installed or not)."""
    return tuple(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def get(name):
    """The :class:`Framework` named ``name``: one of :func:`names`, or the import path of a
    module of your own that defines ``FRAMEWORK`` (its ``name`` must be that path, so that a
    subprocess of the audit finds it too). Anything else is a ValueError naming the known
    ones."""
    if not isinstance(name, str):
        raise TypeError(f"a framework is named by a string, got {name!r}")
    if name in names():
        return importlib.import_module(f"{__name__}.{name}").FRAMEWORK
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    fw = getattr(importlib.import_module(name), "FRAMEWORK", None) if found else None
    if not isinstance(fw, Framework) or fw.name != name:
        raise ValueError(f"unknown framework {name!r}; the audit has adapters for "
                         f"{', '.join(names())} (or name a module of yours whose FRAMEWORK is "
                         f"a toolkit.oracle.frameworks.Framework named after the module)")
    return fw
