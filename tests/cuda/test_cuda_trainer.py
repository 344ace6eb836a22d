"""The Trainer on the GPU: one launch per (dtype, device) group, bit for bit equal to the
per-parameter CUDA updates it replaces, host and device parameters side by side, states."""
from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from toolkit import Parameter, Trainer
from toolkit.backends import arrays
from toolkit.backends import cuda as cuda_backend
from toolkit.optimizer import spec_of
from trainer_util import CASES, config_id, expected_calls, host_leaves, twin_run


#: the configurations whose optimizer has CUDA kernels (``Spec.cuda``; Adafactor's refusal:
#: tests/cuda/test_cuda_cpu_only.py)
CUDA_CASES = [(c, v) for c, v in CASES if spec_of(c[0]).cuda]


@pytest.mark.parametrize("case", CUDA_CASES,
                         ids=[f"{config_id(c)}-{v}" for c, v in CUDA_CASES])
@pytest.mark.parametrize("dtype,mp", [("float32", False), ("float16", True), ("float16", False)])
def test_cuda_trainer_step_equals_per_parameter_cuda_updates(case, dtype, mp, monkeypatch):
    (name, kw), conv = case
    calls = []
    from toolkit.backends import cuda_rows
    for module, fn in ((cuda_backend, "run_segmented"), (cuda_backend, "run_noise_segmented"),
                       (cuda_rows, "run_segmented")):
        real = getattr(module, fn)
        monkeypatch.setattr(module, fn,
                            lambda *a, _real=real, **k: (calls.append(1), _real(*a, **k)))
    trainer, params, twin, _ = twin_run(name, kw, conv, dtype, mp, device="cuda",
                                        to_device=lambda a: cuda.to_device(a))
    for p, (w, s) in zip(params, twin):
        assert np.array_equal(arrays.to_host(p.data()), arrays.to_host(w)), p.name
    for k, (_, s) in enumerate(twin):
        g, kk = trainer._where[k]
        for a, b in zip(host_leaves(g.views[kk]), host_leaves(s)):
            assert np.array_equal(a, b, equal_nan=True), params[k].name
    assert (len(calls), trainer.last_step_launches) == expected_calls(name, kw, conv)


def test_host_and_device_parameters_train_side_by_side():
    a = Parameter("a", init=np.ones(5, np.float32))
    b = Parameter("b", init=np.ones(5, np.float32), device="cuda")
    t = Trainer([a, b], "adam", {"learning_rate": 0.1})
    for _ in range(2):
        a.set_grad(np.full(5, 0.5))
        b.set_grad(np.full(5, 0.5))
        t.step(1)
    assert t.last_step_launches == 2  # one group each
    assert np.allclose(a.data(), arrays.to_host(b.data()), rtol=1e-6)
    with pytest.raises(ValueError, match="lives on the GPU"):
        Trainer([Parameter("c", shape=(2,), device="cuda")], "sgd", backend="cpu")


def test_cuda_trainer_save_load_continues_bit_identically(tmp_path):
    rng = np.random.default_rng(2)
    init = [rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (6,))]
    grads = [[rng.standard_normal(a.shape).astype(np.float32) for a in init] for _ in range(6)]

    def build(values):
        ps = [Parameter(f"p{i}", init=v, device="cuda") for i, v in enumerate(values)]
        return ps, Trainer(ps, "adam", {"learning_rate": 0.05})

    pa, ta = build(init)
    for gs in grads[:3]:
        for p, g in zip(pa, gs):
            p.set_grad(g)
        ta.step(1)
    path = tmp_path / "gpu.states"
    ta.save_states(path)
    pb, tb = build([arrays.to_host(p.data()) for p in pa])
    tb.load_states(path)
    for gs in grads[3:]:
        for ps, t in ((pa, ta), (pb, tb)):
            for p, g in zip(ps, gs):
                p.set_grad(g)
            t.step(1)
    for a, b in zip(pa, pb):
        assert np.array_equal(arrays.to_host(a.data()), arrays.to_host(b.data()))
