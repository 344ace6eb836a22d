"""toolkit.torch's API and torch's semantics (docs/torch.md): the classes from the registry (a
custom optimizer registered later included), ``create``, the keywords (MXNet's and PyTorch's,
through the one table, checked against the registry), param groups, and PyTorch's own optimizer
test patterns (an empty param list, an empty tensor, a None gradient, a frozen layer, param
groups with different options, a scheduler against its manual lr changes, the closure,
``zero_grad``, GradScaler with an inf step skipped, sparse embedding gradients, channels_last,
multi-precision, ``maximize``) applied to every registered optimizer where they apply."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed")
import toolkit.torch as tt  # noqa: E402
from toolkit import RowSparse, optimizer  # noqa: E402
from toolkit.optimizer import create, registry, specs  # noqa: E402
from toolkit.optimizers import aliases  # noqa: E402

NAMES = sorted(specs())


def opts(name, **extra):
    kw = dict(specs()[name].record)
    kw.update(specs()[name].fixed)
    kw.update(extra)
    return kw


def shape(name):
    return (3, 4)


def param(name, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.Parameter(torch.randn(shape(name), generator=g, dtype=dtype))


def grad_like(p, seed):
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5


def bits(t):
    return t.detach().numpy().tobytes()


# --- classes, create, keywords -----------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_every_registered_optimizer_is_a_torch_optimizer(name):
    klass = registry()[name]
    made = getattr(tt, klass.__name__)
    assert issubclass(made, torch.optim.Optimizer) and made.toolkit_class is klass
    assert made is getattr(tt, klass.__name__)  # made once
    assert type(tt.create(name.upper(), [param(name)], **opts(name))) is made
    assert klass.__name__ in dir(tt)


def test_unknown_names():
    with pytest.raises(AttributeError, match="has no attribute 'Adamm'"):
        tt.Adamm
    with pytest.raises(ValueError, match="unknown optimizer 'adamm'"):
        tt.create("adamm", [param("adam")])


class ProbeRow(NamedTuple):
    lr: float
    wd: float


class TorchProbe(optimizer.ElementwiseOptimizer):
    """w -= lr * (g + wd * w), with one accumulator (a custom optimizer registered by a test)."""
    state_names = ("acc",)
    row = ProbeRow

    def hyperparameters(self, index, t, lr, wd):
        return self.row(lr=lr, wd=wd)

    @staticmethod
    def rule(w, g, acc, hp):
        p = ProbeRow(*hp)
        acc = acc + g
        return w - p.lr * (g + p.wd * w), acc


def test_custom_optimizer_registered_later():
    optimizer.register(TorchProbe)
    try:
        p = param("x")
        w0 = p.detach().numpy().copy()
        opt = tt.TorchProbe([p], lr=0.5, weight_decay=0.1)
        assert tt.create("torchprobe", [param("x")], lr=0.5).toolkit_class is TorchProbe
        g = grad_like(p, 0)
        p.grad = g.clone()
        opt.step()
        ref = TorchProbe(learning_rate=0.5, wd=0.1)
        w = w0.copy()
        ref.update(0, w, g.numpy(), ref.create_state(0, w))
        assert bits(p) == w.tobytes()
        assert set(opt.state[p]) == {"acc", "step"}  # step: the count, as torch shows it
    finally:
        optimizer.unregister("torchprobe")
    with pytest.raises(AttributeError):
        tt.TorchProbe


@pytest.mark.parametrize("name", NAMES)
def test_torch_keyword_table_fits_the_registry(name):
    """The one table (aliases.TORCH_KEYWORDS through torch_keywords) maps each PyTorch keyword
    to keywords the optimizer takes; lr and weight_decay exist for every optimizer; a spec's
    torch_requires names a keyword of the table and a constructor flag."""
    klass = registry()[name]
    table = aliases.torch_keywords(klass)
    accepted = aliases.accepted_keywords(klass)
    assert set(table) <= set(aliases.TORCH_KEYWORDS)
    assert all(set(v) <= accepted for v in table.values())
    assert table["lr"] == ("learning_rate",) and table["weight_decay"] == ("wd",)
    if {"beta1", "beta2"} <= accepted:
        assert table["betas"] == ("beta1", "beta2")
    for key, flag in specs()[name].torch_requires.items():
        assert key in table and flag in accepted


@pytest.mark.parametrize("name", NAMES)
def test_torch_names_equal_mxnet_names(name):
    """PyTorch's spelling of an option that means the same as MXNet's (``meaning.Same``) gives
    the MXNet keys (and the numbers) of MXNet's spelling; the group shows both spellings."""
    from toolkit.torch import meaning
    klass = registry()[name]
    same = {k: r.names for k, (r, _) in meaning.rules(klass, "mxnet").items()
            if isinstance(r, meaning.Same)}
    mx = opts(name, learning_rate=0.05, wd=0.01)
    torch_kw = {} if "lr" in meaning.rules(klass, "mxnet") else {"lr": mx.pop("learning_rate")}
    if "weight_decay" in same:
        torch_kw["weight_decay"] = mx.pop("wd")
    if "betas" in same and "beta1" in mx and "beta2" in mx:
        torch_kw["betas"] = (mx.pop("beta1"), mx.pop("beta2"))
    if "eps" in same and all(n in mx for n in same["eps"]):  # Adafactor's is a pair
        values = tuple(mx.pop(n) for n in same["eps"])
        torch_kw["eps"] = values if len(values) > 1 else values[0]
    a = tt.create(name, [param(name)], **opts(name, learning_rate=0.05, wd=0.01))
    b = tt.create(name, [param(name)], **mx, **torch_kw)
    strip = lambda g: {k: v for k, v in g.items() if k != "params"}  # noqa: E731
    assert strip(a.param_groups[0]) == strip(b.param_groups[0])
    for key, names in same.items():
        shown = a.param_groups[0][key]
        assert shown == (tuple(a.param_groups[0][n] for n in names) if len(names) > 1
                         else a.param_groups[0][names[0]])


@pytest.mark.parametrize("name", NAMES)
def test_keywords_without_counterpart(name):
    """torch's keywords at their off values are taken; other values are refused naming the
    keyword and why; a keyword torch's namesake does not have is a TypeError that says why."""
    from toolkit.torch import meaning
    klass = registry()[name]
    rules = meaning.rules(klass, "mxnet")
    for key in ("nesterov", "amsgrad", "foreach", "dampening"):
        rule = rules.get(key, (None,))[0]
        if rule is None and key in aliases.accepted_keywords(klass):
            continue  # its own keyword of torch's spelling (Adam's amsgrad: tests/test_amsgrad.py)
        if rule is None:
            with pytest.raises(TypeError, match=f"no counterpart of '{key}'"):
                tt.create(name, [param(name)], **{key: True})
        elif isinstance(rule, meaning.OffOnly):
            tt.create(name, [param(name)], **{key: rule.off})
            with pytest.raises(ValueError, match=f"{key}=.* is refused"):
                tt.create(name, [param(name)], **{key: 0.5 if rule.off in (0, False) else 0})
        else:
            assert isinstance(rule, meaning.Moot)
            tt.create(name, [param(name)], **{key: True})
    if "momentum" not in rules and "momentum" not in aliases.accepted_keywords(klass):
        with pytest.raises(TypeError, match="no counterpart of 'momentum'"):
            tt.create(name, [param(name)], momentum=0.9)
    for key, flag in specs()[name].torch_requires.items():
        with pytest.raises(TypeError, match=f"takes {key} only with {flag}=True"):
            tt.create(name, [param(name)], **{key: 0.9, flag: False})
        tt.create(name, [param(name)], **{key: 0.9, flag: True})
    with pytest.raises(TypeError, match="did you mean 'lr'"):
        tt.create(name, [param(name)], lrr=0.1)
    with pytest.raises(TypeError, match="both give lr"):
        tt.create(name, [param(name)], lr=0.1, learning_rate=0.1)
    with pytest.raises(TypeError, match="takes no param_idx2name"):
        tt.create(name, [param(name)], param_idx2name={0: "w"})


def test_bad_values_name_the_option():
    """Named as given: torch's keyword first, MXNet's counterpart in parentheses (every
    keyword, every path: tests/test_torch_keyword_refusals.py)."""
    with pytest.raises(ValueError, match=r"^toolkit\.torch\.Adam\(\): betas\[0\] \(beta1\) "
                                         r"must be in \[0, 1\), got 1\.5$"):
        tt.Adam([param("adam")], betas=(1.5, 0.9))
    with pytest.raises(ValueError, match=r"^toolkit\.torch\.SGD\(\): weight_decay \(wd\) must "
                                         r"be >= 0, got -1\.0$"):
        tt.SGD([param("sgd")], weight_decay=-1.0)
    with pytest.raises(ValueError, match=r"^toolkit\.torch\.Adam\(\): beta1 must be in \[0, 1\), "
                                         r"got 1\.5$"):
        tt.Adam([param("adam")], beta1=1.5)  # MXNet's keyword: MXNet's name


# --- PyTorch's optimizer test patterns ---------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_empty_param_list(name):
    with pytest.raises(ValueError, match="empty parameter list"):
        tt.create(name, [], **opts(name))


@pytest.mark.parametrize("name", NAMES)
def test_empty_tensor_and_none_grad_and_frozen_layer(name):
    empty = torch.nn.Parameter(torch.zeros((0, 4)))
    live = param(name)
    frozen = param(name, seed=1)
    frozen.requires_grad_(False)
    opt = tt.create(name, [empty, live, frozen], **opts(name))
    before_frozen = bits(frozen)
    empty.grad = torch.zeros_like(empty)
    live.grad = grad_like(live, 0)
    opt.step()
    w1 = bits(live)
    live.grad = None  # a None gradient: skipped, its count does not advance
    opt.step()
    assert bits(live) == w1
    sd = opt.state_dict()
    assert sd["state"][1]["step"] == 1 and sd["state"][0]["step"] == 2
    assert 2 not in sd["state"] and bits(frozen) == before_frozen


@pytest.mark.parametrize("name", NAMES)
def test_param_groups_with_different_options(name):
    """Each group steps with its own options (MXNet's index numbering across the groups), and
    add_param_group takes PyTorch's names."""
    spec = specs()[name]
    a, b, c = param(name, 0), param(name, 1), param(name, 2)
    base = {"wd": 0.0, **opts(name)}  # MXNet's default, given (AdamW's torch default is 0.01)
    opt = tt.create(name, [{"params": [a]}, {"params": [b], "learning_rate": 0.05}],
                    learning_rate=0.01, **base)
    wd = 0.0 if "wd" in spec.fixed else 0.02
    # torch's weight_decay where it means MXNet's wd (meaning.Same), else MXNet's name
    from toolkit.torch import meaning
    rule = meaning.rules(registry()[name], "mxnet").get("weight_decay", (None,))[0]
    key = "weight_decay" if isinstance(rule, meaning.Same) else "wd"
    opt.add_param_group({"params": [c], key: wd, "learning_rate": 0.002})
    assert opt.param_groups[2]["wd"] == wd and opt.param_groups[1]["lr"] == 0.05
    refs = [create(name, learning_rate=lr, **dict(base, **extra))
            for lr, extra in ((0.01, {}), (0.05, {}), (0.002, {"wd": wd}))]
    ws = [p.detach().numpy().copy() for p in (a, b, c)]
    states = [r.create_state_multi_precision(i, w) for i, (r, w) in enumerate(zip(refs, ws))]
    for step in range(3):
        for i, p in enumerate((a, b, c)):
            p.grad = grad_like(p, 10 * step + i)
            refs[i].update(i, ws[i], p.grad.numpy().copy(), states[i])
        opt.step()
    for p, w in zip((a, b, c), ws):
        assert bits(p) == w.tobytes()


@pytest.mark.parametrize("name", [n for n in NAMES if specs()[n].uses_lr])
def test_torch_scheduler_equals_manual_lr_changes(name):
    a, b = param(name), param(name)
    sa = tt.create(name, [a], lr=0.1, **opts(name))
    sb = tt.create(name, [b], lr=0.1, **opts(name))
    sched = torch.optim.lr_scheduler.StepLR(sa, step_size=2, gamma=0.5)
    for step in range(5):
        a.grad = grad_like(a, step)
        b.grad = grad_like(b, step)
        sa.step()
        sb.step()
        sched.step()
        if step % 2 == 1:
            sb.param_groups[0]["lr"] *= 0.5
        assert sa.param_groups[0]["lr"] == sb.param_groups[0]["lr"]
    assert bits(a) == bits(b)


def test_both_schedulers_is_an_error():
    from toolkit import lr_scheduler
    p = param("sgd")
    opt = tt.SGD([p], lr_scheduler=lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1))
    torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    p.grad = grad_like(p, 0)
    w = bits(p)
    with pytest.raises(TypeError, match="both drive"):
        opt.step()
    assert bits(p) == w
    opt2 = tt.SGD([param("sgd")], lr_scheduler=lr_scheduler.FactorScheduler(step=2, base_lr=0.1))
    opt2.param_groups[0]["lr"] = 0.3
    opt2.param_groups[0]["params"][0].grad = grad_like(p, 0)
    with pytest.raises(TypeError, match="comes from the toolkit lr_scheduler"):
        opt2.step()


def test_closure_zero_grad_and_option_changes():
    p = param("adam")
    opt = tt.Adam([p], lr=0.01)
    seen = []

    def closure():
        seen.append(torch.is_grad_enabled())
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    with torch.no_grad():
        loss = opt.step(closure)
    assert seen == [True] and loss.item() > 0
    opt.zero_grad()
    assert p.grad is None
    opt.param_groups[0]["beta1"] = 0.5  # a changed option takes effect
    p.grad = grad_like(p, 0)
    opt.step()
    assert opt.toolkit_optimizers[0].beta1 == 0.5
    opt.param_groups[0]["beta1"] = 2.0  # a bad one: an error, nothing written
    w, sd = bits(p), opt.state_dict()["state"][0]["step"]
    with pytest.raises(ValueError, match="beta1"):
        opt.step()
    assert bits(p) == w and opt.state_dict()["state"][0]["step"] == sd
    assert opt.toolkit_optimizers[0].beta1 == 0.5
    with pytest.raises(ValueError, match="beta1"):  # still refused at the next step
        opt.step()
    opt.param_groups[0]["beta1"] = 0.6
    opt.step()
    assert opt.toolkit_optimizers[0].beta1 == 0.6


def test_an_error_leaves_every_parameter_as_it_was():
    """Every group is checked before any is written: FTRL's second group has learning rate 0,
    which it divides by."""
    a, b = param("ftrl", 0), param("ftrl", 1)
    opt = tt.Ftrl([{"params": [a]}, {"params": [b], "lr": 0.0}], lr=0.1)
    a.grad, b.grad = grad_like(a, 0), grad_like(b, 1)
    wa = bits(a)
    with pytest.raises(ValueError, match="must be > 0"):
        opt.step()
    assert bits(a) == wa and opt.state_dict()["state"] == {}
    emb = torch.nn.Embedding(3, 4, sparse=True)  # a sparse gradient Adamax has no update for
    opt = tt.Adamax([a, emb.weight], lr=0.1)
    emb(torch.tensor([1])).sum().backward()
    opt.param_groups[0]["beta1"] = 0.7  # a valid change, in a step that fails
    with pytest.raises(TypeError, match="parameter 1: Adamax has no row-sparse update"):
        opt.step()
    assert bits(a) == wa and opt.state_dict()["state"] == {}
    assert opt.toolkit_optimizers[0].beta1 == 0.9
    emb.weight.grad = None
    opt.step()  # the change is made at the next step that runs
    assert opt.toolkit_optimizers[0].beta1 == 0.7


@pytest.mark.parametrize("name", NAMES)
def test_gradscaler_skips_an_inf_step(name):
    p = param(name)
    ref = param(name)
    opt = tt.create(name, [p], **opts(name))
    ref_opt = tt.create(name, [ref], **opts(name))
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    g = grad_like(p, 0)
    scaler.scale((p * g).sum()).backward()
    assert torch.equal(p.grad, g * 4.0)
    scaler.step(opt)
    scaler.update()
    ref.grad = g.clone()
    ref_opt.step()
    assert bits(p) == bits(ref)
    w, n = bits(p), opt.state_dict()["state"][0]["step"]
    bad = g.clone()
    bad[0, 0] = float("inf")
    opt.zero_grad()
    scaler.scale((p * bad).sum()).backward()
    scaler.step(opt)  # inf found: the step is skipped
    scaler.update()
    assert bits(p) == w and opt.state_dict()["state"][0]["step"] == n
    assert scaler.get_scale() == 2.0


# --- sparse gradients --------------------------------------------------------------------------
def _lazy(name):
    try:
        return create(name, **opts(name)).row_sparse_mode(0) in ("lazy", "standard")
    except ValueError:
        return False


@pytest.mark.parametrize("name", [n for n in NAMES if _lazy(n)])
def test_sparse_embedding_takes_the_row_sparse_path(name):
    emb = torch.nn.Embedding(6, 4, sparse=True)
    w0 = emb.weight.detach().numpy().copy()
    opt = tt.create(name, emb.parameters(), **opts(name))
    ref = create(name, **opts(name))
    w = w0.copy()
    state = ref.create_state(0, w)
    for step, rows in enumerate(([1, 3, 1], [0, 5])):
        opt.zero_grad()
        emb(torch.tensor(rows)).sum().backward()
        assert emb.weight.grad.layout == torch.sparse_coo
        values = np.ones((len(rows), 4), np.float32)
        ref.update(0, w, RowSparse.from_rows(rows, values, w.shape), state)  # duplicates summed
        opt.step()
        assert bits(emb.weight) == w.tobytes()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("klass, kw", [
    ("SGD", {"momentum": 0.9}), ("SGD", {"momentum": 0.9, "nesterov": True}),
    ("SGD", {"momentum": 0.9, "dampening": 0.5}), ("SGD", {}),
    ("NAG", {"momentum": 0.9}), ("NAG", {"momentum": 0.0})], ids=str)
def test_a_sparse_gradient_under_pytorch_takes_torchs_sgd_step(klass, kw, dtype):
    """Under convention "pytorch" an embedding's sparse gradient steps as torch.optim.SGD
    steps it, bit for bit: every row its momentum buffer holds moves, not only the rows of
    the step's gradient (a hostile review: MXNet's lazy update, the default, was 0.45 off
    after 6 steps with momentum 0.9)."""
    torch_kw = {**kw, "nesterov": True} if klass == "NAG" and kw["momentum"] else kw
    runs = []
    for make in (lambda ps: torch.optim.SGD(ps, lr=0.1, **torch_kw),
                 lambda ps: getattr(tt, klass)(ps, lr=0.1, convention="pytorch", **kw)):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 3, sparse=True).to(dtype)
        opt = make(emb.parameters())
        for step in range(6):
            opt.zero_grad()
            emb(torch.tensor([2 * (step % 3), 2 * (step % 3) + 1])).sum().backward()
            assert emb.weight.grad.layout == torch.sparse_coo
            opt.step()
        runs.append(bits(emb.weight))
    assert runs[0] == runs[1]


@pytest.mark.parametrize("name", [n for n in NAMES if not _lazy(n)])
def test_sparse_gradient_without_a_lazy_update_is_an_error(name):
    emb = torch.nn.Embedding(6, 4, sparse=True)
    opt = tt.create(name, emb.parameters(), **opts(name))
    emb(torch.tensor([1, 2])).sum().backward()
    w = bits(emb.weight)
    with pytest.raises((TypeError, ValueError), match="row-sparse"):
        opt.step()
    assert bits(emb.weight) == w


@pytest.mark.parametrize("rows,claimed,match", [
    ([10], False, r"row 10, outside \[0, 10\)"), ([-1], False, "row -1, outside"),
    ([3, 2], True, "not strictly increasing")])
def test_a_bad_sparse_gradient_leaves_every_parameter_as_it_was(rows, claimed, match):
    """A sparse gradient's rows are checked with the rest of the step: one outside the table,
    or a tensor that claims to be coalesced with its rows out of order, is refused before the
    parameters before it in the group are written (their weights, states and counts stay)."""
    a = torch.nn.Parameter(torch.zeros(4, 2))
    table = torch.nn.Parameter(torch.zeros(10, 2))
    opt = tt.SparseAdam([a, table], lr=0.1)
    a.grad = torch.sparse_coo_tensor(torch.tensor([[1]]), torch.ones(1, 2), (4, 2))
    table.grad = torch.sparse_coo_tensor(torch.tensor([[4]]), torch.ones(1, 2), (10, 2))
    opt.step()
    before = [bits(a), bits(table)] + [{k: (v.clone() if isinstance(v, torch.Tensor) else v)
                                        for k, v in opt.state[p].items()} for p in (a, table)]
    a.grad = torch.sparse_coo_tensor(torch.tensor([[1]]), torch.ones(1, 2), (4, 2))
    table.grad = torch.sparse_coo_tensor(torch.tensor([rows]), torch.ones(len(rows), 2),
                                         (10, 2), is_coalesced=claimed)
    with pytest.raises(ValueError, match=match):
        opt.step()
    assert [bits(a), bits(table)] == before[:2]
    for p, was in zip((a, table), before[2:]):
        assert opt.state[p]["step"] == was["step"] == 1
        for k, v in was.items():
            if isinstance(v, torch.Tensor):
                assert torch.equal(opt.state[p][k], v), k


# --- memory order, precision, maximize ---------------------------------------------------------
def _elementwise(name):
    o = create(name, **opts(name))
    return o.state_like_weight and not o.takes_norms


@pytest.mark.parametrize("name", NAMES)
def test_channels_last(name):
    """An element-wise optimizer updates a channels_last parameter in its memory order: the
    numbers of a contiguous tensor holding its elements in that order (and, but for SGLD, whose
    draws follow the memory order, of the same values contiguous); a row or norm optimizer
    refuses it; one of matrices only refuses the 4-D parameter itself."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn((2, 3, 4, 5), generator=g)
    p = torch.nn.Parameter(x.clone().to(memory_format=torch.channels_last))
    q = torch.nn.Parameter(x.clone())
    r = torch.nn.Parameter(x.permute(0, 2, 3, 1).contiguous())  # the memory order, contiguous
    assert not p.is_contiguous()
    if specs()[name].matrix:  # GroupAdaGrad, Muon: a 4-D parameter is refused as it joins
        with pytest.raises(ValueError, match="2-D"):
            tt.create(name, [p], **opts(name))
        return
    op, oq = tt.create(name, [p], **opts(name)), tt.create(name, [q], **opts(name))
    orr = tt.create(name, [r], **opts(name))
    gr = torch.randn((2, 3, 4, 5), generator=g)
    p.grad = gr.clone().to(memory_format=torch.channels_last)
    q.grad = gr.clone()
    r.grad = gr.permute(0, 2, 3, 1).contiguous()
    if not _elementwise(name):
        with pytest.raises(ValueError, match="not contiguous"):
            op.step()
        return
    for _ in range(2):
        op.step()
        oq.step()
        orr.step()
    assert p.stride() == x.to(memory_format=torch.channels_last).stride()
    assert bits(p.permute(0, 2, 3, 1).contiguous()) == bits(r)
    assert all(s.stride() == p.stride() for n, s in op.state[p].items() if n != "step")
    if not specs()[name].noise:
        assert bits(p.contiguous()) == bits(q)


@pytest.mark.parametrize("name", NAMES)
def test_multi_precision_float16_keeps_a_float32_master(name):
    p = param(name, dtype=torch.float16)
    opt = tt.create(name, [p], multi_precision=True, **opts(name))
    p.grad = grad_like(p, 0)
    opt.step()
    master = opt.state[p]["weight32"]
    assert master.dtype == torch.float32
    assert bits(p) == master.to(torch.float16).numpy().tobytes()


def test_bfloat16_needs_multi_precision():
    p = torch.nn.Parameter(torch.randn(3, 4).to(torch.bfloat16))
    p.grad = torch.ones_like(p)
    with pytest.raises(TypeError, match="bfloat16"):
        tt.Adam([p], lr=0.01).step()
    opt = tt.Adam([p], lr=0.01, multi_precision=True)
    w32 = p.detach().float().numpy().copy()
    opt.step()
    ref = create("adam", learning_rate=0.01)
    ref.update(0, w32, np.ones((3, 4), np.float32), ref.create_state(0, w32))
    assert opt.state[p]["weight32"].numpy().tobytes() == w32.tobytes()
    assert torch.equal(p.detach(), torch.from_numpy(w32).to(torch.bfloat16))


@pytest.mark.parametrize("name", NAMES)
def test_maximize_steps_against_the_gradient(name):
    p, q = param(name), param(name)
    op = tt.create(name, [p], maximize=True, **opts(name))
    oq = tt.create(name, [q], **opts(name))
    g = grad_like(p, 0)
    p.grad, q.grad = g.clone(), -g
    op.step()
    oq.step()
    assert bits(p) == bits(q) and bits(p.grad) == bits(g)


# --- docs --------------------------------------------------------------------------------------
def test_module_docstring_example_runs():
    import doctest
    result = doctest.testmod(tt, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_public_names_are_documented():
    """toolkit.torch's public names are in docs/api.md and have docstrings (as
    tests/test_public_api.py checks the modules that need no torch)."""
    import inspect
    import os
    api = open(os.path.join(os.path.dirname(__file__), "..", "docs", "api.md"),
               encoding="utf-8").read()
    assert (tt.__doc__ or "").strip()
    for name in tt.__all__:
        assert f"`{name}`" in api, name
        obj = getattr(tt, name)
        assert inspect.getdoc(obj), name
    for name in ("step", "add_param_group", "state_dict", "load_state_dict",
                 "toolkit_optimizers"):
        assert inspect.getdoc(getattr(tt.TorchOptimizer, name)), name


def test_option_changes_by_torch_schedulers_and_layout_changes():
    """OneCycleLR cycles SGD's momentum through its group; an option change that would change
    the state already made is refused."""
    p = param("sgd")
    opt = tt.SGD([p], lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=10)
    for step in range(3):
        p.grad = grad_like(p, step)
        opt.step()
        assert opt.toolkit_optimizers[0].momentum == opt.param_groups[0]["momentum"]
        assert opt.toolkit_optimizers[0].lr == opt.param_groups[0]["lr"]
        sched.step()
    plain = tt.SGD([param("sgd")], lr=0.1)
    plain.param_groups[0]["params"][0].grad = grad_like(p, 0)
    plain.step()
    plain.param_groups[0]["momentum"] = 0.9
    with pytest.raises(ValueError, match="momentum cannot change from 0.0 to 0.9"):
        plain.step()


def test_a_groups_convention_edited_once_it_has_state_is_refused():
    """A group's convention edited after a step (as a refusal of nesterov under "mxnet" may
    tempt): refused at the next step with nothing changed, not MXNet's buffer read as torch's
    (a hostile review: the weight went to 0.7181 where a converted buffer gives 0.629)."""
    p = param("sgd")
    opt = tt.SGD([p], lr=0.1, momentum=0.9)
    p.grad = grad_like(p, 0)
    opt.step()
    before = p.detach().clone(), {k: v.clone() for k, v in opt.state[p].items()}
    opt.param_groups[0]["convention"] = "pytorch"
    opt.param_groups[0]["nesterov"] = True
    with pytest.raises(ValueError, match="param group 0: convention cannot change from "
                                         "'mxnet' to 'pytorch' once the group's parameters "
                                         "have state"):
        opt.step()
    assert torch.equal(p, before[0])
    assert opt.state[p].keys() == before[1].keys()
    assert all(torch.equal(opt.state[p][k], v) for k, v in before[1].items())
    assert opt.toolkit_optimizers[0].convention == "mxnet"
    assert not opt.toolkit_optimizers[0].nesterov


def test_a_rebound_parameter_is_stepped_in_its_new_memory():
    """``p.data = ...`` (new storage) between steps: the step writes the new storage, as an
    optimizer loaded with the same state over that storage does."""
    import copy
    p = param("adam")
    opt = tt.Adam([p], lr=0.01)
    p.grad = grad_like(p, 0)
    opt.step()
    saved = copy.deepcopy(opt.state_dict())
    fresh = torch.randn(p.shape, generator=torch.Generator().manual_seed(9))
    p.data = fresh.clone()
    p.grad = grad_like(p, 1)
    opt.step()
    q = torch.nn.Parameter(fresh.clone())
    ref = tt.Adam([q], lr=0.01)
    ref.load_state_dict(saved)
    q.grad = grad_like(q, 1)
    ref.step()
    assert bits(p) == bits(q)


def test_checks_after_a_first_step_still_run():
    """A parameter stepped before is checked again when its gradient changes kind: a sparse
    gradient where there was a dense one."""
    emb = torch.nn.Embedding(6, 4, sparse=True)
    opt = tt.Adamax(emb.parameters(), lr=0.1)
    emb.weight.grad = torch.ones(6, 4)
    opt.step()
    w = bits(emb.weight)
    opt.zero_grad()
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(TypeError, match="Adamax has no row-sparse update"):
        opt.step()
    assert bits(emb.weight) == w


def test_importing_toolkit_does_not_import_torch():
    import subprocess
    import sys
    code = ("import sys, toolkit, toolkit.optimizer, toolkit.trainer; "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_a_deleted_param_group_takes_its_optimizer_with_it():
    """``del opt.param_groups[0]``: the groups after it keep their own options and counts (as
    torch.optim's do), numbers equal to an optimizer made without the deleted group; a group
    put into ``param_groups`` by hand is refused, naming add_param_group."""
    torch.manual_seed(0)
    a, b = torch.nn.Parameter(torch.randn(3)), torch.nn.Parameter(torch.randn(4))
    b2 = torch.nn.Parameter(b.detach().clone())
    opt = tt.Adam([{"params": [a], "lr": 0.1}, {"params": [b], "lr": 0.001, "betas": (0.8, 0.9)}])
    ref = tt.Adam([{"params": [b2], "lr": 0.001, "betas": (0.8, 0.9)}])
    for p in (a, b, b2):
        p.grad = torch.ones_like(p)
    opt.step()
    ref.step()
    del opt.param_groups[0]
    assert len(opt.toolkit_optimizers) == 1 and opt.toolkit_optimizers[0].beta1 == 0.8
    for _ in range(2):
        opt.step()
        ref.step()
    assert torch.equal(b, b2)
    assert opt.state_dict()["state"][0]["step"] == 3
    opt.param_groups.append({"params": [a], "lr": 0.1})
    with pytest.raises(ValueError, match="param group 1 was put into param_groups directly; "
                                         r"add a group with opt.add_param_group"):
        opt.step()


def test_a_deleted_group_key_is_refused_naming_it():
    """torch's step fails on a group without ``lr`` (KeyError); toolkit.torch says which key
    is gone instead of stepping with the old value."""
    p = torch.nn.Parameter(torch.randn(3))
    p.grad = torch.ones(3)
    opt = tt.Adam([p], lr=0.01)
    opt.step()
    del opt.param_groups[0]["lr"]
    before = p.detach().clone()
    with pytest.raises(ValueError, match="param group 0 has no 'lr' any more"):
        opt.step()
    assert torch.equal(p, before)


def test_tensor_betas_are_taken_as_their_values():
    """torch takes one-element tensors for ``betas`` (and ``lr``): the same numbers as the
    floats they hold, at construction and set on a group."""
    w = torch.randn(3)
    ps = [torch.nn.Parameter(w.clone()) for _ in range(3)]
    beta = torch.tensor(0.8, dtype=torch.float64)
    opts_ = [tt.Adam([ps[0]], lr=0.01, betas=(beta, 0.99)),
             tt.Adam([ps[1]], lr=0.01, betas=(0.8, 0.99)), tt.Adam([ps[2]], lr=0.01)]
    for _ in range(2):
        for p, o in zip(ps, opts_):
            p.grad = torch.ones(3)
            o.step()
        opts_[2].param_groups[0]["betas"] = (beta, torch.tensor(0.99, dtype=torch.float64))
    assert torch.equal(ps[0], ps[1])
    assert opts_[2].toolkit_optimizers[0].beta1 == 0.8


def test_refusals_name_the_class_as_the_user_spelled_it():
    """torch's spelling (NAdam, RMSprop, Adagrad, Adadelta) or the toolkit's (Nadam)."""
    spelled = [(spec.torch, registry()[name].__name__) for name, spec in sorted(specs().items())
               if spec.torch and spec.torch != registry()[name].__name__ and
               hasattr(tt, spec.torch)]
    assert ("NAdam", "Nadam") in spelled
    for names in spelled:
        for class_name in names:
            with pytest.raises(ValueError, match=rf"^toolkit\.torch\.{class_name}\(\): "):
                getattr(tt, class_name)([torch.nn.Parameter(torch.ones(2))], lr=-1.0)


def test_a_direct_subclass_of_torch_optimizer_is_named_by_its_toolkit_class():
    class Mine(tt.TorchOptimizer):
        toolkit_class = optimizer.Adam
    p = torch.nn.Parameter(torch.ones(2))
    Mine([p], lr=0.1)
    with pytest.raises(ValueError, match=r"^toolkit\.torch\.Adam\(\): lr \(learning_rate\)"):
        Mine([p], lr=-1.0)
