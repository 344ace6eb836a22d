"""toolkit.torch's steady path (toolkit/torch/steady.py): once a param group's parameters have
state and nothing about them changes, a step reads each ``.grad`` and runs the same kernel call
with the same rows as the general path, bit for bit; anything the steady path does not take
sends the step back to the general path, which checks everything and says what is wrong.

* Every optimizer whose step reads only ``(t, lr, wd)``, every convention, float32 and float64,
  gradients made fresh each step: the steady path runs from the second step on, and weights,
  states and counts equal the toolkit's numpy steps (test_torch_numbers.py's comparison).
* What sends a step back, each proven to be taken and to give the numpy numbers: a missing
  gradient, a non-contiguous gradient, an assignment to ``p.data``, a parameter replaced in the
  group's list, a toolkit ``lr_scheduler``, ``load_state_dict``. ``maximize`` switched on and
  a changed lr stay on the steady path (``maximize``: test_torch_maximize.py).
  Errors are the general path's (a gradient of another shape).
* A steady step's Python work does not grow with the number of parameters (the Python
  functions it calls are counted, not timed), float32 and bfloat16 alike.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed")
import toolkit.torch as tt  # noqa: E402
from toolkit import lr_scheduler  # noqa: E402
from toolkit.optimizer import create, specs  # noqa: E402
from toolkit.torch import steady  # noqa: E402

from test_step_plan import _python_calls  # noqa: E402
from test_torch_numbers import assert_same, drawn, options, shapes  # noqa: E402

VECTOR = [(name, conv) for name, spec in specs().items() for conv in spec.conventions
          if create(name).plans_by_scalars]


@pytest.fixture
def steady_steps(monkeypatch):
    """The number of group steps that ran on the steady path (a list, appended per run)."""
    runs = []
    real = steady.SteadyGroup.run

    def spy(self, step):
        runs.append(len(self.params))
        return real(self, step)
    monkeypatch.setattr(steady.SteadyGroup, "run", spy)
    return runs


def _setup(name, conv, dtype, **extra):
    kw = dict(options(name, dtype), convention=conv, **extra)
    rng = np.random.default_rng(11)
    w0 = [drawn(rng, s, dtype) for s in shapes(name)]
    params = [torch.nn.Parameter(torch.from_numpy(w.copy())) for w in w0]
    ref = create(name, **{k: v for k, v in kw.items() if k != "lr_scheduler"},
                 **({"lr_scheduler": _factor()} if "lr_scheduler" in kw else {}))
    opt = tt.create(name, params, **kw)
    ws = [w.copy() for w in w0]
    states = [ref.create_state_multi_precision(i, w) for i, w in enumerate(ws)]
    return rng, params, opt, ref, ws, states


def _step(rng, params, opt, ref, ws, states, skip=(), sign=1.0, each=None):
    grads = [drawn(rng, w.shape, w.dtype) for w in ws]
    for i, (p, g) in enumerate(zip(params, grads)):
        if i in skip:
            p.grad = None
        elif each is not None:
            p.grad = each(torch.from_numpy(g.copy()))
        else:
            p.grad = torch.from_numpy(g.copy())
    opt.step()
    for i, g in enumerate(grads):
        if i not in skip:
            ref.update_multi_precision(i, ws[i], sign * g, states[i])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, conv", VECTOR)
def test_the_steady_path_is_the_numpy_step(name, conv, dtype, steady_steps):
    rng, params, opt, ref, ws, states = _setup(name, conv, dtype)
    for step in range(5):
        _step(rng, params, opt, ref, ws, states)
        assert steady_steps == [len(params)] * step, (step, steady_steps)
        assert_same(opt, params, ref, ws, states)


def _established(name="adam", conv="mxnet", dtype="float32", **extra):
    """An optimizer two steps in (the second on the steady path), and its numpy twin."""
    got = _setup(name, conv, dtype, **extra)
    for _ in range(2):
        _step(*got)
    return got


def test_a_missing_gradient_takes_the_general_path(steady_steps):
    rng, params, opt, ref, ws, states = got = _established()
    del steady_steps[:]
    _step(*got, skip=(1,))                  # general: parameter 1 not stepped
    assert steady_steps == []
    _step(*got)                             # general again (the group was left partly)
    _step(*got)                             # steady
    assert steady_steps == [len(params)]
    assert_same(opt, params, ref, ws, states)


def test_a_non_contiguous_gradient_takes_the_general_path(steady_steps):
    rng, params, opt, ref, ws, states = got = _established()
    del steady_steps[:]

    def strided(g):  # the same values, every other element of a buffer twice the size
        return torch.stack([g, torch.zeros_like(g)], dim=-1)[..., 0]
    _step(*got, each=strided)
    assert not params[0].grad.is_contiguous()
    assert steady_steps == []
    assert_same(opt, params, ref, ws, states)


def test_an_assignment_to_p_data_takes_the_general_path(steady_steps):
    rng, params, opt, ref, ws, states = got = _established()
    del steady_steps[:]
    with torch.no_grad():
        params[0].data = params[0].data.clone()  # the same values at a new address
    _step(*got)
    assert steady_steps == []
    _step(*got)
    assert steady_steps == [len(params)]
    assert_same(opt, params, ref, ws, states)


def test_a_parameter_replaced_in_the_group_takes_the_general_path(steady_steps):
    rng, params, opt, ref, ws, states = _established()
    del steady_steps[:]
    # a new parameter (no state) in place of parameter 2: the general path makes its state,
    # and its count starts afresh with it (it took index 2's count before, fresh moments with
    # another parameter's bias correction; toolkit.torch's counts follow their parameter)
    params[2] = opt.param_groups[0]["params"][2] = torch.nn.Parameter(torch.zeros(ws[2].shape))
    ws[2] = np.zeros(ws[2].shape, ws[2].dtype)
    states[2] = ref.create_state_multi_precision(2, ws[2])
    ref.restore_counts({i: t for i, t in ref.update_counts.items() if i != 2}, ref.num_update)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    for i in range(3):
        ref.update_multi_precision(i, ws[i], np.ones_like(ws[i]), states[i])
    assert steady_steps == []
    assert_same(opt, params, ref, ws, states)


def test_maximize_and_a_changed_lr_are_read(steady_steps):
    rng, params, opt, ref, ws, states = got = _established()
    del steady_steps[:]
    opt.param_groups[0]["maximize"] = True
    _step(*got, sign=-1.0)                  # steady: the rows of the negated gradients
    assert steady_steps == [len(params)]    # (toolkit.torch.maximize, test_torch_maximize.py)
    opt.param_groups[0]["maximize"] = False
    _step(*got)
    assert steady_steps == [len(params)] * 2
    opt.param_groups[0]["lr"] = 0.003       # as torch's schedulers write it
    ref.set_learning_rate(0.003)
    _step(*got)
    assert steady_steps == [len(params)] * 3
    assert_same(opt, params, ref, ws, states)


def _factor():
    return lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1)


def test_a_toolkit_lr_scheduler_takes_the_general_path(steady_steps):
    rng, params, opt, ref, ws, states = got = _setup("adam", "mxnet", "float32",
                                                     lr_scheduler=_factor())
    for _ in range(5):
        _step(*got)
    assert steady_steps == []
    assert_same(opt, params, ref, ws, states)


def test_load_state_dict_leaves_the_steady_path_until_a_general_step(steady_steps):
    """Loaded state tensors are new ones: the next step is a general one, and the steps after
    a load equal those of a fresh optimizer that loaded the same state."""
    rng, params, opt, ref, ws, states = got = _established()
    saved, weights = opt.state_dict(), [p.detach().clone() for p in params]
    _step(*got)
    grads = [[torch.from_numpy(drawn(rng, w.shape, w.dtype)) for w in ws] for _ in range(2)]

    def two_steps(o, ps):
        with torch.no_grad():
            for p, w in zip(ps, weights):
                p.copy_(w)
        o.load_state_dict(saved)
        for gs in grads:
            for p, g in zip(ps, gs):
                p.grad = g.clone()
            o.step()
        return [p.detach().clone() for p in ps]
    del steady_steps[:]
    mine = two_steps(opt, params)
    assert steady_steps == [len(params)]    # the first step after the load: general
    others = [torch.nn.Parameter(w.clone()) for w in weights]
    theirs = two_steps(tt.create("adam", others, **options("adam", "float32")), others)
    assert all(a.numpy().tobytes() == b.numpy().tobytes() for a, b in zip(mine, theirs))


def test_a_gradient_of_another_shape_is_the_general_paths_error():
    rng, params, opt, ref, ws, states = _established()
    before = [p.detach().clone() for p in params]
    for p in params:
        p.grad = torch.ones_like(p)
    params[1].grad.data = torch.ones(params[1].numel() + 1)  # the setter's checks bypassed
    with pytest.raises(ValueError, match="gradient shape"):
        opt.step()
    assert all(torch.equal(a, p.detach()) for a, p in zip(before, params))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_steady_step_does_no_python_work_per_parameter(dtype, steady_steps):
    def calls(n):
        params = [torch.nn.Parameter(torch.full((6,), 0.5, dtype=dtype)) for _ in range(n)]
        opt = tt.Adam(params, lr=0.01, **({"multi_precision": True}
                                          if dtype == torch.bfloat16 else {}))
        counts = []
        for _ in range(4):
            for p in params:
                p.grad = torch.full((6,), 0.25, dtype=dtype)
            counts.append(_python_calls(opt.step))
        return counts[2:]
    small, large = calls(10), calls(300)
    assert steady_steps and small == large, (small, large)


def test_a_steady_step_reads_back_what_the_last_one_kept(steady_steps):
    """The steady path hands the optimizer's bookkeeping the same Kept indices every step, so
    a step reads back the counts the last one committed (the numbers are the numpy path's:
    the test above)."""
    rng, params, opt, ref, ws, states = _setup("adam", "mxnet", np.float32)
    for _ in range(4):
        _step(rng, params, opt, ref, ws, states)
    assert steady_steps
    kept = opt._steady[0].kept
    assert opt._inners[0].__dict__["_committed"].kept is kept
