"""Reference RAdam (registry name ``radam``; Liu et al. 2020, "On the Variance of the Adaptive
Learning Rate and Beyond", ICLR 2020, arXiv:1908.03265, Algorithm 2, "Rectified Adam";
docs/optimizers/radam.md).

Two conventions:

* ``"pytorch"`` (the default, since torch ships RAdam): torch.optim.RAdam's documented algorithm
  (the algorithm box of torch/optim/radam.py, class RAdam, torch 2.13,
  ``maximize=False``): the rectified step
  only where ``rho_t > 5``, epsilon added to the root of the uncorrected second moment, the
  weight decay coupled (``g + wd*w``) or, with ``decoupled_weight_decay``, applied to the weight
  as ``w*(1 - lr*wd)`` first. ``PYTORCH = "pytorch"``: a branch of its own.
* ``"paper"``: Algorithm 2 as printed, the rectified step where ``rho_t > 4`` (line 10). The
  paper's adaptive rate ``l_t = sqrt((1 - beta2^t)/v_t)`` (line 11) has no epsilon and is
  infinite where ``v_t = 0``; this convention adds ``epsilon`` to ``sqrt(v_t)`` as the authors'
  code does (LiyuanLucasLiu/RAdam, radam.py: ``denom = exp_avg_sq.sqrt().add_(eps)``), so
  ``epsilon=0`` is line 11 exactly. The paper has no weight decay: ``wd`` enters as torch's.

The two differ in the threshold only: at the steps where ``4 < rho_t <= 5`` the paper takes
the rectified step and torch the momentum step (t = 5 alone for ``beta2`` above about 0.84;
more steps below, and every step for ``0.6 < beta2 <= 2/3``, where only the paper rectifies).

State: ``mean`` (the paper's ``m``, torch's ``exp_avg``, optax's ``mu``) and ``var`` (``v``,
``exp_avg_sq``, ``nu``).
"""
from __future__ import annotations

import numpy as np

from ._util import (as_f64, check_convention, check_form, handed_to, host_double, host_power,
                    merge_hyper, python_clip)
from .error_bound import value

NAME = "radam"
CONVENTIONS = ("pytorch", "paper")
#: torch.optim.RAdam's update is a branch of its own (its threshold differs from the paper's)
PYTORCH = "pytorch"
STATE = ("mean", "var")
#: torch.optim.RAdam's defaults (the paper's betas; epsilon as torch's and the authors' code)
HYPER = {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8,
         "decoupled_weight_decay": False}
#: the threshold on ``rho_t`` above which each convention takes the rectified step
THRESHOLD = {"pytorch": 5.0, "paper": 4.0}
#: known variants, ``step(..., form=...)`` (written out in :func:`step`'s docstring)
FORMS = {
    "lerp": ("pytorch",),
    "eps_corrected": ("pytorch", "paper"),
    "eps_inside_root": ("pytorch", "paper"),
    "no_bias_correction": ("pytorch", "paper"),
}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("mean", "var")``."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """Both moments start at zero (Algorithm 2, line 1)."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def rho(beta2, t):
    """``(rho_inf, rho_t)``: the maximum length of the approximated simple moving average,
    ``2/(1 - beta2) - 1`` (Algorithm 2, line 2), and its length at step ``t``,
    ``rho_inf - 2*t*beta2^t/(1 - beta2^t)`` (line 9), in double precision (``beta2`` a float,
    or a Tracked host scalar whose bound then covers any float64 evaluation)."""
    rho_inf = 2.0 / (1.0 - beta2) - 1.0
    b2t = host_power(beta2, t)
    return rho_inf, rho_inf - 2.0 * t * b2t / (1.0 - b2t)


def rectification(beta2, t, threshold):
    """The variance rectification term ``r_t`` of line 12,
    ``sqrt((rho_t - 4)(rho_t - 2)rho_inf / ((rho_inf - 4)(rho_inf - 2)rho_t))``, where
    ``rho_t > threshold`` (compared by value: a bound run takes the branch of the plain run);
    None where the step is the momentum step of line 15."""
    rho_inf, rho_t = rho(beta2, t)
    if not float(value(rho_t)) > threshold:
        return None
    return np.sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf /
                   ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="pytorch", hyper_f32=True, form=None, **hyper):
    """One RAdam step (Algorithm 2 of Liu et al. 2020). ``learning_rate`` (a HYPER key) is
    accepted and ignored: the step uses ``lr``. ``hyper_f32`` is accepted and ignored (it rounds
    MXNet's kernel parameters; RAdam has no "mxnet" convention).

    With ``g = clip(rescale_grad*grad, clip_gradient)`` (the toolkit's common preprocessing,
    clipping whenever ``clip_gradient`` is not None), then torch's weight decay where ``wd != 0``
    (``g + wd*w``, or with ``decoupled_weight_decay`` ``w = w*(1 - lr*wd)`` first)::

        v = beta2*v + (1 - beta2)*g*g                                        (line 6)
        m = beta1*m + (1 - beta1)*g                                          (line 7)
        m_hat = m/(1 - beta1^t)                                              (line 8)
        rho_t = rho_inf - 2*t*beta2^t/(1 - beta2^t)                          (line 9)
        rho_t > threshold (paper 4, pytorch 5):                              (line 10)
            l = sqrt(1 - beta2^t)/(sqrt(v) + eps)                            (line 11, eps added)
            w = w - lr*m_hat*r_t*l                                           (lines 12-13)
        else:
            w = w - lr*m_hat                                                 (line 15)

    ``form`` (``FORMS``), each changing one line::

        lerp           pytorch: m = m + (1-beta1)*(g - m)   (torch: exp_avg.lerp_(g, 1-beta1),
                       what the kernels' "pytorch" rule computes)
        eps_corrected  l = 1/(sqrt(v/(1 - beta2^t)) + eps)   (epsilon added to the
                       bias-corrected root, as optax.radam adds it)
        eps_inside_root  l = sqrt(1 - beta2^t)/sqrt(v + eps)
        no_bias_correction  m_hat = m and l = 1/(sqrt(v) + eps): neither moment corrected

    (The other threshold is the other convention, which the oracle names.)
    """
    convention = check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    form = check_form(form, FORMS, NAME, convention)
    h = _hyper(hyper)
    beta1, beta2, eps = h["beta1"], h["beta2"], h["epsilon"]
    w = as_f64(weight)
    g = python_clip(rescale_grad * as_f64(grad), clip_gradient)
    m = as_f64(state["mean"])
    v = as_f64(state["var"])
    if wd:
        if h["decoupled_weight_decay"]:
            w = w * (1.0 - lr * wd)
        else:
            g = g + wd * w
    v_new = beta2 * v + (1.0 - beta2) * (g * g)                          # line 6
    if form == "lerp":
        m_new = m + (1.0 - beta1) * (g - m)
    else:
        m_new = beta1 * m + (1.0 - beta1) * g                            # line 7
    # the step's constants, formed on the host in double precision, then handed to the
    # weight's precision (bounded as such in a bound run: rho_t is ill-conditioned as beta2
    # nears 1, and two accurate float64 evaluations of it differ in r_t's 12th digit)
    b1h, b2h = host_double(beta1, w), host_double(beta2, w)
    bc2 = 1.0 - host_power(b2h, t)
    if form == "no_bias_correction":
        m_hat = m_new
    else:
        m_hat = m_new / handed_to(1.0 - host_power(b1h, t), w)          # line 8
    r = rectification(b2h, t, THRESHOLD[convention])                     # lines 9, 10, 12
    if r is None:
        return w - lr * m_hat, {"mean": m_new, "var": v_new}             # line 15
    if form == "eps_corrected":
        adaptive = 1.0 / (np.sqrt(v_new / handed_to(bc2, w)) + eps)
    elif form == "eps_inside_root":
        adaptive = handed_to(np.sqrt(bc2), w) / np.sqrt(v_new + eps)
    elif form == "no_bias_correction":
        adaptive = 1.0 / (np.sqrt(v_new) + eps)
    else:
        adaptive = handed_to(np.sqrt(bc2), w) / (np.sqrt(v_new) + eps)   # line 11
    return (w - lr * m_hat * handed_to(r, w) * adaptive,                 # line 13
            {"mean": m_new, "var": v_new})
