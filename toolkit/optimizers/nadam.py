"""Nadam (MXNet ``nadam``; Dozat 2016). Conventions "mxnet" and "pytorch" (torch.optim.NAdam:
:func:`pytorch_rule`); no "guide": see below.

mxnet (Python ops, MXNet 1.9.1 python/mxnet/optimizer/optimizer.py:1995-2028;
docs/optimizers/nadam.md)::

    mu_t = beta1*(1 - 0.5*0.96^(t*schedule_decay));  mu_t1 = beta1*(1 - 0.5*0.96^((t+1)*schedule_decay))
    m_schedule = m_schedule*mu_t;  ms_next = m_schedule*mu_t1      # one scalar for ALL indices
    g = clip(rescale_grad*grad + wd*w, c);  m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g
    m_bar = (1-mu_t)*g/(1-m_schedule) + mu_t1*m/(1-ms_next)
    w = w - lr*m_bar/(sqrt(v/(1-beta2^t)) + eps)

The guide's Nadam (guide lines 179-183) evaluates the gradient at two different points in one
step (``w_i + beta1*v_i`` and ``w_i``), so it is not an optimizer step from one gradient:
``reference.nadam.step_lookahead`` computes it with a gradient function, and
``convention="guide"`` is refused here.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..backends.launches import Launch
from . import gradient, torch_ops
from .base import Optimizer
from .registry import register
from .spec_spaces import Decades, Interval, OneOf, USUAL_BETA1, USUAL_BETA2
from .spec import BenchSetting, Spec
from .validation import flag, nonneg, unit

__all__ = ["Nadam"]


class Row(NamedTuple):
    """The scalars of :func:`mxnet_rule`: packed on the host, read by name in the kernel."""
    lr: float
    wd: float
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    b1: float
    one_minus_b1: float  #: 1 - beta1
    b2: float
    one_minus_b2: float  #: 1 - beta2
    eps: float
    den_g: float         #: 1 - m_schedule
    den_m: float         #: 1 - m_schedule*mu_{t+1}
    den_v: float         #: 1 - beta2^t
    one_m_mu: float      #: 1 - mu_t
    mu_next: float       #: mu_{t+1}


class PytorchRow(NamedTuple):
    """The scalars of :func:`pytorch_rule` (torch.optim.NAdam), formed on the host in float64
    as torch forms them in Python floats."""
    decay: float         #: 1 - lr*wd with decoupled_weight_decay (torch's NAdamW), else 1
    rescale: float       #: rescale_grad
    clip_bound: float    #: clip_gradient, negative for none
    wd: float            #: torch's coupled weight decay (0 with decoupled_weight_decay)
    one_minus_b1: float  #: 1 - beta1, the weight of the first moment's lerp
    b2: float
    one_minus_b2: float  #: 1 - beta2
    bc2: float           #: 1 - beta2^t
    eps: float
    step_g: float        #: -lr*(1 - mu_t)/(1 - mu_product)
    step_m: float        #: -lr*mu_{t+1}/(1 - mu_product*mu_{t+1})


def mxnet_rule(f):
    grad_of = gradient.decayed_then_clipped(f)

    def rule(w, grad, m, v, hp):
        p = Row(*hp)
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        m = p.b1 * m + p.one_minus_b1 * g
        v = p.b2 * v + p.one_minus_b2 * (g * g)
        m_bar = p.one_m_mu * (g / p.den_g) + p.mu_next * (m / p.den_m)
        return w - p.lr * m_bar / (math.sqrt(v / p.den_v) + p.eps), m, v
    return rule


def pytorch_rule(f):
    """torch.optim.NAdam's single-tensor update (torch 2.13, torch/optim/nadam.py,
    ``_single_tensor_nadam``, the path it runs on CPU tensors), in torch's order of
    operations::

        w = w*(1 - lr*wd)                            (decoupled_weight_decay; else 1)
        g = clip(rs*grad, c) + wd*w                  (coupled, when wd != 0)
        m = m.lerp(g, 1 - beta1)
        v = v*beta2 + (1 - beta2)*g*g
        denom = sqrt(v/(1 - beta2^t)) + eps
        w = w + (step_g*g)/denom                     (param.addcdiv_(grad, denom, value=step_g))
        w = w + (step_m*m)/denom

    with the host's ``step_g = -lr*(1 - mu_t)/(1 - mu_product)`` and
    ``step_m = -lr*mu_{t+1}/(1 - mu_product*mu_{t+1})`` (:class:`PytorchRow`; :mod:`.torch_ops`:
    the lerp and the sums rounded once, as torch's kernels round them)."""
    grad_of = torch_ops.gradient(f)
    lerp = torch_ops.lerp(f)
    square_avg = torch_ops.square_avg(f)

    def rule(w, grad, m, v, hp):
        p = PytorchRow(*hp)
        w = w * p.decay
        g = grad_of(grad, w, p.rescale, p.wd, p.clip_bound)
        m = lerp(m, g, p.one_minus_b1)
        v = square_avg(v, g, p.b2, p.one_minus_b2)
        denom = math.sqrt(v / p.bc2) + p.eps
        w = w + (p.step_g * g) / denom
        return w + (p.step_m * m) / denom, m, v
    return rule


def f32_product(a, b):
    """``a*b`` as torch's ``mu_product *= mu`` computes it on a float32 0-d tensor (torch's
    default dtype): both factors rounded to float32, the product rounded to float32."""
    return float(np.float32(np.float32(a) * np.float32(b)))


SPEC = Spec(
    name="nadam", reference="reference.nadam",
    moments={"m": "signed", "v": "unsigned"},
    conventions=("mxnet", "pytorch"),
    # the kernels' "pytorch" (torch's single-tensor step) is the reference's equations in these
    # three forms at once (reference.nadam; with hyper_f32=False: Nadam._reference_call_kwargs)
    pytorch_form=("wd_after_clip", "lerp", "schedule_product_f32"),
    pytorch="mxnet", torch="NAdam",
    torch_slots={"m": "exp_avg", "v": "exp_avg_sq"},
    space={"beta1": Interval(0.0, 0.99), "beta2": Interval(0.0, 0.9999),
           "epsilon": Decades(-10, -2), "schedule_decay": OneOf(0.004, Interval(0.0, 0.1))},
    flags={"decoupled_weight_decay": False},
    # betas and epsilon as Adam's (Dozat 2016; MXNet, torch.optim.NAdam, optax: 0.9, 0.999,
    # 1e-8; Keras 1e-7); schedule_decay: 0.004 (Dozat, MXNet, torch's momentum_decay, Keras),
    # a decade around it at most
    usual={"beta1": USUAL_BETA1, "beta2": USUAL_BETA2, "epsilon": Decades(-8, -3),
           "schedule_decay": Interval(0.001, 0.01)},
    # reference.nadam.FORMS; no hyper_f32: it applies to conventions other than MXNet's, and
    # NAdam has none (its "pytorch" convention is MXNet's equations)
    variants=("hyper_f64", "constants_in_dtype", "lerp", "schedule_product_f32"),
    record={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-08,
            "schedule_decay": 0.004}, record_ulps=1,
    layouts=({},),
    # torch's NAdamW under the convention that has it
    trainer=({}, {"decoupled_weight_decay": True}),
    demo={"learning_rate": 0.01},
    bench=(BenchSetting("nadam", {}, torch=("NAdam", {}), quick=True),
           # torch's NAdamW under the convention that has it (its steps planned by host scalars)
           BenchSetting("nadamw", {"convention": "pytorch", "decoupled_weight_decay": True,
                                   "wd": 0.01},
                        torch=("NAdam", {"decoupled_weight_decay": True, "weight_decay": 0.01}))),
)


@register
class Nadam(Optimizer):
    """Nadam (MXNet ``nadam``): Adam with Nesterov momentum and Dozat's warming schedule.

    ``mu_t = beta1*(1 - 0.5*0.96^(t*schedule_decay))``; ``m_schedule`` is the running product of
    the ``mu_t`` and, as in MXNet, is **one scalar per optimizer, shared by all indices**, so it
    depends on how many parameters are updated and in what order. Then
    ``w = w - lr*((1-mu_t)*g/(1-m_schedule) + mu_{t+1}*m/(1-m_schedule*mu_{t+1})) /
    (sqrt(v/(1-beta2^t)) + epsilon)`` with ``g = clip(rs*grad + wd*w, c)``. State: ``(m, v)``.

    ``convention="pytorch"``: ``torch.optim.NAdam`` in torch's order of operations
    (:func:`pytorch_rule`; ``decoupled_weight_decay=True``, torch's NAdamW, decays the weight by
    ``1 - lr*wd`` first and adds no ``wd*w`` to the gradient; refused under "mxnet", whose
    Nadam couples it), with torch's bookkeeping: the running product
    is **one per index** (torch's per-parameter ``mu_product``, here ``opt.mu_product[index]``),
    held in float32 as torch holds it in its default dtype, float32, for any weight's dtype.

    No convention "guide": the guide's Nadam needs gradients at two points per step
    (``reference.nadam.step_lookahead`` evaluates it with a gradient function).

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.Nadam(learning_rate=0.001)
        >>> w = np.zeros(2); s = opt.create_state(0, w); opt.update(0, w, np.ones(2), s)
        >>> bool(opt.m_schedule < 1.0)
        True
    """

    spec = SPEC
    mxnet_kernel = False

    domains = {"beta1": unit(), "beta2": unit(), "epsilon": nonneg(),
               "schedule_decay": nonneg(), "decoupled_weight_decay": flag()}

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 schedule_decay=0.004, decoupled_weight_decay=False, **kwargs):
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.schedule_decay = schedule_decay
        self.decoupled_weight_decay = decoupled_weight_decay
        # the running product starts at 1 once (MXNet's __init__): not in check_relations,
        # which runs again after every later assignment (a Trainer sets rescale_grad each step)
        self.m_schedule = 1.0
        #: convention "pytorch": torch's per-parameter ``mu_product``, index -> its float32
        #: value (an index not yet stepped starts at 1.0)
        self.mu_product = {}
        super().__init__(learning_rate=learning_rate, **kwargs)

    def check_relations(self):
        if self.decoupled_weight_decay and self.convention == "mxnet":
            raise ValueError("decoupled_weight_decay=True is refused under convention 'mxnet': "
                             "MXNet's Nadam couples wd into the gradient. Use "
                             "convention='pytorch' (torch.optim.NAdam(decoupled_weight_decay="
                             "True), NAdamW)")
        if self.convention == "guide":
            raise ValueError("convention='guide' is not available for Nadam: the guide's "
                             "equations need the gradient at two points per step; use "
                             "reference.nadam.step_lookahead with a gradient function, or "
                             "convention='mxnet'")

    def state_slots(self):
        return ("m", "v")

    def host_state(self):
        """``{"m_schedule": m}``, MXNet's one running product; under convention "pytorch"
        ``{"m_schedule": [[index, mu_product], ...]}``, torch's one per index (in index order,
        those that have stepped)."""
        if self.convention == "pytorch":
            order = sorted(self.mu_product, key=lambda k: (isinstance(k, str), k))
            return {"m_schedule": [[k, self.mu_product[k]] for k in order]}, {}
        return {"m_schedule": self.m_schedule}, {}

    def check_host_state(self, data, host_arrays):
        def product(m):   # a product of momentum factors in [0, 1), from 1.0
            return isinstance(m, float) and 0.0 <= m <= 1.0
        m = data.get("m_schedule") if isinstance(data, dict) else None
        if self.convention == "pytorch":
            per_index = {}
            ok = set(data) == {"m_schedule"} and not host_arrays and isinstance(m, list)
            for pair in m if ok else ():
                if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and
                        type(pair[0]) in (int, str) and pair[0] not in per_index and
                        product(pair[1])):
                    ok = False
                    break
                per_index[pair[0]] = pair[1]
            if not ok:
                raise ValueError("Nadam's host state under convention 'pytorch' must be "
                                 "m_schedule as a list of [index, mu_product] pairs (each index "
                                 f"once, each product in [0, 1]), got {data}")

            def commit():
                self.mu_product = per_index
            return commit
        if set(data) != {"m_schedule"} or host_arrays or not product(m):
            raise ValueError(f"Nadam's host state must be one m_schedule in [0, 1], got {data}")

        def commit():
            self.m_schedule = m
        return commit

    def _reference_extra(self, index, weight=None):
        if self.convention == "pytorch":
            return {"m_schedule": self.mu_product.get(index, 1.0)}
        return {"m_schedule": self.m_schedule}

    def _reference_store_extra(self, index, new_state, weight):
        if self.convention != "pytorch":  # "pytorch": committed with the count (host_next)
            self.m_schedule = float(new_state["m_schedule"])

    def _reference_call_kwargs(self, index, t):
        """Under "pytorch" the reference's forms the kernels compute (``Spec.pytorch_form``),
        with the clip bound as given (``hyper_f32=False``), as the kernels take it."""
        kwargs = super()._reference_call_kwargs(index, t)
        if self.convention == "pytorch":
            kwargs["hyper_f32"] = False
        return kwargs

    @property
    def host_scalars(self):
        """Under "pytorch", torch's per-index ``mu_product`` (a float32 value, kept in a float),
        which advances with each step and enters the row: the Trainer and ``toolkit.torch``
        then plan NAdam's steps by distinct ``(t, lr, wd, mu_product)`` (``HostScalars``).
        Under "mxnet" none: MXNet's one ``m_schedule`` is shared by all indices, multiplied in
        the order they step, so each index is planned on its own."""
        return ("mu_product",) if self.convention == "pytorch" else ()

    @property
    def plans_by_scalars(self):
        return self.convention == "pytorch"

    def _mu(self, t):
        """``mu_t = beta1*(1 - 0.5*0.96^(t*schedule_decay))``, torch's and MXNet's, in float64."""
        return self.beta1 * (1.0 - 0.5 * (0.96 ** (t * self.schedule_decay)))

    def host_next(self, indices, t, lr):
        """Each index's ``mu_product`` after its step at count ``t[j]`` (:func:`f32_product`,
        torch's float32 ``mu_product *= mu``), once per distinct ``(t, mu_product)``; an index
        given twice takes its second step from its first, as the per-index loop would."""
        out, made, seen = np.empty((len(indices), 1)), {}, {}
        for j, (index, tj) in enumerate(zip(indices, t.tolist())):
            key = (tj, seen[index] if index in seen else self.mu_product.get(index, 1.0))
            after = made.get(key)
            if after is None:
                after = made[key] = f32_product(key[1], self._mu(tj))
            out[j, 0] = seen[index] = after
        return out

    def commit_host(self, indices, host):
        for index, (product,) in zip(indices, host.tolist()):
            self.mu_product[index] = product

    def kernel_row(self, t, lr, wd, sparse=None, host=None):
        """Under "pytorch", the row of a step at count ``t`` of an index whose ``mu_product``
        after the step is ``host[0]`` (:meth:`host_next`): torch's host arithmetic in Python
        floats (torch/optim/nadam.py, in its order)."""
        if self.convention != "pytorch":
            return super().kernel_row(t, lr, wd, sparse)
        if host is None:
            raise TypeError("Nadam.kernel_row under convention 'pytorch' needs host="
                            "(mu_product,) after the step (host_next)")
        (product,) = host
        b1, b2 = self.beta1, self.beta2
        mu, mu_next = self._mu(t), self._mu(t + 1)
        product_next = product * mu_next
        decoupled = self.decoupled_weight_decay and wd != 0
        return pytorch_rule, PytorchRow(
            decay=1.0 - lr * wd if decoupled else 1.0, rescale=self.rescale_grad,
            clip_bound=self._clip_bound(), wd=0.0 if self.decoupled_weight_decay else wd,
            one_minus_b1=1.0 - b1, b2=b2, one_minus_b2=1.0 - b2, bc2=1.0 - b2 ** t,
            eps=self.epsilon, step_g=-lr * (1.0 - mu) / (1.0 - product),
            step_m=(-lr * mu_next) / (1.0 - product_next))

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        if self.convention == "pytorch":  # its row reads the index's mu_product only
            after = self.host_next([index], np.array([t]), np.array([lr]))[0]
            factory, row = self.kernel_row(t, lr, wd, host=tuple(after.tolist()))
            return Launch("rule", factory, weight, grad, state, row)
        return self._mxnet_step(weight, grad, state, t, lr, wd)

    def _mxnet_step(self, weight, grad, state, t, lr, wd):
        """MXNet's step, then its one running product (a generator: the product is kept once
        the launch is taken)."""
        b1, b2, sd = self.beta1, self.beta2, self.schedule_decay
        mu_t = b1 * (1.0 - 0.5 * 0.96 ** (t * sd))
        mu_t1 = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * sd))
        m_schedule = self.m_schedule * mu_t
        ms_next = m_schedule * mu_t1
        yield Launch("rule", mxnet_rule, weight, grad, state,
                     Row(lr=lr, wd=wd, rescale=self.rescale_grad, clip_bound=self._clip_bound(),
                         b1=b1,
                         one_minus_b1=1.0 - b1, b2=b2, one_minus_b2=1.0 - b2, eps=self.epsilon,
                         den_g=1.0 - m_schedule, den_m=1.0 - ms_next, den_v=1.0 - b2 ** t,
                         one_m_mu=1.0 - mu_t, mu_next=mu_t1))
        self.m_schedule = m_schedule
