"""The Trainer's states file: its format, what a file holds of a trainer, and the refusal that
every check of a loaded file raises.

Format (version 2; ``docs/trainer.md`` lists every member): a NumPy ``.npz`` archive of stored
``.npy`` files: ``meta`` (UTF-8 JSON: the optimizer, its settings and counts, the scheduler,
host-side state, the parameters and their state arrays' shapes and dtypes, a SHA-256 of every
array and of the rest of the metadata), ``state/<index>/<k>`` (the leaves of
``create_state_multi_precision``, the float32 master copy included), ``host/<name>`` (LBSGD's
accumulators), and a zip comment holding the SHA-256 of every byte before it, so a flipped bit
is caught before the zip is parsed. Version 1 (no scheduler configuration) is still read.
Version 3 is version 2 with moments held low (``state_dtype``): the metadata names the
optimizer's ``state_dtype``, and each held slot is stored as it is held (``states_held``: a
bfloat16 slot's bits, an int8 slot's codes and ``state/<index>/<k>/absmax``, its map named).
An optimizer without ``state_dtype`` writes version 2, byte for byte as before.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from ..backends import arrays, lowbit
from . import states_held as held
from .buffers import state_leaves

__all__ = ["FORMAT", "VERSION", "HELD_VERSION", "READS", "SEAL", "MAX_COUNT", "checksum",
           "scheduler_config",
           "scheduler_meta", "hyper", "state_members", "collect", "refuse"]

FORMAT = "mxopt-toolkit trainer states"
#: the version this toolkit writes for an optimizer without ``state_dtype``
VERSION = 2
#: the version it writes for one with ``state_dtype`` (held slots, ``state_dtype`` named)
HELD_VERSION = 3
#: the versions it reads (1: no scheduler configuration)
READS = (1, 2, 3)
#: the zip archive comment, the file's last bytes: the SHA-256 (hex) of every byte before it
SEAL = 64
#: counts above this are refused (they are exact integers in float64, and fit every kernel's t)
MAX_COUNT = 2 ** 53


# ------------------------------------------------------------------------------------------
# what a file holds
# ------------------------------------------------------------------------------------------
def checksum(arrs: dict, meta: dict) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(meta, sort_keys=True).encode())
    for name in sorted(arrs):
        a = arrs[name]
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8))  # no copy when contiguous
    return h.hexdigest()


def scheduler_config(s):
    config = getattr(s, "config", None)
    return json.loads(json.dumps(config())) if callable(config) else None


def scheduler_meta(opt):
    s = opt.lr_scheduler
    if s is None:
        return None
    if not hasattr(s, "state_dict"):
        raise TypeError(f"the lr_scheduler {type(s).__name__} has no state_dict(); it cannot be "
                        "saved")
    return {"type": type(s).__name__, "config": scheduler_config(s), "state": s.state_dict()}


def hyper(opt):
    h = {k: v for k, v in opt.reference_hyper().items()}
    h.update(wd=opt.wd, clip_gradient=opt.clip_gradient, multi_precision=opt.multi_precision,
             begin_num_update=opt.begin_num_update)
    return json.loads(json.dumps(h))  # as JSON will give it back


def state_members(trainer):
    """``[(index, parameter, [state leaf, ...])]`` of the trainer's stepped parameters."""
    out = []
    for g in trainer.groups:
        for k, (i, p) in enumerate(g.members):
            out.append((i, p, state_leaves(g.views[k])))
    out.sort(key=lambda e: e[0])
    return out


def collect(trainer, copies=True):
    """``(meta, arrays)`` of the trainer's current state. With ``copies`` the arrays are host
    copies that no later step changes; without, ``arrays`` maps each name to the live array."""
    opt = trainer.optimizer
    arrs = {}
    params = []
    members = state_members(trainer)
    if copies and any(type(leaf) is not lowbit.Quantized and  # held slots live on the host
                      arrays.describe(leaf).kind != arrays.HOST for _, _, leaves in members
                      for leaf in leaves):
        from numba import cuda  # a step's kernels may run on another thread's stream: wait
        cuda.synchronize()
    for i, p, leaves in members:
        entry = {"index": i, "name": p.name, "shape": list(p.shape), "dtype": p.dtype.name,
                 "state": []}
        for j, leaf in enumerate(leaves):
            # a plain array as in version 2; a held slot as it is held (states_held)
            arrs.update(held.stored(f"state/{i}/{j}", leaf, copies))
            entry["state"].append(held.entry(held.form_of(leaf)))
        params.append(entry)
    extra, extra_arrays = opt.host_state()
    extra = json.loads(json.dumps(extra))  # a copy, as JSON will give it back
    for name, a in extra_arrays.items():
        arrs[f"host/{name}"] = (np.array(arrays.to_host(a), order="C", copy=True)
                                if copies else a)
    meta = {
        "format": FORMAT, "version": VERSION if opt.state_dtype is None else HELD_VERSION,
        "optimizer": type(opt).__name__.lower(), "convention": opt.convention,
        "hyperparameters": hyper(opt), "learning_rate": opt.lr,
        "num_update": opt.num_update,
        "index_update_count": [[k, v] for k, v in sorted(opt.update_counts.items(),
                                                         key=lambda kv: str(kv[0]))],
        "scheduler": json.loads(json.dumps(scheduler_meta(opt))), "host_state": extra,
        "params": params,
    }
    if opt.state_dtype is not None:
        meta["state_dtype"] = opt.state_dtype
    return meta, arrs



def refuse(path, why):
    raise ValueError(f"cannot load trainer states from {_label(path)}: {why}; the trainer is "
                   "unchanged")


def _label(path):
    if isinstance(path, (str, bytes, os.PathLike)):
        return repr(os.fsdecode(os.fspath(path)))
    name = getattr(path, "name", None)
    return repr(name) if isinstance(name, str) else f"a {type(path).__name__}"
