"""LBSGD: large-batch SGD with learning-rate warmup and LARS (MXNet ``lbsgd``; the guide's LBSGD
section, quoted in docs/conventions.md).

mxnet (MXNet 1.9.1 python/mxnet/optimizer/optimizer.py:1205-1246; docs/optimizers/lbsgd.md): the
learning rate is read *before* the update count is incremented; gradients are accumulated over
``batch_scale`` calls and one SGD step is taken with their mean::

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
from typing import NamedTuple

import numpy as np

from ..backends import arrays
from ..backends.launches import Launch, Norms
from ..backends.rules import add_rule
from .base import Optimizer
from .registry import register
from .spec_spaces import Ints, MOMENTUM, OneOf, USUAL_MOMENTUM
from .spec import BenchSetting, Spec
from .validation import choice, integer, unit
from .sgd import (GuideMomentumRow, GuidePlainRow, guide_momentum_rule, guide_plain_rule,
                  mxnet_factors, sgd_update_hyper)

__all__ = ["LBSGD", "lbmult"]

STRATEGIES = ("linear", "power2", "sqrt", "lars")


def lbmult(nup, warmup_strategy, warmup_epochs, updates_per_epoch, batch_scale):
    """The warmup multiplier of update ``nup`` (MXNet's ``_get_lbmult``;
    docs/optimizers/lbsgd.md)."""
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


class MomentumRow(NamedTuple):
    """The scalars of :func:`accumulated_momentum_rule` and :func:`fresh_momentum_rule`:
    ``sgd.MxnetMomentumRow``'s (rounded to the weight's dtype) and ``batch_scale``; packed on
    the host, read by name in the kernel."""
    lr: float          #: lr*mult
    lrwd: float        #: lr*wd
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    mu: float          #: momentum
    lrrs: float        #: lr*rescale
    bs: float          #: batch_scale


class PlainRow(NamedTuple):
    """The scalars of :func:`accumulated_plain_rule` and :func:`fresh_plain_rule`:
    ``sgd.SgdUpdateRow``'s (:func:`~.sgd.sgd_update_hyper`) and ``batch_scale``."""
    lr: float          #: lr*mult
    decay: float       #: 1 - lr*wd, rounded once to the weight's dtype
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    lrrs: float        #: lr*rescale
    bs: float          #: batch_scale


# The rules take MXNet's SGD kernels' gradient preprocessing from sgd.mxnet_factors (the mean
# gradient gm in place of grad), and form the step's one product after it as those kernels do.

def accumulated_momentum_rule(f):
    """MXNet's update call with momentum, fused: ``gm = (cum + grad)/bs``, the aggregated SGD
    momentum step with ``gm`` (``sgd.mxnet_momentum_rule``'s arithmetic), and ``cum = 0``.
    ``hp`` a :class:`MomentumRow`; states ``(cum, mom)``."""
    zero = f(0)
    factors = mxnet_factors(f)

    def rule(w, grad, cum, mom, hp):
        p = MomentumRow(*hp)
        gm = (cum + grad) / p.bs
        scale, g = factors(gm, p.lr, p.rescale, p.clip_bound, p.lrrs)
        step = scale * g
        mom = ((p.mu * mom) - p.lrwd * w) - step
        return w + mom, zero, mom
    return rule


def accumulated_plain_rule(f):
    """MXNet's update call without momentum, fused: ``gm = (cum + grad)/bs``, ``sgd_update``'s
    ``w = (1 - lr*wd)*w - (lr*rs)*gm`` (``- lr*clip(rs*gm, c)`` when clipping;
    ``sgd.sgd_update_rule``), and ``cum = 0``. ``hp`` a :class:`PlainRow`; state ``(cum,)``."""
    zero = f(0)
    factors = mxnet_factors(f)

    def rule(w, grad, cum, hp):
        p = PlainRow(*hp)
        gm = (cum + grad) / p.bs
        scale, g = factors(gm, p.lr, p.rescale, p.clip_bound, p.lrrs)
        return p.decay * w - scale * g, zero
    return rule


def fresh_momentum_rule(f):
    """:func:`accumulated_momentum_rule` where the accumulator is known to hold zeros
    (``batch_scale`` 1: every call steps and leaves it zero): the same arithmetic with
    ``zero`` for ``cum`` (so ``-0.0`` gradients become ``+0.0`` as before), the accumulator
    neither read nor written. ``hp`` as there; state ``(mom,)``."""
    zero = f(0)
    factors = mxnet_factors(f)

    def rule(w, grad, mom, hp):
        p = MomentumRow(*hp)
        gm = (zero + grad) / p.bs
        scale, g = factors(gm, p.lr, p.rescale, p.clip_bound, p.lrrs)
        step = scale * g
        mom = ((p.mu * mom) - p.lrwd * w) - step
        return w + mom, mom
    return rule


def fresh_plain_rule(f):
    """:func:`accumulated_plain_rule` where the accumulator is known to hold zeros (see
    :func:`fresh_momentum_rule`); no state."""
    zero = f(0)
    factors = mxnet_factors(f)

    def rule(w, grad, hp):
        p = PlainRow(*hp)
        gm = (zero + grad) / p.bs
        scale, g = factors(gm, p.lr, p.rescale, p.clip_bound, p.lrrs)
        return p.decay * w - scale * g
    return rule


def _lars_first_pass(opt, buffers):
    """The 'lars' warm-up's first pass reads the weight and the accumulator (when it
    accumulates) for the per-tensor norms; the other strategies make one pass."""
    return 1 + buffers if opt.warmup_strategy == "lars" else 0


def _accumulator_traffic(opt):
    """The accumulator is read and written only where ``batch_scale`` > 1: with 1 every call
    steps and it stays zero (the fresh rules neither read nor write it)."""
    return len(opt.host_buffers()) if opt.batch_scale > 1 else 0


SPEC = Spec(
    name="lbsgd", reference="reference.lbsgd",
    pytorch=None, torch=None,
    space={"momentum": MOMENTUM, "warmup_strategy": OneOf("linear", "power2", "sqrt", "lars"),
           "warmup_epochs": Ints(0, 3), "batch_scale": Ints(1, 3),
           "updates_per_epoch": Ints(1, 4), "begin_epoch": Ints(0, 2)},
    usual={"momentum": USUAL_MOMENTUM},  # 0 or 0.5..0.99 (spaces.USUAL_MOMENTUM)
    record={"momentum": 0.9, "warmup_strategy": "linear", "warmup_epochs": 1, "batch_scale": 2,
            "updates_per_epoch": 4}, record_ulps=0,
    layouts=({"learning_rate": 0.1}, {"learning_rate": 0.1, "momentum": 0.9},),
    trainer=({"momentum": 0.9, "warmup_strategy": "lars"},
             {"batch_scale": 2, "warmup_epochs": 1, "updates_per_epoch": 2}),
    demo={"learning_rate": 0.1, "momentum": 0.9, "warmup_strategy": "linear", "warmup_epochs": 2,
          "batch_scale": 1, "updates_per_epoch": 23},
    bench=(BenchSetting("lbsgd", {"momentum": 0.0}),
           BenchSetting("lbsgd mom", {"momentum": 0.9}, quick=True),
           BenchSetting("lbsgd lars mom", {"momentum": 0.9, "warmup_strategy": "lars"})),
    first_pass=_lars_first_pass, traffic_buffers=_accumulator_traffic,
)


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

    spec = SPEC

    domains = {"momentum": unit(), "warmup_strategy": choice(STRATEGIES),
               "warmup_epochs": integer(0), "batch_scale": integer(1),
               "updates_per_epoch": integer(1), "begin_epoch": integer(0),
               "num_epochs": integer(0)}

    def __init__(self, momentum=0.0, multi_precision=False, warmup_strategy="linear",
                 warmup_epochs=5, batch_scale=1, updates_per_epoch=32, begin_epoch=0,
                 num_epochs=60, **kwargs):
        self.momentum = momentum
        self.warmup_strategy = warmup_strategy
        self.warmup_epochs = warmup_epochs
        self.batch_scale = batch_scale
        self.updates_per_epoch = updates_per_epoch
        self.begin_epoch = begin_epoch
        self.num_epochs = num_epochs
        super().__init__(multi_precision=multi_precision, **kwargs)
        self._cum: dict = {}
        self._ncum: dict = {}
        #: indices whose accumulator is known to hold +0.0 everywhere (created here, or zeroed
        #: by a step since): with batch_scale 1 their steps neither read nor write it
        self._cum_zero: set = set()

    @property
    def init_updates(self):
        """The update count an index's warmup starts from: ``begin_epoch * updates_per_epoch``."""
        return self.begin_epoch * self.updates_per_epoch

    def state_slots(self):
        return ("mom",) if self.momentum != 0.0 else ()

    def row_sparse_mode(self, index):
        """Refused: MXNet 1.9.1's LBSGD updates a row-sparse gradient lazily through its SGD
        kernels with its accumulators and warmup; not implemented here."""
        raise ValueError("LBSGD does not take a row-sparse gradient here (MXNet 1.9.1 updates "
                         "it lazily through its accumulators; not implemented): pass "
                         "grad.to_dense() for the dense update")

    def _lr_count(self, num_update_after):
        # MXNet reads the learning rate before it increments the count (optimizer.py:1209-1211)
        return self.num_update if self.convention == "mxnet" else num_update_after

    def _accumulator(self, index, weight):
        """This index's gradient accumulator (a zero array of the weight's kind, device and
        arithmetic dtype when it has none that fits) and call count."""
        dtype = arrays.compute_dtype(weight)
        cum = self._cum.get(index)
        if cum is not None:
            if type(cum) is np.ndarray and type(weight) is np.ndarray:  # both on the host
                if cum.shape != weight.shape or cum.dtype != dtype:
                    cum = None
            else:
                c, w = arrays.describe(cum), arrays.describe(weight)
                if c.shape != w.shape or c.dtype != dtype:
                    cum = None
                elif c.kind != w.kind or (c.kind == arrays.DEVICE and c.library != w.library):
                    # a restored (host) accumulator for a device weight, or the reverse
                    moved = arrays.zeros_like(weight, dtype)
                    arrays.copy_from_host(moved, arrays.to_host(cum))
                    cum = moved
                    self._cum_zero.discard(index)
        if cum is None:
            cum = arrays.zeros_like(weight, dtype)
            self._cum_zero.add(index)
        return cum, self._ncum.get(index, self.init_updates)

    def _fresh(self, index):
        """Whether the next step of ``index`` may skip its accumulator: ``batch_scale`` 1 (every
        call steps) and the accumulator known to hold zeros, so ``(cum + grad)/1`` is
        ``(0 + grad)/1``."""
        return self.batch_scale == 1 and index in self._cum_zero

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
            if type(n) is not int or not 0 <= n <= 2 ** 53:
                raise ValueError(f"LBSGD call count {n!r} is invalid (an integer in [0, 2**53])")
            if type(k) not in (int, str) or k in ncum:
                raise ValueError(f"LBSGD call count index {k!r} is invalid or repeated")
            ncum[k] = n
        cum = {}
        for k, name in data["cum"]:
            a = np.array(host_arrays[name])
            bound = self._cum.get(k)
            if bound is not None:
                b = arrays.describe(bound)
                if a.shape != b.shape or a.dtype != b.dtype:
                    raise ValueError(f"LBSGD accumulator of index {k!r} is {a.dtype}{a.shape} in "
                                     f"the file, {b.dtype}{b.shape} here")
            cum[k] = a

        def commit():
            bound = self._cum
            for k, a in cum.items():
                if k in bound and arrays.describe(bound[k]).shape == a.shape:
                    arrays.copy_from_host(bound[k], a)   # a Trainer's flat buffer stays bound
                else:
                    bound[k] = a
            self._cum_zero.clear()   # restored: read by the next step, zeroed by it
            self._ncum = ncum
        return commit

    def _reference_extra(self, index, weight=None):
        """The accumulator (a host array; zeros shaped like ``weight`` before the first
        accumulation) and the call count."""
        cum = self._cum.get(index)
        if cum is not None:
            cum = np.array(arrays.to_host(cum))
        elif weight is not None:
            cum = np.zeros(arrays.describe(weight).shape)
        extra = {"ncum": self._ncum.get(index, self.init_updates)}
        if cum is not None:
            extra["cum"] = cum
        return extra

    def _reference_store_extra(self, index, new_state, weight):
        self._cum[index] = np.asarray(new_state["cum"]).astype(weight.dtype)
        self._cum_zero.discard(index)
        self._ncum[index] = int(new_state["ncum"])

    # --- the Trainer's hooks: a flat accumulator, and norms computed for a whole group --------
    def host_buffers(self):
        """Per-index arrays kept outside ``state`` (the accumulated gradient, convention
        "mxnet"): the Trainer binds views of its flat buffers to them."""
        return ("cum",) if self.convention == "mxnet" else ()

    def bind_host_buffer(self, name, index, array):
        old = self._cum.get(index)
        if old is not None and arrays.describe(old).shape == arrays.describe(array).shape:
            arrays.copy_from_host(array, arrays.to_host(old))  # what was accumulated carries on
        self._cum[index] = array
        self._cum_zero.discard(index)  # its contents are the Trainer's (e.g. broadcast) now

    def norm_inputs(self, index):
        """What the next step of ``index`` takes norms of ('lars' only): None for none, else
        ``batch_scale`` (norms of ``w`` and ``(cum + grad)/batch_scale``, convention "mxnet") or
        0 (norms of ``w`` and ``grad``: "guide", or an accumulator known to be zero with
        ``batch_scale`` 1, where the squares are the same)."""
        if self.warmup_strategy != "lars":
            return None
        if self.convention == "guide":
            return 0
        ncum = self._ncum.get(index, self.init_updates) + 1
        if ncum % self.batch_scale != 0:
            return None
        return 0 if self._fresh(index) else self.batch_scale

    def _multiplier(self, weight, grad, cum, wd, ncum):
        """A generator: the warmup's multiplier, asking for the norms under 'lars' (both on
        the backend that holds the arrays, float64 accumulation, fixed order)."""
        if self.warmup_strategy != "lars":
            return lbmult(ncum, self.warmup_strategy, self.warmup_epochs, self.updates_per_epoch,
                          self.batch_scale)
        ww, gg = yield Norms(weight, grad, cum, self.batch_scale if cum is not None else 0)
        return min(max(math.sqrt(ww / (gg + wd * ww + 1e-18)), 0.01), 100.0)

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        states = self.state_arrays(state)
        r = self._rounded
        if self.convention == "mxnet":
            cum, ncum = self._accumulator(index, weight)
            ncum += 1
            self._cum[index], self._ncum[index] = cum, ncum
            if ncum % self.batch_scale != 0:
                self._cum_zero.discard(index)
                yield Launch("rule", add_rule, cum, grad, (), (0.0,))       # cum = cum + grad
                return
            # one pass: gm = (cum + grad)/bs, the SGD step with gm, cum = 0; an accumulator
            # known to be zero (batch_scale 1) is neither read nor written: the norms of
            # (0 + grad)/1 are those of grad, and the rule adds 0 itself
            fresh = self._fresh(index)
            lr = lr * (yield from self._multiplier(weight, grad, None if fresh else cum, wd, ncum))
            lr, wd, rs, c = r(lr), r(wd), r(self.rescale_grad), self._clip_bound()
            bs = float(self.batch_scale)
            if states:
                hyper = MomentumRow(lr=lr, lrwd=lr * wd, rescale=rs, clip_bound=c,
                                    mu=r(self.momentum),
                                    lrrs=lr * rs, bs=bs)
                if fresh:
                    yield Launch("rule", fresh_momentum_rule, weight, grad, states, hyper)
                else:
                    yield Launch("rule", accumulated_momentum_rule, weight, grad,
                                 (cum,) + states, hyper)
            else:
                hyper = PlainRow(**sgd_update_hyper(lr, wd, rs, c)._asdict(), bs=bs)
                if fresh:
                    yield Launch("rule", fresh_plain_rule, weight, grad, (), hyper)
                else:
                    yield Launch("rule", accumulated_plain_rule, weight, grad, (cum,), hyper)
            self._cum_zero.add(index)
            return
        ncum = self._ncum.get(index, self.init_updates) + 1  # the guide accumulates nothing
        lr = lr * (yield from self._multiplier(weight, grad, None, wd, ncum))
        common = dict(lr=lr, wd=wd, rescale=self.rescale_grad, clip_bound=self._clip_bound())
        if states:
            yield Launch("rule", guide_momentum_rule, weight, grad, states,
                         GuideMomentumRow(**common, mu=self.momentum))
        else:
            yield Launch("rule", guide_plain_rule, weight, grad, (), GuidePlainRow(**common))
        self._ncum[index] = ncum
