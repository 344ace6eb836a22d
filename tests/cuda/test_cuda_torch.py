"""toolkit.torch on CUDA tensors: a step equals the toolkit's own ``update`` on the same CUDA
tensors (the same numba-cuda kernels, on torch's current stream), bit for bit, for every
registered optimizer. Skipped where there is no GPU (the simulator has no foreign arrays)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import SIMULATOR
from toolkit import optimizer

torch = pytest.importorskip("torch", reason="torch not installed")
pytestmark = pytest.mark.skipif(SIMULATOR or not torch.cuda.is_available(),
                                reason="no GPU: toolkit.torch's CUDA path needs torch CUDA "
                                       "tensors on a real device")

#: the optimizers with CUDA kernels (``Spec.cuda``)
NAMES = sorted(n for n, s in optimizer.specs().items() if s.cuda)


@pytest.mark.parametrize("name", NAMES)
def test_cuda_step_equals_the_toolkit_update(name):
    import toolkit.torch as tt
    spec = optimizer.specs()[name]
    kw = dict(spec.record, **spec.fixed)
    rng = np.random.default_rng(7)
    w0 = [rng.standard_normal(s).astype(np.float32) for s in ((5, 7), (3, 4))]
    params = [torch.nn.Parameter(torch.from_numpy(w.copy()).cuda()) for w in w0]
    ws = [torch.from_numpy(w.copy()).cuda() for w in w0]
    opt = tt.create(name, params, **kw)
    ref = optimizer.create(name, **kw)
    states = [ref.create_state_multi_precision(i, w) for i, w in enumerate(ws)]
    for step in range(3):
        for i, p in enumerate(params):
            g = torch.from_numpy(rng.standard_normal(p.shape).astype(np.float32)).cuda()
            p.grad = g.clone()
            ref.update_multi_precision(i, ws[i], g, states[i])
        opt.step()
    torch.cuda.synchronize()
    for p, w in zip(params, ws):
        assert p.detach().cpu().numpy().tobytes() == w.cpu().numpy().tobytes()
