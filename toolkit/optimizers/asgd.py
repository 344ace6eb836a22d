"""ASGD (``asgd``; averaged SGD, Polyak and Juditsky 1992, with Bottou's decreasing step size,
as torch.optim.ASGD documents it; reference.asgd, docs/optimizers/asgd.md).

pytorch (the one convention: MXNet never had ASGD, torch ships it), with
``g = clip(rescale_grad*grad, c) + wd*w`` (torch's coupled weight decay)::

    w = w*(1 - lambd*eta_t) - eta_t*g
    ax = ax + (w - ax)*mu_t   (mu_t != 1);   ax = w   (mu_t == 1)

``eta_t = lr/(1 + lambd*lr*(t-1))^alpha`` and ``mu_t = 1/max(1, t-1-t0)`` (``lr`` and 1 on the
first step) are formed on the host in float64 and held in float32, as torch holds them (state
tensors of its default dtype). One pass reads ``w, g, ax`` and writes ``w, ax``: SGD with
momentum's traffic.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import gradient, torch_ops
from ..backends.jit import fma
from .base import Optimizer, row_step
from .registry import register
from .spec import BenchSetting, Spec
from .spec_spaces import Decades, Interval, OneOf
from .validation import nonneg

__all__ = ["ASGD"]


class AsgdRow(NamedTuple):
    """The scalars of :func:`pytorch_rule`: packed on the host, read by name in the kernel."""
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    wd: float            #: torch's coupled weight decay
    decay: float         #: 1 - lambd*eta
    eta: float           #: the step size eta_t (a float32 value)
    mu: float            #: the averaging weight mu_t (a float32 value)
    average: float       #: nonzero where mu_t != 1 (else ax = w)


@gradient.through('rescale')
def pytorch_rule(f):
    """torch.optim.ASGD's single-tensor update (torch 2.13, torch/optim/asgd.py,
    ``_single_tensor_asgd``) in torch's order of operations::

        g = clip(rs*grad, c) (+ wd*w, fused, where wd != 0)
        w = fma(-eta, g, w*decay)
        ax = ax + (w - ax)*mu   (average);   ax = w   (else)
    """
    zero = f(0)
    grad_of = torch_ops.gradient(f)

    def rule(w, grad, ax, hp):
        p = AsgdRow(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        w = fma(-p.eta, g, w * p.decay)
        if p.average != zero:
            return w, ax + (w - ax) * p.mu
        return w, w
    return rule


def schedule(t, lr, lambd, alpha, t0):
    """``(eta_t, mu_t)`` as torch holds them: formed in Python floats (torch at the end of the
    step before), held in float32."""
    if t == 1:
        eta, mu = lr, 1.0
    else:
        s = float(t - 1)
        eta, mu = lr / ((1 + lambd * lr * s) ** alpha), 1 / max(1, s - t0)
    return float(np.float32(eta)), float(np.float32(mu))


def _torch_next(k):
    """torch's per-parameter ``eta`` (``k = 0``) or ``mu`` (1) after step ``t``: those of step
    ``t + 1``, from a param group's options (a ``toolkit.torch`` state_dict writes them)."""
    def entry(group, t):
        return schedule(int(t) + 1, float(group["lr"]), float(group["lambd"]),
                        float(group["alpha"]), float(group["t0"]))[k]
    return entry


SPEC = Spec(
    name="asgd", reference="reference.asgd",
    conventions=("pytorch",), pytorch="pytorch", pytorch_form="scalars_f32", torch="ASGD",
    torch_slots={"ax": "ax"},
    torch_derived={"eta": _torch_next(0), "mu": _torch_next(1)},
    # t0 small enough that the averaging begins within the oracle's steps, or torch's 1e6
    space={"lambd": OneOf(0.0, Decades(-6, -1)), "alpha": Interval(0.0, 1.0),
           "t0": OneOf(0.0, 1.0, 2.0, 1e6)},
    # Bottou's and torch's lambd 1e-4 and alpha 0.75, about which people stay
    usual={"lambd": Decades(-6, -2), "alpha": Interval(0.5, 1.0)},
    # the hyperparameters rounded to float32, eta and mu held in float32 (torch's, in float64
    # too: the kernels' pytorch_form), and the decay of the weight left out
    variants=("hyper_f32", "scalars_f32", "no_decay"),
    record={"lambd": 1e-2, "alpha": 0.75, "t0": 1.0},
    layouts=({},),
    trainer=({}, {"t0": 0.0}),
    demo={"learning_rate": 0.1},
    bench=(BenchSetting("asgd", {"t0": 0.0}, torch=("ASGD", {"t0": 0.0}), quick=True),),
)


@register
class ASGD(Optimizer):
    """ASGD (averaged SGD), torch.optim.ASGD's update, under its one convention ``"pytorch"``:
    an SGD step with the decreasing step size ``eta_t = lr/(1 + lambd*lr*(t-1))^alpha`` and
    the decay ``w*(1 - lambd*eta_t)``, and ``ax``, the average of the weights from step
    ``t0 + 2`` on (the weight itself up to it), in the state. ``wd`` is torch's ``weight_decay``, added to
    the gradient. State: ``ax``.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("asgd", learning_rate=0.1, lambd=0.0, t0=0.0)
        >>> w = np.zeros(2, np.float32); s = opt.create_state(0, w)
        >>> for _ in range(3):
        ...     opt.update(0, w, np.array([1.0, -2.0], np.float32), s)
        >>> w, s                   # three steps of 0.1; ax averages the last two
        (array([-0.3,  0.6], dtype=float32), array([-0.25,  0.5 ], dtype=float32))
    """

    spec = SPEC

    domains = {"lambd": nonneg(), "alpha": nonneg(), "t0": nonneg()}

    def __init__(self, learning_rate=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, **kwargs):
        self.lambd, self.alpha, self.t0 = lambd, alpha, t0
        super().__init__(learning_rate=learning_rate, **kwargs)

    def state_slots(self):
        return ("ax",)

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        r = self._rounded
        eta, mu = schedule(t, lr, self.lambd, self.alpha, self.t0)
        return pytorch_rule, AsgdRow(
            rescale=r(self.rescale_grad), clip_bound=self._clip_bound(), wd=wd,
            decay=1 - self.lambd * eta, eta=eta, mu=mu, average=1.0 if mu != 1.0 else 0.0)
