"""Every optimizer x convention x dtype on the CUDA backend against the float64 oracle.

The same registry (``optim_db``) and the same rigorous bounds as the CPU matrix
(``tests/test_optimizers_vs_reference.py``): per step from identical inputs, parameters and every
state slot, and free-running trajectories. float16 runs both with multi_precision (checked through
the float32 master; the float16 weight must be the master rounded) and without (float32
arithmetic rounded to float16 on store: the bound adds exactly that half-ulp rounding).
On a real GPU numba-cuda contracts ``a*b + c`` into FMAs; an FMA rounds once, inside the bound.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, note, settings, target
from hypothesis import strategies as st
from numba import cuda

from optim_db import DB, EXAMPLES, arrays_over_decades
from toolkit.oracle import space
from toolkit import optimizer
from toolkit.optimizer import spec_of
from toolkit.error_bounds import finite_score, step_errors, trajectory_errors

DTYPES = ("float16-mp", "float16", "float32", "float64")
#: the optimizers with CUDA kernels (``Spec.cuda``; Adafactor's refusal:
#: tests/cuda/test_cuda_cpu_only.py)
CASES = [(info, conv, dtype) for info in DB if spec_of(info.name).cuda
         for conv in info.conventions for dtype in DTYPES]
CUDA_EXAMPLES = max(EXAMPLES // 2, 3)


def _ids(case):
    info, conv, dtype = case
    return f"{info.name}-{conv}-{dtype}"


def _build(info, conv, dtype, data):
    hyper = data.draw(info.hyper, label="hyper")
    common = data.draw(info.common, label="common")
    plain16 = dtype == "float16"
    if plain16 and info.name in ("ftrl", "ftml"):
        # their state grows like w/lr: with float16 *state* (no master copy) a small learning
        # rate overflows it on every backend alike; keep the state inside float16's range
        common["learning_rate"] = data.draw(st.floats(-1, 0).map(lambda e: 10.0 ** e), label="lr16")
    opt = optimizer.create(info.name, convention=conv, backend="cuda",
                           multi_precision=dtype == "float16-mp", **hyper, **common)
    # 1 to 24 elements, or a size that needs the grid-stride loop of the launch configuration
    # (GroupAdaGrad: up to 4 rows, or 2 rows of 20 columns, more than a block's threads)
    shape = data.draw(st.one_of(info.shapes, st.just(space.weight_shape(info.name, 40))),
                      label="shape")
    n = math.prod(shape)
    dt = np.float16 if dtype.startswith("float16") else np.dtype(dtype).type
    lo_w, hi_w = (-2, 1 if plain16 else 2) if dt == np.float16 else (-4, 2)
    w = data.draw(arrays_over_decades(n, lo_w, hi_w, zeros=True),
                  label="w").reshape(shape).astype(dt)
    # float16 state (no master copy) holds squared gradients: keep them inside its range
    lo_g, hi_g = (-4, 1 if plain16 else 3) if dt == np.float16 else (-7, 3)
    grads = [data.draw(arrays_over_decades(n, lo_g, hi_g), label=f"g{k}").reshape(shape).astype(dt)
             for k in range(data.draw(st.integers(1, space.max_steps(info.name, 4)),
                                      label="steps"))]
    return opt, w, grads


@pytest.mark.parametrize("case", CASES, ids=_ids)
@settings(max_examples=CUDA_EXAMPLES)
@given(data=st.data())
def test_each_step_matches_reference_on_cuda(case, data):
    info, conv, dtype = case
    opt, w, grads = _build(info, conv, dtype, data)
    wd = cuda.to_device(w)
    state = opt.create_state_multi_precision(0, wd)
    worst = 0.0
    for k, g in enumerate(grads):
        res = step_errors(opt, 0, wd, cuda.to_device(g), state)
        note(f"step {k + 1}: {res}")
        for name, (err, checked, ties) in res.items():
            worst = max(worst, err)
            assert err <= 1.0, f"{name}: normalised error {err:.3g} at step {k + 1}"
    target(finite_score(worst), label="worst normalised error")


@pytest.mark.parametrize("case", [c for c in CASES if c[2] in ("float32", "float64")], ids=_ids)
@settings(max_examples=max(CUDA_EXAMPLES // 2, 2))
@given(data=st.data())
def test_trajectory_matches_reference_on_cuda(case, data):
    info, conv, dtype = case
    opt, w, grads = _build(info, conv, dtype, data)
    grads = [cuda.to_device(g) for g in grads * 2]
    wd = cuda.to_device(w)
    state = opt.create_state(0, wd)
    res = trajectory_errors(opt, 0, wd, grads, state)
    note(str(res))
    worst = max(v[0] for v in res.values())
    target(finite_score(worst), label="worst normalised error")
    for name, (err, checked, ties) in res.items():
        assert err <= 1.0, f"{name}: normalised error {err:.3g}"
