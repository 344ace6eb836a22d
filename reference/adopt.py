"""Reference ADOPT (registry name ``adopt``; Taniguchi et al. 2024, "ADOPT: Modified Adam Can
Converge with Any beta_2 with the Optimal Rate", NeurIPS 2024, arXiv:2411.02853, Algorithm 2,
"ADOPT with clipping"; docs/optimizers/adopt.md).

MXNet 1.9.1 never had ADOPT and torch.optim (torch 2.13) has no ADOPT optimizer, so the module has
one convention, ``"paper"`` (``PYTORCH = None``). The authors' PyTorch implementation
(``adopt.ADOPT``, the torch-adopt 0.1.0 package) and ``optax.contrib.adopt`` compute the same
update; they differ in rounding (a lerp for the first moment) and in where weight decay enters
(below).

State: ``mean`` (the paper's ``m``, the implementation's ``exp_avg``, optax's ``mu``) and
``var`` (``v``, ``exp_avg_sq``, ``nu``). The first step only initialises ``v`` (Algorithm 2,
line 2: ``v_0 = g_0*g_0``); the weight moves from the second step on.
"""
from __future__ import annotations

import numpy as np

from ._util import as_f64, check_convention, check_form, merge_hyper, python_clip

NAME = "adopt"
CONVENTIONS = ("paper",)
#: torch.optim has no counterpart
PYTORCH = None
STATE = ("mean", "var")
#: the paper's defaults (beta1 0.9, beta2 0.9999, epsilon 1e-6; the clipping on), the authors'
#: implementation's and optax's; ``decouple``: weight decay multiplied by the learning rate and
#: applied to the weight (the implementation's ``decouple=True``), else added to the gradient
HYPER = {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.9999, "epsilon": 1e-6,
         "use_clipping": True, "decouple": False}
#: known variants, ``step(..., form=...)`` (written out in :func:`step`'s docstring)
FORMS = {"var_first": ("paper",), "decay_first_step": ("paper",)}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("mean", "var")``."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """Both moments start at zero; the first step sets ``var`` to ``g*g``."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def clip_value(t):
    """The clipping bound of step ``t`` (1 on the first step, which only initialises ``v``): the
    paper's ``c_s = s^(1/4)`` with ``s = t - 1``, the implementation's ``clip_lambda(step)`` at
    its state step ``t - 1``."""
    return float(t - 1) ** 0.25


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="paper", hyper_f32=True, form=None, **hyper):
    """One ADOPT step (Algorithm 2 of Taniguchi et al. 2024). ``learning_rate`` (a HYPER key) is
    accepted and ignored: the step uses ``lr``. ``hyper_f32`` is accepted and ignored (it rounds
    MXNet's kernel parameters; ADOPT has no "mxnet" convention).

    With ``g = clip(rescale_grad*grad, clip_gradient)`` (the toolkit's common preprocessing,
    clipping whenever ``clip_gradient`` is not None), plus ``wd*w`` unless ``decouple``::

        t = 1:  v = g*g                                                   (line 2; w, m unchanged)
        t > 1:  m = beta1*m + (1 - beta1)*clip(g/max(sqrt(v), eps), c)    (line 5, c = (t-1)^(1/4))
                w = w - lr*m              (decouple: w = w*(1 - lr*wd) first)       (line 6)
                v = beta2*v + (1 - beta2)*g*g                                       (line 7)

    ``use_clipping=False`` drops the clip of line 5 (Algorithm 1, the unclipped ADOPT). The
    paper has no weight decay: ``wd`` is the authors' implementation's ``weight_decay``, added to
    the gradient by default (before the first step's ``v`` too), or with ``decouple`` applied to
    the weight before the update (not on the first step, where the weight does not move).

    ``form`` (``FORMS``): ``"var_first"``, line 7 before line 5, the gradient normalised by a
    second moment that already holds it (Adam's order, the correlation ADOPT removes);
    ``"decay_first_step"``, the decoupled decay applied on the first step too, where the weight
    should not move.
    """
    check_convention(convention, CONVENTIONS, NAME)
    form = check_form(form, FORMS, NAME, convention)
    h = _hyper(hyper)
    beta1, beta2, eps = h["beta1"], h["beta2"], h["epsilon"]
    w = as_f64(weight)
    g = python_clip(rescale_grad * as_f64(grad), clip_gradient)
    m = as_f64(state["mean"])
    v = as_f64(state["var"])
    if wd and not h["decouple"]:
        g = g + wd * w
    if t == 1:
        if form == "decay_first_step" and wd and h["decouple"]:
            w = w * (1.0 - lr * wd)
        return w, {"mean": m, "var": g * g}                              # line 2
    v_new = beta2 * v + (1.0 - beta2) * (g * g)                          # line 7
    normed = g / np.maximum(np.sqrt(v_new if form == "var_first" else v), eps)
    if h["use_clipping"]:
        c = clip_value(t)
        normed = np.clip(normed, -c, c)                                  # line 5's clip
    m_new = beta1 * m + (1.0 - beta1) * normed                           # line 5
    if wd and h["decouple"]:
        w = w * (1.0 - lr * wd)
    w_new = w - lr * m_new                                               # line 6
    return w_new, {"mean": m_new, "var": v_new}
