"""LARS norms of a Trainer's group on CUDA (``cuda.run_norms``): a member whose ``batch_scale``
is 0 in a group with accumulators (LBSGD with batch_scale 1 skips its zero accumulator) takes the
norms of its gradient, as on the CPU. The CUDA reduction adds in another order than the CPU's,
so the sums agree to float64 rounding (the squares are the same)."""
from __future__ import annotations

import numpy as np
from numba import cuda

from toolkit.backends import arrays, cpu, order
from toolkit.backends import cuda as cuda_backend


def test_member_with_batch_scale_0_takes_its_gradient_norms():
    rng = np.random.default_rng(3)
    sizes = [5, 300, 1, 77]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    w, g, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    table = np.array([[1.0, 2.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    host = np.zeros((len(sizes), 2))
    cpu.run_norms(w, g, c, table, order.chunk_table(offsets), host, True)
    d = arrays.describe
    dev = cuda_backend.run_norms(d(cuda.to_device(w)), d(cuda.to_device(g)),
                                 d(cuda.to_device(c)), table, offsets)
    np.testing.assert_allclose(dev, host, rtol=1e-13, atol=0)
    k = 1  # batch_scale 0: the gradient's norms, not a division by 0
    a, b = offsets[k], offsets[k + 1]
    assert np.isfinite(dev[k]).all()
    np.testing.assert_allclose(dev[k], cpu.lars_norms(w[a:b], g[a:b], None, 0), rtol=1e-13)
