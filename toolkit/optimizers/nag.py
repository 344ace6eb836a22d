"""Nesterov accelerated gradient (MXNet ``nag``; guide lines 76-77).

MXNet stores the look-ahead point ``w~ = w + momentum*v`` and takes the gradient there
(docs/optimizers/nag.md). mxnet (``nag_mom_update``, MXNet 1.9.1
src/operator/optimizer_op-inl.h:1061-1083; its weight decay in the momentum line reads the updated
weight, MXNet's in-place aliasing)::

    g = clip(rescale_grad*grad, c);  m1 = momentum*mom
    w_new = w - m1 + (momentum + 1)*(m1 - lr*(g + wd*w));  mom = m1 - lr*(g + wd*w_new)

guide, in the same stored-point form (proved equal to the look-ahead form of the guide in
``tests/test_proof_nag.py``)::

    G = clip(rescale_grad*grad, c) + wd*w;  v = momentum*v - lr*G;  w = w + momentum*v - lr*G
"""
from __future__ import annotations

from typing import NamedTuple

from ..backends import arrays
from . import gradient
from .base import Optimizer, row_step
from .registry import register
from .spec_spaces import MOMENTUM, USUAL_MOMENTUM
from .spec import BenchSetting, Spec
from .validation import unit
from .sgd import (GuidePlainRow, guide_plain_rule, pytorch_plan, sgd_update_hyper,
                  sgd_update_rule)

__all__ = ["NAG"]


class Row(NamedTuple):
    """The scalars of :func:`mxnet_rule` and :func:`guide_rule` (rounded to the weight's dtype
    under convention "mxnet"): packed on the host, read by name in the kernel."""
    lr: float
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    mu: float          #: momentum
    mu1: float         #: momentum + 1


@gradient.through('rescale')
def mxnet_rule(f):
    # gradient.clipped_then_decayed does not fit: the momentum line decays the updated weight
    rescaled = gradient.rescaled(f)

    def rule(w, grad, mom, hp):
        p = Row(*hp)
        g = rescaled(grad, p.rescale, p.clip_bound)
        m1 = p.mu * mom
        w_new = (w - m1) + p.mu1 * (m1 - p.lr * (g + p.wd * w))
        return w_new, m1 - p.lr * (g + p.wd * w_new)
    return rule


@gradient.through('rescale')
def guide_rule(f):
    grad_of = gradient.clipped_then_decayed(f)

    def rule(w, grad, v, hp):
        p = Row(*hp)
        step = p.lr * grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        v = p.mu * v - step
        return w + p.mu * v - step, v
    return rule


SPEC = Spec(
    name="nag", reference="reference.nag",
    moments={"mom": "signed"},
    conventions=("mxnet", "guide", "pytorch"),
    pytorch="pytorch", torch="SGD", torch_flags={"nesterov": True},
    space={"momentum": MOMENTUM},
    # Nesterov momentum as trained: 0.9 (torch.optim.SGD(nesterov=True)'s examples, optax.sgd
    # with nesterov; Sutskever et al. 2013: 0.9 to 0.99), or off
    usual={"momentum": USUAL_MOMENTUM},
    record={"momentum": 0.9}, record_ulps=0,
    layouts=({"learning_rate": 0.1}, {"learning_rate": 0.1, "momentum": 0.9},),
    trainer=({"momentum": 0.9},),
    demo={"learning_rate": 0.1, "momentum": 0.9, "wd": 0.0001},
    bench=(BenchSetting("nag", {"momentum": 0.0}, torch=("SGD", {"momentum": 0.0})),
           BenchSetting("nag mom", {"momentum": 0.9}, torch=("SGD", {"momentum": 0.9, "nesterov": True}), quick=True)),
)


@register
class NAG(Optimizer):
    """Nesterov accelerated SGD (MXNet ``nag``), in the stored look-ahead form.

    The weight held is the look-ahead point ``w~ = w + momentum*v`` of the guide's equations
    (``docs/conventions.md``, "NAG"):

    * mxnet: ``m1 = momentum*mom; w = w - m1 + (momentum+1)*(m1 - lr*(g + wd*w));
      mom = m1 - lr*(g + wd*w_new)``
    * guide: ``v = momentum*v - lr*G; w = w + momentum*v - lr*G`` with ``G = g + wd*w``

    ``g = clip(rescale_grad*grad, clip_gradient)``. State: ``mom`` when momentum > 0, else None;
    with multi_precision on float16: ``(mom32 or None, weight32)``. With momentum 0 this is SGD.

    ``convention="pytorch"``: ``torch.optim.SGD(nesterov=True, dampening=0)``
    (``sgd.pytorch_nesterov_rule``); ``mom`` holds torch's ``momentum_buffer``.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.NAG(learning_rate=0.1, momentum=0.9)
        >>> w = np.zeros(2); s = opt.create_state(0, w)
        >>> opt.update(0, w, np.ones(2), s); w
        array([-0.19, -0.19])
    """

    spec = SPEC

    domains = {"momentum": unit()}

    def __init__(self, momentum=0.0, **kwargs):
        self.momentum = momentum
        super().__init__(**kwargs)

    def state_slots(self):
        return ("mom",) if self.momentum != 0.0 else ()

    def _state_meaning(self):
        """``mom`` is torch's buffer under "pytorch", MXNet's ``-lr*buf`` under the others: a
        convention edited across them once state exists is refused."""
        return "torch's buffer" if self.convention == "pytorch" else "MXNet's -lr*buf"

    def row_sparse_mode(self, index):
        """"lazy" without momentum (MXNet's NAG calls ``sgd_update``, lazy by default), else
        "dense" (its ``nag_mom_update`` has no sparse kernel: storage fallback); under "pytorch"
        "standard" (torch.optim.SGD's step of a sparse gradient: every row, as SGD's)."""
        if self.convention == "pytorch":
            return "standard"
        return "lazy" if self.momentum == 0.0 else "dense"

    def create_state_multi_precision(self, index, weight):
        if self.uses_master(weight):
            self._check_weight(weight)
            w32 = arrays.astype(weight, "float32")
            return (self.create_state(index, w32), w32)
        return self.create_state(index, weight)

    def split_master(self, state):
        return state[1], state[0]

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        states = self.momentum != 0.0  # the momentum state
        if self.convention == "pytorch":  # torch.optim.SGD(nesterov=True)
            rule, row = pytorch_plan(states, True, t == self.begin_num_update + 1, lr,
                                     wd, self.rescale_grad, self._clip_bound(), self.momentum)
            return rule, row
        r = self._rounded
        lr, wd, rs, c, mu = r(lr), r(wd), r(self.rescale_grad), self._clip_bound(), r(self.momentum)
        if not states:
            if self.convention == "mxnet":
                return sgd_update_rule, sgd_update_hyper(lr, wd, rs, c)
            else:
                return guide_plain_rule, GuidePlainRow(lr=lr, wd=wd, rescale=rs, clip_bound=c)
        rule = mxnet_rule if self.convention == "mxnet" else guide_rule
        return rule, Row(lr=lr, wd=wd, rescale=rs, clip_bound=c, mu=mu, mu1=mu + 1.0)
