"""The PyTorch implementations the toolkit's specs name where torch.optim has no such optimizer
(``Spec.torch_peer``: the authors' code or the most used one), for the audit: one framework
module per package (``lion_pytorch``, ``torch_adopt``, ``adabelief_pytorch``, ``schedulefree``),
each built by :func:`framework` from one :class:`Peer` per toolkit optimizer the package
implements (``schedulefree``: Schedule-Free AdamW and Schedule-Free SGD): the package's class
(or classes), its keywords (MXNet's names -> the package's) and its configurations. Each runs
its default path, in float32 and float64, as a user runs it; the hyperparameters none of them
has (``rescale_grad``, ``clip_gradient``) are pinned. A module of that name that the package did
not install (a user's ``adopt.py``) is not the framework (``Framework.package``)."""
from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import io
from typing import Callable, NamedTuple

from . import Adapter, Framework
from .torch import FIXED, make_step_of

__all__ = ["Peer", "framework"]


class Peer(NamedTuple):
    """One toolkit optimizer a package implements: ``optimizer`` the registry name (its spec's
    ``Spec.torch_peer.name`` is the package's class), ``kwargs(lr, wd, own)`` the class's
    keywords, ``configurations`` ``(label, fixed)`` pairs, or ``(label, fixed, cls)`` triples
    where a configuration is another class of the same module (the authors'
    ``AdamWScheduleFreePaper`` beside the spec's ``AdamWScheduleFree``: the same keywords,
    ``fixed`` pinning the hyperparameter that tells the classes apart)."""
    optimizer: str
    kwargs: Callable
    configurations: tuple


def framework(name, module, package, *peers, prepare=None):
    """The :class:`Framework` ``name`` for the importable ``module`` of the PyPI ``package``,
    auditing each of ``peers`` (:class:`Peer`, in order: one per toolkit optimizer the package
    implements); ``prepare(opt)`` what a user must call on a new optimizer of any of them
    before its first step (the Schedule-Free optimizers' ``opt.train()``), or None."""
    if not peers:
        raise ValueError(f"framework {name!r} names no optimizer")

    def adapters():
        from ...optimizers.registry import spec_of
        out = []
        for peer in peers:
            named = spec_of(peer.optimizer).torch_peer.name
            for suffix, fixed, *cls in peer.configurations:
                cls = cls[0] if cls else named
                klass = getattr(importlib.import_module(module), cls)
                out.append(Adapter(
                    label=f"{module}.{cls}({suffix})", optimizer=peer.optimizer,
                    make=lambda dtype, k=klass, kw=peer.kwargs: _quiet(
                        make_step_of(k, kw, dtype, prepare=prepare)),
                    fixed={**FIXED, **fixed}))
        return out

    def versions():
        """torch's and the package's, the latter under its module's name, as a verify report
        records it (``toolkit.oracle.reports.versions``)."""
        import torch
        return {"torch": str(torch.__version__), module: importlib.metadata.version(package)}

    return Framework(name=name, module=module, adapters=adapters, versions=versions,
                     install=f"pip install {package} (with torch)", package=package)


def _quiet(make_step):
    """``make_step`` with what the optimizer's constructor prints kept off stdout
    (adabelief-pytorch 0.2.1 prints its options whatever ``print_change_log`` says), where the
    audit writes its table."""
    def quiet(*args, **kwargs):
        with contextlib.redirect_stdout(io.StringIO()):
            return make_step(*args, **kwargs)
    return quiet
