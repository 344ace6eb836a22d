"""Schedule-Free AdamW's own facts (Defazio et al. 2024, Algorithm 1;
docs/optimizers/adamwschedulefree.md): the stored ``(y, z)`` step is Algorithm 1's ``(x, y, z)``
averaging over a trajectory, ``to_eval``/``to_train`` move between ``y`` and ``x``, the kernels
equal the authors' ``schedulefree`` classes bit for bit (torch's square root taken as IEEE's)
through ``toolkit.optimizer`` and through ``toolkit.torch`` with its train/eval switch, and the
switch refuses a step in eval mode as the authors' does."""
from __future__ import annotations

import numpy as np
import pytest

from reference import adamwschedulefree as ref
from toolkit import Parameter, Trainer, optimizer

HYPERS = [
    {},
    {"lr_bias_correction": False},
    {"warmup_steps": 4, "r": 0.5, "beta1": 0.8, "beta2": 0.99},
    {"lr_bias_correction": False, "warmup_steps": 3, "weight_lr_power": 1.0, "beta1": 0.95},
    {"weight_lr_power": 0.0, "r": 2.0, "beta1": 0.5},
]


@pytest.mark.parametrize("hyper", HYPERS)
@pytest.mark.parametrize("wd", [0.0, 0.05])
def test_the_stored_y_z_step_is_algorithm_1s_averaging(hyper, wd):
    """20 steps of :func:`reference.adamwschedulefree.step` on ``(y, z)`` against
    :func:`~reference.adamwschedulefree.step_averaged`, Algorithm 1 as written on ``(x, z)``,
    with a learning rate that rises and falls (a schedule): ``z``, ``v`` and the averaging
    scalars agree to rounding, and ``x`` recovered from ``y`` (:func:`to_eval`) is the
    average, ``y`` formed from ``x`` (:func:`to_train`) the gradient point."""
    rng = np.random.default_rng(7)
    w0 = rng.standard_normal(64)
    y, state = w0.copy(), ref.init_state(w0, **hyper)
    x, z, v, scalars = w0.copy(), w0.copy(), np.zeros(64), (-1.0, 0.0)
    beta1 = hyper.get("beta1", 0.9)
    for t in range(1, 21):
        lr = 0.01 * (1.0 + 0.5 * np.sin(t))
        g = rng.standard_normal(64) * (1.0 + t % 3)
        y, state = ref.step(y, g, state, t=t, lr=lr, wd=wd, **hyper)
        x, z, v, scalars = ref.step_averaged(x, z, v, g, scalars, t=t, lr=lr, wd=wd, **hyper)
        np.testing.assert_allclose(state["z"], z, rtol=0, atol=1e-13)
        np.testing.assert_allclose(state["var"], v, rtol=1e-14, atol=0)
        assert (state["lr_max"], state["weight_sum"]) == scalars
        np.testing.assert_allclose(ref.to_eval(y, state["z"], beta1), x, rtol=0, atol=1e-12)
        np.testing.assert_allclose(ref.to_train(x, z, beta1), y, rtol=0, atol=1e-12)


def test_the_averaging_weights_are_line_10_for_a_growing_rate():
    """With ``r = 0`` and power 2 the weight of ``z_{t+1}`` is ``gamma_t^2/sum gamma_i^2``
    (line 10) while ``gamma_t`` grows (the warmup and the bias correction); a zero learning
    rate gives ``c = 0`` (the authors' ZeroDivisionError branch): the weight stays."""
    lr_max, weight_sum, gammas = -1.0, 0.0, []
    for t in range(1, 9):
        gamma, c, lr_max, weight_sum = ref.averaging(t, 0.1, lr_max, weight_sum,
                                                     warmup_steps=5)
        gammas.append(gamma)
        assert gamma == 0.1 * min(1.0, t / 5) * np.sqrt(1 - 0.999 ** t)
        assert c == pytest.approx(gamma ** 2 / sum(g * g for g in gammas), rel=1e-15)
    assert ref.averaging(1, 0.0, -1.0, 0.0)[1] == 0.0
    opt = optimizer.create("adamwschedulefree", learning_rate=0.0)
    w = np.array([1.0, 2.0]); s = opt.create_state(0, w)
    opt.update(0, w, np.array([3.0, -4.0]), s)
    assert w.tolist() == [1.0, 2.0] and opt.averaging[0] == (0.0, 0.0)


def test_to_eval_and_to_train_move_the_weight_and_its_master():
    opt = optimizer.create("adamwschedulefree", learning_rate=0.05, beta1=0.8,
                           multi_precision=True)
    rng = np.random.default_rng(3)
    for w in (rng.standard_normal(10), rng.standard_normal(10).astype(np.float16)):
        s = opt.create_state_multi_precision(0, w)
        for _ in range(3):
            opt.update_multi_precision(0, w, rng.standard_normal(10).astype(w.dtype), s)
        inner = s[1] if w.dtype == np.float16 else s
        y = (s[0] if w.dtype == np.float16 else w).astype(np.float64)
        opt.to_eval(w, s)
        x = ref.to_eval(y, inner[0], 0.8)
        tol = 1e-3 if w.dtype == np.float16 else 1e-15
        np.testing.assert_allclose(w.astype(np.float64), x, rtol=tol, atol=tol)
        opt.to_train(w, s)
        np.testing.assert_allclose(w.astype(np.float64), y, rtol=tol, atol=tol)
    with pytest.raises(ValueError, match="beta1 > 0"):
        optimizer.create("adamwschedulefree", beta1=0.0).to_eval(np.ones(2), (np.ones(2),
                                                                               np.zeros(2)))


def test_a_weight_set_before_the_first_step_is_where_z_starts():
    """z_1 = x_1 (line 2): a Trainer makes its state when it is made; a weight set afterwards
    (``set_data``) and before the parameter's first step is where ``z`` starts, as the
    authors' ``z = p.clone()`` at the first step."""
    p = Parameter("w", shape=(3,))
    tr = Trainer([p], "adamwschedulefree", {"learning_rate": 0.1})
    p.set_data(np.full(3, 5.0, np.float32))
    p.grad()[:] = 1.0
    tr.step(1)
    opt = optimizer.create("adamwschedulefree", learning_rate=0.1)
    w = np.full(3, 5.0, np.float32); s = opt.create_state(0, w)
    opt.update(0, w, np.ones(3, np.float32), s)
    assert np.array_equal(p.data(), w)


torch = pytest.importorskip("torch")

from schedulefree_loops import authors as _authors, loop as _loop  # noqa: E402


@pytest.fixture
def ieee_sqrt():
    from test_pytorch_convention import IEEESqrt
    with IEEESqrt():
        yield


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kw", [
    {"lr": 0.01},
    {"lr": 0.02, "weight_decay": 0.1, "warmup_steps": 4, "betas": (0.8, 0.99), "r": 1.0},
])
@pytest.mark.parametrize("paper", [False, True])
def test_toolkit_torch_equals_the_authors_bit_for_bit(ieee_sqrt, dtype, kw, paper):
    sf = _authors()
    import toolkit.torch as tt
    dtype = getattr(torch, dtype)
    theirs = sf.AdamWScheduleFreePaper if paper else sf.AdamWScheduleFree
    a, losses_a = _loop(lambda ps: theirs(ps, foreach=False, **kw), dtype)
    b, losses_b = _loop(lambda ps: tt.AdamWScheduleFree(ps, lr_bias_correction=paper, **kw),
                        dtype)
    assert all(torch.equal(u, v) for u, v in zip(a, b)) and losses_a == losses_b


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("hyper", HYPERS[:4])
def test_toolkit_optimizer_equals_the_authors_bit_for_bit(ieee_sqrt, dtype, hyper):
    sf = _authors()
    rng = np.random.default_rng(11)
    w0 = rng.standard_normal(300).astype(dtype)
    paper = hyper.get("lr_bias_correction", True)
    opt = optimizer.create("adamwschedulefree", learning_rate=0.01, wd=0.02, **hyper)
    w = w0.copy(); s = opt.create_state(0, w)
    p = torch.nn.Parameter(torch.tensor(w0.copy()))
    theirs = (sf.AdamWScheduleFreePaper if paper else sf.AdamWScheduleFree)(
        [p], lr=0.01, weight_decay=0.02, betas=(hyper.get("beta1", 0.9), hyper.get("beta2", 0.999)),
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
    assert np.array_equal(s[0], theirs.state[p]["z"].numpy())
    assert np.array_equal(s[1], theirs.state[p]["exp_avg_sq"].numpy())


def test_a_step_in_eval_mode_is_refused_and_changes_nothing():
    import toolkit.torch as tt
    p = torch.nn.Parameter(torch.ones(3))
    opt = tt.AdamWScheduleFree([p], lr=0.1)   # made directly: in eval mode, as the authors'
    assert opt.param_groups[0]["train_mode"] is False
    p.grad = torch.ones(3)
    with pytest.raises(RuntimeError, match=r"call optimizer.train\(\)"):
        opt.step()
    assert torch.equal(p.detach(), torch.ones(3)) and not opt.state
    opt.train()
    opt.step()
    q = torch.nn.Parameter(torch.ones(2))
    opt.add_param_group({"params": [q]})      # joins in the first group's mode
    assert opt.param_groups[1]["train_mode"] is True
    opt.eval()
    assert all(g["train_mode"] is False for g in opt.param_groups)
    with pytest.raises(RuntimeError, match="eval mode"):
        opt.step()


def test_the_trainers_eval_and_train_move_every_parameter():
    """``Trainer.eval()`` moves each parameter from ``y`` to ``x`` (one move over each group's
    flat buffers, float16 groups through their masters), a step is refused in eval mode, and
    ``train()`` comes back to where the steps left off; an optimizer without the switch
    refuses it."""
    rng = np.random.default_rng(5)
    params = [Parameter(f"p{i}", shape=(4,), dtype=dt)
              for i, dt in enumerate(("float32", "float32", "float16"))]
    for p in params:
        p.set_data(rng.standard_normal(4).astype(p.dtype))
    tr = Trainer(params, "adamwschedulefree", {"learning_rate": 0.05, "beta1": 0.8,
                                                "multi_precision": True})
    for _ in range(3):
        for p in params:
            p.set_grad(rng.standard_normal(4).astype(p.dtype))
        tr.step(1)
    opt = tr.optimizer
    ys = [p.data().astype(np.float64).copy() for p in params]
    states = [g.member_state(k) for g in tr.groups for k in range(len(g.members))]
    order = [i for g in tr.groups for i, _ in g.members]
    zs = {i: (s[1][0] if opt.uses_master(params[i].data()) else s[0]) for i, s in
          zip(order, states)}
    tr.eval()
    tr.eval()  # a second eval changes nothing
    for i, p in enumerate(params):
        tol = 2e-3 if p.dtype == np.float16 else 1e-6
        np.testing.assert_allclose(p.data().astype(np.float64),
                                   ref.to_eval(ys[i], zs[i].astype(np.float64), 0.8),
                                   rtol=tol, atol=tol)
    with pytest.raises(RuntimeError, match=r"trainer.train\(\)"):
        tr.step(1)
    tr.train()
    for i, p in enumerate(params):
        tol = 2e-3 if p.dtype == np.float16 else 1e-6
        np.testing.assert_allclose(p.data().astype(np.float64), ys[i], rtol=tol, atol=tol)
    for p in params:
        p.set_grad(rng.standard_normal(4).astype(p.dtype))
    tr.step(1)
    q = Parameter("q", shape=(2,))
    with pytest.raises(TypeError, match="no train/eval switch"):
        Trainer([q], "adam").eval()


def test_a_state_dict_saved_in_eval_mode_resumes():
    """The authors advise saving in eval mode: a state_dict saved so loads into a new
    optimizer, ``train()`` moves the weights back and the steps continue as the original's."""
    import toolkit.torch as tt
    torch.manual_seed(1)
    a, b = torch.nn.Parameter(torch.randn(5)), torch.nn.Parameter(torch.zeros(5))
    opt = tt.AdamWScheduleFree([a], lr=0.05)
    opt.train()
    for k in range(3):
        a.grad = torch.full((5,), 0.5 - k)
        opt.step()
    opt.eval()
    saved, x = opt.state_dict(), a.detach().clone()
    with torch.no_grad():
        b.copy_(x)
    resumed = tt.AdamWScheduleFree([b], lr=0.05)
    resumed.load_state_dict(saved)
    assert resumed.param_groups[0]["train_mode"] is False
    for o, p in ((opt, a), (resumed, b)):
        o.train()
        p.grad = torch.full((5,), 2.0)
        o.step()
    assert torch.equal(a.detach(), b.detach())


def test_the_authors_state_dict_is_refused_not_misread():
    """The authors' state_dict keeps the step count, lr_max and weight_sum per group (and no
    per-parameter step): loading it would restart the averaging, so it is refused, with the
    optimizer unchanged."""
    sf = _authors()
    import toolkit.torch as tt
    p, q = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    theirs = sf.AdamWScheduleFree([p], lr=0.1)
    theirs.train()
    p.grad = torch.ones(3)
    theirs.step()
    ours = tt.AdamWScheduleFree([q], lr=0.1)
    with pytest.raises(ValueError, match="does not cross"):
        ours.load_state_dict(theirs.state_dict())
    assert not ours.state and ours.param_groups[0]["train_mode"] is False


def test_a_trainer_resumed_from_an_eval_mode_save_trains_from_y(tmp_path):
    """The mode is kept in the states file: a Trainer that saved in eval mode (its weights x)
    and one made fresh that loads that file and takes the saved weights continue alike once
    ``train()`` moves them back to y."""
    rng = np.random.default_rng(2)
    grads = [rng.standard_normal(4).astype(np.float32) for _ in range(6)]

    def trainer():
        p = Parameter("w", shape=(4,))
        p.set_data(np.linspace(-1, 1, 4).astype(np.float32))
        return p, Trainer([p], "adamwschedulefree", {"learning_rate": 0.05})
    a, ta = trainer()
    for g in grads[:3]:
        a.set_grad(g)
        ta.step(1)
    ta.eval()
    ta.save_states(tmp_path / "sf.states")
    x = a.data().copy()
    b, tb = trainer()
    b.set_data(x)
    tb.load_states(tmp_path / "sf.states")
    assert tb.optimizer.eval_mode is True
    for p, tr in ((a, ta), (b, tb)):
        tr.train()
        for g in grads[3:]:
            p.set_grad(g)
            tr.step(1)
    assert np.array_equal(a.data(), b.data())


def test_a_torch_momentum_keyword_names_beta1_as_the_interpolation():
    """torch's ``momentum`` on Schedule-Free AdamW is refused naming ``beta1`` for what it is
    here, the interpolation of ``y`` (not a first moment's decay: there is none)."""
    import toolkit.torch as tt
    with pytest.raises(TypeError, match=r"its momentum is beta1, the interpolation"):
        tt.AdamWScheduleFree([torch.nn.Parameter(torch.ones(2))], momentum=0.9)
