"""MXNet's optimizers as PyTorch optimizers, with MXNet's numbers (docs/torch.md).

>>> import torch, toolkit.torch
>>> w = torch.nn.Parameter(torch.ones(3))
>>> opt = toolkit.torch.Adam([w], lr=0.01, betas=(0.9, 0.999))
>>> w.grad = torch.full((3,), 0.5); opt.step()
>>> w.detach()
tensor([0.9900, 0.9900, 0.9900])

Every registered optimizer is a ``torch.optim.Optimizer`` subclass here under its class name in
``toolkit.optimizer`` (``toolkit.torch.Adam``...), made on first use from the registry;
``create(name, params, **kwargs)`` takes the registry name. torch's own spellings (``Adagrad``,
``RMSprop``, ``Adadelta``, ``NAdam``) are torch's namesakes: ``convention="pytorch"`` where the
kernels have it, and torch's defaults (:func:`torch_optimizer_class`). Importing ``toolkit`` does
not import torch; importing ``toolkit.torch`` does.
"""
from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover - the torch extra is not installed
    raise ImportError("toolkit.torch needs PyTorch: pip install 'mxnet-optimizer-toolkit[torch]' "
                      "(for the CPU build: pip install torch --index-url "
                      "https://download.pytorch.org/whl/cpu)") from e

from .. import optimizer as _optimizer
from ..optimizers.registry import registry as _registry
from ..optimizers.registry import specs as _specs
from . import meaning
from .modes import TrainEval
from .optim import TorchOptimizer

__all__ = ["TorchOptimizer", "create", "optimizer_class", "torch_optimizer_class"]

#: toolkit optimizer class -> its torch.optim class (made once)
_CLASSES: dict = {}


def optimizer_class(klass):
    """The ``torch.optim.Optimizer`` subclass over the toolkit optimizer class ``klass`` (a
    registered ``toolkit.optimizer.Optimizer`` subclass), made once."""
    made = _CLASSES.get(klass)
    if made is None:
        # an optimizer whose weight moves between two points (Schedule-Free AdamW) has the
        # train()/eval() switch
        moves = callable(getattr(klass, "to_eval", None)) and \
            callable(getattr(klass, "to_train", None))
        made = type(klass.__name__, (TrainEval, TorchOptimizer) if moves else (TorchOptimizer,), {
            "toolkit_class": klass, "__module__": __name__,
            # the defaults of the PyTorch implementation it follows, where they differ
            "torch_defaults": meaning.peer_defaults(klass),
            "__qualname__": klass.__name__,
            "__doc__": (f"``torch.optim.Optimizer`` over ``toolkit.optimizer."
                        f"{klass.__name__}`` (docs/torch.md).\n\n{TorchOptimizer.__doc__}\n\n"
                        f"The update:\n\n{klass.__doc__ or ''}")})
        _CLASSES[klass] = made
    return made


def _toolkit_class(name):
    """The registered class whose class name is ``name`` (or that ``toolkit.optimizer`` names
    so: ``FTRL``), or None."""
    for klass in _registry().values():
        if klass.__name__ == name:
            return klass
    klass = getattr(_optimizer, name, None)
    if isinstance(klass, type) and issubclass(klass, _optimizer.Optimizer) and \
            klass in _registry().values():
        return klass
    return None


def _torch_spelled():
    """``{torch's class name: toolkit class}`` where torch spells its namesake otherwise than
    the toolkit (``Adagrad`` for ``AdaGrad``, ``NAdam`` for ``Nadam``): torch's optimizer under
    torch's spelling (:func:`torch_optimizer_class`)."""
    out = {}
    for name, spec in _specs().items():
        klass = _registry()[name]
        if spec.torch and spec.torch != klass.__name__ and not spec.torch_flags and \
                _toolkit_class(spec.torch) is None:
            out[spec.torch] = klass
    return out


def torch_optimizer_class(klass):
    """The ``torch.optim.Optimizer`` subclass that is torch's namesake of ``klass``: its update
    under ``convention="pytorch"`` where the kernels have it (else MXNet's, a documented
    difference), with torch's defaults for torch's keywords; made once."""
    spec = _specs()[[n for n, k in _registry().items() if k is klass][0]]
    made = _CLASSES.get((klass, "torch"))
    if made is None:
        base = optimizer_class(klass)
        defaults = dict(meaning.torch_defaults(spec.torch))
        if "pytorch" in spec.conventions:
            defaults["convention"] = "pytorch"
        made = type(spec.torch, (base,), {
            "torch_defaults": defaults, "__module__": __name__, "__qualname__": spec.torch,
            "__doc__": (f"torch.optim.{spec.torch} in toolkit.torch: "
                        f"toolkit.optimizer.{klass.__name__} with torch's defaults "
                        f"{defaults} (docs/torch.md, 'Torch's spellings').\n\n"
                        f"{base.__doc__}")})
        _CLASSES[(klass, "torch")] = made
    return made


def __getattr__(name):
    klass = _toolkit_class(name) if not name.startswith("_") else None
    if klass is None and not name.startswith("_"):
        spelled = _torch_spelled().get(name)
        if spelled is not None:
            return torch_optimizer_class(spelled)
    if klass is None:
        raise AttributeError(f"module 'toolkit.torch' has no attribute {name!r} (the "
                             "optimizers are the registered ones: "
                             f"{', '.join(sorted(k.__name__ for k in _registry().values()))}, "
                             "and torch's spellings "
                             f"{', '.join(sorted(_torch_spelled()))})")
    return optimizer_class(klass)


def __dir__():
    return sorted(set(__all__) | {k.__name__ for k in _registry().values()} |
                  set(_torch_spelled()))


def create(name, params, **kwargs):
    """The ``toolkit.torch`` optimizer of registry name ``name`` (case-insensitive, as
    ``toolkit.optimizer.create``) over ``params``: ``create("adam", model.parameters(),
    lr=1e-3)``."""
    if not isinstance(name, str):
        raise TypeError(f"optimizer name must be a string, got {type(name).__name__}")
    klass = _registry().get(name.lower())
    if klass is None:
        raise ValueError(f"unknown optimizer {name!r}; known optimizers: "
                         f"{', '.join(sorted(_registry()))}")
    return optimizer_class(klass)(params, **kwargs)
