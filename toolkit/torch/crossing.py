"""Checkpoints that cross between ``torch.optim`` and ``toolkit.torch`` (docs/torch.md,
"Checkpoints from and to torch.optim").

:func:`for_torch` adds to a toolkit state_dict what the ``torch.optim`` namesake reads: ``step``
as torch keeps it (a float32 tensor; SparseAdam's int, the spec's ``torch_step``), the entries MXNet keeps as another quantity (SGD's and centered
RMSprop's ``momentum_buffer = -mom/lr``), NAdam's per-parameter ``mu_product``, ASGD's ``eta``
and ``mu`` (functions of the step, the spec's ``torch_derived``), and a number for
every torch key a toolkit group holds as None. :func:`from_torch` converts the other way, its
options through the keyword table (``meaning``; a number that means another update here is not
taken, with a warning). The same quantities cross exactly; where the conventions differ, the
next step computes the loading optimizer's own update from that state.
"""
from __future__ import annotations

import numbers
import warnings

import torch

from ..optimizers.registry import spec_of
from ..optimizers import aliases
from . import binding, keywords, meaning
from .held import from_bitsandbytes

__all__ = ["exported", "reimported", "for_torch", "without_torch_entries", "from_torch", "warn",
           "per_parameter_host_keys"]

#: ``(torch class, torch's state entry) -> the toolkit slot holding -lr times it``
SCALED = {  # checked against the registry by tests/test_torch_crossing.py::test_tables_name_torch_facts
    ("SGD", "momentum_buffer"): "mom",
    ("RMSprop", "momentum_buffer"): "delta",
}
#: ``(torch class, torch's per-parameter state entry) -> the group's host value it is``: one
#: value for the group, or (a host value that is a list of ``[index, value]`` pairs: NAdam
#: under "pytorch") one per parameter index, 1.0 for an index it does not hold
HOST = {("NAdam", "mu_product"): "m_schedule"}  # checked against the registry by tests/test_torch_crossing.py::test_tables_name_torch_facts


def per_parameter_host_keys(klass):
    """The host keys of ``klass`` that torch's namesake keeps in each parameter's state
    (:data:`HOST`: NAdam's ``m_schedule``, torch's ``mu_product``)."""
    torch_name = _torch_name(klass)
    return {host_key for (name, _), host_key in HOST.items() if name == torch_name}


def _host_value(value, index):
    """A host value as torch's entry of parameter ``index`` reads it (:data:`HOST`)."""
    if isinstance(value, list):
        return next((v for k, v in value if k == index), 1.0)
    return value


def _torch_name(klass):
    """The class whose state_dict crosses: the torch.optim namesake, else the most used PyTorch
    implementation the spec names (lion-pytorch's ``Lion``), else None."""
    return meaning.namesake(spec_of(klass))


def slot_names(klass, convention):
    """``{state slot: torch's name}`` of the slots that hold torch's quantity under
    ``convention``: the spec's ``torch_slots``, and under "pytorch" the slots MXNet keeps
    scaled by ``-lr`` too (SGD's ``mom`` is torch's ``momentum_buffer`` there)."""
    names = dict(spec_of(klass).torch_slots)
    if convention == "pytorch":
        torch_name = _torch_name(klass)
        names.update((slot, key) for (name, key), slot in SCALED.items() if name == torch_name)
    return names


def _scaled(klass, convention):
    """``{torch entry: slot}`` converted by ``-lr`` under ``convention``."""
    if convention == "pytorch":
        return {}
    torch_name = _torch_name(klass)
    return {key: slot for (name, key), slot in SCALED.items() if name == torch_name}


def exported(klass, group):
    """``group``'s options as torch's namesake reads them: a torch key the toolkit holds as
    None gets the number torch needs (its MXNet counterpart's, else torch's default)."""
    out = dict(group)
    for key, (rule, default) in keywords.torch_keys(klass, group).items():
        if isinstance(rule, meaning.OffOnly) and rule.off is None and out.get(key) is None:
            mx = group.get(rule.export) if rule.export else None
            out[key] = mx if mx is not None else default
        elif isinstance(rule, meaning.Same) and key in out and out[key] is None and \
                default is not None:
            out[key] = default  # None given for torch's (Adamax's eps under "pytorch": 1e-8)
    return out


def reimported(klass, options):
    """The options of a toolkit state_dict's group as a group holds them (what
    :func:`exported` filled in put back)."""
    out = dict(options)
    for key, (rule, _) in keywords.torch_keys(klass, out).items():
        if isinstance(rule, meaning.OffOnly) and rule.off is None:
            out[key] = None
    return out


def without_torch_entries(klass, entry, convention="mxnet"):
    """A toolkit state entry without what :func:`for_torch` added for torch, its slots under
    the names ``opt.state`` shows (a file saved before they took torch's names, ``mean`` for
    ``exp_avg``, loads too)."""
    torch_name = _torch_name(klass)
    added = (set(_scaled(klass, convention)) | set(spec_of(klass).torch_derived)
             | {key for (name, key) in HOST if name == torch_name})
    renamed = slot_names(klass, convention)
    return {renamed.get(k, k): v for k, v in entry.items() if k not in added}


def for_torch(klass, group, entry, host_data, index=None):
    """A toolkit state entry (``{"step": t, slot: tensor}``) with what torch's namesake reads
    added (``group``: its param group's options; ``host_data``: its group's host state;
    ``index``: the parameter's index, where the host state is per index)."""
    torch_name = _torch_name(klass)
    out = dict(entry)
    if "step" in out:
        out["step"] = binding.torch_step(out["step"], spec_of(klass).torch_step)
    for key, slot in _scaled(klass, group.get("convention")).items():
        if slot in out:
            out[key] = out[slot] / -float(group["lr"])
    for (name, key), host_key in HOST.items():
        if name == torch_name and host_key in host_data:
            out[key] = torch.tensor(float(_host_value(host_data[host_key], index)))
    for key, derive in spec_of(klass).torch_derived.items():
        if "step" in entry:
            out[key] = torch.tensor(derive(group, entry["step"]), dtype=torch.float32)
    return out


def from_torch(opt, sd):
    """``sd``, a ``torch.optim`` state_dict of ``opt``'s namesake, as a toolkit state_dict for
    ``opt`` (checked later as any; a TypeError/ValueError here names what does not cross)."""
    klass = type(opt).toolkit_class
    torch_name = _torch_name(klass)
    where = "load_state_dict"
    if torch_name is None:
        raise ValueError(f"{where}: this state_dict has no 'toolkit' entry, and "
                         f"{klass.__name__} has no torch.optim namesake (nor a PyTorch "
                         "implementation named in its spec) whose state_dict it could be")
    held = [inner.host_scalars for inner in opt.toolkit_optimizers if inner.host_scalars]
    if held and not spec_of(klass).torch:  # Schedule-Free AdamW's lr_max and weight_sum
        raise ValueError(f"{where}: this state_dict has no 'toolkit' entry: a {torch_name} "
                         f"state_dict of another implementation keeps its step count and "
                         f"{' and '.join(held[0])} per param group, "
                         f"toolkit.torch.{klass.__name__} per parameter; it does not cross "
                         "(load a toolkit.torch state_dict, or start this optimizer fresh)")
    saved_groups = sd["param_groups"]
    if not isinstance(saved_groups, list) or len(saved_groups) != len(opt.param_groups):
        raise ValueError(f"{where}: it has {len(saved_groups)} param groups, this optimizer "
                         f"{len(opt.param_groups)}")
    notes = []
    groups, group_of = [], {}
    own = aliases.accepted_keywords(klass)
    for gi, (saved, group) in enumerate(zip(saved_groups, opt.param_groups)):
        options = {k: v for k, v in group.items() if k != "params"}
        changed = set()
        rules = keywords.torch_keys(klass, options)
        for key, value in saved.items():
            if key in ("params", "param_names", "initial_lr"):
                if key != "params":
                    options[key] = value
                continue
            if key == "lr" or key == "maximize":
                options[key], changed = value, changed | {key}
                continue
            rule = rules.get(key, (None,))[0]
            if rule is None:
                if key not in own:
                    continue  # a key of torch's this optimizer has no use for
                shared = meaning.SHARED.get((torch_name, key))
                if shared is None or shared.crosses or options.get("convention") == "pytorch":
                    options[key], changed = value, changed | {key}  # torch's meaning (amsgrad)
                elif not meaning.equal(value, options.get(key)):
                    notes.append(f"param group {gi}: {key}={value!r} is not taken ({shared.note}"
                                 f"; under convention {options.get('convention')!r} {key} is "
                                 f"MXNet's); the group keeps its own {key}={options.get(key)!r}")
                continue
            if isinstance(rule, meaning.OffOnly) and not meaning.equal(value, rule.off):
                if rule.off is not None:
                    raise ValueError(f"{where}: param group {gi}: {key}={value!r} cannot "
                                     f"continue here: {rule.why}")
                notes.append(f"param group {gi}: {key}={value!r} is not taken ({rule.why}); "
                             f"the group keeps its own")
                continue
            if isinstance(rule, meaning.Moot) and rule.allowed is not None and \
                    not any(meaning.equal(value, a) for a in rule.allowed):
                continue
            options[key] = value
            changed.add(key)
        keywords.settle(klass, options, changed, {}, where=f"{where}: param group {gi}")
        ids = saved.get("params", [])
        for k in ids:
            group_of[k] = (gi, options)
        groups.append({**options, "params": list(ids)})
    host = []
    for inner in opt.toolkit_optimizers:
        data, arrays = inner.host_state()
        host.append({"data": dict(data), "arrays": dict(arrays)})
    # a host value kept per index (a list of [index, value] pairs) is torch's entries' alone
    # (a parameter without state in sd starts afresh); its index is the parameter's position
    position = {k: n for n, k in enumerate(k for g in groups for k in g["params"])}
    for h in host:
        for host_key in HOST.values():
            if isinstance(h["data"].get(host_key), list):
                h["data"][host_key] = []
    state, steps = {}, []
    for k, entry in sd["state"].items():
        if k not in group_of:
            raise ValueError(f"{where}: it holds state for parameter {k!r} that no param "
                             "group holds")
        gi, options = group_of[k]
        moments = slot_names(klass, "pytorch")  # (bitsandbytes keeps torch's quantities)
        entry = from_bitsandbytes([moments.get(s, s) for s in spec_of(klass).moments], entry,
                                  f"parameter {k}",
                                  _scaled(klass, options.get("convention")))
        out = {}
        for key, value in entry.items():
            if key == "step":
                t = value.item() if isinstance(value, torch.Tensor) else value
                if not isinstance(t, numbers.Real) or t != int(t):
                    raise ValueError(f"{where}: parameter {k}'s step {value!r} is not a count")
                if int(t) > 0:
                    out["step"] = int(t)
                    steps.append(int(t))
                continue
            if key == "weight32":
                # a toolkit master copy torch carried without stepping it (and, on loading,
                # cast to the parameter's dtype): the parameter is the weight now; the load
                # makes the master afresh from it (checkpoint.py)
                continue
            scaled = _scaled(klass, options.get("convention")).get(key)
            host_key = HOST.get((torch_name, key))
            if scaled is not None:
                out[scaled] = value * -float(options["lr"])
            elif host_key is not None:
                held = host[gi]["data"].get(host_key)
                if isinstance(held, list):
                    held.append([position[k], float(value)])
                else:
                    host[gi]["data"][host_key] = float(value)
            else:
                out[key] = value
        if "step" not in out and any(isinstance(v, torch.Tensor) for v in out.values()):
            # torch's SGD keeps no step: a state that exists has stepped at least once (its
            # momentum buffer is not made afresh from the next gradient)
            out["step"] = 1
            steps.append(1)
        state[k] = out
    meta = {"format": 1, "optimizer": spec_of(klass).name,
            "num_update": max([opt.toolkit_optimizers[0].begin_num_update, *steps]), "host": host, "lr_scheduler": None}
    return {"state": state, "param_groups": groups, "toolkit": meta}, notes


def warn(notes):
    for note in notes:
        warnings.warn(f"load_state_dict of a torch.optim state_dict: {note}", UserWarning,
                      stacklevel=3)
