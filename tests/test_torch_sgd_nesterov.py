"""``toolkit.torch.SGD(..., convention="pytorch")`` takes torch.optim.SGD's ``nesterov`` and
``dampening`` and is torch.optim.SGD: bit for bit in float64 and float32 (no root in this
update), at construction, on live param-group edits (refused where torch refuses the pair,
nothing changed) and across checkpoints both ways. Under "mxnet" and "guide" (MXNet's SGD and
the guide's have neither) both are refused naming NAG and convention='pytorch'."""
from __future__ import annotations

import io

import pytest

torch = pytest.importorskip("torch", reason="toolkit.torch needs PyTorch")

import toolkit.torch as tt  # noqa: E402
from toolkit import optimizer  # noqa: E402

STEPS = 25
SHAPES = ((7,), (3, 5), (517,))   # tails of every vector width

#: torch.optim.SGD's keywords (lr 0.05), each run by both
SETTINGS = [
    dict(momentum=0.9, nesterov=True),
    dict(momentum=0.9, nesterov=True, weight_decay=5e-4),
    dict(momentum=0.9, dampening=0.1),
    dict(momentum=0.9, dampening=0.1, weight_decay=1e-2),
    dict(momentum=0.5, dampening=0.5, weight_decay=1e-2),
    dict(momentum=0.7, dampening=1.0),
    dict(momentum=0.0, dampening=0.5, weight_decay=1e-2),   # no buffer: dampening unused
    dict(momentum=0.9, nesterov=True, maximize=True),
    dict(momentum=0.9, dampening=0.3, weight_decay=1e-2, maximize=True),
]
DTYPES = [torch.float64, torch.float32]


def _params(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=dtype) for s in SHAPES]


def _grads(dtype, k):
    """Gradients over four decades, with exact zeros."""
    g = torch.Generator().manual_seed(1000 + k)
    out = []
    for s in SHAPES:
        x = torch.randn(s, generator=g, dtype=dtype) * 10.0 ** (
            torch.rand(s, generator=g, dtype=dtype) * 4 - 3)
        x.view(-1)[::11] = 0.0
        out.append(x)
    return out


def _pair(dtype, make_theirs, make_mine):
    w0 = _params(dtype)
    a = [torch.nn.Parameter(w.clone()) for w in w0]
    b = [torch.nn.Parameter(w.clone()) for w in w0]
    return a, make_theirs(a), b, make_mine(b)


def _step(k, ps, opt):
    for p, g in zip(ps, _grads(ps[0].dtype, k)):
        p.grad = g.clone()
    opt.step()


def _assert_same(a, theirs, b, mine, what):
    for i, (p, q) in enumerate(zip(a, b)):
        assert p.detach().view(-1).numpy().tobytes() == q.detach().view(-1).numpy().tobytes(), \
            (what, i, (p - q).abs().max().item())
        tb = theirs.state[p].get("momentum_buffer")
        if tb is not None:
            assert torch.equal(tb, mine.state[q]["momentum_buffer"]), (what, i)
        else:
            assert "momentum_buffer" not in mine.state[q], (what, i)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kw", SETTINGS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in
                                                               kw.items()))
def test_torch_keywords_give_torch_optim_sgd_bit_for_bit(kw, dtype):
    a, theirs, b, mine = _pair(dtype, lambda ps: torch.optim.SGD(ps, lr=0.05, **kw),
                               lambda ps: tt.SGD(ps, lr=0.05, convention="pytorch", **kw))
    group = mine.param_groups[0]
    assert group["nesterov"] is kw.get("nesterov", False)
    assert group["dampening"] == kw.get("dampening", 0)
    for k in range(STEPS):
        _step(k, a, theirs)
        _step(k, b, mine)
        _assert_same(a, theirs, b, mine, k)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_positional_keywords_and_a_torch_scheduler(dtype):
    """torch's positional order (lr, momentum, dampening, weight_decay, nesterov), and StepLR
    changing lr (torch applies the current lr to its whole buffer; so does the kernel)."""
    a, theirs, b, mine = _pair(dtype, lambda ps: torch.optim.SGD(ps, 0.1, 0.9, 0, 1e-3, True),
                               lambda ps: tt.SGD(ps, 0.1, 0.9, 0, 1e-3, True,
                                                 convention="pytorch"))
    s1 = torch.optim.lr_scheduler.StepLR(theirs, step_size=4, gamma=0.5)
    s2 = torch.optim.lr_scheduler.StepLR(mine, step_size=4, gamma=0.5)
    for k in range(STEPS):
        _step(k, a, theirs)
        _step(k, b, mine)
        s1.step()
        s2.step()
        _assert_same(a, theirs, b, mine, k)


#: step -> the param-group edit made before it, on both optimizers
EDITS = {5: {"nesterov": True}, 9: {"weight_decay": 1e-2}, 12: {"nesterov": False,
                                                                 "dampening": 0.3},
         17: {"momentum": 0.5}, 21: {"dampening": 0.0, "nesterov": True}}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_param_group_edits_take_effect_at_the_next_step_as_in_torch(dtype):
    a, theirs, b, mine = _pair(dtype, lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
                               lambda ps: tt.SGD(ps, lr=0.05, momentum=0.9,
                                                 convention="pytorch"))
    for k in range(STEPS + 5):
        for key, value in EDITS.get(k, {}).items():
            theirs.param_groups[0][key] = value
            mine.param_groups[0][key] = value
        _step(k, a, theirs)
        _step(k, b, mine)
        _assert_same(a, theirs, b, mine, k)
    inner = mine.toolkit_optimizers[0]
    assert (inner.nesterov, inner.dampening, inner.momentum) == (True, 0.0, 0.5)


def _snapshot(ps, opt):
    return ([p.detach().clone() for p in ps],
            {i: {k: v.clone() for k, v in opt.state[p].items()} for i, p in enumerate(ps)})


def _unchanged(ps, opt, before):
    weights, states = before
    assert all(torch.equal(p.detach(), w) for p, w in zip(ps, weights))
    for i, p in enumerate(ps):
        assert set(opt.state[p]) == set(states[i])
        assert all(torch.equal(opt.state[p][k], v) for k, v in states[i].items())


@pytest.mark.parametrize("edit", [{"dampening": 0.2}, {"nesterov": True, "dampening": 0.1},
                                  {"momentum": 0.0}])
def test_an_invalid_edit_is_refused_with_nothing_changed(edit):
    """Nesterov with dampening, or without momentum (momentum 0 also changes the state's
    layout): refused at the next step naming the group, as torch refuses the pair at
    construction; weights, states and the group's optimizer as they were; once put right the
    run goes on as torch's."""
    a, theirs, b, mine = _pair(torch.float64,
                               lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9,
                                                          nesterov=True),
                               lambda ps: tt.SGD(ps, lr=0.05, momentum=0.9, nesterov=True,
                                                 convention="pytorch"))
    for k in range(3):
        _step(k, a, theirs)
        _step(k, b, mine)
    group = mine.param_groups[0]
    kept = {key: group[key] for key in edit}
    group.update(edit)
    for p, g in zip(b, _grads(torch.float64, 3)):
        p.grad = g.clone()
    before = _snapshot(b, mine)
    with pytest.raises(ValueError, match="param group 0: "):
        mine.step()
    _unchanged(b, mine, before)
    inner = mine.toolkit_optimizers[0]
    assert (inner.nesterov, inner.dampening, inner.momentum) == (True, 0.0, 0.9)
    group.update(kept)
    for k in range(3, 8):
        _step(k, a, theirs)
        _step(k, b, mine)
        _assert_same(a, theirs, b, mine, k)


def test_nesterov_with_dampening_or_without_momentum_is_refused_as_torch_refuses_it():
    for kw in (dict(momentum=0.9, nesterov=True, dampening=0.1), dict(nesterov=True),
               dict(momentum=0.0, nesterov=True)):
        with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and zero "
                                             "dampening"):
            torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1, **kw)
        with pytest.raises(ValueError, match=r"toolkit.torch.SGD\(\): Nesterov momentum "
                                             "requires a momentum and zero dampening"):
            tt.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1, convention="pytorch", **kw)
        with pytest.raises(ValueError, match="Nesterov momentum requires"):
            optimizer.SGD(learning_rate=0.1, convention="pytorch", **kw)
    opt = tt.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1, momentum=0.9,
                 convention="pytorch")
    with pytest.raises(ValueError, match="add_param_group: Nesterov momentum requires"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))], "nesterov": True,
                             "dampening": 0.5})
    assert len(opt.param_groups) == 1 and len(opt.toolkit_optimizers) == 1
    opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))], "nesterov": True})
    assert [g["nesterov"] for g in opt.param_groups] == [False, True]
    with pytest.raises(ValueError, match="dampening must be in"):
        tt.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1, momentum=0.9, dampening=1.5,
               convention="pytorch")


@pytest.mark.parametrize("convention", ["mxnet", "guide"])
def test_mxnet_and_guide_refuse_them_naming_nag_and_pytorch(convention):
    """MXNet's SGD (and the guide's) has no Nesterov momentum nor dampening: refused at
    construction, in add_param_group and on an edited group (nothing changed), toolkit.optimizer
    alike; the message names NAG and convention='pytorch'. Their off values are taken."""
    nag = r"Nesterov momentum is NAG .*convention='pytorch'"
    damp = r"MXNet's momentum has no dampening \(torch.optim.SGD's is taken under " \
           r"convention='pytorch'\)"
    for kw, match in ((dict(nesterov=True), nag), (dict(dampening=0.1), damp)):
        with pytest.raises(ValueError, match=rf"toolkit.torch.SGD\(\): {list(kw)[0]}=.* is "
                                             f"refused under convention '{convention}': .*"
                                             f"{match}"):
            tt.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1, momentum=0.9,
                   convention=convention, **kw)
        with pytest.raises(ValueError, match=match):
            optimizer.SGD(momentum=0.9, convention=convention, **kw)
        ps = [torch.nn.Parameter(torch.ones(3, dtype=torch.float64))]
        opt = tt.SGD(ps, lr=0.1, momentum=0.9, nesterov=False, dampening=0,
                     convention=convention)
        with pytest.raises(ValueError, match=f"add_param_group: .*{match}"):
            opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))], **kw})
        ps[0].grad = torch.ones(3, dtype=torch.float64)
        opt.step()
        opt.param_groups[0].update(kw)
        before = _snapshot(ps, opt)
        with pytest.raises(ValueError, match=f"param group 0: .*{match}"):
            opt.step()
        _unchanged(ps, opt, before)
        assert (opt.toolkit_optimizers[0].nesterov, opt.toolkit_optimizers[0].dampening) == \
            (False, 0.0)


def _saved(sd):
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


CHECKPOINTED = [dict(momentum=0.9, nesterov=True, weight_decay=5e-4),
                dict(momentum=0.9, dampening=0.3, weight_decay=1e-2)]


@pytest.mark.parametrize("kw", CHECKPOINTED, ids=["nesterov", "dampening"])
def test_a_torch_checkpoint_carries_nesterov_and_dampening_into_toolkit_torch(kw):
    """torch.optim.SGD's state_dict into a toolkit.torch.SGD made without them: its group takes
    torch's nesterov and dampening, and the run goes on as torch's, bit for bit."""
    a, theirs, b, mine = _pair(torch.float64, lambda ps: torch.optim.SGD(ps, lr=0.05, **kw),
                               lambda ps: tt.SGD(ps, lr=0.5, momentum=0.9,
                                                 convention="pytorch"))
    for k in range(4):
        _step(k, a, theirs)
    for p, q in zip(a, b):
        q.data.copy_(p.detach())
    mine.load_state_dict(_saved(theirs.state_dict()))
    group = mine.param_groups[0]
    assert group["nesterov"] is kw.get("nesterov", False)
    assert group["dampening"] == kw.get("dampening", 0)
    for k in range(4, 12):
        _step(k, a, theirs)
        _step(k, b, mine)
        _assert_same(a, theirs, b, mine, k)


@pytest.mark.parametrize("kw", CHECKPOINTED, ids=["nesterov", "dampening"])
def test_a_toolkit_checkpoint_carries_them_into_torch_optim(kw):
    """toolkit.torch.SGD's state_dict, through torch.save and torch.load(weights_only=True),
    into a torch.optim.SGD made with torch's defaults: its groups carry nesterov and
    dampening, and torch goes on as the toolkit's run does, bit for bit."""
    a, theirs, b, mine = _pair(torch.float64, lambda ps: torch.optim.SGD(ps, lr=0.5),
                               lambda ps: tt.SGD(ps, lr=0.05, convention="pytorch", **kw))
    for k in range(4):
        _step(k, b, mine)
    for p, q in zip(a, b):
        p.data.copy_(q.detach())
    sd = _saved(mine.state_dict())
    assert sd["param_groups"][0]["nesterov"] is kw.get("nesterov", False)
    assert sd["param_groups"][0]["dampening"] == kw.get("dampening", 0)
    theirs.load_state_dict(sd)
    assert theirs.param_groups[0]["nesterov"] is kw.get("nesterov", False)
    assert theirs.param_groups[0]["dampening"] == kw.get("dampening", 0)
    for k in range(4, 12):
        _step(k, a, theirs)
        _step(k, b, mine)
        _assert_same(a, theirs, b, mine, k)


def test_a_torch_nesterov_checkpoint_into_mxnets_sgd_is_refused_unchanged():
    """Under "mxnet" the toolkit's SGD cannot continue torch's Nesterov run: refused naming NAG,
    with the optimizer as it was."""
    a, theirs, b, mine = _pair(torch.float64,
                               lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9,
                                                          nesterov=True),
                               lambda ps: tt.SGD(ps, lr=0.05, momentum=0.9))
    _step(0, a, theirs)
    _step(0, b, mine)
    before = mine.state_dict()
    with pytest.raises(ValueError, match="nesterov=True is refused under convention 'mxnet'.*"
                                         "Nesterov momentum is NAG"):
        mine.load_state_dict(_saved(theirs.state_dict()))
    assert repr(mine.state_dict()) == repr(before)


def test_nag_is_unchanged():
    """toolkit.torch.NAG under "pytorch" is still torch's SGD(nesterov=True), and refuses
    dampening and nesterov=False as before."""
    a, theirs, b, mine = _pair(torch.float32,
                               lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9,
                                                          nesterov=True, weight_decay=1e-3),
                               lambda ps: tt.NAG(ps, lr=0.05, momentum=0.9, weight_decay=1e-3,
                                                 convention="pytorch"))
    for k in range(STEPS):
        _step(k, a, theirs)
        _step(k, b, mine)
        _assert_same(a, theirs, b, mine, k)
    for kw in (dict(dampening=0.1), dict(nesterov=False)):
        with pytest.raises(ValueError, match=f"{list(kw)[0]}=.* is refused"):
            tt.NAG([torch.nn.Parameter(torch.zeros(2))], lr=0.1, momentum=0.9, **kw)


def _torch_sgd(weight0, learning_rate, wd, rescale_grad, clip_gradient, momentum, nesterov,
               stale=False):
    """``make_step`` of torch.optim.SGD (``stale``: a Nesterov step that reads the buffer of
    the step before, a bug)."""
    p = torch.nn.Parameter(torch.tensor(weight0, dtype=torch.float64))
    opt = torch.optim.SGD([p], lr=learning_rate, momentum=momentum, weight_decay=wd,
                          nesterov=nesterov)

    def step(g):
        g = torch.tensor(g, dtype=torch.float64) * rescale_grad
        if clip_gradient is not None:
            g = g.clamp(-clip_gradient, clip_gradient)
        if stale:
            d = g + wd * p.detach()
            old = opt.state[p].get("momentum_buffer")
            opt.state[p]["momentum_buffer"] = d.clone() if old is None else momentum * old + d
            prev = torch.zeros_like(d) if old is None else old
            with torch.no_grad():
                p.sub_(learning_rate * (d + momentum * prev))
        else:
            p.grad = g
            opt.step()
        return p.detach().numpy().copy()
    return step


def test_the_oracle_verifies_nesterov_fixed_alone():
    """``fixed={"nesterov": True}`` pins torch's Nesterov while the oracle draws the momentum
    it needs (a hostile review: the fixed value was checked with momentum at its default 0
    and refused, so only ``--fixed nesterov=true --fixed momentum=0.9`` ran); a Nesterov step
    reading the stale buffer fails; a pair no draw can take is still refused, by name."""
    from toolkit import oracle
    r = oracle.verify(_torch_sgd, "sgd", convention="pytorch", fixed={"nesterov": True},
                      dtype="float64", examples=20)
    assert r.passed, r.summary
    stale = lambda w, **h: _torch_sgd(w, stale=True, **h)  # noqa: E731
    assert not oracle.verify(stale, "sgd", convention="pytorch", fixed={"nesterov": True},
                             dtype="float64", examples=20).passed
    with pytest.raises(ValueError, match=r"fixed \{'nesterov': True, 'momentum': 0.0\} is "
                                         r"refused by SGD under convention 'pytorch'"):
        oracle.verify(_torch_sgd, "sgd", convention="pytorch",
                      fixed={"nesterov": True, "momentum": 0.0})
