"""A value ``toolkit.torch`` refuses under a torch keyword is refused in that keyword's name
(docs/torch.md, "Names and keywords"): ``lr``, a :class:`~toolkit.torch.meaning.Same` key
(``betas[0]`` for the first of a pair) and a :class:`~toolkit.torch.meaning.Converted` key with
a domain (AdamW's ``weight_decay``), with MXNet's counterpart in parentheses, never MXNet's name
alone, which the user did not type; MXNet's keywords keep MXNet's name. For every registered
optimizer under every convention it implements, every torch keyword the table maps, every value
the counterpart's domain refuses (``Domain.invalid_examples``), on every path a value takes: the
constructor (``toolkit.torch.create`` and the class), a param-group dict, ``add_param_group``
and a live group key at the next ``step()``, each with the same error type the optimizer's own
check raises and nothing changed."""
from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch", reason="toolkit.torch needs PyTorch")

import toolkit.torch as tt  # noqa: E402
from toolkit.optimizer import Optimizer, registry, specs  # noqa: E402
from toolkit.torch import keywords, meaning  # noqa: E402


def _domain(klass, mxnet_key):
    return klass.hyperparameter_domains()[keywords.attribute_of(klass, mxnet_key)]


def _cases():
    """``(name, convention, key, [(label, mxnet key or None, position or None, value,
    error)])`` per torch keyword of each optimizer under each of its conventions."""
    for name in sorted(specs()):
        klass = registry()[name]
        for convention in specs()[name].conventions:
            rules = meaning.rules(klass, convention)
            if rules.get("lr", (None,))[0] is None:  # an OffOnly lr: the row tests refuse it
                yield name, convention, "lr", [
                    ("lr (learning_rate)", "learning_rate", None, value, error)
                    for value, error in Optimizer.domains["lr"].invalid_examples()]
            for key, (rule, _) in rules.items():
                if isinstance(rule, meaning.Same):
                    pair = len(rule.names) > 1
                    yield name, convention, key, [
                        (f"{key}[{i}] ({mx}" if pair else f"{key} ({mx}", mx, i if pair else None,
                         value, error)
                        for i, mx in enumerate(rule.names)
                        for value, error in _domain(klass, mx).invalid_examples()]
                elif isinstance(rule, meaning.Converted) and rule.domain is not None:
                    yield name, convention, key, [
                        (key, rule.name, None, value, error)
                        for value, error in rule.domain.invalid_examples()]


CASES = list(_cases())


def _opts(name, convention, key):
    """The spec's recorded options but the MXNet keys ``key`` gives (given with it, both are
    a TypeError)."""
    rule = meaning.rules(registry()[name], convention).get(key, (None,))[0]
    gives = getattr(rule, "names", None) or ((rule.name,) if isinstance(
        rule, meaning.Converted) else ())
    kw = {k: v for k, v in {**specs()[name].record, **specs()[name].fixed}.items()
          if k not in gives}
    kw["convention"] = convention
    flag = specs()[name].torch_requires.get(key)
    if flag is not None:  # RMSProp's momentum: only with centered=True
        kw[flag] = True
    return kw


def _param(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.Parameter(torch.randn(3, 4, generator=g, dtype=torch.float64))


def _grad(p, k):
    g = torch.Generator().manual_seed(100 + k)
    return torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5


def _given(group, key, position, value):
    """The torch value that gives ``value`` (a pair's other member: the group's own)."""
    if position is None:
        return value
    pair = list(group[key])
    pair[position] = value
    return tuple(pair)


def _options(group):
    return {k: v for k, v in group.items() if k != "params"}


def _refused(error, where, label):
    """pytest.raises for a refusal whose message begins with ``where`` and the torch label."""
    return pytest.raises(error, match="^" + re.escape(f"{where}: {label}") + r"(?!\w)")


@pytest.mark.parametrize("name,convention,key,bad", CASES,
                         ids=[f"{n}-{c}-{k}" for n, c, k, _ in CASES])
def test_a_torch_keyword_is_refused_in_its_own_name(name, convention, key, bad):
    klass = registry()[name]
    kw = _opts(name, convention, key)
    cls = f"toolkit.torch.{klass.__name__}()"
    p = _param()
    opt = tt.create(name, [p], **kw)
    group = opt.param_groups[0]
    if not specs()[name].torch_sparse:  # (SparseAdam steps on sparse gradients only)
        p.grad = _grad(p, 0)
        opt.step()
    p.grad = _grad(p, 1)
    weights = p.detach().clone()
    options, inner = _options(group), opt.toolkit_optimizers[0].settings()
    old = group[key]
    for label, mx, position, value, error in bad:
        given = _given(group, key, position, value)
        # the constructor, through create and the class
        with _refused(error, cls, label):
            tt.create(name, [_param()], **kw, **{key: given})
        with _refused(error, cls, label):
            type(opt)([_param()], **kw, **{key: given})
        # a param-group dict at construction, and add_param_group
        with _refused(error, "add_param_group", label):
            tt.create(name, [{"params": [_param()], key: given}], **kw)
        with _refused(error, "add_param_group", label):
            opt.add_param_group({"params": [_param(1)], key: given})
        assert len(opt.param_groups) == 1 and _options(group) == options
        # a live group key, refused at the next step with nothing changed
        group[key] = given
        with _refused(error, "param group 0", label):
            opt.step()
        assert torch.equal(p.detach(), weights)
        assert {k: v for k, v in _options(group).items() if k != key} == \
            {k: v for k, v in options.items() if k != key}
        assert opt.toolkit_optimizers[0].settings() == inner
        group[key] = old
        # MXNet's keyword of the same hyperparameter keeps MXNet's name (None: MXNet's default
        # learning rate), the constructor named first as for every refusal
        if mx is not None and not (mx == "learning_rate" and value is None):
            with pytest.raises(error, match=rf"^{re.escape(cls)}: {mx}(?!\w)") as info:
                tt.create(name, [_param()], **{**kw, mx: value})
            assert not re.match(rf"{re.escape(cls)}: {key}(?!\w)", str(info.value))
    opt.step()  # the old values still step


def test_the_issues_examples():
    """The report's calls, each refused in the keyword given."""
    m = torch.nn.Linear(4, 3, bias=False)
    for call, message in [
            (lambda: tt.Adam(m.parameters(), lr=-1.0), "lr (learning_rate) must be >= 0"),
            (lambda: tt.Adam(m.parameters(), betas=(1.5, 0.9)),
             "betas[0] (beta1) must be in [0, 1)"),
            (lambda: tt.Adam(m.parameters(), weight_decay=-1.0),
             "weight_decay (wd) must be >= 0"),
            (lambda: tt.Muon(m.parameters(), adjust_lr_fn="bogus"),
             "adjust_lr_fn (adjust_lr) must be one of"),
            (lambda: tt.Muon(m.parameters(), eps=-1.0), "eps (epsilon) must be >= 0"),
            (lambda: tt.AdamW(m.parameters(), weight_decay=-1.0),
             "weight_decay must be >= 0, got -1.0")]:
        with pytest.raises(ValueError) as info:
            call()
        assert message in str(info.value)


def test_a_converted_value_out_of_its_domain_names_the_torch_keyword():
    """AdamW's weight_decay (>= 0, as torch takes it) whose wd = lr*weight_decay/eta leaves
    MXNet's domain (overflow to inf) is refused naming weight_decay, the formula and wd."""
    with pytest.raises(ValueError, match=r"^toolkit\.torch\.AdamW\(\): weight_decay=1e\+300 "
                                         r"gives wd=inf \(`wd = lr\*weight_decay/eta`.*\): wd "
                                         "must be finite, got inf"):
        tt.AdamW([_param()], lr=1e300, weight_decay=1e300)
    # checked as torch takes it, whatever wd it gives: at lr=0 too (wd = 0), and not a string
    with pytest.raises(ValueError, match=r"^toolkit\.torch\.AdamW\(\): weight_decay must be "
                                         r">= 0, got -1\.0$"):
        tt.AdamW([_param()], lr=0.0, weight_decay=-1.0)
    with pytest.raises(TypeError, match="weight_decay must be a real number, got str '0.5'"):
        tt.AdamW([_param()], weight_decay="0.5")


def test_lr_none_is_refused_as_torch_refuses_it():
    """A changed behaviour: ``lr=None`` took the default learning rate; torch's ``lr`` is
    refused as torch refuses it. MXNet's ``learning_rate=None`` is still the default."""
    with pytest.raises(TypeError, match=r"^toolkit\.torch\.Adam\(\): lr \(learning_rate\) must "
                                        "be a real number, got NoneType None$"):
        tt.Adam([_param()], lr=None)
    with pytest.raises(TypeError, match=r"^add_param_group: lr \(learning_rate\) must"):
        tt.Adam([{"params": [_param()], "lr": None}])
    assert tt.Adam([_param()], learning_rate=None).param_groups[0]["lr"] == 0.001


def _aliases():
    """``(name, alias)``: every other name an optimizer's constructor takes for one of its
    hyperparameters (RMSProp's ``rho``) that is not a torch keyword of it as well (RMSProp's
    ``momentum`` is: the cases above)."""
    for name in sorted(specs()):
        klass = registry()[name]
        torch_keys = meaning.rules(klass, specs()[name].default_convention)
        for attr, domain in klass.hyperparameter_domains().items():
            for alias in domain.aliases:
                if alias != (domain.keyword or attr) and alias not in torch_keys:
                    yield name, alias


ALIASES = list(_aliases())


@pytest.mark.parametrize("name,alias", ALIASES)
def test_an_alias_is_refused_in_its_own_name_as_toolkit_optimizer_refuses_it(name, alias):
    """An MXNet-side alias is refused as ``toolkit.optimizer`` refuses it, naming the alias and
    the keyword it stands for (toolkit.torch named the keyword alone)."""
    from toolkit import optimizer
    klass = registry()[name]
    attr = klass.hyperparameter_aliases()[alias]
    for value, error in klass.hyperparameter_domains()[attr].invalid_examples():
        with pytest.raises(error) as theirs:
            optimizer.create(name, **{alias: value})
        assert str(theirs.value).startswith(f"{alias} (an alias of ")
        with pytest.raises(error) as mine:
            tt.create(name, [_param()], **{alias: value})
        assert str(mine.value) == f"toolkit.torch.{klass.__name__}(): {theirs.value}"
