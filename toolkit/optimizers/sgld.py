"""SGLD: stochastic gradient Langevin dynamics (MXNet ``sgld``; guide lines 276-278; Welling and Teh 2011).

mxnet (Python ops, MXNet 1.9.1 python/mxnet/optimizer/optimizer.py:1524-1536;
docs/optimizers/sgld.md) and guide agree::

    g = clip(rescale_grad*grad, c)
    w = w - lr/2*(g + wd*w) + sqrt(lr)*z,     z ~ N(0, 1)  (the guide's N(0, lr) is a variance)

The noise is reproducible: ``z`` comes from the counter-based generator specified in
``reference/noise.py`` (SplitMix64 finaliser, Box-Muller), keyed by (seed, parameter index, t,
element index), implemented again for the kernels in ``toolkit/backends/noise.py`` and compiled by
every backend, so every backend draws the same numbers.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from ..backends.noise import stream_key, stream_of
from ..backends.launches import Launch
from . import gradient
from .base import Optimizer
from .registry import register
from .spec_spaces import Ints
from .spec import BenchSetting, Spec
from .validation import integer

__all__ = ["SGLD", "sgld_rule", "stream_key", "stream_of"]


class SgldRow(NamedTuple):
    """The scalars of :func:`sgld_rule`, in the weight's arithmetic dtype: packed on the host,
    read by name in the kernel."""
    neg_half_lr: float  #: -lr/2
    wd: float
    rescale: float      #: rescale_grad
    clip_bound: float   #: clip_gradient, negative for none


def sgld_rule(f):
    """SGLD's noise rule: ``z`` is the element's standard normal draw, ``aux[0] = sqrt(lr)`` in
    float64, ``hp`` an :class:`SgldRow`."""
    grad_of = gradient.rescaled(f)

    def rule(w, g, z, hp, aux):
        p = SgldRow(*hp)
        gi = grad_of(g, p.rescale, p.clip_bound)
        wi = w + p.neg_half_lr * (gi + p.wd * w)
        return wi + f(aux[0] * z)
    return rule


SPEC = Spec(
    name="sgld", reference="reference.sgld",
    pytorch=None, torch=None,
    space={"seed": Ints(0, 4294967296)}, noise=True,
    record={"seed": 7}, record_ulps=1,
    layouts=({"learning_rate": 0.01},),
    trainer=({},),
    demo={"learning_rate": 0.0001, "seed": 1}, full_data_gradient=True,
    bench=(BenchSetting("sgld", {}, quick=True),),
)


@register
class SGLD(Optimizer):
    """Stochastic gradient Langevin dynamics (MXNet ``sgld``).

    ``w = w - lr/2*(g + wd*w) + sqrt(lr)*z`` with ``g = clip(rs*grad, c)`` and ``z`` standard
    normal, in both conventions. ``seed`` keys the noise: draw ``i`` of parameter ``index`` at
    step ``t`` is a pure function of (seed, index, t, i), the same on every backend. No state.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> a, b = np.zeros(3), np.zeros(3)
        >>> for w in (a, b):
        ...     optimizer.SGLD(learning_rate=0.01, seed=7).update(0, w, np.ones(3), None)
        >>> bool((a == b).all())
        True
    """

    spec = SPEC
    mxnet_kernel = False

    domains = {"seed": integer(0, reference=False)}

    def __init__(self, seed=0, **kwargs):
        self.seed = seed
        super().__init__(**kwargs)

    def _check_weight(self, weight):
        w = super()._check_weight(weight)
        if len(w.shape) > 1 and not w.c_contiguous:
            raise ValueError("SGLD needs a C-contiguous weight: its noise is indexed in C order")
        return w

    def _reference_call_kwargs(self, index, t):
        return {"seed": self.seed, "stream": stream_of(index)}

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        key = stream_key(self.seed, stream_of(index), t)
        hyper = SgldRow(neg_half_lr=-(lr / 2.0), wd=wd, rescale=self.rescale_grad,
                        clip_bound=self._clip_bound())
        return Launch("noise", sgld_rule, weight, grad, (), hyper, key=key, aux=(math.sqrt(lr),))
