"""The CUDA simulator's shared arrays (toolkit/backends/cuda_simulator.py): a block's threads share
one array per call site even when Python switches threads inside the allocation.

``numpy.empty`` is made slow (it sleeps, handing the interpreter to the block's other threads)
so that every launch meets the switch the simulator otherwise meets rarely: without the fix
each thread of the block makes its own array and the reductions below add uninitialised memory.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
from numba import cuda

from toolkit import optimizer
from toolkit.backends import arrays, cuda_reduce
from toolkit.backends.cuda_device import SIMULATOR

pytestmark = pytest.mark.skipif(
    not SIMULATOR, reason="the simulator's allocation only: on a GPU shared memory exists "
                          "before the block runs")


@pytest.fixture
def slow_empty(monkeypatch):
    real = np.empty

    def empty(*args, **kwargs):
        time.sleep(0.002)
        return real(*args, **kwargs)
    monkeypatch.setattr(np, "empty", empty)


def test_norms_sum_every_thread_of_a_block(slow_empty):
    rng = np.random.default_rng(5)
    for n in (3, 17, 40):
        w, g = rng.standard_normal(n), rng.standard_normal(n)
        ww, gg = cuda_reduce.lars_norms(arrays.describe(cuda.to_device(w)),
                                        arrays.describe(cuda.to_device(g)), None, 0.0)
        assert ww == pytest.approx(np.sum(w * w), rel=1e-13)
        assert gg == pytest.approx(np.sum(g * g), rel=1e-13)


def test_lamb_first_pass_sums_every_thread_of_a_block(slow_empty):
    rng = np.random.default_rng(6)
    w, g = rng.standard_normal(40), rng.standard_normal(40)
    out = []
    for backend, to in (("cpu", np.copy), ("cuda", cuda.to_device)):
        opt = optimizer.create("lamb", backend=backend, learning_rate=0.1)
        x = to(w)
        state = opt.create_state(0, x)
        opt.update(0, x, to(g), state)
        out.append(arrays.to_host(x))
    np.testing.assert_array_equal(out[1], out[0])
