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
            for convention in spec.conventions:
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
