"""Optimizers whose kernels have no CUDA form (``Spec.cuda`` False: Adafactor's factored step;
Muon's matrix step had none before ``toolkit.backends.cuda_matrix``) refuse CUDA arrays with
NotImplementedError before anything is written, through ``toolkit.optimizer`` and through a
Trainer whose parameters live on the GPU."""
from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from toolkit import Parameter, Trainer, optimizer
from toolkit.optimizer import specs

CPU_ONLY = sorted(name for name, spec in specs().items() if not spec.cuda)


def _matrix(name, shape):
    """``shape``, as a column for an optimizer of matrices only (Muon refuses a vector first)."""
    return shape + (1,) if specs()[name].matrix and len(shape) == 1 else shape


def test_the_cpu_only_optimizers_are_known():
    assert CPU_ONLY == ["adafactor"]


@pytest.mark.parametrize("name", CPU_ONLY)
@pytest.mark.parametrize("shape", [(3, 4), (5,)])
def test_a_cuda_array_is_refused_and_nothing_written(name, shape):
    shape = _matrix(name, shape)
    rng = np.random.default_rng(0)
    w_host = rng.standard_normal(shape).astype(np.float32)
    w, g = cuda.to_device(w_host), cuda.to_device(np.ones(shape, np.float32))
    opt = optimizer.create(name)
    state = opt.create_state(0, w)
    before = [s.copy_to_host() for s in state]
    with pytest.raises(NotImplementedError, match="CPU backend only"):
        opt.update(0, w, g, state)
    assert np.array_equal(w.copy_to_host(), w_host)
    assert all(np.array_equal(s.copy_to_host(), b) for s, b in zip(state, before))
    assert opt.num_update == 0 and opt.update_counts == {}


@pytest.mark.parametrize("name", CPU_ONLY)
def test_a_trainer_on_the_gpu_refuses_the_step_and_writes_nothing(name):
    rng = np.random.default_rng(1)
    init = [rng.standard_normal(_matrix(name, s)).astype(np.float32) for s in ((3, 4), (4,))]
    params = [Parameter(f"p{i}", init=a, device="cuda") for i, a in enumerate(init)]
    trainer = Trainer(params, name)
    for p in params:
        p.set_grad(np.ones(p.shape, np.float32))
    with pytest.raises(NotImplementedError, match="CPU backend only"):
        trainer.step(1)
    for p, a in zip(params, init):
        assert np.array_equal(p.data().copy_to_host(), a)
    # refused before the counts are committed (the group's launcher is asked first)
    assert trainer.optimizer.num_update == 0 and trainer.optimizer.update_counts == {}
