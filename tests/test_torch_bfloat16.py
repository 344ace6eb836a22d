"""bfloat16 parameters in toolkit.torch (``multi_precision=True``): a contiguous CPU bfloat16
parameter of an optimizer whose step reads only ``(t, lr, wd)`` steps through the addressed
bfloat16 kernel (``toolkit.torch.rule_table.launch_addressed_mp``), and its numbers are those of
the index-by-index path it replaced: the float32 master updated by the toolkit's own step on the
widened gradient, then rounded into the weight by ``Tensor.to(torch.bfloat16)``.

* Every such optimizer and convention, with ``maximize`` off and on, gradients with NaN,
  infinities, huge and subnormal values: masters, states, weights and counts equal the numpy
  optimizer's steps followed by torch's rounding, bit for bit, and every launch's addresses lie
  in live tensors of each column's dtype (``tests/torch_memory.py``'s check).
* From the second step on such a group takes the steady path (``toolkit.torch.steady``, one
  ``launch_addressed_mp`` call): its steps equal the general path's bit for bit (two param
  groups, ``maximize`` off and on), and a weight changed after a steady step (to float32, to
  another size, to another bfloat16 tensor) is refused or checked again by the general path.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed")
import toolkit.torch as tt  # noqa: E402
from toolkit.optimizer import create, specs  # noqa: E402
from toolkit.torch import steady  # noqa: E402

from test_torch_numbers import drawn, options, shapes  # noqa: E402
from torch_memory import checked_launches, only_this_test  # noqa: E402,F401

#: the address check walks each test's own objects (tests/torch_memory.py)
pytestmark = pytest.mark.usefixtures("only_this_test")

VECTOR = [(name, conv) for name, spec in specs().items() for conv in spec.conventions
          if create(name).plans_by_scalars]


def _grads(rng, ws, step):
    grads = [torch.from_numpy(drawn(rng, w.shape, np.float32)).to(torch.bfloat16) for w in ws]
    if step == 2:
        edge = torch.tensor([np.nan, np.inf, -np.inf, 3e38, -3e38, 1e-40, -1e-39, 0.0],
                            dtype=torch.float32).to(torch.bfloat16)
        for g in grads:
            flat = g.view(-1)
            flat[:min(flat.numel(), edge.numel())] = edge[:flat.numel()]
    return grads


def _bits(t):
    return t.detach().contiguous().view(torch.int16).numpy().tobytes()


@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("name, conv", VECTOR)
def test_bfloat16_steps_through_the_kernel_with_the_index_by_index_numbers(name, conv,
                                                                          maximize):
    kw = dict(options(name, "float32"), convention=conv)
    rng = np.random.default_rng(4)
    w0 = [drawn(rng, s, np.float32) for s in shapes(name)]
    params = [torch.nn.Parameter(torch.from_numpy(w).to(torch.bfloat16)) for w in w0]
    opt = tt.create(name, params, multi_precision=True, maximize=maximize, **kw)
    ref = create(name, **kw)
    masters = [p.detach().float().numpy().copy() for p in params]
    states = [ref.create_state(i, w) for i, w in enumerate(masters)]
    with np.errstate(all="ignore"), checked_launches() as launches:
        for step in range(4):
            grads = _grads(rng, masters, step)
            for p, g in zip(params, grads):
                p.grad = g.clone()
            opt.step()
            for i, g in enumerate(grads):
                # maximize: torch's -grad of the bfloat16 gradient (as the index-by-index path
                # negated it: a NaN becomes torch's 0x7FC0)
                g32 = (-g if maximize else g).float().numpy()
                ref.update(i, masters[i], g32, states[i])
            for i, p in enumerate(params):
                entry = opt.state[p]
                assert entry["weight32"].numpy().tobytes() == masters[i].tobytes(), (step, i)
                mine = [entry[k].numpy().tobytes() for k in entry
                        if k not in ("weight32", "step")]
                theirs = [a.tobytes() for a in ref.state_arrays(states[i])]
                assert sorted(mine) == sorted(theirs), (step, i)
                assert _bits(p) == _bits(torch.from_numpy(masters[i]).to(torch.bfloat16)), \
                    (step, i)
    assert launches == [len(params)] * 4     # one bfloat16 launch a step, every parameter
    assert {k: v["step"] for k, v in opt.state_dict()["state"].items()} == ref.update_counts


def test_a_non_contiguous_bfloat16_parameter_goes_index_by_index():
    base = torch.randn(4, 6)
    p = torch.nn.Parameter(base.to(torch.bfloat16).t())   # strides (1, 6): not contiguous
    assert not p.is_contiguous()
    opt = tt.Adam([p], lr=0.01, multi_precision=True)
    ref = create("adam", learning_rate=0.01)
    master = p.detach().float().contiguous().numpy().copy()
    state = ref.create_state(0, master)
    with checked_launches() as launches:
        for _ in range(2):
            g = torch.randn(6, 4).to(torch.bfloat16)
            p.grad = g
            opt.step()
            ref.update(0, master, g.float().numpy(), state)
    assert launches == []
    assert _bits(p) == _bits(torch.from_numpy(master).to(torch.bfloat16))


@pytest.fixture
def steady_runs(monkeypatch):
    """The steady group steps that ran: ``(number of parameters, weight type)`` per run."""
    runs = []
    real = steady.SteadyGroup.run

    def spy(self, step):
        runs.append((len(self.params), self.weight))
        return real(self, step)
    monkeypatch.setattr(steady.SteadyGroup, "run", spy)
    return runs


def _two_groups(name, maximize):
    """Two bfloat16 param groups (the second with its own lr) and an optimizer over them."""
    kw = dict(options(name, "float32"))
    rng = np.random.default_rng(7)
    params = [torch.nn.Parameter(torch.from_numpy(drawn(rng, s, np.float32)).to(torch.bfloat16))
              for s in [(5, 6), (6,), (3, 4, 2)]]
    lr = kw.get("lr", kw.get("learning_rate", 0.01))
    opt = tt.create(name, [{"params": params[:2]}, {"params": params[2:], "lr": lr * 0.5}],
                    multi_precision=True, maximize=maximize, **kw)
    return params, opt


@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("name", ["adam", "sgd", "rmsprop"])
def test_the_steady_bfloat16_step_is_the_general_one_bit_for_bit(name, maximize, steady_runs):
    mine, opt = _two_groups(name, maximize)
    theirs, general = _two_groups(name, maximize)
    rng = np.random.default_rng(5)
    with np.errstate(all="ignore"), checked_launches() as launches:
        for step in range(5):
            grads = _grads(rng, [p.detach() for p in mine], step)
            for a, b, g in zip(mine, theirs, grads):
                a.grad, b.grad = g.clone(), g.clone()
            opt.step()
            general._steady.clear()  # every step of the twin through the general path
            general.step()
            for a, b in zip(mine, theirs):
                assert _bits(a) == _bits(b), (step, name)
                sa, sb = opt.state[a], general.state[b]
                assert sorted(sa) == sorted(sb)
                for k in sa:
                    assert sa[k].numpy().tobytes() == sb[k].numpy().tobytes(), (step, k)
    # the first step general, then both groups steady; one launch a group and step each
    assert steady_runs == [(2, "bfloat16"), (1, "bfloat16")] * 4
    assert launches == [2, 1] * 10
    assert opt.state_dict()["state"].keys() == general.state_dict()["state"].keys()
    assert [e["step"] for e in opt.state_dict()["state"].values()] == [5] * 3


def _steady_adam():
    torch.manual_seed(3)
    ps = [torch.nn.Parameter(torch.randn(s).to(torch.bfloat16)) for s in [(4, 5), (5,)]]
    opt = tt.Adam(ps, lr=0.01, multi_precision=True)
    for _ in range(2):
        for p in ps:
            p.grad = torch.randn(p.shape).to(torch.bfloat16)
        opt.step()
    return ps, opt


def _snapshot(ps, opt):
    return [_bits(p) for p in ps], [{k: v.numpy().tobytes() for k, v in opt.state[p].items()}
                                    for p in ps]


@pytest.mark.parametrize("how", ["float", "grow", "shrink"])
def test_a_bfloat16_weight_changed_after_a_steady_step_is_refused(how, steady_runs):
    with checked_launches():
        ps, opt = _steady_adam()
        assert steady_runs == [(2, "bfloat16")]
        p = ps[0]
        with torch.no_grad():
            if how == "float":
                p.data = p.data.float()
            elif how == "grow":
                p.data = torch.randn(64).to(torch.bfloat16)
            else:
                p.data = p.data.flatten()[:7].clone()
        for q in ps:
            q.grad = torch.randn(q.shape, dtype=q.dtype)
        before = _snapshot(ps[1:], opt)
        state = {k: v.numpy().tobytes() for k, v in opt.state[p].items()}
        with pytest.raises((TypeError, ValueError), match="parameter 0 is now"):
            opt.step()
    assert steady_runs == [(2, "bfloat16")]
    assert _snapshot(ps[1:], opt) == before
    assert {k: v.numpy().tobytes() for k, v in opt.state[p].items()} == state


@pytest.mark.parametrize("how", ["swap", "resize_"])
def test_a_bfloat16_weight_moved_after_a_steady_step_is_checked_again(how, steady_runs):
    """``p.data`` another bfloat16 tensor of the same shape, or its storage moved by a
    ``resize_`` of ``p.data``: the general path takes it (the master is the state's, as for any
    write to a multi-precision weight), then the steady one; the numbers are those of a twin
    changed the same way and stepped on the general path."""
    with checked_launches():
        ps, opt = _steady_adam()
        twins, other = _steady_adam()
        fresh = torch.randn(4, 5).to(torch.bfloat16)
        ptr = ps[0].data_ptr()
        with torch.no_grad():
            for p in (ps[0], twins[0]):
                if how == "swap":
                    p.data = fresh.clone()
                else:
                    p.data.resize_(p.numel() * 64)
        assert ps[0].data_ptr() != ptr and ps[0].shape == (4, 5)
        del steady_runs[:]
        for step in range(3):
            grads = [torch.randn(p.shape).to(torch.bfloat16) for p in ps]
            for p, q, g in zip(ps, twins, grads):
                p.grad, q.grad = g.clone(), g.clone()
            opt.step()
            other._steady.clear()
            other.step()
        assert steady_runs == [(2, "bfloat16")] * 2
    assert _snapshot(ps, opt) == _snapshot(twins, other)
