"""Signum and SignSGD (MXNet ``signum``; guide lines 200-205; Bernstein et al. 2018).

mxnet, momentum > 0 (``signum_update``, MXNet 1.9.1 src/operator/optimizer_op-inl.h:2412-2433;
``mom`` is minus the EMA; docs/optimizers/signum.md)::

    mom = momentum*mom - (1-momentum)*wd*w - (1-momentum)*clip(rescale_grad*grad, c)
    w = (1 - lr*wd_lh)*w + lr*sign(mom)

mxnet, momentum == 0 (SignSGD, ``signsgd_update``; rescale_grad and clip_gradient do nothing)::

    w = (1 - lr*wd)*w - lr*sign(grad)

guide (the state holds the guide's ``v``)::

    G = clip(rescale_grad*grad, c) + wd*w;  v = momentum*v + (1-momentum)*G
    w = (1 - lr*wd_lh)*w - lr*sign(v)          (momentum 0: w = w - lr*sign(G))
"""
from __future__ import annotations

from typing import NamedTuple

from . import gradient
from .base import Optimizer, row_step
from .registry import register
from .spec_spaces import Decades, MOMENTUM, OneOf, USUAL_MOMENTUM
from .spec import BenchSetting, Spec
from .validation import nonneg, unit

__all__ = ["Signum"]


class SignumRow(NamedTuple):
    """The scalars of :func:`signum_rule` (rounded to the weight's dtype under convention
    "mxnet"): packed on the host, read by name in the kernel."""
    lr: float
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    mu: float          #: momentum
    omu: float         #: 1 - momentum
    decay: float       #: 1 - lr*wd_lh
    direction: float   #: -1 for mxnet (the state is minus the EMA), +1 for guide


class SignSGDMxnetRow(NamedTuple):
    """The scalars of :func:`signsgd_mxnet_rule` (``signsgd_update`` reads neither rescale_grad
    nor clip_gradient)."""
    lr: float
    decay: float      #: 1 - lr*wd


class SignSGDGuideRow(NamedTuple):
    """The scalars of :func:`signsgd_guide_rule`."""
    lr: float
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none


@gradient.through('rescale')
def signum_rule(f):
    zero, one = f(0), f(1)
    # gradient.clipped_then_decayed fits the guide's branch only; mxnet scales g and wd*w apart
    rescaled = gradient.rescaled(f)

    def rule(w, grad, mom, hp):
        p = SignumRow(*hp)
        g = rescaled(grad, p.rescale, p.clip_bound)
        # mxnet (direction = -1): mom = mu*mom - (1-mu)*wd*w - (1-mu)*g, w += lr*sign(mom)
        # guide (direction = +1): v = mu*v + (1-mu)*(g + wd*w),        w -= lr*sign(v)
        if p.direction < zero:
            mom = p.mu * mom - p.omu * p.wd * w - p.omu * g
            s = one if mom > zero else (-one if mom < zero else zero)
            return p.decay * w + p.lr * s, mom
        mom = p.mu * mom + p.omu * (g + p.wd * w)
        s = one if mom > zero else (-one if mom < zero else zero)
        return p.decay * w - p.lr * s, mom
    return rule


def signsgd_mxnet_rule(f):
    zero, one = f(0), f(1)

    def rule(w, grad, hp):
        p = SignSGDMxnetRow(*hp)
        s = one if grad > zero else (-one if grad < zero else zero)
        return p.decay * w - p.lr * s
    return rule


@gradient.through('rescale')
def signsgd_guide_rule(f):
    zero, one = f(0), f(1)
    grad_of = gradient.clipped_then_decayed(f)

    def rule(w, grad, hp):
        p = SignSGDGuideRow(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        s = one if g > zero else (-one if g < zero else zero)
        return w - p.lr * s
    return rule


def _wd_lh_needs_momentum(hyper):
    """``wd_lh`` is MXNet's decoupled weight decay of the momentum branch: 0 without momentum."""
    if hyper.get("momentum") == 0.0 and "wd_lh" in hyper:
        return dict(hyper, wd_lh=0.0)
    return hyper


SPEC = Spec(
    name="signum", reference="reference.signum",
    moments={"mom": "signed"},
    pytorch=None, torch=None,
    space={"momentum": MOMENTUM, "wd_lh": OneOf(0.0, Decades(-4, -1))},
    # momentum 0.9 (Bernstein et al. 2018; MXNet's Signum and optax.signum default) or 0
    # (SignSGD, optax.sign_sgd)
    usual={"momentum": USUAL_MOMENTUM},
    dependent=_wd_lh_needs_momentum,
    record={"momentum": 0.9, "wd_lh": 0.01}, record_ulps=0,
    layouts=({}, {"momentum": 0.0},),
    trainer=({}, {"momentum": 0.0},),
    demo={"learning_rate": 0.005, "momentum": 0.9},
    bench=(BenchSetting("signum", {"momentum": 0.0}),
           BenchSetting("signum mom", {"momentum": 0.9}, quick=True)),
)


@register
class Signum(Optimizer):
    """Signum, and SignSGD when ``momentum=0`` (MXNet ``signum``).

    * Signum, mxnet: ``mom = momentum*mom - (1-momentum)*(g + wd*w); w = (1-lr*wd_lh)*w + lr*sign(mom)``
    * Signum, guide: ``v = momentum*v + (1-momentum)*G; w = (1-lr*wd_lh)*w - lr*sign(v)``
    * SignSGD, mxnet: ``w = (1-lr*wd)*w - lr*sign(grad)`` (rescale_grad, clip_gradient unused)
    * SignSGD, guide: ``w = w - lr*sign(G)``

    ``g = clip(rs*grad, c)``, ``G = g + wd*w``. ``wd_lh`` is an extra decoupled decay, which MXNet
    allows only with momentum > 0 (so does this class). State: ``mom`` (guide: ``v = -mom``) when
    momentum > 0, else None.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.Signum(learning_rate=0.01, momentum=0.9)
        >>> w = np.zeros(3); s = opt.create_state(0, w); opt.update(0, w, np.array([2.0, -1e-9, 0.0]), s)
        >>> w
        array([-0.01,  0.01,  0.  ])
    """

    spec = SPEC

    domains = {"momentum": unit(), "wd_lh": nonneg()}

    def __init__(self, learning_rate=0.01, momentum=0.9, wd_lh=0.0, **kwargs):
        self.momentum, self.wd_lh = momentum, wd_lh
        super().__init__(learning_rate=learning_rate, **kwargs)

    def check_relations(self):
        if self.momentum == 0.0 and self.wd_lh != 0.0:
            raise ValueError(f"{self.named('wd_lh')} needs {self.named('momentum')} > 0 "
                             "(SignSGD has no wd_lh; MXNet fails too)")

    def state_slots(self):
        return ("mom",) if self.momentum != 0.0 else ()

    def _step_constants(self):
        """``(r, wd_lh, constants)``: ``_rounded`` as a function of a float, ``wd_lh`` rounded (it
        enters the row as ``1 - lr*wd_lh``), and the other constants of a step as the convention
        rounds them, by name (fields of :class:`SignumRow`)."""
        r = self._rounded
        mu = r(self.momentum)
        return self._float_rounder(), r(self.wd_lh), dict(
            rescale=r(self.rescale_grad), clip_bound=self._clip_bound(), mu=mu, omu=1.0 - mu,
            direction=-1.0 if self.convention == "mxnet" else 1.0)

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        r, wd_lh, constants = self._constants("_signum_constants", self._step_constants)
        lr, wd = r(lr), r(wd)
        if self.momentum == 0.0:
            if self.convention == "mxnet":
                return signsgd_mxnet_rule, SignSGDMxnetRow(lr=lr, decay=1.0 - lr * wd)
            else:
                return signsgd_guide_rule, SignSGDGuideRow(lr=lr, wd=wd,
                                                           rescale=constants["rescale"],
                                                           clip_bound=constants["clip_bound"])
        return signum_rule, SignumRow(lr=lr, wd=wd, decay=1.0 - lr * wd_lh, **constants)
