"""Reference (float64 oracle) for NAG, Nesterov accelerated SGD.

Encodes guide:76-77 (convention "guide", run in the stored-point form; ``step_lookahead`` evaluates
the guide's look-ahead gradient exactly as written) and MXNet 1.9.1's ``nag_mom_update`` /
``sgd_update`` kernels (convention "mxnet", src/operator/optimizer_op-inl.h:1061-1083 and 381-398 at
tag 1.9.1; docs/optimizers/nag.md) in the interface of ``reference/__init__.py``. See
docs/conventions.md, section "NAG", and tests/test_proof_nag.py for the proof that the two guide
forms are the same trajectory.

Convention "pytorch": PyTorch's documented SGD update with ``nesterov=True`` (``dampening=0``;
the algorithm box of torch/optim/sgd.py, class SGD, torch 2.13). Mapping: torch's ``lr`` =
``lr``, ``momentum`` = ``momentum``, ``weight_decay`` = ``wd``, ``nesterov=True``; with
``momentum == 0`` torch refuses ``nesterov=True`` and the convention is plain SGD
(``nesterov=False``), as MXNet's NAG falls back to ``sgd_update``.
"""
from __future__ import annotations

import numpy as np

from ._util import (as_f64, check_convention, f32, guide_gradient, kernel_clip, merge_hyper,
                    pytorch_gradient)

NAME = "nag"
CONVENTIONS = ("mxnet", "guide", "pytorch")
#: torch.optim.SGD(nesterov=True) keeps its momentum buffer without the learning rate: own branch
PYTORCH = "pytorch"
STATE = ("mom",)
HYPER = {"momentum": 0.0}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """``("mom",)`` when ``momentum != 0``, else ``()`` (MXNet's ``create_state``,
    python/mxnet/optimizer/optimizer.py:1467-1471)."""
    h = _hyper(hyper)
    return STATE if h["momentum"] != 0.0 else ()


def init_state(weight, **hyper) -> dict:
    """Momentum starts at zero."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, **hyper):
    """One NAG step; ``grad`` is the gradient at the stored ``weight``. ``t`` is unused.

    convention="guide": guide:76-77 read the gradient at the look-ahead point ``w_i + gamma*v_i``.
    As an optimizer step (one gradient, taken at the weight it is given) the guide is run in the
    stored-point form, under the change of variables ``w~_i = w_i + gamma*v_i`` (the weight held
    is ``w~``; the guide's ``w_i`` itself is never stored), with ``G = clip(rs*grad, c) + wd*w~``
    the guide's ``grad(w_i + gamma*v_i)``::

        v_{i+1}  = gamma*v_i + lr*(-G)                       (guide:76)
        w~_{i+1} = w~_i + gamma*v_{i+1} + lr*(-G)            (guide:77 plus the change of variables)

    since ``w~_{i+1} = w_{i+1} + gamma*v_{i+1} = w_i + v_{i+1} + gamma*v_{i+1}
    = w~_i - gamma*v_i + v_{i+1} + gamma*v_{i+1}`` and ``v_{i+1} - gamma*v_i = lr*(-G)``.
    ``gamma`` is ``momentum``; ``mom`` holds ``v``. With ``momentum == 0``: ``w = w + lr*(-G)``.
    :func:`step_lookahead` runs guide:76-77 literally, and tests/test_proof_nag.py proves both
    forms give the same trajectory.

    convention="mxnet" (docs/optimizers/nag.md), every hyperparameter rounded to float32 when
    ``hyper_f32``; clipping only when ``clip_gradient`` is truthy (kernel gating)::

        momentum != 0 (nag_mom_update):
            g     = clip(rs*grad, c)              (rs*grad without clipping)
            m1    = momentum*mom
            w_new = (w - m1) + (momentum+1)*(m1 - lr*(g + wd*w))
            mom   = m1 - lr*(g + wd*w_new)
        momentum == 0 (sgd_update):
            w_new = (1 - lr*wd)*w - lr*clip(rs*grad, c)    ((1 - lr*wd)*w - (lr*rs)*grad without
                                                            clipping: the kernel's order, verified
                                                            bit for bit against MXNet 1.9.1)

    The momentum line reads the **updated** weight in its weight-decay term: MXNet runs the
    kernel in place (``out=weight``), so ``weight[i]`` already holds ``w_new`` there. That is
    what MXNet computes and it is deterministic, so it is kept. With ``wd == 0`` the aliasing has
    no effect and MXNet's step is exactly the guide's stored-point form
    (``w_new = w + momentum^2*mom - (1+momentum)*lr*g``); with ``wd != 0`` the two differ.

    convention="pytorch" (torch/optim/sgd.py, class SGD, ``nesterov=True``, ``dampening=0``,
    torch 2.13), with ``g = clip(rs*grad, c) + wd*w`` (``_util.pytorch_gradient``: rescaling and
    clipping, which torch does not have, first; then torch's coupled L2 weight decay)::

        momentum != 0:  b = momentum*b + g
                        w = w - lr*(g + momentum*b)
        momentum == 0:  w = w - lr*g

    The gradient is the one at the stored weight (torch's, like the kernels', is the stored-point
    form). The slot ``mom`` holds torch's ``momentum_buffer`` ``b``, which excludes the learning
    rate: with a constant ``lr`` it is ``-v_guide/lr`` and the weights are the guide's
    stored-point form (the two are the same trajectory); with a learning rate that changes between
    steps they differ (torch scales the whole accumulated buffer by the current ``lr``). torch
    sets the buffer to ``g`` on the first step; with the zero buffer of :func:`init_state` and
    ``dampening=0`` that is ``momentum*0 + g = g`` exactly. ``hyper_f32`` is ignored.
    """
    convention = check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    h = _hyper(hyper)
    momentum = h["momentum"]
    w = as_f64(weight)
    gr = as_f64(grad)
    has_mom = momentum != 0.0

    if convention == "guide":
        G = guide_gradient(gr, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        if has_mom:
            v = momentum * as_f64(state["mom"]) + lr * (-G)     # guide:76
            w_new = w + momentum * v + lr * (-G)                # guide:77 at w~ = w + gamma*v
            return w_new, {"mom": v}
        return w + lr * (-G), {}

    if convention == "pytorch":
        g = pytorch_gradient(gr, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        if has_mom:
            b = momentum * as_f64(state["mom"]) + g             # torch's momentum_buffer
            return w - lr * (g + momentum * b), {"mom": b}      # Nesterov: g + momentum*b
        return w - lr * g, {}

    if hyper_f32:
        lr, wd, rescale_grad, clip_gradient, momentum = (
            f32(lr), f32(wd), f32(rescale_grad), f32(clip_gradient), f32(momentum))
    if not has_mom:
        if clip_gradient:
            return (1.0 - lr * wd) * w - lr * kernel_clip(rescale_grad * gr, clip_gradient), {}
        return (1.0 - lr * wd) * w - (lr * rescale_grad) * gr, {}   # sgd_update, no clipping
    g = kernel_clip(rescale_grad * gr, clip_gradient)
    m1 = momentum * as_f64(state["mom"])
    w_new = (w - m1) + (momentum + 1.0) * (m1 - lr * (g + wd * w))
    mom_new = m1 - lr * (g + wd * w_new)       # in-place aliasing: wd reads the updated weight
    return w_new, {"mom": mom_new}


def step_lookahead(weight, v, grad_fn, *, lr, momentum, wd=0.0, rescale_grad=1.0,
                   clip_gradient=None):
    """guide:76-77 exactly as written, with the gradient evaluated at the look-ahead point::

        x       = w_i + gamma*v_i
        G       = clip(rs*grad_fn(x), c) + wd*x        (the guide's grad(w_i + gamma*v_i))
        v_{i+1} = gamma*v_i + lr*(-G)                  (guide:76)
        w_{i+1} = w_i + v_{i+1}                        (guide:77)

    ``weight`` is the guide's ``w_i`` (not the look-ahead point), ``v`` its ``v_i``, ``grad_fn`` a
    function returning the raw loss gradient at a point. Returns ``(w_{i+1}, v_{i+1})``.
    Pure and Tracked-compatible (when ``grad_fn`` is).
    """
    w = as_f64(weight)
    v = as_f64(v)
    x = w + momentum * v
    G = guide_gradient(as_f64(grad_fn(x)), x, wd=wd, rescale_grad=rescale_grad,
                       clip_gradient=clip_gradient)
    v_new = momentum * v + lr * (-G)        # guide:76
    w_new = w + v_new                       # guide:77
    return w_new, v_new
