"""Reference AdaBelief (registry name ``adabelief``; Zhuang, Tang, Ding, Tatikonda, Dvornek,
Papademetris and Duncan, "AdaBelief Optimizer: Adapting Stepsizes by the Belief in Observed
Gradients", NeurIPS 2020, arXiv:2010.07468, Algorithm 2; docs/optimizers/adabelief.md).

MXNet 1.9.1 never had AdaBelief and torch.optim (torch 2.13) has none, so the module has one
convention, ``"paper"`` (``PYTORCH = None``): Algorithm 2 as printed by default, with the
options of the authors' PyTorch implementation (``adabelief_pytorch.AdaBelief``,
adabelief-pytorch 0.2.1) as hyperparameters: ``weight_decouple``, ``fixed_decay``, ``rectify``
and ``degenerated_to_sgd`` (the paper has no weight decay and no rectification; the authors'
code turns both on by default since its 0.1.0).

Algorithm 2 differs from Adam in one line: the second moment ``s`` averages the squared
*deviation* of the gradient from its running mean, ``(g_t - m_t)^2``, with this step's mean
``m_t``, and adds ``epsilon`` at every step (so ``s`` holds ``epsilon`` summed with decay);
the update adds ``epsilon`` once more to the root of the bias-corrected ``s``.

State: ``mean`` (the paper's ``m``, the authors' ``exp_avg``, optax's ``mu``) and ``var`` (the
paper's ``s``, the authors' ``exp_avg_var``, optax's ``nu``), both starting at zero.
"""
from __future__ import annotations

import numpy as np

from ._util import (as_f64, check_convention, check_form, formed_in, handed_to, host_double,
                    host_power, merge_hyper, power, python_clip)
from .error_bound import value
from .radam import rho

NAME = "adabelief"
CONVENTIONS = ("paper",)
#: torch.optim has no counterpart
PYTORCH = None
STATE = ("mean", "var")
#: Algorithm 2's defaults (the paper's betas, the authors' epsilon 1e-16); the options of the
#: authors' code, off (their code's defaults turn ``weight_decouple`` and ``rectify`` on)
HYPER = {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-16,
         "weight_decouple": False, "fixed_decay": False, "rectify": False,
         "degenerated_to_sgd": True}
#: the least ``rho_t`` at which the authors' rectified step is taken (inclusive: ``N_sma >= 5``)
RECTIFY_THRESHOLD = 5.0
#: known variants, ``step(..., form=...)`` (written out in :func:`step`'s docstring)
FORMS = {"residual_old_mean": ("paper",), "eps_outside_s": ("paper",),
         "constants_in_dtype": ("paper",)}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("mean", "var")``."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """Both moments start at zero (Algorithm 2: ``m_0 = 0, s_0 = 0``)."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def rectified(beta2, t):
    """The rectification of the authors' code at step ``t`` (adabelief-pytorch 0.2.1,
    ``AdaBelief.step``, forked from RAdam): ``r_t`` of RAdam (Liu et al. 2020, Algorithm 2,
    line 12) where ``rho_t >= 5``, else None (the momentum step, or no step)."""
    rho_inf, rho_t = rho(beta2, t)
    if not float(value(rho_t)) >= RECTIFY_THRESHOLD:
        return None
    return np.sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf /
                   ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="paper", hyper_f32=True, form=None, **hyper):
    """One AdaBelief step (Algorithm 2 of Zhuang et al. 2020). ``learning_rate`` (a HYPER key)
    is accepted and ignored: the step uses ``lr``. ``hyper_f32`` is accepted and ignored (it
    rounds MXNet's kernel parameters; AdaBelief has no "mxnet" convention).

    With ``g = clip(rescale_grad*grad, clip_gradient)`` (the toolkit's common preprocessing),
    then the weight decay where ``wd != 0``: ``g + wd*w``, or with ``weight_decouple``
    ``w = w*(1 - lr*wd)`` first (``w*(1 - wd)`` with ``fixed_decay``), as the authors' code::

        m = beta1*m + (1 - beta1)*g                                    (the m_t line)
        s = beta2*s + (1 - beta2)*(g - m)^2 + eps                      (the s_t line)
        m_hat = m/(1 - beta1^t);  s_hat = s/(1 - beta2^t)              (Bias Correction)
        w = w - lr*m_hat/(sqrt(s_hat) + eps)                           (Update)

    The projection of the update onto the feasible set is the identity (no constraint).
    ``rectify`` (the authors' code, forked from RAdam): with RAdam's ``rho_t`` and ``r_t``,
    where ``rho_t >= 5`` the update is ``w - lr*m_hat*r_t*sqrt(1 - beta2^t)/(sqrt(s) + eps)``
    (the uncorrected ``s``); before, ``w - lr*m_hat`` with ``degenerated_to_sgd``, else the
    weight does not move (the moments do).

    ``form`` (``FORMS``), each changing one line::

        residual_old_mean  s = beta2*s + (1 - beta2)*(g - m_{t-1})^2 + eps  (the deviation
                           from the mean before this step's gradient enters it)
        eps_outside_s      s = beta2*s + (1 - beta2)*(g - m)^2   (epsilon only in the
                           denominator, as Adam adds it)
        constants_in_dtype 1 - beta1^t, 1 - beta2^t formed in the precision of the
                           implementation checked (as optax.adabelief forms them in float32)
    """
    check_convention(convention, CONVENTIONS, NAME)
    form = check_form(form, FORMS, NAME, convention)
    h = _hyper(hyper)
    beta1, beta2, eps = h["beta1"], h["beta2"], h["epsilon"]
    w = as_f64(weight)
    g = python_clip(rescale_grad * as_f64(grad), clip_gradient)
    m = as_f64(state["mean"])
    s = as_f64(state["var"])
    if wd:
        if h["weight_decouple"]:
            w = w * (1.0 - (wd if h["fixed_decay"] else lr * wd))
        else:
            g = g + wd * w
    m_new = beta1 * m + (1.0 - beta1) * g                                # the m_t line
    residual = g - (m if form == "residual_old_mean" else m_new)
    s_new = beta2 * s + (1.0 - beta2) * (residual * residual)            # the s_t line
    if form != "eps_outside_s":
        s_new = s_new + eps
    # the bias corrections, formed on the host in double precision and handed to the weight's
    # precision (as the authors' code and the kernels form them)
    b1h, b2h = host_double(beta1, w), host_double(beta2, w)
    if form == "constants_in_dtype":
        bc1 = 1.0 - power(formed_in(beta1, w), t)
        bc2 = 1.0 - power(formed_in(beta2, w), t)
    else:
        bc1 = handed_to(1.0 - host_power(b1h, t), w)
        bc2 = 1.0 - host_power(b2h, t)
    m_hat = m_new / bc1                                                  # Bias Correction
    state_new = {"mean": m_new, "var": s_new}
    if not h["rectify"]:
        s_hat = s_new / (bc2 if form == "constants_in_dtype" else handed_to(bc2, w))
        return w - lr * m_hat / (np.sqrt(s_hat) + eps), state_new      # Update
    r = rectified(b2h, t)
    if r is not None:
        scale = handed_to(r * np.sqrt(bc2), w)
        return w - lr * m_hat * scale / (np.sqrt(s_new) + eps), state_new
    if h["degenerated_to_sgd"]:
        return w - lr * m_hat, state_new
    return w, state_new
