"""Reference (float64 oracle) for RMSProp, plain (Tieleman and Hinton) and centered (Graves).

Encodes guide:110-111 and guide:121-124 (convention "guide") and MXNet 1.9.1's ``rmsprop_update``
and ``rmspropalex_update`` kernels (convention "mxnet", src/operator/optimizer_op-inl.h:2052-2077
and 1953-1986 at tag 1.9.1; docs/optimizers/rmsprop.md) in the interface of
``reference/__init__.py``. See docs/conventions.md, section "RMSProp".

Convention "pytorch": PyTorch's documented RMSprop update (the algorithm box of
torch/optim/rmsprop.py, class RMSprop, torch 2.13). Mapping: torch's ``lr`` = ``lr``,
``alpha`` = ``gamma1`` (torch's default 0.99, MXNet's 0.9), ``eps`` = ``epsilon``,
``weight_decay`` = ``wd``, ``centered`` = ``centered``, and torch's ``momentum`` = ``gamma2``
when ``centered`` and 0 when not (MXNet's plain RMSProp has no momentum, so torch's
``RMSprop(momentum>0, centered=False)`` has no counterpart here). ``clip_weights`` is not a torch
option; it is applied as in the other conventions.
"""
from __future__ import annotations

import numpy as np

from ._util import (as_f64, check_convention, check_form, clip, f32, guide_gradient, kernel_clip,
                    merge_hyper, python_clip, pytorch_gradient)

NAME = "rmsprop"
CONVENTIONS = ("mxnet", "guide", "pytorch")
#: torch.optim.RMSprop adds eps outside the square root: its own branch
PYTORCH = "pytorch"
STATE = ("n", "g", "delta")
#: MXNet 1.9.1's keyword names and defaults. ``gamma1`` is the guide's beta (the decay of the
#: averages), ``gamma2`` its gamma (the momentum, centered only). The guide's own spellings
#: ``rho``/``momentum`` (guide:128) are a toolkit-level alias; the reference takes MXNet's names.
HYPER = {"learning_rate": 0.001, "gamma1": 0.9, "gamma2": 0.9, "epsilon": 1e-8,
         "centered": False, "clip_weights": None}
#: ``step(..., form=...)`` variants (as in reference/adam.py): the orders of weight decay and
#: clipping, MXNet's in the guide's equations and the reverse (the pytorch convention clips, as
#: the guide, before torch adds its weight decay); and torch's lerp of the centered first moment
#: (``grad_avg.lerp_(grad, 1 - alpha)``, torch/optim/rmsprop.py, torch 2.13)
FORMS = {
    "wd_before_clip": ("guide",),
    "wd_after_clip": ("mxnet",),
    "lerp": ("pytorch",),
}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """``("n",)``, or ``("n", "g", "delta")`` when centered (MXNet's order,
    python/mxnet/optimizer/optimizer.py:1733-1740)."""
    h = _hyper(hyper)
    return STATE if h["centered"] else STATE[:1]


def init_state(weight, **hyper) -> dict:
    """All slots start at zero."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, form=None, **hyper):
    """One RMSProp step. ``t`` is unused; ``learning_rate`` (in HYPER as MXNet's default) is
    accepted and ignored: ``lr`` is the effective rate.

    convention="guide", ``G = clip(rs*grad, c) + wd*w``, ``beta = gamma1``, ``gamma = gamma2``;
    plain (guide:110-111)::

        E[g^2]_{i+1} = beta*E[g^2]_i + (1-beta)*G*G                          (guide:110)
        w_{i+1}      = w_i + lr/sqrt(E[g^2]_{i+1} + eps) * (-G)              (guide:111)

    centered (guide:121-124)::

        E[g]_{i+1}   = beta*E[g]_i + (1-beta)*G                              (guide:121)
        E[g^2]_{i+1} = beta*E[g^2]_i + (1-beta)*G*G                          (guide:122)
        v_{i+1}      = gamma*v_i + lr/sqrt(E[g^2]_{i+1} - E[g]_{i+1}^2 + eps) * (-G)   (guide:123)
        w_{i+1}      = w_i + v_{i+1}                                         (guide:124)

    Reading: guide:123's ``E[g]^2_{i+1}`` is the square of the updated average,
    ``(E[g]_{i+1})^2`` (Graves 2013, eq. 40; what MXNet computes). The slots hold
    ``n = E[g^2]``, ``g = E[g]``, ``delta = v``. ``clip_weights`` is not in the
    guide; it is applied the same way as in MXNet (``w = clip(w, clip_weights)`` at the end of
    the step when ``clip_weights`` is truthy), so that the option means the same in both.

    convention="mxnet" (docs/optimizers/rmsprop.md), every hyperparameter (lr, wd, rescale_grad,
    clip_gradient, gamma1, gamma2, epsilon, clip_weights) rounded to float32 when ``hyper_f32``;
    clipping only when ``clip_gradient`` is truthy; weight decay enters **before** clipping::

        g = clip(rs*grad + wd*w, c)
        plain:     n = (1-gamma1)*(g*g) + gamma1*n
                   w = w - lr*(g/sqrt(n + eps))
        centered:  n     = (1-gamma1)*g*g + gamma1*n
                   gbar  = (1-gamma1)*g + gamma1*gbar
                   delta = gamma2*delta - (lr*g)/sqrt(n - gbar*gbar + eps)
                   w     = w + delta
        if clip_weights: w = clip(w, clip_weights)

    (Products and sums are evaluated left to right as written; note the two kernels differ:
    ``(1-gamma1)*(g*g)`` and ``lr*(g/sqrt(..))`` plain, ``((1-gamma1)*g)*g`` and
    ``(lr*g)/sqrt(..)`` centered. docs/conventions.md writes the centered delta as
    ``lr*(g/sqrt(..))``; the order above is the kernel's, which reproduces MXNet's float32
    results bit for bit where the other does not, tests/data/mxnet/README.md item 5.)

    The equations are the guide's; they agree with it when ``clip_gradient`` is None (then
    ``clip(rs*grad + wd*w)`` and ``clip(rs*grad) + wd*w`` coincide), and when ``wd == 0`` and
    ``clip_gradient != 0`` (``0.0`` means "off" for MXNet, "clip to 0" for the guide).

    convention="pytorch" (torch/optim/rmsprop.py, class RMSprop, torch 2.13; ``alpha = gamma1``,
    torch's ``momentum`` = ``gamma2`` centered, 0 plain), with ``g = clip(rs*grad, c) + wd*w``
    (``_util.pytorch_gradient``: rescaling and clipping, which torch does not have, first; then
    torch's coupled L2 weight decay)::

        n = gamma1*n + (1-gamma1)*g*g
        plain:     w = w - lr*g/(sqrt(n) + eps)
        centered:  gbar  = gamma1*gbar + (1-gamma1)*g
                   delta = gamma2*delta + g/(sqrt(n - gbar*gbar) + eps)
                   w     = w - lr*delta
        if clip_weights: w = clip(w, clip_weights)

    Differences from the guide and MXNet: ``eps`` is added outside the root (``sqrt(v) + eps``,
    both others take ``sqrt(v + eps)``), and, centered, the slot ``delta`` holds torch's
    ``momentum_buffer``, which excludes the learning rate (``-delta_guide/lr`` along a trajectory
    with a constant ``lr``; with a changing ``lr`` the trajectories differ). Slots: ``n`` is
    torch's ``square_avg``, ``g`` its ``grad_avg``. The variance ``n - gbar*gbar`` is clamped at 0
    as in the other branches (torch takes the root of a rounding-negative value: NaN).
    ``gamma2 == 0`` centered is torch's ``momentum=0`` (torch skips the buffer; the weights are
    the same, ``delta`` then holds ``g/(sqrt(..) + eps)``). ``hyper_f32`` is ignored.

    ``form`` (default None: the equations above) is one known variant of them (``FORMS``)::

        wd_before_clip   guide: G = clip(rs*grad + wd*w, c)      (MXNet's order)
        wd_after_clip    mxnet: g = clip(rs*grad, c) + wd*w      (the guide's order)
        lerp             pytorch, centered: gbar = gbar + (1-gamma1)*(g - gbar)
                         (torch.optim.RMSprop: grad_avg.lerp_(grad, 1 - alpha))
    """
    convention = check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    form = check_form(form, FORMS, NAME, convention)
    h = _hyper(hyper)
    gamma1, gamma2, eps = h["gamma1"], h["gamma2"], h["epsilon"]
    centered, clip_weights = h["centered"], h["clip_weights"]
    w = as_f64(weight)
    gr = as_f64(grad)
    n = as_f64(state["n"])
    if centered:
        gbar = as_f64(state["g"])
        delta = as_f64(state["delta"])

    if convention == "guide":
        beta, gamma = gamma1, gamma2
        if form == "wd_before_clip":
            G = python_clip(rescale_grad * gr + wd * w, clip_gradient)
        else:
            G = guide_gradient(gr, w, wd=wd, rescale_grad=rescale_grad,
                               clip_gradient=clip_gradient)
        if not centered:
            n_new = beta * n + (1.0 - beta) * G * G                        # guide:110
            w_new = w + lr / np.sqrt(n_new + eps) * (-G)                   # guide:111
            new_state = {"n": n_new}
        else:
            Eg = beta * gbar + (1.0 - beta) * G                            # guide:121
            n_new = beta * n + (1.0 - beta) * G * G                        # guide:122
            # E[g^2] - E[g]^2 is a variance, >= 0 exactly; rounding can make it negative, so it is
            # clamped at 0 (MXNet takes sqrt of the negative number: NaN; known-differences.md)
            v = gamma * delta + lr / np.sqrt(np.maximum(n_new - Eg * Eg, 0.0) + eps) * (-G)  # guide:123
            w_new = w + v                                                  # guide:124
            new_state = {"n": n_new, "g": Eg, "delta": v}
        if clip_weights:
            w_new = clip(w_new, clip_weights)
        return w_new, new_state

    if convention == "pytorch":
        g = pytorch_gradient(gr, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        n_new = gamma1 * n + (1.0 - gamma1) * g * g                  # torch's square_avg
        if not centered:
            w_new = w - lr * g / (np.sqrt(n_new) + eps)              # eps outside the root
            new_state = {"n": n_new}
        else:
            if form == "lerp":
                gbar_new = gbar + (1.0 - gamma1) * (g - gbar)
            else:
                gbar_new = gamma1 * gbar + (1.0 - gamma1) * g        # torch's grad_avg
            var = np.maximum(n_new - gbar_new * gbar_new, 0.0)       # clamped: see the guide branch
            b = gamma2 * delta + g / (np.sqrt(var) + eps)            # torch's momentum_buffer
            w_new = w - lr * b
            new_state = {"n": n_new, "g": gbar_new, "delta": b}
        if clip_weights:
            w_new = clip(w_new, clip_weights)
        return w_new, new_state

    if hyper_f32:
        lr, wd, rescale_grad, clip_gradient = f32(lr), f32(wd), f32(rescale_grad), f32(clip_gradient)
        gamma1, gamma2, eps, clip_weights = f32(gamma1), f32(gamma2), f32(eps), f32(clip_weights)
    if form == "wd_after_clip":
        g = kernel_clip(rescale_grad * gr, clip_gradient) + wd * w
    else:
        g = kernel_clip(rescale_grad * gr + wd * w, clip_gradient)
    if not centered:
        n_new = (1.0 - gamma1) * (g * g) + gamma1 * n
        w_new = w - lr * (g / np.sqrt(n_new + eps))
        new_state = {"n": n_new}
    else:
        n_new = (1.0 - gamma1) * g * g + gamma1 * n
        gbar_new = (1.0 - gamma1) * g + gamma1 * gbar
        var = np.maximum(n_new - gbar_new * gbar_new, 0.0)   # clamped: see the guide branch
        delta_new = gamma2 * delta - (lr * g) / np.sqrt(var + eps)
        w_new = w + delta_new
        new_state = {"n": n_new, "g": gbar_new, "delta": delta_new}
    if clip_weights:
        w_new = clip(w_new, clip_weights)
    return w_new, new_state
