"""Adamax (MXNet ``adamax``; guide lines 165-168; Kingma and Ba 2015, section 7).

mxnet (Python ops, MXNet 1.9.1 python/mxnet/optimizer/optimizer.py:1936-1958; no epsilon;
docs/optimizers/adamax.md)::

    lr_t = lr/(1 - beta1^t);  g = clip(rescale_grad*grad + wd*w, c)
    m = beta1*m + (1-beta1)*g;  u = max(beta2*u, |g|);  w = w - lr_t*m/u

MXNet yields NaN where ``u == 0`` (a zero gradient history: 0/0); here such elements are left
unchanged (docs/known-differences.md).

guide::

    G = clip(rescale_grad*grad, c) + wd*w;  m as above;  u = max(beta2*u, |G|)
    w = w - lr/(u + eps) * m/(1 - beta1^t)
"""
from __future__ import annotations

from typing import NamedTuple

from . import gradient, torch_ops
from .base import Optimizer, row_step
from .registry import register
from .spec_spaces import Interval, USUAL_BETA1, USUAL_BETA2
from .spec import BenchSetting, Spec
from .validation import nonneg, unit

__all__ = ["Adamax"]


class MxnetRow(NamedTuple):
    """The scalars of :func:`mxnet_rule`: packed on the host, read by name in the kernel."""
    lr_t: float          #: lr/(1 - beta1^t)
    wd: float
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    b1: float
    one_minus_b1: float  #: 1 - beta1
    b2: float


class GuideRow(NamedTuple):
    """The scalars of :func:`guide_rule`."""
    lr: float
    wd: float
    rescale: float
    clip_bound: float
    b1: float
    one_minus_b1: float
    b2: float
    eps: float
    bc1: float    #: 1 - beta1^t


@gradient.through('rescale')
def mxnet_rule(f):
    zero = f(0)
    grad_of = gradient.decayed_then_clipped(f)

    def rule(w, grad, m, u, hp):
        p = MxnetRow(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        m = p.b1 * m + p.one_minus_b1 * g
        u = max(p.b2 * u, abs(g))
        if u > zero:
            w = w - p.lr_t * m / u
        return w, m, u
    return rule


@gradient.through('rescale')
def guide_rule(f):
    grad_of = gradient.clipped_then_decayed(f)

    def rule(w, grad, m, u, hp):
        p = GuideRow(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        m = p.b1 * m + p.one_minus_b1 * g
        u = max(p.b2 * u, abs(g))
        return w - p.lr / (u + p.eps) * (m / p.bc1), m, u
    return rule


class PytorchRow(NamedTuple):
    """The scalars of :func:`pytorch_rule`."""
    wd: float
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    one_minus_b1: float  #: 1 - beta1, the weight of the first moment's lerp
    b2: float
    eps: float
    nclr: float          #: -lr/(1 - beta1^t)


@gradient.through('rescale')
def pytorch_rule(f):
    """torch.optim.Adamax's single-tensor update (torch 2.13, torch/optim/adamax.py,
    ``_single_tensor_adamax``; its documented algorithm), in torch's order of operations::

        g = clip(rs*grad, c) + wd*w                      (when wd != 0)
        m = m.lerp(g, 1 - beta1)
        u = maximum(u*beta2, |g| + eps)                  (eps inside the max; NaN propagates)
        w = w + (-lr/(1 - beta1^t))*m / u"""
    grad_of = torch_ops.gradient(f)
    lerp = torch_ops.lerp(f)

    def rule(w, grad, m, u, hp):
        p = PytorchRow(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        m = lerp(m, g, p.one_minus_b1)
        a = u * p.b2
        b = abs(g) + p.eps
        if a != a or a > b:  # torch.maximum: NaN if either is
            u = a
        else:
            u = b
        return w + (p.nclr * m) / u, m, u
    return rule


SPEC = Spec(
    name="adamax", reference="reference.adamax",
    moments={"mean": "signed", "u": "unsigned"},
    conventions=("mxnet", "guide", "pytorch"), pytorch_form="lerp",
    pytorch="pytorch", torch="Adamax",
    torch_slots={"mean": "exp_avg", "u": "exp_inf"},
    space={"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999)},
    # Kingma and Ba (2015, section 7.1) and MXNet, torch.optim, optax: 0.9 and 0.999
    usual={"beta1": USUAL_BETA1, "beta2": USUAL_BETA2},
    variants=("hyper_f32", "hyper_f64", "constants_in_dtype", "lerp", "wd_before_clip",
              "wd_after_clip"),  # reference.adamax.FORMS
    record={"beta1": 0.9, "beta2": 0.999}, record_ulps=1,
    layouts=({},),
    trainer=({},),
    demo={"learning_rate": 0.02},
    bench=(BenchSetting("adamax", {}, torch=("Adamax", {}), quick=True),),
)


@register
class Adamax(Optimizer):
    """Adamax (MXNet ``adamax``): Adam with the infinity norm.

    * mxnet: ``u = max(beta2*u, |g|);  w = w - lr/(1-beta1^t) * m/u`` — no epsilon (elements
      with ``u == 0`` are left unchanged where MXNet produces NaN)
    * guide: ``w = w - lr/(u + epsilon) * m/(1-beta1^t)``; ``epsilon`` defaults to 1e-8

    ``epsilon`` exists only in the guide convention (MXNet's Adamax has none; giving one with
    convention "mxnet" is an error). State: ``(mean, u)``.

    ``convention="pytorch"``: ``torch.optim.Adamax`` (:func:`pytorch_rule`: ``epsilon`` inside
    the max, None meaning 1e-8).

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.Adamax(learning_rate=0.002)
        >>> w = np.zeros(2); s = opt.create_state(0, w); opt.update(0, w, np.array([1.0, 0.0]), s)
        >>> w
        array([-0.002,  0.   ])
    """

    spec = SPEC
    mxnet_kernel = False

    domains = {"beta1": unit(), "beta2": unit(), "epsilon": nonneg(none=True)}

    def __init__(self, learning_rate=0.002, beta1=0.9, beta2=0.999, epsilon=None, **kwargs):
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        super().__init__(learning_rate=learning_rate, **kwargs)

    def check_relations(self):
        if self.epsilon is not None and self.convention == "mxnet":
            raise ValueError(f"{self.named('epsilon')}: MXNet's Adamax has no epsilon; use "
                             "convention='guide' to add one")

    def state_slots(self):
        return ("mean", "u")

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        b1 = self.beta1
        common = dict(wd=wd, rescale=self.rescale_grad, clip_bound=self._clip_bound(), b1=b1,
                      one_minus_b1=1.0 - b1,
                      b2=self.beta2)
        if self.convention == "mxnet":
            return mxnet_rule, MxnetRow(lr_t=lr / (1.0 - b1 ** t), **common)
        eps = 1e-8 if self.epsilon is None else self.epsilon
        if self.convention == "pytorch":
            return pytorch_rule, PytorchRow(wd=wd, rescale=common["rescale"],
                                            clip_bound=common["clip_bound"],
                                            one_minus_b1=common["one_minus_b1"], b2=common["b2"],
                                            eps=eps,
                                            nclr=-(lr / (1.0 - b1 ** t)))
        return guide_rule, GuideRow(lr=lr, **common, eps=eps, bc1=1.0 - b1 ** t)
