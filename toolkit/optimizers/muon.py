"""Muon (``muon``; Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural
networks"; torch.optim.Muon; reference.muon, docs/optimizers/muon.md).

pytorch (the default: torch ships Muon) and paper, with ``g = clip(rescale_grad*grad, c)``::

    pytorch:  buf = lerp(buf, g, 1 - momentum);  u = lerp(g, buf, momentum) if nesterov else buf
    paper:    buf = momentum*buf + g;            u = g + momentum*buf       if nesterov else buf
    O = NS(u)            (steps quintic Newton-Schulz iterations, coefficients (a, b, c), of
                          u / max(|u|_F, eps) (pytorch) or u / (|u|_F + eps) (paper))
    w = w*(1 - lr*wd) - adjust(lr)*O

Not element-wise: a step is a launch of kind "matrix" (``toolkit.backends.cpu_matrix``): the
moment in one compiled pass that also sums ``u^2``, the iteration's products through BLAS in the
weight's precision, the update in a second compiled pass. torch runs the iteration in bfloat16
whatever the weight's dtype; the toolkit in the weight's (float32 for float16 weights), so it
equals torch.optim.Muon within the bound of a bfloat16 iteration (tests/test_muon_proofs.py), not
bit for bit. Muon optimises 2-D weights only.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from ..backends import launches
from ..backends.cpu_matrix import MatrixRule
from ..backends.jit import fma
from . import gradient, torch_ops
from .base import Optimizer
from .registry import register
from .spec import BenchSetting, Spec
from .spec_spaces import Decades, Interval, Ints, OneOf
from .validation import choice, flag, integer, nonneg, reals, unit

__all__ = ["Muon"]

#: Keller Jordan's quintic coefficients (torch's default)
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
#: torch's ``adjust_lr_fn`` values: None and "original" (``lr*sqrt(max(1, rows/cols))``),
#: "match_rms_adamw" (``lr*0.2*sqrt(max(rows, cols))``, Moonshot's)
ADJUST_LR = (None, "original", "match_rms_adamw")


class MuonRow(NamedTuple):
    """The float64 scalars of a Muon step, packed on the host: the rule reads its fields by name
    (each rounded where the rule rounds it), ``toolkit.backends.cpu_matrix`` the iteration's
    (``a, b, c, eps, steps, clamp``)."""
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    mu: float          #: momentum
    omm: float         #: 1 - momentum
    nesterov: float    #: 1.0 or 0.0
    a: float
    b: float
    c: float
    eps: float
    steps: float       #: ns_steps
    clamp: float       #: 1.0: max(|X|, eps) (pytorch); 0.0: |X| + eps (paper)
    decay: float       #: 1 - lr*wd
    k: float           #: -adjust(lr)


def pytorch_rule(f):
    """torch.optim.Muon's ``_single_tensor_muon`` (torch 2.13) around its iteration:
    ``buf.lerp_(g, 1 - momentum)``, ``g.lerp(buf, momentum)``, ``param.mul_(1 - lr*wd)``, then
    ``param.add_(O, alpha=-adjusted_lr)`` rounded once."""
    lerp = torch_ops.lerp(f)
    grad_of = gradient.rescaled(f)

    def moment(grad, buf, hp):
        p = MuonRow(*hp)
        g = grad_of(grad, f(p.rescale), f(p.clip_bound))
        b = lerp(buf, g, f(p.omm))
        if p.nesterov != 0.0:
            return b, lerp(g, b, f(p.mu))
        return b, b

    def apply(w, o, hp):
        p = MuonRow(*hp)
        return fma(f(p.k), o, w * f(p.decay))
    return MatrixRule(moment, apply)


def paper_rule(f):
    """The post's algorithm (reference.muon, "paper"): ``buf = momentum*buf + g``, the Nesterov
    mix ``g + momentum*buf``, ``w*(1 - lr*wd) - adjust(lr)*O``."""
    grad_of = gradient.rescaled(f)

    def moment(grad, buf, hp):
        p = MuonRow(*hp)
        g = grad_of(grad, f(p.rescale), f(p.clip_bound))
        b = f(p.mu) * buf + g
        if p.nesterov != 0.0:
            return b, g + f(p.mu) * b
        return b, b

    def apply(w, o, hp):
        p = MuonRow(*hp)
        return w * f(p.decay) + f(p.k) * o
    return MatrixRule(moment, apply)


_RULES = {"pytorch": pytorch_rule, "paper": paper_rule}


def adjusted_lr(lr, adjust_lr, shape):
    """torch's ``_adjust_lr`` for a weight of ``shape`` (``reference.muon.adjusted_lr``)."""
    rows, cols = shape
    if adjust_lr == "match_rms_adamw":
        return lr * (0.2 * math.sqrt(max(rows, cols)))
    # a weight of no columns has nothing to step (torch divides by zero there)
    return lr * math.sqrt(max(1, rows / cols)) if cols else lr


SPEC = Spec(
    name="muon", reference="reference.muon",
    conventions=("pytorch", "paper"), pytorch="pytorch", torch="Muon",
    torch_slots={"momentum_buffer": "momentum_buffer"},
    space={"momentum": OneOf(0.95, Interval(0.0, 0.99)), "nesterov": OneOf(True, False),
           # Keller Jordan's, the classic quintic (15, -10, 3)/8 and the cubic (3, -1)/2
           "ns_coefficients": OneOf(NS_COEFFICIENTS, (1.875, -1.25, 0.375), (1.5, -0.5, 0.0)),
           "epsilon": OneOf(1e-7, Decades(-10, -3)), "ns_steps": OneOf(5, Ints(0, 6)),
           "adjust_lr": OneOf(*ADJUST_LR)},
    # Jordan et al. train with momentum 0.95, Nesterov, 5 steps of their coefficients
    usual={"momentum": Interval(0.9, 0.99), "ns_coefficients": OneOf(NS_COEFFICIENTS),
           "ns_steps": OneOf(5)},
    matrix=True,
    # the oracle's usual 8 elements give a Gram matrix of 2 x 2 at most and few tall shapes
    case_size=36,
    # the hyperparameters rounded to float32 (as a float32 torch run takes them) and the
    # iteration in bfloat16, as torch and the post run it (reference.muon.FORMS)
    variants=("hyper_f32", "bfloat16"),
    record={"momentum": 0.95, "nesterov": True, "adjust_lr": "match_rms_adamw"},
    record_ulps=1,  # sqrt of the norm and BLAS's order of the products' sums
    layouts=({},),
    trainer=({}, {"nesterov": False, "adjust_lr": "match_rms_adamw"}),
    demo={"learning_rate": 0.02},
    # (not in --quick: a 2^24-element matrix's iteration takes seconds; benchmarks/muon_cpu.py
    # times GPT-2's matrices against torch.optim.Muon)
    bench=(BenchSetting("muon", {}, torch=("Muon", {})),),
    # bench's floor counts the element-wise traffic only: the gradient and the buffer read and
    # written in the first pass (the buffer a state laid out per member), the weight in the
    # last, and the scratch matrix between them (written, then read twice: 3 passes). The step
    # is bound by its matrix products, not by this traffic (benchmarks/muon_cpu.py)
    first_pass=1, gradient_passes=3,
)


@register
class Muon(Optimizer):
    """Muon (Jordan et al. 2024): the momentum of a 2-D weight's gradient orthogonalised by a
    quintic Newton-Schulz iteration, applied with a shape-dependent step.

    * ``convention="pytorch"`` (the default): ``torch.optim.Muon``'s update (its lerped buffer,
      ``max(|X|_F, eps)``), with the iteration in the weight's precision (torch's in bfloat16);
    * ``convention="paper"``: the post's algorithm (a summed buffer, ``|X|_F + eps``).

    ``momentum`` (0.95), ``nesterov`` (True), ``ns_coefficients`` ``(a, b, c)`` and ``ns_steps``
    (5) of the iteration ``A = X X^T;  X = a X + (b A + c A A) X``, ``epsilon`` (1e-7) of its
    normalisation, ``adjust_lr`` (torch's ``adjust_lr_fn``: None or "original" scale ``lr`` by
    ``sqrt(max(1, rows/cols))``, "match_rms_adamw" by ``0.2*sqrt(max(rows, cols))``); ``wd``
    decays the weight by ``1 - lr*wd`` (torch's ``weight_decay``, 0.1 by default there). A weight
    that is not 2-D is refused: optimise biases, gains, embeddings and the output layer with
    AdamW (the usual split). State: ``(momentum_buffer,)``.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("muon", learning_rate=0.5, momentum=0.0, ns_steps=0)
        >>> w = np.zeros((1, 2), np.float32); s = opt.create_state(0, w)
        >>> opt.update(0, w, np.array([[3.0, 4.0]], np.float32), s); w
        array([[-0.3, -0.4]], dtype=float32)
    """

    spec = SPEC
    # the buffer is shaped like the weight, but a Trainer's flat buffers are 1-D, which Muon
    # refuses: each member's state is made for its own matrix, then laid end to end
    state_like_weight = False

    domains = {"momentum": unit(), "nesterov": flag(), "ns_coefficients": reals(3),
               "epsilon": nonneg(), "ns_steps": integer(0, maximum=99),
               "adjust_lr": choice(ADJUST_LR)}

    def __init__(self, learning_rate=1e-3, momentum=0.95, nesterov=True,
                 ns_coefficients=NS_COEFFICIENTS, epsilon=1e-7, ns_steps=5, adjust_lr=None,
                 **kwargs):
        self.momentum, self.nesterov = momentum, nesterov
        self.ns_coefficients, self.epsilon = ns_coefficients, epsilon
        self.ns_steps, self.adjust_lr = ns_steps, adjust_lr
        super().__init__(learning_rate=learning_rate, **kwargs)

    def state_slots(self):
        return ("momentum_buffer",)

    def check_shape(self, shape):
        self.check_matrix(shape)

    @staticmethod
    def check_matrix(shape):
        """``shape``, refused unless 2-D (torch.optim.Muon's rule), naming the usual split."""
        if len(shape) != 2:
            raise ValueError(
                f"muon: Muon optimises 2-D weights only (hidden layers' matrices); got a weight "
                f"of shape {tuple(shape)}. Optimise the others (biases, gains, embeddings, the "
                "output layer) with AdamW, the usual split")
        return tuple(shape)

    def _check_weight(self, weight):
        d = super()._check_weight(weight)
        self.check_matrix(d.shape)
        return d

    def _slot_template(self, name, weight):
        return self.check_matrix(weight.shape), weight.dtype

    def _template_key(self):
        # _slot_template reads the weight's shape and dtype only: the base key holds
        return self.state_slots(), self._tuple_state()

    def matrix_row(self, t, lr, wd, shape):
        """``(factory, row)`` of a step with ``lr`` and ``wd`` on a weight of ``shape`` (the
        float64 :class:`MuonRow`; Muon has no bias correction, so ``t`` is not read)."""
        a, b, c = self.ns_coefficients
        clip = self.clip_gradient
        return _RULES[self.convention], MuonRow(
            rescale=self.rescale_grad, clip_bound=-1.0 if clip is None else clip,
            mu=self.momentum, omm=1.0 - self.momentum, nesterov=float(bool(self.nesterov)),
            a=a, b=b, c=c, eps=self.epsilon, steps=float(self.ns_steps),
            clamp=float(self.convention == "pytorch"), decay=1.0 - lr * wd,
            k=-adjusted_lr(lr, self.adjust_lr, shape))

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        from ..backends import arrays
        factory, row = self.matrix_row(t, lr, wd, tuple(arrays.describe(weight).shape))
        return launches.matrix(factory, weight, grad, self.state_arrays(state), row)
