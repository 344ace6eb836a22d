"""Rprop (``rprop``; Riedmiller and Braun 1993, as torch.optim.Rprop documents it;
reference.rprop, docs/optimizers/rprop.md).

pytorch (the one convention: MXNet never had Rprop, torch ships it), with
``g = clip(rescale_grad*grad, c)``::

    t = 1:  step_size = lr
    s = g*prev;  factor = etaplus (s > 0), etaminus (s < 0), 1 (s = 0)
    step_size = clamp(step_size*factor, step_size_min, step_size_max)
    g = 0 where s < 0;  w = w - step_size*sign(g);  prev = g

One pass reads ``w, g, prev, step_size`` and writes ``w, prev, step_size``: Adam's traffic.
The learning rate enters on the first step only, as in torch (which reads it once).
"""
from __future__ import annotations

from typing import NamedTuple

from . import gradient
from .base import Optimizer, row_step
from .registry import register
from .spec import BenchSetting, Spec
from .spec_spaces import Decades, Interval
from .validation import nonneg

__all__ = ["Rprop"]


class RpropRow(NamedTuple):
    """The scalars of :func:`pytorch_rule`: packed on the host, read by name in the kernel."""
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    lr: float            #: the first step size (read on the first step only)
    first: float         #: nonzero on the first step
    etaminus: float
    etaplus: float
    size_min: float      #: step_size_min
    size_max: float      #: step_size_max


@gradient.through('rescale')
def pytorch_rule(f):
    """torch.optim.Rprop's single-tensor update (torch 2.13, torch/optim/rprop.py,
    ``_single_tensor_rprop``) in torch's order of operations::

        s = g*prev;  factor = etaplus (s > 0), etaminus (s < 0), else 1 (s 0 or NaN)
        step_size = (step_size*factor).clamp(step_size_min, step_size_max)
        g = 0 where factor == etaminus;  w = w - step_size*sign(g);  prev = g

    with torch's ``sign`` (0 for NaN: a NaN gradient leaves the weight and its step size as
    they were, and becomes ``prev``) and ``clamp`` (``min > max`` gives ``max``)."""
    zero, one = f(0), f(1)
    rescaled = gradient.rescaled(f)

    def rule(w, grad, prev, size, hp):
        p = RpropRow(*hp)
        g = rescaled(grad, p.rescale, p.clip_bound)
        if p.first != zero:
            size = p.lr
        s = g * prev
        if s > zero:
            factor = p.etaplus
        elif s < zero:
            factor = p.etaminus
        else:  # 0, or NaN (torch's sign of NaN is 0)
            factor = one
        size = size * factor
        if size < p.size_min:
            size = p.size_min
        if size > p.size_max:
            size = p.size_max
        if factor == p.etaminus:
            g = zero
        sign = one if g > zero else (-one if g < zero else zero)
        return w - size * sign, g, size
    return rule


SPEC = Spec(
    name="rprop", reference="reference.rprop",
    conventions=("pytorch",), pytorch="pytorch", torch="Rprop",
    torch_slots={"prev": "prev", "step_size": "step_size"},
    # etaminus in (0, 1) and etaplus above 1 (torch refuses the rest); step sizes over decades
    space={"etaminus": Interval(0.05, 0.95), "etaplus": Interval(1.05, 3.0),
           "step_size_min": Decades(-8, -3), "step_size_max": Decades(-1, 2)},
    # the paper's and torch's eta- 0.5 and eta+ 1.2, around which people stay
    usual={"etaminus": Interval(0.3, 0.7), "etaplus": Interval(1.1, 1.5)},
    fixed={"wd": 0.0}, fixed_reason="Rprop has no weight decay (torch.optim.Rprop has none)",
    # the hyperparameters rounded to float32, and four known forms: Riedmiller and Braun's
    # weight-backtracking, keeping the gradient where its sign changed, torch's documentation
    # box (no clamp where no sign is seen), and each update applied a step late (optax's)
    variants=("hyper_f32", "backtracking", "no_forget", "unclamped_kept", "lag"),
    record={"etaminus": 0.5, "etaplus": 1.2, "step_size_min": 1e-6, "step_size_max": 50.0},
    layouts=({},),
    trainer=({},),
    demo={"learning_rate": 0.001},
    bench=(BenchSetting("rprop", {}, torch=("Rprop", {}), quick=True),),
)


@register
class Rprop(Optimizer):
    """Rprop (Riedmiller and Braun 1993), torch.optim.Rprop's update, under its one convention
    ``"pytorch"``: a step size per weight, grown by ``etaplus`` while the gradient keeps its
    sign and shrunk by ``etaminus`` where it flips (where the weight then waits a step), kept
    in ``[step_size_min, step_size_max]``; the weight moves by ``step_size*sign(g)``.

    The learning rate is every step size's first value (the first step only, as torch reads
    it); ``wd`` must be 0 (Rprop has no weight decay). State: ``(prev, step_size)``.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("rprop", learning_rate=0.1)
        >>> w = np.zeros(2, np.float32); s = opt.create_state(0, w)
        >>> for g in ([2.0, -3.0], [1.0, 3.0]):
        ...     opt.update(0, w, np.array(g, np.float32), s)
        >>> w          # the first moved by 0.1 then 0.12; the second waited after its flip
        array([-0.22,  0.1 ], dtype=float32)
    """

    spec = SPEC

    domains = {"etaminus": nonneg(), "etaplus": nonneg(), "step_size_min": nonneg(),
               "step_size_max": nonneg()}

    def __init__(self, learning_rate=1e-2, etaminus=0.5, etaplus=1.2, step_size_min=1e-6,
                 step_size_max=50.0, **kwargs):
        self.etaminus, self.etaplus = etaminus, etaplus
        self.step_size_min, self.step_size_max = step_size_min, step_size_max
        super().__init__(learning_rate=learning_rate, **kwargs)

    def check_relations(self):
        # at construction and after every assignment (the assignment undone when refused)
        if not 0.0 < self.etaminus < 1.0 < self.etaplus:
            less, more = self.named("etaminus"), self.named("etaplus")
            raise ValueError(f"Rprop needs 0 < {less} < 1 < {more} (as torch.optim.Rprop), "
                             f"got {less}={self.etaminus!r}, {more}={self.etaplus!r}")

    def state_slots(self):
        return ("prev", "step_size")

    _kernel_step = row_step  # kernel_row's rule on (weight, grad, *state arrays)

    def kernel_row(self, t, lr, wd, sparse=None):
        if wd != 0:
            raise ValueError(f"Rprop has no weight decay (torch.optim.Rprop has none), but wd is "
                             f"{wd!r} (wd times its wd_mult); construct it with wd=0")
        r = self._rounded
        return pytorch_rule, RpropRow(
            rescale=r(self.rescale_grad), clip_bound=self._clip_bound(), lr=lr,
            first=1.0 if t == 1 else 0.0, etaminus=r(self.etaminus), etaplus=r(self.etaplus),
            size_min=r(self.step_size_min), size_max=r(self.step_size_max))
