"""AdamW: Adam with decoupled weight decay (registry name ``adamw``; Loshchilov and Hutter 2019,
Algorithm 2).

MXNet 1.9.1 has no ``adamw`` optimizer, only the operator ``mx.nd.contrib.adamw_update``
(python/mxnet/ndarray/contrib.py:556-563 at tag 1.9.1); convention "mxnet" is one call of it
(docs/optimizers/adamw.md; reference/adamw.py)::

    g = clip(rescale_grad*grad, c)        (c = clip_gradient; None is off, 0 clips to zero)
    m = beta1*m + (1-beta1)*g ;  v = beta2*v + (1-beta2)*g*g
    w = w - eta*(lr*m/(sqrt(v) + eps) + wd*w)          (no bias correction)

guide (the paper's algorithm)::

    w = w - eta*(lr*(m/(1-beta1^t))/(sqrt(v/(1-beta2^t)) + eps) + wd*w)
"""
from __future__ import annotations

import math
from typing import NamedTuple

from . import adam, gradient, torch_ops
from .base import Optimizer, row_step
from .registry import register
from .spec_spaces import Decades, Interval, OneOf, USUAL_BETA1, USUAL_BETA2
from .spec import BenchSetting, Spec
from .validation import flag, nonneg, unit

__all__ = ["AdamW"]


class MxnetRow(NamedTuple):
    """The scalars of :func:`mxnet_rule`, rounded as the convention rounds them: packed on the
    host, read by name in the kernel."""
    lr: float
    eta: float           #: the schedule multiplier
    wd: float
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    b1: float
    one_minus_b1: float  #: 1 - beta1
    b2: float
    one_minus_b2: float  #: 1 - beta2
    eps: float
    skip: float          #: nonzero: the operator skips the update (rs is 0 or not finite)


class GuideRow(NamedTuple):
    """The scalars of :func:`guide_rule`."""
    lr: float
    eta: float
    wd: float
    rescale: float
    clip_bound: float
    b1: float
    one_minus_b1: float
    b2: float
    one_minus_b2: float
    eps: float
    bc1: float    #: 1 - beta1^t
    bc2: float    #: 1 - beta2^t


@gradient.through('rescale')
def mxnet_rule(f):
    zero = f(0)
    # the operator's grad*rs, the same product as the helper's rs*grad (IEEE multiplication
    # commutes; rs is finite and nonzero here, the update is skipped otherwise)
    grad_of = gradient.rescaled(f)

    def rule(w, grad, m, v, hp):
        p = MxnetRow(*hp)
        if p.skip != zero:
            return w, m, v
        g = grad_of(grad, p.rescale, p.clip_bound)
        m = p.b1 * m + p.one_minus_b1 * g
        v = p.b2 * v + p.one_minus_b2 * (g * g)
        return w - p.eta * (p.lr * m / (math.sqrt(v) + p.eps) + p.wd * w), m, v
    return rule


def _guide_rule(f, amsgrad):
    grad_of = gradient.rescaled(f)
    maximum = torch_ops.maximum(f)

    if amsgrad:  # a closure constant: the compiled rule takes the running maximum's slot
        def amsgrad_rule(w, grad, m, v, vmax, hp):
            p = GuideRow(*hp)
            g = grad_of(grad, p.rescale, p.clip_bound)
            m = p.b1 * m + p.one_minus_b1 * g
            v = p.b2 * v + p.one_minus_b2 * (g * g)
            vmax = maximum(vmax, v)
            return (w - p.eta * (p.lr * (m / p.bc1) / (math.sqrt(vmax / p.bc2) + p.eps)
                                 + p.wd * w), m, v, vmax)
        return amsgrad_rule

    def rule(w, grad, m, v, hp):
        p = GuideRow(*hp)
        g = grad_of(grad, p.rescale, p.clip_bound)
        m = p.b1 * m + p.one_minus_b1 * g
        v = p.b2 * v + p.one_minus_b2 * (g * g)
        return (w - p.eta * (p.lr * (m / p.bc1) / (math.sqrt(v / p.bc2) + p.eps) + p.wd * w),
                m, v)
    return rule


@gradient.through('rescale')
def guide_rule(f):
    return _guide_rule(f, False)


@gradient.through('rescale')
def guide_amsgrad_rule(f):
    """:func:`guide_rule` with AMSGrad: ``max_var = max(max_var, v)`` in ``v``'s place in the
    denominator."""
    return _guide_rule(f, True)


SPEC = Spec(
    name="adamw", reference="reference.adamw",
    moments={"mean": "signed", "var": "unsigned", "max_var": "unsigned"},
    conventions=("mxnet", "guide", "pytorch"), pytorch_form="lerp",
    pytorch="pytorch", torch="AdamW",
    torch_slots={"mean": "exp_avg", "var": "exp_avg_sq", "max_var": "max_exp_avg_sq"},
    space={"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999),
           "epsilon": Decades(-10, -2), "eta": OneOf(1.0, Interval(0.0, 1.0))},
    flags={"amsgrad": False},
    usual={"beta1": USUAL_BETA1, "beta2": USUAL_BETA2, "epsilon": Decades(-8, -3)},
    variants=("hyper_f32", "hyper_f64", "constants_in_dtype", "lerp"),
    record={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-08, "eta": 0.5}, record_ulps=1,
    layouts=({"learning_rate": 0.01, "eta": 0.5},),
    trainer=({"eta": 0.5}, {"amsgrad": True}),   # AMSGrad under the conventions that have it
    demo={"learning_rate": 0.01, "wd": 0.01},
    bench=(BenchSetting("adamw", {}, torch=("AdamW", {"weight_decay": 0.0}), quick=True),),
)


@register
class AdamW(adam.MomentConstants, Optimizer):
    """AdamW (registry name ``adamw``): Adam with decoupled weight decay.

    * mxnet (``mx.nd.contrib.adamw_update``, MXNet 1.9.1 has no such optimizer):
      ``w = w - eta*(lr*m/(sqrt(v) + epsilon) + wd*w)``, no bias correction; the update is
      skipped when ``rescale_grad`` is 0 or not finite
    * guide (Loshchilov and Hutter 2019, Algorithm 2):
      ``w = w - eta*(lr*m_hat/(sqrt(v_hat) + epsilon) + wd*w)`` with
      ``m_hat = m/(1-beta1^t)``, ``v_hat = v/(1-beta2^t)``

    where ``g = clip(rescale_grad*grad, clip_gradient)`` (no weight decay in ``g``),
    ``m = beta1*m + (1-beta1)*g`` and ``v = beta2*v + (1-beta2)*g^2``; ``eta`` is the paper's
    schedule multiplier. State: ``(mean, var)``.

    ``convention="pytorch"``: ``torch.optim.AdamW(lr=eta*learning_rate, weight_decay=wd)``, the
    decay ``w*(1 - lr*wd)`` first (``adam.pytorch_rule``).

    ``amsgrad=True`` (torch's flag; "guide" and "pytorch" only): a third slot ``max_var``, the
    running maximum of ``var``, in its place in the denominator. State: ``(mean, var, max_var)``.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("adamw", learning_rate=0.1, wd=0.5)
        >>> w = np.ones(3, np.float32); s = opt.create_state(0, w)
        >>> opt.update(0, w, np.zeros(3, np.float32), s); w
        array([0.5, 0.5, 0.5], dtype=float32)
    """

    spec = SPEC

    domains = {"beta1": unit(), "beta2": unit(), "epsilon": nonneg(), "eta": nonneg(),
               "amsgrad": flag()}

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, eta=1.0,
                 amsgrad=False, **kwargs):
        self.beta1, self.beta2, self.epsilon, self.eta = beta1, beta2, epsilon, eta
        self.amsgrad = amsgrad
        super().__init__(learning_rate=learning_rate, **kwargs)

    def check_relations(self):
        adam.check_amsgrad(self)

    def state_slots(self):
        return ("mean", "var", "max_var") if self.amsgrad else ("mean", "var")

    def _clip_bound(self):
        # the operator clips whenever clip_gradient >= 0 and the optimizer passes None as -1
        c = self.clip_gradient
        return -1.0 if c is None else self._rounded(c)

    def _step_constants(self):
        """``(r, constants, skip)``: ``_rounded`` as a function of a float, the constants of a step
        as the convention rounds them, by name (the fields both rows share), and ``skip``
        (MXNet's operator skips the update when the rounded ``rs`` is 0 or not finite)."""
        constants = dict(eta=self._rounded(self.eta), **self._moment_constants())
        rs = constants["rescale"]
        skip = 1.0 if (rs == 0 or not math.isfinite(rs)) else 0.0
        return self._float_rounder(), constants, skip

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        r, constants, skip = self._constants("_adamw_constants", self._step_constants)
        if self.convention == "mxnet":
            return mxnet_rule, MxnetRow(lr=r(lr), wd=r(wd), **constants, skip=skip)
        if self.convention == "pytorch":
            # torch.optim.AdamW: lr = eta*lr, the decay 1 - lr*wd (adam.pytorch_rule)
            gamma = constants["eta"] * lr
            return (adam.pytorch_amsgrad_rule if self.amsgrad else adam.pytorch_rule), \
                adam.pytorch_row(constants, t, gamma, decay=1.0 - gamma * wd, wd=0.0)
        return (guide_amsgrad_rule if self.amsgrad else guide_rule), GuideRow(
            lr=r(lr), wd=r(wd), **constants, bc1=1.0 - constants["b1"] ** t,
            bc2=1.0 - constants["b2"] ** t)
