"""Nadam (MXNet ``nadam``; Dozat 2016). Convention "mxnet" only: see below.

mxnet (Python ops, MXNet 1.9.1 python/mxnet/optimizer/optimizer.py:1995-2028;
docs/optimizers/nadam.md)::

    mu_t = beta1*(1 - 0.5*0.96^(t*schedule_decay));  mu_t1 = beta1*(1 - 0.5*0.96^((t+1)*schedule_decay))
    m_schedule = m_schedule*mu_t;  ms_next = m_schedule*mu_t1      # one scalar for ALL indices
    g = clip(rescale_grad*grad + wd*w, c);  m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g
    m_bar = (1-mu_t)*g/(1-m_schedule) + mu_t1*m/(1-ms_next)
    w = w - lr*m_bar/(sqrt(v/(1-beta2^t)) + eps)

The guide's Nadam (guide lines 179-183) evaluates the gradient at two different points in one
step (``w_i + beta1*v_i`` and ``w_i``), so it is not an optimizer step from one gradient:
``reference.nadam.step_lookahead`` computes it with a gradient function, and
``convention="guide"`` is refused here.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from . import gradient
from .base import Optimizer
from .registry import register
from .spaces import Decades, Interval, OneOf, USUAL_BETA1, USUAL_BETA2
from .spec import BenchSetting, Spec
from .validation import nonneg, unit

__all__ = ["Nadam"]


class Row(NamedTuple):
    """The scalars of :func:`mxnet_rule`: packed on the host, read by name in the kernel."""
    lr: float
    wd: float
    rs: float        #: rescale_grad
    c: float         #: clip_gradient, negative for none
    b1: float
    omb1: float      #: 1 - beta1
    b2: float
    omb2: float      #: 1 - beta2
    eps: float
    den_g: float     #: 1 - m_schedule
    den_m: float     #: 1 - m_schedule*mu_{t+1}
    den_v: float     #: 1 - beta2^t
    one_m_mu: float  #: 1 - mu_t
    mu_next: float   #: mu_{t+1}


def mxnet_rule(f):
    grad_of = gradient.decayed_then_clipped(f)

    def rule(w, grad, m, v, hp):
        p = Row(*hp)
        g = grad_of(grad, w, p.rs, p.wd, p.c)
        m = p.b1 * m + p.omb1 * g
        v = p.b2 * v + p.omb2 * (g * g)
        m_bar = p.one_m_mu * (g / p.den_g) + p.mu_next * (m / p.den_m)
        return w - p.lr * m_bar / (math.sqrt(v / p.den_v) + p.eps), m, v
    return rule


SPEC = Spec(  # everything the toolkit knows about it (toolkit/optimizers/spec.py)
    name="nadam", reference="reference.nadam",
    conventions=("mxnet",),
    pytorch="mxnet", torch="NAdam",
    torch_slots={"m": "exp_avg", "v": "exp_avg_sq"},
    space={"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999),
           "epsilon": Decades(-10, -2), "schedule_decay": OneOf(0.004, Interval(0.0, 0.1))},
    # betas and epsilon as Adam's (Dozat 2016; MXNet, torch.optim.NAdam, optax: 0.9, 0.999,
    # 1e-8; Keras 1e-7); schedule_decay: 0.004 (Dozat, MXNet, torch's momentum_decay, Keras),
    # a decade around it at most
    usual={"beta1": USUAL_BETA1, "beta2": USUAL_BETA2, "epsilon": Decades(-8, -3),
           "schedule_decay": Interval(0.001, 0.01)},
    # reference.nadam.FORMS; no hyper_f32: it applies to conventions other than MXNet's, and
    # NAdam has none (its "pytorch" convention is MXNet's equations)
    variants=("hyper_f64", "constants_in_dtype", "lerp", "schedule_product_f32"),
    record={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-08,
            "schedule_decay": 0.004}, record_ulps=1,
    layouts=({},),
    trainer=({},),
    demo={"learning_rate": 0.01},
    bench=(BenchSetting("nadam", {}, torch=("NAdam", {}), quick=True),),
)


@register
class Nadam(Optimizer):
    """Nadam (MXNet ``nadam``): Adam with Nesterov momentum and Dozat's warming schedule.

    ``mu_t = beta1*(1 - 0.5*0.96^(t*schedule_decay))``; ``m_schedule`` is the running product of
    the ``mu_t`` and, as in MXNet, is **one scalar per optimizer, shared by all indices**, so it
    depends on how many parameters are updated and in what order. Then
    ``w = w - lr*((1-mu_t)*g/(1-m_schedule) + mu_{t+1}*m/(1-m_schedule*mu_{t+1})) /
    (sqrt(v/(1-beta2^t)) + epsilon)`` with ``g = clip(rs*grad + wd*w, c)``. State: ``(m, v)``.

    Only convention "mxnet": the guide's Nadam needs gradients at two points per step
    (``reference.nadam.step_lookahead`` evaluates it with a gradient function).

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.Nadam(learning_rate=0.001)
        >>> w = np.zeros(2); s = opt.create_state(0, w); opt.update(0, w, np.ones(2), s)
        >>> bool(opt.m_schedule < 1.0)
        True
    """

    spec = SPEC
    mxnet_kernel = False

    domains = {"beta1": unit(), "beta2": unit(), "epsilon": nonneg(),
               "schedule_decay": nonneg()}

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 schedule_decay=0.004, **kwargs):
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.schedule_decay = schedule_decay
        # the running product starts at 1 once (MXNet's __init__): not in check_relations,
        # which runs again after every later assignment (a Trainer sets rescale_grad each step)
        self.m_schedule = 1.0
        super().__init__(learning_rate=learning_rate, **kwargs)

    def check_relations(self):
        if self.convention == "guide":
            raise ValueError("convention='guide' is not available for Nadam: the guide's "
                             "equations need the gradient at two points per step; use "
                             "reference.nadam.step_lookahead with a gradient function, or "
                             "convention='mxnet'")

    def state_slots(self):
        return ("m", "v")

    def reference_hyper(self):
        return {"beta1": self.beta1, "beta2": self.beta2, "epsilon": self.epsilon,
                "schedule_decay": self.schedule_decay}

    def host_state(self):
        return {"m_schedule": self.m_schedule}, {}

    def check_host_state(self, data, host_arrays):
        m = data["m_schedule"]
        if set(data) != {"m_schedule"} or host_arrays or not isinstance(m, float) or \
                not 0.0 <= m <= 1.0:   # a product of momentum factors in [0, 1), from 1.0
            raise ValueError(f"Nadam's host state must be one m_schedule in [0, 1], got {data}")

        def commit():
            self.m_schedule = m
        return commit

    def _reference_extra(self, index, weight=None):
        return {"m_schedule": self.m_schedule}

    def _reference_store_extra(self, index, new_state, weight):
        self.m_schedule = float(new_state["m_schedule"])

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        b1, b2, sd = self.beta1, self.beta2, self.schedule_decay
        mu_t = b1 * (1.0 - 0.5 * 0.96 ** (t * sd))
        mu_t1 = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * sd))
        m_schedule = self.m_schedule * mu_t
        ms_next = m_schedule * mu_t1
        self._run_rule(mxnet_rule, weight, grad, state,
                       Row(lr=lr, wd=wd, rs=self.rescale_grad, c=self._clip_bound(), b1=b1,
                           omb1=1.0 - b1, b2=b2, omb2=1.0 - b2, eps=self.epsilon,
                           den_g=1.0 - m_schedule, den_m=1.0 - ms_next, den_v=1.0 - b2 ** t,
                           one_m_mu=1.0 - mu_t, mu_next=mu_t1))
        self.m_schedule = m_schedule
