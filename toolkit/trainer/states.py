"""The Trainer's states file: data, never code.

Format (version 1, ``docs/trainer.md``): a NumPy ``.npz`` archive (a zip of ``.npy`` files) read
with ``allow_pickle=False``, holding

* ``meta``: UTF-8 JSON as a uint8 array: the format name and version, the optimizer's registry
  name, convention and hyperparameters, the learning rate, ``num_update`` and the per-index counts,
  the scheduler's state, the optimizer's own host-side state (Nadam's momentum schedule, LBSGD's
  call counts), the parameters (index, name, shape, dtype) with the names, shapes and dtypes of
  their state arrays, and a SHA-256 checksum of every array and of the rest of the metadata;
* ``state/<index>/<k>``: the k-th state array of parameter ``index`` (the leaves of what
  ``create_state_multi_precision`` returns, in order, so the float32 master copy of a
  multi-precision parameter is one of them);
* ``host/<name>``: arrays of the optimizer's host-side state (LBSGD's gradient accumulators);
* the zip archive comment (the file's last 64 bytes): the SHA-256, in hex, of every byte before
  it, so a flipped bit anywhere in the file is caught before the zip is even parsed.

Writing is atomic: a temporary file in the same folder, flushed and fsynced, renamed over the
target, and the folder fsynced. Loading reads and checks everything (zip integrity, format,
checksum, optimizer, hyperparameters, parameter names, shapes and dtypes, scheduler state) before
it changes anything; a truncated, bit-flipped, foreign (a pickle, MXNet's format) or mismatched
file raises ``ValueError`` and leaves the Trainer exactly as it was.
"""
from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import tempfile
import zipfile

import numpy as np

from ..backends import arrays
from .buffers import state_leaves

__all__ = ["save", "load", "FORMAT", "VERSION"]

FORMAT = "mxopt-toolkit trainer states"
VERSION = 1
#: the zip archive comment, the file's last bytes: the SHA-256 (hex) of every byte before it
_SEAL = 64


def _checksum(arrs: dict, meta: dict) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(meta, sort_keys=True).encode())
    for name in sorted(arrs):
        a = np.ascontiguousarray(arrs[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _scheduler_meta(opt):
    s = opt.lr_scheduler
    if s is None:
        return None
    if not hasattr(s, "state_dict"):
        raise TypeError(f"the lr_scheduler {type(s).__name__} has no state_dict(); it cannot be "
                        "saved")
    return {"type": type(s).__name__, "state": s.state_dict()}


def _hyper(opt):
    h = {k: v for k, v in opt.reference_hyper().items()}
    h.update(wd=opt.wd, clip_gradient=opt.clip_gradient, multi_precision=opt.multi_precision,
             begin_num_update=opt.begin_num_update)
    return json.loads(json.dumps(h))  # as JSON will give it back


def _collect(trainer):
    """``(meta, arrays)`` of the trainer's current state (host copies)."""
    opt = trainer._optimizer
    arrs = {}
    params = []
    for g in trainer._groups:
        for k, (i, p) in enumerate(g.members):
            leaves = state_leaves(g.views[k])
            entry = {"index": i, "name": p.name, "shape": list(p.shape), "dtype": p.dtype.name,
                     "state": []}
            for j, leaf in enumerate(leaves):
                host = np.ascontiguousarray(arrays.to_host(leaf))
                arrs[f"state/{i}/{j}"] = host
                entry["state"].append({"shape": list(host.shape), "dtype": host.dtype.name})
            params.append(entry)
    params.sort(key=lambda e: e["index"])
    extra, extra_arrays = opt.host_state()
    for name, a in extra_arrays.items():
        arrs[f"host/{name}"] = np.ascontiguousarray(arrays.to_host(a))
    meta = {
        "format": FORMAT, "version": VERSION,
        "optimizer": type(opt).__name__.lower(), "convention": opt.convention,
        "hyperparameters": _hyper(opt), "learning_rate": opt.lr,
        "num_update": opt.num_update,
        "index_update_count": [[k, v] for k, v in sorted(opt._index_update_count.items(),
                                                         key=lambda kv: str(kv[0]))],
        "scheduler": _scheduler_meta(opt), "host_state": extra,
        "params": params,
    }
    return meta, arrs


def save(trainer, path):
    meta, arrs = _collect(trainer)
    meta["checksum"] = {"algorithm": "sha256", "value": _checksum(arrs, meta)}
    payload = dict(arrs)
    payload["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode("utf-8"), np.uint8)
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    buf = io.BytesIO()
    np.savez(buf, **payload)
    with zipfile.ZipFile(buf, "a") as zf:  # room for the whole-file checksum: the zip comment
        zf.comment = b"0" * _SEAL
    raw = buf.getvalue()
    raw = raw[:-_SEAL] + hashlib.sha256(raw[:-_SEAL]).hexdigest().encode("ascii")
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _refuse(path, why):
    raise ValueError(f"cannot load trainer states from {os.fspath(path)!r}: {why}; the trainer "
                     "is unchanged")


def _read(path, raw=None):
    """``(meta, arrays)`` of a states file (or of its bytes ``raw``, read elsewhere: a
    distributed Trainer's rank 0 sends them), checked for integrity and format only."""
    if raw is None:
        with open(path, "rb") as f:
            raw = f.read()
    if raw[:1] == b"\x80" or raw[:2] in (b"(l", b"(d", b"}q", b"]q"):
        _refuse(path, "it is a Python pickle (MXNet's save_states writes those); pickles can run "
                      "code and are never loaded")
    if raw[:4] != b"PK\x03\x04":
        _refuse(path, f"it is not a {FORMAT} file (no zip/npz header)")
    if len(raw) <= _SEAL or hashlib.sha256(raw[:-_SEAL]).hexdigest().encode("ascii") != raw[-_SEAL:]:
        _refuse(path, "its whole-file checksum does not match (the file is truncated or "
                      "corrupted, or was not written by save_states)")
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            names = list(z.files)
            if "meta" not in names:
                _refuse(path, f"it is not a {FORMAT} file (no metadata)")
            loaded = {n: z[n] for n in names}
    except ValueError as exc:
        if "cannot load trainer states" in str(exc):
            raise
        _refuse(path, f"it is damaged or not a {FORMAT} file ({exc})")
    except (zipfile.BadZipFile, EOFError, OSError, KeyError, zipfile.LargeZipFile) as exc:
        _refuse(path, f"it is damaged or truncated ({type(exc).__name__}: {exc})")
    try:
        meta = json.loads(loaded.pop("meta").tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        _refuse(path, f"its metadata is damaged ({exc})")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        _refuse(path, f"it is not a {FORMAT} file")
    if meta.get("version") != VERSION:
        _refuse(path, f"it has format version {meta.get('version')!r}; this toolkit reads "
                      f"version {VERSION}")
    check = meta.pop("checksum", None)
    if not isinstance(check, dict) or check.get("algorithm") != "sha256":
        _refuse(path, "it has no checksum")
    if _checksum(loaded, meta) != check.get("value"):
        _refuse(path, "its checksum does not match its contents (the file is corrupted)")
    return meta, loaded


def load(trainer, path, raw=None):
    meta, loaded = _read(path, raw)
    opt = trainer._optimizer
    # --- everything is checked against this trainer before anything is assigned ------------
    name = type(opt).__name__.lower()
    if meta["optimizer"] != name:
        _refuse(path, f"it was saved by optimizer {meta['optimizer']!r}, this trainer uses "
                      f"{name!r}")
    if meta["convention"] != opt.convention:
        _refuse(path, f"it was saved with convention {meta['convention']!r}, this trainer's "
                      f"optimizer uses {opt.convention!r}")
    mine = _hyper(opt)
    if meta["hyperparameters"] != mine:
        diff = sorted(k for k in set(mine) | set(meta["hyperparameters"])
                      if mine.get(k) != meta["hyperparameters"].get(k))
        _refuse(path, f"its hyperparameters differ from this optimizer's in {diff} (file: "
                      f"{ {k: meta['hyperparameters'].get(k) for k in diff} }, optimizer: "
                      f"{ {k: mine.get(k) for k in diff} })")
    by_index = {e["index"]: e for e in meta["params"]}
    targets = []
    for g in trainer._groups:
        for k, (i, p) in enumerate(g.members):
            e = by_index.pop(i, None)
            if e is None or e["name"] != p.name or tuple(e["shape"]) != p.shape or \
                    e["dtype"] != p.dtype.name:
                got = None if e is None else (e["name"], tuple(e["shape"]), e["dtype"])
                _refuse(path, f"parameter {i} is {(p.name, p.shape, p.dtype.name)} here but "
                              f"{got} in the file")
            leaves = state_leaves(g.views[k])
            if len(e["state"]) != len(leaves):
                _refuse(path, f"parameter {p.name!r} has {len(leaves)} state arrays here, "
                              f"{len(e['state'])} in the file")
            for j, leaf in enumerate(leaves):
                a = loaded.get(f"state/{i}/{j}")
                here = arrays.describe(leaf)  # shape and dtype only: nothing is copied
                if a is None or a.shape != here.shape or a.dtype != here.dtype:
                    _refuse(path, f"state array {j} of parameter {p.name!r} does not match "
                                  f"(here {here.dtype}{here.shape}, file "
                                  f"{None if a is None else (a.dtype, a.shape)})")
                targets.append((leaf, a))
    if by_index:
        _refuse(path, f"it holds parameters this trainer does not have: "
                      f"{sorted(e['name'] for e in by_index.values())}")
    sched = opt.lr_scheduler
    smeta = meta["scheduler"]
    if (sched is None) != (smeta is None) or (sched is not None and
                                              smeta["type"] != type(sched).__name__):
        _refuse(path, f"its scheduler ({None if smeta is None else smeta['type']}) does not "
                      f"match this optimizer's ({None if sched is None else type(sched).__name__})")
    if sched is not None:
        try:
            copy.deepcopy(sched).load_state_dict(smeta["state"])
        except (TypeError, ValueError) as exc:
            _refuse(path, f"its scheduler state is invalid ({exc})")
    host_arrays = {n[len("host/"):]: a for n, a in loaded.items() if n.startswith("host/")}
    try:
        commit_host = opt.check_host_state(meta["host_state"], host_arrays)
    except (TypeError, ValueError, KeyError) as exc:
        _refuse(path, f"its optimizer state is invalid ({exc})")
    counts = {}
    for key, t in meta["index_update_count"]:
        if not isinstance(t, int) or t < 0:
            _refuse(path, f"its update count {t!r} is invalid")
        counts[key] = t
    lr, num_update = meta["learning_rate"], meta["num_update"]
    if not isinstance(num_update, int) or num_update < 0 or not isinstance(lr, (int, float)):
        _refuse(path, "its learning rate or update count is invalid")
    # --- commit -----------------------------------------------------------------------------
    for leaf, a in targets:
        arrays.copy_from_host(leaf, a)
    opt._index_update_count = counts
    opt.num_update = num_update
    opt.lr = float(lr)
    if sched is not None:
        sched.load_state_dict(smeta["state"])
    commit_host()
