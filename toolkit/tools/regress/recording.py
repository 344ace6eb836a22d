"""``mxopt regress record``: the entries of a recording (an optimizer x convention x backend x
dtype, its inputs and hyperparameters), run (:func:`run_entry`) and stored (:func:`fill_entry`),
and :func:`record`, which writes every entry of a scope.
"""
from __future__ import annotations

import os
import time
import zlib
from dataclasses import dataclass

import numpy as np

from .._support import (UsageError, choose_backends, optimizer_conventions, progress_bar,
                        select_dtypes, select_optimizers, storage_dtype, to_device)
from ...optimizers.spec import CONVENTIONS
from .fileformat import BACKENDS, decode, document, encode, entry_id, write

__all__ = ["DEFAULT_STEPS", "DEFAULT_SIZE", "SEED", "COMMON", "hyper_for", "common_for",
           "reference_hyper", "new_entry", "run_entry", "fill_entry", "recorded_inputs",
           "entry_matrix", "RecordResult", "record"]

DEFAULT_STEPS = 6
DEFAULT_SIZE = 8
#: seed of the recorded inputs (per optimizer and convention: crc32 of "name/convention" added)
SEED = 20261123

#: hyperparameters every optimizer shares (``lr`` is the constructor's ``learning_rate``);
#: an optimizer's pinned ones replace them (GroupAdaGrad's wd 0: :func:`common_for`). Each
#: optimizer's own hyperparameters are its spec's ``record`` (:func:`hyper_for`).
COMMON = {"lr": 0.05, "wd": 0.01, "rescale_grad": 0.5, "clip_gradient": 2.0}


def _spec(name):
    from ...optimizers.registry import spec_of
    return spec_of(name)


def hyper_for(name):
    """Optimizer ``name``'s own recorded hyperparameters (toolkit constructor names): its spec's
    ``record``, non-default settings that switch on every state slot and branch that has one."""
    return dict(_spec(name).record)


def common_for(name, common=None):
    """``common`` (default :data:`COMMON`) for optimizer ``name``, with the common
    hyperparameters its spec pins (``Spec.fixed``; ``learning_rate`` is ``lr`` here) applied."""
    fixed = {("lr" if k == "learning_rate" else k): v for k, v in _spec(name).fixed.items()}
    return {**(COMMON if common is None else common), **fixed}


#: reference-backend hyperparameters that select a noise draw (SGLD's), not a state slot: the
#: seed, and the stream, which is the parameter index (``reference.noise``)
_NOISE_KEYS = ("seed", "stream")
#: the parameter index every kernel entry updates (``update_multi_precision(0, ...)``)
_INDEX = 0


def reference_hyper(hyper):
    """``hyper`` as the keywords of the oracle's ``step`` for a "reference" entry: where it
    names a noise seed, the stream is named too (0, the index the kernel entries update), so
    the entry says which draw it holds (:func:`new_entry` applies it)."""
    hyper = dict(hyper or {})
    if "seed" in hyper and "stream" not in hyper:
        hyper["stream"] = _INDEX
    return hyper


# ----------------------------------------------------------------------------------------------
# entries
# ----------------------------------------------------------------------------------------------
def new_entry(optimizer, convention, backend, dtype, *, w0, grads, hyper=None, common=None,
              ulps=0, encoding=None) -> dict:
    """An entry with its inputs and no steps yet (:func:`fill_entry` runs it).

    ``w0`` and ``grads`` are cast to the weight's storage dtype; ``hyper`` are the optimizer's
    own hyperparameters (the toolkit constructor's names; for backend "reference" the oracle's
    ``step`` keywords, a noise stream named where a seed is: :func:`reference_hyper`),
    ``common`` is ``{"lr", "wd", "rescale_grad", "clip_gradient"}``.
    """
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    if backend == "reference" and dtype != "float64":
        raise UsageError("the reference backend is float64 arithmetic: dtype must be float64")
    sd = storage_dtype(dtype)
    encoding = encoding or ("float.hex" if backend == "reference" else "bits")
    w0 = np.asarray(w0, dtype=np.float64).astype(sd)
    grads = [np.asarray(g, dtype=np.float64).astype(sd) for g in grads]
    return {"id": entry_id(optimizer, convention, backend, dtype), "optimizer": optimizer,
            "convention": convention, "backend": backend, "dtype": dtype, "ulps": int(ulps),
            "hyper": reference_hyper(hyper) if backend == "reference" else dict(hyper or {}),
            "common": dict(COMMON if common is None else common),
            "encoding": encoding, "shape": list(w0.shape), "arrays": {},
            "w0": encode(w0, encoding), "grads": [encode(g, encoding) for g in grads],
            "steps": []}


def _inputs(entry):
    sd = storage_dtype(entry["dtype"])
    shape = tuple(entry["shape"])
    w0 = decode(entry["w0"], sd, entry["encoding"], f"{entry['id']} w0").reshape(shape)
    grads = [decode(g, sd, entry["encoding"], f"{entry['id']} grads[{k}]").reshape(shape)
             for k, g in enumerate(entry["grads"])]
    return w0, grads


def _run_reference(entry, w0, grads):
    ref = _spec(entry["optimizer"]).reference_module()
    hyper = entry["hyper"]
    state_hyper = {k: v for k, v in hyper.items() if k not in _NOISE_KEYS}
    slots = ref.state_slots(**state_hyper)
    w, st = w0.astype(np.float64), ref.init_state(w0.astype(np.float64), **state_hyper)
    out = []
    for k, g in enumerate(grads):
        w, st = ref.step(w, g.astype(np.float64), st, t=k + 1, convention=entry["convention"],
                         **entry["common"], **hyper)
        out.append({"weight": np.array(w, dtype=np.float64),
                    **{s: np.array(st[s], dtype=np.float64) for s in slots}})
    return out


def _run_toolkit(entry, w0, grads):
    from ... import optimizer
    from ...backends.arrays import to_host
    common = dict(entry["common"])
    opt = optimizer.create(entry["optimizer"], convention=entry["convention"],
                           backend=entry["backend"],
                           multi_precision=entry["dtype"] == "float16-mp",
                           learning_rate=common.pop("lr"), **common, **entry["hyper"])
    dev = to_device if entry["backend"] == "cuda" else (lambda a: a.copy())
    w = dev(w0)
    state = opt.create_state_multi_precision(0, w)
    mp = opt.uses_master(w)
    out = []
    for g in grads:
        opt.update_multi_precision(0, w, dev(g), state)
        arrays = {"weight": np.array(to_host(w))}
        inner = state
        if mp:
            master, inner = opt.split_master(state)
            arrays["weight32"] = np.array(to_host(master))
        for name, a in zip(opt.state_slots(), opt.state_arrays(inner)):
            arrays[name] = np.array(to_host(a))
        out.append(arrays)
    return out


def run_entry(entry) -> list:
    """Rerun an entry's inputs: a list, per step, of ``{array name: numpy array}``.

    Kernel backends run the toolkit optimizer (index 0, ``update_multi_precision``: the
    weight, then ``weight32`` for a float32 master copy, then the state slots in
    ``create_state`` order); backend "reference" runs ``reference.<name>.step`` in float64
    with ``t = 1, 2, ...``.
    """
    w0, grads = _inputs(entry)
    if entry["backend"] == "reference":
        return _run_reference(entry, w0, grads)
    return _run_toolkit(entry, w0, grads)


def fill_entry(entry) -> dict:
    """Run ``entry`` and store its steps (and the names and dtypes of its arrays) in it."""
    steps = run_entry(entry)
    entry["arrays"] = {k: v.dtype.name for k, v in steps[0].items()} if steps else {}
    entry["steps"] = [{k: encode(v, entry["encoding"]) for k, v in s.items()} for s in steps]
    return entry


def recorded_inputs(name, convention, steps=DEFAULT_STEPS, size=DEFAULT_SIZE):
    """The float64 inputs :func:`record` uses for one optimizer and convention: the same for
    every backend and dtype (cast to each storage dtype). Magnitudes over several decades,
    and an exact zero gradient in element 0. Shaped ``toolkit.oracle.space.weight_shape(name,
    size)``: a vector, or a matrix for an optimizer that takes matrices only (GroupAdaGrad)."""
    from ...oracle import space
    rng = np.random.default_rng([SEED, zlib.crc32(f"{name}/{convention}".encode())])
    w = rng.standard_normal(size) * 10.0 ** rng.uniform(-2, 1, size)
    grads = [rng.standard_normal(size) * 10.0 ** rng.uniform(-3, 1, size) for _ in range(steps)]
    for g in grads:
        g[0] = 0.0
    shape = space.weight_shape(name, size)
    return w.reshape(shape), [g.reshape(shape) for g in grads]


# ----------------------------------------------------------------------------------------------
# record
# ----------------------------------------------------------------------------------------------
def entry_matrix(optimizers, backends, dtypes, conventions=None):
    """Entry ids (as tuples) in record order; ``conventions`` (None: all) limits the
    conventions to those named (a recorded scope's)."""
    convs = optimizer_conventions()
    out = []
    for name in optimizers:
        for conv in convs.get(name, ()):
            if conventions is not None and conv not in conventions:
                continue
            for b in backends:
                for d in (["float64"] if b == "reference" else dtypes):
                    if b == "reference" and "float64" not in dtypes:
                        continue
                    out.append((name, conv, b, d))
    return out


@dataclass
class RecordResult:
    paths: list
    entries: int
    backends: list
    skipped: dict  # backend -> why it was not recorded
    seconds: float


def record(path, *, optimizers=None, backends=None, dtypes=None, steps=DEFAULT_STEPS,
           size=DEFAULT_SIZE, progress=True, overwrite=False, command=None) -> RecordResult:
    """Record golden trajectories of every optimizer x convention x backend x dtype.

    ``path`` ending in ``.json``: one file; otherwise a folder, one ``<optimizer>.json`` each.
    ``backends`` None: "cpu", plus "cuda" on a real GPU; "reference" (the float64 oracle) only
    when asked for. Refuses to overwrite an existing file unless ``overwrite``.
    """
    path = os.fspath(path)
    names = select_optimizers(optimizers)
    dts = select_dtypes(dtypes)
    bks, skipped = choose_backends(backends, allowed=BACKENDS)
    if not isinstance(steps, int) or steps < 1 or not isinstance(size, int) or size < 1:
        raise UsageError("steps and size must be integers >= 1")
    single = path.endswith(".json")
    targets = [path] if single else [os.path.join(path, f"{n}.json") for n in names]
    if not overwrite:
        for t in targets:
            if os.path.exists(t):
                raise UsageError(f"{t} exists; refusing to overwrite recorded trajectories "
                                 "without --force (a changed file means changed numerics)")
    scope = {"optimizers": None if optimizers is None else names, "backends": bks,
             "dtypes": dts, "conventions": list(CONVENTIONS), "steps": steps, "size": size,
             "layout": "file" if single else "folder"}
    rows = entry_matrix(names, bks, dts)
    t0 = time.perf_counter()
    entries = {}
    with progress_bar(progress, len(rows), "record") as bar:
        for name, conv, b, d in rows:
            bar.update(f"{name} {conv} {b} {d}", advance=0)
            w, grads = recorded_inputs(name, conv, steps, size)
            e = new_entry(name, conv, b, d, w0=w, grads=grads, hyper=hyper_for(name),
                          common=common_for(name))
            entries.setdefault(name, []).append(fill_entry(e))
            bar.update(advance=1)
    if single:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        write(path, document([e for es in entries.values() for e in es], scope=scope,
                             command=command))
    else:
        os.makedirs(path, exist_ok=True)
        for name, t in zip(names, targets):
            write(t, document(entries.get(name, []), scope=scope, command=command))
    return RecordResult(targets, len(rows), bks, skipped, time.perf_counter() - t0)
