"""``TorchOptimizer``: a ``torch.optim.Optimizer`` over one of the toolkit's optimizers, with
MXNet's numbers (docs/torch.md).

Each param group keeps one "inner" toolkit optimizer built from its options; parameters are
MXNet indices numbered as ``state_dict()`` numbers them, each with MXNet's count ``t``. A step
checks everything first, then runs each group as a table of rows per distinct ``(t, lr, wd)``
(:func:`toolkit.torch.rule_table.run_rule_table`) or, for any other step, index by index through
the inner optimizer's ``update_multi_precision``, as MXNet does. The class is assembled from
:mod:`toolkit.torch.running`, :mod:`toolkit.torch.planning`, :mod:`toolkit.torch.states` and
:mod:`toolkit.torch.checkpoint`; this module holds construction and the param groups.
"""
from __future__ import annotations

import itertools
import numbers
import operator

import numpy as np
import torch

from ..optimizers import aliases
from ..optimizers.registry import spec_of
from ..optimizers.validation import spelled
from . import keywords, meaning
from .binding import TrackedState
from .checkpoint import Checkpoints
from .planning import StepPlans
from .running import StepRuns, torch_threads  # noqa: F401 (torch_threads: importable here too)
from .states import ParameterStates, memory_order  # noqa: F401 (memory_order: importable here)

__all__ = ["TorchOptimizer"]


def _plain(value):
    """A value as a param group keeps it: Python's own scalars (``torch.load(...,
    weights_only=True)`` reads them)."""
    if isinstance(value, np.generic):
        return value.item()
    return value


_UNSET = object()


def _scalar(value, key, where):
    """A one-element tensor (torch takes a tensor lr) as the Python float it holds."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{where}: a tensor {key} must hold one element, got shape "
                             f"{tuple(value.shape)}")
        return float(value.item())
    return value


def _followed(spec):
    """The class whose signature ``toolkit.torch`` follows, as messages name it."""
    return f"torch.optim.{spec.torch}" if spec.torch else spec.torch_peer.source


class TorchOptimizer(StepRuns, StepPlans, ParameterStates, Checkpoints, torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` whose update is the toolkit optimizer ``toolkit_class``
    (generated per registered optimizer: ``toolkit.torch.Adam``...).

    ``params``: tensors, or param-group dicts with per-group options. Keywords: MXNet's
    constructor names (``learning_rate``, ``wd``, ``beta1``, ``rescale_grad``,
    ``clip_gradient``, ``multi_precision``, ``convention``...) or PyTorch's (``lr``,
    ``weight_decay``, ``betas``, ``eps``, ``alpha``, ``momentum`` where the optimizer has their
    counterpart), ``maximize``, and for the whole optimizer ``lr_scheduler`` (a
    ``toolkit.lr_scheduler`` scheduler, read at MXNet's ``num_update``) and
    ``begin_num_update``.
    """

    #: the toolkit optimizer class (set on each generated subclass)
    toolkit_class = None
    #: keywords a class takes when not given (torch's defaults of a torch-spelled class)
    torch_defaults = {}
    #: param-group keys that are the group's state, not its options: they change between
    #: steps without changing the update (the train/eval switch's ``train_mode``)
    group_state_keys = ()

    def __init__(self, params, lr=_UNSET, *args, **kwargs):
        klass = type(self).toolkit_class
        if klass is None:
            raise TypeError("TorchOptimizer is a base class: use toolkit.torch.<Name> or "
                            "toolkit.torch.create(name, params, ...)")
        # as the user named it (torch's spelling NAdam, or the toolkit's Nadam)
        name = "toolkit.torch.{}()".format(next(
            (c.__name__ for c in type(self).__mro__ if c.__module__ == "toolkit.torch"),
            klass.__name__))
        if args:  # torch's positional hyperparameters after lr, in torch's order
            names = meaning.positional(spec_of(klass))
            if len(args) > len(names):
                raise TypeError(f"{name} takes at most {2 + len(names)} positional arguments "
                                f"(params, lr{''.join(', ' + n for n in names)}: those of "
                                f"{_followed(spec_of(klass))}), got {2 + len(args)}"
                                if names else
                                f"{name} takes params and lr as positional arguments (it has "
                                "no torch.optim namesake to follow); give the others by name")
            for n, v in zip(names, args):
                if n in kwargs:
                    raise TypeError(f"{name} got multiple values for argument {n!r}")
                kwargs[n] = v
        if lr is not _UNSET:  # torch's second positional argument
            kwargs = {"lr": _scalar(lr, "lr", name), **kwargs}
        if self.torch_defaults:  # a torch-spelled class: torch's defaults where not given
            kwargs = keywords.with_defaults(klass, kwargs, self.torch_defaults, where=name)
        opts = keywords.normalise(klass, kwargs, where=name)
        self._scheduler = opts.pop("lr_scheduler", None)
        self._begin = opts.pop("begin_num_update", 0)
        given_lr = opts.pop("lr", None) if self._scheduler is not None else None
        if spec_of(klass).noise and "seed" not in opts and \
                "seed" in aliases.accepted_keywords(klass):
            # a noise-drawing optimizer (SGLD) follows torch.manual_seed unless given a seed
            opts["seed"] = torch.initial_seed()
        torch_given = {k: opts.pop(k) for k in list(opts)
                       if k != "lr" and k in keywords.torch_keys(klass, opts)}
        # the keys the user set (lr: in torch's spelling; MXNet's learning_rate keeps MXNet's
        # meaning, which AdaDelta ignores)
        changed = (set(opts) | set(torch_given)) - {"lr"} | ({"lr"} & set(kwargs))
        # torch's keywords checked under their names first (the optimizer's own checks name
        # MXNet's keywords, which the user did not give)
        keywords.check_given(klass, {**opts, **torch_given, **{k: kwargs[k] for k in
                                                               {"lr"} & changed}},
                             changed, where=name)
        # checks every option before anything is kept; with a toolkit scheduler, MXNet's rule
        # (the given learning rate, else the optimizer's default one, is its base_lr) applies
        # once, here
        template = self._build(opts, given_lr, where=name, given=changed)
        defaults = self._options_of(template, opts, name)
        defaults.update(torch_given)
        #: per group, where each converted torch key's value comes from (keywords.settle)
        self._default_sources = {}
        if "lr" not in opts and given_lr is None:
            keywords.torch_default_lr(klass, defaults)
        if keywords.settle(klass, defaults, changed, self._default_sources, where=name,
                           scheduled=self._scheduler is not None):
            # torch keys gave MXNet ones: built again with them, checked as the constructor
            # checks its keywords
            template = self._build({k: defaults[k] for k in keywords.group_keys(klass)
                                    if k in defaults}, given_lr, where=name, given=changed)
        self._num_update = template.num_update
        self._sources = []
        self._inners = []
        self._synced = []
        #: the param group dicts the lists above belong to, in the same order
        #: (``_follow_groups``)
        self._groups = []
        #: parameter -> its :class:`~toolkit.torch.binding.Binding` (the arrays the kernels
        #: write, which ``self.state[p]`` shows)
        self._bindings = {}
        #: parameter -> what its last full check found (``_member``)
        self._facts = {}
        #: param group -> its steady state (``toolkit.torch.steady``), after a general step
        self._steady = {}
        super().__init__(params, defaults)
        self.state = self._tracked = TrackedState(self.state)
        #: ``self.state``'s generation when the steady groups were made, and when this
        #: optimizer last took the changes made to it (``_take_state_changes``)
        self._steady_generation = self._seen_generation = self._tracked.generation
        #: the parameters' ids in index order when the counts were last keyed
        #: (``_follow_positions``)
        self._order, self._ids = self._param_order()
        #: ``(self._ids, {id: index})`` as last made from them (``_count_of``)
        self._positions = (None, {})

    # --- construction ----------------------------------------------------------------------
    @staticmethod
    def _options_of(template, opts, name):
        """The MXNet keys of a group made from the toolkit optimizer ``template`` (its
        attributes) and the given options ``opts``."""
        klass = type(template)
        defaults = {}
        for key in keywords.group_keys(klass):
            if key == "lr":
                value = template.learning_rate
            elif key == "maximize":
                value = opts.get(key, False)
                if not isinstance(value, bool):
                    raise TypeError(f"{name}: maximize must be a bool, got {value!r}")
            else:
                attr = keywords.attribute_of(klass, key)
                if attr is not None:
                    value = getattr(template, attr)
                elif key in opts:
                    value = opts[key]
                else:
                    continue
            value = _plain(value)
            if value is None or isinstance(value, (bool, numbers.Real, str)) or (
                    type(value) is tuple and all(isinstance(v, numbers.Real) for v in value)):
                defaults[key] = value  # (a tuple: Muon's ns_coefficients)
        return defaults

    def _build(self, opts, scheduler_lr=None, where=None, given=()):
        """A toolkit optimizer for the options ``opts`` (a group's spelling), checked (a refusal
        naming ``where`` where given, a relation's naming the torch keys ``given`` as the user
        gave them). With a toolkit scheduler its learning rate is the scheduler's ``base_lr``
        (``scheduler_lr``: the one given to the constructor, MXNet's rule)."""
        klass = type(self).toolkit_class
        mxnet_keys = keywords.group_keys(klass)
        kw = {k: v for k, v in opts.items() if k not in ("lr", "maximize") and k in mxnet_keys}
        if self._scheduler is None:
            if opts.get("lr") is not None:
                kw["learning_rate"] = opts["lr"]
        elif scheduler_lr is not None:
            kw["learning_rate"] = scheduler_lr
        elif "_inners" in self.__dict__:  # after construction: the scheduler's own base_lr
            kw["learning_rate"] = self._scheduler.base_lr
        if not isinstance(opts.get("maximize", False), bool):
            raise TypeError(f"maximize must be a bool, got {opts['maximize']!r}")
        try:
            with spelled(keywords.spellings(klass, opts, given)):  # as the user spelled them
                return klass(lr_scheduler=self._scheduler, begin_num_update=self._begin, **kw)
        except (TypeError, ValueError) as e:
            if where is None or str(e).startswith(f"{where}: "):
                raise
            raise type(e)(f"{where}: {e}") from None

    def add_param_group(self, param_group):
        """Add a param group (torch's ``add_param_group``): its options in MXNet's or
        PyTorch's names, the others taken from the optimizer's defaults; checked before it is
        added."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        if "params" not in param_group:
            raise ValueError("a param group needs 'params'")
        klass = type(self).toolkit_class
        options = {k: v for k, v in param_group.items() if k not in ("params", "param_names")}
        if "lr" in options:  # a one-element tensor, as the constructor takes it
            options["lr"] = _scalar(options["lr"], "lr", "add_param_group")
        opts = keywords.normalise(klass, options, where="add_param_group", level=False,
                                  inherited=self.defaults)
        if self._scheduler is not None and "lr" in opts:
            raise TypeError("add_param_group: this optimizer's learning rate comes from its "
                            "lr_scheduler; a param group cannot give its own lr")
        merged = {**self.defaults, **opts}
        sources = dict(self._default_sources)
        keywords.settle(klass, merged, set(opts) - {"lr"} | ({"lr"} & set(param_group)),
                        sources, where="add_param_group", scheduled=self._scheduler is not None)
        inner = self._build(merged, where="add_param_group", given=set(options))
        params = param_group["params"]
        if not isinstance(params, set):  # (torch.optim refuses a set by name)
            params = [params] if isinstance(params, torch.Tensor) else list(params)
            for p in params:  # Muon: 2-D parameters only, refused here as torch refuses them
                if isinstance(p, torch.Tensor):
                    inner.check_shape(tuple(p.shape))
        group = {"params": params}
        if "param_names" in param_group:
            group["param_names"] = param_group["param_names"]
        group.update(merged)
        if self._scheduler is not None:
            group["lr"] = inner.learning_rate
        super().add_param_group(group)
        self._inners.append(inner)
        self._sources.append(sources)
        self._synced.append(self._snapshot(group))
        self._groups.append(self.param_groups[-1])

    @staticmethod
    def _snapshot(group):
        return {k: v for k, v in group.items() if k not in ("params", "param_names")}

    @property
    def toolkit_optimizers(self):
        """The toolkit optimizer of each param group (read them; a group's options are set
        through ``param_groups``)."""
        self._follow_groups()
        return tuple(self._inners)

    def _follow_groups(self):
        """Keep each group's toolkit optimizer with its group: where param groups were deleted
        or reordered in ``param_groups`` since the last step, each keeps its own optimizer (its
        options and counts) and a deleted one's goes with it. A group put into the list by hand
        (not through ``add_param_group``) is refused, with nothing changed."""
        groups = self.param_groups
        mine = self._groups
        if len(groups) == len(mine) and all(map(operator.is_, groups, mine)):
            return
        position = {id(g): k for k, g in enumerate(mine)}
        keep = []
        for gi, group in enumerate(groups):
            k = position.get(id(group))
            if k is None or k in keep:
                how = "directly" if k is None else "a second time"
                raise ValueError(
                    f"param group {gi} was put into param_groups {how}; add a group with "
                    "opt.add_param_group(...), which checks its options and makes its "
                    "optimizer")
            keep.append(k)
        self._inners = [self._inners[k] for k in keep]
        self._synced = [self._synced[k] for k in keep]
        self._sources = [self._sources[k] for k in keep]
        self._groups = list(groups)
        self._steady.clear()

    def _sync_options(self):
        """Hand each group's options (as torch's schedulers or the user left them) to its
        toolkit optimizer, checked; returns what puts them back (on a later error) and the
        groups whose snapshot is to be taken again (:func:`_unchanged`: a group whose every
        option is the very object its snapshot holds has nothing to hand over)."""
        klass = type(self).toolkit_class
        done = []
        written = []
        synced = []

        def undo():
            inners = []
            for inner, _, _ in done:
                if not any(inner is i for i in inners):
                    inners.append(inner)
            for inner in inners:  # each one's values of before, together: their relations hold
                with inner.together():
                    for i, attr, old in reversed(done):
                        if i is inner:
                            setattr(inner, attr, old)
            for group, key, old in reversed(written):
                if old is keywords.MISSING:
                    group.pop(key, None)
                else:
                    group[key] = old

        try:
            for gi, group in enumerate(self.param_groups):
                inner, last = self._inners[gi], self._synced[gi]
                if self._scheduler is None and _unchanged(group, last):
                    continue
                synced.append(gi)
                gone = [k for k in last if k not in group]
                if gone:  # torch's own step would fail on it with a KeyError
                    raise ValueError(
                        f"param group {gi} has no {gone[0]!r} any more (deleted from the group "
                        f"since the last step); set it again, e.g. group[{gone[0]!r}] = "
                        f"{last[gone[0]]!r}: a group keeps every option it was made with")
                if isinstance(group.get("lr"), torch.Tensor):
                    written.append((group, "lr", group["lr"]))
                    group["lr"] = _scalar(group["lr"], "lr", f"param group {gi}")
                changed = {k for k, v in group.items()
                           if k not in ("params", "param_names", *self.group_state_keys) and
                           (k not in last or not (v is last[k] or _same(v, last[k])))}
                torch_keys = keywords.torch_keys(klass, group)
                if changed:
                    written.extend((group, k, old) for k, old in keywords.settle(
                        klass, group, changed, self._sources[gi], where=f"param group {gi}",
                        scheduled=self._scheduler is not None))
                if self._scheduler is not None:
                    if "initial_lr" in group:
                        raise TypeError(
                            "a torch.optim.lr_scheduler and the toolkit lr_scheduler both drive "
                            "this optimizer's learning rate; use one of them")
                    if group["lr"] != last["lr"]:
                        raise TypeError(
                            f"param group {gi}'s lr was changed to {group['lr']!r}, but its "
                            "learning rate comes from the toolkit lr_scheduler; use one of them")
                try:  # the relations of its values checked together, in torch's names
                    with spelled(keywords.spellings(klass, group, changed)), inner.together():
                        self._hand_over(gi, group, last, inner, torch_keys, done)
                except ValueError as e:
                    raise (e if str(e).startswith(f"param group {gi}: ") else
                           ValueError(f"param group {gi}: {e}")) from None
                if not isinstance(group.get("maximize", False), bool):
                    raise TypeError(f"param group {gi}: maximize must be a bool, got "
                                    f"{group['maximize']!r}")
        except BaseException:
            undo()
            raise
        return undo, synced

    def _hand_over(self, gi, group, last, inner, torch_keys, done):
        """Group ``gi``'s MXNet keys that changed since ``last`` (its snapshot), assigned to
        its toolkit optimizer ``inner`` (``(inner, attr, old)`` appended to ``done`` for
        each); a key without attribute, or one that changes the state's layout, refused."""
        klass = type(self).toolkit_class
        for key, value in group.items():
            if key in ("params", "param_names", "maximize", "initial_lr",
                       *self.group_state_keys) or (
                    key in last and (value is last[key] or _same(value, last[key]))):
                continue
            if key == "lr" and self._scheduler is not None:
                continue
            if key not in last or key in torch_keys:
                continue  # a key of the user's own (torch allows them), or a torch key
                # settled into MXNet's above
            attr = keywords.attribute_of(klass, key)
            if attr is None:
                raise ValueError(
                    f"param group {gi}: {key} cannot change after the group is made "
                    f"(from {last[key]!r} to {value!r}); add a new param group with it")
            old = getattr(inner, attr)
            try:
                setattr(inner, attr, value)
            except ValueError as e:
                if "cannot change from" not in str(e):
                    raise
                raise ValueError(
                    f"param group {gi}: {key} cannot change from {last[key]!r} to "
                    f"{value!r} once the group's parameters have state: it changes "
                    f"the state {klass.__name__} keeps for them. Add a new param group "
                    f"with {key}={value!r} (opt.add_param_group) for the parameters "
                    "that should take it") from None
            done.append((inner, attr, old))

    def __repr__(self):
        klass = type(self).toolkit_class
        lines = [f"toolkit.torch.{klass.__name__} ("]
        for gi, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {gi}")
            for key in sorted(k for k in group if k not in ("params", "param_names")):
                lines.append(f"    {key}: {group[key]!r}")
        lines.append(")")
        return "\n".join(lines)


def _unchanged(group, last):
    """Whether every option of ``group`` is the very object ``last`` (its snapshot) holds, the
    same keys, and its lr no tensor: nothing for :meth:`TorchOptimizer._sync_options` to hand
    over (an option it compares finds each one the same by identity first)."""
    if len(group) - 1 - ("param_names" in group) != len(last):
        return False
    if not all(map(operator.is_, map(group.get, last, itertools.repeat(_UNSET)),
                   last.values())):
        return False
    return not isinstance(group.get("lr"), torch.Tensor)


def _same(a, b):
    try:
        return bool(a == b) and type(a) is type(b)
    except (TypeError, ValueError, RuntimeError):
        return False
