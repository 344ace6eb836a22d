"""RMSProp, plain and centered (MXNet ``rmsprop``; guide lines 110-111 and 121-124).

mxnet (``rmsprop_update`` / ``rmspropalex_update``, MXNet 1.9.1
src/operator/optimizer_op-inl.h:2052-2077 / 1953-1986; weight decay before clipping;
docs/optimizers/rmsprop.md)::

    g = clip(rescale_grad*grad + wd*w, c);  n = (1-gamma1)*(g*g) + gamma1*n
    plain:    w = w - lr*(g/sqrt(n + eps))
    centered: gbar = (1-gamma1)*g + gamma1*gbar;  delta = gamma2*delta - lr*(g/sqrt(n - gbar*gbar + eps));
              w = w + delta
    then, if clip_weights: w = clip(w, clip_weights)

guide: the same with ``G = clip(rescale_grad*grad, c) + wd*w`` and clipping gated on None only.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from ..backends.jit import fma
from . import gradient, torch_ops
from .base import Optimizer, row_step
from .registry import register
from .spec_spaces import Decades, Interval, OneOf, USUAL_MOMENTUM
from .spec import BenchSetting, Spec
from .validation import flag, nonneg, positive, unit

__all__ = ["RMSProp"]


class PlainRow(NamedTuple):
    """The scalars of :func:`plain_rule`, rounded as the convention rounds them: packed on the
    host, read by name in the kernel."""
    lr: float
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    g1: float          #: gamma1
    omg1: float        #: 1 - gamma1
    eps: float
    cw: float          #: clip_weights, negative for none
    wd_first: float    #: 1 where wd enters before the clip (mxnet), 0 after it (guide)


class CenteredRow(NamedTuple):
    """The scalars of :func:`centered_rule`: :class:`PlainRow`'s and ``g2``."""
    lr: float
    wd: float
    rescale: float
    clip_bound: float
    g1: float
    omg1: float
    eps: float
    cw: float
    wd_first: float
    g2: float        #: gamma2


@gradient.through('rescale')
def plain_rule(f):
    zero = f(0)
    decayed_then_clipped = gradient.decayed_then_clipped(f)
    clipped_then_decayed = gradient.clipped_then_decayed(f)

    def rule(w, grad, n, hp):
        p = PlainRow(*hp)
        if p.wd_first > zero:          # mxnet: wd enters before the clip
            g = decayed_then_clipped(grad, w, p.rescale, p.wd, p.clip_bound)
        else:                          # guide: G = clip(rs*grad) + wd*w
            g = clipped_then_decayed(grad, w, p.rescale, p.wd, p.clip_bound)
        n = p.omg1 * (g * g) + p.g1 * n
        w = w - p.lr * (g / math.sqrt(n + p.eps))
        if p.cw >= zero:
            w = min(max(w, -p.cw), p.cw)
        return w, n
    return rule


@gradient.through('rescale')
def centered_rule(f):
    zero = f(0)
    decayed_then_clipped = gradient.decayed_then_clipped(f)
    clipped_then_decayed = gradient.clipped_then_decayed(f)

    def rule(w, grad, n, gbar, delta, hp):
        p = CenteredRow(*hp)
        if p.wd_first > zero:
            g = decayed_then_clipped(grad, w, p.rescale, p.wd, p.clip_bound)
        else:
            g = clipped_then_decayed(grad, w, p.rescale, p.wd, p.clip_bound)
        n = (p.omg1 * g) * g + p.g1 * n
        gbar = p.omg1 * g + p.g1 * gbar
        # n - gbar^2 is a variance, >= 0 in exact arithmetic; rounding can make it negative
        # (then MXNet takes the root of a negative number: NaN), so it is clamped at 0.
        var = n - gbar * gbar
        if var < zero:
            var = zero
        delta = p.g2 * delta - (p.lr * g) / math.sqrt(var + p.eps)
        w = w + delta
        if p.cw >= zero:
            w = min(max(w, -p.cw), p.cw)
        return w, n, gbar, delta
    return rule


class PytorchRow(NamedTuple):
    """The scalars of :func:`pytorch_plain_rule` and :func:`pytorch_centered_rule`."""
    nlr: float         #: -lr
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    alpha: float       #: gamma1, torch's alpha
    oma: float         #: 1 - gamma1
    eps: float
    cw: float          #: clip_weights, negative for none
    mu: float          #: gamma2, torch's momentum (centered only; 0 plain)


@gradient.through('rescale')
def pytorch_plain_rule(f):
    """torch.optim.RMSprop's single-tensor update, ``centered=False``, ``momentum=0`` (torch
    2.13, torch/optim/rmsprop.py, ``_single_tensor_rmsprop``; its documented algorithm)::

        g = clip(rs*grad, c) + wd*w                  (when wd != 0)
        n = n*alpha + (1 - alpha)*g*g                (rounded once: addcmul_)
        w = w + (-lr*g)/(sqrt(n) + eps)              (eps outside the root)
        w = clip(w, clip_weights)                    (the toolkit's, when set)"""
    zero = f(0)
    grad_of = torch_ops.gradient(f)
    square_avg = torch_ops.square_avg(f)

    def rule(w, grad, n, hp):
        p = PytorchRow(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        n = square_avg(n, g, p.alpha, p.oma)
        w = w + (p.nlr * g) / (math.sqrt(n) + p.eps)
        if p.cw >= zero:
            w = min(max(w, -p.cw), p.cw)
        return w, n
    return rule


@gradient.through('rescale')
def pytorch_centered_rule(f):
    """torch.optim.RMSprop, ``centered=True``, ``momentum`` = ``gamma2`` (torch 2.13)::

        g = clip(rs*grad, c) + wd*w                  (when wd != 0)
        n = n*alpha + (1 - alpha)*g*g ;  gbar = gbar.lerp(g, 1 - alpha)
        avg = sqrt(max(n - gbar*gbar, 0)) + eps      (n - gbar*gbar rounded once; torch
                                                      takes the root of a negative: NaN)
        momentum > 0:  delta = delta*momentum + g/avg ;  w = w - lr*delta (rounded once)
        momentum = 0:  delta = g/avg ;                   w = w + (-lr*g)/avg
        w = clip(w, clip_weights)                    (the toolkit's, when set)"""
    zero = f(0)
    grad_of = torch_ops.gradient(f)
    square_avg = torch_ops.square_avg(f)
    lerp = torch_ops.lerp(f)

    def rule(w, grad, n, gbar, delta, hp):
        p = PytorchRow(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        n = square_avg(n, g, p.alpha, p.oma)
        gbar = lerp(gbar, g, p.oma)
        var = fma(-gbar, gbar, n)
        if var < zero:
            var = zero
        avg = math.sqrt(var) + p.eps
        if p.mu > zero:
            delta = delta * p.mu + g / avg
            w = fma(p.nlr, delta, w)
        else:
            delta = g / avg
            w = w + (p.nlr * g) / avg
        if p.cw >= zero:
            w = min(max(w, -p.cw), p.cw)
        return w, n, gbar, delta
    return rule


_UNSET = object()


SPEC = Spec(
    name="rmsprop", reference="reference.rmsprop",
    moments={"n": "unsigned", "g": "signed", "delta": "signed"},
    conventions=("mxnet", "guide", "pytorch"), pytorch_form="lerp",
    pytorch="pytorch", torch="RMSprop", torch_requires={"momentum": "centered"},
    torch_slots={"n": "square_avg", "g": "grad_avg"},
    space={"gamma1": Interval(0.0, 0.999), "gamma2": Interval(0.0, 0.99),
           "epsilon": Decades(-10, -2), "centered": OneOf(False, True),
           "clip_weights": OneOf(None, Decades(-1, 1))},
    # gamma1, the decay of the averages: 0.9 (Hinton's lecture 6e, MXNet, optax, Keras) to 0.99
    # (torch.optim.RMSprop's alpha), 0.999 at most; gamma2, the centered momentum: 0.9
    # (Graves 2013, MXNet) or off (torch's momentum=0); epsilon: 1e-10 (TF1) to 1e-4 (Graves
    # 2013), 1e-8 by default (MXNet, torch, optax), Keras 1e-7
    usual={"gamma1": Interval(0.9, 0.999), "gamma2": USUAL_MOMENTUM,
           "epsilon": Decades(-10, -4)},
    variants=("hyper_f32", "hyper_f64", "wd_before_clip", "wd_after_clip"),  # reference FORMS
    record={"gamma1": 0.9, "gamma2": 0.9, "epsilon": 1e-08, "centered": True,
            "clip_weights": 2.0}, record_ulps=0,
    layouts=({"learning_rate": 0.01}, {"learning_rate": 0.01, "centered": True},),
    trainer=({}, {"centered": True, "clip_weights": 2.0},),
    demo={"learning_rate": 0.005},
    bench=(BenchSetting("rmsprop", {}, torch=("RMSprop", {"alpha": 0.9}), quick=True),
           BenchSetting("rmsprop centered", {"centered": True}, torch=("RMSprop", {"alpha": 0.9, "centered": True, "momentum": 0.9}))),
)


@register
class RMSProp(Optimizer):
    """RMSProp (MXNet ``rmsprop``; Tieleman and Hinton 2012), centered variant of Graves (2013).

    ``gamma1`` is the guide's beta (decay of the squared-gradient average, alias ``rho``);
    ``gamma2`` its gamma (momentum of the centered variant, alias ``momentum``).

    * plain: ``n = (1-gamma1)*g*g + gamma1*n;  w = w - lr*g/sqrt(n + eps)``
    * centered: also ``gbar = (1-gamma1)*g + gamma1*gbar;
      delta = gamma2*delta - lr*g/sqrt(n - gbar^2 + eps);  w = w + delta``

    mxnet: ``g = clip(rs*grad + wd*w, c)``; guide: ``g = clip(rs*grad, c) + wd*w``. If
    ``clip_weights`` is set, the weight is clipped to ``[-clip_weights, clip_weights]``.
    State: ``(n,)``, or ``(n, g, delta)`` when centered.

    ``convention="pytorch"``: ``torch.optim.RMSprop(alpha=gamma1, eps=epsilon,
    momentum=gamma2 if centered else 0)`` (:func:`pytorch_plain_rule`,
    :func:`pytorch_centered_rule`: ``eps`` outside the root).

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.RMSProp(learning_rate=0.01, rho=0.9, momentum=0.9, centered=True)
        >>> w = np.zeros(2); s = opt.create_state(0, w); opt.update(0, w, np.ones(2), s)
        >>> len(s)
        3
    """

    spec = SPEC

    # rho and momentum: the guide's spellings of gamma1 and gamma2 (constructor keywords, and
    # attributes that read and assign them)
    domains = {"gamma1": unit(aliases=("rho",)), "gamma2": unit(aliases=("momentum",)),
               "epsilon": nonneg(), "centered": flag(),
               "clip_weights": positive(none=True)}

    def __init__(self, learning_rate=0.001, gamma1=_UNSET, gamma2=_UNSET, epsilon=1e-8,
                 centered=False, clip_weights=None, rho=_UNSET, momentum=_UNSET, **kwargs):
        if gamma1 is not _UNSET and rho is not _UNSET:
            raise TypeError("give gamma1 or its guide spelling rho, not both")
        if gamma2 is not _UNSET and momentum is not _UNSET:
            raise TypeError("give gamma2 or its guide spelling momentum, not both")
        # a value given under a guide spelling is assigned through it: a refusal names it
        if rho is not _UNSET:
            self.rho = rho
        else:
            self.gamma1 = 0.9 if gamma1 is _UNSET else gamma1
        if momentum is not _UNSET:
            self.momentum = momentum
        else:
            self.gamma2 = 0.9 if gamma2 is _UNSET else gamma2
        self.epsilon = epsilon
        self.centered = centered
        self.clip_weights = clip_weights
        super().__init__(learning_rate=learning_rate, **kwargs)

    def state_slots(self):
        return ("n", "g", "delta") if self.centered else ("n",)

    def _tuple_state(self):
        return True

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        if self.convention == "pytorch":
            row = PytorchRow(nlr=-lr, wd=wd, rescale=self.rescale_grad,
                             clip_bound=self._clip_bound(),
                             alpha=self.gamma1, oma=1.0 - self.gamma1, eps=self.epsilon,
                             cw=self.clip_weights if self.clip_weights else -1.0,
                             mu=self.gamma2 if self.centered else 0.0)
            return pytorch_centered_rule if self.centered else pytorch_plain_rule, row
        r = self._rounded
        g1 = r(self.gamma1)
        row = dict(lr=r(lr), wd=r(wd), rescale=r(self.rescale_grad), clip_bound=self._clip_bound(),
                   g1=g1,
                   omg1=1.0 - g1, eps=r(self.epsilon),
                   cw=r(self.clip_weights) if self.clip_weights else -1.0,
                   wd_first=1.0 if self.convention == "mxnet" else 0.0)
        if self.centered:
            return centered_rule, CenteredRow(**row, g2=r(self.gamma2))
        else:
            return plain_rule, PlainRow(**row)
