"""AdaBelief (``adabelief``; Zhuang et al. 2020, "AdaBelief Optimizer: Adapting Stepsizes by the
Belief in Observed Gradients", Algorithm 2; reference.adabelief, docs/optimizers/adabelief.md).

paper (the one convention: MXNet never had AdaBelief, torch.optim has none), with
``g = clip(rescale_grad*grad, c)`` plus ``wd*w``, or with ``weight_decouple``
``w*(1 - lr*wd)`` first (``w*(1 - wd)`` with ``fixed_decay``)::

    m = beta1*m + (1-beta1)*g;  s = beta2*s + (1-beta2)*(g - m)^2 + eps
    w = w - (lr/(1-beta1^t))*m/(sqrt(s)/sqrt(1-beta2^t) + eps)

``rectify`` (the authors' code, forked from RAdam): where ``rho_t >= 5`` the update is
``w - (lr*r_t*sqrt(1-beta2^t)/(1-beta1^t))*m/(sqrt(s) + eps)``; before it ``w - (lr/(1-beta1^t))*m``
(``degenerated_to_sgd``) or no move. The host forms the step's constants in float64, as the
authors' code forms them in Python floats; one pass reads ``w, g, m, s`` and writes ``w, m, s``:
Adam's traffic.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from . import gradient, torch_ops
from ..backends.jit import fma
from .adam import MomentConstants
from .base import Optimizer, row_step
from .registry import register
from .spec import BenchSetting, Spec, TorchPeer
from .spec_spaces import Decades, Interval, OneOf, USUAL_BETA1, USUAL_BETA2
from .validation import flag, nonneg, unit

__all__ = ["AdaBelief"]

#: the modes of :class:`AdaBeliefRow`: the adaptive update, the momentum step of the
#: rectified form before ``rho_t`` reaches 5 (``degenerated_to_sgd``), no move of the weight
ADAPTIVE, MOMENTUM, STILL = 2.0, 1.0, 0.0


class AdaBeliefRow(NamedTuple):
    """The scalars of :func:`paper_rule`: packed on the host, read by name in the kernel."""
    decay: float         #: 1 - lr*wd (1 - wd with fixed_decay) with weight_decouple, else 1
    wd: float            #: the weight decay added to the gradient (0 with weight_decouple)
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    b1: float
    one_minus_b1: float  #: 1 - beta1
    b2: float
    one_minus_b2: float  #: 1 - beta2
    eps: float
    alpha: float         #: the step size: lr/(1-beta1^t), times r_t*sqrt(1-beta2^t) rectified
    root_bc2: float      #: sqrt(1-beta2^t) (1 in the rectified step: s uncorrected)
    mode: float          #: ADAPTIVE, MOMENTUM or STILL


@gradient.through('rescale')
def paper_rule(f):
    """Algorithm 2 in the authors' order of operations (adabelief-pytorch 0.2.1,
    ``AdaBelief.step``; reference.adabelief.step), rounded as torch's CPU kernels round them
    (:mod:`.torch_ops`: ``add_`` with ``alpha`` and ``addcmul_`` through a fused multiply-add)::

        w = w*decay;  g = clip(rs*grad, c) (+ wd*w, fused, where wd != 0)
        m = fma(1-beta1, g, m*beta1);  r = g - m
        s = fma((1-beta2)*r, r, s*beta2) + eps
        ADAPTIVE:  w = w - (alpha*m)/(sqrt(s)/root_bc2 + eps)
        MOMENTUM:  w = fma(-alpha, m, w)
    """
    zero, two = f(0), f(ADAPTIVE)
    grad_of = torch_ops.gradient(f)
    square_avg = torch_ops.square_avg(f)

    def rule(w, grad, m, s, hp):
        p = AdaBeliefRow(*hp)
        w = w * p.decay
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        m = fma(p.one_minus_b1, g, m * p.b1)
        r = g - m
        s = square_avg(s, r, p.b2, p.one_minus_b2) + p.eps
        if p.mode == two:
            return w - (p.alpha * m) / (math.sqrt(s) / p.root_bc2 + p.eps), m, s
        if p.mode != zero:
            return fma(-p.alpha, m, w), m, s
        return w, m, s
    return rule


def step_size(lr, beta1, beta2, t, rectify, degenerated_to_sgd):
    """``(mode, alpha, root_bc2)`` of step ``t`` in float64, as the authors' code forms them in
    Python floats (``lr/bc1``; rectified, its ``step_size*lr`` from ``N_sma`` and
    ``N_sma_max``)."""
    bc1 = 1 - beta1 ** t
    if not rectify:
        return ADAPTIVE, lr / bc1, math.sqrt(1 - beta2 ** t)
    beta2_t = beta2 ** t
    rho_inf = 2 / (1 - beta2) - 1
    rho_t = rho_inf - 2 * t * beta2_t / (1 - beta2_t)
    if rho_t >= 5:
        return ADAPTIVE, math.sqrt((1 - beta2_t) * (rho_t - 4) / (rho_inf - 4) * (rho_t - 2)
                                   / rho_t * rho_inf / (rho_inf - 2)) / bc1 * lr, 1.0
    if degenerated_to_sgd:
        return MOMENTUM, 1.0 / bc1 * lr, 1.0
    return STILL, 0.0, 1.0


SPEC = Spec(
    name="adabelief", reference="reference.adabelief",
    conventions=("paper",), pytorch=None, torch=None,
    # the authors' implementation, adabelief-pytorch 0.2.1, adabelief_pytorch/AdaBelief.py,
    # AdaBelief.__init__
    torch_peer=TorchPeer("AdaBelief", "adabelief_pytorch.AdaBelief (adabelief-pytorch 0.2.1, "
                                      "the authors' code)", (
        ("lr", 1e-3), ("betas", (0.9, 0.999)), ("eps", 1e-16), ("weight_decay", 0),
        ("amsgrad", False), ("weight_decouple", True), ("fixed_decay", False),
        ("rectify", True), ("degenerated_to_sgd", True), ("print_change_log", True))),
    torch_slots={"mean": "exp_avg", "var": "exp_avg_var"},
    space={"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999),
           "epsilon": Decades(-16, -2), "weight_decouple": OneOf(False, True),
           "fixed_decay": OneOf(False, True), "rectify": OneOf(False, True),
           "degenerated_to_sgd": OneOf(True, False)},
    # the paper trains with beta1 0.9 and beta2 0.999, epsilon 1e-8 to 1e-16 (its Table of
    # hyperparameters, and the authors' recommendations by task)
    usual={"beta1": USUAL_BETA1, "beta2": USUAL_BETA2, "epsilon": Decades(-16, -6)},
    # the rectified step begins at t = 6 for the usual beta2: the oracle's cases run up to 8
    case_steps=8,
    # the hyperparameters rounded to float32, the bias corrections formed in the weight's
    # precision (as optax.adabelief in float32), and two easy mistakes
    variants=("hyper_f32", "constants_in_dtype", "residual_old_mean", "eps_outside_s"),
    record={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "weight_decouple": True,
            "fixed_decay": False, "rectify": True, "degenerated_to_sgd": True}, record_ulps=1,
    layouts=({},),
    trainer=({}, {"weight_decouple": True, "rectify": True}),
    demo={"learning_rate": 0.01},
    bench=(BenchSetting("adabelief", {}, quick=True),),
)


@register
class AdaBelief(MomentConstants, Optimizer):
    """AdaBelief (Zhuang et al. 2020, Algorithm 2), under its one convention ``"paper"``.

    ``m = beta1*m + (1-beta1)*g;  s = beta2*s + (1-beta2)*(g - m)^2 + epsilon;
    w = w - lr*m_hat/(sqrt(s_hat) + epsilon)`` with the bias-corrected ``m_hat = m/(1-beta1^t)``,
    ``s_hat = s/(1-beta2^t)`` and ``g = clip(rescale_grad*grad, clip_gradient) + wd*w``.

    The options of the authors' code (adabelief-pytorch), off by default here (its defaults
    turn ``weight_decouple`` and ``rectify`` on, and so does ``toolkit.torch.AdaBelief``):
    ``weight_decouple=True`` applies the decay to the weight, ``w*(1 - lr*wd)`` first
    (``w*(1 - wd)`` with ``fixed_decay=True``); ``rectify=True`` takes RAdam's rectified step
    where ``rho_t >= 5`` and, before, the momentum step ``w - lr*m_hat``
    (``degenerated_to_sgd=True``) or none. State: ``(mean, var)``.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("adabelief", learning_rate=0.1)
        >>> w = np.zeros(2, np.float32); s = opt.create_state(0, w)
        >>> opt.update(0, w, np.array([2.0, -3.0], np.float32), s); w   # -lr*sign(g)/beta1 at t = 1
        array([-0.11111111,  0.1111111 ], dtype=float32)
    """

    spec = SPEC

    domains = {"beta1": unit(), "beta2": unit(), "epsilon": nonneg(),
               "weight_decouple": flag(), "fixed_decay": flag(), "rectify": flag(),
               "degenerated_to_sgd": flag()}

    def __init__(self, learning_rate=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-16,
                 weight_decouple=False, fixed_decay=False, rectify=False,
                 degenerated_to_sgd=True, **kwargs):
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.weight_decouple, self.fixed_decay = weight_decouple, fixed_decay
        self.rectify, self.degenerated_to_sgd = rectify, degenerated_to_sgd
        super().__init__(learning_rate=learning_rate, **kwargs)

    def state_slots(self):
        return ("mean", "var")

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        # Adam's moment constants (unrounded: "paper" rounds no hyperparameter)
        constants = self._constants("_adabelief_constants", self._moment_constants)
        mode, alpha, root_bc2 = step_size(lr, constants["b1"], constants["b2"], t,
                                          self.rectify, self.degenerated_to_sgd)
        if self.weight_decouple:
            decay, coupled = 1.0 - (wd if self.fixed_decay else lr * wd), 0.0
        else:
            decay, coupled = 1.0, wd
        return paper_rule, AdaBeliefRow(decay=decay, wd=coupled, **constants, alpha=alpha,
                                        root_bc2=root_bc2, mode=mode)
