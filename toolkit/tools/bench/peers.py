"""``mxopt bench``'s peers: what the toolkit's step is compared with besides its floor.

* ``numpy``: the unfused-numpy baseline, derived from the optimizer's reference module
  (``reference.<name>``) stepped through ``backend="reference"``: one temporary per operation,
  in **float64**, so it moves at least twice a float32 baseline's bytes and is labelled so
  (:data:`NUMPY_BASELINE`). An optimizer without a reference is reported "n/a".
* ``torch fused`` / ``torch foreach``: ``torch.optim.<X>(fused=True / foreach=True)`` where torch
  is installed and the spec's ``BenchSetting.torch`` names an update of the same traffic,
  float32 only.
"""
from __future__ import annotations

import importlib.util

import numpy as np

from .settings import make_optimizer, spec_of_setting

__all__ = ["NUMPY_BASELINE", "numpy_baseline", "import_torch", "torch_step"]

#: what the "numpy" column measures (written into the JSON and said by the reports)
NUMPY_BASELINE = {
    "kind": "reference-float64",
    "label": "numpy f64 ref",
    "what": "the optimizer's reference module (reference.<name>) stepped through "
            "backend='reference': its equations as unfused numpy operations in float64 on "
            "float64 copies of the weight, gradient and state, the results rounded back to the "
            "float32 arrays (float16-mp: the float32 master and the float16 weight); "
            "single-threaded; a float64 baseline, not a float32 one",
}


def numpy_baseline(setting, half, w, g):
    """The unfused-numpy baseline of ``setting`` on its own weight ``w`` (float32, or float16
    with a float32 master when ``half``) and the gradient ``g``, as a zero-argument step; or a
    string saying why there is none (no reference module)."""
    spec = spec_of_setting(setting)
    if not spec.has_oracle:
        return "n/a: no reference module (the numpy baseline is the reference's step)"
    opt = make_optimizer(setting, "reference", multi_precision=half)
    if half:
        state = opt.create_state_multi_precision(0, w)
        update = opt.update_multi_precision
    else:
        state = opt.create_state(0, w)
        update = opt.update

    def step():
        with np.errstate(all="ignore"):  # MXNet's Adamax divides 0/0 where a gradient is 0
            update(0, w, g, state)
    return step


def import_torch():
    """``(torch or None, why not)``."""
    if importlib.util.find_spec("torch") is None:
        return None, "torch is not installed (pip install torch, or the suggested 'bench' extra)"
    try:
        import torch
    except Exception as exc:  # pragma: no cover - a broken install
        return None, f"torch cannot be imported ({exc})"
    return torch, ""


def torch_step(torch, setting, kind, w0, g0, device="cpu"):
    """The ``torch.optim`` step of ``setting`` (``kind``: "fused" or "foreach") on its own copy
    of ``w0``/``g0``, or a string saying why not."""
    if setting.torch is None:
        return "n/a: torch has no such optimizer"
    cls_name, kw = setting.torch
    kw = dict(kw)
    kw.setdefault("lr", float(make_optimizer(setting, "cpu").lr))
    dev = "cuda" if device == "cuda" else "cpu"
    p = torch.tensor(w0, device=dev).requires_grad_()
    p.grad = torch.tensor(g0, device=dev)
    try:
        opt = getattr(torch.optim, cls_name)([p], **kw, **{kind: True})
        opt.step()
    except Exception as exc:
        return f"n/a: {type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
    return opt.step
