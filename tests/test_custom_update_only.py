"""docs/custom-optimizer.md's first way: an optimizer that only overrides ``update`` (no kernel)
trains in the Trainer, one ``update`` call per parameter, and no message a user sees names a
private method (issue 20, item 2)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from toolkit import Parameter, Trainer, optimizer


@pytest.fixture
def half_sgd():
    @optimizer.register
    class HalfSGDProbe(optimizer.Optimizer):
        def create_state(self, index, weight):
            return np.zeros_like(weight)            # a state the update keeps: steps taken

        def update(self, index, weight, grad, state):
            self._update_count(index)
            weight -= 0.5 * self._get_lr(index) * grad
            state += 1
    yield HalfSGDProbe
    optimizer.unregister("halfsgdprobe")


def _params(n=3):
    return [Parameter(f"p{i}", shape=(2, 3), lr_mult=1.0 + i,
                      init=lambda shape, dtype: np.ones(shape, dtype)) for i in range(n)]


def test_an_update_only_optimizer_steps_in_the_trainer_one_parameter_at_a_time(half_sgd):
    params = _params()
    trainer = Trainer(params, "halfsgdprobe", {"learning_rate": 0.1})
    assert not trainer.optimizer.has_kernel
    for step in range(2):
        for p in params:
            p.grad()[:] = 1.0
        trainer.step(1)
        assert trainer.last_step_launches == len(params)   # one update per parameter
    for i, p in enumerate(params):
        expected = np.ones((2, 3), np.float32)
        for _ in range(2):
            expected -= 0.5 * (0.1 * (1 + i)) * np.ones_like(expected)   # the same operations
        np.testing.assert_array_equal(p.data(), expected)
    assert trainer.optimizer.num_update == 2


def test_built_in_and_rule_optimizers_have_kernels():
    assert all(optimizer.create(name).has_kernel for name in optimizer.registry())


def test_an_optimizer_with_neither_update_nor_rule_names_only_public_ways_out():
    class NoStep(optimizer.Optimizer):
        pass
    opt = NoStep()
    w = np.ones(3, np.float32)
    with pytest.raises(NotImplementedError) as info:
        opt.update(0, w, np.ones_like(w), opt.create_state(0, w))
    msg = str(info.value)
    assert "update" in msg and "rule" in msg and "custom-optimizer.md" in msg
    assert not re.search(r"\b_[a-z]\w*", msg), msg            # no private name
    np.testing.assert_array_equal(w, 1.0)
