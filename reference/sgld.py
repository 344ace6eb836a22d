"""Reference SGLD (MXNet registry name ``sgld``): the float64 oracle of stochastic gradient
Langevin dynamics, guide:272-278, and of MXNet 1.9.1's SGLD
(python/mxnet/optimizer/optimizer.py:1524-1536 at tag 1.9.1; docs/optimizers/sgld.md).

SGLD keeps no state. Its noise is an input: either an explicit standard-normal array, or the
reproducible counter-based draw ``reference.noise.normal(seed, stream, t, size)`` keyed by the
seed, the stream (the parameter index) and the per-index step ``t``, which every backend
implements, so the same seed gives the same trajectory everywhere.

PyTorch: torch.optim (torch 2.13) has no SGLD optimizer, so this module has no "pytorch"
convention (``PYTORCH = None``; ``convention="pytorch"`` is a ValueError).
"""
from __future__ import annotations

import math

import numpy as np

from . import noise as _noise
from ._util import as_f64, check_convention, f32, guide_gradient, python_clip, merge_hyper

NAME = "sgld"
CONVENTIONS = ("mxnet", "guide")
#: torch.optim has no counterpart
PYTORCH = None
STATE = ()
HYPER = {}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    _hyper(hyper)
    return ()


def init_state(weight, **hyper) -> dict:
    _hyper(hyper)
    return {}


def standard_noise(weight_shape, *, seed, stream, t):
    """The standard-normal draw of one step: ``noise.normal(seed, stream, t, size)`` in C order,
    reshaped to the weight's shape."""
    size = int(np.prod(weight_shape, dtype=np.int64))
    return _noise.normal(seed, stream, t, size).reshape(weight_shape)


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, noise=None, seed=0, stream=0, **hyper):
    """One SGLD update.

    ``noise`` is a standard-normal array of the weight's shape (``z`` below). If it is None, it is
    ``reference.noise.normal(seed, stream, t, weight.size)`` reshaped to the weight's shape
    (``stream`` is the parameter index, ``t`` the per-index update count after incrementing).
    The injected noise is ``sqrt(lr)*z``: variance ``lr``.

    **"mxnet"** (docs/optimizers/sgld.md; Python-op optimizer: only the clip bound is rounded to
    float32 when ``hyper_f32``; Python-op clip gating, ``clip_gradient=0.0`` clips to 0; wd coupled
    after clipping, times lr/2). In MXNet's expression order::

        g = clip(grad*rs, c)
        w = w + ((-lr)/2)*(g + wd*w)
        w = w + sqrt(lr)*z

    MXNet draws ``z*sqrt(lr)`` from its global generator (``normal(0, sqrt(lr))``); here the draw
    is reproducible instead (a documented difference: the same distribution, not MXNet's numbers).

    **"guide"** (guide:276-278), with ``G = clip(rs*grad, c) + wd*w``::

        w_{i+1} = w_i + lr/2 * -G + eta_{i+1},   eta_{i+1} = sqrt(lr)*z ~ N(0, lr)

    Readings: the garbled ``N(0, lr{i+1})`` of guide:278 is a variance ("a zero centered gaussian
    with variance lr"), so the standard deviation is ``sqrt(lr)``, as MXNet draws it. ``lr_{i+1}``
    is the effective ``lr`` of this step (guide:272's "the learning rate decreases to zero" is up to
    a scheduler; SGLD itself does not decay it). The guide cites Patterson and Teh (SGRLD); the
    update is the plain SGLD of Welling and Teh.

    The two conventions agree (bit for bit up to the float32 clip bound).
    """
    check_convention(convention, CONVENTIONS, NAME)
    _hyper(hyper)
    w = as_f64(weight)
    g = as_f64(grad)
    shape = np.shape(w)
    if noise is None:
        z = standard_noise(shape, seed=seed, stream=stream, t=t)
    else:
        z = as_f64(noise)
        if np.shape(z) != shape:
            raise ValueError(f"sgld: noise has shape {np.shape(z)}, expected the weight's "
                             f"shape {shape}")
    sd = math.sqrt(lr)

    if convention == "mxnet":
        if hyper_f32:
            clip_gradient = f32(clip_gradient)
        g = python_clip(g * rescale_grad, clip_gradient)
        w = w + ((-lr) / 2) * (g + wd * w)
        w = w + sd * z
        return w, {}

    G = guide_gradient(g, w, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient)
    eta = sd * z                                                        # eta ~ N(0, lr), guide:278
    w_new = w + lr / 2 * -G + eta                                       # guide:276
    return w_new, {}
