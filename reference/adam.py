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
"""
from __future__ import annotations

import math

import numpy as np

from ._util import as_f64, check_convention, f32, guide_gradient, kernel_clip, merge_hyper

NAME = "adam"
#: the conventions this module implements
CONVENTIONS = ("mxnet", "guide", "pytorch")
#: torch.optim.Adam is mathematically the guide's Adam: convention="pytorch" runs the guide branch
PYTORCH = "guide"
STATE = ("mean", "var")
HYPER = {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("mean", "var")``."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """Both moments start at zero."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, **hyper):
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
    """
    convention = check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    h = _hyper(hyper)
    beta1, beta2, eps = h["beta1"], h["beta2"], h["epsilon"]
    w = as_f64(weight)
    gr = as_f64(grad)
    m = as_f64(state["mean"])
    v = as_f64(state["var"])

    if convention == "guide":
        G = guide_gradient(gr, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        m_new = beta1 * m + (1.0 - beta1) * G                      # guide:152
        v_new = beta2 * v + (1.0 - beta2) * G * G                  # guide:153
        m_hat = m_new / (1.0 - beta1 ** t)                         # guide:154
        v_hat = v_new / (1.0 - beta2 ** t)                         # guide:155
        w_new = w + lr / (np.sqrt(v_hat) + eps) * (-m_hat)         # guide:156
        return w_new, {"mean": m_new, "var": v_new}

    lr_t = lr * (math.sqrt(1.0 - beta2 ** t) / (1.0 - beta1 ** t))
    if hyper_f32:
        lr_t, wd, rescale_grad, clip_gradient = f32(lr_t), f32(wd), f32(rescale_grad), f32(clip_gradient)
        beta1, beta2, eps = f32(beta1), f32(beta2), f32(eps)
    g = kernel_clip(gr * rescale_grad + w * wd, clip_gradient)
    m_new = beta1 * m + (1.0 - beta1) * g
    v_new = beta2 * v + (1.0 - beta2) * g * g
    w_new = w - lr_t * m_new / (np.sqrt(v_new) + eps)
    return w_new, {"mean": m_new, "var": v_new}
