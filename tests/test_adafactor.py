"""Adafactor against torch.optim.Adafactor (torch 2.13): bit for bit in float64 on matrices,
stacks of matrices, vectors and 0-d weights, through ``toolkit.optimizer`` and
``toolkit.torch`` (a user's model whose parameters are stepped in one group); its state's shapes;
its refusals. The generic suites (tests/test_optimizers_vs_reference.py, the Trainer's) draw its
weights of ranks 1 to 3 (``Spec.tensor``); the I-divergence proof is
tests/test_adafactor_proofs.py."""
from __future__ import annotations

import numpy as np
import pytest

from toolkit import Parameter, Trainer, optimizer

torch = pytest.importorskip("torch", reason="the torch comparisons need torch")

#: matrices, stacks, vectors and one element: rows and columns of one element (their norm is
#: |x|), fewer than 4 and a tail, 256 rows and more (the mean's cascade carries), rank 4
SHAPES = [(3, 4), (5,), (2, 3, 4), (), (1, 1), (7, 1), (1, 9), (20, 37), (3, 40, 17), (300, 5),
          (600, 3), (3, 3, 3, 3), (13,), (2, 1, 7)]
#: (toolkit keywords, torch keywords)
OPTIONS = [
    ({"learning_rate": 0.05}, {"lr": 0.05}),
    ({"learning_rate": 0.3, "wd": 0.1, "beta2_decay": -0.5, "epsilon1": 1e-3, "epsilon2": 1e-2,
      "clip_threshold": 1.5},
     {"lr": 0.3, "weight_decay": 0.1, "beta2_decay": -0.5, "eps": (1e-3, 1e-2), "d": 1.5}),
]


def _draws(shape, seed, steps=6):
    rng = np.random.default_rng(seed)
    w0 = np.asarray(rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3))
    grads = []
    for k in range(steps):
        g = np.asarray(rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3))
        if k == 2:
            g.reshape(-1)[0] = 0.0  # an exact zero
        grads.append(g)
    return w0, grads


def _torch_run(w0, grads, tkw):
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = torch.optim.Adafactor([p], foreach=False, **tkw)
    for g in grads:
        p.grad = torch.from_numpy(g.copy())
        opt.step()
    return p.detach().numpy(), opt.state[p]


@pytest.mark.parametrize("options", range(len(OPTIONS)))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_float64_bit_for_bit_with_torch(shape, options):
    kw, tkw = OPTIONS[options]
    w0, grads = _draws(shape, 11 + options)
    want, tstate = _torch_run(w0, grads, tkw)
    opt = optimizer.create("adafactor", **kw)
    w = w0.copy()
    state = opt.create_state(0, w)
    for g in grads:
        opt.update(0, w, g.copy(), state)
    assert w.tobytes() == want.tobytes()
    for name, a in zip(opt.state_slots(), state):
        if name in tstate:
            assert a.tobytes() == tstate[name].numpy().tobytes(), name
        else:  # the slot this rank does not use: empty, as torch keeps none
            assert a.shape == (0,), name


def test_a_users_model_through_toolkit_torch_is_torchs_bit_for_bit():
    """A small MLP (matrices and bias vectors in one group), the learning rate and eps changed
    on the param group between steps, in float64."""
    import toolkit.torch as tt

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                   torch.nn.Linear(16, 3)).double()
    x = torch.randn(64, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 3, (64,), generator=torch.Generator().manual_seed(2))
    out = []
    for cls in (torch.optim.Adafactor, tt.Adafactor):
        m = model()
        opt = cls(m.parameters(), lr=0.05, weight_decay=0.01)
        for step in range(12):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
            if step == 4:
                opt.param_groups[0]["lr"] = 0.02
                opt.param_groups[0]["eps"] = (1e-4, 1e-2)
        out.append([p.detach().clone() for p in m.parameters()])
        if cls is tt.Adafactor:  # torch's slots, only those the rank uses
            shown = [sorted(opt.state[p]) for p in m.parameters()]
            assert shown == [["col_var", "row_var", "step"], ["step", "variance"]] * 2
    assert all(torch.equal(a, b) for a, b in zip(*out))


def test_a_trainer_group_of_every_rank_equals_single_updates():
    """One segmented call over matrices, a stack, a vector and a scalar laid end to end equals
    each parameter stepped alone, bit for bit, the statistics included."""
    rng = np.random.default_rng(4)
    shapes = [(6, 5), (2, 3, 4), (7,), (), (1, 9)]
    init = [np.asarray(rng.standard_normal(s), np.float32) for s in shapes]
    params = [Parameter(f"p{i}", init=a) for i, a in enumerate(init)]
    trainer = Trainer(params, "adafactor", {"learning_rate": 0.1, "wd": 0.01})
    twin = optimizer.create("adafactor", learning_rate=0.1, wd=0.01)
    ws = [a.copy() for a in init]
    states = [twin.create_state(i, w) for i, w in enumerate(ws)]
    for _ in range(3):
        grads = [np.asarray(rng.standard_normal(s), np.float32) for s in shapes]
        for p, g in zip(params, grads):
            p.set_grad(g)
        trainer.step(1)
        for i, g in enumerate(grads):
            twin.update(i, ws[i], g, states[i])
    assert trainer.last_step_launches == 1
    for p, w in zip(params, ws):
        assert p.data().tobytes() == w.tobytes(), p.name


@pytest.mark.parametrize("shape, slots", [
    ((), [(0,), (0,), ()]), ((5,), [(0,), (0,), (5,)]), ((3, 4), [(3, 1), (1, 4), (0,)]),
    ((2, 3, 4), [(2, 3, 1), (2, 1, 4), (0,)]), ((2, 1, 3, 1, 2), [(2, 1, 3, 1, 1),
                                                                  (2, 1, 3, 1, 2), (0,)])])
def test_state_shapes_follow_the_rank(shape, slots):
    opt = optimizer.create("adafactor")
    w = np.ones(shape)
    state = opt.create_state(0, w)
    assert [a.shape for a in state] == slots
    opt.update(0, w, np.full(shape, 0.5), state)
    assert np.all(np.isfinite(w)) and np.all(w < 1.0)


@pytest.mark.parametrize("kw, match", [
    ({"beta2_decay": 0.1}, "beta2_decay must be <= 0"),
    ({"clip_threshold": 0.5}, "clip_threshold must be >= 1"),
    ({"epsilon1": -1e-3}, "epsilon1"), ({"epsilon2": -1.0}, "epsilon2"),
])
def test_torchs_refusals(kw, match):
    with pytest.raises(ValueError, match=match):
        optimizer.create("adafactor", **kw)


def test_epsilon1_none_is_the_dtypes_eps():
    """torch's ``eps=(None, ...)``: the machine epsilon of the weight's dtype (the paper's
    1e-30 under convention "paper")."""
    opt = optimizer.create("adafactor")
    assert opt.epsilon1_for(np.float32) == float(np.finfo(np.float32).eps)
    assert opt.epsilon1_for(np.float64) == float(np.finfo(np.float64).eps)
    assert optimizer.create("adafactor", convention="paper").epsilon1_for(np.float32) == 1e-30
    assert optimizer.create("adafactor", epsilon1=1e-5).epsilon1_for(np.float64) == 1e-5


@pytest.mark.parametrize("t0, lr, shape", [(11270, 1e-2, (5, 7)), (5578, 1.0, (5, 7)),
                                           (3, 1e-2, (5579,)), (3, 1e-2, (3, 2793))])
def test_torchs_powers_not_square_roots(t0, lr, shape):
    """torch forms ``1/step**0.5`` and ``numel()**0.5`` with ``pow``, one ulp from ``sqrt`` at
    some counts (11271, 5579) and sizes (5579 elements): the toolkit forms them so too (found
    by review: torch's state at step 11270, one step more)."""
    import toolkit.torch as tt
    rng = np.random.default_rng(5)
    w0 = torch.from_numpy(rng.standard_normal(shape))
    g = torch.from_numpy(rng.standard_normal(shape))
    pa, pb = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    a, b = torch.optim.Adafactor([pa], lr=lr), tt.Adafactor([pb], lr=lr)
    pa.grad = g.clone()
    a.step()
    a.state[pa]["step"].fill_(t0)
    b.load_state_dict(a.state_dict())  # torch's state, at count t0
    pb.data.copy_(pa.data)
    for _ in range(2):
        pa.grad, pb.grad = g.clone(), g.clone()
        a.step()
        b.step()
    assert torch.equal(pa, pb)
