"""Reference (float64 oracle) for AdamW: Adam with decoupled weight decay (Loshchilov and Hutter,
"Decoupled Weight Decay Regularization", ICLR 2019, Algorithm 2).

MXNet 1.9.1 registers no ``adamw`` optimizer in ``mxnet.optimizer``
(``mx.optimizer.create("adamw")`` fails: "Cannot find optimizer adamw"); it has only the operator ``mx.nd.contrib.adamw_update``
(python/mxnet/ndarray/contrib.py:556-563 at tag 1.9.1, the kernel registered in
src/operator/contrib/adamw.cc). The toolkit's ``adamw`` is an optimizer built on that operator:
convention "mxnet" is what one call of the operator computes, with the optimizer's
``rescale_grad``, ``lr`` (scheduled, times ``lr_mult``), ``eta``, ``beta1``, ``beta2``,
``epsilon``, ``wd`` (times ``wd_mult``) and ``clip_gradient`` (``None`` passed as ``-1``).

Convention "pytorch": torch.optim.AdamW (the algorithm box of torch/optim/adamw.py, class AdamW,
torch 2.13, ``amsgrad=False``, ``maximize=False``)
decays the weight first, ``theta = theta*(1 - gamma*lambda)``, then takes the bias-corrected Adam
step ``theta = theta - gamma*m_hat/(sqrt(v_hat) + eps)``. Its decay is multiplied by the learning
rate, the paper's (and the guide convention's) by the schedule multiplier only, so with the same
keywords the two differ: this module has its own "pytorch" branch (``PYTORCH = "pytorch"``).
Mapping: torch's ``lr`` = ``eta*lr`` (torch has no separate schedule multiplier: its schedulers
scale ``lr``), ``betas`` = ``(beta1, beta2)``, ``eps`` = ``epsilon``, ``weight_decay`` = ``wd``;
slots ``mean`` = torch's ``exp_avg``, ``var`` = ``exp_avg_sq``. Torch's update with
``weight_decay = wd`` equals the guide's with ``wd' = lr*wd`` (up to rounding).

AMSGrad (``amsgrad=True``, torch's flag): as in reference/adam.py, a third slot ``max_var``
(torch's ``max_exp_avg_sq``), the running maximum of the uncorrected ``var``, takes ``var``'s
place in the denominator; "guide" and "pytorch" only (MXNet's operator has none).
"""
from __future__ import annotations

import math

import numpy as np

from ._util import (as_f64, check_amsgrad, check_convention, check_form, f32, formed_in, merge_hyper, power,
                    python_clip)

NAME = "adamw"
CONVENTIONS = ("mxnet", "guide", "pytorch")
#: torch.optim.AdamW multiplies its decay by the learning rate: its own branch
PYTORCH = "pytorch"
STATE = ("mean", "var")
#: with ``amsgrad``: the running maximum of ``var`` too
STATE_AMSGRAD = ("mean", "var", "max_var")
HYPER = {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "eta": 1.0,
         "amsgrad": False}
#: ``step(..., form=...)`` variants (as in reference/adam.py)
FORMS = {
    "lerp": ("mxnet", "guide", "pytorch"),
    "constants_in_dtype": ("guide", "pytorch"),
}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """``("mean", "var")``, and ``"max_var"`` with ``amsgrad``."""
    return STATE_AMSGRAD if _hyper(hyper)["amsgrad"] else STATE


def init_state(weight, **hyper) -> dict:
    """Both moments start at zero."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def skips(rescale_grad) -> bool:
    """The operator skips the whole update (weight and moments unchanged) when ``rescale_grad``
    is 0, NaN or infinite (its documentation in ``mx.nd.contrib.adamw_update.__doc__``, verified
    by running it)."""
    return rescale_grad == 0 or not math.isfinite(rescale_grad)


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, form=None, **hyper):
    """One AdamW step. ``t`` (1 on the first step) is used by the bias corrections of the guide
    and pytorch conventions only. ``learning_rate`` is accepted and ignored (``lr`` is the
    effective rate). In every convention ``g = clip(rescale_grad*grad, c)`` (clipping whenever
    ``clip_gradient`` is not None: ``0`` clips to zero), and no weight decay enters ``g``.

    convention="mxnet": one call of ``adamw_update`` (no bias correction; ``eta`` multiplies both
    the Adam step and the decay; every hyperparameter rounded to float32 when ``hyper_f32``;
    nothing changes when ``rescale_grad`` is 0 or not finite)::

        m = beta1*m + (1-beta1)*g
        v = beta2*v + (1-beta2)*(g*g)
        w = w - eta*(lr*m/(sqrt(v) + eps) + wd*w)

    (in this order: verified bit for bit against the operator, float32 and float64).

    convention="guide" (Loshchilov and Hutter 2019, Algorithm 2, the AdamW lines; ``alpha`` =
    ``lr``, ``lambda`` = ``wd``, the schedule multiplier ``eta_t`` = ``eta``)::

        m = beta1*m + (1-beta1)*g ;  v = beta2*v + (1-beta2)*g*g
        m_hat = m/(1 - beta1^t) ;  v_hat = v/(1 - beta2^t)
        w = w - eta*(lr*m_hat/(sqrt(v_hat) + eps) + wd*w)

    The mxnet reading is the guide's without the bias corrections.

    convention="pytorch" (torch.optim.AdamW, ``gamma = eta*lr``)::

        w = w*(1 - gamma*wd)
        m, v as above ;  w = w - gamma*m_hat/(sqrt(v)/sqrt(1 - beta2^t) + eps)

    ``form`` (default None: the equations above) is one known variant of them (``FORMS``)::

        lerp                m = m + (1-beta1)*(g - m)      (torch.optim.AdamW: m.lerp_(g, 1-beta1))
        constants_in_dtype  1 - beta1^t, 1 - beta2^t formed in the precision of the
                            implementation checked (a Tracked weight's), beta^t as t-1 products
    """
    convention = check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    form = check_form(form, FORMS, NAME, convention)
    h = _hyper(hyper)
    beta1, beta2, eps, eta = h["beta1"], h["beta2"], h["epsilon"], h["eta"]
    amsgrad = check_amsgrad(h["amsgrad"], convention, NAME)
    w = as_f64(weight)
    gr = as_f64(grad)
    m = as_f64(state["mean"])
    v = as_f64(state["var"])

    if convention == "mxnet":
        if hyper_f32:
            lr, wd = f32(lr), f32(wd)
            rescale_grad, clip_gradient = f32(rescale_grad), f32(clip_gradient)
            beta1, beta2, eps, eta = f32(beta1), f32(beta2), f32(eps), f32(eta)
        if skips(rescale_grad):
            return w, {"mean": m, "var": v}
        g = python_clip(gr * rescale_grad, clip_gradient)
        m_new = m + (1.0 - beta1) * (g - m) if form == "lerp" else beta1 * m + (1.0 - beta1) * g
        v_new = beta2 * v + (1.0 - beta2) * (g * g)
        w_new = w - eta * (lr * m_new / (np.sqrt(v_new) + eps) + wd * w)
        return w_new, {"mean": m_new, "var": v_new}

    g = python_clip(rescale_grad * gr, clip_gradient)
    if convention == "pytorch":
        gamma = eta * lr
        w = w * (1.0 - gamma * wd)
    m_new = m + (1.0 - beta1) * (g - m) if form == "lerp" else beta1 * m + (1.0 - beta1) * g
    v_new = beta2 * v + (1.0 - beta2) * g * g
    out = {"mean": m_new, "var": v_new}
    if amsgrad:   # the running maximum enters the denominator in var's place
        v_new = out["max_var"] = np.maximum(as_f64(state["max_var"]), v_new)
    if form == "constants_in_dtype":
        bc1 = 1.0 - power(formed_in(beta1, w), t)
        bc2 = 1.0 - power(formed_in(beta2, w), t)
    else:
        bc1, bc2 = 1.0 - beta1 ** t, 1.0 - beta2 ** t
    if convention == "pytorch":
        root_bc2 = np.sqrt(bc2) if form == "constants_in_dtype" else math.sqrt(bc2)
        w_new = w - gamma * (m_new / bc1) / (np.sqrt(v_new) / root_bc2 + eps)
    else:
        w_new = w - eta * (lr * (m_new / bc1) / (np.sqrt(v_new / bc2) + eps) + wd * w)
    return w_new, out
