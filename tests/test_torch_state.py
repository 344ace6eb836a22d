"""toolkit.torch's ``state_dict()`` / ``load_state_dict()`` (docs/torch.md): torch's layout,
read by ``torch.load(..., weights_only=True)``; deterministic; a round trip continues bit for
bit (every registered optimizer, shared host state such as Nadam's momentum schedule
included); a state that does not fit is a clear error with the optimizer unchanged."""
from __future__ import annotations

import copy
import io

import pytest

torch = pytest.importorskip("torch", reason="torch not installed")
import toolkit.torch as tt  # noqa: E402
from toolkit.optimizer import specs  # noqa: E402

NAMES = sorted(specs())


def opts(name, **extra):
    kw = dict(specs()[name].record)
    kw.update(specs()[name].fixed)
    kw.update(extra)
    return kw


def model(seed=0):
    torch.manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(4, 2)),
            torch.nn.Parameter(torch.randn(2, 3, dtype=torch.float64))]


def grads(params, step):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in params]


def train(opt, params, steps, start=0, skip=None):
    for s in range(start, start + steps):
        for k, (p, g) in enumerate(zip(params, grads(params, s))):
            p.grad = None if (s, k) == skip else g
        opt.step()


def saved(sd):
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def bits(params):
    return [p.detach().numpy().tobytes() for p in params]


def make(name, params):
    return tt.create(name, [{"params": params[:2]},
                            {"params": params[2:], "learning_rate": 0.02}], **opts(name))


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_continues_bit_for_bit(name):
    a = model()
    opt = make(name, a)
    train(opt, a, 3, skip=(1, 1))
    sd = saved(opt.state_dict())
    assert set(sd) == {"state", "param_groups", "toolkit"}
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2]]
    b = model(seed=5)
    with torch.no_grad():
        for p, q in zip(b, a):
            p.copy_(q)
    opt_b = make(name, b)
    opt_b.load_state_dict(sd)
    train(opt, a, 3, start=3)
    train(opt_b, b, 3, start=3)
    assert bits(a) == bits(b)
    assert repr(saved(opt.state_dict())) == repr(saved(opt_b.state_dict()))


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_is_deterministic(name):
    sds = []
    for _ in range(2):
        params = model()
        opt = make(name, params)
        train(opt, params, 2)
        buf = io.BytesIO()
        torch.save(opt.state_dict(), buf)
        sds.append(saved(opt.state_dict()))
    assert repr(sds[0]) == repr(sds[1])


def test_shared_host_state_is_saved():
    params = model()
    opt = tt.Nadam(params, lr=0.01)
    train(opt, params, 2)
    sd = saved(opt.state_dict())
    assert sd["toolkit"]["host"][0]["data"]["m_schedule"] == opt.toolkit_optimizers[0].m_schedule
    other = tt.Nadam(model(), lr=0.01)
    other.load_state_dict(sd)
    assert other.toolkit_optimizers[0].m_schedule == opt.toolkit_optimizers[0].m_schedule


def _unchanged(opt, params, fn, match, kind=ValueError):
    before = repr(saved(opt.state_dict()))
    w = bits(params)
    with pytest.raises(kind, match=match):
        fn()
    assert repr(saved(opt.state_dict())) == before and bits(params) == w


def test_a_state_that_does_not_fit_is_an_error_and_changes_nothing():
    params = model()
    opt = tt.Adam(params, lr=0.01)
    train(opt, params, 2)
    good = saved(opt.state_dict())

    bad = copy.deepcopy(good)
    bad["state"][1]["exp_avg"] = torch.zeros(5)
    _unchanged(opt, params, lambda: opt.load_state_dict(bad), "state 'exp_avg' is")
    bad = copy.deepcopy(good)
    del bad["state"][0]["exp_avg_sq"]
    _unchanged(opt, params, lambda: opt.load_state_dict(bad), "holds \\['exp_avg'\\]")
    bad = copy.deepcopy(good)
    bad["param_groups"][0]["beta1"] = 3.0
    _unchanged(opt, params, lambda: opt.load_state_dict(bad), "beta1")
    bad = copy.deepcopy(good)
    bad["toolkit"]["optimizer"] = "sgd"
    _unchanged(opt, params, lambda: opt.load_state_dict(bad), "saved by 'sgd'")
    bad = copy.deepcopy(good)
    bad["state"][0]["step"] = 99
    _unchanged(opt, params, lambda: opt.load_state_dict(bad), "step 99")
    # a torch.optim state_dict of the namesake crosses (tests/test_torch_crossing.py); one of
    # another optimizer, or with what cannot continue here, does not
    foreign = torch.optim.Adam(params, lr=0.01, amsgrad=True).state_dict()
    _unchanged(opt, params, lambda: opt.load_state_dict(foreign),
               "amsgrad=True is refused under convention 'mxnet'")
    foreign = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    for p, g in zip(params, grads(params, 0)):
        p.grad = g
    foreign.step()
    _unchanged(opt, params, lambda: opt.load_state_dict(foreign.state_dict()),
               "holds \\['momentum_buffer'\\]")
    smaller = tt.Adam(params[:2], lr=0.01)
    _unchanged(smaller, params, lambda: smaller.load_state_dict(good), "holds 3 parameters")
    nadam = saved(tt.Nadam(model(), lr=0.01).state_dict())
    nadam["toolkit"]["host"][0]["data"]["m_schedule"] = 7.0
    fresh = tt.Nadam(params, lr=0.01)
    _unchanged(fresh, params, lambda: fresh.load_state_dict(nadam), "m_schedule")


def test_loaded_options_take_effect():
    params = model()
    opt = tt.SGD(params, lr=0.1, momentum=0.9)
    train(opt, params, 1)
    sd = saved(opt.state_dict())
    sd["param_groups"][0]["lr"] = 0.5
    other = tt.SGD(model(), lr=0.1, momentum=0.9)
    other.load_state_dict(sd)
    assert other.param_groups[0]["lr"] == 0.5 and other.toolkit_optimizers[0].lr == 0.5


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_round_trip_with_a_float32_master(dtype):
    def params():
        torch.manual_seed(0)
        return [torch.nn.Parameter(torch.randn(3, 4).to(dtype)),
                torch.nn.Parameter(torch.randn(5).to(dtype))]
    a = params()
    opt = tt.Adam(a, lr=0.01, multi_precision=True)
    train(opt, a, 2)
    sd = saved(opt.state_dict())
    assert sd["state"][0]["weight32"].dtype == torch.float32
    b = params()
    with torch.no_grad():
        for p, q in zip(b, a):
            p.copy_(q)
    opt_b = tt.Adam(b, lr=0.01, multi_precision=True)
    opt_b.load_state_dict(sd)
    train(opt, a, 2, start=2)
    train(opt_b, b, 2, start=2)
    assert all(torch.equal(p, q) for p, q in zip(a, b))


@pytest.mark.parametrize("name", NAMES)
def test_deepcopy_of_model_and_optimizer_continues_on_its_own(name):
    """``copy.deepcopy((params, opt))`` (what checkpointing helpers do): the copy steps its own
    parameters and state, as the original does, and the original is untouched by it."""
    a = model()
    opt = make(name, a)
    train(opt, a, 2)
    b, opt_b = copy.deepcopy((a, opt))
    before = bits(a)
    train(opt_b, b, 2, start=2)
    assert bits(a) == before
    train(opt, a, 2, start=2)
    assert bits(a) == bits(b)
    assert repr(saved(opt.state_dict())) == repr(saved(opt_b.state_dict()))


def test_torch_state_dict_hooks_run():
    params = model()
    opt = tt.SGD(params, lr=0.1, momentum=0.9)
    seen = []
    opt.register_state_dict_pre_hook(lambda o: seen.append("pre"))
    opt.register_state_dict_post_hook(lambda o, sd: dict(sd, extra=1))
    opt.register_load_state_dict_pre_hook(
        lambda o, sd: {k: v for k, v in sd.items() if k != "extra"})
    opt.register_load_state_dict_post_hook(lambda o: seen.append("loaded"))
    sd = opt.state_dict()
    assert sd["extra"] == 1 and seen == ["pre"]
    opt.load_state_dict(sd)
    assert seen == ["pre", "loaded"]


@pytest.mark.parametrize("name", [n for n in NAMES if specs()[n].uses_lr])
def test_round_trip_with_a_toolkit_scheduler(name):
    """With a toolkit scheduler (MXNet's FactorScheduler: its state, the decayed base_lr and
    count, is saved too) the run continues bit for bit from MXNet's num_update across two param
    groups; a state saved with a scheduler needs one."""
    from toolkit import lr_scheduler

    def build(params):
        sched = lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1)
        return tt.create(name, [{"params": params[:2]}, {"params": params[2:]}], lr=0.1,
                         lr_scheduler=sched, **opts(name))
    a = model()
    opt = build(a)
    train(opt, a, 5, skip=(1, 1))
    sd = saved(opt.state_dict())
    assert sd["toolkit"]["lr_scheduler"]["base_lr"] == 0.025
    b = model(seed=5)
    with torch.no_grad():
        for p, q in zip(b, a):
            p.copy_(q)
    opt_b = build(b)
    opt_b.load_state_dict(sd)
    train(opt, a, 4, start=5)
    train(opt_b, b, 4, start=5)
    assert bits(a) == bits(b)
    plain = make(name, model())
    _unchanged(plain, model(), lambda: plain.load_state_dict(sd), "give this optimizer the same")


def test_the_users_own_keys_in_a_state_entry_stay_and_are_never_read():
    """torch.optim keeps keys a user adds to ``opt.state[p]``: so does toolkit.torch, through
    steps, ``state_dict()``/``load_state_dict()`` and a deepcopy, and the numbers are those of
    a run without them; a missing slot of the optimizer's own is still refused."""
    params, twin = model(), model()
    opt, ref = tt.Adam(params, lr=0.01), tt.Adam(twin, lr=0.01)
    train(opt, params, 1)
    train(ref, twin, 1)
    opt.state[params[0]]["note"] = "mine"
    opt.state[params[0]]["ema"] = torch.zeros(3, 4)
    train(opt, params, 2, start=1)
    train(ref, twin, 2, start=1)
    assert all(torch.equal(a, b) for a, b in zip(params, twin))
    assert sorted(opt.state[params[0]]) == ["ema", "exp_avg", "exp_avg_sq", "note", "step"]
    sd = opt.state_dict()
    assert sd["state"][0]["note"] == "mine"
    again = tt.Adam(params, lr=0.01)
    again.load_state_dict(sd)
    assert again.state[params[0]]["note"] == "mine"
    copied = copy.deepcopy(again)
    assert copied.state[copied.param_groups[0]["params"][0]]["note"] == "mine"
    train(again, params, 1, start=3)
    train(ref, twin, 1, start=3)
    assert all(torch.equal(a, b) for a, b in zip(params, twin))
    del again.state[params[0]]["exp_avg"]
    with pytest.raises(ValueError, match=r"holds \['ema', 'exp_avg_sq', 'note'\]; this "
                                         r"optimizer keeps \['exp_avg', 'exp_avg_sq'\]"):
        train(again, params, 1, start=4)


def test_opt_state_shows_each_parameters_step_as_torch_does():
    """``opt.state[p]["step"]`` is the parameter's count as torch's 0-d float32 tensor, per
    parameter (one skipped step shows), in ``keys()``/``items()``/``in``, equal to torch.optim's
    after the same steps; an emptied entry shows none, and the state_dict has the count once."""
    params, twin = model(), model()
    opt = tt.Adam(params, lr=0.01, convention="pytorch")
    ref = torch.optim.Adam(twin, lr=0.01)
    train(opt, params, 3, skip=(1, 2))
    train(ref, twin, 3, skip=(1, 2))
    for p, q in zip(params, twin):
        shown, want = opt.state[p]["step"], ref.state[q]["step"]
        assert shown.dtype == want.dtype == torch.float32 and shown.dim() == 0
        assert shown.item() == want.item()
        assert "step" in opt.state[p] and sorted(opt.state[p]) == sorted(ref.state[q])
        assert dict(opt.state[p].items())["step"].item() == want.item()
        assert opt.state[p].get("step").item() == want.item()
    assert [v["step"] for v in opt.state_dict()["state"].values()] == [3, 3, 2]
    opt.state[params[0]].clear()
    assert "step" not in opt.state[params[0]] and len(opt.state[params[0]]) == 0


def test_nadams_per_parameter_products_round_trip_under_pytorch():
    """Under convention "pytorch" (toolkit.torch.NAdam's default) each parameter keeps its own
    ``mu_product`` (torch's): saved per index, and a round trip continues bit for bit; a host
    state in the other convention's layout (one product per group) is refused, nothing
    changed."""
    a = model()
    opt = tt.NAdam([{"params": a[:2]}, {"params": a[2:], "lr": 0.02}], lr=0.01)
    train(opt, a, 3, skip=(1, 1))
    sd = saved(opt.state_dict())
    inner = opt.toolkit_optimizers
    assert [h["data"]["m_schedule"] for h in sd["toolkit"]["host"]] == \
        [[[0, inner[0].mu_product[0]], [1, inner[0].mu_product[1]]],
         [[2, inner[1].mu_product[2]]]]
    assert inner[0].mu_product[0] != inner[0].mu_product[1]   # index 1 skipped a step
    assert [sd["state"][k]["mu_product"].item() for k in range(3)] == \
        [inner[0].mu_product[0], inner[0].mu_product[1], inner[1].mu_product[2]]
    b = model(seed=5)
    with torch.no_grad():
        for p, q in zip(b, a):
            p.copy_(q)
    opt_b = tt.NAdam([{"params": b[:2]}, {"params": b[2:], "lr": 0.02}], lr=0.01)
    opt_b.load_state_dict(sd)
    train(opt, a, 3, start=3)
    train(opt_b, b, 3, start=3)
    assert bits(a) == bits(b)
    assert repr(saved(opt.state_dict())) == repr(saved(opt_b.state_dict()))
    for bad in (0.5, [[0, 0.5], [0, 0.25]], [[0, 2.0]]):
        other = copy.deepcopy(sd)
        other["toolkit"]["host"][0]["data"]["m_schedule"] = bad
        fresh = tt.NAdam([{"params": b[:2]}, {"params": b[2:], "lr": 0.02}], lr=0.01)
        _unchanged(fresh, b, lambda: fresh.load_state_dict(other),
                   "list of \\[index, mu_product\\]")


def test_a_cleared_nadam_state_starts_its_product_afresh():
    """Clearing ``opt.state`` (or deleting an entry) starts that parameter's state afresh as
    torch.optim starts one it does not find: NAdam's per-parameter ``mu_product`` at 1.0 too
    (it carried over: the next steps were 4e-3 off torch's)."""
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(3, 4, dtype=torch.float64)),
          torch.nn.Parameter(torch.randn(4, dtype=torch.float64))]
    qs = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    theirs = torch.optim.NAdam(ps, lr=1e-2)
    mine = tt.NAdam(qs, lr=1e-2, convention="pytorch")

    def both(steps, start):
        for s in range(start, start + steps):
            for params, opt in ((ps, theirs), (qs, mine)):
                for p, g in zip(params, grads(params, s)):
                    p.grad = g
                opt.step()
    both(3, 0)
    theirs.state.clear()
    mine.state.clear()
    both(2, 3)
    del theirs.state[ps[0]]
    del mine.state[qs[0]]
    both(2, 5)
    for p, q in zip(ps, qs):
        assert torch.equal(p, q)
    assert float(mine.state_dict()["state"][0]["mu_product"]) == \
        float(theirs.state[ps[0]]["mu_product"])


def test_a_cleared_state_keeps_host_values_torch_keeps_per_group():
    """Only what torch's namesake keeps per parameter restarts with a cleared state (NAdam's
    mu_product): LBSGD's accumulated gradients and their count are kept, as if the entry had
    not been deleted (a first fix forgot the count and kept the sum)."""
    def host_after(delete):
        p = torch.nn.Parameter(torch.ones(3))
        opt = tt.create("lbsgd", [p], lr=0.1, batch_scale=2, warmup_epochs=0)
        for s in range(3):
            p.grad = torch.full_like(p, 0.1 * (s + 1))
            opt.step()
        if delete:
            del opt.state[p]
        p.grad = torch.full_like(p, 0.5)
        opt.step()
        data, arrays = opt.toolkit_optimizers[0].host_state()
        return data, {k: v.tolist() for k, v in arrays.items()}
    assert host_after(True) == host_after(False)
