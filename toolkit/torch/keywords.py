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

__all__ = ["OPTIMIZER_LEVEL", "group_keys", "normalise", "attribute_of"]

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


def normalise(klass, kwargs, *, where, level=True, inherited=None):
    """``kwargs`` (MXNet's or PyTorch's names) in a group's spelling, checked: a TypeError for
    a keyword ``klass`` has no counterpart of (naming it and why), or one it does not know (with
    "did you mean"). ``where`` names the call in messages; ``level``: whether optimizer-level
    keywords (``lr_scheduler``, ``begin_num_update``) may be given (the constructor, not a
    param group); ``inherited``: the options a group takes from the optimizer's defaults."""
    cls = klass.__name__
    keys = group_keys(klass)
    alias_only = _alias_only(klass)
    torch_map = aliases.torch_keywords(klass)
    spec = spec_of(klass)
    out = {}
    given_as = {}

    def put(name, value, given):
        if name in out:
            raise TypeError(f"{where}: {given!r} and {given_as[name]!r} both give {name}; "
                            "give one of them")
        out[name] = value
        given_as[name] = given

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
            put(alias_only[key], value, key)
        elif key in torch_map:
            names = torch_map[key]
            if len(names) == 1:
                put(names[0], value, key)
            else:  # betas
                try:
                    values = tuple(value)
                except TypeError:
                    values = ()
                if len(values) != len(names):
                    raise TypeError(f"{where}: {key} must be a pair ({', '.join(names)}), got "
                                    f"{value!r}")
                for n, v in zip(names, values):
                    put(n, v, key)
        elif key in _REFUSED:
            raise TypeError(f"{where}: toolkit.torch.{cls} takes no {key}: {_REFUSED[key]}")
        else:
            why = aliases.hint(klass, key, value)
            if why is not None:
                raise TypeError(f"{where}: toolkit.torch.{cls} has no counterpart of {key!r}: "
                                f"{why}")
            known = sorted(set(keys) | set(torch_map) | set(alias_only) | {"learning_rate"}
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


def _flag_value(klass, out, flag, inherited):
    if flag in out:
        return bool(out[flag])
    if flag in inherited:
        return bool(inherited[flag])
    for name, default in aliases.constructor_parameters(klass):
        if name == flag:
            return bool(default) if default is not inspect.Parameter.empty else False
    return False
