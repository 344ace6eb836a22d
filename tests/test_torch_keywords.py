"""torch's keywords in ``toolkit.torch`` mean what they mean in torch, or are refused
(``toolkit/torch/meaning.py``), row by row of the published table (docs/torch.md): at
construction and as live param-group keys set at any time; the table in the docs is the one the
code makes; torch's call patterns (positional lr, a tensor lr, torch's keywords at their off
values) are taken."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="toolkit.torch needs PyTorch")

import toolkit.torch as tt  # noqa: E402
from toolkit.optimizer import create, registry, specs  # noqa: E402
from toolkit.torch import meaning  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs" / "torch.md"
NAMES = sorted(specs())
ROWS = [(name, key) for name in NAMES
        for key in meaning.rules(registry()[name], "mxnet")]


def _opts(name):
    kw = dict(specs()[name].record)
    kw.update(specs()[name].fixed)
    kw.setdefault("wd", 0.0)
    return kw


def _param(seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.Parameter(torch.randn(3, 4, generator=g, dtype=dtype))


def _grad(p, k):
    g = torch.Generator().manual_seed(100 + k)
    return torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5


def _rule(name, key):
    return meaning.rules(registry()[name], "mxnet")[key][0]


def _other_value(rule, current, klass):
    """A value of a Same key other than ``current`` that is still valid (for a choice, the next
    one: Muon's ``adjust_lr_fn``)."""
    domain = klass.hyperparameter_domains().get(rule.names[0])
    if domain is not None and domain.kind == "choice":
        return next(c for c in domain.choices if c != current)
    if isinstance(current, tuple):  # halved below 1, grown above (Rprop's etas: 0 < a < 1 < b)
        return tuple(0.5 * v if v < 1 else 1.5 * v for v in current)
    if isinstance(current, bool):
        return not current
    if current is not None and current >= 1:  # grown (Adafactor's d: at least 1)
        return current * 2.0
    return 0.05 if not current else current * 0.5


@pytest.mark.parametrize("name,key", ROWS, ids=[f"{n}-{k}" for n, k in ROWS])
def test_each_torch_keyword_row(name, key):
    """One row of the table: a Same key sets its MXNet keys (at construction and on the group,
    the next step then equals an optimizer built with those MXNet values); an OffOnly or Moot
    key takes its off value and refuses another, at construction and at the step, nothing
    changed; a Converted key's MXNet value follows the formula at every step."""
    rule = _rule(name, key)
    klass = registry()[name]
    p = _param()
    opt = tt.create(name, [p], **_opts(name))
    group = opt.param_groups[0]
    assert key in group  # torch's key can be read
    if isinstance(rule, meaning.Same) and set(rule.names) & set(specs()[name].fixed):
        # the MXNet key takes one value (GroupAdaGrad's wd: 0): another is the optimizer's
        # refusal at the step, nothing changed
        p.grad = _grad(p, 0)
        before = p.detach().clone()
        group[key] = _other_value(rule, group[key], klass)
        with pytest.raises(ValueError, match=rule.names[0]):
            opt.step()
        assert torch.equal(p.detach(), before)
    elif isinstance(rule, meaning.Same):
        new = _other_value(rule, group[key], klass)
        mx = rule.to_mxnet(key, new)
        p.grad = _grad(p, 0)
        opt.step()
        group[key] = new
        p.grad = _grad(p, 1)
        opt.step()
        for n, v in mx.items():
            assert group[n] == v  # the MXNet spelling shows it
        # the same numbers as a toolkit optimizer built with the MXNet values from the start
        # of step 2 (both take the first step with the old value)
        ref = create(name, **_opts(name))
        w = _param().detach().numpy().copy()
        state = ref.create_state_multi_precision(0, w)
        ref.update(0, w, _grad(p, 0).numpy().copy(), state)
        for n, v in mx.items():
            setattr(ref, meaning_attr(klass, n), v)
        ref.update(0, w, _grad(p, 1).numpy().copy(), state)
        assert p.detach().numpy().tobytes() == w.tobytes()
    elif isinstance(rule, (meaning.OffOnly, meaning.Moot)):
        off = rule.off if isinstance(rule, meaning.OffOnly) else group[key]
        tt.create(name, [_param()], **_opts(name), **{key: off})
        bad = _refused_value(rule)
        if bad is None:
            return  # every value is taken (foreach, fused)
        with pytest.raises(ValueError, match=rf"{key}=.* is refused"):
            tt.create(name, [_param()], **_opts(name), **{key: bad})
        p.grad = _grad(p, 0)
        opt.step()
        before = p.detach().clone()
        group[key] = bad
        p.grad = _grad(p, 1)
        with pytest.raises(ValueError, match=rf"param group 0: {key}=.* is refused"):
            opt.step()
        assert torch.equal(p.detach(), before)
        group[key] = off
        opt.step()
    else:
        assert isinstance(rule, meaning.Converted)


def meaning_attr(klass, key):
    from toolkit.torch import keywords
    return keywords.attribute_of(klass, key)


def _refused_value(rule):
    if isinstance(rule, meaning.Moot):
        return None if rule.allowed is None else True
    if rule.off is None:
        return 1e-3
    if isinstance(rule.off, bool):
        return not rule.off
    return 0.5 if rule.off != 0.5 else 0.25


# --- AdamW's weight_decay: torch's meaning, converted at every step --------------------------
def test_adamw_weight_decay_is_torchs():
    """The issue's 1000x: AdamW(lr=1e-3, weight_decay=1e-2) decayed the weight by 1% a step.
    Now it decays it by lr*weight_decay, as torch.optim.AdamW: with zero gradients (the Adam
    part then moves nothing) both give the same weights."""
    p, q = _param(), _param()
    mine = tt.AdamW([p], lr=1e-3, weight_decay=1e-2)
    theirs = torch.optim.AdamW([q], lr=1e-3, weight_decay=1e-2)
    for _ in range(5):
        p.grad, q.grad = torch.zeros_like(p), torch.zeros_like(q)
        mine.step()
        theirs.step()
    # MXNet's convention rounds wd to float32 (as MXNet's kernels take it): each step's decay
    # differs from torch's by |w|*|f32(wd) - wd|, and by nothing else
    wd = 1e-3 * 1e-2
    bound = 5 * float(p.detach().abs().max()) * abs(float(np.float32(wd)) - wd) + 1e-15
    torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=bound)
    assert p.detach()[0, 0] != _param().detach()[0, 0]  # it did decay
    # bit for bit the toolkit's AdamW with MXNet's wd = lr*weight_decay
    ref = create("adamw", learning_rate=1e-3, wd=wd)
    w = _param().detach().numpy().copy()
    state = ref.create_state_multi_precision(0, w)
    for _ in range(5):
        ref.update(0, w, np.zeros_like(w), state)
    assert p.detach().numpy().tobytes() == w.tobytes()


def test_adamw_weight_decay_follows_lr_at_every_step():
    """With torch's scheduler halving lr, MXNet's wd is lr*weight_decay at every step."""
    p = _param()
    opt = tt.AdamW([p], lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for k in range(3):
        p.grad = _grad(p, k)
        opt.step()
        assert opt.toolkit_optimizers[0].wd == opt.param_groups[0]["lr"] * 0.1
        sched.step()
    opt.param_groups[0]["weight_decay"] = 0.0  # the usual "no decay on biases" edit
    p.grad = _grad(p, 9)
    opt.step()
    assert opt.toolkit_optimizers[0].wd == 0.0 and opt.param_groups[0]["wd"] == 0.0


def test_adamw_defaults_to_torchs_decay_and_mxnet_wd_keeps_its_meaning():
    """A documented change: toolkit.torch.AdamW's default decay is torch's weight_decay=0.01
    (it was MXNet's wd=0); MXNet's wd= keeps MXNet's meaning (a fixed wd, not scaled by lr)."""
    default = tt.AdamW([_param()], lr=1e-3).param_groups[0]
    assert default["weight_decay"] == 0.01 and default["wd"] == 1e-3 * 0.01
    mx = tt.AdamW([_param()], lr=1e-3, wd=0.1)
    p = mx.param_groups[0]["params"][0]
    mx.param_groups[0]["lr"] = 1e-4
    p.grad = _grad(p, 0)
    mx.step()
    assert mx.toolkit_optimizers[0].wd == 0.1
    with pytest.raises(TypeError, match="'wd' and 'weight_decay' both give wd"):
        tt.AdamW([_param()], weight_decay=0.1, wd=0.1)


def test_no_decay_on_biases_loop_works():
    """The usual loop (group['weight_decay'] = 0 for biases) changes the step: the key was
    added beside MXNet's wd and ignored."""
    model = torch.nn.Linear(4, 3).double()
    opt = tt.Adam([{"params": [model.weight]}, {"params": [model.bias]}], lr=1e-2,
                  weight_decay=0.5)
    for g in opt.param_groups[1:]:
        g["weight_decay"] = 0.0
    model.bias.grad = torch.zeros(3, dtype=torch.float64)
    model.weight.grad = torch.zeros(3, 4, dtype=torch.float64)
    bias = model.bias.detach().clone()
    opt.step()
    assert opt.param_groups[1]["wd"] == 0.0 and opt.toolkit_optimizers[1].wd == 0.0
    assert torch.equal(model.bias.detach(), bias)  # zero gradient, no decay: unchanged


def test_adadelta_lr_is_refused_but_learning_rate_keeps_mxnets_meaning():
    """AdaDelta ignored lr (lr=0 still trained). torch's lr is refused except 1.0 (what MXNet's
    AdaDelta computes); MXNet's learning_rate stays accepted (MXNet ignores it)."""
    assert tt.AdaDelta([_param()]).param_groups[0]["lr"] == 1.0
    with pytest.raises(ValueError, match="lr=0.0 is refused: MXNet's AdaDelta has no learning "
                                         "rate"):
        tt.AdaDelta([_param()], lr=0.0)
    tt.AdaDelta([_param()], learning_rate=0.5)
    p = _param()
    opt = tt.AdaDelta([p])
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    p.grad = _grad(p, 0)
    opt.step()
    sched.step()
    with pytest.raises(ValueError, match="param group 0: lr=0.5 is refused"):
        opt.step()


def test_torch_call_patterns():
    """Positional lr, a tensor lr, and torch's keywords at their defaults are taken."""
    p = _param()
    p.grad = _grad(p, 0)
    a = tt.SGD([p], 0.1)
    assert a.param_groups[0]["lr"] == 0.1
    b = tt.SGD([_param()], torch.tensor(0.1), momentum=0.9, dampening=0, nesterov=False,
               weight_decay=0, maximize=False, foreach=None, differentiable=False, fused=None)
    assert b.param_groups[0]["lr"] == float(torch.tensor(0.1))  # the tensor's float32 value
    # in a param group too (as the constructor's, and torch's), and in add_param_group
    c = tt.SGD([{"params": [_param()], "lr": torch.tensor(0.1)}], 0.5)
    c.add_param_group({"params": [_param()], "lr": torch.tensor(0.2)})
    assert [g["lr"] for g in c.param_groups] == [float(torch.tensor(0.1)),
                                                 float(torch.tensor(0.2))]
    with pytest.raises(ValueError, match="add_param_group: a tensor lr must hold one element"):
        c.add_param_group({"params": [_param()], "lr": torch.tensor([0.1, 0.2])})
    assert len(c.param_groups) == 2
    tt.Adam([_param()], 1e-3, betas=(0.9, 0.999), weight_decay=0, amsgrad=False, foreach=True,
            maximize=False, capturable=False, differentiable=False, fused=False)
    # Nesterov: torch's SGD's under its convention, MXNet's NAG under MXNet's
    with pytest.raises(ValueError, match="nesterov=True is refused under convention 'mxnet': "
                                         "MXNet's SGD has no Nesterov momentum; Nesterov "
                                         "momentum is NAG"):
        tt.SGD([_param()], 0.1, momentum=0.9, nesterov=True)
    tt.NAG([_param()], 0.1, momentum=0.9, nesterov=True)
    assert tt.SGD([_param()], 0.1, momentum=0.9, nesterov=True, convention="pytorch"
                  ).param_groups[0]["nesterov"] is True
    # AMSGrad: torch's and the guide's conventions have it, MXNet's (Adam's default) does not
    with pytest.raises(ValueError, match="amsgrad=True is refused under convention 'mxnet': "
                                         "MXNet 1.9.1 has no AMSGrad"):
        tt.Adam([_param()], amsgrad=True)
    assert tt.Adam([_param()], amsgrad=True, convention="pytorch").param_groups[0]["amsgrad"]
    with pytest.raises(ValueError, match="eps=1e-06 is refused: torch adds eps to the "
                                         "bias-corrected root"):
        tt.Adam([_param()], eps=1e-6)
    tt.Adam([_param()], eps=1e-6, convention="guide")  # torch's placement


def test_docs_table_is_the_codes():
    """docs/torch.md's keyword table is what meaning.table() makes: a section per registered
    optimizer naming its torch.optim namesake (the spec's), with exactly the code's rows."""
    text = DOCS.read_text()
    found = re.findall(r"\n\*\*(\w+)\*\* \(([^\n]*)\)\n\n\| keyword \| meaning \|\n\|---\|---\|\n"
                       r"((?:\|[^\n]*\n)+)", text)
    sections = {name: (namesake, rows) for name, namesake, rows in found}
    assert set(sections) == {registry()[n].__name__ for n in NAMES}
    for name in NAMES:
        klass = registry()[name]
        namesake, rows = sections[klass.__name__]
        torch_name = specs()[name].torch
        assert namesake.startswith(f"`torch.optim.{torch_name}`" if torch_name else "no torch")
        assert rows.splitlines() == meaning.table(klass), name
    assert re.search(r"\| `weight_decay` \| converted: `wd = lr\*weight_decay/eta`", text)


def test_rules_name_torch_facts():
    """Every row of meaning.RULES, SHARED and SOME_CONVENTIONS names a torch.optim class some
    spec names as its namesake (or a PyTorch implementation a spec names as its peer), and a
    keyword of that class's signature."""
    namesakes = {meaning.namesake(s): s for s in specs().values() if meaning.namesake(s)}
    for torch_name, key in (list(meaning.RULES) + list(meaning.SHARED) +
                            list(meaning.SOME_CONVENTIONS)):
        assert torch_name in namesakes, torch_name
        assert key in meaning.signature(namesakes[torch_name]), (torch_name, key)


def test_same_keys_stay_equal_whichever_spelling_is_set():
    opt = tt.Adam([_param()], lr=1e-3)
    g = opt.param_groups[0]
    g["beta1"] = 0.8
    p = g["params"][0]
    p.grad = _grad(p, 0)
    opt.step()
    assert g["betas"] == (0.8, 0.999)
    g["betas"] = (0.7, 0.99)
    opt.step()
    assert (g["beta1"], g["beta2"]) == (0.7, 0.99)
    assert opt.toolkit_optimizers[0].beta1 == 0.7
    g["betas"], g["beta1"] = (0.6, 0.99), 0.5
    with pytest.raises(ValueError, match="betas=.* and beta1=0.5 were both set and disagree"):
        opt.step()
    assert np.isclose(opt.toolkit_optimizers[0].beta1, 0.7)


def test_a_misspelt_torch_keyword_is_offered_torchs_spelling():
    """``betaz`` near both ``betas`` (torch's) and ``beta2`` (MXNet's): toolkit.torch names its
    own keywords, torch's first, not the MXNet optimizer's nearest one with the tuple given."""
    w = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(TypeError, match="unknown keyword 'betaz'") as error:
        tt.Adam([w], lr=1e-3, betaz=(0.9, 0.99))
    assert "did you mean 'betas'" in str(error.value)
    assert "beta2=(0.9, 0.99)" not in str(error.value)


def test_relations_name_torchs_keywords_and_edits_are_checked_together():
    """A check tying two hyperparameters together names the torch keyword the user gave
    (Rprop's ``etas[0] (etaminus)``) at construction, in add_param_group and on an edited
    group, whose values are handed over together (LAMB's bounds moved past each other) and put
    back whole on a refusal."""
    w = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    want = r"Rprop needs 0 < etas\[0\] \(etaminus\) < 1 < etas\[1\] \(etaplus\) " \
        r"\(as torch\.optim\.Rprop\), got etas\[0\] \(etaminus\)=1\.5, etas\[1\] \(etaplus\)=0\.5$"
    with pytest.raises(ValueError, match=r"^toolkit\.torch\.Rprop\(\): " + want):
        tt.Rprop([w], etas=(1.5, 0.5))
    opt = tt.Rprop([w])
    with pytest.raises(ValueError, match=r"^add_param_group: " + want):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(2))], "etas": (1.5, 0.5)})
    w.grad = torch.full_like(w, 0.5)
    opt.step()
    after = w.detach().clone()
    opt.param_groups[0]["etas"] = (1.5, 0.5)
    with pytest.raises(ValueError, match=r"^param group 0: " + want):
        opt.step()
    assert torch.equal(w, after)
    assert (opt._inners[0].etaminus, opt._inners[0].etaplus) == (0.5, 1.2)
    opt.param_groups[0]["etas"] = (0.4, 1.3)
    opt.step()
    assert (opt._inners[0].etaminus, opt._inners[0].etaplus) == (0.4, 1.3)
    # MXNet's keywords keep their names, through toolkit.optimizer and toolkit.torch alike
    with pytest.raises(ValueError, match=r"^Rprop needs 0 < etaminus < 1 < etaplus"):
        create("rprop", etaminus=1.5)
    with pytest.raises(ValueError, match=r"^toolkit\.torch\.Rprop\(\): Rprop needs 0 < etaminus "
                                         r"< 1 < etaplus"):
        tt.Rprop([w], etaminus=1.5)

    lamb = tt.create("lamb", [w], lower_bound=1.0, upper_bound=2.0)
    w.grad = torch.full_like(w, 0.5)
    lamb.step()
    group = lamb.param_groups[0]
    group["lower_bound"], group["upper_bound"] = 3.0, 4.0  # each alone breaks the relation
    lamb.step()
    inner = lamb._inners[0]
    assert (inner.lower_bound, inner.upper_bound) == (3.0, 4.0)
    group["lower_bound"], group["upper_bound"], group["beta1"] = 5.0, 4.5, 0.8
    before = w.detach().clone()
    with pytest.raises(ValueError, match=r"^param group 0: lower_bound must not exceed "
                                         r"upper_bound, got lower_bound=5\.0 > upper_bound=4\.5$"):
        lamb.step()
    assert torch.equal(w, before)
    assert (inner.lower_bound, inner.upper_bound, inner.beta1) == (3.0, 4.0, 0.9)
