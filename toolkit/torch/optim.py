"""``TorchOptimizer``: a ``torch.optim.Optimizer`` over one of the toolkit's optimizers, with
MXNet's numbers (docs/torch.md).

Each param group keeps one toolkit optimizer (its "inner" optimizer) built from the group's
options; every parameter is an MXNet index, numbered as ``state_dict()`` numbers it (across the
groups, in order), with MXNet's per-index count ``t``. A step validates everything first (the
groups' options as torch's schedulers left them, every gradient, the step's scalars), then runs
each group: an optimizer whose step reads only ``(t, lr, wd)`` is planned once per distinct three
and its rows run as a table over the tensors (:func:`toolkit.torch.launch.run_rule_table`); any
other step (float16, a sparse gradient, Nadam's schedule, LARS's norms, a custom ``update``) goes
index by index through the inner optimizer's own ``update_multi_precision``, as MXNet does.
"""
from __future__ import annotations

import itertools
import numbers
import operator
from typing import NamedTuple

import numba
import numpy as np
import torch

from ..backends import cpu
from ..sparse import RowSparse
from ..optimizers import aliases
from ..optimizers.batched import StepScalars
from ..optimizers.registry import spec_of
from ..trainer.buffers import planned_rows
from . import crossing, keywords, meaning
from .binding import FRESH, REBIND, Binding, TrackedState, check_entry
from .checkpoint import Checkpoints
from .launch import run_rule_table, run_rule_table_mp
from .maximize import negated_row
from .steady import SteadyGroup, SteadyStep

__all__ = ["TorchOptimizer"]

_DENSE_DTYPES = (torch.float32, torch.float64)
_NUMBA_MAX = numba.config.NUMBA_NUM_THREADS
_STRIDED = torch.strided
_HALF = (torch.float16, torch.bfloat16)


def _plain(value):
    """A value as a param group keeps it: Python's own scalars (``torch.load(...,
    weights_only=True)`` reads them)."""
    if isinstance(value, np.generic):
        return value.item()
    return value


_UNSET = object()


#: whether numba's thread pool was launched by :func:`_launch_numba_pool` (once a process)
_POOL = [False]


def _launch_numba_pool():
    """Launch numba's thread pool (its first ``get_num_threads`` does), keeping torch's
    thread count: numba's OpenMP layer, launched, sets the OpenMP runtime it shares with torch
    to ``NUMBA_NUM_THREADS`` threads, which ``torch.get_num_threads()`` then reports (a
    ``torch.set_num_threads(1)`` made before a process's first step was lost)."""
    threads = torch.get_num_threads()
    numba.get_num_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    _POOL[0] = True


class torch_threads:
    """Within the block numba's parallel kernels use ``torch.get_num_threads()`` threads (at
    most ``NUMBA_NUM_THREADS``), as torch's own CPU kernels would; numba's setting (per
    thread) is put back after. torch's own setting is left as it was (:func:`_launch_numba_pool`)."""
    __slots__ = ("old",)

    def __enter__(self):
        if not _POOL[0]:
            _launch_numba_pool()
        want = min(torch.get_num_threads(), _NUMBA_MAX)
        old = numba.get_num_threads()
        self.old = old if old != want else None
        if self.old is not None:
            numba.set_num_threads(want)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            numba.set_num_threads(self.old)


def _written_step(value, index, inner):
    """The count ``t`` a user wrote as ``opt.state[p]["step"]`` (torch keeps the step there):
    a whole number >= 0, as a number or a one-element tensor; 0 starts the count afresh."""
    t = value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
    if isinstance(t, bool) or not isinstance(t, numbers.Real) or t != t or t < 0 or \
            t != int(t):
        raise ValueError(f"parameter {index}: opt.state[p]['step'] = {value!r} is not a count "
                         "(a whole number >= 0)")
    t = int(t)
    begin = inner.begin_num_update
    return begin + t if t else None


def _scalar(value, key, where):
    """A one-element tensor (torch takes a tensor lr) as the Python float it holds."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{where}: a tensor {key} must hold one element, got shape "
                             f"{tuple(value.shape)}")
        return float(value.item())
    return value


class _TableRun(NamedTuple):
    """One table of rows run over the tensors of one dtype (:func:`run_rule_table`)."""
    factory: object
    dtype: np.dtype
    tensors: list
    table: np.ndarray


class _SingleRun(NamedTuple):
    """A member whose step is not one rule call on its own arrays: launched on its own."""
    member: object
    arrays: tuple
    t: int
    lr: float
    wd: float


class _Member:
    """One parameter with a gradient in this step: its index, tensor, the arrays the update
    reads, and how it runs; ``new_state``: ``(toolkit state, named tensors, values)`` where
    this step binds a new state (``values``: the ``opt.state`` entry's tensors it takes, or
    None for a fresh state)."""
    __slots__ = ("index", "p", "grad", "perm", "sparse", "new_state", "route")

    def __init__(self, index, p, grad):
        self.index, self.p, self.grad = index, p, grad
        self.perm = self.new_state = None
        self.sparse = False
        self.route = "vector"


def memory_order(p):
    """None for a contiguous tensor; else the permutation of its dimensions that lists them in
    memory order (``p.permute(perm)`` is contiguous: channels_last's ``(0, 2, 3, 1)``), or a
    ValueError where there is none (a tensor with gaps or overlaps)."""
    if p.is_contiguous():
        return None
    perm = tuple(sorted(range(p.dim()), key=lambda d: (-p.stride(d), -p.shape[d])))
    if not p.permute(perm).is_contiguous():
        raise ValueError(f"a parameter with strides {p.stride()} and shape {tuple(p.shape)} is "
                         "not dense in memory (gaps or overlaps); pass contiguous parameters")
    return perm


def _ordered(t, perm):
    """``t`` with its dimensions in memory order (the permutation ``perm`` of its weight);
    a gradient not in that order is copied into it."""
    if perm is not None:
        t = t.permute(perm)
    return t if t.is_contiguous() else t.contiguous()


def _unordered(t, perm):
    """A tensor made in memory order (``_ordered``) seen in its weight's logical shape."""
    if perm is None:
        return t
    inverse = [0] * len(perm)
    for k, d in enumerate(perm):
        inverse[d] = k
    return t.permute(inverse)


class TorchOptimizer(Checkpoints, torch.optim.Optimizer):
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

    def __init__(self, params, lr=_UNSET, *args, **kwargs):
        klass = type(self).toolkit_class
        if klass is None:
            raise TypeError("TorchOptimizer is a base class: use toolkit.torch.<Name> or "
                            "toolkit.torch.create(name, params, ...)")
        name = f"toolkit.torch.{klass.__name__}()"
        if args:  # torch's positional hyperparameters after lr, in torch's order
            names = meaning.positional(spec_of(klass).torch)
            if len(args) > len(names):
                raise TypeError(f"{name} takes at most {2 + len(names)} positional arguments "
                                f"(params, lr{''.join(', ' + n for n in names)}: those of "
                                f"torch.optim.{spec_of(klass).torch}), got {2 + len(args)}"
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
        # checks every option before anything is kept; with a toolkit scheduler, MXNet's rule
        # (the given learning rate, else the optimizer's default one, is its base_lr) applies
        # once, here
        template = self._build(opts, given_lr)
        defaults = self._options_of(template, opts, name)
        defaults.update(torch_given)
        #: per group, where each converted torch key's value comes from (keywords.settle)
        self._default_sources = {}
        # the keys the user set (lr: in torch's spelling; MXNet's learning_rate keeps MXNet's
        # meaning, which AdaDelta ignores)
        changed = (set(opts) | set(torch_given)) - {"lr"} | ({"lr"} & set(kwargs))
        if "lr" not in opts and given_lr is None:
            keywords.torch_default_lr(klass, defaults)
        if keywords.settle(klass, defaults, changed, self._default_sources, where=name,
                           scheduled=self._scheduler is not None):
            # torch keys gave MXNet ones: built again with them, checked as the constructor
            # checks its keywords
            template = self._build({k: defaults[k] for k in keywords.group_keys(klass)
                                    if k in defaults}, given_lr)
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
            if value is None or isinstance(value, (bool, numbers.Real, str)):
                defaults[key] = value
        return defaults

    def _build(self, opts, scheduler_lr=None):
        """A toolkit optimizer for the options ``opts`` (a group's spelling), checked. With a
        toolkit scheduler its learning rate is the scheduler's ``base_lr``
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
        return klass(lr_scheduler=self._scheduler, begin_num_update=self._begin, **kw)

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
        opts = keywords.normalise(klass, options, where="add_param_group", level=False,
                                  inherited=self.defaults)
        if self._scheduler is not None and "lr" in opts:
            raise TypeError("add_param_group: this optimizer's learning rate comes from its "
                            "lr_scheduler; a param group cannot give its own lr")
        merged = {**self.defaults, **opts}
        sources = dict(self._default_sources)
        keywords.settle(klass, merged, set(opts) - {"lr"} | ({"lr"} & set(param_group)),
                        sources, where="add_param_group", scheduled=self._scheduler is not None)
        inner = self._build(merged)
        group = {"params": param_group["params"]}
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

    # --- the step --------------------------------------------------------------------------
    @torch.compiler.disable  # under torch.compile: a graph break, the step runs eagerly
    def step(self, closure=None):
        """One update of every parameter whose ``.grad`` is not None (the closure, if given,
        runs first under ``torch.enable_grad()`` and its value is returned). The CPU kernels
        run on ``torch.get_num_threads()`` threads (at most numba's ``NUMBA_NUM_THREADS``)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._follow_groups()
        self._follow_positions()
        self._take_state_changes()
        undo, synced = self._sync_options()
        try:
            plans = self._plan()
        except BaseException:
            undo()
            raise
        for gi in synced:  # the options are the inner ones now
            self._synced[gi] = self._snapshot(self.param_groups[gi])
        if all(type(members) is SteadyStep and members.steady.serial
               for _, _, members, _ in plans):
            self._run(plans)  # serial kernels only: no thread count to follow
        else:
            with torch_threads():
                self._run(plans)
        return loss

    def _param_order(self):
        """The parameters in index order, and their ids (the list keeps them alive, so that no
        id is reused while it is compared)."""
        order = [p for group in self.param_groups for p in group["params"]]
        return order, list(map(id, order))

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

    def _follow_positions(self):
        """Keep each parameter's count with the parameter: an MXNet count is keyed by the
        index (the position across the groups), so where parameters were inserted, removed,
        reordered or replaced in ``param_groups`` since the counts were keyed, each count moves
        to its parameter's new index, and a new parameter has none (it starts at 1, as
        torch.optim starts a parameter it has no state for)."""
        order = [p for group in self.param_groups for p in group["params"]]
        ids = list(map(id, order))
        if ids == self._ids:
            return
        old_index = {i: k for k, i in enumerate(self._ids)}
        counts = {}
        for inner in self._inners:
            counts.update(inner.update_counts)
        index = 0
        for group, inner in zip(self.param_groups, self._inners):
            moved = {}
            for p in group["params"]:
                k = old_index.get(id(p))
                if k is not None and k in counts and (p in self._bindings or
                                                      self.state.get(p)):
                    moved[index] = counts[k]
                index += 1
            inner.restore_counts(moved, inner.num_update)
        self._order, self._ids = order, ids
        self._steady.clear()

    def _take_state_changes(self):
        """Take what was done to ``self.state`` since the last step: a mapping assigned to
        ``opt.state`` is wrapped again (:class:`TrackedState`), and a parameter whose entry was
        deleted or emptied loses its toolkit state and its count (its next step starts a fresh
        state at count 1, as torch starts one)."""
        if self.state is not self._tracked:
            self.state = self._tracked = TrackedState(self.state)
            self._steady.clear()
            self._seen_generation = -1
        generation = self._tracked.generation
        if generation == self._seen_generation:
            return
        written = []  # (entry, index, inner, count) of each step the user wrote, checked first
        index = 0
        for group, inner in zip(self.param_groups, self._inners):
            for p in group["params"]:
                entry = self.state.get(p)
                if entry and dict.__contains__(entry, "step"):  # written, not the one shown
                    written.append((entry, index, inner,
                                    _written_step(dict.__getitem__(entry, "step"), index,
                                                  inner)))
                index += 1
        index = 0
        for group, inner in zip(self.param_groups, self._inners):
            counts = {}  # index -> the count the user set (None: forgotten)
            for entry, i, owner, t in written:
                if owner is inner:
                    del entry["step"]
                    counts[i] = t
            for p in group["params"]:
                if p in self._bindings and not self.state.get(p):
                    del self._bindings[p]
                    self._facts.pop(p, None)
                    counts[index] = None
                index += 1
            if counts:
                kept = inner.update_counts
                for i, t in counts.items():
                    if t:
                        kept[i] = t
                    else:
                        kept.pop(i, None)
                inner.restore_counts(kept, max([inner.num_update, *kept.values()]))
        self._seen_generation = self._tracked.generation

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
            for inner, attr, old in reversed(done):
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
                changed = {k for k, v in group.items() if k not in ("params", "param_names") and
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
                for key, value in group.items():
                    if key in ("params", "param_names", "maximize", "initial_lr") or (
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
                if not isinstance(group.get("maximize", False), bool):
                    raise TypeError(f"param group {gi}: maximize must be a bool, got "
                                    f"{group['maximize']!r}")
        except BaseException:
            undo()
            raise
        return undo, synced

    def _plan(self):
        """Every group's members with a gradient, checked, with the state each new one gets;
        the step's scalars checked (nothing is written)."""
        plans = []
        index = 0
        num_update = self._num_update
        for gi, group in enumerate(self.param_groups):
            inner = self._inners[gi]
            steady = self._steady.get(gi)
            if steady is not None and self._scheduler is None and \
                    self._tracked.generation == self._steady_generation:
                step = self._steady_step(steady, group["params"], inner, num_update,
                                         group.get("maximize", False))
                if step is not None:
                    num_update = max(num_update, step.top)
                    plans.append((gi, inner, step, step.scalars))
                    index += len(group["params"])
                    continue
            members = []
            for p in group["params"]:
                if p.grad is not None:
                    members.append(self._member(index, p, inner, group))
                index += 1
            if members:
                vector = inner.plans_by_scalars and all(m.route == "vector" for m in members)
                if not vector:
                    for m in members:
                        m.route = "each"
                scalars = None
                if self._scheduler is None:
                    # the step's scalars, and their errors, before anything is written. Not
                    # with a toolkit scheduler: MXNet's schedulers keep state (FactorScheduler
                    # decays its base_lr once asked for a later count), so they are read once,
                    # in MXNet's order, by the step itself
                    inner.num_update = num_update
                    scalars = inner.step_scalars([m.index for m in members])
                    num_update = max(num_update, int(scalars.t.max()))
                plans.append((gi, inner, members, scalars))
        return plans

    def _steady_step(self, steady, params, inner, num_update, maximize):
        """The checked :class:`SteadyStep` of a group on its steady path, or None (the general
        path then runs): its gradients, the step's scalars (checked as the general path checks
        them) and ``kernel_row``'s row per distinct ``(t, lr, wd)``, all of one rule. With
        ``maximize`` the rows are those of the negated gradients
        (:func:`toolkit.torch.maximize.negated_row`), or None where the rule has no such row; a
        group with a float32 master (bfloat16) steps on ``-grad`` itself, as its general path
        does, so that a NaN gradient's sign bit is that path's too."""
        negated = maximize and steady.weight is not None
        got = steady.gradients(params, negated)
        if got is None:
            return None
        grads, grad_ptrs = got
        inner.num_update = num_update
        scalars = inner.step_scalars(steady.kept)
        planned = self._planned_table(scalars, inner, maximize and not negated)
        if planned is None:
            return None
        return SteadyStep(steady, grads, grad_ptrs, scalars, *planned)

    @staticmethod
    def _planned_table(scalars, inner, maximize=False):
        """``(factory, rows, inverse, top)``: the row of ``inner.kernel_row`` for each distinct
        ``(t, lr, wd)`` of ``scalars``, where each position's row is (:func:`planned_rows`),
        and the largest count; with ``maximize`` the rows of the negated gradients
        (:func:`toolkit.torch.maximize.negated_row`). None unless every distinct triple has
        the same rule, with rows of one length (and, with ``maximize``, rows the rule can
        negate)."""
        t, lr, wd = scalars.t, scalars.lr, scalars.wd
        first, inverse = scalars.distinct()
        if inverse is None:  # one triple (the common case): its row as the table's one row
            top = int(t[0])
            factory, row = inner.kernel_row(top, float(lr[0]), float(wd[0]))
            if maximize:  # Python's negation: exact
                row = negated_row(factory, getattr(type(row), "_fields", None), tuple(row))
                if row is None:
                    return None
            return factory, np.array((row,), np.float64), None, top
        planned = []
        for j in first:
            j = int(j)
            factory, row = inner.kernel_row(int(t[j]), float(lr[j]), float(wd[j]))
            if planned and (factory is not planned[0][0] or len(row) != len(planned[0][1])):
                return None
            planned.append((factory, tuple(row), getattr(type(row), "_fields", None)))
        factory = planned[0][0]
        if maximize:  # Python's negation: exact
            rows = [negated_row(factory, names, row) for _, row, names in planned]
            if None in rows:
                return None
        else:
            rows = [row for _, row, _ in planned]
        rows, inverse = planned_rows(rows, inverse)
        # the largest count: each distinct triple's first position holds one of each count
        return factory, rows, inverse, max(int(t[j]) for j in first)

    def _member(self, index, p, inner, group):
        """The checked member ``index`` (``p`` with its gradient)."""
        grad = p.grad
        if grad.is_neg():  # its memory holds -grad (a conj().imag view): the values, copied
            grad = grad.resolve_neg()
        # a CPU parameter with state whose weight (address, dtype, shape, strides) and dense
        # gradient are as they were at its last full check: the facts of that check
        facts = self._facts.get(p)
        if facts is not None and p.data_ptr() == facts[0] and grad.layout is _STRIDED and \
                grad.is_cpu and grad.dtype is facts[1] and p.dtype is facts[1] and \
                grad.shape == facts[2] and p.shape == facts[2] and p.stride() == facts[3]:
            m = _Member(index, p, grad)
            m.route, m.perm = facts[4], facts[5]
            self._bind(m, inner, f"parameter {index}")
            return m
        where = f"parameter {index}"
        if p.layout != torch.strided:
            raise TypeError(f"{where} is a {p.layout} tensor; toolkit.torch updates dense "
                            "parameters")
        if p.device.type not in ("cpu", "cuda"):
            raise TypeError(f"{where} is on {p.device}; toolkit.torch updates CPU and CUDA "
                            "tensors")
        if grad.device != p.device:
            raise ValueError(f"{where}: its gradient is on {grad.device}, the parameter on "
                             f"{p.device}")
        if grad.dtype != p.dtype:
            raise TypeError(f"{where}: gradient dtype {grad.dtype} differs from the "
                            f"parameter's {p.dtype}")
        if p.dtype not in _DENSE_DTYPES + _HALF:
            raise TypeError(f"{where} has dtype {p.dtype}; toolkit.torch updates float16, "
                            "bfloat16 (with multi_precision=True), float32 and float64 tensors")
        if p.dtype == torch.bfloat16 and p.device.type != "cpu":
            raise TypeError(f"{where} is bfloat16 on {p.device}: toolkit.torch steps bfloat16 "
                            "parameters on the CPU only")
        if p.dtype == torch.bfloat16 and not inner.multi_precision:
            raise TypeError(f"{where} is bfloat16: the toolkit's kernels have no bfloat16 "
                            "arithmetic; pass multi_precision=True (a float32 master copy in "
                            "the state, the bfloat16 weight rounded from it each step)")
        m = _Member(index, p, grad)
        if grad.layout == torch.sparse_coo:
            if p.device.type != "cpu":
                raise TypeError(f"{where}: a sparse gradient on {p.device} is not supported "
                                "(CPU only)")
            if not p.is_contiguous():
                raise ValueError(f"{where}: a sparse gradient needs a contiguous parameter")
            if grad.sparse_dim() != 1 or tuple(grad.shape) != tuple(p.shape):
                raise ValueError(f"{where}: a sparse gradient must be sparse in its first "
                                 f"dimension only and shaped like the parameter {tuple(p.shape)}"
                                 f", got sparse_dim {grad.sparse_dim()}, shape "
                                 f"{tuple(grad.shape)}")
            mode = inner.row_sparse_mode(index)  # raises where the optimizer refuses one
            if mode == "dense":
                raise TypeError(
                    f"{where}: {type(inner).__name__} has no row-sparse update (MXNet makes the "
                    "gradient dense first); use a dense gradient (nn.Embedding(sparse=False)) "
                    "or an optimizer with a lazy update (docs/sparse.md)")
            m.sparse = True
            m.route = "each"
        elif grad.layout != torch.strided:
            raise TypeError(f"{where}: gradient layout {grad.layout} is not supported (dense "
                            "or sparse_coo)")
        elif tuple(grad.shape) != tuple(p.shape):
            raise ValueError(f"{where}: gradient shape {tuple(grad.shape)} differs from the "
                             f"parameter's {tuple(p.shape)}")
        if p.device.type == "cuda" or p.dtype == torch.float16 or (
                p.dtype == torch.bfloat16 and not p.is_contiguous()):
            m.route = "each"  # (a contiguous bfloat16 CPU weight: the addressed bfloat16 kernel)
        if p.device.type == "cuda" and not p.is_contiguous():
            raise ValueError(f"{where} is not contiguous (strides {p.stride()}); on CUDA "
                             "toolkit.torch updates contiguous parameters only")
        if not p.is_contiguous() and not (inner.state_like_weight and not inner.takes_norms):
            raise ValueError(
                f"{where} is not contiguous (strides {p.stride()}); {type(inner).__name__} "
                "reads rows or whole-tensor norms in the tensor's logical order: pass "
                "p.contiguous() parameters (docs/torch.md, 'Memory order')")
        m.perm = memory_order(p)
        self._bind(m, inner, where)
        if p.device.type == "cpu" and not m.sparse:
            self._facts[p] = (p.data_ptr(), p.dtype, p.shape, p.stride(), m.route, m.perm)
        return m

    def _bind(self, m, inner, where):
        """Check member ``m``'s state against its weight and ``opt.state`` entry
        (:meth:`Binding.check`) and set ``m.new_state`` where this step binds a new one."""
        p = m.p
        binding = self._bindings.get(p)
        entry = self.state.get(p)
        verdict = FRESH if binding is None else binding.check(p, entry, m.perm, where)
        if verdict is FRESH or verdict is REBIND:
            toolkit_state, named = self._new_state(m.index, p, inner)
            values = check_entry(entry, named, where) if entry else None
            m.new_state = (toolkit_state, named, values)

    def _install(self, p, toolkit_state, named, values=None):
        """Bind ``p`` to a new toolkit state (``named``: its tensors by slot name), taking
        ``values`` (slot name -> tensor; other keys are the user's) into it where given, and
        show it in ``opt.state``."""
        if values:
            with torch.no_grad():
                for n, fresh in named.items():
                    fresh.copy_(values[n])
        self._bindings[p] = Binding(toolkit_state, named, p, memory_order(p)
                                    if p.layout == torch.strided else None)
        # the user's own keys in the entry (or in ``values``) stay, as torch.optim keeps them;
        # no step reads them
        own = {}
        for source in (self.state.get(p), values):
            if source:
                own.update((k, v) for k, v in source.items() if k not in named and k != "step")
        values = {**named, **own}
        state = self.state
        self.state[p] = state.counted(values, lambda: self._count_of(p)) \
            if isinstance(state, TrackedState) else values

    def _count_of(self, p):
        """``p``'s count ``t`` (what ``opt.state[p]["step"]`` shows), or None: the counts are
        keyed by the positions of the last step (``_follow_positions``)."""
        if self._positions[0] is not self._ids:
            self._positions = (self._ids, {i: k for k, i in enumerate(self._ids)})
        index = self._positions[1].get(id(p))
        if index is not None:
            for inner in self._inners:
                t = inner.count_of(index)
                if t is not None:
                    return t
        return None

    def _new_state(self, index, p, inner):
        """``(toolkit state, {name: tensor})`` of a parameter stepped for the first time."""
        w = p.detach()
        if p.device.type == "cuda":
            state = inner.create_state_multi_precision(index, w)
            return state, self._named(inner, state, w)
        perm = memory_order(p)
        # the state is made in the weight's memory order (channels_last: the same strides)
        w = _ordered(w, perm)
        if p.dtype == torch.bfloat16:
            master = w.float()
            inner_state = inner.create_state(index, master.numpy())
            names = self._names(inner, inner_state)
            named = {"weight32": master}
            named.update((n, torch.from_numpy(a)) for n, a in
                         zip(names, inner.state_arrays(inner_state)))
            named = {n: _unordered(a, perm) if a.shape == w.shape else a
                     for n, a in named.items()}
            return ("bfloat16", master.numpy(), inner_state), named
        wn = w.numpy()
        state = inner.create_state_multi_precision(index, wn)
        named = {n: torch.from_numpy(a) for n, a in self._named(inner, state, wn).items()}
        named = {n: _unordered(a, perm) if a.shape == w.shape else a for n, a in named.items()}
        return state, named

    @staticmethod
    def _names(inner, inner_state):
        """The names ``opt.state[p]`` shows a toolkit state's arrays under: torch's name where
        the slot holds the quantity torch's namesake keeps under it (the spec's
        ``torch_slots``: Adam's ``mean`` is ``exp_avg``), else the slot's own."""
        arrays = inner.state_arrays(inner_state)
        slots = tuple(inner.state_slots())
        if len(slots) != len(arrays):
            return tuple(f"state{k}" for k in range(len(arrays)))
        torch_names = crossing.slot_names(type(inner), inner.convention)
        return tuple(torch_names.get(n, n) for n in slots)

    def _named(self, inner, state, w):
        """The arrays of a toolkit state by name: ``weight32`` (a float32 master copy), then the
        state slots."""
        out = {}
        if inner.uses_master(w):
            master, state = inner.split_master(state)
            out["weight32"] = master
        out.update(zip(self._names(inner, state), inner.state_arrays(state)))
        return out

    def _run(self, plans):
        for gi, inner, members, scalars in plans:
            group = self.param_groups[gi]
            if isinstance(members, SteadyStep):
                inner.num_update = self._num_update
                inner.commit_counts(members.steady.kept, scalars.t)
                members.steady.run(members)
                self._num_update = inner.num_update
                continue
            maximize = group.get("maximize", False)
            for m in members:
                if m.new_state is not None:
                    self._install(m.p, *m.new_state)
            inner.num_update = self._num_update
            if members[0].route == "vector":
                self._run_vector(inner, members, scalars, maximize)
            else:
                self._run_each(inner, members, maximize)
            self._num_update = inner.num_update
            self._steady.pop(gi, None)
            if members[0].route == "vector" and len(members) == len(group["params"]) and \
                    self._scheduler is None:  # the next step may take the steady path
                steady = SteadyGroup.build(group["params"], members[0].index, inner,
                                           self._held_views)
                if steady is not None:
                    self._steady[gi] = steady
        # the steady groups hold for the state as this step leaves it
        self._steady_generation = self._seen_generation = self._tracked.generation
        if self._scheduler is not None:  # every group shows the rate at num_update
            for gi, (group, inner) in enumerate(zip(self.param_groups, self._inners)):
                inner.num_update = self._num_update
                group["lr"] = self._synced[gi]["lr"] = inner.learning_rate

    def _run_each(self, inner, members, maximize):
        """Index by index through the inner optimizer's own update (it commits each count)."""
        for m in members:
            state = self._bindings[m.p].toolkit_state
            grad = m.grad
            if maximize:
                grad = -grad
            if m.sparse:
                grad = grad.coalesce()  # duplicate rows summed
                rows = grad.indices()[0].numpy().astype(np.int64)
                values = grad.values()
                if m.p.dtype == torch.bfloat16:
                    values = values.float()
                g = RowSparse(rows, values.numpy(), tuple(m.p.shape))
            elif m.p.device.type == "cuda":
                g = grad
            elif m.p.dtype == torch.bfloat16:
                g = _ordered(grad, m.perm).float().numpy()
            else:
                g = _ordered(grad, m.perm).numpy()
            if m.p.device.type == "cuda":
                stream = torch.cuda.current_stream(m.p.device)
                inner.update_multi_precision(m.index, m.p.detach(), g, state, stream=stream)
            elif m.p.dtype == torch.bfloat16:
                _, master, inner_state = state
                if m.sparse:
                    g = RowSparse(g.indices, g.values, master.shape)
                inner.update(m.index, master, g, inner_state)
                with torch.no_grad():  # rounded to nearest even
                    _ordered(m.p.detach(), m.perm).copy_(torch.from_numpy(master))
            else:
                inner.update_multi_precision(m.index, _ordered(m.p.detach(), m.perm).numpy(), g,
                                             state)

    def _run_vector(self, inner, members, scalars, maximize):
        """One planned launch per distinct ``(t, lr, wd)``, its rows run as a table over the
        tensors of each dtype (:func:`run_rule_table`); the counts committed once."""
        if scalars is None:
            scalars = inner.step_scalars([m.index for m in members])
        t, lr, wd = scalars.t, scalars.lr, scalars.wd
        bindings = self._bindings
        names = None  # one layout a group
        tensors = []
        for m in members:
            grad = -m.grad if maximize else m.grad
            if m.p.dtype == torch.bfloat16:  # contiguous: (master, grad, *states, weight)
                binding = bindings[m.p]
                # (weight, master, *states), kept as the float dtypes' below
                held = binding.views(m.p, lambda t, perm=m.perm: _ordered(t, perm), (
                    "weight32", *(n for n in binding.named if n != "weight32")))
                tensors.append((held[1], grad.contiguous(), *held[2:], held[0]))
                continue
            if names is None:
                names = self._names(inner, bindings[m.p].toolkit_state)
            # the weight and the bound state in memory order, kept while the weight's storage
            # is the same (an assignment to p.data makes them again)
            w_and_states = bindings[m.p].views(m.p, lambda t, perm=m.perm: _ordered(t, perm),
                                               names)
            tensors.append((w_and_states[0], _ordered(grad, m.perm)) + w_and_states[1:])
        by_dtype = {}
        for j, m in enumerate(members):
            by_dtype.setdefault(m.p.dtype, []).append(j)
        work = []  # in order: a _TableRun per dtype, or a _SingleRun per member on its own
        for dtype, js in by_dtype.items():
            js = np.array(js)
            planned = self._planned_table(StepScalars(t[js], lr[js], wd[js]), inner)
            if planned is not None:
                factory, rows, inverse, _ = planned
                # bfloat16: a float32 table (the float32 master's rule)
                np_dtype = np.dtype(np.float32) if dtype == torch.bfloat16 else \
                    np.dtype(str(dtype).replace("torch.", ""))
                table = np.ones((len(js), 1 + rows.shape[1]), np_dtype)
                # each rounded to the dtype, as a single call rounds
                table[:, 1:] = rows if inverse is None else rows[inverse]
                work.append(_TableRun(factory, "bfloat16" if dtype == torch.bfloat16 else
                                      np_dtype, [tensors[j] for j in js.tolist()], table))
            else:  # not one rule call on the member's own arrays: each member on its own
                for j in js.tolist():
                    work.append(_SingleRun(members[j], tensors[j], int(t[j]), float(lr[j]),
                                           float(wd[j])))
        inner.commit_counts([m.index for m in members], t)
        for run in work:
            if isinstance(run, _TableRun):
                if run.dtype == "bfloat16":
                    run_rule_table_mp(run.factory, run.tensors, run.table, "bfloat16")
                else:
                    run_rule_table(run.factory, run.dtype, run.tensors, run.table)
            elif run.member.p.dtype == torch.bfloat16:  # the float32 step, rounded after
                m, arrays = run.member, run.arrays
                _, master, inner_state = self._bindings[m.p].toolkit_state
                inner.launch_step(m.index, master, arrays[1].float().numpy(), inner_state,
                                  run.t, run.lr, run.wd, cpu.LAUNCHER)
                with torch.no_grad():  # rounded to nearest even
                    m.p.detach().copy_(torch.from_numpy(master))
            else:
                m, arrays = run.member, run.arrays
                inner.launch_step(m.index, arrays[0].numpy(), arrays[1].numpy(),
                                  self._bindings[m.p].toolkit_state, run.t, run.lr, run.wd,
                                  cpu.LAUNCHER)

    def _held_views(self, p):
        """``p``'s weight and state tensors in the rule's order as the last general step kept
        them (contiguous, in memory order), or None where they are not current."""
        binding = self._bindings.get(p)
        return None if binding is None else binding.held_views(p)

    # --- state_dict ------------------------------------------------------------------------
    def state_dict(self):
        """torch's layout: ``state`` keyed by parameter index (each parameter's state tensors
        by slot name, ``weight32`` a float32 master copy, and ``step``, MXNet's count ``t``),
        ``param_groups`` (the options, ``params`` as indices), and ``toolkit``: the format,
        the optimizer's registry name, ``num_update`` and each group's host state (Nadam's
        momentum schedule...). Tensors and plain Python values only:
        ``torch.load(..., weights_only=True)`` reads it."""
        self._follow_groups()
        self._follow_positions()  # what was done since the last step, as the next step takes it
        self._take_state_changes()
        for hook in self._optimizer_state_dict_pre_hooks.values():  # torch's hooks
            hook(self)
        out = self._pack()
        for hook in self._optimizer_state_dict_post_hooks.values():
            result = hook(self, out)
            if result is not None:
                out = result
        return out

    def load_state_dict(self, state_dict):
        """Load what :meth:`state_dict` gave (for the same parameters); a state that does not
        fit is a ValueError/TypeError with this optimizer unchanged."""
        self._follow_groups()
        for hook in self._optimizer_load_state_dict_pre_hooks.values():  # torch's hooks
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        self._unpack(state_dict)
        self._steady.clear()  # the state tensors may be new ones
        self._order, self._ids = self._param_order()  # the counts are keyed as loaded
        for hook in self._optimizer_load_state_dict_post_hooks.values():
            hook(self)

    # --- copies (copy.deepcopy, pickle) ---------------------------------------------------
    def __getstate__(self):
        """Everything but what shares memory with the state tensors (the numpy views and the
        views in memory order): :meth:`__setstate__` makes them again over the copied
        tensors."""
        out = dict(self.__dict__)
        out["_bindings"] = {}
        out["_facts"] = {}
        out["_steady"] = {}
        out["state"] = out["_tracked"] = None  # __setstate__ takes the copied state below
        out["_copied_state"] = {p: dict(dict.items(entry)) for p, entry in self.state.items()}
        return out

    def __setstate__(self, state):
        had_differentiable = "differentiable" in state.get("defaults", {})
        state = dict(state)
        copied = state.pop("_copied_state", None)
        if copied is not None:
            state["state"] = copied
        super().__setstate__(state)
        self.__dict__.setdefault("_steady", {})
        self.__dict__.setdefault("_groups", list(self.param_groups))
        self.__dict__.setdefault("_positions", (None, {}))
        if not had_differentiable:  # torch's __setstate__ adds it; it is no option here
            self.defaults.pop("differentiable", None)
        self.state = self._tracked = TrackedState(self.state)
        self._bindings = {}
        index = 0
        for group, inner in zip(self.param_groups, self._inners):
            for p in group["params"]:
                named = self.state.get(p)
                if named:  # the copied tensors' values in state made as a step makes it
                    toolkit_state, fresh = self._new_state(index, p, inner)
                    self._install(p, toolkit_state, fresh, named)
                index += 1
        self._steady_generation = self._seen_generation = self._tracked.generation
        self._order, self._ids = self._param_order()  # the copies' ids

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
