"""LAMB's two passes on CUDA give the CPU's numbers (docs/optimizers/lamb.md): the first pass's
float64 sums are reduced in the same order on both backends, so the trust ratio is the same, and
the first pass writes nothing.

Under the simulator (no fused multiply-adds) the whole step is bit-identical to the CPU's; on a
GPU the sum of the float32 weight's squares still is (each square is exact in float64), and the
rest lies within the oracle's bound (tests/cuda/test_cuda_vs_reference.py)."""
from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from conftest import SIMULATOR
from toolkit import optimizer
from toolkit.backends import arrays, cpu
from toolkit.backends import cuda as cuda_backend


@pytest.mark.parametrize("n", [1, 300, 5000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_first_pass_sums_equal_the_cpu_ones(n, dtype):
    rng = np.random.default_rng(n)
    w = (rng.standard_normal(n) * 10.0 ** rng.uniform(-2, 2, n)).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    opt = optimizer.create("lamb", wd=0.01)
    first = opt._direction_pass(3, opt.wd)
    m, v = np.full(n, 0.1, dtype), np.full(n, 0.2, dtype)
    host = cpu.LAUNCHER.direction_norms(first, w.copy(), g, (m, v))
    dm, dv = cuda.to_device(np.full(n, 0.1, dtype)), cuda.to_device(np.full(n, 0.2, dtype))
    d = arrays.describe
    dev = cuda_backend.direction_norms(first.direction, d(cuda.to_device(w)),
                                       d(cuda.to_device(g)), (d(dm), d(dv)), first.hyper)
    if dtype == np.float32 or SIMULATOR:
        assert dev[0] == host[0]
    if SIMULATOR:
        assert dev[1] == host[1]
    assert np.all(dm.copy_to_host() == 0.1 * np.ones(1, dtype))
    assert np.all(dv.copy_to_host() == 0.2 * np.ones(1, dtype))


@pytest.mark.skipif(not SIMULATOR, reason="bit identity with the CPU holds without FMA only")
@pytest.mark.parametrize("convention", ["mxnet", "guide"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_step_equals_the_cpu_step_under_the_simulator(convention, dtype):
    rng = np.random.default_rng(7)
    kw = dict(learning_rate=0.05, wd=0.1, clip_gradient=0.5, lower_bound=0.5, upper_bound=3.0,
              convention=convention, multi_precision=dtype == np.float16)
    a, b = optimizer.create("lamb", **kw), optimizer.create("lamb", **kw)
    w = rng.standard_normal(300).astype(dtype)
    wa, wb = w.copy(), cuda.to_device(w)
    sa, sb = a.create_state_multi_precision(0, wa), b.create_state_multi_precision(0, wb)
    for _ in range(3):
        g = rng.standard_normal(300).astype(dtype)
        a.update_multi_precision(0, wa, g, sa)
        b.update_multi_precision(0, wb, cuda.to_device(g), sb)
    assert np.array_equal(wb.copy_to_host(), wa)
