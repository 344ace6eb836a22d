"""What each ``torch.optim`` keyword means in a ``toolkit.torch`` optimizer: the one table.

A torch keyword (``lr``, ``betas``, ``eps``, ``weight_decay``, ``amsgrad``, ``foreach``...) is a
key of its own in every param group, beside MXNet's keys, and means what it means in the
``torch.optim`` namesake (the spec's ``torch``) or is refused:

* :class:`Same`: MXNet hyperparameter(s) of the same meaning (``betas`` = ``beta1, beta2``),
  kept equal whichever the user sets.
* :class:`Converted`: another MXNet hyperparameter, recomputed every step (AdamW's
  ``weight_decay`` is MXNet's ``wd = lr*weight_decay/eta``).
* :class:`OffOnly`: no counterpart; taken at its off value only, else refused with the reason.
* :class:`Moot`: how torch runs the update (``foreach``, ``fused``), which the toolkit decides.

The keywords are read from the namesake's signature, so none is missing; :data:`RULES` holds
those whose meaning is not the MXNet keyword of the same name. An optimizer torch does not ship
takes the keywords of its most used PyTorch implementation where its spec names one
(``torch_peer``: lion-pytorch's ``Lion``), else torch's usual names (``lr``, ``weight_decay`` =
``wd``, ``betas``, ``eps``, ``momentum``). docs/torch.md prints the table (:func:`table`); ``tests/test_torch_keywords.py``
tests it row by row.
"""
from __future__ import annotations

import functools
import inspect
import math
from typing import Callable, NamedTuple

import torch

from ..optimizers import aliases
from ..optimizers.registry import spec_of
from ..optimizers.validation import Domain, nonneg

__all__ = ["Same", "Converted", "OffOnly", "Moot", "Shared", "RULES", "SHARED", "SOME_CONVENTIONS",
           "rules", "table",
           "equal", "torch_defaults", "peer_defaults", "positional", "namesake", "signature"]


def _number(value):
    """A one-element tensor (torch takes tensor ``lr`` and ``betas``) as the Python float it
    holds; any other value as it is (the optimizer checks it)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.item())
    return value


class Same(NamedTuple):
    """The MXNet hyperparameters ``names`` (two for ``betas``); ``torch_default``: a group
    given neither spelling takes torch's default, not MXNet's (AdamW's weight_decay=0.01)."""
    names: tuple
    torch_default: bool = False

    def to_mxnet(self, key, value):
        if len(self.names) == 1:
            return {self.names[0]: _number(value)}
        try:
            values = tuple(value)
        except TypeError:
            values = ()
        if len(values) != len(self.names):
            raise TypeError(f"{key} must be a pair ({', '.join(self.names)}), got {value!r}")
        return dict(zip(self.names, map(_number, values)))

    def from_mxnet(self, group):
        values = tuple(group.get(n) for n in self.names)
        return values[0] if len(values) == 1 else values

    def describe(self):
        return "same: " + " and ".join(f"`{n}`" for n in self.names)


class Converted(NamedTuple):
    """The MXNet hyperparameter ``name`` = ``to_mxnet(value, group)`` at every step;
    ``from_mxnet(group)`` is the torch value a group shows when MXNet's key was set;
    ``canonical_fn(value)``, where given, the value a group keeps for one the user gave (ADOPT's
    ``clip_lambda``: a callable becomes the string naming it, so state_dict() saves);
    ``domain``, where given, the values torch takes for the keyword (a
    :class:`~toolkit.optimizers.validation.Domain`, checked under the keyword's name before
    it is converted: AdamW's ``weight_decay`` >= 0)."""
    name: str
    to_mxnet_fn: Callable
    from_mxnet_fn: Callable
    formula: str
    canonical_fn: Callable | None = None
    domain: Domain | None = None

    def canonical(self, value):
        return value if self.canonical_fn is None else self.canonical_fn(value)

    def check(self, key, value):
        """A ValueError/TypeError naming ``key`` where torch takes no ``value`` for it
        (:attr:`domain`)."""
        if self.domain is not None:
            self.domain.check(key, _number(value))

    def to_mxnet(self, key, value, group):
        return {self.name: self.to_mxnet_fn(value, group)}

    def from_mxnet(self, group):
        return self.from_mxnet_fn(group)

    def describe(self):
        return f"converted: {self.formula}, at every step"


class OffOnly(NamedTuple):
    """No counterpart: ``off`` (the value a group shows) is taken, anything else refused.
    ``export``: the MXNet key whose value torch's namesake takes for it when a toolkit
    state_dict is loaded there (``toolkit.torch.crossing``)."""
    off: object
    why: str
    export: str | None = None

    def check(self, key, value):
        if not equal(value, self.off):
            raise ValueError(f"{key}={value!r} is refused: {self.why}" +
                             ("" if self.off is None else f" (only {key}={self.off!r} is taken)"))

    def describe(self):
        return f"refused unless {self.off!r}: {self.why}"


class Moot(NamedTuple):
    """How torch runs the update, decided by the toolkit's own path: ``allowed`` values
    (None: any), the group shows what was given (else ``default``)."""
    allowed: tuple | None
    default: object
    why: str

    def check(self, key, value):
        if self.allowed is not None and not any(equal(value, a) for a in self.allowed):
            raise ValueError(f"{key}={value!r} is refused: {self.why}")

    def describe(self):
        taken = "any value" if self.allowed is None else \
            " or ".join(repr(a) for a in self.allowed)
        return f"taken ({taken}): {self.why}"


def equal(a, b):
    """Whether a group's value ``a`` is the rule's value ``b`` (a bool only equals a bool)."""
    if a is None or b is None:
        return a is b
    try:
        return type(a) is not bool and type(b) is not bool and a == b or a is b
    except (TypeError, ValueError):
        return False


_MOOT = {
    "foreach": Moot(None, None, "the toolkit's own fused path runs whatever is asked"),
    "fused": Moot(None, None, "the toolkit's own fused path runs whatever is asked"),
    "capturable": Moot((False,), False, "CUDA-graph capture of the step is not supported"),
    "differentiable": Moot((False,), False, "the step is not differentiable through autograd"),
}


def _adamw_wd(value, group):
    return float(group["lr"]) * float(value) / float(group.get("eta", 1.0))


def _adamw_weight_decay(group):
    lr = float(group["lr"])
    return float(group["wd"]) * float(group.get("eta", 1.0)) / lr if lr else math.nan


#: ADOPT's default clipping schedule as a param group holds it (a string, so that state_dict()
#: loads with weights_only=True; the authors' code holds the callable ``lambda step: step**0.25``)
ADOPT_SCHEDULE = "step**0.25"


def _adopt_clipping(value, group=None):
    """``use_clipping`` from the authors' ``clip_lambda``: None (Algorithm 1, no clip), or the
    paper's schedule ``step**0.25``, as that string or any callable that computes it to float32's
    precision or better (the kernels form it in double)."""
    if value is None:
        return False
    if isinstance(value, str) and value == ADOPT_SCHEDULE:
        return True
    if callable(value):
        try:
            same = all(math.isclose(float(value(s)), s ** 0.25, rel_tol=1e-6)
                       for s in (1, 2, 3, 10, 1000, 10 ** 6))
        except Exception:  # noqa: BLE001 - a user's schedule that fails is not the paper's
            same = False
        if same:
            return True
    raise ValueError(f"clip_lambda={value!r} is refused: ADOPT's kernels clip at the paper's "
                     f"schedule step**0.25 (the default, clip_lambda={ADOPT_SCHEDULE!r}, or a "
                     "callable that computes it to 1e-6 relative) or not at all "
                     "(clip_lambda=None)")


_PLACEMENT = ("torch adds eps to the bias-corrected root sqrt(v/(1-beta2^t)); MXNet's Adam adds "
              "epsilon to sqrt(v) and folds the bias corrections into the learning rate, so one "
              "number means two updates. Give epsilon= for MXNet's, or convention='guide' "
              "(torch's update)")

#: ``(torch class, torch keyword) -> {convention: rule}`` where the meaning is not the MXNet
#: keyword of the same name (``"*"``: every convention but those listed; None: none, the plain
#: meaning). Under ``convention="pytorch"`` MXNet's names carry torch's meanings
#: (docs/conventions.md), so most keys are the same there
RULES = {  # checked against the registry by tests/test_torch_keywords.py::test_rules_name_torch_facts
    ("Adam", "eps"): {"mxnet": OffOnly(None, _PLACEMENT, "epsilon"), "*": Same(("epsilon",))},
    ("Adam", "decoupled_weight_decay"): {"*": OffOnly(False, "decoupled decay is "
                                                             "toolkit.torch.AdamW")},
    ("AdamW", "weight_decay"): {"pytorch": Same(("wd",), torch_default=True), "*": Converted(
        "wd", _adamw_wd, _adamw_weight_decay, "`wd = lr*weight_decay/eta` (torch decays by "
        "lr*weight_decay per step; MXNet's AdamW by eta*wd)", domain=nonneg())},
    ("AdamW", "eps"): {"mxnet": OffOnly(None, "MXNet's AdamW (contrib adamw_update) has no "
                                              "bias correction: its epsilon is added to sqrt(v),"
                                              " torch's eps to sqrt(v/(1-beta2^t)); give "
                                              "epsilon= for MXNet's, or convention='guide'",
                                      "epsilon"),
                       "*": Same(("epsilon",))},
    # (torch's default shown and saved, not None: torch.optim.Adamax steps on a loaded group)
    ("Adamax", "eps"): {"pytorch": Same(("epsilon",), torch_default=True),
                        "*": OffOnly(None, "torch adds eps to |g| inside the max; MXNet's "
                                           "Adamax has no epsilon (the guide's adds it to the "
                                           "denominator: epsilon= with convention='guide')",
                                    "epsilon")},
    ("Adagrad", "weight_decay"): {"pytorch": Same(("wd",)), "*": OffOnly(0, "torch adds weight_decay*w to the gradient "
                                                  "before the history; MXNet's AdaGrad adds "
                                                  "wd*w to the step after the division: give "
                                                  "wd= for MXNet's")},
    ("Adagrad", "lr_decay"): {"*": OffOnly(0, "use a learning-rate scheduler")},
    ("Adagrad", "initial_accumulator_value"): {"*": OffOnly(0, "MXNet's history starts at 0")},
    ("RMSprop", "eps"): {"pytorch": Same(("epsilon",)), "*": OffOnly(None, "torch adds eps outside the root (sqrt(v) + eps); "
                                            "MXNet's RMSProp inside (sqrt(n + epsilon)): give "
                                            "epsilon= for MXNet's", "epsilon")},
    ("RMSprop", "momentum"): {"*": Same(("gamma2",))},
    ("Adadelta", "lr"): {"pytorch": None, "*": OffOnly(1.0, "MXNet's AdaDelta has no learning rate (the step is "
                                           "the delta itself, torch's lr=1.0)")},
    ("Adadelta", "weight_decay"): {"pytorch": Same(("wd",)), "*": OffOnly(0, "torch adds weight_decay*w to the gradient; "
                                                   "MXNet's AdaDelta subtracts wd*w from the "
                                                   "weight, without the learning rate: give wd="
                                                   " for MXNet's")},
    ("Adafactor", "eps"): {"*": Same(("epsilon1", "epsilon2"))},
    ("Adafactor", "d"): {"*": Same(("clip_threshold",))},
    # torch's default weight_decay 0.1 is Muon's decoupled wd (w*(1 - lr*wd)), as the toolkit's
    ("Muon", "weight_decay"): {"*": Same(("wd",), torch_default=True)},
    ("Muon", "adjust_lr_fn"): {"*": Same(("adjust_lr",))},
    ("Rprop", "etas"): {"*": Same(("etaminus", "etaplus"))},
    ("Rprop", "step_sizes"): {"*": Same(("step_size_min", "step_size_max"))},
    # lion-pytorch's Lion (the spec's torch_peer)
    ("Lion", "use_triton"): {"*": Moot(None, False, "the toolkit's own kernels run the update "
                                                    "(lion-pytorch's Triton kernel is a GPU "
                                                    "path of the same update)")},
    # the authors' ADOPT (the spec's torch_peer)
    ("ADOPT", "clip_lambda"): {"*": Converted(
        "use_clipping", _adopt_clipping,
        lambda group: ADOPT_SCHEDULE if group.get("use_clipping", True) else None,
        "`use_clipping = clip_lambda is not None`; the schedule must be the paper's "
        "`step**0.25` (a group keeps it as that string)",
        lambda value: ADOPT_SCHEDULE if _adopt_clipping(value) else None)},
    # the authors' AdaBelief (the spec's torch_peer)
    ("AdaBelief", "amsgrad"): {"*": OffOnly(False, "the toolkit's AdaBelief keeps no running "
                                                   "maximum of its second moment (the authors' "
                                                   "AMSGrad option)")},
    ("AdaBelief", "print_change_log"): {"*": Moot(None, True, "the toolkit prints no change "
                                                              "log")},
    ("Lion", "decoupled_weight_decay"): {"*": OffOnly(False, "lion-pytorch divides "
                                                             "weight_decay by the initial lr "
                                                             "then; give weight_decay (the "
                                                             "paper's lambda) directly")},
}

class Shared(NamedTuple):
    """A torch keyword that is also the optimizer's own keyword of the same spelling (an MXNet
    key, MXNet's meaning) where the two meanings differ (:data:`SHARED`): ``note`` says how
    (docs/torch.md's table); ``crosses``: a torch state_dict's value is taken under every
    convention (SGD's ``momentum``: the coefficient is torch's, its buffer crosses converted,
    ``crossing.SCALED``), else only under "pytorch", where the keyword means torch's, and
    under the others not, with a warning (AdaGrad's ``eps``, inside the root there)."""
    note: str
    crosses: bool


#: ``(torch class, keyword) ->`` :class:`Shared` (every other own keyword of torch's spelling
#: means torch's, and crosses: Adam's ``amsgrad``, RAdam's ``decoupled_weight_decay``)
SHARED = {  # checked against the registry by tests/test_torch_keywords.py::test_rules_name_torch_facts
    ("Adagrad", "eps"): Shared("MXNet's eps, inside the root: sqrt(h + eps); torch's is "
                               "outside, sqrt(h) + eps", crosses=False),
    ("SGD", "momentum"): Shared("MXNet's momentum: its buffer holds -lr*buf, so the two agree "
                                "while lr is constant and differ where it changes",
                                crosses=True),
}
#: ``(torch class, keyword) -> note``: an own keyword of torch's spelling and meaning that some
#: conventions refuse (docs/torch.md's table says so)
SOME_CONVENTIONS = {  # checked against the registry by tests/test_torch_keywords.py::test_rules_name_torch_facts
    ("Adam", "amsgrad"): "same, under conventions 'pytorch' and 'guide' (MXNet 1.9.1 has no "
                         "AMSGrad: refused under 'mxnet')",
    ("AdamW", "amsgrad"): "same, under conventions 'pytorch' and 'guide' (MXNet 1.9.1 has no "
                          "AMSGrad: refused under 'mxnet')",
    ("NAdam", "decoupled_weight_decay"): "same, under convention 'pytorch' (MXNet's Nadam "
                                         "couples wd into the gradient: refused under 'mxnet')",
    ("SGD", "nesterov"): "same, under convention 'pytorch' (MXNet's SGD has no Nesterov "
                         "momentum, which is NAG: refused under 'mxnet' and 'guide')",
    ("SGD", "dampening"): "same, under convention 'pytorch', in [0, 1] (torch takes any "
                          "number; MXNet's momentum has no dampening: refused under 'mxnet' "
                          "and 'guide')",
}


def namesake(spec):
    """The class name ``toolkit.torch`` follows for ``spec``: its ``torch.optim`` namesake, else
    its most used PyTorch implementation's (``spec.torch_peer``), else None."""
    if spec.torch:
        return spec.torch
    return spec.torch_peer.name if spec.torch_peer is not None else None


def signature(spec):
    """``{keyword: default}`` after ``params`` of the class ``toolkit.torch`` follows for
    ``spec`` (:func:`namesake`), in order; ``{}`` where there is none."""
    if spec.torch:
        return _torch_signature(spec.torch)
    return dict(spec.torch_peer.signature) if spec.torch_peer is not None else {}


def peer_defaults(klass):
    """``{keyword: default}`` of the PyTorch implementation ``toolkit.torch`` follows for
    ``klass`` where torch.optim ships none (the spec's ``torch_peer``), for the constructor
    keywords of ``klass`` of the same name whose default differs (AdaBelief's
    ``weight_decouple`` and ``rectify``, on in the authors' code, off in the paper's
    Algorithm 2), and the keywords of its ``form`` (Schedule-Free AdamW's
    ``lr_bias_correction``); ``{}`` otherwise."""
    spec = spec_of(klass)
    if spec.torch or spec.torch_peer is None:
        return {}
    own = dict(aliases.constructor_parameters(klass))
    return {k: v for k, v in spec.torch_peer.signature + spec.torch_peer.form
            if k in own and not equal(own[k], v)}


def _torch_signature(torch_name):
    """``{keyword: default}`` of ``torch.optim.<torch_name>`` (after ``params``)."""
    import torch
    klass = getattr(torch.optim, torch_name, None)
    if klass is None:
        return {}
    params = list(inspect.signature(klass.__init__).parameters.values())[2:]
    return {p.name: p.default for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD,
                                                            p.KEYWORD_ONLY)}


@functools.lru_cache(maxsize=None)
def rules(klass, convention):
    """``{torch keyword: (rule, torch's default)}`` of the toolkit optimizer class ``klass``
    under ``convention``: the keywords of its ``torch.optim`` namesake (with the spec's
    ``torch_flags`` fixed: NAG is SGD with ``nesterov=True``), or torch's usual names where
    torch ships none. MXNet's own keywords of the same spelling (AdaGrad's ``eps``, RMSProp's
    ``centered``, SGD's ``momentum``) are MXNet's keys, not torch ones, and are left out."""
    spec = spec_of(klass)
    accepted = aliases.accepted_keywords(klass)
    mapped = aliases.torch_keywords(klass)
    out = {}
    name = namesake(spec)
    if name is None:
        for key, names in mapped.items():
            if key not in accepted and key != "lr":
                out[key] = (Same(names), None)
        return out
    for key, default in signature(spec).items():
        if key in ("lr", "maximize"):
            rule = _pick(RULES.get((name, key)), convention)
            if rule is not None:
                out[key] = (rule, default)
            continue
        flags = spec.torch_flags
        if key in flags:
            out[key] = (OffOnly(flags[key], f"{klass.__name__} is torch's "
                                            f"{spec.torch}({key}={flags[key]!r})"), default)
            continue
        rule = _pick(RULES.get((name, key)), convention)
        if rule is not None:
            out[key] = (rule, default)
        elif key in _MOOT:
            out[key] = (_MOOT[key], default)
        elif key in accepted:
            continue  # MXNet's own keyword of that spelling
        elif key in mapped:
            out[key] = (Same(mapped[key]), default)
        else:
            out[key] = (OffOnly(default, aliases.hint(klass, key, True) or
                                f"{klass.__name__} has no {key}"), default)
    return out


def positional(spec):
    """The names of the positional hyperparameters after ``lr`` of the class ``toolkit.torch``
    follows for ``spec`` (:func:`namesake`; SGD's ``momentum, dampening, weight_decay,
    nesterov``; Lion's ``betas, weight_decay, use_triton, decoupled_weight_decay``), or
    ``()``."""
    torch_name = spec.torch
    if torch_name is None:
        return tuple(signature(spec))[1:]
    import torch
    klass = getattr(torch.optim, torch_name, None)
    if klass is None:
        return ()
    params = list(inspect.signature(klass.__init__).parameters.values())[3:]
    return tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD)


def torch_defaults(torch_name):
    """torch's defaults of ``torch.optim.<torch_name>``'s hyperparameters (not how it runs:
    ``foreach``, ``fused``... are left out), what a torch-spelled ``toolkit.torch`` class
    starts from."""
    return {k: v for k, v in _torch_signature(torch_name).items()
            if k not in _MOOT and k != "maximize" and v is not None}


def _pick(by_convention, convention):
    if by_convention is None:
        return None
    return by_convention.get(convention, by_convention["*"])


def table(klass, convention=None):
    """Markdown rows ``| keyword | meaning |`` of :func:`rules` (docs/torch.md), and of torch's
    keywords that are MXNet keywords of the same spelling too."""
    spec = spec_of(klass)
    own = rules(klass, convention or spec.default_convention)
    peer, own_defaults = peer_defaults(klass), dict(aliases.constructor_parameters(klass))
    rows = []
    for key in signature(spec) if namesake(spec) else own:
        if key in own:
            flag = spec.torch_requires.get(key)
            only = f", only with `{flag}=True`" if flag else ""
            rows.append(f"| `{key}` | {own[key][0].describe()}{only} |")
        elif key == "lr":
            rows.append("| `lr` | same: `learning_rate` |")
        elif key in aliases.accepted_keywords(klass):
            shared = SHARED.get((spec.torch, key))
            note = shared.note if shared is not None else \
                SOME_CONVENTIONS.get((spec.torch, key), "same")
            if key in peer:
                note += (f", default {peer[key]!r} as there (toolkit.optimizer."
                         f"{klass.__name__}'s is {own_defaults[key]!r})")
            rows.append(f"| `{key}` | the optimizer's own keyword of that name: {note} |")
    return rows
