"""Reference FTML (MXNet registry name ``ftml``): the float64 oracle of Follow the Moving Leader
(Zheng and Kwok, ICML 2017), guide:248-259, and of MXNet 1.9.1's ``ftml_update`` kernel
(src/operator/optimizer_op-inl.h:1205-1223 at tag 1.9.1; docs/optimizers/ftml.md).

State: ``(d, v, z)`` in MXNet's order (``prev_d, prev_v, prev_z``), zeros. ``reference.argmin``
proves the closed form equals the argmin of guide:250 (read with ``grad(w_j)``,
``sigma_j = d_j - beta1*d_{j-1}`` and the discount ``beta1^(i-j)`` on the proximal terms too)
rebuilt from the raw gradient history.

PyTorch: torch.optim (torch 2.13) has no FTML optimizer, so this module has no "pytorch"
convention (``PYTORCH = None``; ``convention="pytorch"`` is a ValueError).
"""
from __future__ import annotations

import numpy as np

from ._util import (as_f64, check_convention, check_form, f32, guide_gradient, kernel_clip,
                    merge_hyper, python_clip)

NAME = "ftml"
CONVENTIONS = ("mxnet", "guide")
#: torch.optim has no counterpart
PYTORCH = None
STATE = ("d", "v", "z")
HYPER = {"beta1": 0.6, "beta2": 0.999, "epsilon": 1e-8}

#: ``step(..., form=...)`` variants (as in reference/adam.py): the two conventions' orders of
#: weight decay and clipping, each written in the other's equations
FORMS = {
    "wd_before_clip": ("guide",),
    "wd_after_clip": ("mxnet",),
}

def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    _hyper(hyper)
    shape = np.shape(weight)
    return {"d": np.zeros(shape), "v": np.zeros(shape), "z": np.zeros(shape)}


def _power(beta, t):
    """``beta**t`` in double (a host-precomputed scalar; MXNet evaluates it inside the kernel in
    the weight's dtype, which the float32 golden-data test models by patching this function)."""
    return pow(beta, t)


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, form=None, **hyper):
    """One FTML update; ``t`` is the per-index update count after incrementing (``i + 1``).

    **"mxnet"** (docs/optimizers/ftml.md; kernel optimizer: ``lr, wd, rescale_grad, clip_gradient,
    beta1, beta2`` rounded to float32 when ``hyper_f32``, ``epsilon`` not (it is a double in the
    kernel's parameter struct); kernel clip gating; wd before clipping). In the kernel's
    expression order, powers computed in double from the rounded betas::

        g   = clip(rs*grad + wd*w, c)
        v   = beta2*v + (1-beta2)*(g*g)
        d_t = ((1 - beta1**t)/lr) * (sqrt(v/(1 - beta2**t)) + eps)
        z   = (beta1*z + (1-beta1)*g) - (d_t - beta1*d)*w
        d   = d_t
        w   = -z/d_t

    **"guide"** (guide:256-259), with ``G = clip(rs*grad, c) + wd*w`` and ``i + 1 = t``::

        v_{i+1} = beta2*v_i + (1-beta2)*G^2                                       guide:256
        d_{i+1} = (1-beta1^(i+1))/lr * (sqrt(v_{i+1}/(1-beta2^(i+1))) + eps)      guide:257
        z_{i+1} = beta1*z_i + (1-beta1)*G - (d_{i+1} - beta1*d_i)*w_i             guide:258
        w_{i+1} = -z_{i+1}/d_{i+1}                                                guide:259

    The guide's update lines need no correction (the API doc's ``d_t`` has unbalanced
    parentheses; the reading is the guide's). Its argmin (guide:250) does: see ``reference.argmin``.

    Relations (tested): the conventions agree when clipping is off (``clip_gradient`` None), and
    when ``wd = 0`` with ``clip_gradient`` not 0. They differ when clipping is active with
    ``wd != 0`` (MXNet clips ``rs*grad + wd*w``, the guide clips ``rs*grad``, then adds ``wd*w``),
    and for ``clip_gradient = 0`` (off in MXNet's kernel gating, clip-to-zero in the guide).

    ``form`` (default None: the equations above) is one known variant of them (``FORMS``)::

        wd_before_clip   guide: G = clip(rs*grad + wd*w, c)      (MXNet's order)
        wd_after_clip    mxnet: g = clip(rs*grad, c) + wd*w      (the guide's order)
    """
    check_convention(convention, CONVENTIONS, NAME)
    form = check_form(form, FORMS, NAME, convention)
    h = _hyper(hyper)
    beta1, beta2, eps = h["beta1"], h["beta2"], h["epsilon"]
    w = as_f64(weight)
    g = as_f64(grad)
    d = as_f64(state["d"])
    v = as_f64(state["v"])
    z = as_f64(state["z"])

    if convention == "mxnet":
        if hyper_f32:
            lr, wd, rescale_grad = f32(lr), f32(wd), f32(rescale_grad)
            clip_gradient, beta1, beta2 = f32(clip_gradient), f32(beta1), f32(beta2)
        if form == "wd_after_clip":
            g = kernel_clip(rescale_grad * g, clip_gradient) + wd * w
        else:
            g = kernel_clip(rescale_grad * g + wd * w, clip_gradient)
        v = beta2 * v + (1.0 - beta2) * (g * g)
        d_t = ((1.0 - _power(beta1, t)) / lr) * (np.sqrt(v / (1.0 - _power(beta2, t))) + eps)
        z = (beta1 * z + (1.0 - beta1) * g) - (d_t - beta1 * d) * w
        w = -z / d_t
        return w, {"d": d_t, "v": v, "z": z}

    if form == "wd_before_clip":
        G = python_clip(rescale_grad * g + wd * w, clip_gradient)
    else:
        G = guide_gradient(g, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
    v_new = beta2 * v + (1.0 - beta2) * (G * G)                                     # guide:256
    d_new = (1.0 - _power(beta1, t)) / lr * (np.sqrt(v_new / (1.0 - _power(beta2, t))) + eps)
    # (guide:257)
    z_new = beta1 * z + (1.0 - beta1) * G - (d_new - beta1 * d) * w                 # guide:258
    w_new = -z_new / d_new                                                          # guide:259
    return w_new, {"d": d_new, "v": v_new, "z": z_new}
