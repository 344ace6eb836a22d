"""Rprop's own facts (torch.optim.Rprop's update; docs/optimizers/rprop.md): the step sizes start
at the learning rate and follow the gradient's sign, a flipped sign makes the weight wait and
forgets the gradient, Rprop refuses weight decay before anything changes, and
``toolkit.torch.Rprop`` equals ``torch.optim.Rprop`` bit for bit in float64 and float32."""
from __future__ import annotations

import numpy as np
import pytest

from toolkit import optimizer


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_step_sizes_follow_the_sign_and_a_flip_waits(backend):
    opt = optimizer.create("rprop", learning_rate=0.1, backend=backend)
    w = np.zeros(3)
    s = opt.create_state(0, w)
    opt.update(0, w, np.array([2.0, -3.0, 0.0]), s)        # t = 1: step sizes lr, no flip
    np.testing.assert_array_equal(s[1], [0.1, 0.1, 0.1])
    np.testing.assert_array_equal(w, [-0.1, 0.1, 0.0])
    opt.update(0, w, np.array([1.0, 3.0, 5.0]), s)         # kept, flipped, no history
    np.testing.assert_allclose(s[1], [0.12, 0.05, 0.1], rtol=1e-15)
    np.testing.assert_allclose(w, [-0.22, 0.1, -0.1], rtol=1e-15)
    np.testing.assert_array_equal(s[0], [1.0, 0.0, 5.0])   # the flipped gradient forgotten
    opt.update(0, w, np.array([1.0, 3.0, 5.0]), s)         # after a wait: no flip is seen
    np.testing.assert_allclose(s[1], [0.144, 0.05, 0.12], rtol=1e-15)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_the_learning_rate_is_read_on_the_first_step_only(backend):
    runs = []
    for late_lr in (0.1, 5.0):
        opt = optimizer.create("rprop", learning_rate=0.1, backend=backend)
        w = np.ones(2)
        s = opt.create_state(0, w)
        for k in range(4):
            if k == 1:
                opt.set_learning_rate(late_lr)
            opt.update(0, w, np.array([1.0, -1.0]), s)
        runs.append(w.copy())
    np.testing.assert_array_equal(runs[0], runs[1])


def test_weight_decay_is_refused_before_anything_changes():
    opt = optimizer.create("rprop", learning_rate=0.1, wd=0.01)
    w = np.ones(3, np.float32)
    s = opt.create_state(0, w)
    with pytest.raises(ValueError, match="Rprop has no weight decay"):
        opt.update(0, w, np.ones(3, np.float32), s)
    assert np.array_equal(w, np.ones(3)) and not s[0].any() and not s[1].any()
    assert opt.num_update == 0
    opt.wd = 0.0
    opt.update(0, w, np.ones(3, np.float32), s)
    assert opt.num_update == 1


@pytest.mark.parametrize("etas", [(1.0, 1.2), (0.0, 1.2), (0.5, 1.0), (0.5, 0.9)])
def test_etas_outside_zero_one_and_above_one_are_refused(etas):
    with pytest.raises(ValueError, match="0 < etaminus < 1 < etaplus"):
        optimizer.create("rprop", etaminus=etas[0], etaplus=etas[1])


CASES = [{}, {"etas": (0.3, 2.0), "step_sizes": (1e-3, 0.5)}, {"lr": 100.0},
         {"maximize": True}, {"foreach": True}]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("options", CASES, ids=[str(c) for c in CASES])
def test_toolkit_torch_equals_torch_optim_bit_for_bit(dtype, options):
    """Zero, tiny (their product underflows in float32) and sign-flipping gradients, a NaN in
    one element, a learning rate above step_size_max; every slot compared after every step."""
    torch = pytest.importorskip("torch")
    import toolkit.torch as tt
    tdtype = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(3)
    theirs = [torch.randn(257, dtype=tdtype, generator=gen).requires_grad_() for _ in range(2)]
    mine = [t.detach().clone().requires_grad_() for t in theirs]
    kw = {"lr": 0.01, **options}
    a = torch.optim.Rprop(theirs, **kw)
    b = tt.Rprop(mine, **kw)
    for k in range(12):
        for x, y in zip(theirs, mine):
            g = torch.randn(257, dtype=tdtype, generator=gen)
            if k % 4 == 0:
                g[:40] = 0
            if k in (5, 6):
                g[40:60] = 1e-30
            if k == 9:
                g[100] = float("nan")
            x.grad, y.grad = g.clone(), g.clone()
        a.step()
        b.step()
        for x, y in zip(theirs, mine):
            assert torch.equal(x, y) or torch.allclose(x, y, rtol=0, atol=0, equal_nan=True)
            for slot in ("prev", "step_size"):
                assert torch.allclose(a.state[x][slot], b.state[y][slot], rtol=0, atol=0,
                                      equal_nan=True), (k, slot)
