"""PyTorch's ``torch.optim`` for the audit: every toolkit optimizer whose spec names a
``torch.optim`` class (``Spec.torch``), in torch's default single-tensor implementation (float32
and float64) and its ``foreach`` and ``fused`` ones (float32; ``fused`` where torch has it on this
device).

MXNet's names -> torch's keywords (:data:`TRANSLATE`; docs/conventions.md, "The PyTorch
convention"): ``learning_rate`` = ``lr``, ``wd`` = ``weight_decay`` (torch's coupled L2; AdamW's
decoupled), ``(beta1, beta2)`` = ``betas``, ``epsilon``/``eps`` = ``eps``, RMSProp's ``gamma1`` =
``alpha`` and ``gamma2`` = ``momentum`` (centered), NAdam's ``schedule_decay`` =
``momentum_decay``, Muon's ``adjust_lr`` = ``adjust_lr_fn``, SparseAdam's gradient a sparse one holding every row, Rprop's ``(etaminus, etaplus)`` = ``etas`` and ``(step_size_min,
step_size_max)`` = ``step_sizes``, AdamW's torch ``lr`` = ``eta*learning_rate``. torch has no ``rescale_grad``
or ``clip_gradient`` (pinned to 1 and None) nor RMSProp's ``clip_weights`` (None). torch runs as
a user runs it: its default dtype is left alone (float32, in which torch keeps NAdam's
``mu_product``).
"""
from __future__ import annotations

import numpy as np

from . import Adapter, Framework

#: what torch lacks, pinned for every adapter
FIXED = {"rescale_grad": 1.0, "clip_gradient": None}


def _betas(h):
    return (h["beta1"], h["beta2"])


#: registry name -> (hyperparameters -> torch keywords, configurations: (label, fixed)). The
#: torch class is the spec's (``Spec.torch``); a test checks these keys are exactly the specs
#: that name one. ``kwargs(lr, wd, own)``: ``own`` the optimizer's own hyperparameters.
TRANSLATE = {  # checked against the registry by tests/test_audit.py::test_torch_table_is_the_specs_that_name_a_torch_class
    "sgd": (lambda lr, wd, h: {"lr": lr, "weight_decay": wd, "momentum": h["momentum"]},
            (("momentum=0", {"momentum": 0.0}), ("momentum=m", {}))),
    # torch refuses nesterov without momentum: momentum 0 runs plain SGD
    "nag": (lambda lr, wd, h: {"lr": lr, "weight_decay": wd, "momentum": h["momentum"],
                               "nesterov": h["momentum"] > 0},
            (("nesterov=True", {}),)),
    "adam": (lambda lr, wd, h: {"lr": lr, "weight_decay": wd, "betas": _betas(h),
                                "eps": h["epsilon"]}, (("", {}),)),
    "adamw": (lambda lr, wd, h: {"lr": h["eta"] * lr, "weight_decay": wd, "betas": _betas(h),
                                 "eps": h["epsilon"]}, (("", {}),)),
    "adagrad": (lambda lr, wd, h: {"lr": lr, "weight_decay": wd, "eps": h["eps"]},
                (("", {}),)),
    "rmsprop": (lambda lr, wd, h: {"lr": lr, "weight_decay": wd, "alpha": h["gamma1"],
                                   "eps": h["epsilon"], "centered": h["centered"],
                                   "momentum": h["gamma2"] if h["centered"] else 0.0},
                (("", {"centered": False, "clip_weights": None}),
                 ("centered=True", {"centered": True, "clip_weights": None}))),
    "adadelta": (lambda lr, wd, h: {"lr": lr, "weight_decay": wd, "rho": h["rho"],
                                    "eps": h["epsilon"]}, (("", {}),)),
    # the oracle draws no epsilon for Adamax: torch's default 1e-8 (the pytorch convention's)
    "adamax": (lambda lr, wd, h: {"lr": lr, "weight_decay": wd, "betas": _betas(h),
                                  "eps": 1e-8}, (("", {}),)),
    "nadam": (lambda lr, wd, h: {"lr": lr, "weight_decay": wd, "betas": _betas(h),
                                 "eps": h["epsilon"], "momentum_decay": h["schedule_decay"]},
              (("", {}),)),
    "radam": (lambda lr, wd, h: {"lr": lr, "weight_decay": wd, "betas": _betas(h),
                                 "eps": h["epsilon"],
                                 "decoupled_weight_decay": h["decoupled_weight_decay"]},
              (("", {"decoupled_weight_decay": False}),
               ("decoupled_weight_decay=True", {"decoupled_weight_decay": True}))),
    "adafactor": (lambda lr, wd, h: {"lr": lr, "weight_decay": wd,
                                     "beta2_decay": h["beta2_decay"],
                                     "eps": (h["epsilon1"], h["epsilon2"]),
                                     "d": h["clip_threshold"]}, (("", {}),)),
    # torch's weight_decay is Muon's decoupled wd (w*(1 - lr*wd)), as the toolkit's
    "muon": (lambda lr, wd, h: {"lr": lr, "weight_decay": wd, "momentum": h["momentum"],
                                "nesterov": h["nesterov"],
                                "ns_coefficients": tuple(h["ns_coefficients"]),
                                "eps": h["epsilon"], "ns_steps": h["ns_steps"],
                                "adjust_lr_fn": h["adjust_lr"]}, (("", {}),)),
    "asgd": (lambda lr, wd, h: {"lr": lr, "weight_decay": wd, "lambd": h["lambd"],
                                "alpha": h["alpha"], "t0": h["t0"]}, (("", {}),)),
    # no weight decay (the spec fixes wd 0)
    "sparseadam": (lambda lr, wd, h: {"lr": lr, "betas": _betas(h), "eps": h["epsilon"]},
                   (("", {}),)),
    "rprop": (lambda lr, wd, h: {"lr": lr, "etas": (h["etaminus"], h["etaplus"]),
                                 "step_sizes": (h["step_size_min"], h["step_size_max"])},
              (("", {}),)),
}


def gradient_for(cls, grad):
    """``grad`` (a dense tensor) as ``torch.optim.<cls>`` takes a gradient: itself, or, for a
    class that takes sparse gradients only (``Spec.torch_sparse``: SparseAdam), a sparse COO
    tensor holding every row of it, exact zeros included (the update of every row, what the
    toolkit's dense step is)."""
    import torch
    from ...optimizers.registry import specs
    if not any(s.torch == cls and s.torch_sparse for s in specs().values()):
        return grad
    rows = torch.arange(grad.shape[0]).unsqueeze(0) if grad.dim() else None
    if rows is None:
        raise ValueError(f"torch.optim.{cls} takes sparse gradients: a 0-d one has no rows")
    return torch.sparse_coo_tensor(rows, grad, tuple(grad.shape),
                                   check_invariants=True).coalesce()


def make_step_of(cls, kwargs, dtype, prepare=None, **implementation):
    """``make_step`` around ``torch.optim.<cls>`` (or ``cls`` itself, a torch optimizer class
    of another package: ``toolkit.oracle.frameworks._peers``) in ``dtype``: ``kwargs(lr, wd,
    own)`` gives its keywords; ``implementation`` is ``foreach=True`` or ``fused=True`` (or
    nothing); ``prepare(opt)``, if given, is called once on the new optimizer before its first
    step, as a user must call it (the Schedule-Free optimizers refuse to step until
    ``opt.train()``)."""
    import torch
    tdtype = getattr(torch, dtype)
    klass = cls if isinstance(cls, type) else getattr(torch.optim, cls)
    cls = klass.__name__

    def make_step(weight0, learning_rate, wd, rescale_grad, clip_gradient, **own):
        p = torch.tensor(np.asarray(weight0), dtype=tdtype, requires_grad=True)
        opt = klass([p], **kwargs(learning_rate, wd, own), **implementation)
        if prepare is not None:
            prepare(opt)

        def step(grad):
            p.grad = gradient_for(cls, torch.tensor(np.asarray(grad), dtype=tdtype))
            with torch.no_grad():
                opt.step()
            return p.detach()
        return step
    return make_step


def _supports(cls, option):
    """Whether ``torch.optim.<cls>(..., **{option: True})`` steps a float32 CPU tensor here."""
    import torch
    p = torch.zeros(2, requires_grad=True)
    try:
        opt = getattr(torch.optim, cls)([p], lr=0.1, **{option: True})
        p.grad = torch.ones(2)
        opt.step()
    except (RuntimeError, TypeError, ValueError):
        return False
    return True


def adapters():
    """One :class:`Adapter` per spec naming a torch class x configuration x implementation."""
    from ...optimizers.registry import specs
    out = []
    for name, spec in specs(oracle=True).items():
        if spec.torch is None:
            continue
        kwargs, configurations = TRANSLATE[name]
        for suffix, fixed in configurations:
            impls = [("", {}, ("float32", "float64"))]
            impls += [(f"{opt}=True", {opt: True}, ("float32",))
                      for opt in ("foreach", "fused") if _supports(spec.torch, opt)]
            for impl, options, dtypes in impls:
                args = ", ".join(a for a in (suffix, impl) if a)
                out.append(Adapter(
                    label=f"torch.optim.{spec.torch}({args})", optimizer=name,
                    make=lambda dtype, c=spec.torch, k=kwargs, o=options: make_step_of(
                        c, k, dtype, **o),
                    fixed={**FIXED, **fixed}, dtypes=dtypes))
    return out


def versions():
    import torch
    return {"torch": str(torch.__version__)}


FRAMEWORK = Framework(name="torch", module="torch", adapters=adapters, versions=versions,
                      install="pip install torch (the CPU build: --index-url "
                              "https://download.pytorch.org/whl/cpu)")
