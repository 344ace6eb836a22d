"""FTRL-Proximal (MXNet ``ftrl``; guide lines 233-241; McMahan et al. 2013, Algorithm 1).

mxnet (``ftrl_update``, MXNet 1.9.1 src/operator/optimizer_op-inl.h:2133-2158; weight decay in the
denominator; docs/optimizers/ftrl.md)::

    g = clip(rescale_grad*grad, c);  z = z + g - sigma*w;  n = n + g*g
    w = (sign(z)*lamda1 - z)/((beta + sqrt(n))/lr + wd) * (|z| > lamda1)

guide, with its z-update corrected (the guide drops the gradient term and flips the sign)::

    G = clip(rescale_grad*grad, c) + wd*w;  z = z + G - sigma*w;  n = n + G*G
    w = (|z| > lamda1) * (-lr/(beta + sqrt(n)) * (z - lamda1*sign(z)))

``sigma = (sqrt(n + g^2) - sqrt(n))/lr`` is evaluated as ``g^2/(sqrt(n + g^2) + sqrt(n))/lr``:
the same number without the cancellation of two nearly equal roots (docs/optimizers/ftrl.md,
"Numerics"; one float32 step with the difference of roots has errors up to ~1e6 ulp).
"""
from __future__ import annotations

import math
from typing import NamedTuple

from . import gradient
from .base import Optimizer, row_step
from .registry import register
from .spec_spaces import Decades, OneOf
from .spec import BenchSetting, Spec
from .validation import nonneg

__all__ = ["Ftrl"]


class FtrlRow(NamedTuple):
    """The scalars of :func:`ftrl_rule`, rounded to the weight's dtype: packed on the host,
    read by name in the kernel."""
    lr: float
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    lamda1: float
    beta: float
    guide: float       #: 1 under convention "guide" (wd in the gradient, its update), else 0


@gradient.through('rescale')
def ftrl_rule(f):
    zero, one = f(0), f(1)
    grad_of = gradient.rescaled(f)

    def rule(w, grad, z, n, hp):
        p = FtrlRow(*hp)
        g = grad_of(grad, p.rescale, p.clip_bound)
        if p.guide > zero:
            g = g + p.wd * w      # the guide's G = clip(rs*grad, c) + wd*w
        gg = g * g
        root_n = math.sqrt(n)
        root_new = math.sqrt(n + gg)
        den = root_new + root_n
        sigma_lr = gg / den if den > zero else zero        # (sqrt(n+g^2) - sqrt(n)), stably
        z = z + g - sigma_lr * w / p.lr
        n = n + gg                    # sqrt(n) equals root_new: the same rounded operand
        if abs(z) > p.lamda1:
            s = one if z > zero else -one
            if p.guide > zero:
                w = -p.lr / (p.beta + root_new) * (z - p.lamda1 * s)
            else:
                w = (s * p.lamda1 - z) / ((p.beta + root_new) / p.lr + p.wd)
        else:
            w = zero
        return w, z, n
    return rule


SPEC = Spec(
    name="ftrl", reference="reference.ftrl",
    pytorch=None, torch=None,
    space={"lamda1": OneOf(0.0, Decades(-4, 0)), "beta": OneOf(0.0, Decades(-2, 1))},
    half_state_lr=0.1, half_state_reason="a float16 state (no master copy) holds about w/lr",
    record={"lamda1": 0.01, "beta": 1.0}, record_ulps=0,
    layouts=({},),
    trainer=({},),
    demo={"learning_rate": 0.5, "lamda1": 0.0001, "beta": 1.0},
    bench=(BenchSetting("ftrl", {}, quick=True),),
)


@register
class Ftrl(Optimizer):
    """FTRL-Proximal (MXNet ``ftrl``; McMahan et al. 2013).

    ``z = z + g - sigma*w``, ``sigma = (sqrt(n + g^2) - sqrt(n))/lr``, ``n = n + g^2``, then

    * mxnet: ``w = (sign(z)*lamda1 - z)/((beta + sqrt(n))/lr + wd)`` where ``|z| > lamda1``, else 0;
      ``g = clip(rs*grad, c)``
    * guide: ``w = -lr/(beta + sqrt(n))*(z - lamda1*sign(z))`` where ``|z| > lamda1``, else 0;
      ``g = clip(rs*grad, c) + wd*w``

    ``lamda1`` is the L1 strength (the guide's lambda), ``beta`` the guide's beta; the default
    learning rate is 0.1. The learning rate divides, so it must be > 0. State: ``(z, n)``.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.Ftrl(lamda1=0.01, learning_rate=0.1, beta=1)
        >>> w = np.zeros(2); s = opt.create_state(0, w); opt.update(0, w, np.array([1.0, 0.001]), s)
        >>> w
        array([-0.0495,  0.    ])
    """

    spec = SPEC
    requires_positive_lr = True

    domains = {"lamda1": nonneg(), "beta": nonneg()}

    def __init__(self, lamda1=0.01, learning_rate=0.1, beta=1, **kwargs):
        self.lamda1, self.beta = lamda1, beta
        super().__init__(**kwargs)
        # MXNet does not forward learning_rate to the base class (MXNet 1.9.1
        # python/mxnet/optimizer/optimizer.py:1876-1880; docs/mxnet-facts.md, 1.1): a
        # scheduler's base_lr is not overwritten.
        self.lr = learning_rate

    def state_slots(self):
        return ("z", "n")

    def row_sparse_mode(self, index):
        """"lazy": MXNet's ``ftrl_update`` updates only the rows present (MXNet 1.9.1 does so
        when the weight is row-sparse too, as Gluon's ``stype='row_sparse'`` parameters are;
        with a dense weight it falls back to the dense update: docs/sparse.md)."""
        return "lazy"

    def _step_constants(self):
        """``(r, constants)``: ``_rounded`` as a function of a float, and the constants of a step as
        the convention rounds them, by name (the fields of :class:`FtrlRow` but ``lr`` and
        ``wd``)."""
        r = self._rounded
        return self._float_rounder(), dict(rescale=r(self.rescale_grad),
                                           clip_bound=self._clip_bound(),
                                           lamda1=r(self.lamda1), beta=r(self.beta),
                                           guide=0.0 if self.convention == "mxnet" else 1.0)

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        r, constants = self._constants("_ftrl_constants", self._step_constants)
        return ftrl_rule, FtrlRow(lr=r(lr), wd=r(wd), **constants)
