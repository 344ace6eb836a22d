"""``maximize=True`` on toolkit.torch's steady path (toolkit/torch/maximize.py): the rows of the
negated gradients give, bit for bit, what the ``-grad`` path gives.

* Every optimizer whose step the steady path takes, every convention, float32 and float64, in
  its recorded configuration (every branch on, clipping on) and in the configurations that reach
  its other rules (no momentum, not centered): from the second step on a ``maximize=True`` group
  runs on the steady path when its rule declares the fields that carry the gradient's sign
  (``toolkit.optimizers.gradient.through``), and on the general path (``-grad``) when not; either way weights, states and counts equal the numpy optimizer's
  steps on ``-grad`` (test_torch_numbers.py's comparison), including gradients with infinities,
  signed zeros, values the clipping cuts and values that overflow when rescaled.
* Every rule that declares them is reached by those runs (none is declared unproven).
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed")
import toolkit.torch as tt  # noqa: E402
from toolkit.optimizer import create, registry, specs  # noqa: E402
from toolkit.backends import cpu  # noqa: E402
from toolkit.optimizers import signum  # noqa: E402
from toolkit.torch import maximize, steady  # noqa: E402
from toolkit.backends import launches  # noqa: E402

from test_torch_numbers import assert_same, drawn, options, shapes  # noqa: E402

VECTOR = [(name, conv) for name, spec in specs().items() for conv in spec.conventions
          if create(name).plans_by_scalars]

#: configurations beside the recorded one that reach an optimizer's other rules
OTHER = {  # checked against the registry by test_every_declared_rule_is_proven
    "sgd": [{"momentum": 0.0}], "nag": [{"momentum": 0.0}],
         "dcasgd": [{"momentum": 0.0}], "signum": [{"momentum": 0.0, "wd_lh": 0.0}],
         "rmsprop": [{"centered": False}], "adam": [{"amsgrad": True}],
         "adamw": [{"amsgrad": True}]}


def _taken(name, conv, extra):
    """Whether the configuration exists under the convention (AMSGrad: not under "mxnet")."""
    try:
        create(name, convention=conv, **extra)
    except ValueError:
        return False
    return True


CASES = [(name, conv, extra) for name, conv in VECTOR
         for extra in [{}] + OTHER.get(name, []) if _taken(name, conv, extra)]

def _grads(rng, ws, step):
    """Gradients for step ``step``; the third step's hold the edge values."""
    grads = [drawn(rng, w.shape, w.dtype) for w in ws]
    if step == 2:
        big = np.finfo(ws[0].dtype).max
        for g in grads:
            flat = g.reshape(-1)
            edge = np.array([np.inf, -np.inf, 0.0, -0.0, 3.0, -3.0, big, -big],
                            g.dtype)[:flat.size]
            flat[:edge.size] = edge
    return grads


def _options(name, conv, extra, dtype):
    return dict(options(name, dtype), convention=conv, **extra)


@pytest.fixture
def factories(monkeypatch):
    """The factory of every steady step that ran (a list)."""
    ran = []
    real = steady.SteadyGroup.run

    def spy(self, step):
        ran.append(step.factory)
        return real(self, step)
    monkeypatch.setattr(steady.SteadyGroup, "run", spy)
    return ran


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, conv, extra", CASES)
def test_maximize_by_the_row_is_the_negated_gradients_step(name, conv, extra, dtype,
                                                          factories):
    kw = _options(name, conv, extra, dtype)
    rng = np.random.default_rng(5)
    w0 = [drawn(rng, s, dtype) for s in shapes(name)]
    params = [torch.nn.Parameter(torch.from_numpy(w.copy())) for w in w0]
    opt = tt.create(name, params, maximize=True, **kw)
    ref = create(name, **kw)
    ws = [w.copy() for w in w0]
    states = [ref.create_state_multi_precision(i, w) for i, w in enumerate(ws)]
    with np.errstate(all="ignore"):
        for step in range(4):
            grads = _grads(rng, ws, step)
            for p, g in zip(params, grads):
                p.grad = torch.from_numpy(g.copy())
            opt.step()
            for i, g in enumerate(grads):
                ref.update_multi_precision(i, ws[i], -g, states[i])
            assert_same(opt, params, ref, ws, states)
    rule = _rule_of(name, kw, dtype)
    if maximize.sign_fields(rule) is None:  # the general path (-grad) every step
        assert factories == []
        return
    assert factories == [rule] * 3          # every step after the first: steady


def _rule_of(name, kw, dtype):
    """The factory of the rule a step of the optimizer ``name`` (options ``kw``) runs, as the
    steady path records it."""
    o = create(name, **kw)
    w = np.ones(6, dtype)
    wd = specs()[name].fixed.get("wd", 0.001)  # Rprop's and GroupAdaGrad's: 0
    calls = launches.collect(o.step_launches(0, w, np.ones(6, dtype),
                                             o.create_state_multi_precision(0, w), 1, 0.01,
                                             wd), cpu.LAUNCHER)
    assert len(calls) == 1 and calls[0].kind == "rule"
    return calls[0].factory


def _declared():
    """Every rule factory of the optimizers' modules that declares its sign fields."""
    import sys
    found = set()
    for spec in specs().values():
        module = sys.modules[registry()[spec.name].__module__]
        found.update(f for f in vars(module).values()
                     if callable(f) and maximize.sign_fields(f) is not None)
    return found


def test_every_declared_rule_is_proven():
    """Each rule that declares its sign fields is the rule of one of the cases above, in both
    dtypes (each then proven on the steady path); a rule that does not read its gradient
    through the row (signSGD under "mxnet": the gradient's sign alone) declares none; the
    optimizers of ``OTHER`` are registered."""
    assert set(OTHER) <= set(specs())
    reached = {_rule_of(name, _options(name, conv, extra, dtype), dtype)
               for name, conv, extra in CASES for dtype in ("float32", "float64")}
    declared = _declared()
    assert len(declared) > 20
    assert declared <= reached, sorted(f.__module__ + "." + f.__qualname__
                                       for f in declared - reached)
    assert signum.signsgd_mxnet_rule in reached and \
        maximize.sign_fields(signum.signsgd_mxnet_rule) is None
