"""SGD with momentum and weight decay (MXNet ``sgd``; guide lines 35-58).

mxnet (the aggregated kernel MXNet 1.9.1 always uses, src/operator/optimizer_op-inl.h:224-257;
docs/optimizers/sgd.md)::

    g   = clip(rescale_grad * grad, clip_gradient)          # off for None and 0.0
    mom = ((momentum * mom) - (lr * wd) * w) - lr * g       # mom = 0 when momentum == 0
    w   = w + mom                   # (unclipped, MXNet's kernel forms lr*g as (lr*rs)*grad)

guide::

    v = momentum * v - lr * (clip(rescale_grad * grad, clip_gradient) + wd * w);   w = w + v

pytorch: torch.optim.SGD, its ``dampening`` and ``nesterov`` too (:func:`_pytorch_momentum_rule`).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..backends import arrays
from ..backends.jit import fma, inlined
from . import gradient, torch_ops
from .base import Optimizer, row_step
from .registry import register
from .spec_spaces import MOMENTUM, USUAL_MOMENTUM
from .spec import BenchSetting, Spec
from .validation import flag, unit

__all__ = ["SGD"]


class MxnetMomentumRow(NamedTuple):
    """The scalars of :func:`mxnet_momentum_rule` (MXNet's aggregated SGD kernel with momentum),
    rounded to the weight's dtype: packed on the host, read by name in the kernel."""
    lr: float
    lrwd: float        #: lr*wd
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    mu: float          #: momentum
    lrrs: float        #: lr*rescale


class MxnetPlainRow(NamedTuple):
    """The scalars of :func:`mxnet_plain_rule` (MXNet's aggregated SGD kernel, no momentum)."""
    lr: float
    lrwd: float        #: lr*wd
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    lrrs: float        #: lr*rescale


class GuideMomentumRow(NamedTuple):
    """The scalars of :func:`guide_momentum_rule`."""
    lr: float
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    mu: float          #: momentum


class GuidePlainRow(NamedTuple):
    """The scalars of :func:`guide_plain_rule`."""
    lr: float
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none


class PytorchMomentumRow(NamedTuple):
    """The scalars of :func:`pytorch_momentum_rule` and :func:`pytorch_nesterov_rule`."""
    nlr: float         #: -lr
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    mu: float          #: momentum
    omd: float         #: 1 - dampening (torch's alpha of the gradient into the buffer)
    first: float       #: 1 on the index's first update (torch's buffer is the gradient), else 0


class PytorchPlainRow(NamedTuple):
    """The scalars of :func:`pytorch_plain_rule`."""
    nlr: float         #: -lr
    wd: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none


class SgdUpdateRow(NamedTuple):
    """The scalars of :func:`sgd_update_rule`, made by :func:`sgd_update_hyper`."""
    lr: float
    decay: float       #: 1 - lr*wd, rounded once to the weight's dtype
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    lrrs: float        #: lr*rescale


def mxnet_factors(f):
    """MXNet's SGD kernels' gradient preprocessing, written once for the rules of this module
    and LBSGD's (LARS runs these rules too): ``factors(g, lr, rs, c, lrrs) -> (scale, g')``,
    the step being ``scale*g'``: ``(lr, clip(rs*g, c))`` when clipping, else ``(lr*rs, g)``
    (MXNet's kernel folds ``rs`` into ``lr`` when it does not clip). Not :mod:`.gradient`'s
    ``rescaled``: the rescale is folded into the learning rate, and the branch picks the
    factors only, so the rule forms the one product ``scale*g'`` itself, after the branch, and
    a CUDA compiler contracts it the same way in every kernel that inlines the rule."""
    zero = f(0)

    def mxnet_factors_(g, lr, rs, c, lrrs):
        if c >= zero:
            return lr, min(max(rs * g, -c), c)
        return lrrs, g
    return inlined(mxnet_factors_)


@gradient.through('rescale', 'lrrs')
def mxnet_momentum_rule(f):
    factors = mxnet_factors(f)

    def rule(w, grad, mom, hp):
        p = MxnetMomentumRow(*hp)
        scale, g = factors(grad, p.lr, p.rescale, p.clip_bound, p.lrrs)
        step = scale * g
        mom = ((p.mu * mom) - p.lrwd * w) - step
        return w + mom, mom
    return rule


@gradient.through('rescale', 'lrrs')
def mxnet_plain_rule(f):
    zero = f(0)
    factors = mxnet_factors(f)

    def rule(w, grad, hp):
        p = MxnetPlainRow(*hp)
        scale, g = factors(grad, p.lr, p.rescale, p.clip_bound, p.lrrs)
        step = scale * g
        return w + ((zero - p.lrwd * w) - step)
    return rule


@gradient.through('rescale')
def guide_momentum_rule(f):
    grad_of = gradient.clipped_then_decayed(f)

    def rule(w, grad, v, hp):
        p = GuideMomentumRow(*hp)
        v = p.mu * v - p.lr * grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        return w + v, v
    return rule


@gradient.through('rescale')
def guide_plain_rule(f):
    grad_of = gradient.clipped_then_decayed(f)

    def rule(w, grad, hp):
        p = GuidePlainRow(*hp)
        return w - p.lr * grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
    return rule


def _pytorch_momentum_rule(f, nesterov):
    """torch.optim.SGD's single-tensor update with momentum (torch 2.13, torch/optim/sgd.py,
    ``_single_tensor_sgd``; its documented algorithm)::

        g = clip(rs*grad, c) + wd*w            (wd*w only when wd != 0)
        b = g on the first step, else momentum*b + (1 - dampening)*g
        nesterov: g = g + momentum*b ; else g = b
        w = w - lr*g

    each ``x + a*y`` rounded once, as torch's ``add(y, alpha=a)`` is (``momentum*b`` is
    torch's ``mul_``, rounded before; with ``dampening=0`` the sum ``momentum*b + 1*g`` is the
    plain sum). Measured on torch 2.13's CPU kernels (AVX2, float32 and float64, every tail
    length): ``add_(y, alpha=a)`` is ``fma(a, y, x)`` for ``a`` = 0.9, 0.7, -0.05 alike."""
    grad_of = torch_ops.gradient(f)
    zero = f(0)

    def rule(w, grad, buf, hp):
        p = PytorchMomentumRow(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        if p.first != zero:
            buf = g
        else:
            buf = fma(p.omd, g, buf * p.mu)
        if nesterov:  # a closure constant: the compiled rule keeps one branch
            g = fma(p.mu, buf, g)
        else:
            g = buf
        return fma(p.nlr, g, w), buf
    return rule


@gradient.through('rescale')
def pytorch_momentum_rule(f):
    """torch.optim.SGD with momentum (``nesterov=False``): see :func:`_pytorch_momentum_rule`."""
    return _pytorch_momentum_rule(f, False)


@gradient.through('rescale')
def pytorch_nesterov_rule(f):
    """torch.optim.SGD with momentum and ``nesterov=True`` (the toolkit's NAG under "pytorch")."""
    return _pytorch_momentum_rule(f, True)


@gradient.through('rescale')
def pytorch_plain_rule(f):
    """torch.optim.SGD without momentum: ``w = w - lr*(clip(rs*grad, c) + wd*w)``."""
    grad_of = torch_ops.gradient(f)

    def rule(w, grad, hp):
        p = PytorchPlainRow(*hp)
        return fma(p.nlr, grad_of(grad, w, p.rescale, p.wd, p.clip_bound), w)
    return rule


def pytorch_plan(has_momentum, nesterov, first, lr, wd, rs, c, momentum, dampening=0.0):
    """``(rule, row)`` of one "pytorch" step of torch.optim.SGD: SGD's (``nesterov`` and
    ``dampening`` its own) or NAG's (``nesterov`` True); ``first``: the index's first
    update."""
    if has_momentum:
        rule = pytorch_nesterov_rule if nesterov else pytorch_momentum_rule
        return rule, PytorchMomentumRow(nlr=-lr, wd=wd, rescale=rs, clip_bound=c, mu=momentum,
                                        omd=1.0 - dampening, first=1.0 if first else 0.0)
    return pytorch_plain_rule, PytorchPlainRow(nlr=-lr, wd=wd, rescale=rs, clip_bound=c)


SPEC = Spec(
    name="sgd", reference="reference.sgd",
    moments={"mom": "signed"},
    conventions=("mxnet", "guide", "pytorch"),
    pytorch="pytorch", torch="SGD",
    space={"momentum": MOMENTUM},
    flags={"nesterov": False, "dampening": 0.0},  # torch's, "pytorch" only
    usual={"momentum": USUAL_MOMENTUM},  # 0 or 0.5..0.99 (spaces.USUAL_MOMENTUM: its sources)
    record={"momentum": 0.9}, record_ulps=0,
    layouts=({"learning_rate": 0.1}, {"learning_rate": 0.1, "momentum": 0.9},),
    # torch's Nesterov and dampening: the Trainer tests run them under "pytorch", their one
    trainer=({"momentum": 0.0}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True},
             {"momentum": 0.9, "dampening": 0.5}),
    demo={"learning_rate": 0.1, "momentum": 0.9, "wd": 0.0001},
    bench=(BenchSetting("sgd", {"momentum": 0.0}, torch=("SGD", {"momentum": 0.0})),
           BenchSetting("sgd mom", {"momentum": 0.9}, torch=("SGD", {"momentum": 0.9}), quick=True)),
)


@register
class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum (MXNet ``sgd``).

    Update (``docs/conventions.md``, "SGD"), with ``g = clip(rescale_grad*grad, clip_gradient)``:

    * mxnet: ``mom = ((momentum*mom) - (lr*wd)*w) - lr*g;  w = w + mom``
    * guide: ``v = momentum*v - lr*(g + wd*w);  w = w + v``

    Glossary: ``lr`` learning_rate (times lr_mult, or the schedule), ``momentum`` is the guide's
    gamma, ``wd`` its delta. State: ``mom`` (zeros, the weight's dtype) when momentum > 0, else None.
    With multi_precision on float16 weights the state is ``(mom32 or None, weight32)`` (MXNet's
    order for SGD).

    ``convention="pytorch"``: ``torch.optim.SGD``, its own rule (:func:`pytorch_momentum_rule`);
    ``mom`` holds torch's ``momentum_buffer`` (without lr). There, and only there, torch's
    ``dampening`` (the buffer takes ``(1 - dampening)*g`` from the second step on) and
    ``nesterov`` (``g + momentum*buf`` steps; it needs momentum and no dampening, as torch
    says); MXNet's SGD has neither (its Nesterov momentum is :class:`NAG`).

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.SGD(learning_rate=0.1, momentum=0.9)
        >>> w = np.ones(3, np.float32); g = np.full(3, 0.5, np.float32)
        >>> state = opt.create_state(0, w); opt.update(0, w, g, state); w
        array([0.95, 0.95, 0.95], dtype=float32)
    """

    spec = SPEC
    #: MXNET_OPTIMIZER_AGGREGATION_SIZE's default: MXNet 1.9.1 always runs SGD through its
    #: aggregated kernel (docs/mxnet-facts.md, section 5)
    aggregate_num = 4

    domains = {"momentum": unit(), "lazy_update": flag(strict=False, reference=False),
               "nesterov": flag(), "dampening": unit(closed=True)}

    def __init__(self, momentum=0.0, lazy_update=True, nesterov=False, dampening=0.0, **kwargs):
        self.momentum = momentum
        self.lazy_update = lazy_update
        self.nesterov, self.dampening = nesterov, dampening
        super().__init__(**kwargs)

    def check_relations(self):
        """torch's ``nesterov`` and ``dampening`` under "pytorch" only, and Nesterov momentum
        with a momentum and no dampening, as torch.optim.SGD requires."""
        nesterov, dampening = self.named("nesterov"), self.named("dampening")
        if self.convention != "pytorch":
            if self.nesterov:
                raise ValueError(
                    f"{nesterov}=True is refused under convention {self.convention!r}: MXNet's "
                    "SGD has no Nesterov momentum; Nesterov momentum is NAG (MXNet's nag: "
                    "toolkit.optimizer.NAG, toolkit.torch.NAG), or torch.optim.SGD's under "
                    "convention='pytorch'")
            if self.dampening != 0.0:
                raise ValueError(
                    f"{dampening}={self.dampening!r} is refused under convention "
                    f"{self.convention!r}: MXNet's momentum has no dampening (torch.optim.SGD's "
                    "is taken under convention='pytorch')")
        elif self.nesterov and (self.momentum <= 0.0 or self.dampening != 0.0):
            raise ValueError(f"Nesterov momentum requires a momentum and zero dampening "
                             f"({nesterov}=True with {self.named('momentum')}={self.momentum!r},"
                             f" {dampening}={self.dampening!r}), as torch.optim.SGD says")

    def state_slots(self):
        return ("mom",) if self.momentum != 0.0 else ()

    def _state_meaning(self):
        """``mom`` is torch's buffer under "pytorch", MXNet's ``-lr*buf`` under the others: a
        convention edited across them once state exists is refused."""
        return "torch's buffer" if self.convention == "pytorch" else "MXNet's -lr*buf"

    def row_sparse_mode(self, index):
        """MXNet's ``lazy_update`` under "mxnet" and "guide": "lazy" when set (the default),
        else "standard". Under "pytorch" "standard": torch.optim.SGD steps a sparse gradient
        as the dense one with zeros (its momentum buffer moves every row it holds, its weight
        decay every row), which ``lazy_update``, MXNet's, does not change."""
        if self.convention == "pytorch":
            return "standard"
        return "lazy" if self.lazy_update else "standard"

    def create_state_multi_precision(self, index, weight):
        if self.uses_master(weight):
            self._check_weight(weight)
            w32 = arrays.astype(weight, "float32")
            return (self.create_state(index, w32), w32)
        return self.create_state(index, weight)

    def split_master(self, state):
        return state[1], state[0]

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def _step_constants(self):
        """``(r, rs, c, mu)``: ``_rounded`` as a function of a float, and the constants of a step as
        the convention rounds them (``mu`` None without momentum)."""
        r = self._rounded
        return (self._float_rounder(), r(self.rescale_grad), self._clip_bound(),
                r(self.momentum) if self.momentum != 0.0 else None)

    def kernel_row(self, t, lr, wd, sparse=None):
        states = self.momentum != 0.0  # the momentum state
        if self.convention == "pytorch":
            rule, row = pytorch_plan(states, self.nesterov, t == self.begin_num_update + 1, lr,
                                     wd, self.rescale_grad, self._clip_bound(), self.momentum,
                                     self.dampening)
            return rule, row
        r, rs, c, mu = self._constants("_sgd_constants", self._step_constants)
        lr, wd = r(lr), r(wd)
        sparse = sparse if (self.convention == "mxnet" and not states) else None
        if sparse:
            # a row-sparse gradient goes through MXNet's sgd_update, not its aggregated kernel;
            # its standard (not lazy) form scales every row by 1 - lr*wd formed in float32
            rule, hyper = sgd_update_rule, sgd_update_hyper(lr, wd, rs, c,
                                                            float32_decay=sparse == "standard")
        elif self.convention == "mxnet":
            # tuple.__new__: the named rows without the keyword machinery of their constructors
            if states:
                rule, hyper = mxnet_momentum_rule, tuple.__new__(
                    MxnetMomentumRow, (lr, lr * wd, rs, c, mu, lr * rs))
            else:
                rule, hyper = mxnet_plain_rule, tuple.__new__(
                    MxnetPlainRow, (lr, lr * wd, rs, c, lr * rs))
        elif states:
            rule, hyper = guide_momentum_rule, GuideMomentumRow(lr=lr, wd=wd, rescale=rs,
                                                                clip_bound=c, mu=mu)
        else:
            rule, hyper = guide_plain_rule, GuidePlainRow(lr=lr, wd=wd, rescale=rs, clip_bound=c)
        return rule, hyper


@gradient.through('rescale', 'lrrs')
def sgd_update_rule(f):
    """MXNet's non-aggregated ``sgd_update`` kernel (src/operator/optimizer_op-inl.h, SGDKernel
    and its row-sparse twins): ``w = (1 - lr*wd)*w - (lr*rs)*grad`` when not clipping, else
    ``w = (1 - lr*wd)*w - lr*clip(rs*grad, c)``; ``hp`` an :class:`SgdUpdateRow` from
    :func:`sgd_update_hyper`. Used by NAG and LBSGD without momentum and by SGD without momentum
    on a row-sparse gradient (measured on MXNet 1.9.1: docs/mxnet-facts.md, 10)."""
    factors = mxnet_factors(f)

    def rule(w, grad, hp):
        p = SgdUpdateRow(*hp)
        scale, g = factors(grad, p.lr, p.rescale, p.clip_bound, p.lrrs)
        return p.decay * w - scale * g
    return rule


def sgd_update_hyper(lr, wd, rs, c, float32_decay=False):
    """The :class:`SgdUpdateRow` of :func:`sgd_update_rule` from the rounded ``lr``, ``wd``,
    ``rs``: ``1 - lr*wd`` and ``lr*rs`` are formed exactly here and rounded once to the weight's
    dtype, as MXNet's kernel forms them in that dtype (a product of two float32 numbers is exact
    in float64). ``float32_decay``: ``1 - lr*wd`` in float32 arithmetic whatever the dtype, as
    MXNet's standard (not lazy) row-sparse update scales the weight (measured, tests/data/mxnet/
    sparse.json, sgd-std-f64)."""
    if float32_decay:
        f32 = np.float32
        return SgdUpdateRow(lr=lr, decay=float(f32(1) - f32(lr) * f32(wd)), rescale=rs,
                            clip_bound=c,
                            lrrs=lr * rs)
    return SgdUpdateRow(lr=lr, decay=1.0 - lr * wd, rescale=rs, clip_bound=c, lrrs=lr * rs)
