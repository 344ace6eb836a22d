"""The Schedule-Free family (Defazio et al. 2024, "The Road Less Scheduled"): what its
optimizers share. The weight holds ``y``, the point the gradient is taken at; the state holds
``z`` (a copy of the weight to start: ``z_1 = x_1``) and whatever the base step keeps; the host
keeps each index's ``lr_max`` and ``weight_sum`` (``host_scalars``), from which it forms the
averaging weight ``c_{t+1}`` in float64; ``to_eval``/``to_train`` move the weight to the
average ``x`` and back. :class:`ScheduleFree` is the base of
:class:`~toolkit.optimizers.adamwschedulefree.AdamWScheduleFree` and
:class:`~toolkit.optimizers.sgdschedulefree.SGDScheduleFree`; each gives its interpolation
(``beta1``, ``momentum``), its ``gamma_t`` keywords and its ``kernel_row(..., host=)``.
"""
from __future__ import annotations

import math

import numpy as np

from ..backends import arrays
from ..backends.launches import Launch
from .base import Optimizer, scalar_only
from .validation import integer, nonneg

__all__ = ["ScheduleFree", "FRESH", "averaging", "gamma", "weight"]

#: ``(lr_max, weight_sum)`` of an index that has not stepped (the authors' initial group values)
FRESH = (-1.0, 0.0)


def gamma(t, lr, *, warmup_steps, lr_bias_correction=False, beta2=0.0, **_):
    """The learning rate ``gamma_t`` of step ``t`` in float64, as the authors' ``step`` forms
    it from its group's ``lr`` and ``k = t - 1``: the warmup ``(k+1)/warmup_steps`` while
    ``k < warmup_steps``, then ``sqrt(1 - beta2^(k+1))`` with ``lr_bias_correction``
    (Schedule-Free AdamW's Algorithm 1)."""
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


class ScheduleFree(Optimizer):
    """The Schedule-Free optimizers' shared part (see the module docstring). A subclass sets
    :attr:`interpolation` (the name of its ``y = (1-b)*z + b*x`` weight), :meth:`_hyper` (the
    keywords of :func:`gamma` and :func:`weight`) and ``kernel_row(t, lr, wd, host=...)``."""

    #: the attribute holding the interpolation weight ``b`` of ``y = (1-b)*z + b*x``
    interpolation = "beta1"
    host_scalars = ("lr_max", "weight_sum")

    domains = {"warmup_steps": integer(0), "r": nonneg(), "weight_lr_power": nonneg()}

    def __init__(self, warmup_steps=0, r=0.0, weight_lr_power=2.0, **kwargs):
        self.warmup_steps, self.r, self.weight_lr_power = warmup_steps, r, weight_lr_power
        #: index -> ``(lr_max, weight_sum)`` after its last step (float64; an index not yet
        #: stepped starts at :data:`FRESH`)
        self.averaging = {}
        #: whether the parameters of the Trainer that steps this optimizer are at the average
        #: ``x`` (``Trainer.eval()``) rather than at ``y``; kept in its states file
        self.eval_mode = False
        super().__init__(**kwargs)

    def _hyper(self):
        """The keywords of :func:`gamma` and :func:`weight`."""
        return dict(warmup_steps=self.warmup_steps, r=self.r,
                    weight_lr_power=self.weight_lr_power)

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
            raise ValueError(f"{type(self).__name__}'s host state must be averaging, a list of "
                             "[index, lr_max, weight_sum] (each index once, finite floats, the "
                             f"sum >= 0), and eval_mode, a bool; got {data}")

        def commit():
            self.averaging, self.eval_mode = per_index, data["eval_mode"]
        return commit

    def _reference_extra(self, index, weight=None):
        lr_max, weight_sum = self.averaging.get(index, FRESH)
        return {"lr_max": lr_max, "weight_sum": weight_sum}

    def _reference_store_extra(self, index, new_state, weight):
        pass  # the host scalars are committed with the count, on every backend (host_next)

    def host_next(self, indices, t, lr):
        """Each index's ``(lr_max, weight_sum)`` after its step at count ``t[j]`` with
        learning rate ``lr[j]`` (:func:`averaging`, once per distinct ``(t, lr, lr_max,
        weight_sum)``); an index given twice takes its second step from its first, as the
        per-index loop would."""
        hyper, out, made, seen = self._hyper(), np.empty((len(indices), 2)), {}, {}
        for j, (index, tj, lrj) in enumerate(zip(indices, t.tolist(), lr.tolist())):
            key = (tj, lrj, seen.get(index) or self.averaging.get(index, FRESH))
            after = made.get(key)
            if after is None:
                after = made[key] = averaging(tj, lrj, *key[2], **hyper)
            out[j] = seen[index] = after
        return out

    def commit_host(self, indices, host):
        for index, (lr_max, weight_sum) in zip(indices, host.tolist()):
            self.averaging[index] = (lr_max, weight_sum)

    @scalar_only  # its row reads the index's host scalars only, which planners hand it
    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        after = averaging(t, lr, *self.averaging.get(index, FRESH), **self._hyper())
        factory, row = self.kernel_row(t, lr, wd, host=after)
        return Launch("rule", factory, weight, grad, self.state_arrays(state), row)

    def _averaged(self, t, lr, host):
        """``(gamma_t, c_{t+1})`` of a step at count ``t`` of an index whose ``(lr_max,
        weight_sum)`` after it are ``host``."""
        if host is None:
            raise TypeError(f"{type(self).__name__}.kernel_row needs host=(lr_max, weight_sum) "
                            "after the step (host_next): its averaging weight depends on the "
                            "index's learning rates so far")
        lr_max, weight_sum = host
        hyper = self._hyper()
        w = weight(t, lr_max, **hyper)
        return gamma(t, lr, **hyper), (w / weight_sum if weight_sum != 0.0 else 0.0)

    # --- train and eval ------------------------------------------------------------------------
    def to_eval(self, weight, state):
        """Move ``weight`` (``y``, the point the steps take gradients at) to the average ``x``
        in place: ``y + (1 - 1/b)*(z - y)`` with ``b`` the interpolation (``beta1``,
        ``momentum``), the authors' ``p.lerp_(z, 1 - 1/b)``, formed in float64 and rounded once
        to the weight's dtype (a multi-precision state: its float32 master, and the weight from
        it). Needs ``b > 0`` (with ``b = 0``, ``y = z`` and no average is kept)."""
        b = getattr(self, self.interpolation)
        if b == 0.0:
            raise ValueError(f"to_eval needs {self.interpolation} > 0: with {self.interpolation}"
                             " = 0 the weight is z itself and no average x is kept (the "
                             f"authors' eval() divides by {self.interpolation})")
        self._move(weight, state, 1.0 - 1.0 / b)

    def to_train(self, weight, state):
        """Move ``weight`` from the average ``x`` back to ``y`` in place:
        ``x + (1 - b)*(z - x)``, the authors' ``p.lerp_(z, 1 - b)`` (rounded as
        :meth:`to_eval`)."""
        self._move(weight, state, 1.0 - getattr(self, self.interpolation))

    def _move(self, weight, state, fraction):
        if state is None:
            return
        master = None
        if self.uses_master(weight):
            master, state = self.split_master(state)
        z = self.state_arrays(state)[0]
        for target in (master, weight) if master is not None else (weight,):
            host = arrays.to_host(target)
            moved = host.astype(np.float64)
            moved += fraction * (arrays.to_host(z).astype(np.float64) - moved)
            arrays.copy_from_host(target, moved.astype(host.dtype))
            if master is not None:  # the weight is the master's rounding
                arrays.copy_from_host(weight, moved.astype(np.float32).astype(
                    arrays.to_host(weight).dtype))
                break
