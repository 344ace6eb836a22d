"""The warning of a module kept for one release under its old name, pointed at the statement
that imported it (the first frame outside the module and the import machinery, which a
``stacklevel`` cannot count past: an import hook's loader, such as pytest's assertion
rewriting, adds frames of its own)."""
from __future__ import annotations

import inspect
import warnings

__all__ = ["warn_import"]

#: functions of loaders between an ``import`` statement and the imported module's code
_LOADERS = ("exec_module", "load_module", "_call_with_frames_removed")


def warn_import(message, shim_file):
    """Warn ``DeprecationWarning`` ``message`` at the statement importing ``shim_file``."""
    frame = inspect.currentframe().f_back
    while frame is not None and (frame.f_code.co_filename == shim_file
                                 or frame.f_code.co_filename.startswith("<frozen importlib")
                                 or frame.f_code.co_name in _LOADERS):
        frame = frame.f_back
    if frame is None:
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return
    warnings.warn_explicit(message, DeprecationWarning, frame.f_code.co_filename,
                           frame.f_lineno, module=frame.f_globals.get("__name__", ""),
                           registry=frame.f_globals.setdefault("__warningregistry__", {}))
