"""LAMB: layer-wise adaptive moments (MXNet ``lamb``; You et al. 2020, "Large Batch Optimization
for Deep Learning: Training BERT in 76 minutes", Algorithm 2).

mxnet (MXNet 1.9.1's ``multi_lamb_update``, the path its ``Updater`` and Gluon's ``Trainer``
always take: python/mxnet/optimizer/optimizer.py:1316-1359; docs/optimizers/lamb.md;
reference/lamb.py)::

    g = clip(grad*rs, c) ;  m = beta1*m + (1-beta1)*g ;  v = beta2*v + ((1-beta2)*g)*g
    u = (m/(1-beta1^t))/(sqrt(v/(1-beta2^t)) + eps) + wd*w   (float32 weights: the root, the
                                                            quotient and the sum in double)
    r1 = min(max(|w|, lower), upper), r2 = |u|               (float32; ratio 1 if either is 0)
    w = w - (lr*r1/r2)*u

guide (the paper): the same in the weight's precision, the trust ratio in float64.

Two passes, as the norm of ``u`` needs ``u`` everywhere first. Pass 1 (the launcher's
``direction_norms``, ``toolkit.backends.cpu.direction_kernel``) forms the moments and ``u`` in
registers and sums ``|w|^2`` and ``|u|^2`` per tensor in float64 in one fixed order, writing
nothing; pass 2, an ordinary rule, forms them again from the same inputs and writes ``w``, ``m``
and ``v``. Nothing intermediate is stored, so a float16 state is rounded once. A Trainer runs each
pass for a whole group as one segmented call (``norm_inputs``).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..backends.rules import DirectionPass
from ..backends.launches import Directions, Launch
from . import gradient
from .adam import MomentConstants
from .base import Optimizer
from .registry import register
from .spec_spaces import Decades, Interval, OneOf, USUAL_BETA1, USUAL_BETA2
from .spec import BenchSetting, Spec
from .validation import flag, nonneg, unit

__all__ = ["LAMB"]

class LambRow(NamedTuple):
    """The scalars of both passes' rules (:func:`_mxnet`, :func:`_guide`), rounded to the
    weight's dtype: packed on the host, read by name in the kernel."""
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    b1: float
    one_minus_b1: float  #: 1 - beta1
    b2: float
    one_minus_b2: float  #: 1 - beta2
    p1: float            #: beta1^t (0 without bias correction)
    p2: float            #: beta2^t (0 without bias correction)
    eps: float
    wd: float
    k: float             #: the step size lr*ratio (pass 2); 0 in pass 1, which does not read it


# what a rule of the pair computes (a constant of its closure: numba prunes the other branch)
_DIRECTION, _APPLY = 0, 1


def _mxnet(what):
    """The "mxnet" rule that returns the direction ``u`` in the weight's place
    (``_DIRECTION``: ``(u, m, v)``) or the one that applies it (``_APPLY``:
    ``(w - k*u, m, v)``); both update the moments from the gradient first, the same way.
    ``hp`` is a :class:`LambRow`. For float32 weights ``u`` is MXNet's: ``m/(1-beta1^t)`` and
    ``v/(1-beta2^t)`` in float32, then ``sqrt``, ``/`` and ``+`` in double, rounded to float32
    once."""
    def factory(f):
        one = f(1)
        wide = np.float64  # numba's float() keeps a float32 a float32: widen explicitly
        grad_of = gradient.rescaled(f)  # MXNet's grad*rs: the same product (IEEE * commutes)

        def rule(w, grad, m, v, hp):
            p = LambRow(*hp)
            g = grad_of(grad, p.rescale, p.clip_bound)
            m = p.b1 * m + p.one_minus_b1 * g
            v = p.b2 * v + (p.one_minus_b2 * g) * g
            u = f(wide(m / (one - p.p1)) / (math.sqrt(wide(v / (one - p.p2))) + wide(p.eps))
                  + wide(p.wd * w))
            if what == _DIRECTION:
                return u, m, v
            return w - p.k * u, m, v
        return rule
    return factory


def _guide(what):
    """The "guide" rules (Algorithm 2 in the weight's precision); ``hp`` as :func:`_mxnet`."""
    def factory(f):
        one = f(1)
        grad_of = gradient.rescaled(f)

        def rule(w, grad, m, v, hp):
            p = LambRow(*hp)
            g = grad_of(grad, p.rescale, p.clip_bound)
            m = p.b1 * m + p.one_minus_b1 * g
            v = p.b2 * v + p.one_minus_b2 * (g * g)
            u = (m / (one - p.p1)) / (math.sqrt(v / (one - p.p2)) + p.eps) + p.wd * w
            if what == _DIRECTION:
                return u, m, v
            return w - p.k * u, m, v
        return rule
    return factory


mxnet_direction_rule, mxnet_apply_rule = _mxnet(_DIRECTION), _mxnet(_APPLY)
guide_direction_rule, guide_apply_rule = _guide(_DIRECTION), _guide(_APPLY)

_RULES = {"mxnet": (mxnet_direction_rule, mxnet_apply_rule),
          "guide": (guide_direction_rule, guide_apply_rule)}


SPEC = Spec(
    name="lamb", reference="reference.lamb",
    pytorch=None, torch=None,
    space={"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999),
           "epsilon": OneOf(1e-06, Decades(-10, -2)), "lower_bound": OneOf(None, Decades(-3, 0)),
           "upper_bound": OneOf(None, Decades(0, 2)), "bias_correction": OneOf(True, False)},
    # You et al. (2020) train BERT with 0.9, 0.999 and epsilon 1e-6 (MXNet's and optax's
    # defaults too)
    usual={"beta1": USUAL_BETA1, "beta2": USUAL_BETA2, "epsilon": Decades(-8, -4)},
    record={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-06, "lower_bound": 0.5,
            "upper_bound": 10.0, "bias_correction": True}, record_ulps=1,
    layouts=({"learning_rate": 0.01},
             {"learning_rate": 0.01, "lower_bound": 0.1, "upper_bound": 10.0, "bias_correction": False}),
    trainer=({}, {"lower_bound": 0.5, "upper_bound": 2.0, "bias_correction": False},),
    demo={"learning_rate": 0.02},
    bench=(BenchSetting("lamb", {}, quick=True),),
    first_pass=3,  # weight and both moments: the direction and the norms
)


@register
class LAMB(MomentConstants, Optimizer):
    """LAMB (MXNet ``lamb``): Adam's direction scaled per tensor by a trust ratio.

    ``u = m_hat/(sqrt(v_hat) + epsilon) + wd*w`` (``m_hat = m/(1-beta1^t)``,
    ``v_hat = v/(1-beta2^t)`` with ``bias_correction``, else ``m`` and ``v``), and
    ``w = w - lr*(phi(|w|)/|u|)*u`` with ``phi`` the clamp of the weight norm to
    ``[lower_bound, upper_bound]`` (a bound of None or 0 is none) and the ratio 1 when either norm
    is 0; ``m = beta1*m + (1-beta1)*g``, ``v = beta2*v + (1-beta2)*g^2`` with
    ``g = clip(rescale_grad*grad, clip_gradient)``. Convention "mxnet" is MXNet 1.9.1's
    aggregated kernel (float32 trust ratio, ``clip_gradient=0`` is off), "guide" the paper's
    Algorithm 2. State: ``(mean, var)``.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("lamb", learning_rate=0.1)
        >>> w = np.array([3.0, 4.0]); s = opt.create_state(0, w)
        >>> opt.update(0, w, np.array([1.0, 0.0]), s)   # u = (1, 0), ratio |w|/|u| = 5
        >>> np.round(w, 6)
        array([2.5, 4. ])
    """

    spec = SPEC
    #: MXNet's LAMB hands up to 45 indices to one aggregated kernel call (optimizer.py:1262)
    aggregate_num = 45

    #: a norm bound is None or a finite number >= 0 (0 is "no bound", as MXNet passes only a
    #: truthy bound to its operator)
    domains = {"beta1": unit(), "beta2": unit(), "epsilon": nonneg(),
               "lower_bound": nonneg(none="use None for no bound"),
               "upper_bound": nonneg(none="use None for no bound"),
               "bias_correction": flag()}

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-6,
                 lower_bound=None, upper_bound=None, bias_correction=True, **kwargs):
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.lower_bound, self.upper_bound = lower_bound, upper_bound
        self.bias_correction = bias_correction
        super().__init__(learning_rate=learning_rate, **kwargs)

    def check_relations(self):
        if self.lower_bound and self.upper_bound and self.lower_bound > self.upper_bound:
            low, high = self.named("lower_bound"), self.named("upper_bound")
            raise ValueError(f"{low} must not exceed {high}, got {low}={self.lower_bound!r} > "
                             f"{high}={self.upper_bound!r}")

    def state_slots(self):
        return ("mean", "var")

    # --- the two passes --------------------------------------------------------------------
    def _pass_hyper(self, t, wd):
        """The :class:`LambRow` of the rules with ``k = 0``: a function of ``t`` and ``wd``
        only. ``beta^t`` is formed in double from the (rounded) beta; the kernels round it to
        their precision once and subtract it from 1 (MXNet: ``1 - powf(beta1, t)`` for float32
        weights, ``1 - pow(beta1, t)`` for float64)."""
        r, constants = self._constants("_lamb_constants", self._step_constants)
        if self.bias_correction:
            p1, p2 = constants["b1"] ** t, constants["b2"] ** t
        else:
            p1, p2 = 0.0, 0.0
        return LambRow(p1=p1, p2=p2, wd=r(wd), k=0.0, **constants)

    def _step_constants(self):
        """``(r, constants)``: ``_rounded`` as a function of a float, and the constants of a step as
        the convention rounds them, by name (the fields of :class:`LambRow` that do not change
        per step)."""
        return self._float_rounder(), self._moment_constants()

    def _direction_pass(self, t, wd):
        return DirectionPass(_RULES[self.convention][0], self._pass_hyper(t, wd))

    def norm_inputs(self, index):
        """Pass 1 of the next step of ``index`` (:class:`~toolkit.backends.rules.DirectionPass`):
        a Trainer runs it for a whole group in one segmented call before planning the group.
        Reads the count and the weight decay, not the schedule: the step's planning reads that,
        once (a schedule of the user's own is read once per index, as ``update`` reads it)."""
        return self._direction_pass(self._next_count(index)[0], self._get_wd(index))

    def step_size(self, lr, w2, u2):
        """``lr*ratio`` from the sums of squares ``w2 = |w|^2`` and ``u2 = |u|^2`` (float64).

        "mxnet": MXNet's float32 arithmetic (``multi_lamb_update``): ``r1 = sqrt(float32(w2))``
        clamped to the float32 bounds, ``r2 = sqrt(float32(u2))``, ``ratio = r1/r2`` in float32
        (1 when either is 0), times the float32 ``lr`` (the kernels round the product to their
        precision once: float32's product, float64's exact one). "guide": ``phi(sqrt(w2))/
        sqrt(u2)`` in float64 (1 when either is 0), times ``lr``."""
        if self.convention == "mxnet":
            f = np.float32
            r1, r2 = np.sqrt(f(w2)), np.sqrt(f(u2))
            if self.lower_bound:
                r1 = max(r1, f(self.lower_bound))
            if self.upper_bound:
                r1 = min(r1, f(self.upper_bound))
            ratio = 1.0 if (r1 == 0 or r2 == 0) else float(r1 / r2)
            return self._rounded(lr) * ratio
        r1, r2 = math.sqrt(w2), math.sqrt(u2)
        if self.lower_bound:
            r1 = max(r1, self.lower_bound)
        if self.upper_bound:
            r1 = min(r1, self.upper_bound)
        return lr * (1.0 if (r1 == 0 or r2 == 0) else r1 / r2)

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        states = self.state_arrays(state)
        pass1 = self._direction_pass(t, wd)
        w2, u2 = yield Directions(pass1, weight, grad, states)
        apply = _RULES[self.convention][1]
        yield Launch("rule", apply, weight, grad, states,
                     pass1.hyper._replace(k=self.step_size(lr, w2, u2)))
