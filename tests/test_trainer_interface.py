"""The Trainer's public interface that its distributed kvstore and the states file use
(docs/trainer.md, "kvstore"): ``parameters``, ``groups``, ``optimizer``, ``backend``,
``apply_update``, a Parameter's ``data()``, ``grad_fresh`` and ``mark_grad_stale()``, and the
errors in ``toolkit.trainer.errors``."""
from __future__ import annotations

import numpy as np
import pytest

import toolkit
from toolkit import Parameter, Trainer
from toolkit.trainer import dist, errors


def _trainer():
    params = {"b": Parameter("b", shape=(3,), init=1.0),
              "a": Parameter("a", shape=(2, 2), init=1.0),
              "frozen": Parameter("frozen", shape=(2,), init=1.0, grad_req="null")}
    return params, Trainer(params, "sgd", {"learning_rate": 0.5}, backend="cpu")


def test_parameters_groups_and_backend():
    params, t = _trainer()
    assert t.parameters == (params["a"], params["b"], params["frozen"])  # sorted by key
    assert t.parameters is t.parameters                     # built once
    (g,) = t.groups
    assert [p.name for _, p in g.members] == ["a", "b"]      # grad_req null is outside groups
    assert t.backend == "cpu" and t.optimizer.learning_rate == 0.5


def test_apply_update_steps_fresh_gradients_without_rescaling():
    params, t = _trainer()
    a, b = params["a"], params["b"]
    a.grad()[...] = 2.0
    assert a.grad_fresh and not b.grad_fresh
    with pytest.raises(errors.StaleGradientError):
        t.apply_update()
    assert np.all(a.data() == 1.0)                           # nothing was updated
    t.apply_update(ignore_stale_grad=True)
    assert np.all(a.data() == 0.0) and np.all(b.data() == 1.0)  # rescale_grad 1: 1 - 0.5*2
    assert not a.grad_fresh


def test_mark_grad_stale():
    params, t = _trainer()
    a = params["a"]
    a.grad()[...] = 2.0
    a.mark_grad_stale()
    assert not a.grad_fresh
    t.apply_update(ignore_stale_grad=True)
    assert np.all(a.data() == 1.0)


def test_errors_have_one_home():
    assert toolkit.StaleGradientError is errors.StaleGradientError
    assert toolkit.ParamsError is errors.ParamsError
    assert dist.DistMismatchError is errors.DistMismatchError
    assert issubclass(errors.DistMismatchError, ValueError)
