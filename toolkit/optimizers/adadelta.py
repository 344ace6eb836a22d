"""AdaDelta (MXNet ``adadelta``; guide lines 137-139). The learning rate is not used.

mxnet (Python ops, MXNet 1.9.1 python/mxnet/optimizer/optimizer.py:1801-1823; weight decay
decoupled and not scaled by lr; docs/optimizers/adadelta.md)::

    g = clip(rescale_grad*grad, c);  acc_g = rho*acc_g + (1-rho)*g*g
    delta = sqrt(acc_delta + eps)/sqrt(acc_g + eps)*g;  acc_delta = rho*acc_delta + (1-rho)*delta*delta
    w = w - (delta + wd*w)

guide (``E[dw^2]`` accumulates the actual weight change)::

    G = clip(rescale_grad*grad, c) + wd*w;  acc_g = rho*acc_g + (1-rho)*G*G
    w_new = w - sqrt(acc_delta + eps)/sqrt(acc_g + eps)*G;  acc_delta = rho*acc_delta + (1-rho)*(w_new - w)^2
"""
from __future__ import annotations

import math
from typing import NamedTuple

from ..backends.jit import fma
from . import gradient, torch_ops
from .base import Optimizer, row_step
from .registry import register
from .spec_spaces import Decades, Interval
from .spec import BenchSetting, Spec
from .validation import nonneg, unit

__all__ = ["AdaDelta"]


class Row(NamedTuple):
    """The scalars of :func:`mxnet_rule` and :func:`guide_rule` (no learning rate): packed on
    the host, read by name in the kernel."""
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    rho: float
    omrho: float       #: 1 - rho
    eps: float


@gradient.through('rescale')
def mxnet_rule(f):
    grad_of = gradient.rescaled(f)

    def rule(w, grad, acc_g, acc_delta, hp):
        p = Row(*hp)
        g = grad_of(grad, p.rescale, p.clip_bound)
        acc_g = p.rho * acc_g + p.omrho * g * g
        delta = math.sqrt(acc_delta + p.eps) / math.sqrt(acc_g + p.eps) * g
        acc_delta = p.rho * acc_delta + p.omrho * delta * delta
        return w - (delta + p.wd * w), acc_g, acc_delta
    return rule


@gradient.through('rescale')
def guide_rule(f):
    grad_of = gradient.clipped_then_decayed(f)

    def rule(w, grad, acc_g, acc_delta, hp):
        p = Row(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        acc_g = p.rho * acc_g + p.omrho * g * g
        w_new = w - math.sqrt(acc_delta + p.eps) / math.sqrt(acc_g + p.eps) * g
        dw = w_new - w
        return w_new, acc_g, p.rho * acc_delta + p.omrho * (dw * dw)
    return rule


class PytorchRow(NamedTuple):
    """The scalars of :func:`pytorch_rule`."""
    nlr: float         #: -lr (torch's lr: AdaDelta's learning rate enters under "pytorch" only)
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    rho: float
    omrho: float       #: 1 - rho
    eps: float


@gradient.through('rescale')
def pytorch_rule(f):
    """torch.optim.Adadelta's single-tensor update (torch 2.13, torch/optim/adadelta.py,
    ``_single_tensor_adadelta``; its documented algorithm), in torch's order of operations::

        g = clip(rs*grad, c) + wd*w                      (when wd != 0)
        acc_g = acc_g*rho + (1 - rho)*g*g                (rounded once: addcmul_)
        delta = (sqrt(acc_delta + eps)/sqrt(acc_g + eps))*g
        acc_delta = acc_delta*rho + (1 - rho)*delta*delta
        w = w - lr*delta                                 (rounded once)"""
    grad_of = torch_ops.gradient(f)
    square_avg = torch_ops.square_avg(f)

    def rule(w, grad, acc_g, acc_delta, hp):
        p = PytorchRow(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        acc_g = square_avg(acc_g, g, p.rho, p.omrho)
        delta = (math.sqrt(acc_delta + p.eps) / math.sqrt(acc_g + p.eps)) * g
        acc_delta = square_avg(acc_delta, delta, p.rho, p.omrho)
        return fma(p.nlr, delta, w), acc_g, acc_delta
    return rule


SPEC = Spec(
    name="adadelta", reference="reference.adadelta",
    conventions=("mxnet", "guide", "pytorch"),
    pytorch="pytorch", torch="Adadelta",
    torch_slots={"acc_g": "square_avg"},
    space={"rho": Interval(0.0, 0.999), "epsilon": Decades(-9, -3)},
    # rho: Zeiler (2012) tries 0.9 to 0.99 (0.95 in his experiments, Keras's default); MXNet,
    # torch.optim and optax take 0.9. epsilon: Zeiler 1e-6 and 1e-8, torch and optax 1e-6,
    # MXNet 1e-5, Keras 1e-7
    usual={"rho": Interval(0.9, 0.99), "epsilon": Decades(-8, -5)},
    uses_lr=False,
    record={"rho": 0.9, "epsilon": 1e-05}, record_ulps=0,
    layouts=({},),
    trainer=({},),
    demo={"rho": 0.9, "epsilon": 1e-05},
    bench=(BenchSetting("adadelta", {}, torch=("Adadelta", {"rho": 0.9, "lr": 1.0}), quick=True),),
)


@register
class AdaDelta(Optimizer):
    """AdaDelta (MXNet ``adadelta``; Zeiler 2012). ``learning_rate`` is accepted and ignored
    ("mxnet", "guide").

    * mxnet: ``acc_g = rho*acc_g + (1-rho)*g^2; delta = sqrt(acc_delta+eps)/sqrt(acc_g+eps)*g;
      acc_delta = rho*acc_delta + (1-rho)*delta^2; w = w - (delta + wd*w)``
    * guide: the same with ``G = g + wd*w`` and ``acc_delta`` accumulating ``(w_new - w)^2``

    ``rho`` is the guide's beta. State: ``(acc_g, acc_delta)``.

    ``convention="pytorch"``: ``torch.optim.Adadelta``, where the learning rate enters
    (``w = w - lr*delta``; :func:`pytorch_rule`).

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.AdaDelta(rho=0.9, epsilon=1e-6)
        >>> w = np.zeros(1); s = opt.create_state(0, w); opt.update(0, w, np.ones(1), s)
        >>> bool(w[0] < 0)
        True
    """

    spec = SPEC
    mxnet_kernel = False

    domains = {"rho": unit(closed=True), "epsilon": nonneg()}

    def __init__(self, rho=0.90, epsilon=1e-5, **kwargs):
        self.rho = rho
        self.epsilon = epsilon
        super().__init__(**kwargs)

    def state_slots(self):
        return ("acc_g", "acc_delta")

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        if self.convention == "pytorch":
            return pytorch_rule, PytorchRow(nlr=-lr, wd=wd, rescale=self.rescale_grad,
                                            clip_bound=self._clip_bound(), rho=self.rho,
                                            omrho=1.0 - self.rho, eps=self.epsilon)
        rule = mxnet_rule if self.convention == "mxnet" else guide_rule
        return rule, Row(wd=wd, rescale=self.rescale_grad, clip_bound=self._clip_bound(),
                         rho=self.rho,
                         omrho=1.0 - self.rho, eps=self.epsilon)
