"""Small helpers shared by the reference modules (never by the kernels).

Every reference step is written so that it also runs on :class:`reference.error_bound.Tracked`
inputs: only operators and the numpy functions sqrt, abs, sign, maximum, minimum, clip, where,
square and sum touch arrays. These helpers keep to that rule.
"""
from __future__ import annotations

import numpy as np

from .error_bound import Tracked

CONVENTIONS = ("mxnet", "guide")


def as_f64(x):
    """An input as a float64 array (a Tracked input is passed through untouched)."""
    if isinstance(x, Tracked):
        return x
    return np.array(x, dtype=np.float64, copy=True)


def f32(x):
    """``float64(float32(x))``: MXNet 1.9.1 declares kernel hyperparameters ``float`` in its dmlc
    parameter structs, so they are rounded to float32 before use (spec section 1.6).

    MXNet actually parses each value from ``str(x)`` with dmlc-core's parser, which is not
    correctly rounded: for about 12% of arbitrary doubles (none of 0.1, 0.9, 0.999, 1e-8) its
    float32 is one ulp away from ``float32(x)`` (tests/data/mxnet/README.md, item 1). This
    function is the correctly rounded model; bit-identity with MXNet holds where the two agree."""
    return None if x is None else float(np.float32(x))


def merge_hyper(name: str, defaults: dict, given: dict) -> dict:
    """The optimizer's hyperparameters: ``defaults`` updated by ``given``; an unknown keyword is a
    TypeError naming it."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise TypeError(f"{name}: unknown hyperparameter(s) {', '.join(unknown)}; "
                        f"expected some of {sorted(defaults)}")
    return {**defaults, **given}


def check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")


def clip(x, c):
    """``clip(x, c)``: ``c`` if ``x > c``, ``-c`` if ``x < -c``, else ``x``."""
    return np.clip(x, -c, c)


def kernel_clip(x, c):
    """Clipping as MXNet's kernel optimizers gate it: off for ``None`` and ``0.0`` (the Python
    side passes ``clip_gradient`` only when it is truthy; spec section 1.4)."""
    return x if not c else clip(x, c)


def python_clip(x, c):
    """Clipping as MXNet's Python-op optimizers gate it: off only for ``None``, so
    ``clip_gradient=0.0`` clips every gradient to zero (spec section 1.4)."""
    return x if c is None else clip(x, c)


def guide_gradient(grad, weight, *, wd, rescale_grad, clip_gradient):
    """The gradient the guide writes ``grad(w_i)``, as the "guide" convention reads it:
    ``clip(rescale_grad * grad, clip_gradient) + wd * w``.

    The guide introduces weight decay once, for SGD (guide line 35: ``-grad(w_i) - delta*w_i``),
    as a penalty added to the gradient; the guide convention applies that same L2 term to every
    optimizer. Rescaling and clipping are the Optimizer base class's preprocessing, which the guide
    takes for granted; clipping is on whenever ``clip_gradient`` is not None.
    """
    g = python_clip(rescale_grad * grad, clip_gradient)
    return g + wd * weight if wd else g
