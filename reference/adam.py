"""Reference (float64 oracle) for Adam (Kingma and Ba).

Encodes guide:152-156 (convention "guide") and MXNet 1.9.1's Python bias correction plus
``adam_update`` kernel (convention "mxnet", python/mxnet/optimizer/optimizer.py:1612-1628 and
src/operator/optimizer_op-inl.h:1292-1314 at tag 1.9.1; docs/optimizers/adam.md) in the interface of
``reference/__init__.py``. See docs/conventions.md, section "Adam".

Convention "pytorch": PyTorch's documented Adam update (the algorithm box of torch/optim/adam.py,
class Adam, torch 2.13, ``amsgrad=False``, ``maximize=False``) is mathematically the guide's:
``m`` and ``v`` as guide:152-153 with torch's coupled L2 weight decay ``g + wd*w`` (the guide
convention's ``G``), bias corrections ``1 - beta^t``, and ``eps`` added to the root of the
bias-corrected ``v`` (torch evaluates ``sqrt(v)/sqrt(1 - beta2^t) + eps``, the guide
``sqrt(v/(1 - beta2^t)) + eps``: equal up to rounding). So ``PYTORCH = "guide"`` and
``step(..., convention="pytorch")`` runs the guide branch exactly. Mapping: torch's ``lr`` =
``lr``, ``betas`` = ``(beta1, beta2)``, ``eps`` = ``epsilon``, ``weight_decay`` = ``wd``; slots
``mean`` = torch's ``exp_avg``, ``var`` = its ``exp_avg_sq``.

AMSGrad (Reddi et al. 2018, "On the Convergence of Adam and Beyond", Algorithm 2; torch's
``amsgrad=True``): ``amsgrad`` (a HYPER key, False by default) keeps a third slot, ``max_var``
(torch's ``max_exp_avg_sq``), the running maximum of the uncorrected ``var``, and the step's
denominator takes it in place of ``var``: ``max_var = max(max_var, var)``, then
``w = w - lr/(sqrt(max_var/(1 - beta2^t)) + eps) * m/(1 - beta1^t)`` (torch's reading: the
maximum of the uncorrected moments, bias-corrected at the current step; the paper's algorithm has
no bias correction). Under "guide" and "pytorch" only: MXNet 1.9.1 has no AMSGrad, so
``convention="mxnet"`` with ``amsgrad=True`` is a ValueError.
"""
from __future__ import annotations

import math

import numpy as np

from ._util import (as_f64, check_amsgrad, check_convention, check_form, f32, f32_any,
                    formed_in, guide_gradient, kernel_clip, merge_hyper, power, python_clip)

NAME = "adam"
CONVENTIONS = ("mxnet", "guide", "pytorch")
#: torch.optim.Adam is mathematically the guide's Adam: convention="pytorch" runs the guide branch
PYTORCH = "guide"
STATE = ("mean", "var")
#: with ``amsgrad``: the running maximum of ``var`` too
STATE_AMSGRAD = ("mean", "var", "max_var")
HYPER = {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8,
         "amsgrad": False}
#: known variants of the same equations, ``step(..., form=...)``: {form: the conventions whose
#: equations it changes} (each is written out in :func:`step`'s docstring). The oracle re-runs a
#: failed case under them to explain the failure (toolkit/oracle/variants.py); the default
#: ``form=None`` is the convention's own equations, unchanged.
FORMS = {
    "lerp": ("mxnet", "guide"),
    "constants_in_dtype": ("mxnet", "guide"),
    "eps_inside_root": ("mxnet", "guide"),
    "eps_uncorrected": ("guide",),
    "eps_corrected": ("mxnet",),
    "wd_before_clip": ("guide",),
    "wd_after_clip": ("mxnet",),
    "no_bias_correction": ("mxnet", "guide"),
}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """``("mean", "var")``, and ``"max_var"`` with ``amsgrad``."""
    return STATE_AMSGRAD if _hyper(hyper)["amsgrad"] else STATE


def init_state(weight, **hyper) -> dict:
    """Both moments start at zero."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, form=None, **hyper):
    """One Adam step; ``t`` (1 on the first step) is the per-index count used by the bias
    corrections. ``learning_rate`` (in HYPER as MXNet's default) is accepted and ignored:
    ``lr`` is the effective rate.

    convention="guide" (guide:152-156), ``G = clip(rs*grad, c) + wd*w``, ``i+1 = t``::

        v_{i+1}      = beta1*v_i + (1-beta1)*G                          (guide:152)
        E[g^2]_{i+1} = beta2*E[g^2]_i + (1-beta2)*G*G                   (guide:153)
        v~_{i+1}     = v_{i+1}/(1 - beta1^t)                            (guide:154)
        E~_{i+1}     = E[g^2]_{i+1}/(1 - beta2^t)                       (guide:155)
        w_{i+1}      = w_i + lr/(sqrt(E~_{i+1}) + eps) * (-v~_{i+1})     (guide:156)

    The slots hold ``mean = v`` and ``var = E[g^2]`` (not bias-corrected).

    convention="mxnet" (docs/optimizers/adam.md): the bias correction is folded into the learning
    rate in Python double precision, from the unrounded lr and betas, exactly as MXNet writes it::

        lr_t = lr * (sqrt(1 - beta2^t)/(1 - beta1^t))      then rounded to float32 (hyper_f32)

    and the kernel runs with lr_t, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon rounded
    to float32 (``hyper_f32``), clipping only when ``clip_gradient`` is truthy, weight decay
    **before** clipping::

        g = clip(grad*rs + w*wd, c)
        m = beta1*m + (1-beta1)*g
        v = beta2*v + (1-beta2)*g*g
        w = w - lr_t*m/(sqrt(v) + eps)

    Relation: eps is added to the uncorrected ``sqrt(v)``, so, with the same ``g``,
    ``lr_t*m/(sqrt(v) + eps) = lr*v~/(sqrt(E~) + eps/sqrt(1 - beta2^t))``: MXNet with ``eps`` is
    the guide with ``eps/sqrt(1 - beta2^t)``, and MXNet with ``eps*sqrt(1 - beta2^t)`` is the
    guide with ``eps`` (both proved in tests/test_reference_conventions_1.py).
    The gradients coincide when clipping is off.

    convention="pytorch": the guide branch, exactly (``PYTORCH = "guide"``; see the module
    docstring).

    ``form`` (default None: the equations above) is one known variant of them (``FORMS``), for
    the oracle's explanations of a failure; each changes one line::

        lerp                m = m + (1-beta1)*(g - m)      (torch.optim.Adam: m.lerp_(g, 1-beta1))
        constants_in_dtype  1 - beta1^t, 1 - beta2^t (and MXNet's lr_t) formed in the precision
                            of the implementation checked (a Tracked weight's), beta^t as t-1
                            products, instead of once in double precision
        eps_inside_root     guide: sqrt(E~ + eps);  mxnet: sqrt(v + eps)
        eps_uncorrected     guide: w = w - lr*sqrt(1-beta2^t)/(1-beta1^t) * m/(sqrt(v) + eps)
                            (eps added before the bias correction, as MXNet's kernel adds it)
        eps_corrected       mxnet: w = w - lr_t*m/(sqrt(v) + eps*sqrt(1-beta2^t))
                            (eps added after the bias correction, as the guide adds it)
        wd_before_clip      guide: G = clip(rs*grad + wd*w, c)   (MXNet's order)
        wd_after_clip       mxnet: g = clip(rs*grad, c) + wd*w   (the guide's order)
        no_bias_correction  guide: v~ = v, E~ = E[g^2];  mxnet: lr_t = lr
    """
    convention = check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    form = check_form(form, FORMS, NAME, convention)
    h = _hyper(hyper)
    beta1, beta2, eps = h["beta1"], h["beta2"], h["epsilon"]
    amsgrad = check_amsgrad(h["amsgrad"], convention, NAME)
    w = as_f64(weight)
    gr = as_f64(grad)
    m = as_f64(state["mean"])
    v = as_f64(state["var"])

    if convention == "guide":
        if form == "wd_before_clip":
            G = python_clip(rescale_grad * gr + wd * w, clip_gradient)
        else:
            G = guide_gradient(gr, w, wd=wd, rescale_grad=rescale_grad,
                               clip_gradient=clip_gradient)
        if form == "lerp":
            m_new = m + (1.0 - beta1) * (G - m)
        else:
            m_new = beta1 * m + (1.0 - beta1) * G                  # guide:152
        v_new = beta2 * v + (1.0 - beta2) * G * G                  # guide:153
        out = {"mean": m_new, "var": v_new}
        if amsgrad:   # the running maximum enters the denominator in var's place
            v_new = out["max_var"] = np.maximum(as_f64(state["max_var"]), v_new)
        if form is None:
            m_hat = m_new / (1.0 - beta1 ** t)                     # guide:154
            v_hat = v_new / (1.0 - beta2 ** t)                     # guide:155
            w_new = w + lr / (np.sqrt(v_hat) + eps) * (-m_hat)     # guide:156
            return w_new, out
        c1, c2 = _corrections(beta1, beta2, t, form, w)
        m_hat, v_hat = m_new / c1, v_new / c2
        if form == "eps_inside_root":
            w_new = w + lr / np.sqrt(v_hat + eps) * (-m_hat)
        elif form == "eps_uncorrected":
            w_new = w - lr * (math.sqrt(c2) / c1) * m_new / (np.sqrt(v_new) + eps)
        else:
            w_new = w + lr / (np.sqrt(v_hat) + eps) * (-m_hat)
        return w_new, out

    if form in (None, "lerp", "eps_inside_root", "wd_after_clip", "eps_corrected"):
        lr_t = lr * (math.sqrt(1.0 - beta2 ** t) / (1.0 - beta1 ** t))
    else:
        c1, c2 = _corrections(beta1, beta2, t, form, w)
        lr_t = lr * (np.sqrt(c2) / c1)
    if form == "eps_corrected":
        eps = eps * math.sqrt(1.0 - beta2 ** t)
    if hyper_f32:
        lr_t, wd = f32_any(lr_t), f32(wd)
        rescale_grad, clip_gradient = f32(rescale_grad), f32(clip_gradient)
        beta1, beta2, eps = f32(beta1), f32(beta2), f32(eps)
    if form == "wd_after_clip":
        g = kernel_clip(gr * rescale_grad, clip_gradient) + w * wd
    else:
        g = kernel_clip(gr * rescale_grad + w * wd, clip_gradient)
    if form == "lerp":
        m_new = m + (1.0 - beta1) * (g - m)
    else:
        m_new = beta1 * m + (1.0 - beta1) * g
    v_new = beta2 * v + (1.0 - beta2) * g * g
    if form == "eps_inside_root":
        w_new = w - lr_t * m_new / np.sqrt(v_new + eps)
    else:
        w_new = w - lr_t * m_new / (np.sqrt(v_new) + eps)
    return w_new, {"mean": m_new, "var": v_new}


def _corrections(beta1, beta2, t, form, like):
    """``(1 - beta1^t, 1 - beta2^t)`` for ``form``: 1 each without bias correction, formed in
    the precision of ``like`` (a Tracked weight) for ``constants_in_dtype``, else in double."""
    if form == "no_bias_correction":
        return 1.0, 1.0
    if form == "constants_in_dtype":
        return (1.0 - power(formed_in(beta1, like), t), 1.0 - power(formed_in(beta2, like), t))
    return 1.0 - beta1 ** t, 1.0 - beta2 ** t
