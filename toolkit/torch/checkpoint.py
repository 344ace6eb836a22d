"""``state_dict()`` and ``load_state_dict()`` of a ``toolkit.torch`` optimizer, in torch's
layout, with tensors and plain Python values only (``torch.load(..., weights_only=True)``).

::

    {"state": {index: {"step": t, "<slot>": tensor, ..., "weight32": tensor}},  # (an int8
                                     # slot: <slot>_codes, <slot>_absmax, <slot>_qmap)
     "param_groups": [{"lr": ..., "wd": ..., ..., "params": [index, ...]}],
     "toolkit": {"format": 1, "optimizer": "adam", "num_update": n,
                 "host": [{"data": {...}, "arrays": {name: tensor}}],  # one per group
                 "lr_scheduler": None or the toolkit scheduler's state_dict()}}

Loading checks everything first and changes nothing when a check fails; then the state is copied
into fresh arrays. :class:`Checkpoints` is the base class of
:class:`toolkit.torch.optim.TorchOptimizer` that holds this.
"""
from __future__ import annotations

import copy
import numbers

import numpy as np
import torch

from ..optimizers.registry import spec_of
from . import crossing, held, keywords

__all__ = ["Checkpoints"]

FORMAT = 1


def _tensor(a):
    return torch.from_numpy(np.ascontiguousarray(a).copy()) if isinstance(a, np.ndarray) else a


def _plain(x):
    """JSON-like data with numpy scalars turned into Python's."""
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _fail(msg, kind=ValueError):
    raise kind(f"load_state_dict: {msg}; the optimizer is unchanged")


class Checkpoints:
    """The ``state_dict`` and ``load_state_dict`` of :class:`toolkit.torch.optim.TorchOptimizer`
    (a base class of it): they read and rebuild what the optimizer keeps (its groups' inner
    optimizers, each parameter's toolkit state, the views and checked facts a load drops)."""

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

    def load_state_dict(self, state_dict, *, convert_states=False):
        """Load what :meth:`state_dict` gave (for the same parameters); a state that does not
        fit is a ValueError/TypeError with this optimizer unchanged. The saved groups' options
        are taken, as torch takes them; with ``convert_states=True`` each group keeps its own
        ``state_dtype``, ``state_rounding`` and ``state_seed``, and the saved moments are
        converted to the form it holds them in (float32 to int8 and back: docs/state-dtype.md,
        "In toolkit.torch"). A ``torch.optim`` state_dict's moments are converted so always."""
        self._follow_groups()
        for hook in self._optimizer_load_state_dict_pre_hooks.values():  # torch's hooks
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        self._unpack(state_dict, convert_states)
        self._steady.clear()  # the state tensors may be new ones
        self._order, self._ids = self._param_order()  # the counts are keyed as loaded
        for hook in self._optimizer_load_state_dict_post_hooks.values():
            hook(self)

    def _pack(self):
        """``self.state_dict()``, which ``torch.optim``'s namesake loads too
        (:mod:`toolkit.torch.crossing`)."""
        klass = type(self).toolkit_class
        counts = {}
        for inner in self._inners:
            counts.update(inner.update_counts)
        state, groups = {}, []
        index = 0
        for group, inner in zip(self.param_groups, self._inners):
            packed = crossing.exported(klass, {k: v for k, v in group.items() if k != "params"})
            host_data = inner.host_state()[0]
            ids = []
            for p in group["params"]:
                entry = {}
                if index in counts:
                    entry["step"] = int(counts[index])
                if p in self._bindings:
                    entry.update(dict.items(self.state[p]))  # not the step it shows
                    binding = self._bindings[p]
                    entry.update(held.saved_extras(self._held_slots(
                        inner, binding.toolkit_state, p), binding.perm))
                if entry:
                    state[index] = crossing.for_torch(klass, group, entry, host_data, index)
                ids.append(index)
                index += 1
            packed["params"] = ids
            groups.append(packed)
        host = []
        for inner in self._inners:
            data, arrays = inner.host_state()
            host.append({"data": _plain(data), "arrays": {k: _tensor(v) for k, v in arrays.items()}})
        name = spec_of(type(self).toolkit_class).name
        sched = self._scheduler
        saved_sched = _plain(sched.state_dict()) if hasattr(sched, "state_dict") else None
        return {"state": state, "param_groups": groups,
                "toolkit": {"format": FORMAT, "optimizer": name, "num_update": int(self._num_update),
                            "host": host, "lr_scheduler": saved_sched,
                            # per group, whether each converted torch key was set in torch's or
                            # in MXNet's spelling (toolkit.torch.keywords.settle)
                            "sources": [dict(s) for s in self._sources]}}

    def _toolkit_entries(self, sd):
        """A toolkit state_dict's states without what it carries for torch.optim, by the
        convention of each parameter's saved group."""
        state, groups = sd.get("state"), sd.get("param_groups")
        if not isinstance(state, dict) or not isinstance(groups, list):
            return state
        klass = type(self).toolkit_class
        convention = {}
        for group in groups:
            if isinstance(group, dict):
                for k in group.get("params", ()):
                    convention[k] = group.get("convention")
        return {k: crossing.without_torch_entries(klass, v, convention.get(k))
                if isinstance(v, dict) else v for k, v in state.items()}

    def _unpack(self, sd, convert_states=False):
        """``self.load_state_dict(sd, convert_states=...)``: everything checked first, then
        committed."""
        klass = type(self).toolkit_class
        if not isinstance(sd, dict) or not {"state", "param_groups"} <= set(sd):
            _fail("expected a dict with 'state' and 'param_groups' (what state_dict() gives)",
                  TypeError)
        meta = sd.get("toolkit")
        notes = []
        convert = bool(convert_states) or meta is None
        if meta is None:  # a torch.optim state_dict of the namesake
            try:
                sd, notes = crossing.from_torch(self, sd)
            except (TypeError, ValueError, KeyError, AttributeError) as e:
                _fail(f"this torch.optim state_dict does not cross: {e}")
            meta = sd["toolkit"]
        else:
            sd = {**sd, "state": self._toolkit_entries(sd)}
        if not isinstance(meta, dict):
            _fail("its 'toolkit' entry is not a dict: it was not made by a toolkit.torch optimizer")
        if meta.get("format") != FORMAT:
            _fail(f"format {meta.get('format')!r} is not {FORMAT}, the one this version reads")
        name = spec_of(klass).name
        if meta.get("optimizer") != name:
            _fail(f"it was saved by {meta.get('optimizer')!r}, this optimizer is {name!r}")
        groups = sd["param_groups"]
        if not isinstance(groups, list) or len(groups) != len(self.param_groups):
            _fail(f"it has {len(groups) if isinstance(groups, list) else groups!r} param groups, "
                  f"this optimizer {len(self.param_groups)}")
        num_update = meta.get("num_update")
        if not isinstance(num_update, numbers.Integral) or num_update < self._begin:
            _fail(f"num_update {num_update!r} must be an int >= begin_num_update {self._begin}")
        host = meta.get("host")
        if not isinstance(host, list) or len(host) != len(groups):
            _fail("its host states do not match its param groups")
        saved_sched = meta.get("lr_scheduler")
        sched_copy = None
        if saved_sched is not None:
            if self._scheduler is None or not hasattr(self._scheduler, "load_state_dict"):
                _fail("it was saved with a toolkit lr_scheduler (its state: "
                      f"{saved_sched}); give this optimizer the same scheduler")
            sched_copy = copy.deepcopy(self._scheduler)
            try:  # checked on a copy: the optimizer's own is loaded once everything passed
                sched_copy.load_state_dict(saved_sched)
            except (TypeError, ValueError) as e:
                _fail(f"its lr_scheduler state does not fit this optimizer's scheduler: {e}")
        state = sd["state"]
        if not isinstance(state, dict):
            _fail("'state' must be a dict of parameter index to state", TypeError)
        # the parameters by saved index, and each group's options
        params_by_index = {}
        new_inners, new_options, commits = [], [], []
        group_keys = set(keywords.group_keys(klass))
        index = 0
        for gi, (saved, group) in enumerate(zip(groups, self.param_groups)):
            ids = saved.get("params") if isinstance(saved, dict) else None
            if not isinstance(ids, list) or len(ids) != len(group["params"]):
                _fail(f"param group {gi} holds {len(ids) if isinstance(ids, list) else ids!r} "
                      f"parameters, this optimizer's {len(group['params'])}")
            options = crossing.reimported(
                klass, {k: v for k, v in saved.items() if k not in ("params", "param_names")})
            if convert_states:  # the group's own, the saved moments converted to it
                options.update((k, group[k]) for k in keywords.HELD_KEYS if k in group)
            missing = sorted(k for k in group_keys if k not in options)
            if missing:
                _fail(f"param group {gi} lacks the options {missing}")
            build = {k: v for k, v in options.items() if k in group_keys}
            try:
                inner = self._build(build)
            except (TypeError, ValueError) as e:
                _fail(f"param group {gi}'s options do not make {klass.__name__}: {e}")
            counts = {}
            for k, p in zip(ids, group["params"]):
                params_by_index[k] = (p, inner, index)
                entry = state.get(k)
                if isinstance(entry, dict) and "step" in entry:
                    t = entry["step"]
                    if isinstance(t, torch.Tensor) and t.numel() == 1:
                        t = t.item()  # torch's float32 step: a whole number, else refused
                        t = int(t) if isinstance(t, float) and t.is_integer() else t
                    if not isinstance(t, numbers.Integral) or isinstance(t, bool) or \
                            not self._begin < t <= num_update:
                        _fail(f"parameter {k}'s step {t!r} must be an int in "
                              f"({self._begin}, num_update {num_update}]")
                    counts[index] = int(t)
                index += 1
            h = host[gi]
            if not isinstance(h, dict) or not isinstance(h.get("arrays", {}), dict):
                _fail(f"param group {gi}'s host state must be a dict with 'data' and 'arrays'")
            try:
                restore = inner.check_host_state(
                    h.get("data", {}),
                    {k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v
                     for k, v in h.get("arrays", {}).items()})
            except (TypeError, ValueError, KeyError) as e:
                _fail(f"param group {gi}'s host state does not fit: {e}")
            inner.restore_counts(counts, int(num_update))
            new_inners.append(inner)
            new_options.append(options)
            commits.append(restore)
        unknown = sorted(set(state) - set(params_by_index), key=repr)
        if unknown:
            _fail(f"it holds state for parameters {unknown} that no param group holds")
        new_state = {}
        for k, entry in state.items():
            p, inner, index = params_by_index[k]
            if not isinstance(entry, dict):
                _fail(f"the state of parameter {k} must be a dict", TypeError)
            arrays = {n: v for n, v in entry.items() if n != "step"}
            if not arrays:
                continue
            try:
                toolkit_state, named = self._new_state(index, p, inner)
            except (TypeError, ValueError, NotImplementedError) as e:
                _fail(f"parameter {k}: {e}", type(e))
            # a float32 master copy follows the parameter's dtype now (after model.half() with
            # multi_precision, or back to float32): made from the weight, or dropped
            if "weight32" in named and "weight32" not in arrays:
                arrays["weight32"] = p.detach().float()
            elif "weight32" in arrays and "weight32" not in named:
                del arrays["weight32"]
            try:  # held moments: checked field by field, converted where asked
                arrays = held.loaded(self._held_slots(inner, toolkit_state, p), arrays, p,
                                     convert, f"parameter {k}")
            except (TypeError, ValueError) as e:
                _fail(str(e), type(e))
            if not set(named) <= set(arrays):  # other keys are the user's, kept as they are
                _fail(f"parameter {k}'s state holds {sorted(arrays)}; with these options "
                      f"{klass.__name__} keeps {sorted(named)} for it")
            for n, fresh in named.items():
                v = arrays[n]
                if not isinstance(v, torch.Tensor):
                    _fail(f"parameter {k}'s state {n!r} must be a tensor, got {type(v).__name__}",
                          TypeError)
                # a floating state of another dtype is cast to the one the parameter's state has
                # now, as torch.optim's load_state_dict casts it (after p.to(...))
                if tuple(v.shape) != tuple(fresh.shape) or not (
                        v.dtype == fresh.dtype or (v.is_floating_point() and
                                                   fresh.is_floating_point())):
                    _fail(f"parameter {k}'s state {n!r} is {tuple(v.shape)} {v.dtype}; it must be "
                          f"{tuple(fresh.shape)} {fresh.dtype}")
            new_state[p] = (toolkit_state, named, arrays)
        # commit: nothing below raises
        self.state.clear()
        self._bindings.clear()
        self._facts.clear()
        for p, (toolkit_state, named, arrays) in new_state.items():
            self._install(p, toolkit_state, named, arrays)
        for gi, (group, options) in enumerate(zip(self.param_groups, new_options)):
            for key in list(group):
                if key not in ("params", "param_names"):
                    del group[key]
            group.update(options)
            self._synced[gi] = self._snapshot(group)
        self._inners[:] = new_inners
        sources = meta.get("sources")
        self._sources[:] = [dict(s) for s in sources] if isinstance(sources, list) and \
            len(sources) == len(new_inners) and all(isinstance(s, dict) for s in sources) else \
            [{} for _ in new_inners]
        self._num_update = int(num_update)
        if sched_copy is not None:
            self._scheduler.load_state_dict(saved_sched)
        for restore in commits:
            restore()
        crossing.warn(notes)
