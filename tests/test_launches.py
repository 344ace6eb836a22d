"""A kernel step is a value (``toolkit.backends.launches``): what ``step_launches`` and
``planned_step`` return writes nothing until it is run, and running it gives what ``update``
gives, bit for bit, for every optimizer, setting and convention."""
from __future__ import annotations

import numpy as np
import pytest

from toolkit import optimizer
from toolkit.backends import cpu, launches

STEPS = 4


def _cases():
    for name in sorted(optimizer.registry()):
        spec = optimizer.spec_of(name)
        for k, setting in enumerate(spec.bench_settings()):
            # a setting that names its convention (NAdamW: "pytorch") is that convention's
            for convention in [setting.kwargs.get("convention")] if \
                    "convention" in setting.kwargs else spec.conventions:
                kw = dict(setting.kwargs, convention=convention, wd=0.01)
                kw.update(spec.fixed)  # what it does not take freely (GroupAdaGrad: wd 0)
                yield pytest.param(name, kw, id=f"{name}-{k}-{convention}")


def _arrays(opt, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    return w, opt.create_state(0, w)


def _snapshot(w, opt, s):
    return [w.tobytes()] + [a.tobytes() for a in opt.state_arrays(s)]


@pytest.mark.parametrize("name,kw", list(_cases()))
def test_a_step_as_a_value_writes_nothing_until_run_and_then_equals_update(name, kw):
    ran, planned = optimizer.create(name, **kw), optimizer.create(name, **kw)
    w1, s1 = _arrays(ran, 0)
    w2, s2 = _arrays(planned, 0)
    rng = np.random.default_rng(1)
    for step in range(STEPS):
        g = (rng.standard_normal((3, 4)) * 0.5).astype(np.float32)
        ran.update(0, w1, g.copy(), s1)
        before = _snapshot(w2, planned, s2)
        taken = launches.collect(planned.planned_step(0, w2, g.copy(), s2), cpu.LAUNCHER)
        assert taken and all(type(x) is launches.Launch for x in taken)
        assert _snapshot(w2, planned, s2) == before, f"step {step}: collecting wrote an array"
        for launch in taken:
            launches.run_launch(launch, cpu.LAUNCHER)
        assert _snapshot(w2, planned, s2) == _snapshot(w1, ran, s1), f"step {step}"
    assert planned.num_update == ran.num_update


def test_a_two_pass_step_asks_for_its_norms_and_reads_the_answer():
    """LARS asks for ``(sum w^2, sum g^2)`` before it makes its launch, and its row reads the
    answer it is sent (a step driven with other norms makes another row)."""
    opt = optimizer.create("lars", learning_rate=0.1, eta=0.01, convention="mxnet")
    w = np.ones(4, np.float32)
    s = opt.create_state(0, w)
    asked, made = [], []
    for norms in ((4.0, 1.0), (4.0, 9.0)):
        step = opt.step_launches(0, w, np.ones(4, np.float32), s, 1, 0.1, 0.0)
        n = launches.drive(step, made.append, lambda r: asked.append(r) or norms)
        assert n == 1
    assert [type(r) for r in asked] == [launches.Norms] * 2
    assert made[0].hyper != made[1].hyper


def test_what_is_not_a_launch_is_refused_by_name():
    def step():
        yield 3.0

    with pytest.raises(TypeError, match="returns what to run"):
        launches.run(step(), cpu.LAUNCHER)
    with pytest.raises(TypeError, match="NoneType"):
        launches.run(None, cpu.LAUNCHER)


def _one_step_raises(opt_class, match):
    """``update`` and a Trainer step of ``opt_class`` raise ``match``, writing nothing."""
    from toolkit import Parameter, Trainer
    opt = opt_class(learning_rate=1.0)
    w = np.zeros(3, np.float32)
    s = opt.create_state(0, w)
    with pytest.raises((TypeError, ValueError), match=match):
        opt.update(0, w, np.ones(3, np.float32), s)
    assert not w.any() and opt.num_update == 0 and not opt.update_counts
    p = Parameter("w", init=np.zeros(3, np.float32))
    t = Trainer([p], opt_class(learning_rate=1.0))
    p.set_grad(np.ones(3))
    with pytest.raises((TypeError, ValueError), match=match):
        t.step(1)
    assert not p.data().any() and t.optimizer.num_update == 0


def test_a_kernel_step_that_yields_no_launch_is_an_error_and_writes_nothing():
    class Empty(optimizer.SGD):
        def _kernel_step(self, index, weight, grad, state, t, lr, wd):
            return
            yield

    _one_step_raises(Empty, "yielded no launch")


def test_a_launch_of_an_unknown_kind_is_refused_on_every_path():
    class Odd(optimizer.SGD):
        def _kernel_step(self, index, weight, grad, state, t, lr, wd):
            return super()._kernel_step(index, weight, grad, state, t, lr, wd)._replace(
                kind="elementwise")

    _one_step_raises(Odd, "kind 'elementwise'")


def test_an_old_style_kernel_step_from_a_mixin_is_refused_where_the_class_is_made():
    class Logging:
        def _kernel_step(self, index, weight, grad, state, t, lr, wd, launcher):
            raise AssertionError("never called")

    with pytest.raises(TypeError, match="returns what to run"):
        class Logged(Logging, optimizer.Adam):
            pass


def test_a_pickle_whose_remembered_constants_are_stale_steps_as_a_fresh_optimizer():
    """An optimizer pickled by an older version may remember step constants keyed by other
    names (the row fields were renamed): loading it makes them again. Every optimizer, setting
    and convention; those that remember constants are tampered with."""
    import pickle
    tampered = 0
    for case in _cases():
        name, kw = case.values
        fresh, loaded = optimizer.create(name, **kw), optimizer.create(name, **kw)
        w1, s1 = _arrays(fresh, 0)
        w2, s2 = _arrays(loaded, 0)
        g = np.full((3, 4), 0.25, np.float32)
        fresh.update(0, w1, g, s1)
        loaded.update(0, w2, g, s2)
        for k, v in list(loaded.__dict__.items()):
            if k.endswith("_constants") and isinstance(v, tuple) and len(v) == 3:
                loaded.__dict__[k] = (v[0], v[1], {"stale": True})  # an older version's keys
                tampered += 1
        loaded = pickle.loads(pickle.dumps(loaded))
        fresh.update(0, w1, g, s1)
        loaded.update(0, w2, g, s2)
        assert _snapshot(w1, fresh, s1) == _snapshot(w2, loaded, s2), case.id
    assert tampered >= 10, "few constants remembered: the test would prove little"


def test_a_failed_planned_step_puts_back_the_sets_it_changed():
    """``restored_on_error`` restores sets (LBSGD's accumulators known to be zero) as it
    restores dicts."""
    opt = optimizer.create("lbsgd", learning_rate=0.1)
    opt._cum_zero.add(5)
    with pytest.raises(RuntimeError):
        with opt.restored_on_error():
            opt._cum_zero.discard(5)
            opt._cum_zero.add(6)
            raise RuntimeError("planning failed")
    assert opt._cum_zero == {5}
