"""Reference (float64 oracle) for SGD with optional momentum and weight decay.

Encodes guide:35, 43, 52-58 (convention "guide") and MXNet 1.9.1's aggregated ``multi_sgd_update`` /
``multi_sgd_mom_update`` kernels (convention "mxnet", src/operator/optimizer_op-inl.h:224-257 at tag
1.9.1; docs/optimizers/sgd.md) in the interface of ``reference/__init__.py``. See
docs/conventions.md, section "SGD".

Convention "pytorch": PyTorch's documented SGD update (the algorithm box of torch/optim/sgd.py,
class SGD, torch 2.13). Mapping: torch's ``lr`` = ``lr``, ``momentum`` = ``momentum``,
``weight_decay`` = ``wd``, ``dampening`` and ``nesterov`` (HYPER keys, torch's meaning; under
"mxnet" and "guide", which have neither, only their off values 0 and False are taken);
``maximize`` is False (MXNet has none).
"""
from __future__ import annotations

import numpy as np

from ._util import (as_f64, check_convention, f32, guide_gradient, kernel_clip, merge_hyper,
                    pytorch_gradient)

NAME = "sgd"
CONVENTIONS = ("mxnet", "guide", "pytorch")
#: torch.optim.SGD keeps its momentum buffer without the learning rate: its own branch
PYTORCH = "pytorch"
STATE = ("mom",)
HYPER = {"momentum": 0.0, "nesterov": False, "dampening": 0.0}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """``("mom",)`` when ``momentum != 0``, else ``()`` (MXNet keeps no state without momentum)."""
    h = _hyper(hyper)
    return STATE if h["momentum"] != 0.0 else ()


def init_state(weight, **hyper) -> dict:
    """Momentum starts at zero (python/mxnet/optimizer/optimizer.py:595-600 at tag 1.9.1)."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, **hyper):
    """One SGD step. ``t`` is unused (SGD has no step-dependent term).

    convention="guide" (guide:35, 43, 52-58), with ``G = clip(rs*grad, c) + wd*w``
    (``_util.guide_gradient``; guide:43 is where the ``delta*w`` = ``wd*w`` term comes from)::

        momentum != 0:  v_{i+1} = gamma*v_i + lr*(-G)          (guide:57; guide:52 is v_0 = 0)
                        w_{i+1} = w_i + v_{i+1}                  (guide:58)
        momentum == 0:  w_{i+1} = w_i + lr*(-G)                  (guide:35, 43)

    ``gamma`` is ``momentum``; the state slot ``mom`` holds ``v``.

    convention="mxnet" (aggregated kernels, docs/optimizers/sgd.md), every hyperparameter (lr, wd,
    rescale_grad, clip_gradient, momentum) rounded to float32 when ``hyper_f32``; clipping only
    when ``clip_gradient`` is truthy (kernel gating, docs/mxnet-facts.md, 2.1)::

        clipping on:   mom = ((momentum*mom) - (lr*wd)*w) - lr*clip(rs*grad, c)
        clipping off:  mom = ((momentum*mom) - (lr*wd)*w) - (lr*rs)*grad
        w = w + mom

    With ``momentum == 0`` MXNet keeps no state and the same kernel runs with ``mom = 0``, i.e.
    ``w = w + ((0 - (lr*wd)*w) - lr*g)``. Two refinements of docs/conventions.md, both verified
    bit for bit against MXNet 1.9.1 in float64: without clipping the kernel multiplies
    ``(lr*rs)*grad`` (not ``lr*(rs*grad)``), and with momentum 0 it computes the momentum form
    above, not ``(w - (lr*wd)*w) - lr*g`` (which differs by an ulp).

    MXNet's ``mom`` is the guide's ``v`` with the same sign. The two conventions compute the same
    equations when ``clip_gradient != 0`` (``0.0`` is "off" for MXNet, "clip to 0" for the guide);
    the only differences are the evaluation order (a few ulps) and the float32 rounding of the
    hyperparameters. MXNet branches on the unrounded momentum (Python side), so does this.

    convention="pytorch" (torch/optim/sgd.py, class SGD, torch 2.13, its box's ``dampening``
    ``tau`` and ``nesterov``), with ``g = clip(rs*grad, c) + wd*w`` (``_util.pytorch_gradient``:
    torch has no rescale_grad and no clip_gradient; this convention applies them to the gradient
    first, clipping whenever ``clip_gradient`` is not None, then torch's coupled L2 weight
    decay)::

        momentum != 0:  b = g                                   (t == 1)
                        b = momentum*b + (1 - dampening)*g      (t > 1)
                        d = g + momentum*b   (nesterov),  else  d = b
                        w = w - lr*d
        momentum == 0:  w = w - lr*g      (dampening unused; nesterov refused, as torch does)

    The slot ``mom`` holds torch's ``momentum_buffer`` ``b``: it excludes the learning rate and has
    the sign of the gradient, so along a trajectory with a constant ``lr`` it is
    ``-v_guide/lr``, and with a learning rate that changes between steps the two conventions are
    different algorithms (torch applies the current ``lr`` to the whole accumulated buffer, the
    guide and MXNet apply each step's ``lr`` to its own gradient). torch initialises the buffer to
    ``g`` itself on the first step instead of ``momentum*b + (1-dampening)*g``; with
    ``dampening=0`` and the zero buffer of :func:`init_state` that is ``momentum*0 + g = g``
    exactly, so the first step needs no special case. ``hyper_f32`` is ignored (torch's float64
    update uses the double hyperparameters).
    """
    convention = check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    h = _hyper(hyper)
    momentum, nesterov, dampening = h["momentum"], bool(h["nesterov"]), h["dampening"]
    if convention != "pytorch" and (nesterov or dampening != 0.0):
        raise ValueError(f"{NAME}: nesterov=True and dampening != 0 are torch's (convention "
                         f"'pytorch'); convention {convention!r} has neither (Nesterov momentum "
                         "is the 'nag' optimizer)")
    if nesterov and (momentum <= 0.0 or dampening != 0.0):
        raise ValueError(f"{NAME}: Nesterov momentum requires a momentum and zero dampening")
    w = as_f64(weight)
    gr = as_f64(grad)
    has_mom = momentum != 0.0

    if convention == "guide":
        G = guide_gradient(gr, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        if has_mom:
            v = momentum * as_f64(state["mom"]) + lr * (-G)     # guide:57
            w_new = w + v                                       # guide:58
            return w_new, {"mom": v}
        w_new = w + lr * (-G)                                   # guide:35, 43
        return w_new, {}

    if convention == "pytorch":
        g = pytorch_gradient(gr, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        if has_mom:
            if t == 1:                                          # torch's momentum_buffer
                b = g
            else:
                b = momentum * as_f64(state["mom"]) + (1.0 - dampening) * g
            d = g + momentum * b if nesterov else b
            return w - lr * d, {"mom": b}
        return w - lr * g, {}

    if hyper_f32:
        lr, wd, rescale_grad, clip_gradient, momentum = (
            f32(lr), f32(wd), f32(rescale_grad), f32(clip_gradient), f32(momentum))
    lr_wd = lr * wd
    if clip_gradient:
        lr_g = lr * kernel_clip(rescale_grad * gr, clip_gradient)
    else:
        lr_g = (lr * rescale_grad) * gr         # the kernel's order without clipping
    mom = momentum * as_f64(state["mom"]) if has_mom else 0.0
    mom_new = (mom - lr_wd * w) - lr_g          # momentum 0: the kernel's mom is 0
    w_new = w + mom_new
    return w_new, ({"mom": mom_new} if has_mom else {})
