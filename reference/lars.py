"""Reference (float64 oracle) for LARS, layer-wise adaptive rate scaling (MXNet ``lars``; You,
Gitman and Ginsburg, "Large Batch Training of Convolutional Networks", arXiv:1708.03888).

mxnet: MXNet 1.9.1's ``mxnet.optimizer.LARS`` (python/mxnet/optimizer/optimizer.py:797-1053 at
tag 1.9.1; docs/optimizers/lars.md) on dense arrays always takes its aggregated path
(optimizer.py:959-1022): the per-tensor sums of squares of the weight and the raw gradient
(``multi_sum_sq``, float32 results), the trust ratio in float32 (``multi_lars``), then MXNet's
aggregated SGD step (``preloaded_multi_sgd_update`` / ``preloaded_multi_sgd_mom_update``) with
the scaled learning rate. Tensors whose name ends in ``gamma``, ``beta`` or ``bias`` keep the
plain rate (optimizer.py:961-968; here the caller says so with ``layer_lars=False``). With
``momentum_correction`` (default True) the momentum is scaled by ``cur_lr/last_lr``, the ratio of
the scheduled rate of this update call to that of the previous call (optimizer.py:841-864 and
950-954); that optimizer-wide bookkeeping is the caller's business: ``lr_ratio``.

guide: the paper's Algorithm 1 with MXNet's ``eps``: the same trust ratio in float64, then the
guide's SGD momentum step (guide:52-58) with ``lr*trust``; no momentum correction.

PyTorch: torch.optim (torch 2.13) has no LARS (``PYTORCH = None``).
"""
from __future__ import annotations

import numpy as np

from ._util import (as_f64, check_convention, f32, guide_gradient, kernel_clip, merge_hyper,
                    round_f32)
from .error_bound import Tracked, error, ties, value

NAME = "lars"
CONVENTIONS = ("mxnet", "guide")
#: torch.optim has no counterpart
PYTORCH = None
STATE = ("mom",)
HYPER = {"momentum": 0.0, "eta": 0.001, "eps": 0.0, "momentum_correction": True}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """``("mom",)`` with momentum, ``()`` without."""
    h = _hyper(hyper)
    return ("mom",) if h["momentum"] != 0 else ()


def init_state(weight, **hyper) -> dict:
    return {name: np.zeros(np.shape(weight)) for name in state_slots(**hyper)}


def trust_lr(lr, w2, g2, *, eta, eps, wd, rescale_grad):
    """The scaled rate ``lr*eta*|w|/(rs*|g| + wd*|w| + eps)`` from the squared norms ``w2`` and
    ``g2`` of the weight and the raw gradient (``lr`` unchanged when either is 0), in float64."""
    wn, gn = np.sqrt(w2), np.sqrt(g2)
    return ((lr * eta) * wn) / ((rescale_grad * gn + wd * wn) + eps)


def mxnet_trust_lr(lr, w2, g2, *, eta, eps, wd, rescale_grad):
    """``multi_lars`` as MXNet 1.9.1 evaluates it: every operand a float32 (the sums of squares
    rounded to float32 as ``multi_sum_sq`` returns them), the formula of :func:`trust_lr`
    evaluated left to right in float32 (verified against ``mx.nd.multi_lars``, 2000 of 2000
    random cases bit-identical). A Python float."""
    f = np.float32
    w2, g2 = f(w2), f(g2)
    if not (w2 > 0 and g2 > 0):
        return float(f(lr))
    wn, gn = np.sqrt(w2), np.sqrt(g2)
    return float(((f(lr) * f(eta)) * wn) / ((f(rescale_grad) * gn + f(wd) * wn) + f(eps)))


def _scaled_lr(w, g, lr, wd, rescale_grad, eta, eps, convention):
    w2, g2 = np.sum(w * w), np.sum(g * g)
    vw, vg = float(value(w2)), float(value(g2))
    if not (vw > 0 and vg > 0):
        return lr
    exact = trust_lr(lr, w2, g2, eta=eta, eps=eps, wd=wd, rescale_grad=rescale_grad)
    if convention == "guide":
        return exact
    r = mxnet_trust_lr(lr, vw, vg, eta=eta, eps=eps, wd=wd, rescale_grad=rescale_grad)
    if isinstance(exact, Tracked):
        # the float32 evaluation: its distance from the float64 one joins the error bound
        return Tracked(np.float64(r), error(exact) + abs(r - float(value(exact))), ties(exact),
                       u=exact.u, tiny=exact.tiny)
    return r


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, lr_ratio=1.0, layer_lars=True, **hyper):
    """One LARS step; ``t`` is accepted for the common interface and unused. ``lr_ratio`` is
    MXNet's ``cur_lr/last_lr`` (1 without a scheduler, and when ``last_lr`` is 0);
    ``layer_lars=False`` for tensors LARS leaves unscaled (names ending in gamma, beta, bias).

    **"mxnet"**, with ``lr_k = mxnet_trust_lr(lr, |w|^2, |grad|^2)`` when ``layer_lars`` and
    both sums are positive, else ``f32(lr)``; ``mu = momentum*lr_ratio`` if
    ``momentum_correction`` else ``momentum``; ``wd, rescale_grad, clip_gradient, mu`` rounded
    to float32 when ``hyper_f32`` (kernel clip gating: off for None and 0)::

        momentum != 0:  mom = ((mu*mom) - (lr_k*wd)*w) - lr_k*clip(rs*grad, c) ; w = w + mom
        momentum == 0:  w = w + ((0 - (lr_k*wd)*w) - lr_k*clip(rs*grad, c))
        (without clipping the last term is (lr_k*rs)*grad; the products lr_k*wd and lr_k*rs
        are rounded to float32 when hyper_f32, for float64 weights too)

    **"guide"**, with ``lr_k = trust_lr(...)`` in float64 (same gating) and
    ``G = clip(rs*grad, c) + wd*w``::

        v = momentum*v - lr_k*G ; w = w + v          (momentum 0: w = w - lr_k*G)
    """
    check_convention(convention, CONVENTIONS, NAME)
    h = _hyper(hyper)
    momentum, eta, eps = h["momentum"], h["eta"], h["eps"]
    w = as_f64(weight)
    g = as_f64(grad)
    use_mom = momentum != 0
    lr_k = _scaled_lr(w, g, lr, wd, rescale_grad, eta, eps, convention) if layer_lars else lr

    if convention == "guide":
        G = guide_gradient(g, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        if use_mom:
            v = momentum * as_f64(state["mom"]) - lr_k * G                # guide:57
            return w + v, {"mom": v}                                      # guide:58
        return w - lr_k * G, {}                                           # guide:35

    mu = momentum * lr_ratio if h["momentum_correction"] else momentum
    if hyper_f32:
        if not isinstance(lr_k, Tracked):
            lr_k = f32(lr_k)
        wd, rescale_grad = f32(wd), f32(rescale_grad)
        clip_gradient, mu = f32(clip_gradient), f32(mu)
    # the preloaded multi-SGD kernels read lr_k and wd from float32 arrays and form their
    # products in float32, for float64 weights too (verified against the recorded traces)
    lrwd, lrrs = lr_k * wd, lr_k * rescale_grad
    if hyper_f32:
        lrwd, lrrs = round_f32(lrwd), round_f32(lrrs)
    if clip_gradient:
        gstep = lr_k * kernel_clip(rescale_grad * g, clip_gradient)
    else:
        gstep = lrrs * g
    if use_mom:
        mom_new = (mu * as_f64(state["mom"]) - lrwd * w) - gstep
        return w + mom_new, {"mom": mom_new}
    return w + ((0.0 - lrwd * w) - gstep), {}
