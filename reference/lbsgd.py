"""Reference LBSGD (MXNet registry name ``lbsgd``): the float64 oracle of large-batch SGD with
warmup or LARS learning-rate multipliers, as MXNet 1.9.1 computes it
(python/mxnet/optimizer/optimizer.py:1205-1246 at tag 1.9.1; docs/optimizers/lbsgd.md) and as
the guide describes it (its LBSGD section, quoted in docs/conventions.md: "the same parameter
update steps as the SGD optimizer").

State: ``mom`` (zeros, only when ``momentum != 0``; MXNet's ``create_state``), plus the per-index
large-batch bookkeeping MXNet keeps on the optimizer object: ``cum`` (float64 zeros, the
accumulated raw gradient) and ``ncum`` (a Python int, the call counter, starting at
``begin_epoch*updates_per_epoch``).

Learning-rate timing: MXNet's LBSGD reads its learning rate *before* incrementing the update
count (python/mxnet/optimizer/optimizer.py:1209-1211; docs/mxnet-facts.md, 1.3), so a scheduler
sees the previous count. That is the caller's business:
the ``lr`` passed to :func:`step` must be the rate MXNet reads for this call.

PyTorch: torch.optim (torch 2.13) has no LBSGD (or LARS) optimizer, so this module has no "pytorch"
convention (``PYTORCH = None``; ``convention="pytorch"`` is a ValueError).
"""
from __future__ import annotations

import math

import numpy as np

from ._util import (as_f64, check_convention, f32, guide_gradient, kernel_clip, merge_hyper,
                    round_f32)

NAME = "lbsgd"
CONVENTIONS = ("mxnet", "guide")
#: torch.optim has no counterpart
PYTORCH = None
STATE = ("mom",)
HYPER = {"momentum": 0.0, "warmup_strategy": "linear", "warmup_epochs": 5, "batch_scale": 1,
         "updates_per_epoch": 32, "begin_epoch": 0, "num_epochs": 60}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """``("mom",)`` with momentum, ``()`` without (``cum`` and ``ncum`` are bookkeeping, always
    present in the state dict)."""
    h = _hyper(hyper)
    return ("mom",) if h["momentum"] != 0 else ()


def init_state(weight, **hyper) -> dict:
    h = _hyper(hyper)
    shape = np.shape(weight)
    state = {name: np.zeros(shape) for name in state_slots(**hyper)}
    state["cum"] = np.zeros(shape, dtype=np.float64)
    state["ncum"] = int(h["begin_epoch"] * h["updates_per_epoch"])
    return state


def lbmult(nup, *, warmup_strategy, warmup_epochs, updates_per_epoch, batch_scale):
    """MXNet's warmup multiplier ``_get_lbmult(nup)`` (a Python float).

    With ``nwup = warmup_epochs*updates_per_epoch`` and ``M = batch_scale``: ``M`` if
    ``nup >= nwup``; else 1 if ``nwup <= 1``; else 'linear' ``1 + (M-1)*nup/nwup``, 'power2'
    ``1 + (M-1)*nup^2/nwup^2``, 'sqrt' ``1 + (M-1)*sqrt(nup/nwup)``, any other strategy 1.
    Evaluated in MXNet's order.
    """
    nwup = warmup_epochs * updates_per_epoch
    maxmult = float(batch_scale)
    if nup >= nwup:
        return maxmult
    if nwup <= 1:
        return 1.0
    if warmup_strategy == "linear":
        return 1.0 + (maxmult - 1) * nup / nwup
    if warmup_strategy == "power2":
        return 1.0 + (maxmult - 1) * (nup * nup) / (nwup * nwup)
    if warmup_strategy == "sqrt":
        return 1.0 + (maxmult - 1) * math.sqrt(float(nup) / nwup)
    return 1.0


def lars_mult(weight, grad_mean, wd):
    """MXNet's ``_get_lars``: ``clip(sqrt(|w|^2/(|g|^2 + wd*|w|^2 + 1e-18)), 0.01, 100)`` with
    whole-tensor squared norms (``np.sum``, so it runs on Tracked inputs, and returns a 0-d value).
    ``grad_mean`` is the accumulated mean gradient, neither rescaled nor clipped."""
    w2 = np.sum(weight * weight)
    g2 = np.sum(grad_mean * grad_mean)
    return np.clip(np.sqrt(w2 / (g2 + wd * w2 + 1e-18)), 0.01, 100.0)


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, **hyper):
    """One LBSGD call. ``t`` is accepted for the common interface and unused: the warmup uses
    the call counter ``ncum``. ``lr`` is the rate MXNet reads for this call (before its count is
    incremented; see the module docstring). ``num_epochs`` is accepted and unused (as in MXNet).

    **"mxnet"** (docs/optimizers/lbsgd.md; kernel optimizer: the kernel's ``lr`` (= ``lr*mult``,
    rounded after the product), ``wd, rescale_grad, clip_gradient, momentum`` rounded to float32
    when ``hyper_f32``; ``mult`` itself is a double computed on the Python side from the unrounded
    ``wd``; kernel clip gating)::

        cum = cum + grad ; ncum = ncum + 1
        if ncum % batch_scale == 0:
            gm   = cum/batch_scale
            mult = lars_mult(w, gm, wd) if warmup_strategy == 'lars' else lbmult(ncum)
            lr   = lr*mult
            momentum != 0 (sgd_mom_update):
                mom = (momentum*mom - (lr*wd)*w) - lr*clip(rs*gm, c) ; w = w + mom
            momentum == 0 (sgd_update):
                w = (1 - lr*wd)*w - lr*clip(rs*gm, c)
            (without clipping the kernels compute the last term as (lr*rs)*gm)
            cum = 0                                   # ncum is not reset
        else: nothing changes (MXNet calls sgd_update with lr = 0)

    Differences from MXNet: MXNet's first accumulated gradient aliases the caller's buffer (a bug,
    not reproduced: ``cum`` is a copy). On a non-update call with a non-finite gradient MXNet's
    ``w - 0*grad`` would give NaN; here the weight is returned unchanged.

    **"guide"** (the guide's LBSGD section, quoted in docs/conventions.md: LBSGD "performs the same
    parameter update steps as the SGD optimizer"), with ``G = clip(rs*grad, c) + wd*w``: every call
    is a guide SGD step (guide:35, 52-58) with the learning rate ``lr*mult``, ``mult`` from the same
    strategies evaluated at the call count (``ncum = ncum + 1`` first; 'lars' on this call's raw
    gradient); no accumulation (``cum`` stays zero)::

        v = momentum*v - (lr*mult)*G ; w = w + v          (momentum 0: w = w - (lr*mult)*G)

    Relations (tested): the conventions agree when ``batch_scale = 1`` and the strategy is not
    'lars' (then ``mult = 1``) and ``clip_gradient`` is not 0; they differ with ``batch_scale > 1``
    (accumulation and warmup) and with 'lars'.
    """
    check_convention(convention, CONVENTIONS, NAME)
    h = _hyper(hyper)
    momentum, bs, strategy = h["momentum"], h["batch_scale"], h["warmup_strategy"]
    w = as_f64(weight)
    g = as_f64(grad)
    cum = as_f64(state["cum"])
    ncum = int(state["ncum"]) + 1
    use_mom = momentum != 0
    if use_mom:
        mom = as_f64(state["mom"])

    def mult_at(gmean):
        if strategy == "lars":
            return lars_mult(w, gmean, wd)
        return lbmult(ncum, warmup_strategy=strategy, warmup_epochs=h["warmup_epochs"],
                      updates_per_epoch=h["updates_per_epoch"], batch_scale=bs)

    if convention == "guide":
        lr_t = lr * mult_at(g)
        G = guide_gradient(g, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        new = {"cum": cum, "ncum": ncum}
        if use_mom:
            v = momentum * mom - lr_t * G                                 # guide:57
            new["mom"] = v
            return w + v, new                                             # guide:58
        return w - lr_t * G, new                                          # guide:35

    cum = cum + g
    if ncum % bs != 0:
        new = {"cum": cum, "ncum": ncum}
        if use_mom:
            new["mom"] = mom
        return w, new

    gm = cum / bs
    lr_k = lr * mult_at(gm)
    if hyper_f32:
        lr_k = round_f32(lr_k, f32)  # this module's f32, as tests may replace it
        wd, rescale_grad = f32(wd), f32(rescale_grad)
        clip_gradient, momentum = f32(clip_gradient), f32(momentum)
    if clip_gradient:
        gstep = lr_k * kernel_clip(rescale_grad * gm, clip_gradient)
    else:
        gstep = (lr_k * rescale_grad) * gm
    new = {"cum": np.zeros(np.shape(w)), "ncum": ncum}
    if use_mom:
        mom_new = (momentum * mom - (lr_k * wd) * w) - gstep
        new["mom"] = mom_new
        return w + mom_new, new
    return (1.0 - lr_k * wd) * w - gstep, new
