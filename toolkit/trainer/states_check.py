"""Loading the Trainer's states file: every metadata field checked for type and domain and
against the trainer (optimizer, hyperparameters, parameters, counts, learning rate, scheduler,
host-side state), then ``load``, which commits only what has all been checked.
"""
from __future__ import annotations

import copy

from ..backends import arrays
from ..optimizers.held import STATE_DTYPES
from ..optimizers.validation import check_nonneg
from . import states_held
from .states_format import MAX_COUNT, hyper, refuse, scheduler_config, state_members
from .states_read import Bounds, read_states

__all__ = ["load"]

# ------------------------------------------------------------------------------------------
# loading: the metadata, field by field
# ------------------------------------------------------------------------------------------
_KEYS = {
    1: {"format", "version", "optimizer", "convention", "hyperparameters", "learning_rate",
        "num_update", "index_update_count", "scheduler", "host_state", "params"},
}
_KEYS[2] = _KEYS[1]
_KEYS[3] = _KEYS[2] | {"state_dtype"}  # moments held low (states_held)
_PARAM_KEYS = {"index", "name", "shape", "dtype", "state"}
_SCHED_KEYS = {1: {"type", "state"}, 2: {"type", "config", "state"}}
_SCHED_KEYS[3] = _SCHED_KEYS[2]


def _same(a, b):
    """JSON values equal in type too (``True`` is not ``1``, ``1`` is not ``1.0``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _count(path, what, x, low):
    if type(x) is not int or not low <= x <= MAX_COUNT:
        refuse(path, f"its {what} is {x!r}; it must be an integer in [{low}, {MAX_COUNT}]")
    return x


def _entry_shape(path, what, x):
    if not isinstance(x, list) or len(x) > 64 or \
            any(type(n) is not int or not 0 <= n <= MAX_COUNT for n in x):
        refuse(path, f"its {what} is {x!r}, not a list of sizes")
    return tuple(x)


def _check_identity(path, meta, trainer):
    """The file is for this trainer's optimizer (name, convention, hyperparameters)."""
    opt = trainer.optimizer
    version = meta["version"]
    missing = sorted(_KEYS[version] - set(meta))
    unknown = sorted(set(meta) - _KEYS[version] - {"format", "version"})
    if missing or unknown:
        refuse(path, f"its metadata lacks {missing} or has unknown fields {unknown}")
    name = type(opt).__name__.lower()
    if not _same(meta["optimizer"], name):
        refuse(path, f"it was saved by optimizer {meta['optimizer']!r}, this trainer uses "
                      f"{name!r}")
    if not _same(meta["convention"], opt.convention):
        refuse(path, f"it was saved with convention {meta['convention']!r}, this trainer's "
                      f"optimizer uses {opt.convention!r}")
    mine, theirs = hyper(opt), meta["hyperparameters"]
    if not isinstance(theirs, dict):
        refuse(path, f"its hyperparameters are {type(theirs).__name__}, not a dict")
    # a file saved before a flag was added (Adam's amsgrad) holds it off (Spec.flags)
    spec = getattr(type(opt), "spec", None)
    theirs = {**(dict(spec.flags) if spec is not None else {}), **theirs}
    if not _same(theirs, mine):
        diff = sorted(k for k in set(mine) | set(theirs)
                      if not _same(mine.get(k, ...), theirs.get(k, ...)))
        refuse(path, f"its hyperparameters differ from this optimizer's in {diff} (file: "
                      f"{ {k: theirs.get(k) for k in diff} }, optimizer: "
                      f"{ {k: mine.get(k) for k in diff} })")


def _state_dtype(path, meta, trainer, bounds, convert):
    """The ``state_dtype`` the file was saved with (None before version 3), checked against
    this trainer's optimizer's: equal, or (``convert``) one its moments convert from."""
    mine = trainer.optimizer.state_dtype
    theirs = meta["state_dtype"] if meta["version"] >= 3 else None
    if meta["version"] >= 3 and (type(theirs) is not str or theirs not in STATE_DTYPES):
        refuse(path, f"its state_dtype is {str(theirs)[:100]!r}; a version 3 file names one of "
                      f"{[sd for sd in STATE_DTYPES if sd]}")
    if theirs == mine:
        return theirs
    if not convert:
        refuse(path, f"it was saved with state_dtype={theirs!r}, this trainer's optimizer holds "
                      f"state_dtype={mine!r} (to convert the file's moments, pass "
                      "convert_states=True)")
    if bounds.forms(theirs) is None:
        refuse(path, f"its moments (state_dtype={theirs!r}) cannot be converted to this "
                      f"optimizer's state_dtype={mine!r}")
    return theirs


def _check_params(path, meta, trainer, bounds, loaded=None, convert=False):
    """The parameter entries (and, given ``loaded``, the state arrays) against this trainer's
    (held as the file's ``state_dtype`` holds them); returns ``[(state leaf, its form in the
    file, member name)]`` to copy (empty without ``loaded``)."""
    forms = bounds.forms(_state_dtype(path, meta, trainer, bounds, convert))
    entries = meta["params"]
    if not isinstance(entries, list):
        refuse(path, f"its params are {type(entries).__name__}, not a list")
    by_index = {}
    for e in entries:
        if not isinstance(e, dict) or set(e) != _PARAM_KEYS:
            refuse(path, f"its parameter entry {str(e)[:200]} does not have exactly the keys "
                          f"{sorted(_PARAM_KEYS)}")
        i = e["index"]
        if type(i) is not int:
            refuse(path, f"its parameter index {i!r} is not an integer")
        if i in by_index:
            refuse(path, f"it holds parameter {i} more than once")
        by_index[i] = e
    targets = []
    for i, p, leaves in state_members(trainer):
        e = by_index.pop(i, None)
        here = (p.name, p.shape, p.dtype.name)
        if e is None:
            refuse(path, f"parameter {i} is {here} here but not in the file")
        got = (e["name"], _entry_shape(path, f"parameter {i}'s shape", e["shape"]), e["dtype"])
        if not (_same(got[0], here[0]) and got[1] == here[1] and _same(got[2], here[2])):
            refuse(path, f"parameter {i} is {here} here but {got} in the file")
        if not isinstance(e["state"], list) or len(e["state"]) != len(leaves):
            refuse(path, f"parameter {p.name!r} has {len(leaves)} state arrays here, "
                          f"{len(e['state']) if isinstance(e['state'], list) else e['state']!r}"
                          " in the file")
        for j, (leaf, s) in enumerate(zip(leaves, e["state"])):
            form, name = forms[(i, j)], f"state/{i}/{j}"
            want = states_held.entry(form)
            for m, (shape, dtype) in states_held.members(name, form).items():
                a = None if loaded is None else loaded.get(m)
                if not isinstance(s, dict) or not _same(s, want) or (loaded is not None and (
                        a is None or a.shape != shape or a.dtype != dtype)):
                    refuse(path, f"state array {j} of parameter {p.name!r} does not match "
                                  f"(here {want}, member {m!r}: {dtype}{shape}, file "
                                  f"{None if a is None else (a.dtype, a.shape)}, described as "
                                  f"{str(s)[:200]})")
            targets.append((leaf, form, name))
    if by_index:
        refuse(path, f"it holds parameters this trainer does not have: "
                      f"{sorted(by_index)[:20]}")
    if loaded is None:
        return targets
    expected = bounds.expected(meta["state_dtype"] if meta["version"] >= 3 else None)
    extra = sorted(n for n in loaded if n.startswith("state/") and n not in expected)
    if extra:
        refuse(path, f"it holds state arrays this trainer does not have: {extra[:20]}")
    return targets


def _check_meta(path, meta, loaded, trainer, bounds, convert=False):
    """Every field of ``meta`` checked for type and domain and against ``trainer``; returns
    ``(copies, counts, num_update, lr, scheduler_state, commit_host)`` (``copies``: ``[(live
    array, host array)]``, a converted slot's values already held as this trainer holds them)."""
    opt = trainer.optimizer
    version = meta["version"]
    _check_identity(path, meta, trainer)
    targets = _check_params(path, meta, trainer, bounds, loaded, convert)
    copies = []
    for leaf, form, name in targets:  # held slots: their values, then (convert) held anew
        why = states_held.check_values(form, loaded, name)
        if why is not None:
            refuse(path, why)
        copies.extend(states_held.copies(leaf, form, loaded, name))
    # --- counts and learning rate ---------------------------------------------------------
    begin = opt.begin_num_update
    num_update = _count(path, "num_update", meta["num_update"], begin)
    pairs = meta["index_update_count"]
    if not isinstance(pairs, list):
        refuse(path, f"its index_update_count is {type(pairs).__name__}, not a list of "
                      "[index, count] pairs")
    known = range(len(trainer.parameters))
    counts = {}
    for pair in pairs:
        if not isinstance(pair, list) or len(pair) != 2:
            refuse(path, f"its index_update_count entry {str(pair)[:200]} is not an [index, "
                          "count] pair")
        k, t = pair
        if type(k) is not int or k not in known:
            refuse(path, f"its index_update_count names index {k!r}; this trainer's indices "
                          f"are 0..{len(known) - 1}")
        if k in counts:
            refuse(path, f"its index_update_count holds index {k} more than once")
        counts[k] = _count(path, f"update count of index {k}", t, begin)
    if counts and max(counts.values()) > num_update:
        refuse(path, f"its num_update {num_update} is below its largest update count "
                      f"{max(counts.values())}")
    lr = meta["learning_rate"]
    try:
        if type(lr) not in (int, float):
            raise TypeError(f"learning_rate must be a real number, got {type(lr).__name__} "
                            f"{lr!r}")
        lr = check_nonneg("learning_rate", lr)  # the constructor's check
    except (TypeError, ValueError) as exc:
        refuse(path, f"its learning rate is invalid ({exc})")
    # --- scheduler ------------------------------------------------------------------------
    sched, smeta = opt.lr_scheduler, meta["scheduler"]
    if smeta is not None and (not isinstance(smeta, dict) or set(smeta) != _SCHED_KEYS[version]):
        refuse(path, f"its scheduler entry {str(smeta)[:200]} does not have exactly the keys "
                      f"{sorted(_SCHED_KEYS[version])}")
    if (sched is None) != (smeta is None) or (sched is not None and
                                              not _same(smeta["type"], type(sched).__name__)):
        refuse(path, f"its scheduler ({None if smeta is None else smeta['type']!r}) does not "
                      f"match this optimizer's ({None if sched is None else type(sched).__name__})")
    sched_state = None
    if sched is not None:
        if version >= 2:
            config = scheduler_config(sched)
            if not _same(smeta["config"], config):
                refuse(path, f"its scheduler configuration {str(smeta['config'])[:300]} differs "
                              f"from this optimizer's {config}")
        sched_state = smeta["state"]
        try:
            copy.deepcopy(sched).load_state_dict(sched_state)
        except (TypeError, ValueError, KeyError, OverflowError) as exc:
            refuse(path, f"its scheduler state is invalid ({exc})")
    # --- the optimizer's host-side state --------------------------------------------------
    host = meta["host_state"]
    if not isinstance(host, dict):
        refuse(path, f"its host_state is {type(host).__name__}, not a dict")
    host_arrays = {n[len("host/"):]: a for n, a in loaded.items() if n.startswith("host/")}
    try:
        commit_host = opt.check_host_state(host, host_arrays)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
        refuse(path, f"its optimizer state is invalid ({type(exc).__name__}: {exc})")
    return copies, counts, num_update, lr, sched_state, commit_host


def load(trainer, path, raw=None, convert=False):
    """Load the states file ``path`` (a path or a binary file object; or its bytes ``raw``,
    read elsewhere) into ``trainer``; ``ValueError`` (the trainer unchanged) for any file it
    does not accept. ``convert``: a file saved with another ``state_dtype`` has its moments
    held as this trainer's optimizer holds them (``states_held.copies``)."""
    with trainer.step_lock:  # no step runs between the checks and the commit
        bounds = Bounds(trainer, convert)
        meta, loaded = read_states(path, raw, bounds,
                             lambda meta: (_check_identity(path, meta, trainer),
                                           _check_params(path, meta, trainer, bounds,
                                                         convert=convert)))
        copies, counts, num_update, lr, sched_state, commit_host = _check_meta(
            path, meta, loaded, trainer, bounds, convert)
        # --- commit: everything has been checked ---------------------------------------------
        opt = trainer.optimizer
        for leaf, a in copies:
            arrays.copy_from_host(leaf, a)
        opt.restore_counts(counts, num_update)
        opt.lr = float(lr)
        if opt.lr_scheduler is not None:
            opt.lr_scheduler.load_state_dict(sched_state)
        commit_host()
