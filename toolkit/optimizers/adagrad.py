"""AdaGrad (MXNet ``adagrad``; guide lines 94-95).

mxnet (Python ops, MXNet 1.9.1 python/mxnet/optimizer/optimizer.py:1682-1687;
``clip_gradient=0.0`` clips to zero; docs/optimizers/adagrad.md)::

    g = clip(rescale_grad*grad, c);  h = h + g*g;  w = w + (g/sqrt(h + eps) + w*wd)*(-lr)

guide (the denominator's unindexed ``g^2`` read as ``g^2_{i+1}``)::

    G = clip(rescale_grad*grad, c) + wd*w;  h = h + G*G;  w = w - lr/sqrt(h + eps)*G
"""
from __future__ import annotations

import math
from typing import NamedTuple

from ..backends.jit import fma
from . import gradient, torch_ops
from .base import Optimizer, row_step
from .registry import register
from .spec_spaces import Decades, OneOf
from .spec import BenchSetting, Spec
from .validation import nonneg

__all__ = ["AdaGrad"]


class MxnetRow(NamedTuple):
    """The scalars of :func:`mxnet_rule`: packed on the host, read by name in the kernel."""
    neg_lr: float      #: -lr (MXNet multiplies by ``-lr``)
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    eps: float


class GuideRow(NamedTuple):
    """The scalars of :func:`guide_rule`."""
    lr: float
    wd: float
    rescale: float
    clip_bound: float
    eps: float


@gradient.through('rescale')
def mxnet_rule(f):
    grad_of = gradient.rescaled(f)

    def rule(w, grad, h, hp):
        p = MxnetRow(*hp)
        g = grad_of(grad, p.rescale, p.clip_bound)
        h = h + g * g
        return w + (g / math.sqrt(h + p.eps) + w * p.wd) * p.neg_lr, h
    return rule


@gradient.through('rescale')
def guide_rule(f):
    grad_of = gradient.clipped_then_decayed(f)

    def rule(w, grad, h, hp):
        p = GuideRow(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        h = h + g * g
        return w - p.lr / math.sqrt(h + p.eps) * g, h
    return rule


class PytorchRow(NamedTuple):
    """The scalars of :func:`pytorch_rule`."""
    nlr: float         #: -lr (torch's -clr with lr_decay 0)
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    eps: float


@gradient.through('rescale')
def pytorch_rule(f):
    """torch.optim.Adagrad's single-tensor update (torch 2.13, torch/optim/adagrad.py,
    ``_single_tensor_adagrad``, ``lr_decay=0``, ``initial_accumulator_value=0``; its
    documented algorithm), in torch's order of operations::

        g = clip(rs*grad, c) + wd*w      (when wd != 0)
        h = h + g*g                      (rounded once: addcmul_)
        w = w + (-lr*g)/(sqrt(h) + eps)  (eps outside the root)"""
    grad_of = torch_ops.gradient(f)

    def rule(w, grad, h, hp):
        p = PytorchRow(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        h = fma(g, g, h)
        return w + (p.nlr * g) / (math.sqrt(h) + p.eps), h
    return rule


SPEC = Spec(
    name="adagrad", reference="reference.adagrad",
    moments={"history": "unsigned"},
    conventions=("mxnet", "guide", "pytorch"),
    pytorch="pytorch", torch="Adagrad",
    torch_slots={"history": "sum"},
    space={"eps": OneOf(1e-07, Decades(-10, -1))},
    # eps: torch.optim.Adagrad 1e-10, MXNet, optax and Keras 1e-7; larger values change the
    # algorithm (they dominate the first steps' root)
    usual={"eps": Decades(-10, -6)},
    record={"eps": 1e-07}, record_ulps=0,
    layouts=({"learning_rate": 0.1},),
    trainer=({},),
    demo={"learning_rate": 0.1},
    bench=(BenchSetting("adagrad", {}, torch=("Adagrad", {}), quick=True),),
)


@register
class AdaGrad(Optimizer):
    """AdaGrad (MXNet ``adagrad``, Duchi et al. 2011).

    * mxnet: ``h = h + g*g;  w = w - lr*(g/sqrt(h + eps) + wd*w)``, ``g = clip(rs*grad, c)``
    * guide: ``h = h + G*G;  w = w - lr/sqrt(h + eps)*G``, ``G = g + wd*w``

    ``eps`` is added inside the square root on every step (MXNet's docstring calls it the
    initial accumulator value; it is not). State: ``history`` (zeros, the weight's dtype; MXNet
    1.9.1 keeps it in float32 only, a limitation not reproduced).

    ``convention="pytorch"``: ``torch.optim.Adagrad`` with ``lr_decay=0``,
    ``initial_accumulator_value=0`` (:func:`pytorch_rule`: ``eps`` outside the root).

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.AdaGrad(learning_rate=0.1)
        >>> w = np.zeros(2); h = opt.create_state(0, w); opt.update(0, w, np.ones(2), h)
        >>> np.round(w, 6)
        array([-0.1, -0.1])
    """

    spec = SPEC
    mxnet_kernel = False

    domains = {"float_stable_eps": nonneg(keyword="eps")}

    def __init__(self, eps=1e-7, **kwargs):
        self.float_stable_eps = eps
        super().__init__(**kwargs)

    def state_slots(self):
        return ("history",)

    def row_sparse_mode(self, index):
        """"lazy" (MXNet's ``sparse.adagrad_update``), which has no weight decay: MXNet 1.9.1
        refuses a row-sparse gradient when ``wd*wd_mult`` is not 0, and so does this."""
        wd = self._get_wd(index)
        if wd != 0:
            raise ValueError(f"AdaGrad's row-sparse (lazy) update has no weight decay (MXNet "
                             f"1.9.1 refuses it too), but wd is {wd} for index {index!r}: set "
                             "wd=0 (or wd_mult 0 for this index), or pass grad.to_dense()")
        return "lazy"

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        common = dict(wd=wd, rescale=self.rescale_grad, clip_bound=self._clip_bound(),
                      eps=self.float_stable_eps)
        if self.convention == "mxnet":
            return mxnet_rule, MxnetRow(neg_lr=-lr, **common)
        elif self.convention == "pytorch":
            return pytorch_rule, PytorchRow(nlr=-lr, **common)
        else:
            return guide_rule, GuideRow(lr=lr, **common)
