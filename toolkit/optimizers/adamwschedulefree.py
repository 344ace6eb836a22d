"""Schedule-Free AdamW (``adamwschedulefree``; Defazio et al. 2024, "The Road Less Scheduled",
Algorithm 1; reference.adamwschedulefree, docs/optimizers/adamwschedulefree.md).

paper (the one convention: MXNet never had it, torch.optim has none). The weight holds ``y``,
the point the gradient is taken at; the state holds ``z`` and ``v``. With
``g = clip(rescale_grad*grad, c)`` and the host's float64 ``gamma_t`` and ``c = c_{t+1}``
(:func:`toolkit.optimizers.schedulefree.averaging`)::

    v = beta2*v + (1-beta2)*g*g
    u = g/(sqrt(v/bc2) + eps) + wd*y          (bc2 = 1 with lr_bias_correction, else 1-beta2^t)
    y = lerp(y, z, c) + gamma_t*(beta1*(1-c) - 1)*u
    z = z - gamma_t*u

in the order of operations of the authors' ``AdamWScheduleFree``/``AdamWScheduleFreePaper``
(schedulefree 1.4.1), each line rounded as torch rounds it (:mod:`.torch_ops`). One pass reads
``y, g, z, v`` and writes ``y, z, v``: Adam's traffic. :meth:`AdamWScheduleFree.to_eval` and
:meth:`~AdamWScheduleFree.to_train` move the weight to the average ``x`` and back.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from ..backends.jit import fma
from . import gradient, torch_ops
from .registry import register
from .schedulefree import ScheduleFree
from .spec import BenchSetting, Spec, TorchPeer
from .spec_spaces import Decades, Interval, OneOf
from .validation import flag, nonneg, unit

__all__ = ["AdamWScheduleFree"]


class Row(NamedTuple):
    """The scalars of :func:`paper_rule`: packed on the host, read by name in the kernel."""
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    b2: float
    one_minus_b2: float  #: 1 - beta2
    bc2: float           #: 1 - beta2^t; 1 with lr_bias_correction (the root is in gamma_t)
    eps: float
    wd: float            #: the decay added to the normalised gradient, at y
    c: float             #: c_{t+1}, the weight of z in the average
    y_step: float        #: gamma_t*(beta1*(1 - c) - 1)
    neg_lr: float        #: -gamma_t


@gradient.through('rescale')
def paper_rule(f):
    """Algorithm 1's step on the stored ``(y, z)`` (reference.adamwschedulefree.step), in the
    authors' order of operations: ``exp_avg_sq.mul_(beta2).addcmul_(g, g, 1-beta2)``;
    ``g/(sqrt(v/bc2) + eps)``; ``add_(y, alpha=wd)``; ``y.lerp_(z, c)``;
    ``y.add_(u, alpha=y_step)``; ``z.sub_(u, alpha=gamma_t)``."""
    zero = f(0)
    rescaled = gradient.rescaled(f)
    square_avg = torch_ops.square_avg(f)
    lerp = torch_ops.lerp(f)

    def rule(y, grad, z, v, hp):
        p = Row(*hp)
        g = rescaled(grad, p.rescale, p.clip_bound)
        v = square_avg(v, g, p.b2, p.one_minus_b2)
        u = g / (math.sqrt(v / p.bc2) + p.eps)
        if p.wd != zero:
            u = fma(p.wd, y, u)
        y_new = fma(p.y_step, u, lerp(y, z, p.c))
        return y_new, fma(p.neg_lr, u, z), v
    return rule


SPEC = Spec(
    name="adamwschedulefree", reference="reference.adamwschedulefree",
    conventions=("paper",), pytorch=None, torch=None,
    # the authors' implementation, schedulefree 1.4.1, schedulefree/adamwschedulefree.py,
    # AdamWScheduleFree.__init__ (foreach: how torch runs the update; the bias correction
    # inside the root: lr_bias_correction=False, its defaults below)
    torch_peer=TorchPeer("AdamWScheduleFree", "schedulefree.AdamWScheduleFree (schedulefree "
                                              "1.4.1, the authors' code)", (
        ("lr", 0.0025), ("betas", (0.9, 0.999)), ("eps", 1e-8), ("weight_decay", 0),
        ("warmup_steps", 0), ("r", 0.0), ("weight_lr_power", 2.0), ("foreach", True)),
        form=(("lr_bias_correction", False),)),
    torch_slots={"z": "z", "var": "exp_avg_sq"},
    space={"beta1": Interval(0.05, 0.99), "beta2": Interval(0.0, 0.9999),
           "epsilon": Decades(-10, -2), "warmup_steps": OneOf(0, 3, 10),
           "r": OneOf(0.0, Interval(0.0, 2.0)), "weight_lr_power": OneOf(2.0, 0.0, 1.0),
           "lr_bias_correction": OneOf(True, False)},
    # the paper trains with beta1 0.9 (0.95 for some tasks) and beta2 0.999 (0.95 to 0.9999),
    # epsilon 1e-8; warmup of a few percent of the steps
    usual={"beta1": Interval(0.5, 0.99), "beta2": Interval(0.9, 0.9999),
           "epsilon": Decades(-10, -6)},
    variants=("hyper_f32", "constants_in_dtype", "warmup_lag", "warmup_f32"),
    record={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "warmup_steps": 2, "r": 0.5,
            "weight_lr_power": 2.0, "lr_bias_correction": True}, record_ulps=1,
    layouts=({},),
    trainer=({}, {"lr_bias_correction": False, "warmup_steps": 2}),
    demo={"learning_rate": 0.01},
    bench=(BenchSetting("adamwschedulefree", {}, quick=True),),
)


@register
class AdamWScheduleFree(ScheduleFree):
    """Schedule-Free AdamW (Defazio et al. 2024, Algorithm 1), under its one convention
    ``"paper"``. The weight is ``y``, where the gradient is taken; the state is ``(z, var)``,
    ``z`` starting as a copy of the weight. Each step::

        gamma_t = lr*min(1, t/warmup_steps)*sqrt(1 - beta2^t)      (the root: lr_bias_correction)
        c       = t^r*lr_max^p / sum of those so far               (lr_max: the largest gamma yet,
                                                                    p: weight_lr_power)
        v = beta2*v + (1-beta2)*g^2;  u = g/(sqrt(v) + epsilon) + wd*y
        y = (1-c)*y + c*z + gamma_t*(beta1*(1-c) - 1)*u;  z = z - gamma_t*u

    with ``g = clip(rescale_grad*grad, clip_gradient)``. ``lr_bias_correction=False`` is the
    authors' later default (``schedulefree.AdamWScheduleFree``): ``gamma_t`` without the root
    and ``u = g/(sqrt(v/(1-beta2^t)) + epsilon) + wd*y``. ``lr_max`` and the sum of the weights
    are kept per index on the host, in float64 (``opt.averaging[index]``), as the authors keep
    them per parameter group.

    The point to evaluate (and to save) is the average ``x``: :meth:`to_eval` moves a weight
    from ``y`` to ``x`` in place, :meth:`to_train` back (the authors' ``eval()`` and
    ``train()``); ``Trainer.eval()``/``Trainer.train()`` do so for every parameter.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("adamwschedulefree", learning_rate=0.1)
        >>> w = np.ones(2); s = opt.create_state(0, w)
        >>> opt.update(0, w, np.array([1.0, -1.0]), s); w.round(6)  # c = 1: y is z after one step
        array([0.9, 1.1])
        >>> opt.update(0, w, np.array([1.0, -1.0]), s); w.round(6), s[0].round(6)
        (array([0.83001, 1.16999]), array([0.8, 1.2]))
        >>> opt.to_eval(w, s); w.round(6)   # x: the z's averaged with weights gamma_t^2
        array([0.833344, 1.166656])
    """

    spec = SPEC

    domains = {"beta1": unit(), "beta2": unit(), "epsilon": nonneg(),
               "lr_bias_correction": flag()}

    def __init__(self, learning_rate=0.0025, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 warmup_steps=0, r=0.0, weight_lr_power=2.0, lr_bias_correction=True,
                 **kwargs):
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.lr_bias_correction = lr_bias_correction
        super().__init__(warmup_steps=warmup_steps, r=r, weight_lr_power=weight_lr_power,
                         learning_rate=learning_rate, **kwargs)

    def state_slots(self):
        return ("z", "var")

    def _hyper(self):
        return dict(super()._hyper(), beta2=self.beta2,
                    lr_bias_correction=self.lr_bias_correction)

    def kernel_row(self, t, lr, wd, sparse=None, host=None):
        """The row of a step at count ``t`` of an index whose ``(lr_max, weight_sum)`` after
        the step are ``host`` (``host_next``)."""
        g, c = self._averaged(t, lr, host)
        b1, b2 = self.beta1, self.beta2
        return paper_rule, Row(
            rescale=self.rescale_grad, clip_bound=self._clip_bound(), b2=b2,
            one_minus_b2=1.0 - b2, bc2=1.0 if self.lr_bias_correction else 1.0 - b2 ** t,
            eps=self.epsilon, wd=wd, c=c, y_step=g * (b1 * (1.0 - c) - 1.0), neg_lr=-g)
