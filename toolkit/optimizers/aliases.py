"""Other frameworks' keyword names and the MXNet names they mean: the one table.

A user who writes PyTorch (``lr``, ``weight_decay``, ``betas``, ``eps``), Keras (``beta_1``,
``clipvalue``) or optax habits into ``optimizer.create("adam", lr=0.01)`` gets a TypeError that
names the MXNet keyword meant, instead of Python's bare "unexpected keyword argument". An
optimizer accepts a keyword when some ``__init__`` of its class chain names it; only keywords it
does not accept are looked up here, so AdaGrad's own ``eps`` and RMSProp's ``momentum`` pass.

``KEYWORD_ALIASES`` maps a foreign keyword to the MXNet keywords it may mean, in order of
preference (the first one the optimizer accepts is suggested). ``TORCH_KEYWORDS`` are the
PyTorch names ``toolkit.torch`` accepts, mapped per optimizer by :func:`torch_keywords` (a
spec's ``torch_requires`` says where a counterpart needs a flag on: RMSProp's ``momentum``).
"""
from __future__ import annotations

import difflib
import functools
import inspect

__all__ = ["KEYWORD_ALIASES", "TORCH_KEYWORDS", "constructor_parameters", "accepted_keywords",
           "check_keywords", "torch_keywords", "hint"]

#: foreign keyword -> the MXNet keywords it may mean (the first one an optimizer accepts is named)
KEYWORD_ALIASES = {
    "lr": ("learning_rate",),
    "weight_decay": ("wd",),
    "betas": ("beta1", "beta2"),
    "beta_1": ("beta1",),
    "beta_2": ("beta2",),
    "b1": ("beta1",),
    "b2": ("beta2",),
    "eps": ("epsilon",),
    "epsilon": ("eps",),
    "alpha": ("gamma1", "rho"),
    "decay": ("gamma1", "rho"),
    "clipvalue": ("clip_gradient",),
    "clip_value": ("clip_gradient",),
    "grad_clip": ("clip_gradient",),
    "scheduler": ("lr_scheduler",),
    "learning_rate_schedule": ("lr_scheduler",),
}

#: torch's keywords that hold a pair of MXNet hyperparameters (given separately here)
PAIRED = {
    "betas": ("beta1", "beta2"),
    "etas": ("etaminus", "etaplus"),              # Rprop's
    "step_sizes": ("step_size_min", "step_size_max"),  # Rprop's
}

#: the ``torch.optim`` keywords that ``toolkit.torch`` accepts where an optimizer has their MXNet
#: counterpart (:func:`torch_keywords`): PyTorch's name -> the MXNet keywords it means (``()``:
#: only an optimizer keyword of the same name). Any other PyTorch keyword (``nesterov``,
#: ``amsgrad``, ``foreach``...) is a TypeError there that says why (``_NO_EQUIVALENT``)
TORCH_KEYWORDS = {
    "lr": ("learning_rate",),
    "weight_decay": ("wd",),
    "betas": ("beta1", "beta2"),
    "eps": ("epsilon",),
    "alpha": ("gamma1",),            # RMSprop's smoothing constant
    "momentum": (),
    "momentum_decay": ("schedule_decay",),  # NAdam's
}

#: what to say where the optimizer has none of the candidates (a keyword with no MXNet meaning)
_NO_EQUIVALENT = {
    "momentum": "it keeps no momentum buffer",
    "nesterov": "Nesterov momentum is the 'nag' optimizer: create('nag', momentum=...)",
    "amsgrad": "it keeps no running maximum of a second moment (AMSGrad is Adam's and AdamW's "
               "amsgrad=True, under conventions 'pytorch' and 'guide')",
    "foreach": "every update here is one fused kernel call already",
    "fused": "every update here is one fused kernel call already",
    "maximize": "negate the gradient (or use rescale_grad=-1.0)",
    "dampening": "MXNet's momentum has no dampening",
    "lr_decay": "use lr_scheduler (toolkit.lr_scheduler)",
}


@functools.lru_cache(maxsize=None)
def constructor_parameters(klass):
    """``((name, default), ...)``: the named parameters of every ``__init__`` along the class
    chain, most derived first, as long as each passes ``**kwargs`` on (a name seen twice keeps
    its most derived default; ``inspect.Parameter.empty`` where there is none)."""
    out = {}
    for base in klass.__mro__:
        init = base.__dict__.get("__init__")
        if init is None:
            continue
        if base is object:
            break
        params = list(inspect.signature(init).parameters.values())[1:]
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                out.setdefault(p.name, p.default)
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return tuple(out.items())


def accepted_keywords(klass):
    """The keyword names ``klass(...)`` accepts (:func:`constructor_parameters`)."""
    return frozenset(name for name, _ in constructor_parameters(klass))


def torch_keywords(klass):
    """``{torch keyword: (MXNet keywords,)}`` for the ``TORCH_KEYWORDS`` that ``klass`` has a
    counterpart of: its own keyword of that name (AdaGrad's ``eps``, SGD's ``momentum``), else
    the MXNet keywords the table gives, when ``klass`` takes all of them (``betas``: ``beta1``
    and ``beta2`` together). A keyword missing from the result has no counterpart in
    ``klass``."""
    accepted = accepted_keywords(klass)
    out = {}
    for key, names in TORCH_KEYWORDS.items():
        if key in accepted:
            out[key] = (key,)
        elif names and set(names) <= accepted:
            out[key] = names
    return out


def hint(klass, key, value):
    """The sentence that says what the keyword ``key`` (another framework's) means for
    ``klass``, or None where the table knows nothing of it."""
    return _hint(klass, key, value, accepted_keywords(klass))


def _hint(klass, key, value, accepted):
    """The sentence that names what ``key`` means for ``klass``, or None."""
    cls = klass.__name__
    pair = PAIRED.get(key)
    if pair is not None and set(pair) <= accepted:
        defaults = dict(constructor_parameters(klass))
        try:
            values = tuple(value)
            if len(values) != 2:
                raise ValueError
        except (TypeError, ValueError):
            values = tuple(defaults[n] for n in pair)
        example = ", ".join(f"{n}={v!r}" for n, v in zip(pair, values))
        return f"MXNet's names are {pair[0]} and {pair[1]}, given separately: {cls}({example})"
    spec = getattr(klass, "spec", None)
    for name in KEYWORD_ALIASES.get(key, ()):
        if name in accepted:
            if spec is not None and name in spec.fixed and spec.fixed_reason:
                # pinned by the optimizer (SparseAdam's and Rprop's wd 0): say why, not the name
                return f"{cls} takes no {key}: {spec.fixed_reason}"
            return f"MXNet's name is {name}: {cls}({name}={value!r})"
    if key == "momentum" and "beta1" in accepted:
        if getattr(klass, "interpolation", None) == "beta1":  # Schedule-Free AdamW
            return (f"{cls} takes no momentum: its momentum is beta1, the interpolation "
                    "y = (1 - beta1)*z + beta1*x")
        return f"{cls} takes no momentum: its first moment's decay is beta1"
    if key in _NO_EQUIVALENT:
        return f"{cls} takes no {key}: {_NO_EQUIVALENT[key]}"
    if key in KEYWORD_ALIASES:
        return (f"{cls} takes no {key} (MXNet's {' or '.join(KEYWORD_ALIASES[key])}); its "
                f"keywords: {', '.join(sorted(accepted))}")
    return None


def _misspelt(klass, key, value, accepted):
    """"did you mean ...?" naming the keyword of ``klass`` nearest ``key``, or None."""
    if not _keywords_known(klass):
        return None
    near = difflib.get_close_matches(key, sorted(accepted), n=1, cutoff=0.75)
    return f"did you mean {near[0]}? {klass.__name__}({near[0]}={value!r})" if near else None


def _keywords_known(klass):
    """Whether every keyword ``klass(...)`` takes is a named parameter of an ``__init__`` of the
    toolkit's (a user's ``__init__`` may take more through ``**kwargs``)."""
    for base in klass.__mro__:
        init = base.__dict__.get("__init__")
        if init is not None and base is not object and \
                not getattr(init, "__module__", "").startswith("toolkit."):
            return False
    return True


def check_keywords(klass, kwargs):
    """Raise a TypeError that names the MXNet keyword meant for the first keyword of ``kwargs``
    that ``klass`` does not accept and the table knows, or the one it takes that a misspelt
    keyword is nearest to, or else its keywords where all are named parameters of the toolkit's
    ``__init__`` s; return None otherwise (Python's own TypeError follows)."""
    accepted = accepted_keywords(klass)
    for key, value in kwargs.items():
        if key in accepted:
            continue
        hint = _hint(klass, key, value, accepted) or _misspelt(klass, key, value, accepted)
        if hint is None and _keywords_known(klass):  # else Python's own TypeError follows
            hint = f"its keywords: {', '.join(sorted(accepted))}"
        if hint is not None:
            raise TypeError(f"{klass.__name__}() got an unexpected keyword argument {key!r}; "
                            f"{hint}")
