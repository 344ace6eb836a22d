"""FTML: Follow the Moving Leader (MXNet ``ftml``; guide lines 250-259; Zheng and Kwok 2017).

mxnet (``ftml_update``, MXNet 1.9.1 src/operator/optimizer_op-inl.h:1205-1223; weight decay before
clipping; docs/optimizers/ftml.md)::

    g = clip(rescale_grad*grad + wd*w, c);  v = beta2*v + (1-beta2)*g*g
    d_t = (1 - beta1^t)/lr * (sqrt(v/(1 - beta2^t)) + eps)
    z = beta1*z + (1-beta1)*g - (d_t - beta1*d)*w;  d = d_t;  w = -z/d_t

guide: the same with ``G = clip(rescale_grad*grad, c) + wd*w``.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from . import gradient
from .base import Optimizer, row_step
from .registry import register
from .spec_spaces import Decades, Interval, USUAL_BETA1, USUAL_BETA2
from .spec import BenchSetting, Spec
from .validation import nonneg, unit

__all__ = ["FTML"]


class FtmlRow(NamedTuple):
    """The scalars of :func:`ftml_rule`, rounded to the weight's dtype: packed on the host,
    read by name in the kernel."""
    wd: float
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    b1: float
    one_minus_b1: float  #: 1 - beta1
    b2: float
    one_minus_b2: float  #: 1 - beta2
    bc2: float           #: 1 - beta2^t
    d_scale: float       #: (1 - beta1^t)/lr
    eps: float
    guide: float         #: 1 under convention "guide" (its G), else 0 (MXNet's g)


@gradient.through('rescale')
def ftml_rule(f):
    zero = f(0)
    guide_grad = gradient.clipped_then_decayed(f)
    mxnet_grad = gradient.decayed_then_clipped(f)

    def rule(w, grad, d, v, z, hp):
        p = FtmlRow(*hp)
        if p.guide > zero:
            g = guide_grad(grad, w, p.rescale, p.wd, p.clip_bound)
        else:
            g = mxnet_grad(grad, w, p.rescale, p.wd, p.clip_bound)
        v = p.b2 * v + p.one_minus_b2 * (g * g)
        d_t = p.d_scale * (math.sqrt(v / p.bc2) + p.eps)
        z = p.b1 * z + p.one_minus_b1 * g - (d_t - p.b1 * d) * w
        return -z / d_t, d_t, v, z
    return rule


SPEC = Spec(
    name="ftml", reference="reference.ftml",
    pytorch=None, torch=None,
    space={"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999),
           "epsilon": Decades(-10, -2)},
    # Zheng and Kwok (2017) and MXNet: beta1 0.6, beta2 0.999, epsilon 1e-8, within the usual
    # ranges of Adam's moments
    usual={"beta1": USUAL_BETA1, "beta2": USUAL_BETA2, "epsilon": Decades(-8, -3)},
    variants=("hyper_f32", "hyper_f64", "wd_before_clip", "wd_after_clip"),  # reference FORMS
    half_state_lr=0.1, half_state_reason="a float16 state (no master copy) holds about w/lr",
    record={"beta1": 0.6, "beta2": 0.999, "epsilon": 1e-08}, record_ulps=1,
    layouts=({},),
    trainer=({},),
    demo={"learning_rate": 0.01},
    bench=(BenchSetting("ftml", {}, quick=True),),
)


@register
class FTML(Optimizer):
    """Follow the Moving Leader (MXNet ``ftml``).

    ``v = beta2*v + (1-beta2)*g^2;  d_t = (1-beta1^t)/lr*(sqrt(v/(1-beta2^t)) + epsilon);
    z = beta1*z + (1-beta1)*g - (d_t - beta1*d_{t-1})*w;  w = -z/d_t``, with
    ``g = clip(rs*grad + wd*w, c)`` (mxnet) or ``clip(rs*grad, c) + wd*w`` (guide). The learning
    rate divides, so it must be > 0. State: ``(d, v, z)``.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.FTML(learning_rate=0.01, beta1=0.6, beta2=0.999)
        >>> w = np.zeros(2); s = opt.create_state(0, w); opt.update(0, w, np.ones(2), s)
        >>> np.round(w, 6)
        array([-0.01, -0.01])
    """

    spec = SPEC
    requires_positive_lr = True

    domains = {"beta1": unit(), "beta2": unit(), "epsilon": nonneg()}

    def __init__(self, beta1=0.6, beta2=0.999, epsilon=1e-8, **kwargs):
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        super().__init__(**kwargs)

    def state_slots(self):
        return ("d", "v", "z")

    def _step_constants(self):
        """``(r, constants)``: ``_rounded`` as a function of a float, and the constants of a step as
        the convention rounds them, by name (the fields of :class:`FtmlRow` that do not change
        per step; ``eps`` as given: only the kernel rounds it, to the weight's dtype)."""
        r = self._rounded
        b1, b2 = r(self.beta1), r(self.beta2)
        return self._float_rounder(), dict(rescale=r(self.rescale_grad),
                                           clip_bound=self._clip_bound(),
                                           b1=b1, one_minus_b1=1.0 - b1, b2=b2,
                                           one_minus_b2=1.0 - b2,
                                           eps=self.epsilon,
                                           guide=0.0 if self.convention == "mxnet" else 1.0)

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        r, constants = self._constants("_ftml_constants", self._step_constants)
        lr = r(lr)
        return ftml_rule, FtmlRow(wd=r(wd), bc2=1.0 - constants["b2"] ** t,
                                  d_scale=(1.0 - constants["b1"] ** t) / lr, **constants)
