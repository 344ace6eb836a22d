"""RAdam (``radam``; Liu et al. 2020, "On the Variance of the Adaptive Learning Rate and
Beyond", Algorithm 2; reference.radam, docs/optimizers/radam.md).

pytorch (the default: torch ships RAdam) and paper (Algorithm 2 as printed), with
``g = clip(rescale_grad*grad, c) (+ wd*w, or w*(1 - lr*wd) first with decoupled_weight_decay)``::

    m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g;  m_hat = m/(1 - beta1^t)
    rho_t > threshold:  w = w - lr*m_hat*r_t*sqrt(1 - beta2^t)/(sqrt(v) + eps)
    else:               w = w - lr*m_hat

The threshold is torch's 5 or the paper's 4. The host forms ``rho_t`` and the rectification
``r_t`` in float64 (as torch forms them in Python floats); one pass reads ``w, g, m, v`` and
writes ``w, m, v``: Adam's traffic.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from . import gradient, torch_ops
from .adam import MomentConstants
from .base import Optimizer, row_step
from .registry import register
from .spec import BenchSetting, Spec
from .spec_spaces import Decades, Interval, OneOf, USUAL_BETA1, USUAL_BETA2
from .validation import flag, nonneg, unit

__all__ = ["RAdam"]

#: the least ``rho_t`` at which each convention takes the rectified step (exclusive)
THRESHOLDS = {"pytorch": 5.0, "paper": 4.0}


class RadamRow(NamedTuple):
    """The scalars of :func:`pytorch_rule` and :func:`paper_rule`: packed on the host, read by
    name in the kernel."""
    decay: float         #: 1 - lr*wd with decoupled_weight_decay, else 1
    wd: float            #: the weight decay added to the gradient (0 when decoupled)
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    b1: float
    one_minus_b1: float  #: 1 - beta1
    b2: float
    one_minus_b2: float  #: 1 - beta2
    eps: float
    lr: float
    bc1: float           #: 1 - beta1^t
    bc2s: float          #: (1 - beta2^t)**0.5
    rect: float          #: the rectification r_t, negative for the momentum step


@gradient.through('rescale')
def pytorch_rule(f):
    """torch.optim.RAdam's single-tensor update (torch 2.13, torch/optim/radam.py,
    ``_single_tensor_radam``) in torch's order of operations::

        w = w*(1 - lr*wd)                         (decoupled_weight_decay; else 1)
        g = clip(rs*grad, c) + wd*w               (coupled, when wd != 0)
        m = m.lerp(g, 1 - beta1);  v = v*beta2 + (1 - beta2)*g*g
        rectified:  w = w - ((m/bc1)*lr * (1/(sqrt(v) + eps))*bc2s)*r_t
        else:       w = w - (m/bc1)*lr

    (torch's ``bc2**0.5 / denom`` is ``denom.reciprocal()*bc2**0.5``, Tensor.__rtruediv__)."""
    zero, one = f(0), f(1)
    grad_of = torch_ops.gradient(f)
    lerp = torch_ops.lerp(f)
    square_avg = torch_ops.square_avg(f)

    def rule(w, grad, m, v, hp):
        p = RadamRow(*hp)
        w = w * p.decay
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        m = lerp(m, g, p.one_minus_b1)
        v = square_avg(v, g, p.b2, p.one_minus_b2)
        mh = m / p.bc1
        if p.rect >= zero:
            return w - ((mh * p.lr) * ((one / (math.sqrt(v) + p.eps)) * p.bc2s)) * p.rect, m, v
        return w - mh * p.lr, m, v
    return rule


@gradient.through('rescale')
def paper_rule(f):
    """Algorithm 2's lines 6-15 in the paper's order (reference.radam.step)."""
    zero = f(0)
    rescaled = gradient.rescaled(f)

    def rule(w, grad, m, v, hp):
        p = RadamRow(*hp)
        g = rescaled(grad, p.rescale, p.clip_bound)
        if p.wd != zero:  # only then, as the reference: 0*w is NaN for an overflowed weight
            g = g + p.wd * w
        w = p.decay * w
        v = p.b2 * v + p.one_minus_b2 * (g * g)
        m = p.b1 * m + p.one_minus_b1 * g
        mh = m / p.bc1
        if p.rect >= zero:
            return w - ((p.lr * mh) * p.rect) * (p.bc2s / (math.sqrt(v) + p.eps)), m, v
        return w - p.lr * mh, m, v
    return rule


def rectification(beta2, t, threshold):
    """``r_t`` of step ``t`` (Algorithm 2, lines 2, 9 and 12) in float64, as torch forms it in
    Python floats, where ``rho_t > threshold``; else -1.0 (the momentum step)."""
    rho_inf = 2 / (1 - beta2) - 1
    rho_t = rho_inf - 2 * t * (beta2 ** t) / (1 - beta2 ** t)
    if not rho_t > threshold:
        return -1.0
    return ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5


SPEC = Spec(
    name="radam", reference="reference.radam",
    conventions=("pytorch", "paper"), pytorch="pytorch", pytorch_form="lerp", torch="RAdam",
    torch_slots={"mean": "exp_avg", "var": "exp_avg_sq"},
    space={"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999),
           "epsilon": Decades(-10, -2), "decoupled_weight_decay": OneOf(False, True)},
    usual={"beta1": USUAL_BETA1, "beta2": USUAL_BETA2, "epsilon": Decades(-8, -3)},
    # the rectified step starts at t = 5 (paper) or 6 (torch): the oracle's cases run up to 8
    case_steps=8,
    # the hyperparameters rounded to float32, optax's epsilon and two easy mistakes (the other
    # threshold is the other convention, which verify names). torch's lerp (pytorch_form) is no variant here: its
    # rounding stays within the bound in both steps (the momentum step's weight has taken the
    # large gradient the lerp's error scales with; the rectified step, from beta2 > 0.77, keeps
    # that gradient in v and divides the error by it)
    variants=("hyper_f32", "eps_corrected", "eps_inside_root", "no_bias_correction"),
    record={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "decoupled_weight_decay": False},
    record_ulps=1,
    layouts=({},),
    trainer=({}, {"decoupled_weight_decay": True}),
    demo={"learning_rate": 0.01},
    bench=(BenchSetting("radam", {}, torch=("RAdam", {}), quick=True),),
)


@register
class RAdam(MomentConstants, Optimizer):
    """RAdam (Liu et al. 2020, Algorithm 2): Adam whose adaptive step is rectified by ``r_t``
    once the second moment's effective length ``rho_t`` passes a threshold, and plain momentum
    SGD before.

    * ``convention="pytorch"`` (the default): ``torch.optim.RAdam``, threshold 5, in torch's
      order of operations;
    * ``convention="paper"``: Algorithm 2 as printed, threshold 4 (epsilon added to
      ``sqrt(v)`` as the authors' code adds it).

    ``g = clip(rescale_grad*grad, clip_gradient) + wd*w``; ``decoupled_weight_decay=True``
    applies the decay to the weight instead, ``w*(1 - lr*wd)`` (torch's flag). State:
    ``(mean, var)``.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("radam", learning_rate=0.1)
        >>> w = np.zeros(2, np.float32); s = opt.create_state(0, w)
        >>> opt.update(0, w, np.array([2.0, -3.0], np.float32), s); w   # momentum: -lr*m_hat
        array([-0.2,  0.3], dtype=float32)
    """

    spec = SPEC

    domains = {"beta1": unit(), "beta2": unit(), "epsilon": nonneg(),
               "decoupled_weight_decay": flag()}

    def __init__(self, learning_rate=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 decoupled_weight_decay=False, **kwargs):
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.decoupled_weight_decay = decoupled_weight_decay
        super().__init__(learning_rate=learning_rate, **kwargs)

    def state_slots(self):
        return ("mean", "var")

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        constants = self._constants("_radam_constants", self._moment_constants)
        b1, b2 = constants["b1"], constants["b2"]
        decoupled = self.decoupled_weight_decay
        return (pytorch_rule if self.convention == "pytorch" else paper_rule), RadamRow(
            decay=1.0 - lr * wd if decoupled else 1.0, wd=0.0 if decoupled else wd,
            **constants, lr=lr, bc1=1 - b1 ** t, bc2s=(1 - b2 ** t) ** 0.5,
            rect=rectification(b2, t, THRESHOLDS[self.convention]))
