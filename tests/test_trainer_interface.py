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


@pytest.mark.parametrize("name", ["lr_mult", "wd_mult"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, "2", True, None, 10 ** 400,
                                 np.longdouble("1e400"), np.float64(-0.5), 1j])
def test_a_multiplier_is_checked_when_set_as_when_built(name, bad):
    """The constructor refused a NaN, infinite, negative or non-number multiplier, but the
    setter took any value, which a later step then refused (or, for a string, failed
    deep in the plan). The setter now refuses it with the constructor's message and keeps the
    multiplier it had."""
    with pytest.raises(ValueError, match=f"{name} must be a finite number >= 0"):
        Parameter("w", shape=(2,), **{name: bad})
    params, t = _trainer()
    a = params["a"]
    setattr(a, name, 3)
    assert getattr(a, name) == 3.0 and type(getattr(a, name)) is float
    with pytest.raises(ValueError, match=f"{name} must be a finite number >= 0"):
        setattr(a, name, bad)
    assert getattr(a, name) == 3.0
    a.grad()[...] = 1.0
    t.step(1, ignore_stale_grad=True)  # the step takes the multiplier kept


def test_a_multiplier_is_the_float_a_step_multiplies_by():
    """A real number of any kind is taken as its float (a Fraction, a numpy scalar, an int);
    the check is made on that float (a long double of 1e400 is finite, its float is not), and
    what is refused is refused with a ValueError, never a TypeError from deep inside."""
    import fractions
    for value, want in ((fractions.Fraction(1, 4), 0.25), (np.float32(0.5), 0.5), (2, 2.0),
                        (np.int64(3), 3.0), (0, 0.0)):
        p = Parameter("w", shape=(2,), lr_mult=value, wd_mult=value)
        assert p.lr_mult == p.wd_mult == want and type(p.lr_mult) is float
        p.lr_mult = value
        assert p.lr_mult == want and type(p.lr_mult) is float
