"""bfloat16 parameters in toolkit.torch (``multi_precision=True``): a contiguous CPU bfloat16
parameter of an optimizer whose step reads only ``(t, lr, wd)`` steps through the addressed
bfloat16 kernel (``toolkit.torch.launch.launch_addressed_mp``), and its numbers are those of
the index-by-index path it replaced: the float32 master updated by the toolkit's own step on the
widened gradient, then rounded into the weight by ``Tensor.to(torch.bfloat16)``.

* Every such optimizer and convention, with ``maximize`` off and on, gradients with NaN,
  infinities, huge and subnormal values: masters, states, weights and counts equal the numpy
  optimizer's steps followed by torch's rounding, bit for bit, and every launch's addresses lie
  in live tensors of each column's dtype (``tests/torch_memory.py``'s check).
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed")
import toolkit.torch as tt  # noqa: E402
from toolkit.optimizer import create, specs  # noqa: E402

from test_torch_numbers import drawn, options, shapes  # noqa: E402
from torch_memory import checked_launches  # noqa: E402

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
