"""Schedule-Free SGD (``sgdschedulefree``; Defazio et al. 2024, "The Road Less Scheduled",
equations (1)-(3), its SGD form; reference.sgdschedulefree, docs/optimizers/sgdschedulefree.md).

paper (the one convention: MXNet never had it, torch.optim has none). The weight holds ``y``,
the state ``z``. With ``g = clip(rescale_grad*grad, c)`` and the host's float64 ``gamma_t`` and
``c = c_{t+1}`` (:func:`toolkit.optimizers.schedulefree.averaging`)::

    u = g + wd*y
    y = lerp(y, z, c) + gamma_t*(momentum*(1-c) - 1)*u
    z = z - gamma_t*u

in the order of operations of the authors' ``SGDScheduleFree`` (schedulefree 1.4.1), each line
rounded as torch rounds it (:mod:`.torch_ops`). One pass reads ``y, g, z`` and writes ``y, z``:
SGD with momentum's traffic.
"""
from __future__ import annotations

from typing import NamedTuple

from ..backends.jit import fma
from . import gradient, torch_ops
from .registry import register
from .schedulefree import ScheduleFree
from .spec import BenchSetting, Spec, TorchPeer
from .spec_spaces import Interval, OneOf
from .validation import unit

__all__ = ["SGDScheduleFree"]


class Row(NamedTuple):
    """The scalars of :func:`paper_rule`: packed on the host, read by name in the kernel."""
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    wd: float            #: the decay added to the gradient, at y
    c: float             #: c_{t+1}, the weight of z in the average
    y_step: float        #: gamma_t*(momentum*(1 - c) - 1)
    neg_lr: float        #: -gamma_t


@gradient.through('rescale')
def paper_rule(f):
    """The SGD form's step on the stored ``(y, z)`` (reference.sgdschedulefree.step), in the
    authors' order of operations: ``grad.add_(y, alpha=wd)``; ``y.lerp_(z, c)``;
    ``y.add_(u, alpha=y_step)``; ``z.sub_(u, alpha=gamma_t)``."""
    zero = f(0)
    rescaled = gradient.rescaled(f)
    lerp = torch_ops.lerp(f)

    def rule(y, grad, z, hp):
        p = Row(*hp)
        u = rescaled(grad, p.rescale, p.clip_bound)
        if p.wd != zero:
            u = fma(p.wd, y, u)
        y_new = fma(p.y_step, u, lerp(y, z, p.c))
        return y_new, fma(p.neg_lr, u, z)
    return rule


SPEC = Spec(
    name="sgdschedulefree", reference="reference.sgdschedulefree",
    conventions=("paper",), pytorch=None, torch=None,
    # the authors' implementation, schedulefree 1.4.1, schedulefree/sgd_schedulefree.py,
    # SGDScheduleFree.__init__ (foreach: how torch runs the update)
    torch_peer=TorchPeer("SGDScheduleFree", "schedulefree.SGDScheduleFree (schedulefree "
                                            "1.4.1, the authors' code)", (
        ("lr", 1.0), ("momentum", 0.9), ("weight_decay", 0), ("warmup_steps", 0),
        ("r", 0.0), ("weight_lr_power", 2), ("foreach", True))),
    torch_slots={"z": "z"},
    space={"momentum": Interval(0.05, 0.99), "warmup_steps": OneOf(0, 3, 10),
           "r": OneOf(0.0, Interval(0.0, 2.0)), "weight_lr_power": OneOf(2.0, 0.0, 1.0)},
    # the paper's SGD runs use momentum 0.9 (0.95 for some); warmup of a few percent
    usual={"momentum": Interval(0.5, 0.99)},
    variants=("hyper_f32", "warmup_lag", "warmup_f32"),
    record={"momentum": 0.9, "warmup_steps": 2, "r": 0.5, "weight_lr_power": 2.0},
    record_ulps=1,
    layouts=({},),
    trainer=({}, {"warmup_steps": 2, "r": 1.0}),
    demo={"learning_rate": 0.5},
    bench=(BenchSetting("sgdschedulefree", {}, quick=True),),
)


@register
class SGDScheduleFree(ScheduleFree):
    """Schedule-Free SGD (Defazio et al. 2024, its SGD form), under its one convention
    ``"paper"``. The weight is ``y``, where the gradient is taken; the state is ``z``, starting
    as a copy of the weight. Each step::

        gamma_t = lr*min(1, t/warmup_steps)
        c       = t^r*lr_max^p / sum of those so far        (lr_max: the largest gamma yet,
                                                             p: weight_lr_power)
        u = g + wd*y
        y = (1-c)*y + c*z + gamma_t*(momentum*(1-c) - 1)*u;  z = z - gamma_t*u

    with ``g = clip(rescale_grad*grad, clip_gradient)``: the authors' ``SGDScheduleFree``. The
    average ``x`` is the point to evaluate: :meth:`to_eval`/:meth:`to_train`,
    ``Trainer.eval()``/``train()``, ``toolkit.torch``'s ``eval()``/``train()``, as for
    :class:`~toolkit.optimizers.adamwschedulefree.AdamWScheduleFree`.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("sgdschedulefree", learning_rate=0.1)
        >>> w = np.ones(2); s = opt.create_state(0, w)
        >>> opt.update(0, w, np.array([1.0, -1.0]), s); w.round(6)  # c = 1: y is z after one step
        array([0.9, 1.1])
        >>> opt.update(0, w, np.array([1.0, -1.0]), s); w.round(6), s.round(6)
        (array([0.845, 1.155]), array([0.8, 1.2]))
        >>> opt.to_eval(w, s); w.round(6)   # x: the mean of the z's (a constant rate)
        array([0.85, 1.15])
    """

    spec = SPEC
    interpolation = "momentum"

    domains = {"momentum": unit()}

    def __init__(self, learning_rate=1.0, momentum=0.9, warmup_steps=0, r=0.0,
                 weight_lr_power=2.0, **kwargs):
        self.momentum = momentum
        super().__init__(warmup_steps=warmup_steps, r=r, weight_lr_power=weight_lr_power,
                         learning_rate=learning_rate, **kwargs)

    def check_relations(self):
        if self.momentum <= 0.0:
            raise ValueError(f"{self.named('momentum')} must be in (0, 1), got "
                             f"{self.momentum!r}: it is the "
                             "interpolation y = (1 - momentum)*z + momentum*x (the authors' "
                             "SGDScheduleFree refuses 0 too)")

    def state_slots(self):
        return ("z",)

    def kernel_row(self, t, lr, wd, sparse=None, host=None):
        """The row of a step at count ``t`` of an index whose ``(lr_max, weight_sum)`` after
        the step are ``host`` (``host_next``)."""
        g, c = self._averaged(t, lr, host)
        return paper_rule, Row(rescale=self.rescale_grad, clip_bound=self._clip_bound(), wd=wd,
                               c=c, y_step=g * (self.momentum * (1.0 - c) - 1.0), neg_lr=-g)
