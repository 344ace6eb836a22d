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


class _Halving:
    """A schedule of the user's own that halves at every read, counting its reads."""

    def __init__(self):
        self.lr, self.reads = 0.1, 0

    def __call__(self, num_update):
        self.reads += 1
        self.lr *= 0.5
        return self.lr


@pytest.mark.parametrize("counts", [False, True])
def test_an_update_only_optimizer_reads_a_users_schedule_as_its_updates_alone_do(counts):
    """The Trainer checked every index's scalars before the per-parameter updates, reading
    the schedule at the count a toolkit update would read it at; an ``update`` of the user's
    own reads it where it chooses (the guide's ``HalfSGD`` at ``num_update`` as it stands, no
    count first), so a schedule that keeps state was read twice per update and gave other
    rates. The Trainer now reads no scalars for an update of the user's own: it steps as the
    updates alone, with or without ``_update_count`` (the reviewer's case)."""
    @optimizer.register
    class HalvedSGDProbe(optimizer.Optimizer):
        def create_state(self, index, weight):
            return None

        def update(self, index, weight, grad, state):
            if counts:
                self._update_count(index)
            weight -= 0.5 * self._get_lr(index) * grad
    try:
        params = _params(2)
        trainer = Trainer(params, "halvedsgdprobe", {"learning_rate": 0.1})
        trainer.optimizer.lr_scheduler = ours = _Halving()
        twin = optimizer.create("halvedsgdprobe", learning_rate=0.1)
        twin.lr_scheduler = alone = _Halving()
        twin.param_dict = dict(enumerate(params))
        ws = [np.ones((2, 3), np.float32) for _ in params]
        for _ in range(2):
            for p in params:
                p.grad()[:] = 1.0
            trainer.step(1)
            for i, w in enumerate(ws):
                twin.update(i, w, np.ones_like(w), None)
        assert ours.reads == alone.reads == 4
        for p, w in zip(params, ws):
            np.testing.assert_array_equal(p.data(), w)
    finally:
        optimizer.unregister("halvedsgdprobe")
