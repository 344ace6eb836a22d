"""Reference (float64 oracle) for AdaDelta (Zeiler 2012).

Encodes guide:137-139 (convention "guide") and MXNet 1.9.1's Python-op update (convention
"mxnet", python/mxnet/optimizer/optimizer.py:1801-1823 at tag 1.9.1; docs/optimizers/adadelta.md)
in the interface of ``reference/__init__.py``. See docs/conventions.md,
section "AdaDelta". AdaDelta has no learning rate: ``lr`` is accepted and ignored in the
"mxnet" and "guide" conventions (MXNet accepts one and never reads it).

Convention "pytorch": PyTorch's documented Adadelta update (the algorithm box of
torch/optim/adadelta.py, class Adadelta, torch 2.13), which **does** multiply the step by a
learning rate (torch's default ``lr=1.0``: pass ``lr=1.0`` for torch's default; MXNet's
optimizer-level default rate 0.01 is not torch's). Mapping: torch's ``lr`` = ``lr``, ``rho`` =
``rho``, ``eps`` = ``epsilon`` (torch's default 1e-6, MXNet's 1e-5), ``weight_decay`` = ``wd``.
"""
from __future__ import annotations

import numpy as np

from ._util import (as_f64, check_convention, f32, guide_gradient, merge_hyper, python_clip,
                    pytorch_gradient)

NAME = "adadelta"
CONVENTIONS = ("mxnet", "guide", "pytorch")
#: torch.optim.Adadelta scales the step by lr and couples weight decay: its own branch
PYTORCH = "pytorch"
STATE = ("acc_g", "acc_delta")
HYPER = {"rho": 0.9, "epsilon": 1e-5}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("acc_g", "acc_delta")`` (MXNet's order)."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """Both accumulators start at zero (``E[g^2]_0 = E[dw^2]_0 = 0``)."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, **hyper):
    """One AdaDelta step. ``t`` is unused; ``lr`` is read by convention="pytorch" only.

    convention="guide" (guide:137-139), ``beta = rho``, ``G = clip(rs*grad, c) + wd*w``::

        E[g^2]_{i+1} = beta*E[g^2]_i + (1-beta)*G*G                                  (guide:138)
        w_{i+1}      = w_i + sqrt(E[dw^2]_{i+1} + eps)/sqrt(E[g^2]_{i+1} + eps) * (-G) (guide:139)
        E[dw^2]_{i+2} = beta*E[dw^2]_{i+1} + (1-beta)*(w_{i+1} - w_i)^2               (guide:137)

    Readings: guide:139's numerator ``E[dw^2]`` has no index; it is read as ``E[dw^2]_{i+1}``,
    which guide:137 builds from ``(w_i - w_{i-1})^2``, with ``E[dw^2]_0 = 0`` and
    ``w_{-1} = w_0`` (so ``E[dw^2]_1 = 0``): Zeiler's ``RMS[dx]_{t-1}``, the accumulator of the
    updates *before* the current one. The state slot ``acc_delta`` holds it; guide:137's update
    from the latest weight change is done at the end of the step that made the change (the same
    value, one call earlier, so that the slot layout is MXNet's). ``acc_g`` holds ``E[g^2]``.

    convention="mxnet" (docs/optimizers/adadelta.md; Python ops: scalars are doubles, only the clip
    bound is rounded to float32 when ``hyper_f32``; clipping whenever
    ``clip_gradient is not None``)::

        g         = clip(grad*rs, c)
        acc_g     = rho*acc_g + (1-rho)*g*g
        delta     = sqrt(acc_delta + eps)/sqrt(acc_g + eps)*g
        acc_delta = rho*acc_delta + (1-rho)*delta*delta
        w         = w - (delta + wd*w)

    (``(1-rho)*g*g`` is evaluated left to right, as MXNet's Python expression is.) Differences:
    MXNet's weight decay is decoupled and not scaled by anything (``w -= wd*w``), and
    ``acc_delta`` accumulates ``delta`` only, not the actual weight change. With ``wd == 0`` the
    conventions agree: the weights are computed by the same operations, and ``acc_delta`` differs
    only because ``(w_new - w)`` is ``-delta`` rounded. MXNet also scales the caller's gradient
    in place (a bug, not reproduced: this step is pure).

    convention="pytorch" (torch/optim/adadelta.py, class Adadelta, torch 2.13), with
    ``g = clip(rs*grad, c) + wd*w`` (``_util.pytorch_gradient``: rescaling and clipping, which
    torch does not have, first; then torch's coupled L2 weight decay); ``lr`` **is** used::

        acc_g     = rho*acc_g + (1-rho)*g*g
        delta     = sqrt(acc_delta + eps)/sqrt(acc_g + eps)*g
        acc_delta = rho*acc_delta + (1-rho)*delta*delta
        w         = w - lr*delta

    The slots hold torch's ``square_avg`` (``acc_g``) and ``acc_delta``; eps sits inside both
    roots, as in the other conventions. Differences: from MXNet, the coupled weight decay (in
    ``g``, so it enters ``acc_g`` and the adaptive scaling; MXNet subtracts ``wd*w`` unscaled) and
    the factor ``lr``; from the guide, the factor ``lr`` and ``acc_delta`` accumulating ``delta``
    (not the weight change ``lr*delta``). With ``lr == 1`` and ``wd == 0`` all three conventions
    compute the same weights (up to rounding). ``hyper_f32`` is ignored.
    """
    convention = check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    h = _hyper(hyper)
    rho, eps = h["rho"], h["epsilon"]
    w = as_f64(weight)
    gr = as_f64(grad)
    acc_g = as_f64(state["acc_g"])
    acc_delta = as_f64(state["acc_delta"])

    if convention == "guide":
        beta = rho
        G = guide_gradient(gr, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        Eg2 = beta * acc_g + (1.0 - beta) * G * G                               # guide:138
        w_new = w + np.sqrt(acc_delta + eps) / np.sqrt(Eg2 + eps) * (-G)        # guide:139
        dw = w_new - w
        Edw2 = beta * acc_delta + (1.0 - beta) * dw * dw                        # guide:137
        return w_new, {"acc_g": Eg2, "acc_delta": Edw2}

    if convention == "pytorch":
        g = pytorch_gradient(gr, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        acc_g_new = rho * acc_g + (1.0 - rho) * g * g                     # torch's square_avg
        delta = np.sqrt(acc_delta + eps) / np.sqrt(acc_g_new + eps) * g
        acc_delta_new = rho * acc_delta + (1.0 - rho) * delta * delta     # torch's acc_delta
        w_new = w - lr * delta                                            # lr is used
        return w_new, {"acc_g": acc_g_new, "acc_delta": acc_delta_new}

    if hyper_f32:
        clip_gradient = f32(clip_gradient)
    g = python_clip(gr * rescale_grad, clip_gradient)
    acc_g_new = rho * acc_g + (1.0 - rho) * g * g
    delta = np.sqrt(acc_delta + eps) / np.sqrt(acc_g_new + eps) * g
    acc_delta_new = rho * acc_delta + (1.0 - rho) * delta * delta
    w_new = w - (delta + wd * w)
    return w_new, {"acc_g": acc_g_new, "acc_delta": acc_delta_new}
