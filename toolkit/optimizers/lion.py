"""Lion (``lion``; Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms",
Algorithm 2; reference.lion, docs/optimizers/lion.md).

paper (the one convention: MXNet never had Lion, torch.optim has none), with
``g = clip(rescale_grad*grad, c)``::

    c = beta1*m + (1-beta1)*g
    w = w - lr*(sign(c) + wd*w)       (wd: the paper's decoupled lambda)
    m = beta2*m + (1-beta2)*g

One pass reads ``w, g, m`` and writes ``w, m``: SGD with momentum's traffic.
"""
from __future__ import annotations

from typing import NamedTuple

from . import gradient
from .base import Optimizer, row_step
from .registry import register
from .spec import BenchSetting, Spec, TorchPeer
from .spec_spaces import Interval
from .validation import unit

__all__ = ["Lion"]


class LionRow(NamedTuple):
    """The scalars of :func:`paper_rule`: packed on the host, read by name in the kernel."""
    lr: float
    wd: float
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    b1: float
    one_minus_b1: float  #: 1 - beta1
    b2: float
    one_minus_b2: float  #: 1 - beta2


@gradient.through('rescale')
def paper_rule(f):
    """Algorithm 2's lines 5-7 in the paper's grouping (reference.lion.step)."""
    zero, one = f(0), f(1)
    rescaled = gradient.rescaled(f)

    def rule(w, grad, m, hp):
        p = LionRow(*hp)
        g = rescaled(grad, p.rescale, p.clip_bound)
        c = p.b1 * m + p.one_minus_b1 * g
        s = one if c > zero else (-one if c < zero else zero)
        return w - p.lr * (s + p.wd * w), p.b2 * m + p.one_minus_b2 * g
    return rule


SPEC = Spec(
    name="lion", reference="reference.lion",
    moments={"mean": "signed"},
    conventions=("paper",), pytorch=None, torch=None,
    # lion-pytorch 0.2.5 (lucidrains), lion_pytorch/lion_pytorch.py, Lion.__init__
    torch_peer=TorchPeer("Lion", "lion_pytorch.Lion (lion-pytorch 0.2.5)", (
        ("lr", 1e-4), ("betas", (0.9, 0.99)), ("weight_decay", 0.0), ("use_triton", False),
        ("decoupled_weight_decay", False))),
    torch_slots={"mean": "exp_avg"},  # lion-pytorch's name for m
    space={"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.999)},
    # Chen et al. 2023 train with beta1 0.9 or 0.95 and beta2 0.98 or 0.99 (section 3.2, their
    # Table 12); 0.5 to 0.99 each covers what is tuned around them
    usual={"beta1": Interval(0.5, 0.99), "beta2": Interval(0.9, 0.999)},
    # the hyperparameters rounded to float32 (as a float32 JAX or torch run takes them; no
    # hyper_f64, which is the precision MXNet's kernels round away), and two easy mistakes
    # (reference.lion.FORMS)
    variants=("hyper_f32", "momentum_first", "wd_coupled"),
    record={"beta1": 0.9, "beta2": 0.99}, record_ulps=0,
    layouts=({},),
    trainer=({},),
    demo={"learning_rate": 0.001},
    bench=(BenchSetting("lion", {}, quick=True),),
)


@register
class Lion(Optimizer):
    """Lion (Chen et al. 2023, Algorithm 2), under its one convention ``"paper"``.

    ``c = beta1*m + (1-beta1)*g;  w = w - lr*(sign(c) + wd*w);  m = beta2*m + (1-beta2)*g``

    with ``g = clip(rescale_grad*grad, clip_gradient)``. ``wd`` is the paper's decoupled
    ``lambda``, multiplied by the learning rate (lion-pytorch's ``weight_decay``, optax's
    ``weight_decay``). Lion's weight moves by exactly ``lr`` per element before decay, so its
    learning rate is 3 to 10 times below AdamW's (the paper's advice). State: ``(mean,)``.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("lion", learning_rate=0.5)
        >>> w = np.zeros(3, np.float32); s = opt.create_state(0, w)
        >>> opt.update(0, w, np.array([2.0, -1e-9, 0.0], np.float32), s); w
        array([-0.5,  0.5,  0. ], dtype=float32)
    """

    spec = SPEC

    domains = {"beta1": unit(closed=True), "beta2": unit(closed=True)}

    def __init__(self, learning_rate=1e-4, beta1=0.9, beta2=0.99, **kwargs):
        self.beta1, self.beta2 = beta1, beta2
        super().__init__(learning_rate=learning_rate, **kwargs)

    def state_slots(self):
        return ("mean",)

    def _step_constants(self):
        b1, b2 = self.beta1, self.beta2
        return dict(rescale=self.rescale_grad, clip_bound=self._clip_bound(), b1=b1,
                    one_minus_b1=1.0 - b1, b2=b2, one_minus_b2=1.0 - b2)

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        constants = self._constants("_lion_constants", self._step_constants)
        return paper_rule, LionRow(lr=lr, wd=wd, **constants)
