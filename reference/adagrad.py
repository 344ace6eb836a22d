"""Reference (float64 oracle) for AdaGrad.

Encodes guide:94-95 (convention "guide") and MXNet 1.9.1's dense Python-op update (convention
"mxnet", python/mxnet/optimizer/optimizer.py:1682-1687 at tag 1.9.1) in the interface of
``reference/__init__.py``. See docs/conventions.md, section "AdaGrad", and
docs/optimizers/adagrad.md.

Convention "pytorch": PyTorch's documented Adagrad update (the algorithm box of
torch/optim/adagrad.py, class Adagrad, torch 2.13). Mapping: torch's ``lr`` = ``lr``,
``eps`` = ``eps`` (torch's default 1e-10, MXNet's 1e-7), ``weight_decay`` = ``wd``; torch's
``lr_decay`` is fixed at 0 and ``initial_accumulator_value`` at 0 (their defaults; MXNet has
neither: a decaying rate is the scheduler's ``lr``, and the history starts at zero).
"""
from __future__ import annotations

import numpy as np

from ._util import (as_f64, check_convention, f32, guide_gradient, merge_hyper, python_clip,
                    pytorch_gradient)

NAME = "adagrad"
CONVENTIONS = ("mxnet", "guide", "pytorch")
#: torch.optim.Adagrad adds eps outside the square root: its own branch
PYTORCH = "pytorch"
STATE = ("history",)
HYPER = {"eps": 1e-7}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("history",)``."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """The history starts at zero (MXNet's docstring calls ``eps`` its initial value; it is not,
    python/mxnet/optimizer/optimizer.py:1654-1655 at tag 1.9.1)."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, **hyper):
    """One AdaGrad step. ``t`` is unused.

    convention="guide" (guide:94-95), ``G = clip(rs*grad, c) + wd*w``::

        g2_{i+1} = g2_i + G*G                                  (guide:94)
        w_{i+1}  = w_i + lr/sqrt(g2_{i+1} + eps) * (-G)        (guide:95)

    Reading: guide:95 writes the denominator ``sqrt(g^2 + eps)`` without an index; it is read as
    ``g^2_{i+1}``, the accumulator that already includes the current gradient (the only value
    defined at that point of the step, and what MXNet computes). The state slot ``history`` holds
    ``g2``. (guide:90 says AdaGrad "multiplies" the learning rate by the norm; it divides.)

    convention="mxnet" (docs/optimizers/adagrad.md, Python ops: scalars are doubles; only the clip
    bound is rounded to float32 when ``hyper_f32``, as ``nd.clip`` takes float32 bounds; clipping
    whenever ``clip_gradient is not None``, so ``0.0`` clips every gradient to 0)::

        g = clip(grad*rs, c)
        h = h + g*g
        w = w + (g/sqrt(h + eps) + w*wd) * (-lr)

    Differences from the guide: weight decay is added outside the adaptive scaling (times lr, not
    divided by ``sqrt(h + eps)``), and it does not enter the history. The conventions agree when
    ``wd == 0`` (then ``G = g``; the results differ by evaluation order only, a few ulps).

    convention="pytorch" (torch/optim/adagrad.py, class Adagrad, torch 2.13, ``lr_decay=0``,
    ``initial_accumulator_value=0``), with ``g = clip(rs*grad, c) + wd*w``
    (``_util.pytorch_gradient``: rescaling and clipping, which torch does not have, first; then
    torch's coupled L2 weight decay)::

        h = h + g*g
        w = w - lr*g/(sqrt(h) + eps)

    The difference from the guide is where ``eps`` sits: outside the root (``sqrt(h) + eps``), not
    inside (``sqrt(h + eps)``); the difference from MXNet is that and the coupled weight decay
    (which enters the history and is scaled by the adaptive rate). The slot ``history`` holds
    torch's ``sum``. ``hyper_f32`` is ignored.
    """
    convention = check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    h = _hyper(hyper)
    eps = h["eps"]
    w = as_f64(weight)
    gr = as_f64(grad)
    hist = as_f64(state["history"])

    if convention == "guide":
        G = guide_gradient(gr, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        g2 = hist + G * G                               # guide:94
        w_new = w + lr / np.sqrt(g2 + eps) * (-G)       # guide:95, reading g^2 as g^2_{i+1}
        return w_new, {"history": g2}

    if convention == "pytorch":
        g = pytorch_gradient(gr, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        hist_new = hist + g * g                          # torch's state_sum
        w_new = w - lr * g / (np.sqrt(hist_new) + eps)   # eps outside the root
        return w_new, {"history": hist_new}

    if hyper_f32:
        clip_gradient = f32(clip_gradient)
    g = python_clip(gr * rescale_grad, clip_gradient)
    hist_new = hist + g * g
    div = g / np.sqrt(hist_new + eps)
    w_new = w + (div + w * wd) * (-lr)
    return w_new, {"history": hist_new}
