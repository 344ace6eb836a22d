"""ASGD's own facts (torch.optim.ASGD's update; docs/optimizers/asgd.md): the step size decreases
as ``(1 + lambd*lr*t)^-alpha``, ``ax`` is the weight until ``t0`` and the running average of the
weights after it, eta and mu are held in float32 as torch holds them, and ``toolkit.torch.ASGD``
equals ``torch.optim.ASGD`` bit for bit (its default single-tensor path) and crosses checkpoints
both ways."""
from __future__ import annotations

import io

import numpy as np
import pytest

from toolkit import optimizer


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_ax_is_the_weight_then_the_average_from_t0(backend):
    opt = optimizer.create("asgd", learning_rate=0.5, lambd=0.0, t0=2.0, backend=backend)
    w = np.zeros(1)
    s = opt.create_state(0, w)
    seen = []
    for _ in range(6):
        opt.update(0, w, np.array([-1.0]), s)
        seen.append((float(w[0]), float(s[0])))
    # eta is 0.5 throughout (lambd 0); mu_t = 1/max(1, t - 1 - t0): 1 up to t = 4, then 1/2, 1/3
    assert [x for x, _ in seen] == [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    assert [a for _, a in seen][:4] == [0.5, 1.0, 1.5, 2.0]
    assert seen[4][1] == pytest.approx(2.25) and seen[5][1] == pytest.approx(2.5)


def test_the_step_size_decreases_and_is_held_in_float32():
    from toolkit.optimizers.asgd import schedule
    eta, mu = schedule(5, 0.1, 0.5, 0.75, 1e6)
    assert eta == float(np.float32(0.1 / (1 + 0.5 * 0.1 * 4) ** 0.75)) and mu == 1.0
    assert eta != 0.1 / (1 + 0.5 * 0.1 * 4) ** 0.75     # float32, as torch's state tensor
    assert schedule(1, 0.1, 0.5, 0.75, 0.0) == (float(np.float32(0.1)), 1.0)
    assert schedule(4, 0.1, 0.0, 0.75, 1.0)[1] == 0.5


CASES = [{}, {"lambd": 0.05, "alpha": 1.0, "t0": 2.0}, {"t0": 0.0, "weight_decay": 0.1},
         {"maximize": True, "t0": 1.0}]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("options", CASES, ids=[str(c) for c in CASES])
def test_toolkit_torch_equals_torch_optim_bit_for_bit(dtype, options):
    torch = pytest.importorskip("torch")
    import toolkit.torch as tt
    tdtype = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(5)
    theirs = [torch.randn(129, dtype=tdtype, generator=gen).requires_grad_() for _ in range(2)]
    mine = [t.detach().clone().requires_grad_() for t in theirs]
    a = torch.optim.ASGD(theirs, **{"lr": 0.05, **options})
    b = tt.ASGD(mine, **{"lr": 0.05, **options})
    for _ in range(8):
        for x, y in zip(theirs, mine):
            g = torch.randn(129, dtype=tdtype, generator=gen)
            x.grad, y.grad = g.clone(), g.clone()
        a.step()
        b.step()
        for x, y in zip(theirs, mine):
            assert torch.equal(x, y) and torch.equal(a.state[x]["ax"], b.state[y]["ax"])


def test_checkpoints_cross_both_ways():
    """torch keeps eta and mu per parameter: a toolkit state_dict writes them (functions of the
    step), so torch.optim.ASGD loads it and continues bit for bit, and the reverse."""
    torch = pytest.importorskip("torch")
    import toolkit.torch as tt
    gen = torch.Generator().manual_seed(1)
    kw = dict(lr=0.05, lambd=0.01, t0=1.0)
    p = torch.nn.Parameter(torch.randn(7, generator=gen))
    q = torch.nn.Parameter(p.detach().clone())
    a, b = torch.optim.ASGD([p], **kw), tt.ASGD([q], **kw)
    grads = [torch.randn(7, generator=gen) for _ in range(8)]
    for g in grads[:3]:
        p.grad, q.grad = g.clone(), g.clone()
        a.step()
        b.step()
    for source in (b, a):
        buf = io.BytesIO()
        torch.save(source.state_dict(), buf)
        buf.seek(0)
        saved = torch.load(buf, weights_only=True)
        if source is b:
            entry = saved["state"][0]
            assert entry["eta"].dtype == torch.float32 and entry["mu"].dtype == torch.float32
            assert torch.equal(entry["eta"], a.state[p]["eta"])
            assert torch.equal(entry["mu"], a.state[p]["mu"])
        r = torch.nn.Parameter(q.detach().clone())
        loaded = (torch.optim.ASGD if source is b else tt.ASGD)([r], **kw)
        loaded.load_state_dict(saved)
        ref = torch.nn.Parameter(p.detach().clone())
        cont = torch.optim.ASGD([ref], **kw)
        cont.load_state_dict(a.state_dict())
        for g in grads[3:]:
            r.grad, ref.grad = g.clone(), g.clone()
            loaded.step()
            cont.step()
        assert torch.equal(r, ref) and torch.equal(loaded.state[r]["ax"], cont.state[ref]["ax"])
