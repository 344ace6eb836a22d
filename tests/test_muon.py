"""Muon in the toolkit (docs/optimizers/muon.md): its kernel (``toolkit.backends.cpu_matrix``)
against the float64 oracle on matrices above the parallel threshold, the same numbers on any
number of threads, the 2-D rule where users meet it (``toolkit.optimizer``, ``toolkit.torch``),
and ``toolkit.torch.Muon`` against ``torch.optim.Muon`` within the bound of torch's bfloat16
iteration. The generic suites (tests/test_optimizers*.py, the Trainer's, toolkit.torch's) check
the small matrices the oracle draws; tests/test_muon_proofs.py proves the iteration."""
from __future__ import annotations

import numba
import numpy as np
import pytest

from reference import muon as ref
from reference.error_bound import track
from toolkit import Parameter, Trainer, optimizer
from toolkit.error_bounds import SAFETY

#: bfloat16's unit roundoff (8 significant bits)
U_BF16 = 2.0 ** -8


def _run(shape, dtype, steps=3, seed=0, **kw):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(dtype)
    grads = [rng.standard_normal(shape).astype(dtype) for _ in range(steps)]
    opt = optimizer.create("muon", learning_rate=0.02, wd=0.1, **kw)
    state = opt.create_state(0, w)
    for g in grads:
        opt.update(0, w, g, state)
    return w, state, grads


@pytest.mark.parametrize("shape", [(400, 200), (200, 400), (64, 1100)])
@pytest.mark.parametrize("convention", ["pytorch", "paper"])
def test_a_large_float64_step_is_the_oracles_within_its_bound(shape, convention):
    """Above the parallel threshold (2^15 elements; 80,000 and 70,400 span two chunks of the
    moment pass's sum), tall and wide: one float64 step is the float64 oracle's within its
    rigorous bound (the iteration's, normwise: reference.muon.newton_schulz_bound), and that
    bound is far below the update: a wrong product would show. (In float32, at these sizes,
    the oracle's bound exceeds the update itself, its worst-case constants growing with the
    matrix: the next test holds float32 to the float64 step instead.)"""
    rng = np.random.default_rng(1)
    w0, buf, g = (rng.standard_normal(shape) * s for s in (1.0, 0.1, 1.0))
    opt = optimizer.create("muon", learning_rate=0.02, wd=0.1, convention=convention)
    w, state = w0.copy(), buf.copy()
    opt.update(0, w, g, state)
    out, new = ref.step(track(w0, np.float64), track(g, np.float64),
                        {"momentum_buffer": track(buf, np.float64)},
                        t=1, lr=0.02, wd=0.1, convention=convention)
    assert np.all(np.abs(w - out.value) <= SAFETY * out.err)
    b = new["momentum_buffer"]
    assert np.all(np.abs(state - b.value) <= SAFETY * b.err)
    update = np.abs(out.value - w0 * (1 - 0.02 * 0.1))
    assert out.err.max() < 1e-6 * update.mean()


@pytest.mark.parametrize("shape", [(400, 200), (200, 400), (64, 1100)])
@pytest.mark.parametrize("convention", ["pytorch", "paper"])
def test_a_large_float32_step_is_the_float64_steps_within_a_normwise_model(shape, convention):
    """The float32 step against the float64 one (checked against the oracle above), normwise:
    ``|W32 - W64|_2 / adjust(lr) <= 8 sqrt(max(n, m)) L u`` with ``u = 2^-24`` and ``L`` the
    Lipschitz constant of ``phi^5`` on the update's spectrum (a model: each product's rounding
    grows like the square root of its inner dimension, and reaches the output through ``L``;
    the 8 is measured, at most 3.2 here and 0.17 at 768 x 768). The update itself is about 1
    in this norm, so a dropped or wrong update fails by far."""
    rng = np.random.default_rng(1)
    w0, buf, g = (rng.standard_normal(shape) * s for s in (1.0, 0.1, 1.0))
    out = {}
    for dtype in (np.float32, np.float64):
        w, state = w0.astype(dtype), buf.astype(dtype)
        optimizer.create("muon", learning_rate=0.02, wd=0.1, convention=convention).update(
            0, w, g.astype(dtype), state)
        out[dtype] = w.astype(np.float64)
    if convention == "pytorch":
        u = g + 0.95 * (buf + 0.05 * (g - buf) - g)
    else:
        u = g + 0.95 * (0.95 * buf + g)
    s = np.linalg.svd(u, compute_uv=False)
    lip = ref.lipschitz(s / np.linalg.norm(s), 5)
    d = np.linalg.norm(out[np.float32] - out[np.float64], 2) / ref.adjusted_lr(0.02, None, shape)
    assert d <= 8 * np.sqrt(max(shape)) * lip * 2.0 ** -24


@pytest.mark.parametrize("shape", [(300, 250), (250, 300)])
def test_the_step_is_the_same_on_one_thread_and_on_two(shape):
    """The moment pass sums ``u^2`` chunk by chunk in a fixed order, and every other compiled
    pass writes each element once: one numba thread and two give the same bits. (BLAS's
    threads are another matter: OpenBLAS splits a large product's sums between its threads, so
    ``OPENBLAS_NUM_THREADS`` may change the last bits: docs/optimizers/muon.md.)"""
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = _run(shape, np.float32)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = _run(shape, np.float32)
    finally:
        numba.set_num_threads(before)
    assert one[0].tobytes() == two[0].tobytes() and one[1].tobytes() == two[1].tobytes()


@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 4)])
def test_a_weight_that_is_not_2d_is_refused_naming_adamw_and_nothing_moves(shape):
    opt = optimizer.create("muon")
    w = np.ones(shape, np.float32)
    with pytest.raises(ValueError, match="AdamW"):
        opt.create_state(0, w)
    with pytest.raises(ValueError, match="AdamW"):
        opt.update(0, w, np.ones_like(w), np.zeros_like(w))
    assert np.all(w == 1) and opt.num_update == 0


def test_a_trainer_with_a_bias_is_refused_naming_adamw():
    params = [Parameter("w", init=np.ones((3, 4), np.float32)),
              Parameter("b", init=np.ones(4, np.float32))]
    with pytest.raises(ValueError, match="AdamW"):
        Trainer(params, "muon")


def test_zero_steps_orthogonalise_nothing():
    """``ns_steps=0``: the update is the normalised momentum itself (``u/|u|_F``)."""
    w, _, (g,) = _run((2, 3), np.float64, steps=1, ns_steps=0, momentum=0.0, nesterov=False)
    expected = -0.02 * np.sqrt(1.0) * g / np.linalg.norm(g)
    w0 = np.random.default_rng(0).standard_normal((2, 3)) * (1 - 0.02 * 0.1)
    np.testing.assert_allclose(w, w0 + expected, rtol=1e-15, atol=1e-16)


torch = pytest.importorskip("torch")


def test_toolkit_torch_refuses_a_vector_at_construction_as_torch_does():
    import toolkit.torch as tt
    model = torch.nn.Linear(4, 3)
    with pytest.raises(ValueError, match="2D"):
        torch.optim.Muon(model.parameters())
    with pytest.raises(ValueError, match="AdamW"):
        tt.Muon(model.parameters())
    opt = tt.Muon([model.weight])
    with pytest.raises(ValueError, match="AdamW"):
        opt.add_param_group({"params": [model.bias]})
    assert len(opt.param_groups) == 1


def _lipschitz(update):
    s = np.linalg.svd(update, compute_uv=False)
    return ref.lipschitz(s / np.linalg.norm(s), 5)


@pytest.mark.parametrize("nesterov, adjust", [(True, None), (False, "match_rms_adamw")])
def test_toolkit_torch_is_torch_within_the_bfloat16_bound(nesterov, adjust):
    """A float64 training loop of two bias-free layers, torch.optim.Muon and toolkit.torch.Muon
    side by side, resynced every step: the buffers equal to rounding, each step's update
    within ``2 L u`` of torch's (``u = 2^-8``, ``L`` the Lipschitz constant of ``phi^5`` on the
    update's spectrum: tests/test_muon_proofs.py's bound for torch's bfloat16 iteration)."""
    import toolkit.torch as tt
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(12, 20, bias=False), torch.nn.Tanh(),
                            torch.nn.Linear(20, 6, bias=False)).double()
    b = torch.nn.Sequential(torch.nn.Linear(12, 20, bias=False), torch.nn.Tanh(),
                            torch.nn.Linear(20, 6, bias=False)).double()
    kw = dict(lr=0.05, weight_decay=0.1, nesterov=nesterov, adjust_lr_fn=adjust)
    theirs, mine = torch.optim.Muon(a.parameters(), **kw), tt.Muon(b.parameters(), **kw)
    X = torch.randn(32, 12, dtype=torch.float64)
    for _ in range(4):
        b.load_state_dict(a.state_dict())
        mine.load_state_dict(theirs.state_dict())
        before = [p.detach().clone() for p in a.parameters()]
        for model, opt in ((a, theirs), (b, mine)):
            opt.zero_grad()
            model(X).square().sum().backward()
        grads = [p.grad.numpy().copy() for p in a.parameters()]
        bufs = [theirs.state[p]["momentum_buffer"].numpy().copy() if theirs.state.get(p)
                else np.zeros_like(g) for p, g in zip(a.parameters(), grads)]
        theirs.step()
        mine.step()
        for p, q, w0, g, b0 in zip(a.parameters(), b.parameters(), before, grads, bufs):
            buf = b0 + 0.05 * (g - b0)
            update = g + 0.95 * (buf - g) if nesterov else buf
            adj = ref.adjusted_lr(0.05, adjust, tuple(p.shape))
            d = (p.detach() - q.detach()).numpy() / adj
            assert np.linalg.norm(d, 2) <= 2 * _lipschitz(update) * U_BF16
            np.testing.assert_allclose(mine.state[q]["momentum_buffer"].numpy(),
                                       theirs.state[p]["momentum_buffer"].numpy(),
                                       rtol=0, atol=4e-16 * np.abs(buf).max())
