"""The toolkit's own top-level packages (``toolkit``, ``reference``) as installed, whatever a
user keeps beside their code: a user's ``reference.py`` (or ``toolkit.py``) first on
``sys.path`` would otherwise stand in for ours.

* :func:`ensure_reference` makes ``sys.modules["reference"]`` the installed package, so every
  ``reference.<name>`` import of the oracle resolves to ours (a user's module that already
  imported its own keeps it).
* :func:`user_folder` imports a user's file with its folder first on ``sys.path`` and ours out
  of ``sys.modules`` where that folder shadows them, so the user's imports resolve as when they
  run their code; afterwards ours are back and the folder is last on ``sys.path``.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import importlib.util
import os
import sys

__all__ = ["OURS", "ensure_reference", "user_folder", "installed_path", "installed_by"]

#: the top-level packages this distribution installs
OURS = ("toolkit", "reference")


def installed_path(name):
    """The folder of our top-level package ``name``: beside ``toolkit``'s own (one install
    holds both), or None where it is not there."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../toolkit
    folder = os.path.join(os.path.dirname(root), name)
    return folder if os.path.isfile(os.path.join(folder, "__init__.py")) else None


@functools.lru_cache(maxsize=None)
def installed_by(path, distribution):
    """Whether the file ``path`` (a module's ``__file__`` or spec origin) is one the installed
    ``distribution`` (a PyPI name) holds: a user's ``adopt.py`` beside their code is not
    torch-adopt's ``adopt``."""
    import importlib.metadata as md
    if not path:
        return False
    try:
        files = md.distribution(distribution).files or ()
    except md.PackageNotFoundError:
        return False
    target = os.path.realpath(path)
    dist = md.distribution(distribution)
    return any(os.path.realpath(dist.locate_file(f)) == target for f in files)


def _is_ours(module, folder):
    path = getattr(module, "__file__", None)
    return path is not None and os.path.dirname(os.path.abspath(path)) == folder


def _family(name):
    return [k for k in sys.modules if k == name or k.startswith(name + ".")]


def ensure_reference():
    """``sys.modules["reference"]`` is the installed ``reference`` package (loaded from its
    folder where another module of that name, or none, is there); returns it."""
    folder = installed_path("reference")
    current = sys.modules.get("reference")
    if current is not None and (folder is None or _is_ours(current, folder)):
        return current
    if folder is None:  # not installed beside the toolkit: the import system's own
        return importlib.import_module("reference")
    kept = {}
    for k in _family("reference"):  # another module of the name, and its submodules
        if k != "reference" and _is_ours(sys.modules[k], folder):
            kept[k] = sys.modules[k]
        else:
            del sys.modules[k]
    spec = importlib.util.spec_from_file_location(
        "reference", os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules["reference"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["reference"]
        raise
    for k, sub in kept.items():  # ours, imported before: attributes of the package again
        if k.count(".") == 1:
            setattr(module, k.partition(".")[2], sub)
    return module


@contextlib.contextmanager
def user_folder(folder):
    """Import a user's module from ``folder``: first on ``sys.path`` meanwhile, with our
    packages that a module of ``folder`` shadows out of ``sys.modules``; then ours back (the
    user's own stay with the modules that imported them) and ``folder`` last on ``sys.path``."""
    folder = os.path.abspath(folder)
    shadowed = [n for n in OURS
                if importlib.machinery.PathFinder.find_spec(n, [folder]) is not None]
    ensure_reference()
    saved = {k: sys.modules.pop(k) for n in shadowed for k in _family(n)}
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.path.remove(folder)
        if folder not in sys.path:
            sys.path.append(folder)
        for n in shadowed:
            for k in _family(n):
                del sys.modules[k]
        sys.modules.update(saved)
