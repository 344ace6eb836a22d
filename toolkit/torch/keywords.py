"""The keywords of a ``toolkit.torch`` optimizer and of its param groups: MXNet's names and a
PyTorch user's habits, put into one spelling (a param group's keys).

A group's keys are ``"lr"`` (where torch's learning-rate schedulers write it) and the MXNet
constructor keywords of the optimizer (``wd``, ``beta1``, ``beta2``, ``epsilon``,
``clip_gradient``, ``rescale_grad``, ``multi_precision``, ``convention``, ...), plus
``maximize``. PyTorch's names are read through the one table of
:mod:`toolkit.optimizers.aliases` (``torch_keywords``: ``lr``, ``weight_decay``, ``betas``,
``eps``, ``alpha``, ``momentum`` where the optimizer has their counterpart); a spec's
``torch_requires`` says where a counterpart needs a flag (RMSProp's ``momentum``: ``centered``).
Anything else is a TypeError that says why, or offers the names it may have meant.
"""
from __future__ import annotations

import difflib
import inspect

from ..optimizers import aliases
from ..optimizers.registry import spec_of
from ..optimizers.spec import default_convention
from . import meaning

__all__ = ["OPTIMIZER_LEVEL", "group_keys", "normalise", "attribute_of", "torch_keys",
           "check_given", "settle", "convention_of", "torch_default_lr", "with_defaults",
           "MISSING", "HELD_KEYS", "spellings"]

#: the group keys of how moments are held (``toolkit.optimizers.held``): a group keeps its own
#: when it loads a state_dict with ``convert_states=True``
HELD_KEYS = ("state_dtype", "state_rounding", "state_seed")

#: keywords that belong to the whole optimizer, not to a param group
OPTIMIZER_LEVEL = ("lr_scheduler", "begin_num_update")

#: constructor keywords of ``toolkit.optimizer`` that toolkit.torch does not take, and why
_REFUSED = {
    "param_idx2name": "give per-parameter options with param groups",
    "param_dict": "give per-parameter options with param groups",
    "sym": "symbolic graphs are MXNet's; pass the parameters",
    "backend": "toolkit.torch picks the backend from the tensors' device",
    "learning_rate_schedule": "use lr_scheduler",
}

#: toolkit.torch's own group keys (not constructor keywords)
_OWN = {"maximize": False}


def _alias_only(klass):
    """Constructor keywords that only spell another one (RMSProp's ``rho``, ``momentum``)."""
    doms = klass.hyperparameter_domains()
    out = {}
    for attr, dom in doms.items():
        keyword = dom.keyword or attr
        for name in dom.aliases:
            if name != keyword:
                out[name] = keyword
    return out


def attribute_of(klass, key):
    """The attribute of an optimizer of ``klass`` that holds the group key ``key`` (``lr`` for
    ``"lr"``, ``float_stable_eps`` for AdaGrad's ``"eps"``), or None where it has none."""
    if key == "lr":
        return "lr"
    for attr, dom in klass.hyperparameter_domains().items():
        if (dom.keyword or attr) == key:
            return attr
    return None


def group_keys(klass):
    """The keys of a param group of ``klass``, in constructor order: ``"lr"``, every
    constructor keyword but the optimizer-level, refused and alias-only ones, then
    toolkit.torch's own (``maximize``)."""
    alias_only = _alias_only(klass)
    keys = ["lr"]
    for name, _ in aliases.constructor_parameters(klass):
        if name in ("learning_rate", *OPTIMIZER_LEVEL) or name in _REFUSED or name in alias_only:
            continue
        keys.append(name)
    return tuple(dict.fromkeys(keys + list(_OWN)))


def _did_you_mean(key, known):
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(map(repr, close))}?" if close else ""


def convention_of(klass, opts, inherited=None):
    """The convention a group's options give (else the inherited one, else the class's
    default)."""
    for source in (opts, inherited or {}):
        if source.get("convention") is not None:
            return source["convention"]
    for name, default in aliases.constructor_parameters(klass):
        if name == "convention" and default not in (inspect.Parameter.empty, None):
            return default
    return default_convention(klass)


def normalise(klass, kwargs, *, where, level=True, inherited=None):
    """``kwargs`` (MXNet's or PyTorch's names) in a group's spelling, checked: MXNet's names and
    their aliases become MXNet's keys (``learning_rate``: ``lr``), torch's keywords stay torch
    keys (:mod:`toolkit.torch.meaning`, settled by :func:`settle`); a TypeError for a keyword
    ``klass`` has no counterpart of (naming it and why), or one it does not know (with "did you
    mean"). ``where`` names the call in messages; ``level``: whether optimizer-level keywords
    (``lr_scheduler``, ``begin_num_update``) may be given (the constructor, not a param group);
    ``inherited``: the options a group takes from the optimizer's defaults."""
    cls = klass.__name__
    keys = group_keys(klass)
    alias_only = _alias_only(klass)
    torch_rules = meaning.rules(klass, convention_of(klass, kwargs, inherited))
    spec = spec_of(klass)
    out = {}
    given_as = {}  # MXNet key -> the keyword that gave it (a torch keyword gives its MXNet ones)

    def put(name, value, given, gives=()):
        for n in (name, *gives):
            if n in given_as:
                raise TypeError(f"{where}: {given!r} and {given_as[n]!r} both give {n}; "
                                "give one of them")
        out[name] = value
        for n in (name, *gives):
            given_as[n] = given

    for key, value in kwargs.items():
        if key in OPTIMIZER_LEVEL:
            if not level:
                raise TypeError(f"{where}: {key} belongs to the whole optimizer, not to a param "
                                f"group; give it to {cls}(...)")
            put(key, value, key)
        elif key == "learning_rate":
            put("lr", value, key)
        elif key in keys:
            put(key, value, key)
        elif key in alias_only:
            # checked under the name given (the optimizer's own check names its keyword):
            # torch's where it is torch's keyword too (RMSProp's momentum), else the alias's
            _check_named(klass, alias_only[key], value, where,
                         **({"given": key} if key in torch_rules else {"alias": key}))
            put(alias_only[key], value, key)
        elif key in torch_rules:
            rule = torch_rules[key][0]
            gives = getattr(rule, "names", None) or (
                (rule.name,) if isinstance(rule, meaning.Converted) else ())
            put(key, value, key, gives)
        elif key in _REFUSED:
            raise TypeError(f"{where}: toolkit.torch.{cls} takes no {key}: {_REFUSED[key]}")
        else:
            why = aliases.hint(klass, key, value)
            if why is not None:
                raise TypeError(f"{where}: toolkit.torch.{cls} has no counterpart of {key!r}: "
                                f"{why}")
            known = sorted(set(keys) | set(torch_rules) | set(alias_only) | {"learning_rate"}
                           | (set(OPTIMIZER_LEVEL) if level else set()))
            raise TypeError(f"{where}: unknown keyword {key!r} for toolkit.torch.{cls}"
                            f"{_did_you_mean(key, known)} (its keywords: {', '.join(known)})")
    # a PyTorch keyword whose counterpart needs a flag on (RMSProp's momentum: centered)
    for key, flag in spec.torch_requires.items():
        if key in kwargs and kwargs[key] != 0 and not _flag_value(klass, out, flag,
                                                                   inherited or {}):
            raise TypeError(f"{where}: toolkit.torch.{cls} takes {key} only with {flag}=True "
                            f"(without it {cls} keeps no {key} buffer); pass {flag}=True, or "
                            f"leave {key} out")
    return out


def with_defaults(klass, kwargs, defaults, *, where):
    """``kwargs`` with each of ``defaults`` (keywords in either spelling) added unless what it
    sets (its MXNet keys) is set by ``kwargs`` already."""
    conv = kwargs.get("convention", defaults.get("convention"))
    probe = {**kwargs, **({"convention": conv} if conv is not None else {})}
    rules = torch_keys(klass, probe)

    def sets(opts):
        out = set()
        for key in normalise(klass, opts, where=where):
            rule = rules.get(key, (None,))[0]
            out |= {key, *(getattr(rule, "names", None) or
                           ((rule.name,) if isinstance(rule, meaning.Converted) else ()))}
        return out

    taken = sets(kwargs)
    added = {k: v for k, v in defaults.items() if not sets({k: v}) & taken}
    return {**added, **kwargs}


def torch_keys(klass, group):
    """The torch keys of a group of ``klass`` under its convention."""
    return meaning.rules(klass, convention_of(klass, group))


def spellings(klass, group, given):
    """``{MXNet keyword: the torch key that gave it}`` of a group of ``klass`` for the torch
    keys ``given`` (``lr`` for ``learning_rate``, ``betas[0]`` for ``beta1``, ``etas[1]`` for
    Rprop's ``etaplus``: each :class:`~meaning.Same` key's), for the refusals of checks that
    tie two hyperparameters together (``toolkit.optimizers.validation.spelled``); an MXNet
    keyword given as such keeps its name. A :class:`~meaning.Converted` key is left out: its
    value is not the MXNet keyword's."""
    out = {"learning_rate": "lr"} if "lr" in given else {}
    for key, (rule, _) in torch_keys(klass, group).items():
        if isinstance(rule, meaning.Same) and key in given:
            many = len(rule.names) > 1
            out.update((name, f"{key}[{i}]" if many else key) for i, name in enumerate(rule.names))
    return out


def check_given(klass, group, keys, *, where):
    """Check the values the torch keys ``keys`` of ``group`` give to MXNet's hyperparameters,
    before anything is built or written, each by the check of the hyperparameter it sets (its
    :class:`~toolkit.optimizers.validation.Domain`), a refusal naming the torch keyword
    (``betas[0]`` for a pair's first) with MXNet's in parentheses: ``lr`` as
    ``learning_rate`` (by its rule where it has one: AdaDelta's), a :class:`~meaning.Same` key
    as each of its MXNet keys. MXNet's keys are
    left to the optimizer's own checks, which name them; a :class:`~meaning.Converted` key is
    checked as :func:`settle` converts it. Raises TypeError/ValueError naming ``where``."""
    rules = torch_keys(klass, group)
    try:
        for key in keys:
            if key not in group:
                continue
            rule = rules.get(key, (None,))[0]
            if key == "lr" and rule is None:
                _check_as(klass, "lr", group["lr"], given="lr")
            elif key == "lr":  # a rule that refuses some values (AdaDelta's: unless 1.0)
                rule.check("lr", group["lr"])
            elif isinstance(rule, meaning.Same):
                values = rule.to_mxnet(key, group[key])
                for i, (name, value) in enumerate(values.items()):
                    _check_as(klass, name, value,
                              given=key if len(values) == 1 else f"{key}[{i}]")
    except (TypeError, ValueError) as e:
        raise type(e)(f"{where}: {e}") from None


def _check_as(klass, key, value, *, given=None, alias=None):
    """``value`` checked as the MXNet key ``key`` of ``klass`` checks it, a refusal naming
    ``given`` (the torch keyword that gave it) or ``alias`` (the alias of ``key`` that gave it:
    RMSProp's ``rho``), as :meth:`~toolkit.optimizers.validation.Domain.label` names them."""
    attr = attribute_of(klass, key)
    domain = klass.hyperparameter_domains().get(attr) if attr is not None else None
    if domain is not None:
        domain.check(attr, value, alias=alias, given=given)


def _check_named(klass, key, value, where, **how):
    """:func:`_check_as`, a refusal naming ``where`` too."""
    try:
        _check_as(klass, key, value, **how)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{where}: {e}") from None


def settle(klass, group, changed, sources, *, where, scheduled=False):
    """Make a group's torch keys and MXNet keys agree, in place, after the user set the keys
    ``changed`` (all given ones at construction; those that differ from the last step's after
    it): a torch key's value becomes its MXNet counterpart's (:class:`~meaning.Same`,
    :class:`~meaning.Converted`: recomputed every step while the torch key is the one the user
    set, ``sources[key] == "torch"``), an MXNet key's value shows in its torch key, and a torch
    key without counterpart is checked (:class:`~meaning.OffOnly`, :class:`~meaning.Moot`).
    Raises TypeError/ValueError naming ``where`` and the key; returns the ``(key, old value)``
    pairs it wrote (for an undo). ``scheduled``: a toolkit lr_scheduler sets lr inside the
    step. The values of the torch keys set are checked first, under their own names
    (:func:`check_given`)."""
    check_given(klass, group, changed, where=where)
    written = []

    def write(key, value):
        if key not in group or not _same_value(group[key], value):
            written.append((key, group.get(key, MISSING)))
            group[key] = value

    for key, (rule, default) in torch_keys(klass, group).items():
        try:
            if key == "lr":  # lr is MXNet's key too: only a rule that refuses some values
                if "lr" in changed:
                    rule.check("lr", group["lr"])
                continue
            if isinstance(rule, meaning.OffOnly):
                if key in group:
                    rule.check(key, group[key])
                else:
                    write(key, rule.off)
            elif isinstance(rule, meaning.Moot):
                if key in group:
                    rule.check(key, group[key])
                else:
                    write(key, default)
            elif isinstance(rule, meaning.Same):
                flag = spec_of(klass).torch_requires.get(key)
                if flag is not None and not group.get(flag):
                    # its counterpart needs the flag on (RMSProp's momentum: centered): off
                    # here, the key is torch's off value
                    if key in changed and key in group and group[key]:
                        raise ValueError(f"{key}={group[key]!r} needs {flag}=True (without it "
                                         f"{klass.__name__} keeps no {key} buffer)")
                    write(key, default if default is not None else 0)
                elif rule.torch_default and key not in sources and key not in changed and \
                        set(rule.names) & changed:
                    sources[key] = "mxnet"  # MXNet's spelling given: no torch default later
                    write(key, rule.from_mxnet(group))
                elif rule.torch_default and key not in sources and key not in changed:
                    # made without either spelling: torch's default (AdamW's 0.01)
                    sources[key] = "torch"
                    write(key, default)
                    for name, value in rule.to_mxnet(key, default).items():
                        write(name, value)
                elif key in changed and key in group:
                    if rule.torch_default:
                        sources[key] = "torch"
                    new = rule.to_mxnet(key, group[key])
                    for name, value in new.items():
                        if name in changed and not _same_value(group.get(name), value):
                            raise ValueError(f"{key}={group[key]!r} and {name}="
                                             f"{group.get(name)!r} were both set and disagree; "
                                             "set one of them")
                        write(name, value)
                else:
                    write(key, rule.from_mxnet(group))
            else:  # Converted
                if key in changed and key in group:
                    if rule.name in changed and key in sources:
                        raise ValueError(f"{key} and {rule.name} were both set; set one of "
                                         f"them ({key} is {rule.formula})")
                    if scheduled:
                        raise ValueError(f"{key} is {rule.formula}, and a toolkit lr_scheduler "
                                         "sets lr inside the step; give "
                                         f"{rule.name}= (MXNet's) instead")
                    sources[key] = "torch"
                elif rule.name in changed or key not in sources:
                    # neither given: torch's default, but MXNet's under a toolkit lr_scheduler
                    sources[key] = "mxnet" if rule.name in changed or scheduled else "torch"
                if sources[key] == "torch":
                    rule.check(key, group.get(key, default))
                    value = rule.canonical(group.get(key, default))
                    write(key, value)
                    for name, mx in rule.to_mxnet(key, value, group).items():
                        _check_converted(klass, name, mx, f"{key}={value!r} gives {name}={mx!r}"
                                                          f" ({rule.formula})")
                        write(name, mx)
                else:
                    write(key, rule.from_mxnet(group))
        except (TypeError, ValueError) as e:
            for k, old in reversed(written):
                if old is MISSING:
                    group.pop(k, None)
                else:
                    group[k] = old
            raise type(e)(f"{where}: {e}") from None
    return written


def _check_converted(klass, key, value, how):
    """``value`` of the MXNet key ``key`` that a torch key gave as ``how`` says, checked as
    ``klass`` checks it, a refusal saying ``how``."""
    try:
        _check_as(klass, key, value)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{how}: {e}") from None


MISSING = object()


def torch_default_lr(klass, group):
    """Where torch's lr has one value only (AdaDelta's 1.0: MXNet's has no learning rate), a
    group made without a learning rate shows it."""
    rule = torch_keys(klass, group).get("lr")
    if rule is not None and isinstance(rule[0], meaning.OffOnly):
        group["lr"] = rule[0].off


def _same_value(a, b):
    try:
        return type(a) is type(b) and bool(a == b)
    except (TypeError, ValueError, RuntimeError):
        return False


def _flag_value(klass, out, flag, inherited):
    if flag in out:
        return bool(out[flag])
    if flag in inherited:
        return bool(inherited[flag])
    for name, default in aliases.constructor_parameters(klass):
        if name == flag:
            return bool(default) if default is not inspect.Parameter.empty else False
    return False
