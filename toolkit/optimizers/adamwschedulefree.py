"""Schedule-Free AdamW (``adamwschedulefree``; Defazio et al. 2024, "The Road Less Scheduled",
Algorithm 1; reference.adamwschedulefree, docs/optimizers/adamwschedulefree.md).

paper (the one convention: MXNet never had it, torch.optim has none). The weight holds ``y``,
the point the gradient is taken at; the state holds ``z`` and ``v``. With
``g = clip(rescale_grad*grad, c)`` and the host's float64 ``gamma_t`` and ``c = c_{t+1}``
(:func:`averaging`)::

    v = beta2*v + (1-beta2)*g*g
    u = g/(sqrt(v/bc2) + eps) + wd*y          (bc2 = 1 with lr_bias_correction, else 1-beta2^t)
    y = lerp(y, z, c) + gamma_t*(beta1*(1-c) - 1)*u
    z = z - gamma_t*u

in the order of operations of the authors' ``AdamWScheduleFree``/``AdamWScheduleFreePaper``
(schedulefree 1.4.1), each line rounded as torch rounds it (:mod:`.torch_ops`). One pass reads
``y, g, z, v`` and writes ``y, z, v``: Adam's traffic. :meth:`AdamWScheduleFree.to_eval` and
:meth:`~AdamWScheduleFree.to_train` move the weight to the average ``x`` and back.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..backends import arrays
from ..backends.jit import fma
from ..backends.launches import Launch
from . import gradient, torch_ops
from .base import Optimizer, scalar_only
from .registry import register
from .spec import BenchSetting, Spec, TorchPeer
from .spec_spaces import Decades, Interval, OneOf
from .validation import flag, integer, nonneg, unit

__all__ = ["AdamWScheduleFree", "averaging", "gamma", "weight"]


class Row(NamedTuple):
    """The scalars of :func:`paper_rule`: packed on the host, read by name in the kernel."""
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    b2: float
    one_minus_b2: float  #: 1 - beta2
    bc2: float           #: 1 - beta2^t; 1 with lr_bias_correction (the root is in gamma_t)
    eps: float
    wd: float            #: the decay added to the normalised gradient, at y
    c: float             #: c_{t+1}, the weight of z in the average
    y_step: float        #: gamma_t*(beta1*(1 - c) - 1)
    neg_lr: float        #: -gamma_t


@gradient.through('rescale')
def paper_rule(f):
    """Algorithm 1's step on the stored ``(y, z)`` (reference.adamwschedulefree.step), in the
    authors' order of operations: ``exp_avg_sq.mul_(beta2).addcmul_(g, g, 1-beta2)``;
    ``g/(sqrt(v/bc2) + eps)``; ``add_(y, alpha=wd)``; ``y.lerp_(z, c)``;
    ``y.add_(u, alpha=y_step)``; ``z.sub_(u, alpha=gamma_t)``."""
    zero = f(0)
    rescaled = gradient.rescaled(f)
    square_avg = torch_ops.square_avg(f)
    lerp = torch_ops.lerp(f)

    def rule(y, grad, z, v, hp):
        p = Row(*hp)
        g = rescaled(grad, p.rescale, p.clip_bound)
        v = square_avg(v, g, p.b2, p.one_minus_b2)
        u = g / (math.sqrt(v / p.bc2) + p.eps)
        if p.wd != zero:
            u = fma(p.wd, y, u)
        y_new = fma(p.y_step, u, lerp(y, z, p.c))
        return y_new, fma(p.neg_lr, u, z), v
    return rule


def gamma(t, lr, *, beta2, warmup_steps, lr_bias_correction, **_):
    """The learning rate ``gamma_t`` of step ``t`` in float64, as the authors' ``step`` forms
    it from its group's ``lr`` and ``k = t - 1``: the warmup ``(k+1)/warmup_steps`` while
    ``k < warmup_steps``, then ``sqrt(1 - beta2^(k+1))`` with ``lr_bias_correction``."""
    k = t - 1
    sched = (k + 1) / warmup_steps if k < warmup_steps else 1.0
    if lr_bias_correction:
        return lr * sched * math.sqrt(1.0 - beta2 ** (k + 1))
    return lr * sched


def weight(t, lr_max, *, r, weight_lr_power, **_):
    """The weight of step ``t``'s ``z`` in the average, ``(k+1)^r * lr_max^weight_lr_power``
    (``k + 1 = t``, an int to the power ``r`` as there); ``c_{t+1}`` is it over the sum of
    the weights so far."""
    return (t ** r) * (lr_max ** weight_lr_power)


def averaging(t, lr, lr_max, weight_sum, **hyper):
    """``(lr_max, weight_sum)`` after step ``t``: ``lr_max = max(gamma_t, lr_max)``, the
    sum plus :func:`weight` (the authors' order)."""
    lr_max = max(gamma(t, lr, **hyper), lr_max)
    return lr_max, weight_sum + weight(t, lr_max, **hyper)


#: ``(lr_max, weight_sum)`` of an index that has not stepped (the authors' initial group values)
FRESH = (-1.0, 0.0)


SPEC = Spec(
    name="adamwschedulefree", reference="reference.adamwschedulefree",
    conventions=("paper",), pytorch=None, torch=None,
    # the authors' implementation, schedulefree 1.4.1, schedulefree/adamwschedulefree.py,
    # AdamWScheduleFree.__init__ (foreach: how torch runs the update; the bias correction
    # inside the root: lr_bias_correction=False, its defaults below)
    torch_peer=TorchPeer("AdamWScheduleFree", "schedulefree.AdamWScheduleFree (schedulefree "
                                              "1.4.1, the authors' code)", (
        ("lr", 0.0025), ("betas", (0.9, 0.999)), ("eps", 1e-8), ("weight_decay", 0),
        ("warmup_steps", 0), ("r", 0.0), ("weight_lr_power", 2.0), ("foreach", True)),
        form=(("lr_bias_correction", False),)),
    torch_slots={"z": "z", "var": "exp_avg_sq"},
    space={"beta1": Interval(0.05, 0.99), "beta2": Interval(0.0, 0.9999),
           "epsilon": Decades(-10, -2), "warmup_steps": OneOf(0, 3, 10),
           "r": OneOf(0.0, Interval(0.0, 2.0)), "weight_lr_power": OneOf(2.0, 0.0, 1.0),
           "lr_bias_correction": OneOf(True, False)},
    # the paper trains with beta1 0.9 (0.95 for some tasks) and beta2 0.999 (0.95 to 0.9999),
    # epsilon 1e-8; warmup of a few percent of the steps
    usual={"beta1": Interval(0.5, 0.99), "beta2": Interval(0.9, 0.9999),
           "epsilon": Decades(-10, -6)},
    variants=("hyper_f32", "constants_in_dtype", "warmup_lag", "warmup_f32"),
    record={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "warmup_steps": 2, "r": 0.5,
            "weight_lr_power": 2.0, "lr_bias_correction": True}, record_ulps=1,
    layouts=({},),
    trainer=({}, {"lr_bias_correction": False, "warmup_steps": 2}),
    demo={"learning_rate": 0.01},
    bench=(BenchSetting("adamwschedulefree", {}, quick=True),),
)


@register
class AdamWScheduleFree(Optimizer):
    """Schedule-Free AdamW (Defazio et al. 2024, Algorithm 1), under its one convention
    ``"paper"``. The weight is ``y``, where the gradient is taken; the state is ``(z, var)``,
    ``z`` starting as a copy of the weight. Each step::

        gamma_t = lr*min(1, t/warmup_steps)*sqrt(1 - beta2^t)      (the root: lr_bias_correction)
        c       = t^r*lr_max^p / sum of those so far               (lr_max: the largest gamma yet,
                                                                    p: weight_lr_power)
        v = beta2*v + (1-beta2)*g^2;  u = g/(sqrt(v) + epsilon) + wd*y
        y = (1-c)*y + c*z + gamma_t*(beta1*(1-c) - 1)*u;  z = z - gamma_t*u

    with ``g = clip(rescale_grad*grad, clip_gradient)``. ``lr_bias_correction=False`` is the
    authors' later default (``schedulefree.AdamWScheduleFree``): ``gamma_t`` without the root
    and ``u = g/(sqrt(v/(1-beta2^t)) + epsilon) + wd*y``. ``lr_max`` and the sum of the weights
    are kept per index on the host, in float64 (``opt.averaging[index]``), as the authors keep
    them per parameter group.

    The point to evaluate (and to save) is the average ``x``: :meth:`to_eval` moves a weight
    from ``y`` to ``x`` in place, :meth:`to_train` back (the authors' ``eval()`` and
    ``train()``); ``Trainer.eval()``/``Trainer.train()`` do so for every parameter.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("adamwschedulefree", learning_rate=0.1)
        >>> w = np.ones(2); s = opt.create_state(0, w)
        >>> opt.update(0, w, np.array([1.0, -1.0]), s); w.round(6)  # c = 1: y is z after one step
        array([0.9, 1.1])
        >>> opt.update(0, w, np.array([1.0, -1.0]), s); w.round(6), s[0].round(6)
        (array([0.83001, 1.16999]), array([0.8, 1.2]))
        >>> opt.to_eval(w, s); w.round(6)   # x: the z's averaged with weights gamma_t^2
        array([0.833344, 1.166656])
    """

    spec = SPEC

    domains = {"beta1": unit(), "beta2": unit(), "epsilon": nonneg(),
               "warmup_steps": integer(0), "r": nonneg(), "weight_lr_power": nonneg(),
               "lr_bias_correction": flag()}

    def __init__(self, learning_rate=0.0025, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 warmup_steps=0, r=0.0, weight_lr_power=2.0, lr_bias_correction=True,
                 **kwargs):
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.warmup_steps, self.r, self.weight_lr_power = warmup_steps, r, weight_lr_power
        self.lr_bias_correction = lr_bias_correction
        #: index -> ``(lr_max, weight_sum)`` after its last step (float64; an index not yet
        #: stepped starts at :data:`FRESH`)
        self.averaging = {}
        #: whether the parameters of the Trainer that steps this optimizer are at the average
        #: ``x`` (``Trainer.eval()``) rather than at ``y``; kept in its states file
        self.eval_mode = False
        super().__init__(learning_rate=learning_rate, **kwargs)

    def state_slots(self):
        return ("z", "var")

    def _init_slot(self, name, weight):
        # z_1 = x_1 (Algorithm 1, line 2): a copy of the weight, of its kind, device and order
        return arrays.copy(weight) if name == "z" else arrays.zeros_like(weight)

    # --- the averaging weights, kept on the host ---------------------------------------------
    def host_state(self):
        """``{"averaging": [[index, lr_max, weight_sum], ...], "eval_mode": bool}``: the
        averaging of the indices that have stepped, in index order, and the Trainer's mode."""
        order = sorted(self.averaging, key=lambda k: (isinstance(k, str), k))
        return {"averaging": [[k, *self.averaging[k]] for k in order],
                "eval_mode": self.eval_mode}, {}

    def check_host_state(self, data, host_arrays):
        got = data.get("averaging") if isinstance(data, dict) else None
        per_index = {}
        ok = isinstance(data, dict) and set(data) == {"averaging", "eval_mode"} and \
            not host_arrays and isinstance(got, list) and type(data["eval_mode"]) is bool
        for entry in got if ok else ():
            if not (isinstance(entry, (list, tuple)) and len(entry) == 3 and
                    type(entry[0]) in (int, str) and entry[0] not in per_index and
                    all(isinstance(x, float) and math.isfinite(x) for x in entry[1:]) and
                    entry[2] >= 0.0):
                ok = False
                break
            per_index[entry[0]] = (entry[1], entry[2])
        if not ok:
            raise ValueError("Schedule-Free AdamW's host state must be averaging, a list of "
                             "[index, lr_max, weight_sum] (each index once, finite floats, the "
                             f"sum >= 0), and eval_mode, a bool; got {data}")

        def commit():
            self.averaging, self.eval_mode = per_index, data["eval_mode"]
        return commit

    def _hyper(self):
        return dict(beta2=self.beta2, warmup_steps=self.warmup_steps, r=self.r,
                    weight_lr_power=self.weight_lr_power,
                    lr_bias_correction=self.lr_bias_correction)

    def _reference_extra(self, index, weight=None):
        lr_max, weight_sum = self.averaging.get(index, FRESH)
        return {"lr_max": lr_max, "weight_sum": weight_sum}

    def _reference_store_extra(self, index, new_state, weight):
        pass  # the host scalars are committed with the count, on every backend (host_next)

    host_scalars = ("lr_max", "weight_sum")

    def host_next(self, indices, t, lr):
        """Each index's ``(lr_max, weight_sum)`` after its step at count ``t[j]`` with
        learning rate ``lr[j]`` (:func:`averaging`, once per distinct ``(t, lr, lr_max,
        weight_sum)``)."""
        hyper, out, made = self._hyper(), np.empty((len(indices), 2)), {}
        for j, (index, tj, lrj) in enumerate(zip(indices, t.tolist(), lr.tolist())):
            key = (tj, lrj, self.averaging.get(index, FRESH))
            after = made.get(key)
            if after is None:
                after = made[key] = averaging(tj, lrj, *key[2], **hyper)
            out[j] = after
        return out

    def commit_host(self, indices, host):
        for index, (lr_max, weight_sum) in zip(indices, host.tolist()):
            self.averaging[index] = (lr_max, weight_sum)

    @scalar_only  # its row reads the index's host scalars only, which planners hand it
    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        after = averaging(t, lr, *self.averaging.get(index, FRESH), **self._hyper())
        factory, row = self.kernel_row(t, lr, wd, host=after)
        return Launch("rule", factory, weight, grad, self.state_arrays(state), row)

    def kernel_row(self, t, lr, wd, sparse=None, host=None):
        """The row of a step at count ``t`` of an index whose ``(lr_max, weight_sum)`` after
        the step are ``host`` (:meth:`host_next`)."""
        if host is None:
            raise TypeError("AdamWScheduleFree.kernel_row needs host=(lr_max, weight_sum) "
                            "after the step (host_next): its averaging weight depends on the "
                            "index's learning rates so far")
        lr_max, weight_sum = host
        b1, b2, hyper = self.beta1, self.beta2, self._hyper()
        g = gamma(t, lr, **hyper)
        w = weight(t, lr_max, **hyper)
        c = w / weight_sum if weight_sum != 0.0 else 0.0  # the authors' ZeroDivisionError: 0
        return paper_rule, Row(
            rescale=self.rescale_grad, clip_bound=self._clip_bound(), b2=b2,
            one_minus_b2=1.0 - b2, bc2=1.0 if self.lr_bias_correction else 1.0 - b2 ** t,
            eps=self.epsilon, wd=wd, c=c, y_step=g * (b1 * (1.0 - c) - 1.0), neg_lr=-g)

    # --- train and eval ------------------------------------------------------------------------
    def to_eval(self, weight, state):
        """Move ``weight`` (``y``, the point the steps take gradients at) to the average ``x``
        in place: ``y + (1 - 1/beta1)*(z - y)``, the authors' ``p.lerp_(z, 1 - 1/beta1)``,
        formed in float64 and rounded once to the weight's dtype (a multi-precision state: its
        float32 master, and the weight from it). Needs ``beta1 > 0`` (with ``beta1 = 0``,
        ``y = z`` and no average is kept)."""
        if self.beta1 == 0.0:
            raise ValueError("to_eval needs beta1 > 0: with beta1 = 0 the weight is z itself "
                             "and no average x is kept (the authors' eval() divides by beta1)")
        self._move(weight, state, 1.0 - 1.0 / self.beta1)

    def to_train(self, weight, state):
        """Move ``weight`` from the average ``x`` back to ``y`` in place:
        ``x + (1 - beta1)*(z - x)``, the authors' ``p.lerp_(z, 1 - beta1)`` (rounded as
        :meth:`to_eval`)."""
        self._move(weight, state, 1.0 - self.beta1)

    def _move(self, weight, state, fraction):
        if state is None:
            return
        master = None
        if self.uses_master(weight):
            master, state = self.split_master(state)
        z = state[0]
        for target in (master, weight) if master is not None else (weight,):
            host = arrays.to_host(target)
            moved = host.astype(np.float64)
            moved += fraction * (arrays.to_host(z).astype(np.float64) - moved)
            arrays.copy_from_host(target, moved.astype(host.dtype))
            if master is not None:  # the weight is the master's rounding
                arrays.copy_from_host(weight, moved.astype(np.float32).astype(
                    arrays.to_host(weight).dtype))
                break
