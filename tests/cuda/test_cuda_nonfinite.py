"""The non-finite guard on CUDA (docs/trainer.md, "Skipping non-finite gradients"): the flag
kernels find every NaN and infinity (one tensor, and one flag per segment of a group's flat
gradient over its chunk table), and a guarded step leaves the skipped parameters as they were
while the others step as they would without them."""
from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from toolkit import Parameter, Trainer, optimizer
from toolkit.backends import arrays, finite
from toolkit.backends import cuda as cuda_backend


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_device_all_finite(dtype):
    a = np.linspace(-1, 1, 300).astype(dtype)
    assert finite.all_finite(cuda.to_device(a))
    for pos in (0, 151, 299):
        for bad in (np.nan, np.inf, -np.inf):
            b = a.copy()
            b[pos] = bad
            assert not finite.all_finite(cuda.to_device(b)), (pos, bad)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_device_finite_segments(dtype):
    sizes = [3, cuda_backend.CHUNK * 2 + 5, 1, 7]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    host = np.ones(int(offsets[-1]), dtype)
    chunks = cuda.to_device(cuda_backend.chunk_table(offsets))
    assert finite.finite_segments(cuda.to_device(host), offsets, chunks).tolist() == [True] * 4
    host[int(offsets[1]) + cuda_backend.CHUNK + 1] = np.nan
    host[int(offsets[4]) - 1] = -np.inf
    assert finite.finite_segments(cuda.to_device(host), offsets, chunks).tolist() == [
        True, False, True, False]


def test_device_update_skips():
    opt = optimizer.create("adam", learning_rate=0.1)
    w = cuda.to_device(np.ones(20, np.float32))
    s = opt.create_state(0, w)
    g = np.full(20, 0.5, np.float32)
    g[7] = np.inf
    assert opt.update(0, w, cuda.to_device(g), s, skip_nonfinite=True) is False
    assert (w.copy_to_host() == 1).all() and opt.num_update == 0
    g[7] = 0.5
    assert opt.update(0, w, cuda.to_device(g), s, skip_nonfinite=True) is True
    assert opt.num_update == 1 and (w.copy_to_host() != 1).all()


@pytest.mark.parametrize("dtype,mp", [("float32", False), ("float16", True)])
def test_device_trainer_skips_and_steps_the_others_bit_for_bit(dtype, mp):
    shapes = [(3, 4), (cuda_backend.CHUNK + 3,), (5,)]
    rng = np.random.default_rng(0)
    init = [rng.standard_normal(s).astype(dtype) for s in shapes]

    def make():
        ps = [Parameter(f"p{i}", init=a, dtype=dtype, device="cuda") for i, a in enumerate(init)]
        return Trainer(ps, "adam", {"learning_rate": 0.05, "multi_precision": mp}), ps
    guarded, gp = make()
    twin, tp = make()
    for step in range(3):
        for k, (p, q) in enumerate(zip(gp, tp)):
            g = rng.standard_normal(p.shape).astype(dtype)
            if step == 1 and k == 1:
                bad = g.copy()
                bad[-1] = np.nan
                p.set_grad(cuda.to_device(bad))
            else:
                p.set_grad(cuda.to_device(g))
                q.set_grad(cuda.to_device(g))
        assert guarded.step(2, skip_nonfinite=True) == (("p1",) if step == 1 else ())
        twin.step(2, ignore_stale_grad=step == 1)
        for p, q in zip(gp, tp):
            assert arrays.to_host(p.data()).tobytes() == arrays.to_host(q.data()).tobytes()
    assert guarded.optimizer.num_update == twin.optimizer.num_update
