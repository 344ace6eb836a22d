"""toolkit.torch's numbers: a step of a ``toolkit.torch`` optimizer equals the toolkit's own numpy
step, bit for bit (weights, states and counts), for every registered optimizer x convention x
dtype, read from the registry (no list of names): several parameters of different shapes, a
gradient missing at one step, gradients made fresh each step (torch's
``zero_grad(set_to_none=True)``), and a group of mixed dtypes (docs/torch.md)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed")
import toolkit.torch as tt  # noqa: E402
from toolkit.torch import crossing  # noqa: E402
from toolkit.optimizer import create, specs  # noqa: E402

CASES = [(name, conv) for name, spec in specs().items() for conv in spec.conventions]
DTYPES = ("float32", "float64", "float16", "float16-mp")


def options(name, dtype):
    """The optimizer's recorded configuration (every state slot and branch on), with weight
    decay, rescaling and clipping on where its spec allows them."""
    spec = specs()[name]
    kw = {"learning_rate": 0.01, "wd": 0.001, "rescale_grad": 0.5, "clip_gradient": 1.0}
    kw.update(spec.record)
    kw.update(spec.fixed)
    if dtype == "float16" and spec.half_state_lr:
        kw["learning_rate"] = max(kw["learning_rate"], spec.half_state_lr)
    if dtype == "float16-mp":
        kw["multi_precision"] = True
    return kw


def shapes(name):
    return [(3, 4), (2, 5), (4, 2)] if specs()[name].matrix else [(3, 4), (5,), (2, 3, 2)]


def drawn(rng, shape, dtype):
    return (rng.standard_normal(shape) * 0.5).astype(dtype)


def run_both(name, conv, dtypes, steps=4, missing=(1, 2)):
    """The same steps through toolkit.torch and through the numpy optimizer (index by index);
    ``missing``: (step, parameter) whose gradient is None at that step."""
    kw = dict(options(name, dtypes[0]), convention=conv)
    np_dtypes = [np.float16 if d.startswith("float16") else np.dtype(d) for d in dtypes]
    rng = np.random.default_rng(7)
    w0 = [drawn(rng, s, d) for s, d in zip(shapes(name), np_dtypes)]
    params = [torch.nn.Parameter(torch.from_numpy(w.copy())) for w in w0]
    opt = tt.create(name, params, **kw)
    ref = create(name, **kw)
    ws = [w.copy() for w in w0]
    states = [ref.create_state_multi_precision(i, w) for i, w in enumerate(ws)]
    for step in range(steps):
        grads = [drawn(rng, w.shape, w.dtype) for w in ws]
        for i, (p, g) in enumerate(zip(params, grads)):
            p.grad = None if (step, i) == missing else torch.from_numpy(g.copy())
        opt.step()
        for i, g in enumerate(grads):
            if (step, i) != missing:
                ref.update_multi_precision(i, ws[i], g, states[i])
    return opt, params, ref, ws, states


def assert_same(opt, params, ref, ws, states):
    for i, (p, w) in enumerate(zip(params, ws)):
        got = p.detach().numpy()
        assert got.dtype == w.dtype
        assert got.tobytes() == w.tobytes(), f"weight {i}: {got} != {w}"
        # what state_dict() adds for torch.optim (SGD's momentum_buffer = -mom/lr, NAdam's
        # mu_product: toolkit.torch.crossing) is derived from these, not a state of its own
        mine = crossing.without_torch_entries(type(ref), opt.state_dict()["state"].get(i, {}),
                                              ref.convention)
        theirs = [a for a in _leaves(states[i])]
        arrays = [mine[k].numpy() for k in mine if k != "step"]
        assert sorted(a.tobytes() for a in arrays) == sorted(a.tobytes() for a in theirs), \
            f"state {i}"
    assert {k: v["step"] for k, v in opt.state_dict()["state"].items()} == ref.update_counts
    assert opt.state_dict()["toolkit"]["num_update"] == ref.num_update


def _leaves(state):
    """The state arrays toolkit.torch shows: a slot the weight does not use (an empty vector,
    Adafactor's) is not shown, as torch keeps none."""
    if state is None:
        return []
    if isinstance(state, tuple):
        return [a for s in state for a in _leaves(s)]
    return [state] if state.size or state.ndim != 1 else []


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,conv", CASES)
def test_step_equals_numpy_bit_for_bit(name, conv, dtype):
    assert_same(*run_both(name, conv, [dtype] * 3))


@pytest.mark.parametrize("name,conv", CASES)
def test_mixed_dtypes_in_one_group(name, conv):
    assert_same(*run_both(name, conv, ["float32", "float64", "float32"]))


@pytest.mark.parametrize("name", sorted(specs()))
def test_toolkit_scheduler_reads_num_update(name):
    """The toolkit's scheduler drives the learning rate at MXNet's num_update, as the numpy
    optimizer's; group["lr"] shows its value after each step."""
    from toolkit import lr_scheduler
    kw = dict(options(name, "float32"))
    kw.pop("learning_rate")
    rng = np.random.default_rng(3)
    w0 = [drawn(rng, s, np.float32) for s in shapes(name)]
    params = [torch.nn.Parameter(torch.from_numpy(w.copy())) for w in w0]
    sched = lambda: lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1)  # noqa: E731
    opt = tt.create(name, params, lr_scheduler=sched(), **kw)
    ref = create(name, lr_scheduler=sched(), **kw)
    ws = [w.copy() for w in w0]
    states = [ref.create_state_multi_precision(i, w) for i, w in enumerate(ws)]
    for step in range(5):
        grads = [drawn(rng, w.shape, w.dtype) for w in ws]
        for i, (p, g) in enumerate(zip(params, grads)):
            p.grad = None if (step, i) == (2, 0) else torch.from_numpy(g.copy())
            if (step, i) != (2, 0):
                ref.update_multi_precision(i, ws[i], g, states[i])
        opt.step()
        assert opt.param_groups[0]["lr"] == ref.learning_rate
    assert_same(opt, params, ref, ws, states)


@pytest.mark.parametrize("name", [n for n in sorted(specs()) if not create(n).host_state()[0]])
def test_groups_share_mxnet_counts(name):
    """Parameters split over param groups of the same options step as one MXNet optimizer over
    all of them (indices numbered across the groups, one num_update for the toolkit scheduler);
    the optimizers with state shared by all indices (Nadam's schedule: one per group here) are
    not among them."""
    from toolkit import lr_scheduler
    kw = dict(options(name, "float32"))
    kw.pop("learning_rate")
    rng = np.random.default_rng(5)
    w0 = [drawn(rng, s, np.float32) for s in shapes(name)]
    params = [torch.nn.Parameter(torch.from_numpy(w.copy())) for w in w0]
    sched = lambda: lr_scheduler.CosineScheduler(max_update=8, base_lr=0.1)  # noqa: E731
    opt = tt.create(name, [{"params": params[:1]}, {"params": params[1:]}], lr_scheduler=sched(),
                    **kw)
    ref = create(name, lr_scheduler=sched(), **kw)
    ws = [w.copy() for w in w0]
    states = [ref.create_state_multi_precision(i, w) for i, w in enumerate(ws)]
    for step in range(6):
        grads = [drawn(rng, w.shape, w.dtype) for w in ws]
        for i, (p, g) in enumerate(zip(params, grads)):
            skip = i > 0 and step % 2 == 1  # the second group misses every other step
            p.grad = None if skip else torch.from_numpy(g.copy())
            if not skip:
                ref.update_multi_precision(i, ws[i], g, states[i])
        opt.step()
        assert [g["lr"] for g in opt.param_groups] == [ref.learning_rate] * 2
    for p, w in zip(params, ws):
        assert p.detach().numpy().tobytes() == w.tobytes()
    assert opt.state_dict()["toolkit"]["num_update"] == ref.num_update


# --- hypothesis: the oracle's hyperparameter space (optim_db, read from the specs) --------------
from hypothesis import given, settings, strategies as st  # noqa: E402

from optim_db import DB, EXAMPLES, arrays_over_decades, np_dtype  # noqa: E402

DRAWN = [(info, conv, dtype) for info in DB for conv in info.conventions
         for dtype in ("float32", "float64", "float16-mp")]


@pytest.mark.parametrize("case", DRAWN, ids=[f"{i.name}-{c}-{d}" for i, c, d in DRAWN])
@settings(max_examples=max(2, EXAMPLES // 3))
@given(data=st.data())
def test_drawn_hyperparameters_equal_numpy_bit_for_bit(case, data):
    """Hyperparameters from the oracle's space (aimed at branch points), weights and
    gradients over many decades, 1 to 4 steps: toolkit.torch equals the numpy step, bit for
    bit, weights and states."""
    info, conv, dtype = case
    hyper = data.draw(info.hyper, label="hyper")
    common = data.draw(info.common, label="common")
    kw = dict(hyper, **common, convention=conv, multi_precision=dtype == "float16-mp")
    shape = data.draw(info.shapes, label="shape")
    n = int(np.prod(shape))
    dt = np_dtype(dtype)
    lo = -2 if dt == np.float16 else -4
    w0 = data.draw(arrays_over_decades(n, lo, 2), label="w").reshape(shape).astype(dt)
    steps = data.draw(st.integers(1, 4), label="steps")
    grads = [data.draw(arrays_over_decades(n, lo - 2, 3), label=f"g{k}").reshape(shape)
             .astype(dt) for k in range(steps)]
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = tt.create(info.name, [p], **kw)
    ref = create(info.name, **kw)
    w = w0.copy()
    state = ref.create_state_multi_precision(0, w)
    with np.errstate(all="ignore"):
        for g in grads:
            p.grad = torch.from_numpy(g.copy())
            opt.step()
            ref.update_multi_precision(0, w, g, state)
    assert p.detach().numpy().tobytes() == w.tobytes()
    mine = [a.numpy().tobytes() for k, a in crossing.without_torch_entries(
        type(ref), opt.state_dict()["state"][0], ref.convention).items() if k != "step"]
    assert sorted(mine) == sorted(a.tobytes() for a in _leaves(state))
