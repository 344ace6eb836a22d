"""``python -m toolkit regress``: golden trajectories, recorded once and compared bit for bit.

``record`` runs every optimizer x convention x backend x dtype on fixed inputs and stores, after
each step, the weight and every state array as exact bits, with the inputs and the provenance
(versions, machine, date, command). ``compare`` reruns the stored inputs with the code and
machine of today and reports, per entry that changed, what changed and by how much::

    python -m toolkit regress record PATH [--only NAMES] [--backend B] [--dtype D]
                                          [--steps N] [--size N] [--force]
    python -m toolkit regress compare PATH [--bound N] [--json] [--only NAMES] [--backend B]

``PATH`` ending in ``.json`` is one file; any other path is a folder with one file per optimizer
(``<name>.json``; the layout of ``tests/data/golden/``). ``compare`` reads either.

Backends recorded by default: ``cpu``, and ``cuda`` on a real GPU (numba's simulator only when
``--backend cuda`` asks for it: it runs kernels in Python, so its numbers are not a GPU's).
``--backend reference`` records the float64 oracle itself (our golden files). Dtypes:
``float32``, ``float64``, ``float16-mp`` (float16 weight, float32 master copy and state),
``float16`` (no master copy).

The bound of ``compare`` is in **ulps of each array's own storage dtype** (the distance between
the stored and the recomputed bit patterns, counted in representable numbers; ``--bound 0``, the
default, is bit-exact). Each entry may carry its own allowance ``ulps`` (the golden files allow
1 ulp where libm's ``pow``/``exp``/``log``/``cos`` are involved); an entry passes when its
largest distance is at most ``max(bound, ulps)``. ``+0`` and ``-0`` are 0 ulps apart: a changed
sign of zero is reported (status ``within``), never a failure. NaN against NaN is equal (payloads
are not compared); NaN against a number is an infinite distance.

Entry statuses: ``same`` (bit-identical), ``within`` (differs, inside the allowance), ``changed``
(beyond it), ``error`` (the rerun raised), ``extra`` (the file names an optimizer or convention
this toolkit no longer has), ``skipped`` (its backend cannot run here, e.g. no GPU: not a
failure), ``missing`` (the recorded scope would hold it today but the file does not, e.g. an
optimizer added since: not a failure; record again to cover it).

Exit codes of :func:`main`:

* ``0`` -- recorded; or compared and every entry is ``same``/``within``/``skipped``/``missing``
* ``1`` -- compared and some entry is ``changed``, ``error`` or ``extra``
* ``2`` -- usage or file error: bad arguments, an unknown optimizer, an explicitly requested
  backend that cannot run here, a file that exists (record without ``--force``), a missing,
  truncated, corrupted or foreign file, or one of a newer format version

The file format (``format: "mxopt-regress"``, ``version: 1``) is described in
``docs/regression-testing.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from dataclasses import asdict, dataclass, field

import numpy as np

from ._support import (DTYPES, UsageError, choose_backends, cuda_status, optimizer_conventions,
                       progress_bar, provenance, select_dtypes, select_optimizers, split_names,
                       storage_dtype, to_device)

__all__ = ["FORMAT", "VERSION", "RegressFileError", "Report", "EntryResult", "ArrayChange",
           "record", "compare", "load", "write", "new_entry", "hyper_for", "common_for",
           "reference_hyper", "run_entry", "fill_entry",
           "document", "encode", "decode", "ulp_distance", "main"]

FORMAT = "mxopt-regress"
VERSION = 1
ENCODINGS = ("bits", "float.hex")
BACKENDS = ("cpu", "cuda", "reference")
DEFAULT_STEPS = 6
DEFAULT_SIZE = 8
#: seed of the recorded inputs (per optimizer and convention: crc32 of "name/convention" added)
SEED = 20261123

#: hyperparameters every optimizer shares (``lr`` is the constructor's ``learning_rate``);
#: an optimizer's pinned ones replace them (GroupAdaGrad's wd 0: :func:`common_for`). Each
#: optimizer's own hyperparameters are its spec's ``record`` (:func:`hyper_for`).
COMMON = {"lr": 0.05, "wd": 0.01, "rescale_grad": 0.5, "clip_gradient": 2.0}


def _spec(name):
    from ..optimizers.registry import spec_of
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


_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
_SINT = {2: np.int16, 4: np.int32, 8: np.int64}
_FLOATS = ("float16", "float32", "float64")


class RegressFileError(ValueError):
    """A regression file that cannot be used: missing, truncated, corrupted, foreign, or of a
    newer format version (exit code 2)."""


# ----------------------------------------------------------------------------------------------
# encoding
# ----------------------------------------------------------------------------------------------
def encode(a, encoding="bits") -> list:
    """Exact text of every element of ``a`` (flattened, C order).

    ``"bits"``: the IEEE bit pattern as fixed-width lower-case hex (4, 8 or 16 digits for
    float16, float32, float64: ``1.0`` in float32 is ``"3f800000"``). ``"float.hex"``: Python's
    ``float.hex`` of the value (exact for every float16/32/64 value; NaN payloads are lost).
    """
    a = np.ascontiguousarray(a).ravel()
    if encoding == "float.hex":
        return [float(x).hex() for x in a.astype(np.float64)]
    if encoding != "bits":
        raise ValueError(f"unknown encoding {encoding!r}; expected one of {ENCODINGS}")
    width = 2 * a.dtype.itemsize
    return [format(int(x), f"0{width}x") for x in a.view(_UINT[a.dtype.itemsize]).tolist()]


def decode(hexes, dtype, encoding="bits", where="array"):
    """The array that :func:`encode` wrote (1-D); :class:`RegressFileError` naming ``where``
    on any malformed string."""
    dtype = np.dtype(dtype)
    if not isinstance(hexes, list) or not all(isinstance(h, str) for h in hexes):
        raise RegressFileError(f"{where}: expected a list of hex strings")
    if encoding == "float.hex":
        try:
            v = np.array([float.fromhex(h) for h in hexes], dtype=np.float64)
        except (ValueError, OverflowError) as exc:
            raise RegressFileError(f"{where}: not a float.hex string ({exc})") from None
        out = v.astype(dtype)
        if not np.array_equal(out.astype(np.float64), v, equal_nan=True):
            raise RegressFileError(f"{where}: a value is not exactly a {dtype.name}")
        return out
    if encoding != "bits":
        raise RegressFileError(f"{where}: unknown encoding {encoding!r}")
    width = 2 * dtype.itemsize
    try:
        if any(len(h) != width for h in hexes):
            raise ValueError(f"every {dtype.name} needs {width} hex digits")
        ints = [int(h, 16) for h in hexes]
    except ValueError as exc:
        raise RegressFileError(f"{where}: malformed bits ({exc})") from None
    return np.array(ints, dtype=_UINT[dtype.itemsize]).view(dtype)


def ulp_distance(a, b):
    """Elementwise distance between two arrays of one float dtype, in units in the last place
    of that dtype: how many representable numbers apart they are (``+0`` and ``-0`` are 0 apart;
    NaN vs NaN is 0, NaN vs a number is inf). Returned as float64."""
    a, b = np.ascontiguousarray(a).ravel(), np.ascontiguousarray(b).ravel()
    if a.dtype != b.dtype or a.shape != b.shape:
        raise ValueError(f"cannot compare {a.dtype}{a.shape} with {b.dtype}{b.shape}")
    size = a.dtype.itemsize
    st = _SINT[size]
    lo_int = np.iinfo(st).min

    def ordered(x):  # the bit pattern as an integer that is monotonic in the value
        i = x.view(st)
        return np.where(i < 0, lo_int - i, i).astype(st)

    oa, ob = ordered(a), ordered(b)
    hi, lo = np.maximum(oa, ob), np.minimum(oa, ob)
    ut = _UINT[size]
    d = (hi.astype(ut) - lo.astype(ut)).astype(np.float64)  # modular: exact for hi >= lo
    na, nb = np.isnan(a), np.isnan(b)
    d[na & nb] = 0.0
    d[na ^ nb] = np.inf
    return d


# ----------------------------------------------------------------------------------------------
# entries
# ----------------------------------------------------------------------------------------------
def entry_id(optimizer, convention, backend, dtype):
    return f"{optimizer}/{convention}/{backend}/{dtype}"


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
    from .. import optimizer
    from ..backends.arrays import to_host
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
    """Rerun an entry's inputs now: a list, per step, of ``{array name: numpy array}``.

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
    from ..oracle import space
    rng = np.random.default_rng([SEED, zlib.crc32(f"{name}/{convention}".encode())])
    w = rng.standard_normal(size) * 10.0 ** rng.uniform(-2, 1, size)
    grads = [rng.standard_normal(size) * 10.0 ** rng.uniform(-3, 1, size) for _ in range(steps)]
    for g in grads:
        g[0] = 0.0
    shape = space.weight_shape(name, size)
    return w.reshape(shape), [g.reshape(shape) for g in grads]


# ----------------------------------------------------------------------------------------------
# documents
# ----------------------------------------------------------------------------------------------
def document(entries, *, scope, command=None, generator=None) -> dict:
    """A complete file: format, version, provenance, scope and entries."""
    prov = provenance(command, cuda=any(e["backend"] == "cuda" for e in entries))
    if generator:
        prov["generator"] = generator
    return {"format": FORMAT, "version": VERSION, "provenance": prov, "scope": scope,
            "entries": entries}


def _dumps(obj, indent=0):
    """JSON with one line per array (lists of scalars inline): short, diffable files."""
    pad, inner = " " * indent, " " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{inner}{json.dumps(str(k))}: {_dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and any(isinstance(x, (dict, list)) for x in obj):
        return "[\n" + ",\n".join(inner + _dumps(x, indent + 1) for x in obj) + "\n" + pad + "]"
    return json.dumps(obj, allow_nan=False)


def write(path, doc):
    """Write ``doc`` atomically (temporary file, fsync, rename)."""
    text = _dumps(doc) + "\n"
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


_ENTRY_KEYS = {"id": str, "optimizer": str, "convention": str, "backend": str, "dtype": str,
               "ulps": int, "hyper": dict, "common": dict, "encoding": str, "shape": list,
               "arrays": dict, "w0": list, "grads": list, "steps": list}


def _check_entry(e, where):
    if not isinstance(e, dict):
        raise RegressFileError(f"{where}: an entry must be an object")
    for k, t in _ENTRY_KEYS.items():
        if k not in e:
            raise RegressFileError(f"{where}: missing field {k!r}")
        if not isinstance(e[k], t) or (t is int and isinstance(e[k], bool)):
            raise RegressFileError(f"{where}: field {k!r} must be a {t.__name__}")
    where = f"{where} ({e['id']})"
    if e["id"] != entry_id(e["optimizer"], e["convention"], e["backend"], e["dtype"]):
        raise RegressFileError(f"{where}: id does not match optimizer/convention/backend/dtype")
    if e["backend"] not in BACKENDS or e["dtype"] not in DTYPES or e["encoding"] not in ENCODINGS:
        raise RegressFileError(f"{where}: unknown backend, dtype or encoding")
    if e["ulps"] < 0:
        raise RegressFileError(f"{where}: ulps must be >= 0")
    if not all(isinstance(n, int) and n >= 0 for n in e["shape"]):
        raise RegressFileError(f"{where}: shape must be a list of sizes")
    size = int(np.prod(e["shape"], dtype=np.int64))
    sd = storage_dtype(e["dtype"])
    if not e["arrays"] or not all(v in _FLOATS for v in e["arrays"].values()):
        raise RegressFileError(f"{where}: arrays must map names to float16/float32/float64")
    if len(e["steps"]) != len(e["grads"]):
        raise RegressFileError(f"{where}: {len(e['grads'])} gradients but "
                               f"{len(e['steps'])} steps")
    for k, g in enumerate([e["w0"]] + e["grads"]):
        what = "w0" if k == 0 else f"grads[{k - 1}]"
        if len(decode(g, sd, e["encoding"], f"{where} {what}")) != size:
            raise RegressFileError(f"{where} {what}: expected {size} values")
    # the weights have the weight's size; a state array keeps its size from step to step (it
    # need not be the weight's: GroupAdaGrad's history has one value per row)
    sizes = {"weight": size, "weight32": size}
    for k, s in enumerate(e["steps"]):
        if not isinstance(s, dict) or list(s) != list(e["arrays"]):
            raise RegressFileError(f"{where} step {k + 1}: expected the arrays "
                                   f"{list(e['arrays'])}")
        for name, hexes in s.items():
            a = decode(hexes, e["arrays"][name], e["encoding"], f"{where} step {k + 1} {name}")
            n = sizes.setdefault(name, len(a))
            if len(a) != n:
                raise RegressFileError(f"{where} step {k + 1} {name}: expected {n} values")


def _load_file(path):
    try:
        with open(path) as fh:
            text = fh.read()
    except FileNotFoundError:
        raise RegressFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RegressFileError(f"{path}: cannot be read ({exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RegressFileError(f"{path}: not valid JSON (truncated or corrupted?): {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise RegressFileError(f"{path}: not a {FORMAT} file (no \"format\": \"{FORMAT}\"); "
                               "written by something else?")
    v = doc.get("version")
    if not isinstance(v, int) or isinstance(v, bool):
        raise RegressFileError(f"{path}: no integer format version")
    if v > VERSION:
        raise RegressFileError(f"{path}: format version {v} is newer than this toolkit "
                               f"reads ({VERSION}); upgrade the toolkit")
    for k, t in (("provenance", dict), ("scope", dict), ("entries", list)):
        if not isinstance(doc.get(k), t):
            raise RegressFileError(f"{path}: missing or malformed {k!r}")
    for i, e in enumerate(doc["entries"]):
        _check_entry(e, f"{path}: entries[{i}]")
    doc["path"] = str(path)
    return doc


def load(path) -> list:
    """The documents at ``path`` (a file, or a folder of ``*.json`` files), each checked
    completely; :class:`RegressFileError` on anything wrong (duplicate ids across files
    included)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        names = sorted(f for f in os.listdir(path) if f.endswith(".json"))
        if not names:
            raise RegressFileError(f"{path}: a folder without any .json file")
        docs = [_load_file(os.path.join(path, f)) for f in names]
    else:
        docs = [_load_file(path)]
    seen = {}
    for d in docs:
        for e in d["entries"]:
            if e["id"] in seen:
                raise RegressFileError(f"entry {e['id']} appears twice ({seen[e['id']]} and "
                                       f"{d['path']})")
            seen[e["id"]] = d["path"]
    return docs


# ----------------------------------------------------------------------------------------------
# record
# ----------------------------------------------------------------------------------------------
def _matrix(optimizers, backends, dtypes):
    """Entry ids (as tuples) in record order."""
    convs = optimizer_conventions()
    out = []
    for name in optimizers:
        for conv in convs.get(name, ()):
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
             "dtypes": dts, "steps": steps, "size": size, "layout": "file" if single else "folder"}
    rows = _matrix(names, bks, dts)
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


# ----------------------------------------------------------------------------------------------
# compare
# ----------------------------------------------------------------------------------------------
@dataclass
class ArrayChange:
    """One array at one step that differs from the file."""
    step: int          # 1-based step
    array: str         # "weight", "weight32" (master copy) or a state slot
    dtype: str
    max_ulps: float    # largest distance in ulps of ``dtype`` (inf: NaN against a number)
    elements: int      # elements that differ
    size: int
    index: int         # flat index of the largest difference
    stored: str        # its stored bits and value
    now: str           # its bits and value now


@dataclass
class EntryResult:
    id: str
    status: str        # same, within, changed, error, extra, skipped, missing
    allowed_ulps: int = 0
    max_ulps: float = 0.0
    changes: list = field(default_factory=list)
    reason: str = ""

    @property
    def worst(self):
        """The change with the largest distance (the first such), or None."""
        return max(self.changes, key=lambda c: c.max_ulps, default=None)

    @property
    def first_step(self):
        return min((c.step for c in self.changes), default=None)

    @property
    def failed(self):
        return self.status in FAILING


FAILING = ("changed", "error", "extra")
STATUSES = ("same", "within", "changed", "error", "extra", "skipped", "missing")


def _fmt_ulps(x):
    return "inf" if x == np.inf else str(int(x))


@dataclass
class Report:
    """What :func:`compare` found: one :class:`EntryResult` per entry (and per missing one)."""
    path: str
    bound: int
    entries: list
    sources: list      # [{"path", "provenance", "scope"}] of the files read
    now: dict          # provenance of this run

    @property
    def ok(self):
        return not any(e.failed for e in self.entries)

    @property
    def exit_code(self):
        return 0 if self.ok else 1

    def counts(self):
        c = {s: 0 for s in STATUSES}
        for e in self.entries:
            c[e.status] += 1
        return c

    def by_id(self, eid):
        for e in self.entries:
            if e.id == eid:
                return e
        raise KeyError(eid)

    def summary(self):
        c = self.counts()
        parts = [f"{c[s]} {s}" for s in STATUSES if c[s]]
        return (f"{len(self.entries)} entries: {', '.join(parts) or 'none'}; bound "
                f"{self.bound} ulp{'s' if self.bound != 1 else ''}; "
                f"{'OK' if self.ok else 'DIFFERENCES BEYOND THE BOUND'}")

    def to_dict(self):
        def entry(e):
            d = asdict(e)
            d["max_ulps"] = _json_ulps(e.max_ulps)
            d["first_step"] = e.first_step
            for c in d["changes"]:
                c["max_ulps"] = _json_ulps(c["max_ulps"])
            return d
        return {"format": f"{FORMAT}-report", "version": VERSION, "path": self.path,
                "bound": self.bound, "ok": self.ok, "exit_code": self.exit_code,
                "counts": self.counts(), "summary": self.summary(),
                "entries": [entry(e) for e in self.entries], "sources": self.sources,
                "now": self.now}


def _json_ulps(x):
    """ulps for JSON: an integer, or the string "inf" (NaN against a number)."""
    return "inf" if x == np.inf else int(x)


def _describe(a, i, encoding="bits"):
    return f"{encode(a[i:i + 1], encoding)[0]} ({float(a[i])!r})"


def _compare_entry(entry, outputs, allowed):
    res = EntryResult(entry["id"], "same", allowed)
    want_names = list(entry["arrays"])
    got_names = list(outputs[0]) if outputs else []
    if got_names != want_names:
        res.status, res.max_ulps = "changed", np.inf
        res.reason = f"the arrays are now {got_names}, the file has {want_names}"
        return res
    for k, (stored, now) in enumerate(zip(entry["steps"], outputs), 1):
        for name in want_names:
            dt = np.dtype(entry["arrays"][name])
            a = decode(stored[name], dt, entry["encoding"], f"{entry['id']} step {k} {name}")
            b = np.ascontiguousarray(now[name]).ravel()
            if b.dtype != dt:
                res.status, res.max_ulps = "changed", np.inf
                res.reason = f"step {k} {name}: dtype is now {b.dtype.name}, the file has {dt.name}"
                return res
            d = ulp_distance(a, b)
            ut = _UINT[dt.itemsize]
            # bits that differ: a distance > 0, or a zero of the other sign (0 ulps apart)
            differ = (a.view(ut) != b.view(ut)) & ~(np.isnan(a) & np.isnan(b))
            nz = int(np.count_nonzero(differ))
            if nz:
                i = int(np.argmax(np.where(differ, d, -1.0)))
                res.changes.append(ArrayChange(k, name, dt.name, float(d[i]), nz, int(d.size), i,
                                               _describe(a, i), _describe(b, i)))
    if res.changes:
        res.max_ulps = max(c.max_ulps for c in res.changes)
        res.status = "within" if res.max_ulps <= allowed else "changed"
        w = res.worst
        what = "the sign of a zero" if w.max_ulps == 0 else f"stored {w.stored}, now {w.now}"
        res.reason = (f"{_fmt_ulps(w.max_ulps)} ulp{'s' if w.max_ulps != 1 else ''} at step "
                      f"{w.step} {w.array}[{w.index}] ({what}); first difference at step "
                      f"{res.first_step}")
    return res


def _known_now(entry):
    """None when the toolkit (or the oracle) still has the entry's optimizer and convention,
    else why not."""
    convs = optimizer_conventions().get(entry["optimizer"])
    if entry["backend"] == "reference":
        if convs is None:
            return f"the oracle has no optimizer {entry['optimizer']!r}"
        return None
    if convs is None:
        return f"the toolkit has no optimizer {entry['optimizer']!r}"
    if entry["convention"] not in convs:
        return f"{entry['optimizer']} has no convention {entry['convention']!r} now"
    return None


def compare(path, *, bound=0, optimizers=None, backends=None, progress=True,
            command=None) -> Report:
    """Rerun every entry of ``path`` (a file or a folder) now and compare with the stored bits.

    ``bound``: ulps of each array's storage dtype; an entry passes when its largest distance
    is at most ``max(bound, entry["ulps"])``. ``optimizers``/``backends`` restrict the entries
    compared. CUDA entries are skipped where CUDA cannot run, and where the file was recorded on
    a GPU and this is the simulator (or the reverse) unless ``backends`` names "cuda".
    """
    if isinstance(bound, bool) or not isinstance(bound, (int, np.integer)) or bound < 0:
        raise UsageError(f"bound must be an integer number of ulps >= 0, got {bound!r}")
    bound = int(bound)
    docs = load(path)
    only = None if optimizers is None else {str(n).lower() for n in optimizers}
    if backends is not None:
        for b in backends:
            if b not in BACKENDS:
                raise UsageError(f"unknown backend {b!r}; expected one of {', '.join(BACKENDS)}")
    work = [(d, e) for d in docs for e in d["entries"]
            if (only is None or e["optimizer"] in only)
            and (backends is None or e["backend"] in backends)]
    cuda_ok, cuda_kind, cuda_why = cuda_status()
    results = []
    with progress_bar(progress, len(work), "compare") as bar:
        for d, e in work:
            bar.update(e["id"], advance=0)
            allowed = max(bound, e["ulps"])
            why = _known_now(e)
            if why:
                results.append(EntryResult(e["id"], "extra", allowed, reason=why))
            elif e["backend"] == "cuda" and not cuda_ok:
                results.append(EntryResult(e["id"], "skipped", allowed, reason=cuda_why))
            elif (e["backend"] == "cuda" and (backends is None or "cuda" not in backends)
                  and (d["provenance"].get("cuda") or {}).get("kind") not in (None, cuda_kind)):
                rec = d["provenance"]["cuda"]["kind"]
                results.append(EntryResult(
                    e["id"], "skipped", allowed,
                    reason=f"recorded on the CUDA {rec}, this is the {cuda_kind} "
                           "(--backend cuda compares anyway)"))
            else:
                try:
                    outputs = run_entry(e)
                except Exception as exc:  # the rerun itself failing is a finding, not a crash
                    results.append(EntryResult(e["id"], "error", allowed, np.inf,
                                               reason=f"{type(exc).__name__}: {exc}"))
                else:
                    results.append(_compare_entry(e, outputs, allowed))
            bar.update(advance=1)
    results.extend(_missing(docs, only, backends, folder=os.path.isdir(path)))
    sources = [{"path": d["path"], "provenance": d["provenance"], "scope": d["scope"]}
               for d in docs]
    return Report(os.fspath(path), bound, results, sources, provenance(command))


def _missing(docs, only, backends, folder):
    """Entries the recorded scopes would hold today but no file has (new optimizers, ...).

    One file of a folder layout read on its own answers for its own optimizers only."""
    present = {e["id"] for d in docs for e in d["entries"]}
    expected = []
    for d in docs:
        sc = d["scope"]
        try:
            names = select_optimizers(sc.get("optimizers"))
        except UsageError:
            names = [n for n in sc.get("optimizers") or [] if n in optimizer_conventions()]
        if sc.get("layout") == "folder" and not folder:
            mine = {e["optimizer"] for e in d["entries"]}
            names = [n for n in names if n in mine]
        names = [n for n in names if only is None or n in only]
        bks = [b for b in sc.get("backends") or [] if b in BACKENDS
               and (backends is None or b in backends)]
        dts = [x for x in sc.get("dtypes") or [] if x in DTYPES]
        for row in _matrix(names, bks, dts):
            eid = entry_id(*row)
            if eid not in present and eid not in expected:
                expected.append(eid)
    return [EntryResult(eid, "missing", reason="in the recorded scope but not in the file "
                                              "(new since it was recorded?)") for eid in expected]


# ----------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------
_PROV_KEYS = ("date", "toolkit", "git", "python", "numpy", "numba", "llvmlite", "numba_cuda",
              "platform", "cpu")


def _table(title, columns, rows, console=None):
    """A rich table, or plain aligned text without rich."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max([len(c)] + [len(str(r[i])) for r in rows]) for i, c in enumerate(columns)]
        print(title)
        for r in [columns] + [list(map(str, r)) for r in rows]:
            print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
        return
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, overflow="fold", no_wrap=i == 0)
    for r in rows:
        t.add_row(*map(str, r))
    # a log (CI, a pipe) is not 80 columns wide: do not fold the table into one
    (console or Console(width=None if sys.stdout.isatty() else 160)).print(t)


def _print_report(rep: Report):
    src = rep.sources[0]["provenance"] if rep.sources else {}
    keys = [k for k in _PROV_KEYS if src.get(k) is not None or rep.now.get(k) is not None]
    _table(f"{rep.path}: recorded vs now", ["", "recorded", "now"],
           [(k, src.get(k), rep.now.get(k)) for k in keys])
    rows, grouped = [], {}
    for e in rep.entries:
        if e.status == "same":
            continue
        if e.status in ("skipped", "missing"):  # one line per reason, not one row per entry
            grouped.setdefault((e.status, e.reason), []).append(e.id)
            continue
        w = e.worst
        if w is None:
            note = e.reason
        elif w.max_ulps == 0:
            note = f"the sign of a zero: stored {w.stored}, now {w.now}"
        else:
            note = f"[{w.index}] stored {w.stored}, now {w.now}"
        rows.append((e.id, e.status.upper() if e.failed else e.status,
                     _fmt_ulps(e.max_ulps) if e.status in ("within", "changed") else "",
                     e.allowed_ulps if e.status not in ("missing",) else "",
                     f"step {w.step} {w.array}" if w else "",
                     f"{w.elements}/{w.size}" if w else "",
                     e.first_step or "", note))
    if rows:
        _table("entries that are not bit-identical", ["entry", "status", "max ulps", "allowed",
                                                      "worst at", "elements", "first step",
                                                      "detail"], rows)
    elif not grouped:
        print(f"all {len(rep.entries)} entries bit-identical")
    for (status, reason), ids in grouped.items():
        shown = ", ".join(ids[:4]) + (f", ... ({len(ids) - 4} more)" if len(ids) > 4 else "")
        print(f"{status} {len(ids)}: {shown}: {reason}")
    print(rep.summary())


def _parser():
    p = argparse.ArgumentParser(prog="mxopt regress",
                                description=__doc__.split("\n\n")[0].split(": ", 1)[-1],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="exit codes: 0 same (or within the bound), 1 differences "
                                       "beyond the bound, 2 usage or file error")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="record golden trajectories")
    r.add_argument("path", help="a .json file, or a folder (one file per optimizer)")
    r.add_argument("--only", action="append", metavar="NAMES",
                   help="optimizers, comma-separated or repeated (default: all)")
    r.add_argument("--backend", action="append", choices=BACKENDS,
                   help="repeatable (default: cpu, and cuda on a real GPU)")
    r.add_argument("--dtype", action="append", choices=DTYPES, help="repeatable (default: all)")
    r.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="steps per trajectory")
    r.add_argument("--size", type=int, default=DEFAULT_SIZE, help="elements per array")
    r.add_argument("--force", action="store_true", help="overwrite existing files")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    c = sub.add_parser("compare", help="rerun a recording and compare")
    c.add_argument("path", help="a .json file or a folder of them")
    c.add_argument("--bound", type=int, default=0,
                   help="allowed distance in ulps of each array's dtype (default 0: bit-exact)")
    c.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    c.add_argument("--only", action="append", metavar="NAMES", help="optimizers to compare")
    c.add_argument("--backend", action="append", choices=BACKENDS, help="backends to compare")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv=None) -> int:
    """``regress record|compare``; returns the exit code (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help is 0, a usage error 2
        return int(exc.code or 0)
    command = "python -m toolkit regress " + " ".join(argv)
    try:
        if args.command == "record":
            res = record(args.path, optimizers=split_names(args.only), backends=args.backend,
                         dtypes=args.dtype, steps=args.steps, size=args.size,
                         progress=not args.quiet, overwrite=args.force, command=command)
            for b, why in res.skipped.items():
                print(f"{b}: not recorded ({why})", file=sys.stderr)
            where = res.paths[0] if len(res.paths) == 1 else os.path.dirname(res.paths[0])
            print(f"recorded {res.entries} entries ({', '.join(res.backends)}) in "
                  f"{res.seconds:.1f} s: {where}")
            return 0
        if args.bound < 0:
            raise UsageError("--bound must be >= 0")
        rep = compare(args.path, bound=args.bound, optimizers=split_names(args.only),
                      backends=args.backend, progress=not args.quiet and not args.json,
                      command=command)
    except (UsageError, RegressFileError, OSError) as exc:
        print(f"regress: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rep.to_dict(), indent=1))
    else:
        _print_report(rep)
    return rep.exit_code


if __name__ == "__main__":
    sys.exit(main())
