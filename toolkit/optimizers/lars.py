"""LARS: layer-wise adaptive rate scaling on SGD with momentum (MXNet ``lars``; You et al. 2017).

mxnet (MXNet 1.9.1 python/mxnet/optimizer/optimizer.py:797-1053, its aggregated path for dense
arrays; docs/optimizers/lars.md; reference/lars.py)::

    lr_k = lr*eta*|w|/(rs*|grad| + wd*|w| + eps)     (float32, ``multi_lars``; lr when a norm is 0
                                                      or the name ends in gamma/beta/bias)
    mu   = momentum*cur_lr/last_lr                     (momentum_correction; else momentum)
    SGD's aggregated MXNet step (toolkit/optimizers/sgd.py) with lr_k and mu

guide: the same trust ratio in float64, then the guide's SGD step with ``lr*trust``.

The norms come from the launcher's ``lars_norms`` (``batch_scale`` 0: norms of ``w`` and
``grad``); a Trainer computes a whole group's in one segmented float64 reduction first
(``norm_inputs``).
"""
from __future__ import annotations

import math

from ..backends import cpu
from .base import check_nonneg, check_unit, register
from .sgd import (SGD, guide_momentum_rule, guide_plain_rule, mxnet_momentum_rule,
                  mxnet_plain_rule)

__all__ = ["LARS"]

_UNSCALED_SUFFIXES = ("gamma", "beta", "bias")


@register
class LARS(SGD):
    """LARS (MXNet ``lars``): SGD with momentum and a per-tensor trust ratio.

    ``lr_k = lr*eta*|w|/(rescale_grad*|grad| + wd*|w| + eps)`` when both norms are positive
    (else ``lr``), for every tensor except those whose name (``param_idx2name``) ends in
    ``gamma``, ``beta`` or ``bias``; then SGD (``docs/conventions.md``, "SGD") with ``lr_k``.
    Convention "mxnet" evaluates ``lr_k`` in float32 as MXNet's ``multi_lars`` does and, with
    ``momentum_correction``, scales the momentum by the ratio of this call's scheduled rate to
    the previous call's. State: ``mom`` when momentum > 0, else None.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("lars", learning_rate=1.0, eta=0.5)
        >>> w = np.array([3.0, 4.0]); s = opt.create_state(0, w)
        >>> opt.update(0, w, np.array([0.0, 5.0]), s); w      # lr_k = 0.5*5/5
        array([3. , 1.5])
    """

    reference_name = "lars"

    def __init__(self, momentum=0.0, lazy_update=True, eta=0.001, eps=0, momentum_correction=True,
                 **kwargs):
        self.eta = check_nonneg("eta", eta)
        self.eps = check_nonneg("eps", eps)
        self.momentum_correction = bool(momentum_correction)
        self.last_lr = None
        self.cur_lr = None
        super().__init__(momentum=check_unit("momentum", momentum), lazy_update=lazy_update,
                         **kwargs)

    def set_wd_mult(self, args_wd_mult):
        """As MXNet's LARS (optimizer.py:876-889): every name of ``param_idx2name`` that does
        not end in ``_weight`` first gets multiplier 0 (``_gamma`` included, unlike the base)."""
        super().set_wd_mult(args_wd_mult)
        for name in self.idx2name.values():
            if not name.endswith("_weight") and name not in args_wd_mult:
                self.wd_mult[name] = 0.0

    def row_sparse_mode(self, index):
        """Refused: MXNet 1.9.1's LARS updates a row-sparse gradient lazily with the trust ratio
        of the whole weight (its SGD kernels); not implemented here."""
        raise ValueError("LARS does not take a row-sparse gradient here (MXNet 1.9.1 updates "
                         "it lazily with the trust ratio of the whole weight; not implemented):"
                         " pass grad.to_dense() for the dense update")

    def host_state(self):
        """MXNet's ``cur_lr``/``last_lr`` bookkeeping of ``momentum_correction`` (None before the
        first step), saved by the Trainer's states file."""
        return {"cur_lr": self.cur_lr, "last_lr": self.last_lr}, {}

    def check_host_state(self, data, host_arrays):
        def ok(x):
            return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and
                                 math.isfinite(x) and x >= 0)
        if host_arrays or set(data) != {"cur_lr", "last_lr"} or not all(map(ok, data.values())):
            raise ValueError(f"LARS's host state must be cur_lr and last_lr (None or finite "
                             f"numbers >= 0), got {data} and arrays {sorted(host_arrays)}")

        def commit():
            self.cur_lr = None if data["cur_lr"] is None else float(data["cur_lr"])
            self.last_lr = None if data["last_lr"] is None else float(data["last_lr"])
        return commit

    def reference_hyper(self):
        return {"momentum": self.momentum, "eta": self.eta, "eps": self.eps,
                "momentum_correction": self.momentum_correction}

    def _layer_lars(self, index):
        name = self.idx2name.get(index, str(index))
        return not str(name).endswith(_UNSCALED_SUFFIXES)

    def norm_inputs(self, index):
        """0 (norms of ``w`` and ``grad``) for the tensors LARS scales, else None."""
        return 0 if self._layer_lars(index) else None

    def _lr_ratio(self, t):
        """MXNet's ``cur_lr/last_lr`` bookkeeping (optimizer.py:854-864), advanced by one call."""
        n = max(self.num_update, t)
        lr = self.lr_scheduler(n) if self.lr_scheduler is not None else self.lr
        self.last_lr = lr if self.cur_lr is None else self.cur_lr
        self.cur_lr = lr
        if self.momentum_correction and self.last_lr != 0:
            return self.cur_lr / self.last_lr
        return 1.0

    def _reference_call_kwargs(self, index, t):
        # read without advancing: the bookkeeping advances in the step itself
        n = max(self.num_update, t)
        lr = self.lr_scheduler(n) if self.lr_scheduler is not None else self.lr
        last = lr if self.cur_lr is None else self.cur_lr
        ratio = lr / last if (self.momentum_correction and last != 0) else 1.0
        return {"lr_ratio": ratio, "layer_lars": self._layer_lars(index)}

    def _reference_step(self, index, weight, grad, state, t, lr, wd):
        super()._reference_step(index, weight, grad, state, t, lr, wd)
        self._lr_ratio(t)

    def _trust_lr(self, index, weight, grad, lr, wd):
        if not self._layer_lars(index):
            return lr
        import reference.lars as ref
        ww, gg = (self._launcher or cpu.LAUNCHER).lars_norms(weight, grad, None, 0)
        if not (ww > 0 and gg > 0):
            return lr
        if self.convention == "mxnet":
            return ref.mxnet_trust_lr(lr, ww, gg, eta=self.eta, eps=self.eps, wd=wd,
                                      rescale_grad=self.rescale_grad)
        return float(ref.trust_lr(lr, ww, gg, eta=self.eta, eps=self.eps, wd=wd,
                                  rescale_grad=self.rescale_grad))

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        ratio = self._lr_ratio(t)
        lr = self._trust_lr(index, weight, grad, lr, wd)
        r = self._r
        states = self.state_arrays(state)
        if self.convention == "mxnet":
            lr, wd, rs, c = r(lr), r(wd), r(self.rescale_grad), self._clip_bound()
            mu = r(self.momentum * ratio)
            rule = mxnet_momentum_rule if states else mxnet_plain_rule
            hyper = (lr, r(lr * wd), rs, c) + ((mu,) if states else ()) + (r(lr * rs),)
        else:
            rule = guide_momentum_rule if states else guide_plain_rule
            hyper = (lr, wd, self.rescale_grad, self._clip_bound()) + \
                ((self.momentum,) if states else ())
        self._run_rule(rule, weight, grad, states, hyper)
