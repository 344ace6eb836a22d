"""LBSGD: large-batch SGD with learning-rate warmup and LARS (MXNet ``lbsgd``; guide.md lines 223-257).

mxnet (spec section 2.10): the learning rate is read *before* the update count is incremented;
gradients are accumulated over ``batch_scale`` calls and one SGD step is taken with their mean::

    cum = cum + grad;  ncum = ncum + 1
    if ncum % batch_scale == 0:
        gm = cum/batch_scale;  lr = lr*mult;  SGD step with gm;  cum = 0
    mult = clip(sqrt(|w|^2/(|gm|^2 + wd*|w|^2 + 1e-18)), 0.01, 100)        ('lars', whole-tensor norms)
         = lbmult(ncum)                                          (the other strategies)

guide ("LBSGD performs the same parameter update steps as the SGD optimizer"): every call is a
guide SGD step with ``lr*mult``, ``mult`` from the same strategies at the call count; no
accumulation.
"""
from __future__ import annotations

import math

import numpy as np

from ..backends import arrays, cpu
from ..backends.rules import add_rule, divide_rule, fill_rule
from .base import Optimizer, check_choice, check_int, check_unit, register
from .sgd import guide_momentum_rule, guide_plain_rule, mxnet_momentum_rule, sgd_update_rule

__all__ = ["LBSGD", "lbmult"]

STRATEGIES = ("linear", "power2", "sqrt", "lars")


def lbmult(nup, warmup_strategy, warmup_epochs, updates_per_epoch, batch_scale):
    """The warmup multiplier of update ``nup`` (MXNet's ``_get_lbmult``, spec section 2.10)."""
    nwup = warmup_epochs * updates_per_epoch
    if nup >= nwup:
        return float(batch_scale)
    if nwup <= 1:
        return 1.0
    maxmult = float(batch_scale)
    if warmup_strategy == "linear":
        return 1.0 + (maxmult - 1) * nup / nwup
    if warmup_strategy == "power2":
        return 1.0 + (maxmult - 1) * (nup * nup) / (nwup * nwup)
    if warmup_strategy == "sqrt":
        return 1.0 + (maxmult - 1) * math.sqrt(float(nup) / nwup)
    return 1.0


@register
class LBSGD(Optimizer):
    """Large-batch SGD (MXNet ``lbsgd``): SGD with warmup multipliers and optional LARS.

    Every ``batch_scale`` calls (mxnet) or every call (guide) it takes the SGD step of
    ``docs/conventions.md`` with learning rate ``lr*mult``: for ``warmup_strategy='lars'``
    ``mult = clip(sqrt(|w|^2/(|g|^2 + wd*|w|^2 + 1e-18)), 0.01, 100)``; otherwise
    ``mult`` rises from 1 to ``batch_scale`` over ``warmup_epochs*updates_per_epoch`` calls
    ('linear', 'power2' or 'sqrt'), counted from ``begin_epoch*updates_per_epoch``.
    ``num_epochs`` is accepted and unused, as in MXNet. State: ``mom`` when momentum > 0, else
    None; the gradient accumulator lives on the optimizer (as in MXNet).

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.LBSGD(learning_rate=0.1, batch_scale=2, warmup_epochs=1, updates_per_epoch=4)
        >>> w = np.zeros(2); s = opt.create_state(0, w)
        >>> opt.update(0, w, np.ones(2), s); w            # first of two accumulated calls
        array([0., 0.])
    """

    reference_name = "lbsgd"
    #: its step accumulates into per-index buffers and ('lars') reads norms back on the host
    segmentable = False

    def __init__(self, momentum=0.0, multi_precision=False, warmup_strategy="linear",
                 warmup_epochs=5, batch_scale=1, updates_per_epoch=32, begin_epoch=0,
                 num_epochs=60, **kwargs):
        self.momentum = check_unit("momentum", momentum)
        self.warmup_strategy = check_choice("warmup_strategy", warmup_strategy, STRATEGIES)
        self.warmup_epochs = check_int("warmup_epochs", warmup_epochs, 0)
        self.batch_scale = check_int("batch_scale", batch_scale, 1)
        self.updates_per_epoch = check_int("updates_per_epoch", updates_per_epoch, 1)
        self.begin_epoch = check_int("begin_epoch", begin_epoch, 0)
        self.num_epochs = check_int("num_epochs", num_epochs, 0)
        self.init_updates = self.begin_epoch * self.updates_per_epoch
        super().__init__(multi_precision=multi_precision, **kwargs)
        self._cum: dict = {}
        self._ncum: dict = {}

    def state_slots(self):
        return ("mom",) if self.momentum != 0.0 else ()

    def reference_hyper(self):
        return {"momentum": self.momentum, "warmup_strategy": self.warmup_strategy,
                "warmup_epochs": self.warmup_epochs, "batch_scale": self.batch_scale,
                "updates_per_epoch": self.updates_per_epoch, "begin_epoch": self.begin_epoch,
                "num_epochs": self.num_epochs}

    def _lr_count(self, num_update_after):
        # MXNet reads the learning rate before it increments the count (optimizer.py:1209-1211)
        return self.num_update if self.convention == "mxnet" else num_update_after

    def _accumulator(self, index, weight):
        """This index's gradient accumulator (a zero array of the weight's kind, device and
        arithmetic dtype when it has none that fits) and call count."""
        launcher = self._launcher or cpu.LAUNCHER
        dtype = launcher.compute_dtype(weight)
        cum = self._cum.get(index)
        if cum is not None:
            c, w = arrays.describe(cum), arrays.describe(weight)
            if c.shape != w.shape or c.dtype != dtype:
                cum = None
            elif c.kind != w.kind or (c.kind == arrays.DEVICE and c.library != w.library):
                # a restored (host) accumulator for a device weight, or the reverse: moved over
                moved = launcher.zeros_like(weight, dtype)
                arrays.copy_from_host(moved, arrays.to_host(cum))
                cum = moved
        if cum is None:
            cum = launcher.zeros_like(weight, dtype)
        return cum, self._ncum.get(index, self.init_updates)

    def host_state(self):
        keys = sorted(set(self._ncum) | set(self._cum), key=str)
        data = {"ncum": [[k, self._ncum.get(k, self.init_updates)] for k in keys],
                "cum": [[k, f"cum{n}"] for n, k in enumerate(keys) if k in self._cum]}
        host = {f"cum{n}": self._cum[k] for n, k in enumerate(keys) if k in self._cum}
        return data, host

    def check_host_state(self, data, host_arrays):
        if set(data) != {"ncum", "cum"}:
            raise ValueError(f"LBSGD's host state must hold 'ncum' and 'cum', got {sorted(data)}")
        ncum = {}
        for k, n in data["ncum"]:
            if not isinstance(n, int) or n < 0:
                raise ValueError(f"LBSGD call count {n!r} is invalid")
            ncum[k] = n
        cum = {}
        for k, name in data["cum"]:
            cum[k] = np.array(host_arrays[name])

        def commit():
            self._ncum, self._cum = ncum, cum
        return commit

    def _reference_extra(self, index):
        return {}

    def _reference_step(self, index, weight, grad, state, t, lr, wd):
        cum, ncum = self._accumulator(index, weight)
        ref = self.reference_module()
        st = {"cum": cum.astype(np.float64), "ncum": ncum}
        if state is not None:
            st["mom"] = state.astype(np.float64)
        w_new, st_new = ref.step(weight.astype(np.float64), grad.astype(np.float64), st, t=t,
                                 lr=lr, wd=wd, rescale_grad=self.rescale_grad,
                                 clip_gradient=self.clip_gradient, convention=self.convention,
                                 **self.reference_hyper())
        weight[...] = w_new
        if state is not None:
            state[...] = st_new["mom"]
        self._cum[index] = np.asarray(st_new["cum"]).astype(weight.dtype)
        self._ncum[index] = int(st_new["ncum"])

    def _multiplier(self, weight, g, wd, ncum):
        if self.warmup_strategy != "lars":
            return lbmult(ncum, self.warmup_strategy, self.warmup_epochs, self.updates_per_epoch,
                          self.batch_scale)
        # both norms on the backend that holds the arrays (float64 accumulation, fixed order)
        ww, gg = (self._launcher or cpu.LAUNCHER).sum_of_squares(weight, g)
        return min(max(math.sqrt(ww / (gg + wd * ww + 1e-18)), 0.01), 100.0)

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        states = self._state_arrays(state)
        if self.convention == "mxnet":
            cum, ncum = self._accumulator(index, weight)
            ncum += 1
            self._run_rule(add_rule, cum, grad, (), (0.0,))              # cum = cum + grad
            self._cum[index], self._ncum[index] = cum, ncum
            if ncum % self.batch_scale != 0:
                return
            g = (self._launcher or cpu.LAUNCHER).zeros_like(cum)
            self._run_rule(divide_rule, g, cum, (), (float(self.batch_scale),))  # g = cum/bs
            lr = lr * self._multiplier(weight, g, wd, ncum)
            r = self._r
            lr, wd, rs, c = r(lr), r(wd), r(self.rescale_grad), self._clip_bound()
            if states:
                self._run_rule(mxnet_momentum_rule, weight, g, states,
                               (lr, lr * wd, rs, c, r(self.momentum), lr * rs))
            else:
                self._run_rule(sgd_update_rule, weight, g, (), (lr, 1.0 - lr * wd, rs, c))
            self._run_rule(fill_rule, cum, cum, (), (0.0,))               # cum = 0
            return
        ncum = self._ncum.get(index, self.init_updates) + 1  # the guide accumulates nothing
        lr = lr * self._multiplier(weight, grad, wd, ncum)
        if states:
            self._run_rule(guide_momentum_rule, weight, grad, states,
                           (lr, wd, self.rescale_grad, self._clip_bound(), self.momentum))
        else:
            self._run_rule(guide_plain_rule, weight, grad, (), (lr, wd, self.rescale_grad,
                                                                self._clip_bound()))
        self._ncum[index] = ncum
