"""Adam (MXNet ``adam``; guide lines 152-156; Kingma and Ba 2015).

mxnet (MXNet 1.9.1 python/mxnet/optimizer/optimizer.py:1612-1628 and the kernel at
src/operator/optimizer_op-inl.h:1292-1314; docs/optimizers/adam.md; the bias correction folded
into the learning rate in double precision and rounded, epsilon added to the uncorrected root,
weight decay before clipping)::

    lr_t = lr*sqrt(1 - beta2^t)/(1 - beta1^t)
    g = clip(rescale_grad*grad + wd*w, c);  m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g
    w = w - lr_t*m/(sqrt(v) + eps)

guide::

    G = clip(rescale_grad*grad, c) + wd*w;  m, v as above with G
    w = w - lr/(sqrt(v/(1 - beta2^t)) + eps) * m/(1 - beta1^t)

The two are the same update: mxnet with ``epsilon`` equals guide with ``epsilon/sqrt(1 - beta2^t)``
(equivalently, mxnet with ``epsilon*sqrt(1 - beta2^t)`` equals guide with ``epsilon``).
"""
from __future__ import annotations

import math
from typing import NamedTuple

from . import gradient, torch_ops
from .base import Optimizer, row_step
from .registry import register
from .spec_spaces import Decades, Interval, USUAL_BETA1, USUAL_BETA2
from .spec import BenchSetting, Spec
from .validation import flag, nonneg, unit

__all__ = ["Adam"]


class MxnetRow(NamedTuple):
    """The scalars of :func:`mxnet_rule` (and :func:`mxnet_square_rule`), rounded to the
    weight's dtype: packed on the host, read by name in the kernel."""
    lr_t: float          #: lr*sqrt(1 - beta2^t)/(1 - beta1^t), formed in float64
    wd: float
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    b1: float
    one_minus_b1: float  #: 1 - beta1
    b2: float
    one_minus_b2: float  #: 1 - beta2
    eps: float


class GuideRow(NamedTuple):
    """The scalars of :func:`guide_rule`."""
    lr: float
    wd: float
    rescale: float
    clip_bound: float
    b1: float
    one_minus_b1: float
    b2: float
    one_minus_b2: float
    eps: float
    bc1: float    #: 1 - beta1^t
    bc2: float    #: 1 - beta2^t


class PytorchRow(NamedTuple):
    """The scalars of :func:`pytorch_rule` (torch.optim.Adam and AdamW)."""
    decay: float         #: 1 - lr*wd, torch's decoupled decay (AdamW); 1 for Adam
    wd: float            #: torch's coupled weight decay (Adam); 0 for AdamW
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    one_minus_b1: float  #: 1 - beta1, the weight of the first moment's lerp
    b2: float
    one_minus_b2: float  #: 1 - beta2
    eps: float
    bc2s: float          #: (1 - beta2^t)**0.5
    nss: float           #: -lr/(1 - beta1^t), torch's -step_size


def _mxnet_rule(f, square_first):
    grad_of = gradient.decayed_then_clipped(f)

    def rule(w, grad, m, v, hp):
        p = MxnetRow(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        m = p.b1 * m + p.one_minus_b1 * g
        if square_first:  # a closure constant: the compiled rule keeps one branch
            v = p.b2 * v + p.one_minus_b2 * (g * g)
        else:
            v = p.b2 * v + (p.one_minus_b2 * g) * g
        return w - (p.lr_t * m) / (math.sqrt(v) + p.eps), m, v
    return rule


@gradient.through('rescale')
def mxnet_rule(f):
    """MXNet's dense ``adam_update`` kernel: ``v = beta2*v + ((1-beta2)*g)*g``."""
    return _mxnet_rule(f, False)


def mxnet_square_rule(f):
    """MXNet's row-sparse Adam kernels where they square first (src/operator/optimizer_op-inl.h:
    the lazy AdamDnsRspDnsKernel on the CPU when clipping, and the standard update):
    ``v = beta2*v + (1-beta2)*(g*g)``; everything else as :func:`mxnet_rule`."""
    return _mxnet_rule(f, True)


def _guide_rule(f, amsgrad):
    grad_of = gradient.clipped_then_decayed(f)
    maximum = torch_ops.maximum(f)

    if amsgrad:  # a closure constant: the compiled rule takes the running maximum's slot
        def amsgrad_rule(w, grad, m, v, vmax, hp):
            p = GuideRow(*hp)
            g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
            m = p.b1 * m + p.one_minus_b1 * g
            v = p.b2 * v + p.one_minus_b2 * (g * g)
            vmax = maximum(vmax, v)
            return w - p.lr / (math.sqrt(vmax / p.bc2) + p.eps) * (m / p.bc1), m, v, vmax
        return amsgrad_rule

    def rule(w, grad, m, v, hp):
        p = GuideRow(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        m = p.b1 * m + p.one_minus_b1 * g
        v = p.b2 * v + p.one_minus_b2 * (g * g)
        return w - p.lr / (math.sqrt(v / p.bc2) + p.eps) * (m / p.bc1), m, v
    return rule


@gradient.through('rescale')
def guide_rule(f):
    return _guide_rule(f, False)


@gradient.through('rescale')
def guide_amsgrad_rule(f):
    """:func:`guide_rule` with AMSGrad: ``max_var = max(max_var, v)`` takes ``v``'s place in the
    denominator (torch's ``torch.maximum``: NaN propagates)."""
    return _guide_rule(f, True)


def _pytorch_rule(f, amsgrad):
    grad_of = torch_ops.gradient(f)
    lerp = torch_ops.lerp(f)
    square_avg = torch_ops.square_avg(f)
    maximum = torch_ops.maximum(f)

    if amsgrad:  # a closure constant: the compiled rule takes the running maximum's slot
        def amsgrad_rule(w, grad, m, v, vmax, hp):
            p = PytorchRow(*hp)
            w = w * p.decay
            g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
            m = lerp(m, g, p.one_minus_b1)
            v = square_avg(v, g, p.b2, p.one_minus_b2)
            vmax = maximum(vmax, v)
            return w + (p.nss * m) / (math.sqrt(vmax) / p.bc2s + p.eps), m, v, vmax
        return amsgrad_rule

    def rule(w, grad, m, v, hp):
        p = PytorchRow(*hp)
        w = w * p.decay
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        m = lerp(m, g, p.one_minus_b1)
        v = square_avg(v, g, p.b2, p.one_minus_b2)
        return w + (p.nss * m) / (math.sqrt(v) / p.bc2s + p.eps), m, v
    return rule


@gradient.through('rescale')
def pytorch_rule(f):
    """torch.optim.Adam's and AdamW's single-tensor update (torch 2.13, torch/optim/adam.py,
    ``_single_tensor_adam``, ``amsgrad=False``; the documented algorithm of both classes), in
    torch's order of operations::

        w = w*(1 - lr*wd)                            (AdamW: decoupled decay; 1 for Adam)
        g = clip(rs*grad, c) + wd*w                  (Adam: coupled, when wd != 0)
        m = m.lerp(g, 1 - beta1)
        v = v*beta2 + (1 - beta2)*g*g
        w = w + (-lr/(1 - beta1^t))*m / (sqrt(v)/sqrt(1 - beta2^t) + eps)

    (:mod:`.torch_ops`: the lerp and the sums rounded once, as torch's kernels round them)."""
    return _pytorch_rule(f, False)


@gradient.through('rescale')
def pytorch_amsgrad_rule(f):
    """:func:`pytorch_rule` with ``amsgrad=True``: ``max_exp_avg_sq = torch.maximum(
    max_exp_avg_sq, v)``, then ``sqrt(max_exp_avg_sq)/sqrt(1 - beta2^t) + eps`` as the
    denominator (torch 2.13, ``_single_tensor_adam``)."""
    return _pytorch_rule(f, True)


def pytorch_row(constants, t, lr, decay, wd):
    """The :class:`PytorchRow` of step ``t`` from Adam's or AdamW's step constants (by name),
    formed in float64 as torch forms them in Python floats."""
    return PytorchRow(decay=decay, wd=wd, rescale=constants["rescale"],
                      clip_bound=constants["clip_bound"],
                      one_minus_b1=constants["one_minus_b1"], b2=constants["b2"],
                      one_minus_b2=constants["one_minus_b2"],
                      eps=constants["eps"], bc2s=(1.0 - constants["b2"] ** t) ** 0.5,
                      nss=-(lr / (1.0 - constants["b1"] ** t)))


SPEC = Spec(
    name="adam", reference="reference.adam",
    moments={"mean": "signed", "var": "unsigned", "max_var": "unsigned"},
    conventions=("mxnet", "guide", "pytorch"), pytorch_form="lerp",
    pytorch="guide", torch="Adam",
    torch_slots={"mean": "exp_avg", "var": "exp_avg_sq", "max_var": "max_exp_avg_sq"},
    space={"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999),
           "epsilon": Decades(-10, -2)},
    flags={"amsgrad": False},
    usual={"beta1": USUAL_BETA1, "beta2": USUAL_BETA2, "epsilon": Decades(-8, -3)},
    variants=("hyper_f32", "hyper_f64", "constants_in_dtype", "lerp", "eps_inside_root",
              "eps_uncorrected", "eps_corrected", "wd_before_clip", "wd_after_clip",
              "no_bias_correction"),
    record={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-08}, record_ulps=1,
    layouts=({"learning_rate": 0.01},),
    trainer=({}, {"amsgrad": True}),   # AMSGrad under the conventions that have it
    demo={"learning_rate": 0.01},
    bench=(BenchSetting("adam", {}, torch=("Adam", {}), quick=True),),
)


def check_amsgrad(opt):
    """Refuse ``amsgrad=True`` under ``convention="mxnet"`` (Adam's and AdamW's check, run at
    construction and after every assignment): MXNet 1.9.1 has no AMSGrad."""
    if opt.amsgrad and opt.convention == "mxnet":
        raise ValueError("amsgrad=True is refused under convention 'mxnet': MXNet 1.9.1 has no "
                         "AMSGrad. Use convention='pytorch' (torch.optim's "
                         f"{type(opt).__name__}(amsgrad=True)) or convention='guide'")


class MomentConstants:
    """The step constants of the Adam family (Adam, AdamW, LAMB; methods of the optimizer)."""

    def _moment_constants(self):
        """``rescale``, ``clip_bound``, ``b1``, ``one_minus_b1``, ``b2``, ``one_minus_b2``,
        ``eps`` as the convention rounds them, by name."""
        r = self._rounded
        b1, b2 = r(self.beta1), r(self.beta2)
        return dict(rescale=r(self.rescale_grad), clip_bound=self._clip_bound(), b1=b1,
                    one_minus_b1=1.0 - b1,
                    b2=b2, one_minus_b2=1.0 - b2, eps=r(self.epsilon))


@register
class Adam(MomentConstants, Optimizer):
    """Adam (MXNet ``adam``).

    * mxnet: ``lr_t = lr*sqrt(1-beta2^t)/(1-beta1^t);  w = w - lr_t*m/(sqrt(v) + epsilon)``
      with ``g = clip(rs*grad + wd*w, c)``
    * guide: ``w = w - lr/(sqrt(v/(1-beta2^t)) + epsilon) * m/(1-beta1^t)`` with
      ``G = clip(rs*grad, c) + wd*w``

    where ``m = beta1*m + (1-beta1)*g`` and ``v = beta2*v + (1-beta2)*g^2``; ``t`` is the
    per-index update count. MXNet's epsilon is the guide's ``epsilon/sqrt(1-beta2^t)`` (31.6x
    larger at t=1 with beta2=0.999). State: ``(mean, var)``.

    ``convention="pytorch"``: ``torch.optim.Adam`` in torch's order of operations
    (:func:`pytorch_rule`; the reference's alias is "guide", the same update mathematically).

    ``amsgrad=True`` (AMSGrad, Reddi et al. 2018; torch's flag; "guide" and "pytorch" only,
    MXNet 1.9.1 has none): a third slot ``max_var``, the running maximum of ``var``, takes its
    place in the denominator. State: ``(mean, var, max_var)`` then.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("adam", learning_rate=0.1)
        >>> w = np.zeros(3, np.float32); s = opt.create_state(0, w)
        >>> opt.update(0, w, np.ones(3, np.float32), s); np.round(w, 4)
        array([-0.1, -0.1, -0.1], dtype=float32)
    """

    spec = SPEC

    domains = {"beta1": unit(), "beta2": unit(), "epsilon": nonneg(),
               "lazy_update": flag(strict=False, reference=False), "amsgrad": flag()}

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 lazy_update=True, amsgrad=False, **kwargs):
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.lazy_update, self.amsgrad = lazy_update, amsgrad
        super().__init__(learning_rate=learning_rate, **kwargs)

    def check_relations(self):
        check_amsgrad(self)

    def state_slots(self):
        return ("mean", "var", "max_var") if self.amsgrad else ("mean", "var")

    def row_sparse_mode(self, index):
        """MXNet's ``lazy_update``: "lazy" when set (the default), else "standard"."""
        return "lazy" if self.lazy_update else "standard"

    def _step_constants(self):
        """``(r, constants, mxnet_tail)``: ``_rounded`` as a function of a float, the constants of a
        step as the convention rounds them, by name (:meth:`_moment_constants`), and the
        :class:`MxnetRow` fields among them, in its order."""
        c = self._moment_constants()
        return (self._float_rounder(), c,
                (c["rescale"], c["clip_bound"], c["b1"], c["one_minus_b1"], c["b2"],
                 c["one_minus_b2"], c["eps"]))

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        r, constants, mxnet_tail = self._constants("_adam_constants", self._step_constants)
        if self.convention == "mxnet":
            # MXNet computes lr_t in Python doubles from the unrounded betas, then the kernel
            # parameter rounds it to float32 (docs/mxnet-facts.md, 3).
            lr_t = lr * math.sqrt(1.0 - self.beta2 ** t) / (1.0 - self.beta1 ** t)
            square = sparse == "standard" or (sparse == "lazy" and constants["clip_bound"] >= 0)
            # tuple.__new__: the named row without the keyword machinery of its constructor
            return (mxnet_square_rule if square else mxnet_rule,
                    tuple.__new__(MxnetRow, (r(lr_t), r(wd), *mxnet_tail)))
        if self.convention == "pytorch":
            return (pytorch_amsgrad_rule if self.amsgrad else pytorch_rule), \
                pytorch_row(constants, t, lr, decay=1.0, wd=wd)
        return (guide_amsgrad_rule if self.amsgrad else guide_rule), GuideRow(
            lr=lr, wd=r(wd), **constants, bc1=1.0 - constants["b1"] ** t,
            bc2=1.0 - constants["b2"] ** t)
