"""The tools read the specs: ``check``, ``accuracy``, ``regress``, ``toolkit.error_bounds``, the
oracle's ``verify`` and ``mxopt list`` know an optimizer from its spec alone, including a plug-in
whose spec names a reference module outside the ``reference`` package, and draw each optimizer's
own hyperparameters from its spec's space."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import reference
from toolkit import error_bounds, optimizer
from toolkit.tools import accuracy, check, regress
from toolkit.tools._support import optimizer_conventions, select_optimizers

PLUGIN = "toolsaplugsgd"
REF = "toolsa_plugins.ref_sgd"


def _plugin_reference():
    """A reference module outside the ``reference`` package: SGD's equations under the plug-in's
    name."""
    pkg = types.ModuleType("toolsa_plugins")
    pkg.__path__ = []
    mod = types.ModuleType(REF)
    for key in ("STATE", "CONVENTIONS", "PYTORCH", "HYPER", "state_slots", "init_state", "step"):
        setattr(mod, key, getattr(reference.sgd, key))
    mod.NAME = PLUGIN
    pkg.ref_sgd = mod
    return pkg, mod


@pytest.fixture
def plugin(monkeypatch):
    """A plug-in optimizer registered for one test: SGD's kernels, its own spec naming its own
    reference module (``toolsa_plugins.ref_sgd``)."""
    from toolkit.optimizers.spec_spaces import MOMENTUM
    pkg, mod = _plugin_reference()
    monkeypatch.setitem(sys.modules, "toolsa_plugins", pkg)
    monkeypatch.setitem(sys.modules, REF, mod)
    spec = optimizer.Spec(name=PLUGIN, reference=REF, space={"momentum": MOMENTUM},
                          record={"momentum": 0.9}, demo={"learning_rate": 0.1})
    klass = type("ToolsAPlugSGD", (optimizer.SGD,), {"spec": spec, "__module__": __name__})
    optimizer.register(klass)
    try:
        yield klass
    finally:
        optimizer.unregister(PLUGIN)


def test_the_tools_know_exactly_the_optimizers_with_an_oracle():
    specs = optimizer.specs(oracle=True)
    assert optimizer_conventions() == {n: s.conventions for n, s in specs.items()}
    assert select_optimizers(None) == list(specs)
    rows = check.backend_rows(with_cuda=False)
    assert sorted({(n, c) for n, c, _, _ in rows}) == sorted(
        (n, c) for n, s in specs.items() for c in s.conventions)


def test_a_registered_optimizer_without_an_oracle_is_named_as_such():
    klass = type("ToolsANoOracle", (optimizer.SGD,), {"__module__": __name__})
    optimizer.register(klass)
    try:
        assert "toolsanooracle" not in optimizer_conventions()
        with pytest.raises(ValueError, match="has no oracle"):
            select_optimizers(["toolsanooracle"])
    finally:
        optimizer.unregister("toolsanooracle")


@pytest.mark.parametrize("name", list(optimizer.specs(oracle=True)))
def test_accuracy_draws_every_hyperparameter_of_the_spec(name):
    """Each optimizer's own hyperparameters come from its spec's space (LARS's
    momentum_correction included), the common ones with the spec's pinned values."""
    spec = optimizer.spec_of(name)
    rng = np.random.default_rng(3)
    seen = {}
    for _ in range(40):
        kw, w, grads = accuracy.draw_case(rng, name, "float32")
        assert set(spec.space) <= set(kw), sorted(set(spec.space) - set(kw))
        assert {k: kw[k] for k in spec.fixed} == dict(spec.fixed)
        for k, v in kw.items():
            seen.setdefault(k, set()).add(repr(v))
        optimizer.create(name, **kw)  # the constructor accepts every drawn case
    # a space with a choice is drawn on both sides of it (momentum 0 and not, flags both ways)
    for k in spec.space:
        if k not in spec.fixed and type(spec.space[k]).__name__ == "OneOf":
            assert len(seen[k]) > 1, (k, seen[k])


@pytest.mark.parametrize("name", [n for n, s in optimizer.specs(oracle=True).items()
                                  if s.half_state_lr is not None])
def test_a_float16_state_draws_the_least_learning_rate_it_needs(name):
    spec = optimizer.spec_of(name)
    rng = np.random.default_rng(5)
    lrs = [accuracy.draw_case(rng, name, "float16")[0]["learning_rate"] for _ in range(50)]
    assert min(lrs) >= spec.half_state_lr and max(lrs) <= 1.0
    rng = np.random.default_rng(5)
    lrs32 = [accuracy.draw_case(rng, name, "float32")[0]["learning_rate"] for _ in range(50)]
    assert min(lrs32) < spec.half_state_lr  # the other dtypes draw COMMON's whole range


def test_regress_records_the_spec_and_names_the_noise_stream_of_a_reference_entry():
    for name, spec in optimizer.specs(oracle=True).items():
        assert regress.hyper_for(name) == dict(spec.record)
        assert regress.common_for(name) == {**regress.COMMON, **spec.fixed}
    e = regress.new_entry("sgld", "mxnet", "reference", "float64", w0=np.ones(2),
                          grads=[np.ones(2)], hyper=regress.hyper_for("sgld"))
    assert e["hyper"] == {"seed": 7, "stream": 0}  # as the golden file holds it
    e = regress.new_entry("sgld", "mxnet", "cpu", "float32", w0=np.ones(2),
                          grads=[np.ones(2)], hyper=regress.hyper_for("sgld"))
    assert e["hyper"] == {"seed": 7}  # a constructor keyword only


def test_a_plugin_with_its_own_reference_module_runs_in_every_tool(plugin, tmp_path):
    assert PLUGIN in optimizer_conventions() and PLUGIN not in reference.OPTIMIZERS
    assert any(r[0] == PLUGIN for r in check.backend_rows(with_cuda=False))
    # check's backend row, accuracy and toolkit.error_bounds against the plug-in's own oracle
    rng = np.random.default_rng(0)
    assert check.run_backend_row(rng, PLUGIN, "guide", "cpu", "float32", cases=2) <= 1.0
    res = accuracy.measure([PLUGIN], backends=["cpu"], dtypes=["float32"], cases=3,
                           progress=False)
    assert res.ok and [r.id for r in res.rows] == [f"{PLUGIN}/{c}/cpu/float32"
                                                  for c in ("mxnet", "guide")]
    w = np.ones(4, np.float32)
    res = error_bounds.check_function(lambda w, g, s, t: w.__isub__(np.float32(0.1) * g), PLUGIN,
                                      w, [np.ones(4, np.float32)] * 2, lr=0.1)
    assert all(r["weight"][0] <= 1 for r in res)
    # regress: recorded from the spec (kernel and reference backends) and compared
    rec = regress.record(tmp_path / "r", optimizers=[PLUGIN], backends=["cpu", "reference"],
                         dtypes=["float32", "float64"], progress=False)
    assert rec.entries == 2 * 3
    doc, = regress.load(tmp_path / "r")
    assert all(e["hyper"] == {"momentum": 0.9} for e in doc["entries"])
    report = regress.compare(tmp_path / "r", progress=False)
    assert report.ok and {e.status for e in report.entries} == {"same"}
    # mxopt list names its oracle's conventions
    from toolkit.oracle.cli import listing
    row = next(r for r in listing()["optimizers"] if r["optimizer"] == PLUGIN)
    assert row["oracle_conventions"] == tuple(reference.sgd.CONVENTIONS)


def test_the_oracle_verifies_a_plugin_against_its_own_reference(plugin):
    from toolkit import oracle

    def make(w, learning_rate, wd, rescale_grad, clip_gradient, momentum):
        w, mom = w.copy(), np.zeros_like(w)

        def step(g):
            g = rescale_grad * g
            if clip_gradient is not None:
                g = np.clip(g, -clip_gradient, clip_gradient)
            g = g + wd * w
            if momentum == 0:
                w[...] = w - learning_rate * g
            else:
                mom[...] = momentum * mom - learning_rate * g
                w[...] = w + mom
            return w
        return step
    report = oracle.verify(make, PLUGIN, convention="guide", dtype="float64", examples=15)
    assert report.passed, report.summary()


def test_the_oracle_refuses_a_noisy_optimizer_by_its_spec():
    from toolkit import oracle
    noisy = [n for n, s in optimizer.specs(oracle=True).items() if s.noise]
    assert noisy
    for name in noisy:
        with pytest.raises(ValueError, match="noise"):
            oracle.verify(lambda w, **h: (lambda g: w), name)


def test_every_proof_names_a_registered_optimizer():
    """check's algorithm-specific proofs (one function each) name optimizers with an oracle,
    and conventions they have (or "both")."""
    known = optimizer.specs(oracle=True)
    for name, conv, _, fn in check.PROOFS:
        assert name in known and callable(fn)
        assert conv == "both" or conv in reference.OPTIMIZERS[name].CONVENTIONS
