"""Checkpoints cross between torch.optim and toolkit.torch (toolkit/torch/crossing.py,
docs/torch.md): a torch.optim state_dict loads into the toolkit.torch namesake and the reverse,
through torch.save / torch.load(weights_only=True), states by name (the same quantities under
torch's names, SGD's buffer converted), options by the keyword table; a run continues; what
cannot continue is refused with the optimizer unchanged."""
from __future__ import annotations

import io
import warnings

import pytest

torch = pytest.importorskip("torch", reason="toolkit.torch needs PyTorch")

import toolkit.torch as tt  # noqa: E402
from toolkit.optimizer import registry, specs  # noqa: E402
from toolkit.oracle.frameworks.torch import gradient_for  # noqa: E402
from toolkit.torch import crossing  # noqa: E402

#: a namesake pair and options that both take (the toolkit side in MXNet's default convention)
PAIRS = [(n, specs()[n].torch) for n in sorted(specs()) if specs()[n].torch]


def _model(name=None):
    """A linear layer; without its bias for an optimizer of matrices only (Muon: torch's
    refuses a 1-D parameter too)."""
    torch.manual_seed(0)
    bias = name is None or not specs()[name].matrix
    return torch.nn.Linear(4, 3, bias=bias).double()


X = torch.randn(8, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def _train(model, opt, steps):
    """``steps`` steps of ``opt`` on the model's loss; a class that takes sparse gradients only
    (SparseAdam, torch's and the toolkit's alike) is handed each as a sparse one holding every
    row (``gradient_for``)."""
    for _ in range(steps):
        opt.zero_grad()
        model(X).square().sum().backward()
        for p in model.parameters():
            p.grad = gradient_for(type(opt).__name__, p.grad)
        opt.step()


def _saved(sd):
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def _torch_kwargs(name):
    """Options both sides take: SGD's momentum; AdaDelta's lr at 1.0 (MXNet's has none)."""
    from toolkit.torch import meaning
    lr = meaning.rules(registry()[name], "mxnet").get("lr", (None,))[0]
    return {**({"momentum": 0.9} if specs()[name].torch == "SGD" else {}),
            "lr": lr.off if lr is not None else 1e-2}


def _toolkit(name, params, **kw):
    klass = registry()[name]
    extra = {"momentum": 0.9} if specs()[name].torch == "SGD" else {}
    return tt.optimizer_class(klass)(params, **{**extra, **kw})


@pytest.mark.parametrize("name,torch_name", PAIRS)
def test_a_torch_checkpoint_loads_and_the_run_goes_on(name, torch_name):
    """torch.optim's state_dict into the namesake: each state is torch's (by name; SGD's
    buffer as MXNet's -lr*buf), the counts are torch's steps, and the run steps on."""
    a = _model(name)
    nesterov = {"nesterov": True} if specs()[name].torch_flags.get("nesterov") else {}
    theirs = getattr(torch.optim, torch_name)(a.parameters(), **_torch_kwargs(name),
                                              **nesterov)
    _train(a, theirs, 3)
    b = _model(name)
    b.load_state_dict(a.state_dict())
    mine = _toolkit(name, b.parameters())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an eps not taken is said (test below)
        mine.load_state_dict(_saved(theirs.state_dict()))
    assert mine.param_groups[0]["lr"] == _torch_kwargs(name)["lr"]
    sd = mine.state_dict()
    for k, entry in theirs.state_dict()["state"].items():
        for key, value in entry.items():
            if key in ("step", "mu_product"):
                assert float(sd["state"][k][key]) == float(value)
            elif (torch_name, key) in crossing.SCALED:  # -lr*buf and back: two roundings
                torch.testing.assert_close(sd["state"][k][key], value, rtol=2 ** -51, atol=0)
            else:
                assert torch.equal(sd["state"][k][key], value), (k, key)
    _train(b, mine, 2)
    assert all(torch.isfinite(p).all() for p in b.parameters())


@pytest.mark.parametrize("name,torch_name", PAIRS)
def test_a_toolkit_checkpoint_loads_into_torch_optim(name, torch_name):
    a = _model(name)
    lr = _torch_kwargs(name)["lr"]
    mine = _toolkit(name, a.parameters(), lr=lr)
    _train(a, mine, 3)
    b = _model(name)
    nesterov = {"nesterov": True} if specs()[name].torch_flags.get("nesterov") else {}
    theirs = getattr(torch.optim, torch_name)(b.parameters(), **{
        **_torch_kwargs(name), "lr": 0.123}, **nesterov)
    theirs.load_state_dict(_saved(mine.state_dict()))
    assert theirs.param_groups[0]["lr"] == lr
    mx = mine.state_dict()["state"]
    for k, entry in theirs.state_dict()["state"].items():
        for key, value in entry.items():
            if key in mx[k]:
                ref = mx[k][key]
                if not isinstance(value, torch.Tensor):  # SparseAdam's int step
                    assert type(ref) is type(value) and ref == value, (k, key)
                    continue
                assert torch.equal(torch.as_tensor(ref, dtype=value.dtype), value), (k, key)
    _train(b, theirs, 2)  # torch's own step runs from it


def test_adam_crosses_both_ways_and_continues_torchs_run():
    """Under convention="guide" (torch's Adam) a run moved from torch.optim continues as
    torch's own would, and back: float64, to the last bits of rounding."""
    a, b = _model(), _model()
    theirs = torch.optim.Adam(a.parameters(), lr=1e-2)
    _train(a, theirs, 3)
    b.load_state_dict(a.state_dict())
    mine = tt.Adam(b.parameters(), convention="guide")
    mine.load_state_dict(_saved(theirs.state_dict()))
    _train(a, theirs, 3)
    _train(b, mine, 3)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-15)
    back = torch.optim.Adam(a.parameters(), lr=1e-3)
    a.load_state_dict(b.state_dict())
    back.load_state_dict(_saved(mine.state_dict()))
    _train(a, back, 3)
    _train(b, mine, 3)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-15)


def test_sgd_buffer_is_converted():
    a = _model()
    theirs = torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9)
    _train(a, theirs, 2)
    mine = tt.SGD(_model().parameters(), lr=0.5, momentum=0.9)
    mine.load_state_dict(_saved(theirs.state_dict()))
    buf = theirs.state[a.weight]["momentum_buffer"]
    assert torch.equal(mine.state_dict()["state"][0]["mom"], buf * -0.1)


def test_what_cannot_continue_is_refused_and_an_eps_not_taken_is_said():
    a = _model()
    theirs = torch.optim.Adam(a.parameters(), lr=1e-2, amsgrad=True)
    _train(a, theirs, 1)
    mine = tt.Adam(_model().parameters())
    before = mine.state_dict()
    # AMSGrad crosses under torch's convention (tests/test_amsgrad.py), not under MXNet's
    with pytest.raises(ValueError, match="amsgrad=True is refused under convention 'mxnet': "
                                         "MXNet 1.9.1 has no AMSGrad.*the optimizer is "
                                         "unchanged"):
        mine.load_state_dict(_saved(theirs.state_dict()))
    assert repr(mine.state_dict()) == repr(before)
    theirs = torch.optim.Adam(a.parameters(), lr=1e-2, eps=1e-6)
    _train(a, theirs, 1)
    with pytest.warns(UserWarning, match="eps=1e-06 is not taken"):
        mine.load_state_dict(_saved(theirs.state_dict()))
    assert mine.param_groups[0]["epsilon"] == 1e-8  # MXNet's own, as the warning says


def test_a_file_saved_with_mxnet_slot_names_still_loads():
    a = _model()
    mine = tt.Adam(a.parameters(), lr=1e-2)
    _train(a, mine, 2)
    sd = _saved(mine.state_dict())
    for entry in sd["state"].values():
        entry["mean"], entry["var"] = entry.pop("exp_avg"), entry.pop("exp_avg_sq")
        entry["step"] = int(entry["step"])
    again = tt.Adam(_model().parameters(), lr=1e-2)
    again.load_state_dict(sd)
    assert torch.equal(again.state_dict()["state"][0]["exp_avg"],
                       mine.state_dict()["state"][0]["exp_avg"])


def test_tables_name_torch_facts():
    from toolkit.torch import meaning
    namesakes = {s.torch for s in specs().values() if s.torch}
    derived = [(s.torch, key) for s in specs().values() for key in s.torch_derived]
    for torch_name, key in list(crossing.SCALED) + list(crossing.HOST) + derived:
        assert torch_name in namesakes
        a = _model()
        opt = getattr(torch.optim, torch_name)(a.parameters(), lr=0.1, **(
            {"momentum": 0.9, "centered": True} if torch_name == "RMSprop" else
            {"momentum": 0.9} if torch_name == "SGD" else {}))
        _train(a, opt, 1)
        assert key in opt.state[a.weight], (torch_name, key)
    assert meaning.equal(False, False) and not meaning.equal(0, False)


@pytest.mark.parametrize("nesterov", [False, True])
def test_torch_sgd_checkpoint_continues_exactly_under_pytorch(nesterov):
    """torch's SGD keeps no step: its checkpoint's momentum buffer was taken with count 0, so
    the next step rebuilt the buffer from the gradient (0.15 apart after three steps)."""
    a = _model()
    theirs = torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9, nesterov=nesterov)
    _train(a, theirs, 3)
    b = _model()
    b.load_state_dict(a.state_dict())
    mine = (tt.NAG if nesterov else tt.SGD)(b.parameters(), lr=0.1, momentum=0.9,
                                             convention="pytorch")
    mine.load_state_dict(_saved(theirs.state_dict()))
    _train(a, theirs, 3)
    _train(b, mine, 3)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def _nadam_groups(model):
    """Two param groups with options of their own (torch's keywords)."""
    return [{"params": [model.weight], "lr": 0.01},
            {"params": [model.bias], "lr": 0.02, "weight_decay": 0.1,
             "betas": (0.8, 0.99)}]


def test_torch_nadam_checkpoint_continues_exactly_under_pytorch():
    """torch.optim.NAdam's state_dict (per-parameter ``mu_product``, float32) into
    ``toolkit.torch.NAdam`` (convention "pytorch", its default): the run continues as torch's
    own, bit for bit in float64 (torch's root taken as IEEE's); and the toolkit's state_dict is
    torch's: loaded into torch.optim.NAdam it continues exactly as torch's own checkpoint of
    the same run does."""
    from test_pytorch_convention import IEEESqrt
    a, b = _model(), _model()
    theirs = torch.optim.NAdam(_nadam_groups(a))
    with IEEESqrt():
        _train(a, theirs, 3)
    b.load_state_dict(a.state_dict())
    mine = tt.NAdam(_nadam_groups(b))
    assert [g["convention"] for g in mine.param_groups] == ["pytorch", "pytorch"]
    mine.load_state_dict(_saved(theirs.state_dict()))
    with IEEESqrt():
        _train(a, theirs, 3)
        _train(b, mine, 3)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    ours, torchs = mine.state_dict()["state"], theirs.state_dict()["state"]
    for k, entry in torchs.items():
        assert entry["mu_product"].dtype == ours[k]["mu_product"].dtype == torch.float32
        for key in ("step", "mu_product", "exp_avg", "exp_avg_sq"):
            assert torch.equal(ours[k][key], entry[key]), (k, key)
    # the reverse: each checkpoint into a fresh torch.optim.NAdam, which goes on the same way
    runs = []
    for sd in (mine.state_dict(), theirs.state_dict()):
        c = _model()
        c.load_state_dict(b.state_dict())
        back = torch.optim.NAdam(_nadam_groups(c))
        back.load_state_dict(_saved(sd))
        with IEEESqrt():
            _train(c, back, 3)
        runs.append(list(c.parameters()))
    for p, q in zip(*runs):
        assert torch.equal(p, q)


def test_a_torch_nadam_checkpoint_keeps_a_product_per_parameter():
    """Parameters of one group with different counts (one without a gradient at a step) keep
    products of their own across the crossing; a parameter torch holds no state for starts
    afresh (its product 1.0), whatever this optimizer held for it before."""
    a = _model()
    theirs = torch.optim.NAdam(a.parameters(), lr=0.01)
    _train(a, theirs, 2)
    a.bias.grad = None
    a.weight.grad = torch.ones_like(a.weight)
    theirs.step()
    products = {k: e["mu_product"].item() for k, e in theirs.state_dict()["state"].items()}
    assert products[0] != products[1]
    mine = tt.NAdam(_model().parameters(), lr=0.01)
    mine.load_state_dict(_saved(theirs.state_dict()))
    assert {k: e["mu_product"].item() for k, e in mine.state_dict()["state"].items()} == \
        products
    c = _model()
    fresh = torch.optim.NAdam([c.weight], lr=0.01)
    _train(c, fresh, 1)
    sd = fresh.state_dict()
    sd["param_groups"][0]["params"] = [0, 1]
    mine.load_state_dict(_saved(sd))
    host = mine.state_dict()["toolkit"]["host"][0]["data"]["m_schedule"]
    assert host == [[0, sd["state"][0]["mu_product"].item()]]


@pytest.mark.parametrize("convention", ["pytorch", "mxnet"])
def test_shared_keywords_cross_where_they_mean_torchs(convention):
    """A torch keyword that is the optimizer's own keyword of the same spelling
    (``meaning.SHARED``) crosses where it means torch's: SGD's ``momentum`` always (a toolkit
    SGD made without one takes torch's 0.9 and its buffer; under "pytorch" the run continues
    bit for bit), AdaGrad's ``eps`` under "pytorch" only; under "mxnet" it is not taken, and
    that is said (it was dropped silently: the run went on as plain SGD, or with eps 1e-10)."""
    a, b, c = _model(), _model(), _model()
    theirs = torch.optim.SGD(a.parameters(), lr=1e-2, momentum=0.9)
    _train(a, theirs, 3)
    b.load_state_dict(a.state_dict())
    c.load_state_dict(a.state_dict())
    mine = tt.SGD(b.parameters(), lr=1e-2, convention=convention)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mine.load_state_dict(_saved(theirs.state_dict()))
    assert mine.param_groups[0]["momentum"] == 0.9
    # under "mxnet" the run is MXNet's (its scalars in float32): as one made with momentum=0.9
    given = tt.SGD(c.parameters(), lr=1e-2, momentum=0.9, convention=convention)
    given.load_state_dict(_saved(theirs.state_dict()))
    _train(a, theirs, 3)
    _train(b, mine, 3)
    _train(c, given, 3)
    for p, q, r in zip(a.parameters(), b.parameters(), c.parameters()):
        assert torch.equal(q, r)
        if convention == "pytorch":
            assert torch.equal(p, q)

    a = _model()
    theirs = torch.optim.Adagrad(a.parameters(), lr=0.1, eps=1e-2)
    _train(a, theirs, 2)
    mine = tt.Adagrad(_model().parameters(), convention=convention)
    if convention == "pytorch":
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            mine.load_state_dict(_saved(theirs.state_dict()))
        assert mine.param_groups[0]["eps"] == 1e-2
    else:
        with pytest.warns(UserWarning, match=r"eps=0\.01 is not taken \(MXNet's eps, inside the "
                                             r"root.*the group keeps its own eps=1e-10"):
            mine.load_state_dict(_saved(theirs.state_dict()))
        assert mine.param_groups[0]["eps"] == 1e-10


def test_adamax_under_pytorch_shows_and_saves_torchs_eps():
    """toolkit.torch.Adamax under "pytorch" shows torch's default eps (1e-8, as the update
    uses it), not None: torch.optim.Adamax loads its state_dict and steps (it failed adding
    None)."""
    a = _model()
    mine = tt.Adamax(a.parameters(), lr=1e-2, convention="pytorch")
    assert mine.param_groups[0]["eps"] == 1e-8
    _train(a, mine, 2)
    b = _model()
    b.load_state_dict(a.state_dict())
    theirs = torch.optim.Adamax(b.parameters(), lr=1e-2)
    theirs.load_state_dict(_saved(mine.state_dict()))
    assert theirs.param_groups[0]["eps"] == 1e-8
    _train(a, mine, 2)
    _train(b, theirs, 2)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    # eps=None given (the toolkit's "torch's default"): torch's number in the state_dict
    none = tt.create("adamax", _model().parameters(), lr=1e-2, convention="pytorch", eps=None)
    assert none.state_dict()["param_groups"][0]["eps"] == 1e-8
