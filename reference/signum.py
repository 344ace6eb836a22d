"""Reference Signum / SignSGD (MXNet registry name ``signum``): the float64 oracle of guide:198-205
and of MXNet 1.9.1's ``signum_update`` / ``signsgd_update`` kernels
(src/operator/optimizer_op-inl.h:2412-2433 / 2344-2356 at tag 1.9.1; docs/optimizers/signum.md).

SignSGD is not a separate optimizer: it is Signum with ``momentum=0`` (no state is kept).

State: ``mom`` (only when ``momentum != 0``, as MXNet's ``create_state``). In the "mxnet" convention
the slot holds MXNet's ``mom``, which is **minus** the exponential moving average of the gradient;
in the "guide" convention it holds the guide's ``v`` (the moving average itself), so
``mom_mxnet == -v_guide`` along the same trajectory (docs/conventions.md, Signum).

PyTorch: torch.optim (torch 2.13) has no Signum/SignSGD optimizer, so this module has no "pytorch"
convention (``PYTORCH = None``; ``convention="pytorch"`` is a ValueError).
"""
from __future__ import annotations

import numpy as np

from ._util import as_f64, check_convention, f32, guide_gradient, kernel_clip, merge_hyper

NAME = "signum"
CONVENTIONS = ("mxnet", "guide")
#: torch.optim has no counterpart
PYTORCH = None
STATE = ("mom",)
HYPER = {"learning_rate": 0.01, "momentum": 0.9, "wd_lh": 0.0}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """``("mom",)`` for Signum (``momentum != 0``), ``()`` for SignSGD (``momentum == 0``)."""
    h = _hyper(hyper)
    return ("mom",) if h["momentum"] != 0 else ()


def init_state(weight, **hyper) -> dict:
    """Zeros for ``mom`` when momentum is on; an empty dict for SignSGD."""
    shape = np.shape(weight)
    return {name: np.zeros(shape, dtype=np.float64) for name in state_slots(**hyper)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, **hyper):
    """One Signum (``momentum != 0``) or SignSGD (``momentum == 0``) update.

    ``t`` is accepted for the common interface and unused. ``learning_rate`` (a HYPER key) is
    accepted and ignored: the step uses ``lr``.

    **"mxnet"** (docs/optimizers/signum.md; kernel optimizer: ``lr, wd, rescale_grad, clip_gradient,
    momentum, wd_lh`` rounded to float32 when ``hyper_f32``; kernel clip gating, so
    ``clip_gradient`` of ``None`` or ``0`` means no clipping). Signum, ``signum_update``, in the
    kernel's expression order::

        mom = (momentum*mom - ((1-momentum)*wd)*w) - (1-momentum)*clip(rs*grad, c)
              # without clipping the last term is ((1-momentum)*rs)*grad
        w   = (1 - lr*wd_lh)*w + lr*sign(mom)

    ``mom`` is minus the moving average of ``clip(rs*grad, c) + wd*w``: weight decay enters the
    average (scaled by ``1-momentum``, no lr), ``wd_lh`` is a separate decoupled decay.
    SignSGD, ``signsgd_update``::

        w = (1 - lr*wd)*w - lr*sign(grad)

    Here ``rescale_grad`` and ``clip_gradient`` have no effect (the kernel takes the sign of the raw
    gradient; a positive rescale cannot change a sign, and MXNet ignores the clip) and wd is
    *decoupled* (times lr, outside the sign). ``wd_lh != 0`` with momentum 0 raises ValueError
    (MXNet 1.9.1 fails with "Cannot find argument 'wd_lh'").

    **"guide"** (guide:200, 204-205), with ``G = clip(rs*grad, c) + wd*w`` (docs/conventions.md,
    "Guide gradient"; clipping whenever ``clip_gradient is not None``)::

        v_{i+1} = gamma*v_i + (1-gamma)*G          (guide:204; state slot "mom" holds v)
        w_{i+1} = (1 - lr*wd_lh)*w_i - lr*sign(v_{i+1})   (guide:205, plus MXNet's wd_lh)
        SignSGD (gamma = 0): w_{i+1} = w_i - lr*sign(G)     (guide:200)

    Readings: guide:202's garbled ``0 < gamma < 1`` is the momentum range; guide:205 has no
    ``wd_lh``, the reference adds MXNet's decoupled ``(1 - lr*wd_lh)`` factor so that the
    constructor keyword has the same meaning in both conventions (it is 0 by default, when the
    line is exactly guide:205). ``wd_lh != 0`` with momentum 0 is refused in both conventions
    (the guide's SignSGD has no such term, and MXNet refuses it).

    Relations (tested): Signum agrees with ``mom = -v`` when ``clip_gradient`` is not 0 (up to
    rounding; a sign of a near-zero average may flip). SignSGD agrees when ``wd = 0``,
    ``rescale_grad > 0`` and ``clip_gradient`` is None or positive (a positive scale or clip
    cannot change a sign); it differs when ``wd != 0`` (the guide couples wd into the sign, MXNet
    decouples it), when ``rescale_grad <= 0`` and when ``clip_gradient = 0`` (the guide's
    gradient is then 0 and the weight does not move).
    """
    check_convention(convention, CONVENTIONS, NAME)
    h = _hyper(hyper)
    momentum, wd_lh = h["momentum"], h["wd_lh"]
    if momentum == 0 and wd_lh != 0:
        raise ValueError("signum: wd_lh requires momentum != 0 (SignSGD has no wd_lh; "
                         "MXNet 1.9.1 raises on it too)")
    w = as_f64(weight)
    g = as_f64(grad)
    use_mom = momentum != 0
    if use_mom:
        mom = as_f64(state["mom"])

    if convention == "mxnet":
        if hyper_f32:
            lr, wd, rescale_grad = f32(lr), f32(wd), f32(rescale_grad)
            clip_gradient, momentum, wd_lh = f32(clip_gradient), f32(momentum), f32(wd_lh)
        if not use_mom:
            # signsgd_update: rescale_grad and clip_gradient are not used
            w_new = (1.0 - lr * wd) * w - lr * np.sign(g)
            return w_new, {}
        one_m = 1.0 - momentum
        if clip_gradient:
            gterm = one_m * kernel_clip(rescale_grad * g, clip_gradient)
        else:
            gterm = (one_m * rescale_grad) * g
        mom_new = (momentum * mom - (one_m * wd) * w) - gterm
        w_new = (1.0 - lr * wd_lh) * w + lr * np.sign(mom_new)
        return w_new, {"mom": mom_new}

    # guide
    G = guide_gradient(g, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
    if not use_mom:
        w_new = w - lr * np.sign(G)                                    # guide:200
        return w_new, {}
    v = mom
    v_new = momentum * v + (1.0 - momentum) * G                        # guide:204
    w_new = (1.0 - lr * wd_lh) * w - lr * np.sign(v_new)              # guide:205
    return w_new, {"mom": v_new}
