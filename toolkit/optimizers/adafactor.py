"""Adafactor (``adafactor``; Shazeer and Stern 2018, "Adafactor: Adaptive Learning Rates with
Sublinear Memory Cost", Algorithms 4 and 5; reference.adafactor, docs/optimizers/adafactor.md).

pytorch (the default: torch ships Adafactor) and paper, with ``g = clip(rescale_grad*grad, c)``
and ``omb = t^beta2_decay``::

    alpha = max(eps2, RMS(w)) * min(lr, 1/sqrt(t));  w = w*(1 - lr*wd)
    rank >= 2 (the last two dimensions factored; the leading ones a batch of matrices):
        r = lerp(r, mean(g^2, -1), omb);  c = lerp(c, mean(g^2, -2), omb)
        V = r c / max(mean(r), eps1)                     (paper: sums of g^2 + eps1, no clamp)
    rank < 2:  v = lerp(v, g^2, omb);  V = v
    u = g / sqrt(max(V, eps1^2));  w = w - (alpha / max(1, RMS(u)/d)) * u

Not element-wise: a step is a launch of kind "factored" (``toolkit.backends.cpu_factored``):
row and column sums of squares, the statistics, the whole tensor's sums of ``w^2`` and ``u^2``,
then the update, in one call: two passes in float32 (the first takes the sums), three in
float64 (the sums a pass of their own, in torch's order). Under
"pytorch" the rule rounds where torch 2.13's single-tensor step rounds, and the reductions take
torch's order (``cpu_factored``): in float64 the step is torch's, bit for bit, up to 2^20
elements.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..backends import arrays
from ..backends.cpu_factored import FactoredRule
from ..backends.jit import fma, inlined
from ..backends import launches
from . import gradient, torch_ops
from .base import Optimizer, scalar_only
from .registry import register
from .spec import BenchSetting, Spec
from .spec_spaces import Decades, Interval, OneOf
from .validation import nonneg, real

__all__ = ["Adafactor"]

#: ``epsilon1`` None under "paper": Algorithm 4's epsilon_1
PAPER_EPSILON1 = 1e-30


class AdafactorRow(NamedTuple):
    """The float64 scalars of a factored rule (:func:`pytorch_rule`, :func:`paper_rule`),
    packed on the host, read by name in the kernel; each rounded where the rule rounds it."""
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    omb: float         #: 1 - beta2hat_t = t^beta2_decay
    beta: float        #: beta2hat_t = 1 - omb (paper)
    eps1: float        #: NaN: the compute dtype's machine epsilon (torch's default)
    eps1sq: float      #: eps1*eps1, in double (NaN with eps1)
    eps2: float
    rho: float         #: min(lr, 1/sqrt(t))
    d: float           #: the clipping threshold
    decay: float       #: 1 - lr*wd


def _eps1_of(f):
    """``eps1(hp)``: ``(eps1, eps1*eps1)`` of a step in ``f``, as float64: the row's, or where
    it holds NaN (``epsilon1=None`` under "pytorch") ``f``'s machine epsilon and its square
    (the row then does not depend on the weights' dtype: a Trainer plans it from ``(t, lr,
    wd)`` alone)."""
    eps = float(np.finfo(f).eps)
    eps_sq = eps * eps  # in double, as the host squares a given epsilon1

    def eps1(hp):
        p = AdafactorRow(*hp)
        if p.eps1 != p.eps1:
            return eps, eps_sq
        return p.eps1, p.eps1sq
    return inlined(eps1)


def _norm_of(f):
    """``norm(s, x0, count)``: the 2-norm torch returns for a float64 sum of squares ``s`` of
    ``count`` elements, in ``f``: ``|x0|`` for one element (torch does not square it), else
    ``sqrt(s)`` rounded to ``f``."""
    def norm(s, x0, count):
        if count == 1:
            return abs(x0)
        return f(math.sqrt(s))
    return inlined(norm)


def _prep_of(f):
    """``prep(g, hp)``: the gradient element as both rules read it, ``clip(rs*g, c)``."""
    grad_of = gradient.rescaled(f)

    def prep(g, hp):
        p = AdafactorRow(*hp)
        return grad_of(g, f(p.rescale), f(p.clip_bound))
    return inlined(prep)


def _scales_of(f):
    """``scales(sw, w0, su, u0, numel, root, hp)``: ``(1 - lr*wd, -alpha/denom)`` in double,
    as torch forms them in Python floats from the norms: ``alpha = max(eps2,
    |w|/sqrt(numel))*rho`` (Python's ``max``: ``eps2`` unless the RMS is larger, so a NaN weight
    takes ``eps2``) and ``denom = max(1, |u|/(sqrt(numel)*d))``, ``root`` the weight's
    ``numel**0.5`` formed on the host as torch forms it (``FactoredLayout.roots``); the paper's
    are the same."""
    wide = np.float64
    norm = _norm_of(f)

    def scales(sw, w0, su, u0, numel, root, hp):
        p = AdafactorRow(*hp)
        rms = wide(norm(sw, w0, numel)) / root
        alpha = (rms if rms > p.eps2 else p.eps2) * p.rho
        x = wide(norm(su, u0, numel)) / (root * p.d)
        return p.decay, -alpha / (x if x > 1.0 else 1.0)
    return inlined(scales)


def pytorch_rule(f):
    """torch.optim.Adafactor's ``_single_tensor_adafactor`` (torch 2.13) in torch's order of
    operations: ``row_mean = norm(g, -1)^2 / m`` (the norm rounded, squared, divided), the
    statistics by ``lerp_``, ``V = (r*c)/max(mean(r), eps1)``, ``u = rsqrt(max(V, eps1^2))*g``
    (``1/sqrt``), ``alpha`` and ``denom`` in double from the norms, ``w = w*(1 - lr*wd)`` then
    ``w + (-alpha/denom)*u`` rounded once (``add_`` with ``alpha``)."""
    one = f(1)
    lerp = torch_ops.lerp(f)
    norm = _norm_of(f)
    prep, scales, eps1 = _prep_of(f), _scales_of(f), _eps1_of(f)

    def stat(s, x0, count, hp):
        n = norm(s, x0, count)
        return (n * n) / f(count)

    def moment(old, st, hp):
        return lerp(old, st, f(AdafactorRow(*hp).omb))

    def vstat(g, hp):
        return g * g

    def den(s, n, hp):
        mean = f(s) / f(n)
        e = f(eps1(hp)[0])
        if mean < e:  # clamp_(min=eps1): a NaN stays NaN
            return e
        return mean

    def estimate(r, c, d, hp):
        return (r * c) / d

    def direction(g, v, hp):
        e = f(eps1(hp)[1])
        clamped = e if v < e else v  # clamp_(min=eps1*eps1): a NaN stays NaN
        return (one / math.sqrt(clamped)) * g

    def apply(w, u, decay, k, hp):
        return fma(f(k), u, w * f(decay))  # torch's add_(u, alpha=k)
    return FactoredRule(prep, stat, moment, vstat, den, estimate, direction, scales, apply)


def paper_rule(f):
    """Algorithms 4 and 5 from line 3 (reference.adafactor): sums of ``g^2 + eps1`` as the
    statistics, ``R = beta*R + omb*rowsum``, ``V = R C / sum(R)``, ``u = g/sqrt(V)``,
    ``w = w*(1 - lr*wd) - (alpha/max(1, RMS(u)/d))*u``."""
    prep, scales = _prep_of(f), _scales_of(f)

    def stat(s, x0, count, hp):
        return f(s + count * AdafactorRow(*hp).eps1)

    def moment(old, st, hp):
        p = AdafactorRow(*hp)
        return f(p.beta) * old + f(p.omb) * st

    def vstat(g, hp):
        return g * g + f(AdafactorRow(*hp).eps1)

    def den(s, n, hp):
        return f(s)

    def estimate(r, c, d, hp):
        return (r * c) / d

    def direction(g, v, hp):
        return g / math.sqrt(v)

    def apply(w, u, decay, k, hp):
        return w * f(decay) + f(k) * u
    return FactoredRule(prep, stat, moment, vstat, den, estimate, direction, scales, apply)


_RULES = {"pytorch": pytorch_rule, "paper": paper_rule}


SPEC = Spec(
    name="adafactor", reference="reference.adafactor",
    conventions=("pytorch", "paper"), pytorch="pytorch", torch="Adafactor",
    torch_slots={"row_var": "row_var", "col_var": "col_var", "variance": "variance"},
    space={"beta2_decay": OneOf(-0.8, Interval(-1.0, 0.0)),
           # eps1 down to 1e-16: its square stays a normal float32 (torch squares it in double
           # and rounds: 1e-30, the paper's, clamps at 0 in float32, and 0*rsqrt(0) is NaN)
           "epsilon1": OneOf(1e-3, Decades(-16, -3)),
           "epsilon2": OneOf(1e-3, Decades(-8, -1)),
           "clip_threshold": OneOf(1.0, Interval(1.0, 10.0))},
    # the paper's (section 9) and torch's defaults; Shazeer and Stern train with -0.8
    usual={"beta2_decay": Interval(-1.0, -0.5), "epsilon2": Decades(-4, -2),
           "clip_threshold": OneOf(1.0, Interval(1.0, 2.0))},
    tensor=True,
    # the hyperparameters rounded to float32, three easy mistakes and optax's step (the other
    # epsilon
    # placement and statistics are the other convention, which verify names)
    variants=("hyper_f32", "unfactored", "rms_after_decay", "no_update_clipping",
              "no_relative_step"),
    record={"beta2_decay": -0.8, "epsilon1": 1e-8, "epsilon2": 1e-3, "clip_threshold": 1.0},
    record_ulps=1,  # pow(t, beta2_decay) and sqrt of the norms
    layouts=({},),
    trainer=({}, {"clip_threshold": 2.0, "epsilon2": 1e-2}),
    # the demo's weights start at 0, so the step is epsilon2*rho_t until they grow: the relative
    # step uncapped (rho_t = 1/sqrt(t)) trains them in a few epochs
    demo={"learning_rate": 1.0},
    bench=(BenchSetting("adafactor", {}, torch=("Adafactor", {}), quick=True),),
    cuda=False,  # the factored kernels are the CPU's (toolkit.backends.cpu_factored)
    # float32's two passes (toolkit.backends.cpu_factored): the gradient and the weight read,
    # the direction u written (the scratch); the weight and u read (where the model counts the
    # gradient's), the weight written: 24 bytes per element (a large matrix's gradient is read
    # twice: 28); and the row, column and vector statistics read and written once (the side
    # state: as large as the weight for a 1 x 1 convolution)
    first_pass=1, gradient_passes=1,
    side_state=lambda opt, shape: sum(int(np.prod(opt.slot_shape(name, shape)))
                                      for name in opt.state_slots()),
)


@register
class Adafactor(Optimizer):
    """Adafactor (Shazeer and Stern 2018): second moments kept as row and column statistics of
    each matrix, the update clipped by its RMS and scaled by the weight's (relative step).

    * ``convention="pytorch"`` (the default): ``torch.optim.Adafactor``, in torch's order of
      operations;
    * ``convention="paper"``: Algorithms 4 and 5 as printed (statistics are sums of
      ``g^2 + epsilon1``, no clamps).

    ``learning_rate`` caps the relative step, ``rho_t = min(learning_rate, 1/sqrt(t))`` (the
    paper's 1e-2 by default); ``beta2_decay`` is the exponent of ``1 - beta2hat_t = t^decay``;
    ``epsilon1`` (None: the machine epsilon of the dtype the step computes in under "pytorch",
    torch's for float32 and float64 weights, float32's for float16 ones; 1e-30
    under "paper") regularises the second moment, ``epsilon2`` floors the weight's RMS,
    ``clip_threshold`` is the update clipping's ``d``; ``wd`` decays the weight by
    ``1 - lr*wd`` (torch's ``weight_decay``). A weight of rank 2 or more is factored over its
    last two dimensions (state ``row_var`` ``(..., n, 1)``, ``col_var`` ``(..., 1, m)``), a
    vector is not (``variance``); the slot a weight does not use is an empty array.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("adafactor", learning_rate=0.01)
        >>> w = np.ones((2, 3), np.float32); s = opt.create_state(0, w)
        >>> [a.shape for a in s]
        [(2, 1), (1, 3), (0,)]
        >>> opt.update(0, w, np.full((2, 3), 0.5, np.float32), s); w   # alpha = 1*min(0.01, 1)
        array([[0.99, 0.99, 0.99],
               [0.99, 0.99, 0.99]], dtype=float32)
    """

    spec = SPEC
    state_like_weight = False  # row and column statistics: laid out per parameter in a Trainer

    domains = {"beta2_decay": real(maximum=0.0),
               "epsilon1": nonneg(none="None: the compute dtype's eps (torch), 1e-30 (paper)"),
               "epsilon2": nonneg(), "clip_threshold": real(minimum=1.0)}

    def __init__(self, learning_rate=1e-2, beta2_decay=-0.8, epsilon1=None, epsilon2=1e-3,
                 clip_threshold=1.0, **kwargs):
        self.beta2_decay, self.epsilon1, self.epsilon2 = beta2_decay, epsilon1, epsilon2
        self.clip_threshold = clip_threshold
        super().__init__(learning_rate=learning_rate, **kwargs)

    def state_slots(self):
        return ("row_var", "col_var", "variance")

    # --- state of the weight's rank ---------------------------------------------------------
    @staticmethod
    def slot_shape(name, shape):
        """The shape of state slot ``name`` for a weight of ``shape`` (``(0,)`` where the
        weight's rank does not use it)."""
        shape = tuple(int(s) for s in shape)
        if len(shape) >= 2:
            return {"row_var": shape[:-1] + (1,), "col_var": shape[:-2] + (1, shape[-1]),
                    "variance": (0,)}[name]
        return shape if name == "variance" else (0,)

    def _slot_template(self, name, weight):
        return self.slot_shape(name, weight.shape), weight.dtype

    def _template_key(self):
        # _slot_template reads the weight's shape and dtype only: the base key holds
        return self.state_slots(), self._tuple_state()

    def _init_slot(self, name, weight):
        d = arrays.describe(weight)
        return arrays.zeros(self.slot_shape(name, d.shape), d.dtype, weight)

    # --- epsilon1 of the weight's dtype -----------------------------------------------------
    def epsilon1_for(self, dtype):
        """``epsilon1`` of a step on weights of ``dtype``: the value set, else the
        convention's default (torch's ``finfo(dtype).eps``; the paper's 1e-30)."""
        if self.epsilon1 is not None:
            return float(self.epsilon1)
        if self.convention == "paper":
            return PAPER_EPSILON1
        return float(np.finfo(np.dtype(dtype)).eps)

    def reference_hyper_for(self, dtype):
        return {**self.reference_hyper(), "epsilon1": self.epsilon1_for(dtype)}

    # --- the step ---------------------------------------------------------------------------
    def kernel_row(self, t, lr, wd, sparse=None):
        """``(factory, row)`` of a step at count ``t`` with ``lr`` and ``wd`` (the float64
        :class:`AdafactorRow`), whatever the weights' shapes and dtype: ``epsilon1=None``
        under "pytorch" is NaN in the row, the machine epsilon of the dtype the kernel
        computes in (float32 for float16 weights), and each weight's ``numel**0.5`` is its
        layout's (``FactoredLayout.roots``)."""
        default = self.epsilon1 is None and self.convention == "pytorch"
        return self._row(t, lr, wd, math.nan if default else self.epsilon1_for(None))

    def _row(self, t, lr, wd, eps1):
        """:meth:`kernel_row` with ``epsilon1`` given."""
        omb = float(t) ** self.beta2_decay
        c = self.clip_gradient
        return _RULES[self.convention], AdafactorRow(
            rescale=self.rescale_grad, clip_bound=-1.0 if c is None else c, omb=omb,
            beta=1.0 - omb, eps1=eps1, eps1sq=eps1 * eps1, eps2=self.epsilon2,
            # torch's 1/(step**0.5): pow, one ulp from sqrt at some counts (t = 5579, 11271)
            rho=min(lr, 1.0 / (float(t) ** 0.5)), d=self.clip_threshold, decay=1.0 - lr * wd)

    @property
    def scalar_launch(self):
        # a subclass's own epsilon1_for reads the weights' dtype: its steps are planned index
        # by index (each with the value it gives)
        return None if self._own_epsilon1 else super().scalar_launch

    @property
    def _own_epsilon1(self):
        return type(self).epsilon1_for is not Adafactor.epsilon1_for

    @scalar_only(kind="factored")
    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        if self._own_epsilon1:  # (the dtype the kernel computes in: float32 for float16)
            factory, row = self._row(t, lr, wd,
                                     float(self.epsilon1_for(arrays.describe(weight).dtype)))
        else:
            factory, row = self.kernel_row(t, lr, wd)
        return launches.factored(factory, weight, grad, self.state_arrays(state), row)
