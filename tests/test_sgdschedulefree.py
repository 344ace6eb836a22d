"""Schedule-Free SGD's own facts (Defazio et al. 2024, the SGD form;
docs/optimizers/sgdschedulefree.md): the stored ``(y, z)`` step is (1)-(3)'s ``(x, y, z)``
averaging over a trajectory, and the kernels equal the authors' ``schedulefree.SGDScheduleFree``
bit for bit through ``toolkit.optimizer`` and ``toolkit.torch`` with its train/eval switch."""
from __future__ import annotations

import numpy as np
import pytest

from reference import sgdschedulefree as ref
from toolkit import optimizer

HYPERS = [{}, {"warmup_steps": 4, "r": 0.5, "momentum": 0.8},
          {"weight_lr_power": 0.0, "r": 2.0, "momentum": 0.5}]


@pytest.mark.parametrize("hyper", HYPERS)
@pytest.mark.parametrize("wd", [0.0, 0.05])
def test_the_stored_y_z_step_is_the_papers_averaging(hyper, wd):
    """20 steps of :func:`reference.sgdschedulefree.step` on ``(y, z)`` against
    :func:`~reference.sgdschedulefree.step_averaged`, (1)-(3) as written, with a learning
    rate that rises and falls: ``z`` and the scalars agree, ``x`` recovered from ``y`` is the
    average and ``y`` formed from ``x`` the gradient point, to rounding."""
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal(64)
    y, state = w0.copy(), ref.init_state(w0, **hyper)
    x, z, scalars = w0.copy(), w0.copy(), (-1.0, 0.0)
    m = hyper.get("momentum", 0.9)
    for t in range(1, 21):
        lr = 0.1 * (1.0 + 0.5 * np.sin(t))
        g = rng.standard_normal(64) * (1.0 + t % 3)
        y, state = ref.step(y, g, state, t=t, lr=lr, wd=wd, **hyper)
        x, z, scalars = ref.step_averaged(x, z, g, scalars, t=t, lr=lr, wd=wd, **hyper)
        np.testing.assert_allclose(state["z"], z, rtol=0, atol=1e-13)
        assert (state["lr_max"], state["weight_sum"]) == scalars
        np.testing.assert_allclose(ref.to_eval(y, state["z"], m), x, rtol=0, atol=1e-12)
        np.testing.assert_allclose(ref.to_train(x, z, m), y, rtol=0, atol=1e-12)


def test_momentum_must_be_positive():
    with pytest.raises(ValueError, match=r"momentum must be in \(0, 1\)"):
        optimizer.create("sgdschedulefree", momentum=0.0)


@pytest.mark.parametrize("name, kw", [("sgdschedulefree", {}), ("adamwschedulefree", {}),
                                      ("nadam", {"convention": "pytorch"})])
def test_an_index_given_twice_steps_twice_in_the_host_scalars(name, kw):
    """``step_scalars`` of an index given twice: the second step's host scalars follow from
    the first's, as two updates of the index one after the other leave them."""
    batch = optimizer.create(name, learning_rate=0.1, warmup_steps=2, **kw) \
        if "schedulefree" in name else optimizer.create(name, learning_rate=0.1, **kw)
    one_by_one = optimizer.create(name, learning_rate=0.1, warmup_steps=2, **kw) \
        if "schedulefree" in name else optimizer.create(name, learning_rate=0.1, **kw)
    scalars = batch.step_scalars([0, 0])
    w = np.ones(3)
    s = one_by_one.create_state(0, w)
    after = []
    for _ in range(2):
        one_by_one.update(0, w, np.ones(3), s)
        after.append(one_by_one.host_state()[0])
    batch.commit_counts([0, 0], scalars.t, scalars.host)
    assert scalars.t.tolist() == [1, 2]
    assert batch.host_state()[0] == after[1]
    assert scalars.host[0].tolist() != scalars.host[1].tolist()


torch = pytest.importorskip("torch")

from schedulefree_loops import authors as _authors, loop as _loop  # noqa: E402


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kw", [
    {"lr": 0.1},
    {"lr": 0.2, "weight_decay": 0.1, "warmup_steps": 4, "momentum": 0.8, "r": 1.0},
])
@pytest.mark.parametrize("foreach", [False, True])
def test_toolkit_torch_equals_the_authors_bit_for_bit(dtype, kw, foreach):
    sf = _authors()
    import toolkit.torch as tt
    dtype = getattr(torch, dtype)
    a, losses_a = _loop(lambda ps: sf.SGDScheduleFree(ps, foreach=foreach, **kw), dtype)
    b, losses_b = _loop(lambda ps: tt.SGDScheduleFree(ps, **kw), dtype)
    assert all(torch.equal(u, v) for u, v in zip(a, b)) and losses_a == losses_b


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("hyper", HYPERS)
def test_toolkit_optimizer_equals_the_authors_bit_for_bit(dtype, hyper):
    sf = _authors()
    rng = np.random.default_rng(11)
    w0 = rng.standard_normal(300).astype(dtype)
    opt = optimizer.create("sgdschedulefree", learning_rate=0.1, wd=0.02, **hyper)
    w = w0.copy(); s = opt.create_state(0, w)
    p = torch.nn.Parameter(torch.tensor(w0.copy()))
    theirs = sf.SGDScheduleFree(
        [p], lr=0.1, weight_decay=0.02, momentum=hyper.get("momentum", 0.9),
        warmup_steps=hyper.get("warmup_steps", 0), r=hyper.get("r", 0.0),
        weight_lr_power=hyper.get("weight_lr_power", 2.0))
    theirs.train()
    for _ in range(8):
        g = rng.standard_normal(300).astype(dtype)
        opt.update(0, w, g, s)
        p.grad = torch.tensor(g.copy())
        theirs.step()
    group = theirs.param_groups[0]
    assert opt.averaging[0] == (group["lr_max"], group["weight_sum"])
    assert np.array_equal(w, p.detach().numpy())
    assert np.array_equal(s, theirs.state[p]["z"].numpy())

