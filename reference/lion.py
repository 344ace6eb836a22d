"""Reference Lion (registry name ``lion``; Chen et al. 2023, "Symbolic Discovery of Optimization
Algorithms", arXiv:2302.06675, Algorithm 2, "Lion with decoupled weight decay"; docs/optimizers/
lion.md).

MXNet 1.9.1 never had Lion and torch.optim (torch 2.13) has no Lion optimizer, so the module has
one convention, ``"paper"`` (``PYTORCH = None``; ``convention="pytorch"`` is a ValueError). The
most used PyTorch implementation, ``lion_pytorch.Lion`` (lion-pytorch 0.2.5), and ``optax.lion``
compute the same update mathematically; they differ in rounding only (docs/conformance.md).

State: ``mean``, the moving average ``m`` of the gradient (lion-pytorch's ``exp_avg``, optax's
``mu``). Hyperparameters: ``beta1`` (the interpolation of the update, the paper's beta_1),
``beta2`` (the momentum's decay, beta_2) and the common ``wd`` (the paper's lambda, decoupled:
multiplied by the learning rate, never added to the gradient).
"""
from __future__ import annotations

import numpy as np

from ._util import as_f64, check_convention, check_form, merge_hyper, python_clip

NAME = "lion"
CONVENTIONS = ("paper",)
#: torch.optim has no counterpart
PYTORCH = None
STATE = ("mean",)
#: the paper's defaults (section 3.2 and its Table 12: beta1 0.9, beta2 0.99), lion-pytorch's and
#: optax's; the learning rate is lion-pytorch's default (the paper's are 3-10x below AdamW's)
HYPER = {"learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.99}
#: known variants of the same update, ``step(..., form=...)`` (written out in :func:`step`'s
#: docstring): mistakes that are easy to make and pass most cases, which the oracle names
FORMS = {
    "momentum_first": ("paper",),
    "wd_coupled": ("paper",),
}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("mean",)``."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """The moving average starts at zero (Algorithm 2, line 2: ``m_0 = 0``)."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="paper", hyper_f32=True, form=None, **hyper):
    """One Lion step (Algorithm 2 of Chen et al. 2023). ``t`` is accepted for the common
    interface and unused (Lion has no bias correction); ``learning_rate`` (a HYPER key) is
    accepted and ignored: the step uses ``lr``. ``hyper_f32`` is accepted and ignored (it rounds
    MXNet's kernel parameters, and Lion has no "mxnet" convention).

    With ``g = clip(rescale_grad*grad, clip_gradient)`` (the toolkit's common preprocessing,
    clipping whenever ``clip_gradient`` is not None; the paper's ``g_t = grad f(theta_{t-1})``,
    Algorithm 2 line 4)::

        c_t     = beta1*m_{t-1} + (1 - beta1)*g_t                    (line 5)
        theta_t = theta_{t-1} - lr*(sign(c_t) + wd*theta_{t-1})     (line 6)
        m_t     = beta2*m_{t-1} + (1 - beta2)*g_t                    (line 7)

    ``sign(0) = 0`` (numpy's, torch's ``sgn_`` and ``jnp.sign``). Line 6 is the paper's
    grouping; lion-pytorch computes ``theta*(1 - lr*wd) - lr*sign(c)`` and optax
    ``theta - lr*(sign(c) + wd*theta)``: the same number in exact arithmetic, so the oracle's
    error bound of this line covers the rounding of both orders.

    ``form`` (default None: the lines above) is one known variant (``FORMS``), for the
    oracle's explanations of a failure; each changes one line::

        momentum_first  m_t = beta2*m_{t-1} + (1-beta2)*g_t first, then
                        c_t = beta1*m_t + (1-beta1)*g_t       (lines 5 and 7 swapped)
        wd_coupled      g_t = g_t + wd*theta_{t-1};  theta_t = theta_{t-1} - lr*sign(c_t)
                        (weight decay as an L2 term inside the sign, as torch's Adam adds it)
    """
    check_convention(convention, CONVENTIONS, NAME)
    form = check_form(form, FORMS, NAME, convention)
    h = _hyper(hyper)
    beta1, beta2 = h["beta1"], h["beta2"]
    w = as_f64(weight)
    g = python_clip(rescale_grad * as_f64(grad), clip_gradient)
    m = as_f64(state["mean"])
    if form == "wd_coupled":
        g = g + wd * w if wd else g
        wd = 0.0
    m_new = beta2 * m + (1.0 - beta2) * g                   # line 7
    c = beta1 * (m_new if form == "momentum_first" else m) + (1.0 - beta1) * g   # line 5
    w_new = w - lr * (np.sign(c) + wd * w)                  # line 6
    return w_new, {"mean": m_new}
