"""Reference ASGD (registry name ``asgd``; averaged stochastic gradient descent: Polyak and
Juditsky 1992, "Acceleration of Stochastic Approximation by Averaging", with the decreasing step
size of Bottou, "Stochastic Gradient Descent Tricks", 2012, as torch.optim.ASGD documents it;
docs/optimizers/asgd.md).

MXNet 1.9.1 never had ASGD; torch.optim (torch 2.13) ships it, so the module has one convention,
``"pytorch"`` (``PYTORCH = "pytorch"``): the algorithm box of torch/optim/asgd.py, class ASGD.
The weight takes an SGD step with the decreasing step size ``eta_t`` and a decay
``1 - lambd*eta_t``; ``ax`` holds the running average of the weights from step ``t0 + 2`` on
(whole-number ``t0``; up to it, the weight itself). The averaged weights are the method's answer; torch and the toolkit
keep them in the state and train with the plain ones.

State: ``ax`` (torch's ``ax``), starting at zero. The step sizes ``eta_t`` and averaging weights
``mu_t`` are functions of the step, formed on the host:

    eta_1 = lr,  eta_t = lr/(1 + lambd*lr*(t - 1))^alpha
    mu_1 = 1,    mu_t = 1/max(1, t - 1 - t0)

(torch forms ``eta_{t+1}`` and ``mu_{t+1}`` at the end of step ``t``, with that step's ``lr``;
the toolkit with the learning rate of the step that uses them: the two agree while ``lr`` is
constant.)
"""
from __future__ import annotations

import numpy as np

from ._util import (as_f64, check_convention, check_form, host_double, merge_hyper,
                    python_clip, round_f32)
from .error_bound import value

NAME = "asgd"
CONVENTIONS = ("pytorch",)
#: torch.optim.ASGD's update is the one convention
PYTORCH = "pytorch"
STATE = ("ax",)
#: torch.optim.ASGD's defaults
HYPER = {"learning_rate": 1e-2, "lambd": 1e-4, "alpha": 0.75, "t0": 1e6}
#: known variants, ``step(..., form=...)`` (written out in :func:`step`'s docstring)
FORMS = {"scalars_f32": ("pytorch",), "no_decay": ("pytorch",)}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("ax",)``."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """The average starts at zero (torch's ``zeros_like``)."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def schedule(t, lr, lambd, alpha, t0):
    """``(eta_t, mu_t)`` of step ``t`` in float64 (the box's ``eta`` and ``mu``, formed by
    torch at the end of step ``t - 1``)."""
    if t == 1:
        return float(lr), 1.0
    s = float(t - 1)
    return lr / ((1.0 + lambd * lr * s) ** alpha), 1.0 / max(1.0, s - t0)


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="pytorch", hyper_f32=True, form=None, **hyper):
    """One ASGD step, torch.optim.ASGD's. ``learning_rate`` (a HYPER key) is accepted and
    ignored: the step uses ``lr``. ``hyper_f32`` is accepted and ignored.

    With ``g = clip(rescale_grad*grad, clip_gradient) + wd*w`` (torch's coupled weight decay,
    where ``wd != 0``) and ``(eta, mu)`` of :func:`schedule`::

        w = w*(1 - lambd*eta) - eta*g
        ax = ax + (w - ax)*mu    where mu != 1;   ax = w  where mu == 1

    ``form`` (``FORMS``)::

        scalars_f32  eta and mu held in float32 (torch keeps them as tensors of its default
                     dtype, float32, whatever the parameter's: what the kernels compute)
        no_decay     w = w - eta*g (the decay 1 - lambd*eta left out)
    """
    check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    form = check_form(form, FORMS, NAME, convention)
    h = _hyper(hyper)
    eta, mu = schedule(t, lr, h["lambd"], h["alpha"], h["t0"])
    w = as_f64(weight)
    if form == "scalars_f32":  # the values rounded to float32, the rounding in their bound
        eta, mu = round_f32(host_double(eta, w)), round_f32(host_double(mu, w))
    g = python_clip(rescale_grad * as_f64(grad), clip_gradient)
    ax = as_f64(state["ax"])
    if wd:
        g = g + wd * w
    if form != "no_decay":
        w = w * (1.0 - h["lambd"] * eta)
    w_new = w - eta * g
    ax_new = ax + (w_new - ax) * mu if float(value(mu)) != 1.0 else w_new
    return w_new, {"ax": ax_new}
