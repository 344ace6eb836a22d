"""ADOPT (``adopt``; Taniguchi et al. 2024, Algorithm 2, ADOPT with clipping; reference.adopt,
docs/optimizers/adopt.md).

paper (the one convention: MXNet never had ADOPT, torch.optim has none), with
``g = clip(rescale_grad*grad, c) (+ wd*w unless decouple)``::

    t = 1:  v = g*g                                   (the weight does not move)
    t > 1:  m = beta1*m + (1-beta1)*clip(g/max(sqrt(v), eps), (t-1)^(1/4))
            w = w - lr*m          (decouple: w*(1 - lr*wd) first)
            v = beta2*v + (1-beta2)*g*g

One pass reads ``w, g, m, v`` and writes ``w, m, v``: Adam's traffic. The host forms the clip
bound ``(t-1)^(1/4)`` in float64.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from . import gradient
from .adam import MomentConstants
from .base import Optimizer, row_step
from .registry import register
from .spec import BenchSetting, Spec, TorchPeer
from .spec_spaces import Decades, Interval, OneOf
from .validation import flag, nonneg, unit

__all__ = ["ADOPT"]


class AdoptRow(NamedTuple):
    """The scalars of :func:`paper_rule`: packed on the host, read by name in the kernel."""
    lr: float
    wd: float            #: the weight decay added to the gradient (0 with decouple)
    decay: float         #: 1 - lr*wd with decouple (from the second step), else 1
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    b1: float
    one_minus_b1: float  #: 1 - beta1
    b2: float
    one_minus_b2: float  #: 1 - beta2
    eps: float
    clip: float          #: (t-1)^(1/4), negative for no clipping
    first: float         #: nonzero on the first step: v = g*g only


@gradient.through('rescale')
def paper_rule(f):
    """Algorithm 2's lines 2 and 5-7 (reference.adopt.step)."""
    zero = f(0)
    rescaled = gradient.rescaled(f)

    def rule(w, grad, m, v, hp):
        p = AdoptRow(*hp)
        g = rescaled(grad, p.rescale, p.clip_bound)
        if p.wd != zero:  # only then, as the reference and the authors' code: 0*w is NaN for
            g = g + p.wd * w  # a weight that overflowed, a gradient of 0*w is not

        if p.first != zero:
            return w, m, g * g
        normed = g / max(math.sqrt(v), p.eps)
        if p.clip >= zero:
            normed = min(max(normed, -p.clip), p.clip)
        m = p.b1 * m + p.one_minus_b1 * normed
        return p.decay * w - p.lr * m, m, p.b2 * v + p.one_minus_b2 * (g * g)
    return rule


SPEC = Spec(
    name="adopt", reference="reference.adopt",
    conventions=("paper",), pytorch=None, torch=None,
    # the authors' implementation, torch-adopt 0.1.0, adopt/adopt.py, ADOPT.__init__ (its
    # keyword-only foreach/capturable/differentiable/fused are how torch runs the update)
    torch_peer=TorchPeer("ADOPT", "adopt.ADOPT (torch-adopt 0.1.0, the authors' code)", (
        ("lr", 1e-3), ("betas", (0.9, 0.9999)), ("eps", 1e-6),
        ("clip_lambda", "step**0.25"), ("weight_decay", 0.0), ("decouple", False))),
    torch_slots={"mean": "exp_avg", "var": "exp_avg_sq"},
    space={"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.99999),
           "epsilon": Decades(-10, -2), "use_clipping": OneOf(True, False),
           "decouple": OneOf(False, True)},
    # Taniguchi et al. 2024 train with beta1 0.9 and beta2 0.9999 (and show convergence for any
    # beta2); epsilon 1e-6 by default
    usual={"beta1": Interval(0.5, 0.99), "beta2": Interval(0.9, 0.99999),
           "epsilon": Decades(-8, -4)},
    # the hyperparameters rounded to float32, Adam's order of the moments, and a decoupled
    # decay on the first step
    variants=("hyper_f32", "var_first", "decay_first_step"),
    record={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6, "use_clipping": True,
            "decouple": False}, record_ulps=1,
    layouts=({},),
    trainer=({}, {"decouple": True}),
    demo={"learning_rate": 0.01},
    bench=(BenchSetting("adopt", {}, quick=True),),
)


@register
class ADOPT(MomentConstants, Optimizer):
    """ADOPT (Taniguchi et al. 2024, Algorithm 2), under its one convention ``"paper"``.

    * first step: ``v = g*g`` (the weight does not move)
    * then: ``m = beta1*m + (1-beta1)*clip(g/max(sqrt(v), epsilon), (t-1)^(1/4));
      w = w - lr*m;  v = beta2*v + (1-beta2)*g^2``

    with ``g = clip(rescale_grad*grad, clip_gradient) + wd*w``; ``decouple=True`` applies the
    weight decay to the weight instead (``w*(1 - lr*wd)`` before the update, as the authors'
    ``decouple``); ``use_clipping=False`` drops the clip (Algorithm 1). State: ``(mean, var)``.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("adopt", learning_rate=0.1)
        >>> w = np.zeros(2, np.float32); s = opt.create_state(0, w)
        >>> opt.update(0, w, np.array([2.0, -3.0], np.float32), s); w    # the first step: v only
        array([0., 0.], dtype=float32)
        >>> opt.update(0, w, np.array([2.0, -3.0], np.float32), s); w
        array([-0.01,  0.01], dtype=float32)
    """

    spec = SPEC

    domains = {"beta1": unit(), "beta2": unit(), "epsilon": nonneg(),
               "use_clipping": flag(), "decouple": flag()}

    def __init__(self, learning_rate=1e-3, beta1=0.9, beta2=0.9999, epsilon=1e-6,
                 use_clipping=True, decouple=False, **kwargs):
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.use_clipping, self.decouple = use_clipping, decouple
        super().__init__(learning_rate=learning_rate, **kwargs)

    def state_slots(self):
        return ("mean", "var")

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        # Adam's moment constants (unrounded: "paper" rounds no hyperparameter)
        constants = self._constants("_adopt_constants", self._moment_constants)
        first = t == 1
        decoupled = self.decouple and not first
        return paper_rule, AdoptRow(
            lr=lr, wd=0.0 if self.decouple else wd,
            decay=1.0 - lr * wd if decoupled else 1.0, **constants,
            clip=(float(t - 1) ** 0.25) if self.use_clipping else -1.0,
            first=1.0 if first else 0.0)
