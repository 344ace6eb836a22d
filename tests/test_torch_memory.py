"""Memory safety of ``toolkit.torch`` where user code changes parameters and state between steps:
every launch's addresses are checked against the live tensors (``tests/torch_memory.py``), the
cases the issue found (``model.double()``, a parameter that grows, a state tensor replaced or
deleted) either continue with torch's meaning or refuse naming the parameter with nothing
changed, and a seeded random walk over such changes runs in subprocesses (a crash is a failure
that names its walk)."""
from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="toolkit.torch needs PyTorch")

import toolkit.torch  # noqa: E402
from torch_memory import checked_launches, only_this_test  # noqa: E402,F401

#: the address check walks each test's own objects (tests/torch_memory.py)
pytestmark = pytest.mark.usefixtures("only_this_test")

HERE = Path(__file__).parent


def _model(name="Adam"):
    """A small MLP (without biases for GroupAdaGrad, which takes 2-D weights only)."""
    torch.manual_seed(0)
    bias = name != "GroupAdaGrad"
    return torch.nn.Sequential(torch.nn.Linear(6, 5, bias=bias), torch.nn.Tanh(),
                               torch.nn.Linear(5, 2, bias=bias))


def _train(model, opt, steps, dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(4, 6, generator=g, dtype=dtype)
        opt.zero_grad()
        model(x).square().sum().backward()
        opt.step()


def _snapshot(model, opt):
    return ([p.detach().clone() for p in model.parameters()],
            {k: {n: v.clone() if isinstance(v, torch.Tensor) else v for n, v in e.items()}
             for k, e in opt.state_dict()["state"].items()})


def _same(a, b):
    (wa, sa), (wb, sb) = a, b
    assert all(torch.equal(x, y) for x, y in zip(wa, wb))
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].keys() == sb[k].keys()
        for n in sa[k]:
            x, y = sa[k][n], sb[k][n]
            assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y, (k, n)


#: one of each kind of state: Adam's two moments, AdaGrad's history, SGD's momentum, LAMB's
#: whole-tensor norms, GroupAdaGrad's rows
OPTIMIZERS = [  # checked against the registry by test_the_listed_optimizers_are_registered
    ("Adam", {}), ("AdaGrad", {}), ("SGD", {"momentum": 0.9}), ("LAMB", {}),
    ("GroupAdaGrad", {})]


def test_the_listed_optimizers_are_registered():
    from toolkit.optimizer import registry
    classes = {k.__name__ for k in registry().values()}
    assert all(name in classes for name, _ in OPTIMIZERS)


@pytest.mark.parametrize("name,kw", OPTIMIZERS)
@pytest.mark.parametrize("steady", [False, True], ids=["first", "steady"])
def test_dtype_change_after_a_step_is_refused_and_changes_nothing(name, kw, steady):
    """``model.double()`` after a step: the issue's heap corruption (Adam, AdaGrad) and NaN then
    SIGSEGV (SGD with momentum). torch refuses; so does the step, naming the parameter, with
    every weight and state as it was."""
    model = _model(name)
    opt = getattr(toolkit.torch, name)(model.parameters(), lr=0.01, **kw)
    with checked_launches():
        _train(model, opt, 3 if steady else 1)
        model.double()
        x = torch.randn(4, 6, dtype=torch.float64)
        opt.zero_grad()
        model(x).square().sum().backward()
        before = _snapshot(model, opt)
        with pytest.raises(TypeError, match=r"parameter 0 is now \(5, 6\) torch.float64.*made "
                                            r"for \(5, 6\) torch.float32"):
            opt.step()
        _same(_snapshot(model, opt), before)
        # torch's way on: load_state_dict casts the state to the parameters' dtype
        opt.load_state_dict(opt.state_dict())
        opt.step()
    assert all(s.dtype == torch.float64 for n, s in opt.state[model[0].weight].items()
               if n != "step")  # the step shown is torch's float32 count


@pytest.mark.parametrize("name,kw", OPTIMIZERS)
def test_a_parameter_that_grows_is_refused(name, kw):
    model = _model(name)
    opt = getattr(toolkit.torch, name)(model.parameters(), lr=0.01, **kw)
    with checked_launches():
        _train(model, opt, 3)
        params = list(model.parameters())
        p = params[-1]
        shape = tuple(p.shape)
        p.data = torch.randn(64, 2)
        p.grad = torch.randn(64, 2)
        before = _snapshot(model, opt)
        with pytest.raises(ValueError, match=rf"parameter {len(params) - 1} is now \(64, 2\).*"
                                             rf"made for {re.escape(str(shape))}"):
            opt.step()
        _same(_snapshot(model, opt), before)


@pytest.mark.parametrize("steps", [1, 3], ids=["general", "steady"])
@pytest.mark.parametrize("how", ["replace", "set_", "plain_dict"])
def test_a_state_tensor_the_user_replaces_is_the_one_the_step_uses(steps, how):
    """``opt.state[p]["exp_avg"] = torch.zeros(...)``: the step kept updating its old hidden array
    while ``opt.state`` and ``state_dict()`` showed the zeros. The next step now takes the
    replacement's values, exactly as loading a state_dict that holds them."""
    model, twin = _model(), _model()
    opt = toolkit.torch.Adam(model.parameters(), lr=0.01)
    other = toolkit.torch.Adam(twin.parameters(), lr=0.01)
    with checked_launches():
        _train(model, opt, steps)
        sd = opt.state_dict()
        p = model[0].weight
        zeros = torch.zeros_like(opt.state[p]["exp_avg"])
        if how == "replace":
            opt.state[p]["exp_avg"] = zeros
        elif how == "set_":
            opt.state[p]["exp_avg"].set_(zeros)
        else:
            opt.state[p] = {**opt.state[p], "exp_avg": zeros}
        sd["state"][0]["exp_avg"] = torch.zeros_like(zeros)
        twin.load_state_dict(model.state_dict())
        other.load_state_dict(sd)
        _train(model, opt, 2)
        _train(twin, other, 2)
    _same(_snapshot(model, opt), _snapshot(twin, other))


@pytest.mark.parametrize("bad,match", [
    (lambda t: torch.zeros(5), r"parameter 0: opt.state\[p\]\['exp_avg'\] is \(5,\)"),
    (lambda t: t.double(), r"parameter 0: opt.state\[p\]\['exp_avg'\] is .*torch.float64.*must be "
                           r"\(5, 6\) torch.float32"),
    (lambda t: 0.5, r"opt.state\[p\]\['exp_avg'\] must be a tensor, got float"),
], ids=["shape", "dtype", "not-a-tensor"])
def test_a_replacement_that_does_not_fit_is_refused_and_changes_nothing(bad, match):
    model = _model()
    opt = toolkit.torch.Adam(model.parameters(), lr=0.01)
    with checked_launches():
        _train(model, opt, 3)
        p = model[0].weight
        opt.state[p]["exp_avg"] = bad(opt.state[p]["exp_avg"])
        opt.zero_grad()
        model(torch.randn(4, 6)).square().sum().backward()
        weights = [q.detach().clone() for q in model.parameters()]
        with pytest.raises((TypeError, ValueError), match=match):
            opt.step()
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters()))


@pytest.mark.parametrize("how", ["del", "clear", "reset", "entry_clear"])
def test_deleted_state_starts_afresh_as_in_torch(how):
    """Deleting a parameter's state (or all of it) starts it afresh at the next step, count 1,
    as torch.optim starts a state it does not find."""
    model = _model()
    opt = toolkit.torch.Adam(model.parameters(), lr=0.01)
    with checked_launches():
        _train(model, opt, 3)
        twin = copy.deepcopy(model)
        new = toolkit.torch.Adam(twin.parameters(), lr=0.01)
        if how == "del":
            for p in model.parameters():
                del opt.state[p]
        elif how == "clear":
            opt.state.clear()
        elif how == "reset":
            opt.state = defaultdict(dict)
        else:
            for p in model.parameters():
                opt.state[p].clear()
        _train(model, opt, 2)
        _train(twin, new, 2)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))
    assert [e["step"] for e in opt.state_dict()["state"].values()] == [2] * 4


def test_deleting_one_slot_is_refused():
    model = _model()
    opt = toolkit.torch.Adam(model.parameters(), lr=0.01)
    _train(model, opt, 2)
    del opt.state[model[0].weight]["exp_avg_sq"]
    with pytest.raises(ValueError, match=r"parameter 0: opt.state\[p\] holds \['exp_avg'\]; "
                                         r"this optimizer keeps \['exp_avg', 'exp_avg_sq'\]"):
        _train(model, opt, 1)


def test_a_new_memory_order_continues_with_the_same_numbers():
    """A 4-D weight moved to channels_last between steps: the state follows it (element-wise
    rules give the numbers of the contiguous run)."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(2, 3, 4, 4))
    v = torch.nn.Parameter(w.detach().clone())
    a, b = toolkit.torch.Adam([w], lr=0.01), toolkit.torch.Adam([v], lr=0.01)
    g = torch.Generator().manual_seed(3)
    with checked_launches():
        for k in range(5):
            if k == 2:
                w.data = w.data.contiguous(memory_format=torch.channels_last)
            grad = torch.randn(w.shape, generator=g)
            w.grad, v.grad = grad.clone(), grad.clone()
            a.step()
            b.step()
    assert w.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(w.detach(), v.detach())
    assert torch.equal(a.state[w]["exp_avg"], b.state[v]["exp_avg"])


def test_the_address_check_catches_a_bad_row():
    """The check can fail: a row naming memory no tensor holds."""
    import numpy as np
    from torch_memory import BadAddress, check_rows
    t = torch.zeros(8)
    check_rows(np.float32, np.array([[t.data_ptr()]]), np.array([8]))
    with pytest.raises(BadAddress):
        check_rows(np.float32, np.array([[t.data_ptr()]]), np.array([9]))
    with pytest.raises(BadAddress):
        check_rows(np.float64, np.array([[t.data_ptr()]]), np.array([4]))


#: 3 subprocesses of 20 walks each (a walk: 40 random steps and changes; every fourth over
#: bfloat16 parameters with multi_precision)
BATCHES = [list(range(k, k + 20)) for k in (0, 20, 40)]


def _run_walks(seeds):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.run([sys.executable, str(HERE / "torch_memory.py"), *map(str, seeds)],
                          capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.parametrize("seeds", BATCHES, ids=lambda s: f"walks{s[0]}-{s[-1]}")
def test_random_walks_of_changes_never_reach_bad_memory(seeds):
    """Each walk changes parameters (dtype, size, storage, memory order), state (replaced,
    resized, deleted) and groups between steps, with every launch's addresses checked; a
    process that dies (heap corruption, SIGSEGV) is rerun walk by walk to name the walk."""
    done = _run_walks(seeds)
    if done.returncode == 0 and f"walked {len(seeds)}" in done.stdout:
        return
    named = []
    for seed in seeds:
        one = _run_walks([seed])
        if one.returncode != 0:
            named.append(f"walk {seed} (exit {one.returncode}):\n{one.stdout[-3000:]}"
                         f"{one.stderr[-3000:]}")
    pytest.fail(f"walks {seeds[0]}-{seeds[-1]} exited {done.returncode}; "
                + ("\n".join(named) or f"no single walk fails alone:\n{done.stderr[-3000:]}"))


def test_a_written_step_sets_the_count():
    """torch keeps the step in opt.state[p]; written there it sets the count (0 starts afresh),
    read there it is the count, and a value that is not a count is refused at the step,
    nothing changed."""
    p = torch.nn.Parameter(torch.ones(3))
    opt = toolkit.torch.Adam([p], lr=0.1)
    for _ in range(3):
        p.grad = torch.ones(3)
        opt.step()
    opt.state[p]["step"] = torch.tensor(10.0)
    opt.step()
    assert opt.state_dict()["state"][0]["step"] == 11
    # read back as torch shows it: a 0-d float32 tensor
    shown = opt.state[p]["step"]
    assert shown.dtype == torch.float32 and shown.dim() == 0 and shown.item() == 11
    opt.state[p]["step"] = 0
    opt.step()
    assert opt.state_dict()["state"][0]["step"] == 1
    opt.state[p]["step"] = -1
    before = p.detach().clone()
    for _ in range(2):  # refused again: the bad value stays where the user put it
        with pytest.raises(ValueError, match=r"parameter 0: opt.state\[p\]\['step'\] = -1 is "
                                             r"not a count"):
            opt.step()
    assert torch.equal(p.detach(), before)


@pytest.mark.parametrize("how", ["insert", "replace", "reorder"])
def test_counts_follow_their_parameter(how):
    """A parameter inserted, replaced or moved in param_groups took over the count of the
    position it landed on (counts are MXNet's, by index): a new one now starts at 1 and the
    others keep theirs, as torch.optim's per-parameter steps do."""
    torch.manual_seed(0)
    w, v = torch.nn.Parameter(torch.randn(3)), torch.nn.Parameter(torch.randn(3))
    opt = toolkit.torch.Adam([w, v], lr=0.1)
    for _ in range(5):
        w.grad, v.grad = torch.ones(3), torch.ones(3)
        opt.step()
    params = opt.param_groups[0]["params"]
    d = torch.nn.Parameter(torch.randn(3))
    if how == "insert":
        params.insert(0, d)
        want = {0: 1, 1: 6, 2: 6}
    elif how == "replace":
        params[0] = d
        want = {0: 1, 1: 6}
    else:
        params.reverse()
        want = {0: 6, 1: 6}
    for p in params:
        p.grad = torch.ones(3)
    opt.step()
    steps = {k: int(e["step"]) for k, e in opt.state_dict()["state"].items()}
    assert {k: steps[k] for k in want} == want


@pytest.mark.parametrize("how", ["reset", "del"])
def test_a_reset_shows_in_state_dict_before_the_next_step(how):
    """Resetting the state, then state_dict() before a step, reported the old count (and a
    load of it brought the count back with fresh moments)."""
    w = torch.nn.Parameter(torch.ones(3))
    opt = toolkit.torch.Adam([w], lr=0.1)
    for _ in range(5):
        w.grad = torch.ones(3)
        opt.step()
    if how == "reset":
        opt.state = defaultdict(dict)
    else:
        del opt.state[w]
    assert opt.state_dict()["state"] == {}
    opt.load_state_dict(opt.state_dict())
    opt.step()
    assert int(opt.state_dict()["state"][0]["step"]) == 1


def test_the_documented_remedy_works_with_a_float32_master():
    """model.half() after float32 steps with multi_precision: the step refuses, and its remedy,
    load_state_dict(state_dict()), failed for want of a 'weight32' master copy; the master is
    now made from the weight (and dropped going back to float32)."""
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 2)
    opt = toolkit.torch.Adam(m.parameters(), lr=0.01, multi_precision=True)
    m(torch.randn(8, 4)).sum().backward()
    opt.step()
    m.half()
    opt.zero_grad()
    m(torch.randn(8, 4).half()).sum().backward()
    with pytest.raises(TypeError, match="load_state_dict"):
        opt.step()
    opt.load_state_dict(opt.state_dict())
    opt.step()
    assert opt.state[m.weight]["weight32"].dtype == torch.float32
    m.float()
    opt.load_state_dict(opt.state_dict())
    opt.zero_grad()
    m(torch.randn(8, 4)).sum().backward()
    opt.step()
    assert "weight32" not in opt.state[m.weight]


def test_torch_positional_hyperparameters():
    p = [torch.nn.Parameter(torch.zeros(2))]
    assert toolkit.torch.SGD(p, 0.1, 0.9).param_groups[0]["momentum"] == 0.9
    assert toolkit.torch.Adam(p, 1e-3, (0.8, 0.99)).param_groups[0]["betas"] == (0.8, 0.99)
    with pytest.raises(TypeError, match="takes params and lr as positional arguments"):
        toolkit.torch.LAMB(p, 0.1, 0.9)
    with pytest.raises(TypeError, match="multiple values for argument 'momentum'"):
        toolkit.torch.SGD(p, 0.1, 0.9, momentum=0.5)


def test_adamw_under_pytorch_defaults_to_torchs_decay():
    g = toolkit.torch.AdamW([torch.nn.Parameter(torch.zeros(2))],
                            convention="pytorch").param_groups[0]
    assert g["weight_decay"] == 0.01 and g["wd"] == 0.01
    g = toolkit.torch.AdamW([torch.nn.Parameter(torch.zeros(2))], convention="pytorch",
                            wd=0.0).param_groups[0]
    assert g["weight_decay"] == 0.0


def test_a_state_resized_in_place_after_a_steady_step_is_refused():
    """``resize_`` keeps a state tensor's address: the steady path compares its size too, and
    refuses the step as the general path does (it wrote the old size through the smaller
    tensor before), with nothing changed."""
    model = _model()
    opt = toolkit.torch.Adam(model.parameters(), lr=0.01)
    _train(model, opt, 2)
    assert opt._steady  # the next step would take the steady path
    w = model[0].weight
    state = opt.state[w]["exp_avg"]
    address = state.data_ptr()
    state.resize_(1)
    assert state.data_ptr() == address
    weights = [q.detach().clone() for q in model.parameters()]
    with checked_launches(), pytest.raises(ValueError, match=r"exp_avg'\] is \(1,\)"):
        _train(model, opt, 1)
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters()))


@pytest.mark.parametrize("steady", [True, False], ids=["steady", "general"])
def test_a_gradient_with_torchs_negative_bit_steps_with_its_value(steady):
    """A gradient whose memory holds the negated values (torch's negative bit: ``conj().imag``
    of a complex tensor, contiguous for one element) steps with its values, as torch.optim
    does, on both paths."""
    def run(neg):
        p = torch.nn.Parameter(torch.tensor([1.0]))
        opt = toolkit.torch.SGD([p], lr=0.1)
        for _ in range(3):
            value = torch.tensor([-2.0])
            if neg:
                g = torch.complex(torch.zeros(1), -value).conj().imag
                assert g.is_neg() and g.is_contiguous() and torch.equal(g, value)
            else:
                g = value
            p.grad = g
            if not steady:
                opt._steady.clear()
            opt.step()
        return p.detach()
    assert torch.equal(run(True), run(False))
