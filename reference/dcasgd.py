"""Reference DCASGD (MXNet registry name ``dcasgd``): the float64 oracle of delay-compensated
asynchronous SGD, guide:212-216, and of MXNet 1.9.1's DCASGD
(python/mxnet/optimizer/optimizer.py:1408-1429 at tag 1.9.1; docs/optimizers/dcasgd.md).

State: ``("mom", "w_prev")`` in MXNet's order; ``mom`` (zeros) is kept only when
``momentum != 0`` (MXNet's ``create_state`` test), ``w_prev`` starts as a copy of the weight, so
the first compensation term is zero. In both conventions ``w_prev`` is set to the weight before
each update; only the "mxnet" convention reads it.

PyTorch: torch.optim (torch 2.13) has no DCASGD optimizer, so this module has no "pytorch"
convention (``PYTORCH = None``; ``convention="pytorch"`` is a ValueError).
"""
from __future__ import annotations

import numpy as np

from ._util import as_f64, check_convention, f32, guide_gradient, python_clip, merge_hyper
from .error_bound import Tracked

NAME = "dcasgd"
CONVENTIONS = ("mxnet", "guide")
#: torch.optim has no counterpart
PYTORCH = None
STATE = ("mom", "w_prev")
HYPER = {"momentum": 0.0, "lamda": 0.04}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """``("mom", "w_prev")`` with momentum, ``("w_prev",)`` without."""
    h = _hyper(hyper)
    return STATE if h["momentum"] != 0 else ("w_prev",)


def init_state(weight, **hyper) -> dict:
    """``mom`` zeros (with momentum) and ``w_prev`` a float64 copy of the weight."""
    slots = state_slots(**hyper)
    w_prev = weight.copy() if isinstance(weight, Tracked) else np.array(weight, dtype=np.float64)
    state = {"w_prev": w_prev}
    if "mom" in slots:
        state = {"mom": np.zeros(np.shape(weight)), "w_prev": w_prev}
    return state


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, w_grad=None, **hyper):
    """One DCASGD update. ``t`` is accepted for the common interface and unused.

    **"mxnet"** (docs/optimizers/dcasgd.md; Python-op optimizer: only the clip bound is rounded to
    float32 when ``hyper_f32``; Python-op clip gating, ``clip_gradient=0.0`` clips to 0; wd coupled,
    added after clipping). In MXNet's expression order::

        g      = clip(grad*rs, c)
        step   = (-lr)*((g + wd*w) + ((lamda*g)*g)*(w - w_prev))
        w_prev = w                          # the weight before this update
        momentum == 0:  w = w + step
        momentum != 0:  mom = momentum*mom + step ; w = w + mom

    MXNet has no notion of staleness: it compensates with ``w_i := w_prev``, the weight before the
    previous update of this index, i.e. it assumes a delay of exactly one update on every step
    (and none on the first, where ``w_prev`` is the initial weight). The momentum variant is what
    MXNet intends (``mom *= momentum; mom += step``); MXNet 1.9.1 itself crashes on it (it tests
    the truth value of an NDArray), a bug not reproduced.

    **"guide"** (guide:216), with ``G = clip(rs*grad, c) + wd*w`` (docs/conventions.md, "Guide
    gradient", the L2 term at the current weight ``w = w_{i+tau}``, where it is known exactly)::

        w_{i+tau+1} = w_{i+tau} - lr*(G + lamda*G*G*(w_{i+tau} - w_i))

    ``w_i``, the weight at which the (delayed) gradient was evaluated, is the keyword ``w_grad``;
    the default ``None`` means the current weight (no delay), when the compensation vanishes and
    the step is plain SGD. guide:216 has no momentum; with ``momentum != 0`` the reference applies
    the heavy-ball form of guide:57-58 to the step (``mom = momentum*mom + step; w = w + mom``), the
    same form as the "mxnet" convention. The guide's "−" (guide:216) is a Unicode minus.

    Relations (tested): with ``wd = 0`` and ``clip_gradient`` not 0, "mxnet" equals "guide" with
    ``w_grad = w_prev``. With ``wd != 0`` they differ: MXNet's compensation squares the gradient
    without the wd term, the guide's squares ``G``.
    """
    check_convention(convention, CONVENTIONS, NAME)
    h = _hyper(hyper)
    momentum, lamda = h["momentum"], h["lamda"]
    w = as_f64(weight)
    g = as_f64(grad)
    w_prev = as_f64(state["w_prev"])
    use_mom = momentum != 0
    if use_mom:
        mom = as_f64(state["mom"])

    if convention == "mxnet":
        if w_grad is not None:
            raise TypeError("dcasgd: w_grad is a guide-convention input; MXNet compensates "
                            "with the previous weight (state 'w_prev')")
        if hyper_f32:
            clip_gradient = f32(clip_gradient)
        g = python_clip(g * rescale_grad, clip_gradient)
        upd = (-lr) * ((g + wd * w) + ((lamda * g) * g) * (w - w_prev))
    else:
        w_i = w if w_grad is None else as_f64(w_grad)
        G = guide_gradient(g, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        upd = -lr * (G + lamda * G * G * (w - w_i))                    # guide:216

    if use_mom:
        mom_new = momentum * mom + upd
        return w + mom_new, {"mom": mom_new, "w_prev": w}
    return w + upd, {"w_prev": w}
