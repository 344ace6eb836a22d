"""DCASGD: delay-compensated asynchronous SGD (MXNet ``dcasgd``; guide line 216; Zheng et al. 2017).

mxnet (Python ops, MXNet 1.9.1 python/mxnet/optimizer/optimizer.py:1408-1429; MXNet assumes the
gradient is one update old; docs/optimizers/dcasgd.md)::

    g = clip(rescale_grad*grad, c);  step = -lr*(g + wd*w + lamda*g*g*(w - w_prev));  w_prev = w
    momentum 0: w = w + step;  momentum > 0: mom = momentum*mom + step;  w = w + mom

(MXNet 1.9.1 crashes on momentum > 0; the intended variant above is computed instead.)

guide: ``w = w - lr*(G + lamda*G*G*(w - w_i))`` with ``w_i`` the weight at which the gradient was
evaluated. An optimizer step cannot know it; it takes the gradient as computed at the current
weight (no delay), so the compensation term vanishes: ``w = w - lr*G`` (with momentum as above).
``reference.dcasgd.step(..., w_grad=...)`` computes the guide's form for a known delay.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..backends import arrays
from . import gradient
from .base import Optimizer, row_step
from .registry import register
from .spec_spaces import Decades, MOMENTUM, OneOf, USUAL_MOMENTUM
from .spec import BenchSetting, Spec
from .validation import nonneg, unit

__all__ = ["DCASGD"]


class PlainRow(NamedTuple):
    """The scalars of :func:`plain_rule` (MXNet's Python optimizer: unrounded, the clip bound
    aside): packed on the host, read by name in the kernel."""
    neg_lr: float      #: -lr
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    lamda: float
    comp: float        #: 1 to compensate against the previous weight (mxnet), 0 not to (guide)


class MomentumRow(NamedTuple):
    """The scalars of :func:`momentum_rule`: :class:`PlainRow`'s and the momentum."""
    neg_lr: float      #: -lr
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    lamda: float
    comp: float        #: 1 to compensate against the previous weight (mxnet), 0 not to (guide)
    mu: float          #: momentum


@gradient.through('rescale')
def plain_rule(f):
    zero = f(0)
    # not gradient.clipped_then_decayed: mxnet's compensation term reads the clipped g alone
    rescaled = gradient.rescaled(f)

    def rule(w, grad, w_prev, hp):
        p = PlainRow(*hp)
        g = rescaled(grad, p.rescale, p.clip_bound)
        if p.comp > zero:    # mxnet: compensate against the previous weight
            step = p.neg_lr * (g + p.wd * w + p.lamda * g * g * (w - w_prev))
        else:                # guide without delay: G = g + wd*w, no compensation
            step = p.neg_lr * (g + p.wd * w)
        return w + step, w
    return rule


@gradient.through('rescale')
def momentum_rule(f):
    zero = f(0)
    rescaled = gradient.rescaled(f)

    def rule(w, grad, mom, w_prev, hp):
        p = MomentumRow(*hp)
        g = rescaled(grad, p.rescale, p.clip_bound)
        if p.comp > zero:
            step = p.neg_lr * (g + p.wd * w + p.lamda * g * g * (w - w_prev))
        else:
            step = p.neg_lr * (g + p.wd * w)
        mom = p.mu * mom + step
        return w + mom, mom, w
    return rule


SPEC = Spec(
    name="dcasgd", reference="reference.dcasgd",
    pytorch=None, torch=None,
    space={"momentum": MOMENTUM, "lamda": OneOf(0.04, Decades(-3, 1))},
    # momentum: MXNet's default 0, or a heavy ball as SGD's (spaces.USUAL_MOMENTUM)
    usual={"momentum": USUAL_MOMENTUM},
    record={"momentum": 0.5, "lamda": 0.04}, record_ulps=0,
    layouts=({"learning_rate": 0.1}, {"learning_rate": 0.1, "momentum": 0.9},),
    trainer=({"momentum": 0.9}, {},),
    demo={"learning_rate": 0.1, "momentum": 0.9},
    bench=(BenchSetting("dcasgd", {"momentum": 0.0}),
           BenchSetting("dcasgd mom", {"momentum": 0.9}, quick=True)),
)


@register
class DCASGD(Optimizer):
    """Delay-compensated asynchronous SGD (MXNet ``dcasgd``).

    * mxnet: ``step = -lr*(g + wd*w + lamda*g^2*(w - w_prev)); w_prev = w; w = w + step``
      (with momentum: ``mom = momentum*mom + step; w = w + mom``)
    * guide: ``w = w - lr*(g + wd*w)`` — the guide's compensation ``lamda*g^2*(w - w_i)`` needs
      the weight ``w_i`` at which the gradient was taken; without a known delay it is zero.

    ``g = clip(rs*grad, c)``. State: ``(mom or None, w_prev)``, ``w_prev`` a copy of the weight.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.DCASGD(learning_rate=0.1, lamda=0.04)
        >>> w = np.ones(2); s = opt.create_state(0, w); opt.update(0, w, np.ones(2), s)
        >>> w
        array([0.9, 0.9])
    """

    spec = SPEC
    mxnet_kernel = False

    domains = {"momentum": unit(), "lamda": nonneg()}

    def __init__(self, momentum=0.0, lamda=0.04, **kwargs):
        self.momentum, self.lamda = momentum, lamda
        super().__init__(**kwargs)

    def state_slots(self):
        return ("mom", "w_prev") if self.momentum != 0.0 else ("w_prev",)

    def create_state(self, index, weight):
        self._check_weight(weight)
        self.state_made()
        mom = arrays.zeros_like(weight) if self.momentum != 0.0 else None
        return (mom, arrays.copy(weight))  # the weight's kind, device and memory order (F too)

    def create_state_template(self, weight):
        from .base import Slot
        mom = Slot("mom", weight.shape, weight.dtype) if self.momentum != 0.0 else None
        return (mom, Slot("w_prev", weight.shape, weight.dtype))

    def _template_key(self):
        # create_state_template above is a function of this and the weight's shape and dtype
        return (self.momentum != 0.0,)

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        common = dict(neg_lr=-lr, wd=wd, rescale=self.rescale_grad, clip_bound=self._clip_bound(),
                      lamda=self.lamda, comp=1.0 if self.convention == "mxnet" else 0.0)
        if self.momentum != 0.0:
            return momentum_rule, MomentumRow(**common, mu=self.momentum)
        else:
            return plain_rule, PlainRow(**common)
