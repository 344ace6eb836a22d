"""Reference (float64 oracle) for Adamax (Kingma and Ba, section 7.1).

Encodes guide:165-168 (convention "guide") and MXNet 1.9.1's Python-op update (convention
"mxnet", python/mxnet/optimizer/optimizer.py:1936-1958 at tag 1.9.1; docs/optimizers/adamax.md)
in the interface of ``reference/__init__.py``. See docs/conventions.md,
section "Adamax".

Convention "pytorch": PyTorch's documented Adamax update (the algorithm box of
torch/optim/adamax.py, class Adamax, torch 2.13). Mapping: torch's ``lr`` = ``lr``,
``betas`` = ``(beta1, beta2)``, ``eps`` = ``epsilon`` (``None`` means torch's default 1e-8),
``weight_decay`` = ``wd``.
"""
from __future__ import annotations

import numpy as np

from ._util import (as_f64, check_convention, check_form, f32, formed_in, guide_gradient,
                    merge_hyper, power, python_clip, pytorch_gradient)

NAME = "adamax"
CONVENTIONS = ("mxnet", "guide", "pytorch")
#: torch.optim.Adamax adds eps inside the max: its own branch
PYTORCH = "pytorch"
STATE = ("mean", "u")
#: ``epsilon`` is not an MXNet 1.9.1 keyword (MXNet has no epsilon); ``None`` means "absent" in
#: the mxnet convention and "the guide's epsilon, 1e-8" in the guide convention.
HYPER = {"learning_rate": 0.002, "beta1": 0.9, "beta2": 0.999, "epsilon": None}

#: ``step(..., form=...)`` variants (as in reference/adam.py). torch.optim.Adamax writes its first
#: moment as a lerp (``exp_avg.lerp_(grad, 1 - beta1)``, torch/optim/adamax.py, torch 2.13);
#: optax.adamax forms ``1 - beta1^t`` in the weight's precision (``optax.tree.bias_correction``,
#: optax 0.2.8). MXNet adds weight decay before clipping, the guide after: each order written in
#: the other's equations.
FORMS = {
    "lerp": ("mxnet", "guide", "pytorch"),
    "constants_in_dtype": ("mxnet", "guide", "pytorch"),
    "wd_before_clip": ("guide",),
    "wd_after_clip": ("mxnet",),
}

#: the epsilon the guide convention uses when none is given
GUIDE_EPSILON = 1e-8

#: the epsilon the pytorch convention uses when none is given (torch.optim.Adamax's default)
PYTORCH_EPSILON = 1e-8


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("mean", "u")``."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """Both slots start at zero."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, form=None, **hyper):
    """One Adamax step; ``t`` (1 on the first step) is the per-index count of the bias
    correction. ``learning_rate`` (in HYPER as MXNet's default) is accepted and ignored.

    convention="guide" (guide:165-168), ``G = clip(rs*grad, c) + wd*w``, ``i+1 = t``, ``eps`` is
    ``epsilon`` or 1e-8 when ``epsilon is None``::

        v_{i+1}     = beta1*v_i + (1-beta1)*G                     (guide:165)
        g^inf_{i+1} = max(beta2*g^inf_i, |G|)                     (guide:166)
        v~_{i+1}    = v_{i+1}/(1 - beta1^t)                       (guide:167)
        w_{i+1}     = w_i + lr/(g^inf_{i+1} + eps) * (-v~_{i+1})   (guide:168)

    The slots hold ``mean = v`` and ``u = g^inf``.

    convention="mxnet" (docs/optimizers/adamax.md; Python ops: scalars are doubles, only the clip
    bound is rounded to float32 when ``hyper_f32``; clipping whenever ``clip_gradient is not None``;
    weight decay **before** clipping; **no epsilon**: passing one raises ValueError)::

        lr_t = lr/(1 - beta1^t)
        g    = clip(grad*rs + wd*w, c)
        m    = beta1*m + (1-beta1)*g
        u    = max(beta2*u, |g|)
        w    = w - lr_t*m/u            where u > 0;   w unchanged where u == 0

    Where ``u == 0`` (e.g. a zero gradient on the first step) MXNet computes ``0/0 = NaN``; here
    the element is left unchanged instead (a documented difference: the NaN is a bug). The two
    conventions differ by the epsilon (and by the placement of wd relative to clipping).

    convention="pytorch" (torch/optim/adamax.py, class Adamax, torch 2.13), with
    ``g = clip(rs*grad, c) + wd*w`` (``_util.pytorch_gradient``: rescaling and clipping, which
    torch does not have, first; then torch's coupled L2 weight decay), ``eps`` = ``epsilon`` or
    1e-8 when ``epsilon is None``::

        m = beta1*m + (1-beta1)*g
        u = max(beta2*u, |g| + eps)
        w = w - lr/(1 - beta1^t) * m/u

    The difference from the guide: ``eps`` is added to ``|g|`` inside the max (so it enters the
    state ``u`` and decays with it), not to the denominator; from MXNet: an epsilon at all, and
    the order of weight decay and clipping. The slots hold torch's ``exp_avg`` (``mean``) and
    ``exp_inf`` (``u``). On the first step from zero state the guide's weights and these agree
    (the denominator is ``|g| + eps`` either way; the stored ``u`` differs by ``eps``); they part
    once ``beta2*u`` wins the max. ``hyper_f32`` is ignored.

    ``form`` (default None: the equations above) is one known variant of them (``FORMS``; the
    first two in every convention)::

        lerp                m = m + (1-beta1)*(g - m)   (torch.optim.Adamax: exp_avg.lerp_)
        constants_in_dtype  1 - beta1^t formed in the precision of the implementation checked
                            (a Tracked weight's), beta1^t as t-1 products, instead of once in
                            double precision (optax.adamax)
        wd_before_clip      guide: G = clip(rs*grad + wd*w, c)     (MXNet's order)
        wd_after_clip       mxnet: g = clip(grad*rs, c) + wd*w     (the guide's order)
    """
    convention = check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    form = check_form(form, FORMS, NAME, convention)
    h = _hyper(hyper)
    beta1, beta2, epsilon = h["beta1"], h["beta2"], h["epsilon"]
    w = as_f64(weight)
    gr = as_f64(grad)
    m = as_f64(state["mean"])
    u = as_f64(state["u"])

    if convention == "guide":
        eps = GUIDE_EPSILON if epsilon is None else epsilon
        if form == "wd_before_clip":
            G = python_clip(rescale_grad * gr + wd * w, clip_gradient)
        else:
            G = guide_gradient(gr, w, wd=wd, rescale_grad=rescale_grad,
                               clip_gradient=clip_gradient)
        v_new = _first_moment(m, G, beta1, form)             # guide:165
        g_inf = np.maximum(beta2 * u, np.abs(G))             # guide:166
        v_hat = v_new / _correction(beta1, t, form, w)       # guide:167
        w_new = w + lr / (g_inf + eps) * (-v_hat)            # guide:168
        return w_new, {"mean": v_new, "u": g_inf}

    if convention == "pytorch":
        eps = PYTORCH_EPSILON if epsilon is None else epsilon
        g = pytorch_gradient(gr, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        m_new = _first_moment(m, g, beta1, form)             # torch's exp_avg
        u_new = np.maximum(beta2 * u, np.abs(g) + eps)       # torch's exp_inf: eps inside the max
        w_new = w - lr / _correction(beta1, t, form, w) * m_new / u_new
        return w_new, {"mean": m_new, "u": u_new}

    if epsilon is not None:
        raise ValueError("adamax: MXNet 1.9.1's Adamax has no epsilon; pass epsilon=None in the "
                         "mxnet convention (the guide convention takes one)")
    if hyper_f32:
        clip_gradient = f32(clip_gradient)
    lr_t = lr / _correction(beta1, t, form, w)
    if form == "wd_after_clip":
        g = python_clip(gr * rescale_grad, clip_gradient) + wd * w
    else:
        g = python_clip(gr * rescale_grad + wd * w, clip_gradient)
    m_new = _first_moment(m, g, beta1, form)
    u_new = np.maximum(beta2 * u, np.abs(g))
    pos = u_new > 0.0
    u_safe = np.where(pos, u_new, 1.0)
    w_new = np.where(pos, w - lr_t * m_new / u_safe, w)   # u == 0: unchanged (MXNet: NaN)
    return w_new, {"mean": m_new, "u": u_new}


def _first_moment(m, g, beta1, form):
    """``beta1*m + (1-beta1)*g``, or its lerp form ``m + (1-beta1)*(g - m)``."""
    if form == "lerp":
        return m + (1.0 - beta1) * (g - m)
    return beta1 * m + (1.0 - beta1) * g


def _correction(beta1, t, form, like):
    """``1 - beta1^t``: in double precision, or for ``constants_in_dtype`` formed in the
    precision of ``like`` (a Tracked weight), ``beta1^t`` as t-1 products."""
    if form == "constants_in_dtype":
        return 1.0 - power(formed_in(beta1, like), t)
    return 1.0 - beta1 ** t
