"""Each parameter's state in a ``toolkit.torch`` optimizer (:class:`ParameterStates`, a base class
of :class:`toolkit.torch.optim.TorchOptimizer`): made in the weight's memory order, bound
(:class:`~toolkit.torch.binding.Binding`) and shown in ``opt.state``; kept with its parameter
and count when parameters move in ``param_groups`` or ``opt.state`` is changed; made again over
the copied tensors of ``copy.deepcopy`` and pickle. Moments held in bfloat16 or int8
(``state_dtype``) are shown as :mod:`toolkit.torch.held` says. :func:`memory_order`,
:func:`ordered` and :func:`unordered` (:mod:`toolkit.torch.order`) are importable here too.
"""
from __future__ import annotations

import numbers

import torch

from ..optimizers.registry import spec_of
from ..backends import lowbit
from . import crossing, held
from .binding import FRESH, REBIND, Binding, TrackedState, check_entry
from .order import memory_order, ordered, unordered

__all__ = ["ParameterStates", "memory_order", "ordered", "unordered"]


def _forget_host_values(klass, inner, indices):
    """The host values of ``indices`` that torch's namesake keeps in each parameter's state
    (``crossing.HOST``: NAdam's ``mu_product``, per index under "pytorch", a list of
    ``[index, value]`` pairs) forgotten, as their states are: each starts afresh (1.0), as
    torch starts a ``mu_product`` it does not find. A value the group shares (MXNet's one
    ``m_schedule``) is kept, and so is every other host value (LBSGD's accumulated gradients,
    Schedule-Free's averaging weights: torch keeps none of them per parameter)."""
    kept_by_torch = crossing.per_parameter_host_keys(klass)
    if not indices or not kept_by_torch:
        return
    data, arrays = inner.host_state()
    if not any(isinstance(data.get(k), list) for k in kept_by_torch):
        return
    gone = set(indices)
    inner.check_host_state({k: [pair for pair in v if pair[0] not in gone]
                            if k in kept_by_torch and isinstance(v, list) else v
                            for k, v in data.items()}, arrays)()


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


def _used(named, weight):
    """The ``(name, array)`` pairs of the slots ``weight`` uses: a slot of no elements
    (Adafactor keeps ``variance`` empty for a matrix, ``row_var`` and ``col_var`` for a vector)
    is not shown, as torch's namesake keeps no entry for it; every slot of an empty weight is.
    An int8 slot (``lowbit.Quantized``) is never empty (it holds 4096 elements or more)."""
    if 0 in tuple(weight.shape):
        return list(named)
    return [(n, a) for n, a in named
            if type(a) is lowbit.Quantized or a.size != 0 or len(a.shape) != 1]


class ParameterStates:
    """The parameters' states of :class:`toolkit.torch.optim.TorchOptimizer` (a base class of
    it): their indices and counts, their bindings and ``opt.state`` entries, and copies."""

    def _param_order(self):
        """The parameters in index order, and their ids (the list keeps them alive, so that no
        id is reused while it is compared)."""
        order = [p for group in self.param_groups for p in group["params"]]
        return order, list(map(id, order))

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
                _forget_host_values(type(self).toolkit_class, inner,
                                    [i for i, t in counts.items() if t is None])
        self._seen_generation = self._tracked.generation

    def _bind(self, m, inner, where):
        """Check member ``m``'s state against its weight and ``opt.state`` entry
        (:meth:`Binding.check`) and set ``m.new_state`` where this step binds a new one."""
        p = m.p
        binding = self._bindings.get(p)
        entry = self.state.get(p)
        verdict = FRESH if binding is None else binding.check(p, entry, m.perm, where)
        if verdict is FRESH or verdict is REBIND:
            try:
                toolkit_state, named = self._new_state(m.index, p, inner)
            except (TypeError, ValueError, NotImplementedError) as e:
                raise type(e)(f"{where}: {e}") from None
            values = check_entry(entry, named, where) if entry else None
            slots = self._held_slots(inner, toolkit_state, p) if entry else ()
            if slots:  # int8 codes whose blocks were cut in another order are requantized; a
                # map that came with them (ZeroRedundancyOptimizer's load) is checked, then taken
                held.check_maps(slots, entry, where)
                values = held.loaded(slots, dict(entry.items()), p, False, where, own_maps=True)
                values = {n: values[n] for n in named}
            m.new_state = (toolkit_state, named, values)
        elif any(k.endswith(held.QMAP) for k in entry):  # a map written beside the bound codes
            held.check_maps(self._held_slots(inner, binding.toolkit_state, p), entry, where)

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
        maps = held.extra_keys(named)  # (taken with the codes: not the user's)
        for source in (self.state.get(p), values):
            if source:
                own.update((k, v) for k, v in source.items()
                           if k not in named and k != "step" and k not in maps)
        values = {**named, **own}
        state = self.state
        self.state[p] = state.counted(values, lambda: self._count_of(p),
                                      spec_of(type(self).toolkit_class).torch_step) \
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
        w = ordered(w, perm)
        if p.dtype == torch.bfloat16:
            master = w.float()
            inner_state = inner.create_state(index, master.numpy())
            names = self._names(inner, inner_state)
            named = {"weight32": master}
            named.update(held.tensors(dict(_used(zip(names, inner.state_arrays(inner_state)),
                                                 master.numpy()))))
            named = {n: unordered(a, perm) if a.shape == w.shape else a
                     for n, a in named.items()}
            return ("bfloat16", master.numpy(), inner_state), named
        wn = w.numpy()
        state = inner.create_state_multi_precision(index, wn)
        named = held.tensors(self._named(inner, state, wn))
        named = {n: unordered(a, perm) if a.shape == w.shape else a for n, a in named.items()}
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
        out.update(_used(zip(self._names(inner, state), inner.state_arrays(state)), w))
        return out

    def _held_slots(self, inner, toolkit_state, p):
        """The ``(name, array)`` pairs of the moments (the slots ``state_dtype`` may hold) of
        ``toolkit_state``, CPU parameter ``p``'s (bound, or made by :meth:`_new_state`); none for
        an optimizer without such moments or a CUDA parameter."""
        signs = inner.moment_signs()
        if not signs or p.device.type != "cpu":
            return []
        if type(toolkit_state) is tuple and toolkit_state and isinstance(toolkit_state[0], str):
            toolkit_state = toolkit_state[2]  # ("bfloat16", master, the inner state)
        elif inner.uses_master(p.detach().numpy()):
            toolkit_state = inner.split_master(toolkit_state)[1]
        slots, arrays = inner.state_slots(), inner.state_arrays(toolkit_state)
        if len(slots) != len(arrays):
            return []
        names = self._names(inner, toolkit_state)
        return [(n, a) for n, s, a in zip(names, slots, arrays) if s in signs]

    def _held_views(self, p):
        """``p``'s weight and state tensors in the rule's order as the last general step kept
        them (contiguous, in memory order), or None where they are not current."""
        binding = self._bindings.get(p)
        return None if binding is None else binding.held_views(p)

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
