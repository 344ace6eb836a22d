"""``mxopt bench``'s ``toolkit.torch`` cases: ``toolkit.torch.Adam`` against
``torch.optim.Adam(fused=True)`` (foreach where torch has no fused kernel on the device) over the
same tensors, and the floor of the same traffic (28 bytes per element), interleaved. Three lists
of tensors: ResNet-50's 161 parameter shapes, 2000 tensors of 1024 values, one tensor of 2^24
values.

Gradients are fresh each step in both, as autograd leaves them under torch's default
``zero_grad(set_to_none=True)``: two sets of gradient tensors, and before each step the other
set is assigned to the parameters' ``.grad`` (untimed: ``timing.Prepared``), so that every step
sees gradients at new addresses. ``toolkit_torch_ms`` and ``torch_ms`` are the steps alone,
``vs_torch`` their ratio and ``of_floor`` the toolkit's against the floor; ``regrad_ms`` is the
assignment alone, for scale.
"""
from __future__ import annotations

import statistics

import numpy as np

from .floor import ADAM_TRAFFIC, adam_floor
from .resnet import many_tensor_shapes, resnet50_shapes, torch_adam, torch_leaves
from .timing import Prepared, device_sync, measure, paired

__all__ = ["TORCH_CASES", "torch_case"]

#: the lists of tensors the ``toolkit.torch`` cases step: (label, shapes)
TORCH_CASES = (("resnet50", resnet50_shapes), ("many_tensors", many_tensor_shapes),
               ("one_2^24", lambda: [(1 << 24,)]))


def _params(torch, dev, shapes, rng):
    """Parameters of ``shapes`` and two sets of gradients for them, and the function that
    assigns the next set to ``.grad`` (autograd's fresh gradients)."""
    ps = torch_leaves(torch, dev, shapes, rng)
    sets = [[torch.tensor(rng.standard_normal(s).astype(np.float32) * 0.01, device=dev)
             for s in shapes] for _ in range(2)]
    turn = [0]

    def regrad():
        grads = sets[turn[0]]
        turn[0] = 1 - turn[0]
        for p, g in zip(ps, grads):
            p.grad = g
    regrad()
    return ps, regrad


def torch_case(device, shapes, repeats, torch):
    """One ``toolkit.torch.Adam`` step over ``shapes`` against torch's fused Adam over tensors
    of the same shapes, both with fresh gradients, and the floor; a JSON-able dict."""
    from ... import torch as tkt
    rng = np.random.default_rng(0)
    dev = "cuda" if device == "cuda" else "cpu"
    n = int(sum(int(np.prod(s)) for s in shapes))
    ps, tk_regrad = _params(torch, dev, shapes, rng)
    tk = tkt.Adam(ps, lr=1e-3)
    tk.step()
    qs, torch_regrad = _params(torch, dev, shapes, rng)
    ref, kind = torch_adam(torch, qs)

    steps = {"toolkit.torch": Prepared(tk_regrad, tk.step),
             "torch": Prepared(torch_regrad, ref.step), "regrad": tk_regrad,
             "floor": adam_floor(device, n, rng)}
    times, _ = measure(steps, repeats, 0.005, device_sync(device), untimed_first_call_skip=())
    med = {k: statistics.median(v) for k, v in times.items()}
    b = ADAM_TRAFFIC.bytes
    return {"tensors": len(shapes), "elements": n, "bytes_per_element": b,
            "repeats": repeats, "torch_kind": kind, "torch_version": torch.__version__,
            "timing": "as the single-tensor cases (measure): interleaved, fastest of up to 3 "
                      "steps per repetition, medians",
            "toolkit_torch_ms": med["toolkit.torch"] * 1e3, "torch_ms": med["torch"] * 1e3,
            "regrad_ms": med["regrad"] * 1e3, "floor_ms": med["floor"] * 1e3,
            "floor_GBps": b * n / med["floor"] / 1e9,
            "toolkit_torch_GBps": b * n / med["toolkit.torch"] / 1e9,
            "vs_torch": paired(times["torch"], times["toolkit.torch"]),
            "of_floor": paired(times["floor"], times["toolkit.torch"])}
