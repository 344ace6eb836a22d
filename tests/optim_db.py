"""The optimizer database that drives the generic tests (in the manner of PyTorch's OptimizerInfo).

One entry per registered optimizer with an oracle, read from its spec
(``toolkit.optimizer.specs(oracle=True)``): its registry name, a hypothesis strategy for its own
hyperparameters (``Spec.space``, aimed at branch points: momentum 0, exact zeros,
beta2 < beta1^2, ...), the conventions it supports as a toolkit step (``Spec.conventions``),
whether the learning rate enters its update (``Spec.uses_lr``), its common hyperparameters
(``Spec.fixed`` pinned: GroupAdaGrad's weight decay 0) and its weight shapes (``Spec.matrix``:
matrices for GroupAdaGrad, vectors for the others), as the oracle draws them
(``toolkit.oracle.space``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from toolkit.optimizer import create, registry, spec_of, specs
from toolkit.oracle import space

DTYPES = ("float16-mp", "float32", "float64")

#: examples per optimizer x convention x dtype x backend case, by hypothesis profile: the matrix
#: has ~130 cases, so the deterministic CI profile keeps each one small
EXAMPLES = {"ci": 12, "dev": 4, "thorough": 300}.get(
    os.environ.get("TOOLKIT_HYPOTHESIS_PROFILE", "ci"), 12)


def decades(lo, hi):
    """Positive floats spread evenly over the decades 10**lo .. 10**hi."""
    return space.Decades(lo, hi).strategy()


#: the largest weight drawn, in elements
MAX_SIZE = 24


@dataclass(frozen=True)
class OptimizerInfo:
    name: str
    hyper: st.SearchStrategy
    conventions: tuple = ("mxnet", "guide")
    uses_lr: bool = True
    #: its common hyperparameters (``space.common_space``)
    common: st.SearchStrategy = None
    #: weight shapes of 1 to MAX_SIZE elements (``space.shape_space``)
    shapes: st.SearchStrategy = None


def _own(spec):
    """The optimizer's own hyperparameters, from the space the oracle draws from (its spec's)."""
    return st.fixed_dictionaries({k: v.strategy() for k, v in spec.space.items()}).map(
        lambda h: space.fix_dependent(spec.name, h))


def _common(name):
    return st.fixed_dictionaries({k: v.strategy() for k, v in space.common_space(name).items()})


#: one entry per registered optimizer with an oracle, sorted by name (its spec: ``specs()``)
DB = [OptimizerInfo(name, _own(spec), conventions=tuple(spec.conventions),
                    uses_lr=spec.uses_lr, common=_common(name),
                    shapes=space.shape_space(name, MAX_SIZE).strategy())
      for name, spec in specs(oracle=True).items()]

BY_NAME = {info.name: info for info in DB}

#: the hyperparameters every optimizer shares, on and off (an optimizer's own: its ``common``)
common_hyper = st.fixed_dictionaries({k: v.strategy() for k, v in space.COMMON.items()})


@st.composite
def arrays_over_decades(draw, n, lo, hi, zeros=True):
    """A float64 array of ``n`` values with random signs and magnitudes over 10**lo..10**hi,
    with some exact zeros."""
    exps = draw(st.lists(st.floats(lo, hi), min_size=n, max_size=n))
    signs = draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=n, max_size=n))
    x = np.array(signs) * 10.0 ** np.array(exps)
    if zeros:
        mask = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        x[np.array(mask) & (np.arange(n) % 3 == 0)] = 0.0
    return x


def np_dtype(dtype):
    return np.float16 if dtype == "float16-mp" else np.dtype(dtype).type


def is_builtin(name):
    """Whether ``name`` is registered by the toolkit itself (not by a test or a user)."""
    klass = registry().get(name)
    return klass is not None and klass.__module__.startswith("toolkit.optimizers.")


def launch_kind(opt):
    """The kind of the first launch of ``opt``'s step on a 3 x 4 float32 weight
    (``toolkit.backends.launches``)."""
    from toolkit.backends import cpu, launches
    w = np.ones((3, 4), np.float32)
    state = opt.create_state(0, w)
    step = opt.step_launches(0, w, np.ones_like(w), state, 1, 0.1, 0.0)
    return launches.collect(step, cpu.LAUNCHER)[0].kind


def step_kinds(name, kw=None):
    """The paths a step of ``optimizer.create(name, **kw)`` takes, read from its class, its
    spec and its launch: ``"<n> states"`` (``state_slots()``), ``"noise"`` (``Spec.noise``),
    ``"first pass"`` (``Spec.first_pass_reads``: per-tensor norms or LAMB's direction),
    ``"factored"`` and ``"matrix"`` (launches of those kinds: Adafactor's, Muon's), ``"row
    rule"`` (another state not shaped like the weight), and ``"kernel"`` or ``"python op"``
    (MXNet's kind, ``mxnet_kernel``). A test that samples configurations checks that they cover the kinds it
    means to, so a sample needs no edit when an optimizer is added."""
    opt = create(name, **(kw or {}))
    spec, klass = spec_of(name), type(opt)
    kinds = {f"{len(opt.state_slots())} states", "kernel" if klass.mxnet_kernel else "python op"}
    if spec.noise:
        kinds.add("noise")
    if spec.first_pass_reads(opt):
        kinds.add("first pass")
    kind = launch_kind(opt)
    if kind in ("factored", "matrix"):
        kinds.add(kind)
    elif not klass.state_like_weight:
        kinds.add("row rule")
    return frozenset(kinds)


def all_step_kinds():
    """Every kind of :func:`step_kinds` that a built-in optimizer's fixed configurations
    (``Spec.record`` and ``Spec.layouts``) take."""
    return frozenset().union(*(step_kinds(name, dict(config))
                               for name, spec in specs().items() if is_builtin(name)
                               for config in (spec.record,) + spec.layouts))


def kinds_of(cases):
    """The union of :func:`step_kinds` over ``[(name, kwargs, ...), ...]``."""
    return frozenset().union(*(step_kinds(case[0], case[1]) for case in cases))
