"""The oracle: a pure-Python, float64 reference for every optimizer of the MXNet optimizer guide.

Each module encodes one optimizer's documented equations line by line, in the guide's notation,
under the conventions ``"mxnet"`` (what MXNet 1.9.1 computes), ``"guide"`` (the guide read
precisely) and, where torch.optim has the optimizer, ``"pytorch"`` (its documented update);
``docs/conventions.md`` gives the contract and every reading taken. Every optimizer module
``reference.<name>`` has this interface:

``NAME``
    the MXNet registry name.
``STATE``
    the names of the state arrays, in MXNet's ``create_state`` order (those kept for given
    hyperparameters: ``state_slots(**hyper)``).
``CONVENTIONS``
    the conventions the module's ``step`` implements, e.g. ``("mxnet", "guide", "pytorch")``; any
    other is a ValueError naming them (Nadam's ``"guide"`` is a NotImplementedError instead: it
    needs two gradients per step).
``PYTORCH``
    ``"pytorch"`` when the module has its own branch for PyTorch's update; the name of one of its
    other conventions when PyTorch's update equals that one mathematically (``step`` with
    ``convention="pytorch"`` then runs that branch exactly); ``None`` when torch.optim has no such
    optimizer (then ``"pytorch"`` is not in ``CONVENTIONS``).
``HYPER``
    the optimizer's own hyperparameters with MXNet 1.9.1's defaults (``learning_rate`` included
    where the optimizer has its own default).
``state_slots(**hyper) -> tuple``
    the slots actually kept for these hyperparameters (e.g. SGD keeps ``mom`` only with momentum).
``init_state(weight, **hyper) -> dict``
    a fresh state: float64 arrays named as in ``STATE``, plus any scalar bookkeeping.
``step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
convention="mxnet", hyper_f32=True, **hyper) -> (weight, state)``
    one update. Pure: the inputs are not modified; new float64 arrays are returned. ``t`` is the
    per-index update count after incrementing (1 on the first step), ``lr`` and ``wd`` the
    effective values for this index and step. ``hyper_f32`` (mxnet convention only) rounds the
    hyperparameters MXNet rounds to float32. Hyperparameter names are MXNet's in every
    convention; each module's docstring maps them to torch's.
``FORMS`` (optional)
    ``{form: the conventions whose equations it changes}``: known variants of the same equations
    (a lerp, epsilon elsewhere, constants in the weight's precision), run with
    ``step(..., form=name)`` and written out in ``step``'s docstring. The oracle re-runs a failed
    case under them to explain it (``toolkit/oracle/variants.py``).

Steps use operators and the numpy functions sqrt, abs, sign, maximum, minimum, clip, where, square
and sum only, so that they also run on :class:`reference.error_bound.Tracked` inputs and yield a
rigorous first-order bound on the rounding error of any implementation.

``import reference`` needs numpy only; ``reference.argmin`` (the FTRL/FTML argmin proofs) needs scipy.
"""
import importlib as _importlib
import pkgutil as _pkgutil
import re as _re

from . import error_bound, noise  # noqa: F401

_DECLARES_NAME = _re.compile(r"^NAME\s*=", _re.MULTILINE)


def _optimizer_modules():
    """Every public module that declares ``NAME``, found by reading its source first so that a
    helper with other dependencies (``reference.argmin``: scipy) is not imported."""
    for info in sorted(_pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.ispkg:
            continue
        origin = info.module_finder.find_spec(f"{__name__}.{info.name}").origin
        with open(origin, encoding="utf-8") as f:
            if not _DECLARES_NAME.search(f.read()):
                continue
        module = _importlib.import_module(f"{__name__}.{info.name}")
        if getattr(module, "NAME", None) is not None:
            yield module


#: registry name -> reference module, sorted by name
OPTIMIZERS = {m.NAME: m for m in _optimizer_modules()}

__all__ = ["OPTIMIZERS", "error_bound", "noise"] + list(OPTIMIZERS)
