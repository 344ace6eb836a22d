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
from typing import NamedTuple

from ..backends import jit
from ..backends.launches import Launch, Norms
from .registry import register
from .spec_spaces import Decades, MOMENTUM, OneOf, USUAL_MOMENTUM
from .spec import BenchSetting, Spec
from .validation import flag, nonneg
from .sgd import (SGD, GuideMomentumRow, GuidePlainRow, MxnetMomentumRow, MxnetPlainRow,
                  guide_momentum_rule, guide_plain_rule, mxnet_momentum_rule, mxnet_plain_rule)

__all__ = ["LARS"]

_UNSCALED_SUFFIXES = ("gamma", "beta", "bias")


class MxnetScalars(NamedTuple):
    """What :func:`_mxnet_scalars` returns, by name: the fields SGD's MXNet rows
    (``sgd.MxnetMomentumRow``, ``sgd.MxnetPlainRow``) take from a LARS step, each rounded to
    float32 (as Python floats)."""
    lr: float       #: lr_k, the trust-scaled learning rate
    lrwd: float     #: lr_k*wd
    rescale: float  #: rescale_grad
    mu: float       #: momentum (times cur_lr/last_lr with momentum_correction)
    lrrs: float     #: lr_k*rescale


SPEC = Spec(
    name="lars", reference="reference.lars",
    pytorch=None, torch=None,
    space={"momentum": MOMENTUM, "eta": OneOf(0.001, Decades(-3, 0)),
           "eps": OneOf(0.0, Decades(-9, -3)), "momentum_correction": OneOf(True, False)},
    # eta, the trust coefficient: 0.001 (You, Gitman and Ginsburg 2017; MXNet's default and
    # optax's trust_coefficient) to a few hundredths (this toolkit's demo: 0.02); momentum 0.9
    # (the paper) or off; eps: 0 (MXNet, optax) or a small floor
    usual={"momentum": USUAL_MOMENTUM, "eta": Decades(-3, -1.5),
           "eps": OneOf(0.0, Decades(-9, -6))},
    record={"momentum": 0.9, "eta": 0.01, "eps": 1e-06,
            "momentum_correction": True}, record_ulps=0,
    layouts=({"learning_rate": 0.1}, {"learning_rate": 0.1, "momentum": 0.9},),
    trainer=({"momentum": 0.9, "eta": 0.01}, {"eps": 0.001},),
    demo={"learning_rate": 0.3, "momentum": 0.9, "eta": 0.02},
    bench=(BenchSetting("lars mom", {"momentum": 0.9}, quick=True),),
    first_pass=1,  # the weight, for its norm
)


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

    spec = SPEC

    domains = {"eta": nonneg(), "eps": nonneg(), "momentum_correction": flag(strict=False)}

    def __init__(self, momentum=0.0, lazy_update=True, eta=0.001, eps=0, momentum_correction=True,
                 **kwargs):
        self.eta, self.eps = eta, eps
        self.momentum_correction = momentum_correction
        self.last_lr = None
        self.cur_lr = None
        super().__init__(momentum=momentum, lazy_update=lazy_update,
                         **kwargs)

    def reference_hyper(self):
        """SGD's, but its torch keywords (``nesterov``, ``dampening``: only their off values
        are taken here, LARS having no convention "pytorch"), which ``reference.lars`` has
        not."""
        return {k: v for k, v in super().reference_hyper().items()
                if k not in ("nesterov", "dampening")}

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

    def _layer_lars(self, index):
        name = self.idx2name.get(index, str(index))
        return not str(name).endswith(_UNSCALED_SUFFIXES)

    def norm_inputs(self, index):
        """0 (norms of ``w`` and ``grad``) for the tensors LARS scales, else None."""
        return 0 if self._layer_lars(index) else None

    def _read_schedule(self, sched, index, n):
        # kept, per index, for this update's momentum correction: MXNet's _get_lrs reads the
        # schedule once per update, for the learning rate and cur_lr alike (optimizer.py:841-874)
        lr = super()._read_schedule(sched, index, n)
        self.__dict__.setdefault("_rates_read", {})[index] = (n, lr)
        return lr

    def _schedule_rate(self, index, n, take):
        """The schedule's rate at count ``n`` before multipliers for the update of ``index``:
        the one its learning rate read (``take``: the last use of it), else read now."""
        sched = self.lr_scheduler
        if sched is None:
            return self.lr
        read = self.__dict__.get("_rates_read")
        got = read.get(index) if read else None
        if got is not None and got[0] == n:
            if take:
                del read[index]
            return got[1]
        return sched(n)

    def _lr_ratio(self, index, t):
        """MXNet's ``cur_lr/last_lr`` bookkeeping (optimizer.py:854-864), advanced by one call."""
        n = max(self.num_update, t)
        lr = self._schedule_rate(index, n, take=True)
        self.last_lr = lr if self.cur_lr is None else self.cur_lr
        self.cur_lr = lr
        if self.momentum_correction and self.last_lr != 0:
            return self.cur_lr / self.last_lr
        return 1.0

    def _reference_call_kwargs(self, index, t):
        # read without advancing: the bookkeeping advances in the step itself
        n = max(self.num_update, t)
        lr = self._schedule_rate(index, n, take=False)
        last = lr if self.cur_lr is None else self.cur_lr
        ratio = lr / last if (self.momentum_correction and last != 0) else 1.0
        return {"lr_ratio": ratio, "layer_lars": self._layer_lars(index)}

    def _reference_step(self, index, weight, grad, state, t, lr, wd):
        super()._reference_step(index, weight, grad, state, t, lr, wd)
        self._lr_ratio(index, t)

    def _trust_lr(self, lr, wd, ww, gg):
        """The guide's ``lr*trust`` in float64 from the norms (``lr`` for a zero norm)."""
        if not (ww > 0 and gg > 0):
            return lr
        import reference.lars as ref
        return float(ref.trust_lr(lr, ww, gg, eta=self.eta, eps=self.eps, wd=wd,
                                  rescale_grad=self.rescale_grad))

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        ratio = self._lr_ratio(index, t)
        states = self.state_arrays(state)
        # lr_k = lr where the layer takes no trust ratio
        ww, gg = (yield Norms(weight, grad, None, 0)) if self._layer_lars(index) else (0.0, 0.0)
        if self.convention == "mxnet":
            scalars = MxnetScalars(*_mxnet_scalars()(
                lr, ww, gg, self.eta, self.eps, wd, self.rescale_grad, self.momentum * ratio))
            named = dict(scalars._asdict(), clip_bound=self._clip_bound())
            if states:
                rule, hyper = mxnet_momentum_rule, MxnetMomentumRow(**named)
            else:
                del named["mu"]
                rule, hyper = mxnet_plain_rule, MxnetPlainRow(**named)
        else:
            named = dict(lr=self._trust_lr(lr, wd, ww, gg), wd=wd,
                         rescale=self.rescale_grad, clip_bound=self._clip_bound())
            if states:
                rule, hyper = guide_momentum_rule, GuideMomentumRow(mu=self.momentum, **named)
            else:
                rule, hyper = guide_plain_rule, GuidePlainRow(**named)
        yield Launch("rule", rule, weight, grad, states, hyper)


def _mxnet_scalars():
    """The compiled ``scalars(lr, ww, gg, eta, eps, wd, rs, mu) -> (lr_k, lr_k*wd, rs, mu,
    lr_k*rs)`` (the fields of :class:`MxnetScalars`, in order): MXNet's float32 step scalars of
    a LARS step, each rounded to float32 (returned as Python floats). ``lr_k`` is ``multi_lars`` (``reference.lars.mxnet_trust_lr``: every
    operand float32, the formula evaluated left to right in float32) from the float64 sums of
    squares ``ww = |w|^2`` and ``gg = |grad|^2``, or ``float32(lr)`` when either is not positive
    (or not positive once rounded to float32); the two products are float32 products of the
    rounded factors, as MXNet's kernel forms them. Compiled float32 arithmetic is IEEE single
    precision, as numpy's float32 scalars are: the same bits, in one call instead of a dozen
    numpy scalar operations (about 1.5 us of a 2^12 step)."""
    return jit.cached("lars-mxnet-scalars", _compile_mxnet_scalars)


def _compile_mxnet_scalars():
    import numba
    import numpy as np
    from numba import types

    f64 = types.float64
    f32 = np.float32

    def scalars(lr, ww, gg, eta, eps, wd, rs, mu):
        lr32, wd32, rs32 = f32(lr), f32(wd), f32(rs)
        lr_k = lr32
        if ww > 0 and gg > 0:
            w2, g2 = f32(ww), f32(gg)
            if w2 > 0 and g2 > 0:
                wn, gn = np.sqrt(w2), np.sqrt(g2)
                lr_k = ((lr32 * f32(eta)) * wn) / ((rs32 * gn + wd32 * wn) + f32(eps))
        return (f64(lr_k), f64(lr_k * wd32), f64(rs32), f64(f32(mu)), f64(lr_k * rs32))
    sig = types.UniTuple(f64, 5)(f64, f64, f64, f64, f64, f64, f64, f64)
    return numba.njit([sig], **jit.COMPILE_OPTIONS)(scalars)
