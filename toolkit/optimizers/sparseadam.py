"""SparseAdam (``sparseadam``; torch.optim.SparseAdam, Adam's moments and step for sparse
gradients, applied lazily; reference.sparseadam, docs/optimizers/sparseadam.md).

pytorch (the one convention: torch ships it, MXNet never had it), with
``g = clip(rescale_grad*grad, c)``, on every row present in the gradient (every row of a dense
one; a ``toolkit.RowSparse`` gradient's rows only, the others untouched)::

    m = m + (1-beta1)*(g - m);  v = v + (1-beta2)*(g*g - v)
    w = w - lr*sqrt(1 - beta2^t)/(1 - beta1^t) * m/(sqrt(v) + eps)

torch's order of operations (torch/optim/_functional.py ``sparse_adam``), with the step size
formed on the host in double. One pass reads ``w, g, m, v`` and writes ``w, m, v``: Adam's
traffic.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from . import gradient
from .adam import MomentConstants
from .base import Optimizer, row_step
from .registry import register
from .spec import BenchSetting, Spec
from .spec_spaces import Decades, Interval, USUAL_BETA1, USUAL_BETA2
from .validation import positive, unit

__all__ = ["SparseAdam"]


class SparseAdamRow(NamedTuple):
    """The scalars of :func:`pytorch_rule`: packed on the host, read by name in the kernel."""
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    one_minus_b1: float  #: 1 - beta1, formed in double
    one_minus_b2: float  #: 1 - beta2, formed in double
    eps: float
    nss: float           #: -lr*sqrt(1 - beta2^t)/(1 - beta1^t), torch's -step_size


@gradient.through('rescale')
def pytorch_rule(f):
    """torch.optim.SparseAdam's update of one entry present in the gradient (torch 2.13,
    ``torch.optim._functional.sparse_adam``) in torch's order of operations::

        d1 = (g - m)*(1 - beta1);  m = m + d1
        d2 = (g*g - v)*(1 - beta2);  v = v + d2
        w = w + (-step_size)*(m/(sqrt(v) + eps))

    (torch's ``numer = d1 + m_old`` and ``d2 + v_old`` are the new moments, the same sums.)"""
    rescaled = gradient.rescaled(f)

    def rule(w, grad, m, v, hp):
        p = SparseAdamRow(*hp)
        g = rescaled(grad, p.rescale, p.clip_bound)
        m = m + (g - m) * p.one_minus_b1
        v = v + (g * g - v) * p.one_minus_b2
        return w + p.nss * (m / (math.sqrt(v) + p.eps)), m, v
    return rule


SPEC = Spec(
    name="sparseadam", reference="reference.sparseadam",
    conventions=("pytorch",), pytorch="pytorch", torch="SparseAdam", torch_step="int",
    torch_sparse=True,
    torch_slots={"mean": "exp_avg", "var": "exp_avg_sq"},
    space={"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999),
           "epsilon": Decades(-10, -2)},
    usual={"beta1": USUAL_BETA1, "beta2": USUAL_BETA2, "epsilon": Decades(-8, -3)},
    fixed={"wd": 0.0},
    fixed_reason="SparseAdam has no weight decay (torch.optim.SparseAdam has none)",
    # the hyperparameters rounded to float32, torch.optim.Adam's epsilon placement (SparseAdam
    # written as Adam on the rows present), and the bias corrections formed in float32
    variants=("hyper_f32", "eps_corrected", "constants_in_dtype"),
    record={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-08}, record_ulps=1,
    layouts=({},),
    trainer=({},),
    demo={"learning_rate": 0.01},
    bench=(BenchSetting("sparseadam", {}, torch=("Adam", {})),),
)


@register
class SparseAdam(MomentConstants, Optimizer):
    """SparseAdam, torch.optim.SparseAdam's update, under its one convention ``"pytorch"``:
    Adam's moments and bias-corrected step on the rows a gradient holds, every other row's
    weight and moments left exactly as they were (a ``toolkit.RowSparse`` gradient steps
    lazily, as torch's sparse gradients do; a dense gradient holds every row)::

        m = m + (1-beta1)*(g - m);  v = v + (1-beta2)*(g*g - v)
        w = w - lr*sqrt(1 - beta2^t)/(1 - beta1^t) * m/(sqrt(v) + epsilon)

    Epsilon is added to the uncorrected root, as MXNet's Adam adds it (not torch.optim.Adam's
    placement); ``wd`` must be 0 (torch's SparseAdam has no weight decay). State:
    ``(mean, var)``.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer, RowSparse
        >>> opt = optimizer.create("sparseadam", learning_rate=0.1)
        >>> w = np.zeros((3, 2), np.float32); s = opt.create_state(0, w)
        >>> opt.update(0, w, RowSparse([1], np.ones((1, 2), np.float32), (3, 2)), s)
        >>> np.round(w, 6)   # only row 1 moved; rows 0 and 2 and their moments are untouched
        array([[ 0. ,  0. ],
               [-0.1, -0.1],
               [ 0. ,  0. ]], dtype=float32)
    """

    spec = SPEC

    # epsilon > 0, as torch.optim.SparseAdam checks (sqrt(v) + 0 is 0 where a row saw zeros)
    domains = {"beta1": unit(), "beta2": unit(), "epsilon": positive()}

    def __init__(self, learning_rate=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8, **kwargs):
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        super().__init__(learning_rate=learning_rate, **kwargs)

    def state_slots(self):
        return ("mean", "var")

    def row_sparse_mode(self, index):
        """Always "lazy": only the rows present step, as torch's SparseAdam."""
        return "lazy"

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        if wd != 0:
            raise ValueError(f"SparseAdam has no weight decay (torch.optim.SparseAdam has "
                             f"none), but wd is {wd!r} (wd times its wd_mult); construct it "
                             "with wd=0")
        c = self._constants("_sparseadam_constants", self._moment_constants)
        # torch's Python floats: lr*math.sqrt(bias_correction2)/bias_correction1
        step_size = lr * math.sqrt(1.0 - c["b2"] ** t) / (1.0 - c["b1"] ** t)
        return pytorch_rule, SparseAdamRow(
            rescale=c["rescale"], clip_bound=c["clip_bound"], one_minus_b1=c["one_minus_b1"],
            one_minus_b2=c["one_minus_b2"], eps=c["eps"], nss=-step_size)
