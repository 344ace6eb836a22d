"""The optimizer database that drives the generic tests (in the manner of PyTorch's OptimizerInfo).

One entry per optimizer: its registry name, a hypothesis strategy for its own hyperparameters
(aimed at branch points: momentum 0, exact zeros, beta2 < beta1^2, ...), the conventions it
supports as a toolkit step, and the dtypes it is checked in.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

DTYPES = ("float16-mp", "float32", "float64")

#: examples per optimizer x convention x dtype x backend case, by hypothesis profile: the matrix
#: has ~130 cases, so the deterministic CI profile keeps each one small
EXAMPLES = {"ci": 12, "dev": 4, "thorough": 300}.get(
    os.environ.get("TOOLKIT_HYPOTHESIS_PROFILE", "ci"), 12)


def decades(lo, hi):
    """Positive floats spread evenly over the decades 10**lo .. 10**hi."""
    return st.floats(lo, hi).map(lambda e: float(10.0 ** e))


def unit(lo=0.0, hi=0.999):
    return st.floats(lo, hi)


@dataclass(frozen=True)
class OptimizerInfo:
    name: str
    hyper: st.SearchStrategy
    conventions: tuple = ("mxnet", "guide")
    uses_lr: bool = True


_momentum = st.one_of(st.just(0.0), unit(0.0, 0.99))

DB = [
    OptimizerInfo("sgd", st.fixed_dictionaries({"momentum": _momentum})),
    OptimizerInfo("nag", st.fixed_dictionaries({"momentum": _momentum})),
    OptimizerInfo("adagrad", st.fixed_dictionaries({"eps": st.one_of(st.just(1e-7), decades(-10, -1))})),
    OptimizerInfo("rmsprop", st.fixed_dictionaries({
        "gamma1": unit(0.0, 0.999), "gamma2": unit(0.0, 0.99), "epsilon": decades(-10, -2),
        "centered": st.booleans(),
        "clip_weights": st.one_of(st.none(), decades(-1, 1))})),
    OptimizerInfo("adadelta", st.fixed_dictionaries({"rho": unit(0.0, 0.999),
                                                     "epsilon": decades(-9, -3)}), uses_lr=False),
    OptimizerInfo("adam", st.fixed_dictionaries({"beta1": unit(0.0, 0.99), "beta2": unit(0.0, 0.9999),
                                                 "epsilon": decades(-10, -2)})),
    OptimizerInfo("adamax", st.fixed_dictionaries({"beta1": unit(0.0, 0.99), "beta2": unit(0.0, 0.9999)})),
    OptimizerInfo("nadam", st.fixed_dictionaries({
        "beta1": unit(0.0, 0.99), "beta2": unit(0.0, 0.9999), "epsilon": decades(-10, -2),
        "schedule_decay": st.one_of(st.just(0.004), unit(0.0, 0.1))}), conventions=("mxnet",)),
    OptimizerInfo("signum", st.fixed_dictionaries({"momentum": _momentum}).flatmap(
        lambda h: st.fixed_dictionaries({"momentum": st.just(h["momentum"]),
                                         "wd_lh": st.just(0.0) if h["momentum"] == 0 else
                                         st.one_of(st.just(0.0), decades(-4, -1))}))),
    OptimizerInfo("lbsgd", st.fixed_dictionaries({
        "momentum": _momentum, "warmup_strategy": st.sampled_from(["linear", "power2", "sqrt", "lars"]),
        "warmup_epochs": st.integers(0, 3), "batch_scale": st.integers(1, 3),
        "updates_per_epoch": st.integers(1, 4), "begin_epoch": st.integers(0, 2)})),
    OptimizerInfo("dcasgd", st.fixed_dictionaries({"momentum": _momentum,
                                                   "lamda": st.one_of(st.just(0.04), decades(-3, 1))})),
    OptimizerInfo("ftrl", st.fixed_dictionaries({"lamda1": st.one_of(st.just(0.0), decades(-4, 0)),
                                                 "beta": st.one_of(st.just(0.0), decades(-2, 1))})),
    OptimizerInfo("ftml", st.fixed_dictionaries({"beta1": unit(0.0, 0.99), "beta2": unit(0.0, 0.9999),
                                                 "epsilon": decades(-10, -2)})),
    OptimizerInfo("sgld", st.fixed_dictionaries({"seed": st.integers(0, 2**32)})),
]

BY_NAME = {info.name: info for info in DB}

#: the hyperparameters every optimizer shares, on and off
common_hyper = st.fixed_dictionaries({
    "learning_rate": decades(-4, 0),
    "wd": st.one_of(st.just(0.0), decades(-5, -1)),
    "rescale_grad": st.one_of(st.just(1.0), decades(-2, 1)),
    "clip_gradient": st.one_of(st.none(), st.just(0.0), decades(-2, 1)),
})


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
