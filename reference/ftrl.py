"""Reference FTRL (MXNet registry name ``ftrl``): the float64 oracle of FTRL-Proximal
(McMahan et al. 2013, "Ad click prediction: a view from the trenches", Algorithm 1), guide:229-241,
and of MXNet 1.9.1's ``ftrl_update`` kernel (src/operator/optimizer_op-inl.h:2133-2158 at tag
1.9.1; docs/optimizers/ftrl.md).

State: ``(z, n)``, zeros. ``n`` is the guide's ``eta`` (the running sum of squared gradients),
``z`` the linear coefficient of the FTRL objective. ``reference.argmin`` proves the closed form
below equals the argmin of guide:233 (read with ``grad(w_j)`` and McMahan's ``sigma_j``) rebuilt
from the raw gradient history; see that module for the derivation of the exact objective.

PyTorch: torch.optim (torch 2.13) has no FTRL optimizer, so this module has no "pytorch"
convention (``PYTORCH = None``; ``convention="pytorch"`` is a ValueError).
"""
from __future__ import annotations

import numpy as np

from ._util import as_f64, check_convention, f32, guide_gradient, kernel_clip, merge_hyper

NAME = "ftrl"
CONVENTIONS = ("mxnet", "guide")
#: torch.optim has no counterpart
PYTORCH = None
STATE = ("z", "n")
HYPER = {"lamda1": 0.01, "learning_rate": 0.1, "beta": 1.0}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    _hyper(hyper)
    shape = np.shape(weight)
    return {"z": np.zeros(shape), "n": np.zeros(shape)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, **hyper):
    """One FTRL-Proximal update. ``t`` is accepted for the common interface and unused;
    ``learning_rate`` (a HYPER key) is accepted and ignored: the step uses ``lr``.

    **"mxnet"** (docs/optimizers/ftrl.md; kernel optimizer: ``lr, wd, rescale_grad, clip_gradient,
    lamda1, beta`` rounded to float32 when ``hyper_f32``; kernel clip gating; no wd in the
    gradient: wd is an L2 term in the denominator). In the kernel's expression order::

        g = clip(grad*rs, c)
        z = z + (g - ((sqrt(n + g*g) - sqrt(n))*w)/lr)
        n = n + g*g
        w = ((sign(z)*lamda1 - z)/((beta + sqrt(n))/lr + wd)) * (|z| > lamda1)

    The mask is applied as a selection (0 where ``|z| <= lamda1``). MXNet multiplies by it, which
    is the same wherever the quotient is finite (``x*1 = x``, ``x*0 = 0`` up to the sign of zero),
    but gives NaN (``0/0*0``) where the denominator is 0 -- ``beta = 0``, ``wd = 0`` and no nonzero
    gradient yet -- although the minimiser is then 0. That NaN is not reproduced (a documented
    difference, like Adamax's ``0/0``).

    **"guide"** (guide:239-241), with ``G = clip(rs*grad, c) + wd*w`` and the z-update corrected::

        sigma   = (sqrt(eta_i + G^2) - sqrt(eta_i))/lr
        z_{i+1} = z_i + G - sigma*w_i                                  (guide:239, corrected)
        eta_{i+1} = eta_i + G^2                                        (guide:240)
        w_{i+1} = (|z_{i+1}| > lamda1)
                  * (-lr/(beta + sqrt(eta_{i+1})) * (z_{i+1} - lamda1*sign(z_{i+1})))
                                                                       (guide:241)

    guide:239 as printed, ``z_{i+1} = z_i + (sqrt(eta_i + g^2) - sqrt(eta_i))*w_i/lr``, drops the
    gradient term and has the wrong sign of the proximal term: it is not McMahan's update, MXNet
    does not compute it, and its weights are not the argmin of guide:233 (tested). The reading
    taken is McMahan's ``z += g - sigma*w``, which is what the argmin gives. guide:241's ``lambda``
    is ``lamda1``. In the argmin (guide:233) ``grad(w_i)`` inside ``sum_j`` is read ``grad(w_j)``.

    Relations (tested): the conventions agree when ``wd = 0`` and ``clip_gradient`` is not 0
    (up to rounding; the threshold ``|z| > lamda1`` may resolve differently at a near tie). With
    ``wd != 0`` they differ: MXNet adds the exact L2 term ``wd/2*||w||^2`` to the FTRL objective
    (``+ wd`` in the denominator), the guide convention linearises it into the gradient.
    """
    check_convention(convention, CONVENTIONS, NAME)
    h = _hyper(hyper)
    lamda1, beta = h["lamda1"], h["beta"]
    w = as_f64(weight)
    g = as_f64(grad)
    z = as_f64(state["z"])
    n = as_f64(state["n"])

    if convention == "mxnet":
        if hyper_f32:
            lr, wd, rescale_grad = f32(lr), f32(wd), f32(rescale_grad)
            clip_gradient, lamda1, beta = f32(clip_gradient), f32(lamda1), f32(beta)
        g = kernel_clip(g * rescale_grad, clip_gradient)
        gg = g * g
        z = z + (g - ((np.sqrt(n + gg) - np.sqrt(n)) * w) / lr)
        n = n + gg
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(np.abs(z) > lamda1,
                         (np.sign(z) * lamda1 - z) / ((beta + np.sqrt(n)) / lr + wd), 0.0)
        return w, {"z": z, "n": n}

    G = guide_gradient(g, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
    eta = n
    GG = G * G
    sigma = (np.sqrt(eta + GG) - np.sqrt(eta)) / lr
    z_new = z + G - sigma * w                                           # guide:239 (corrected)
    eta_new = eta + GG                                                  # guide:240
    with np.errstate(divide="ignore", invalid="ignore"):
        w_new = np.where(np.abs(z_new) > lamda1,                        # guide:241
                         -lr / (beta + np.sqrt(eta_new)) * (z_new - lamda1 * np.sign(z_new)), 0.0)
    return w_new, {"z": z_new, "n": eta_new}
