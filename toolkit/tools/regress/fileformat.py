"""``mxopt regress``'s file format (``format: "mxopt-regress"``, ``version: 1``;
docs/regression-testing.md): the exact text of arrays (:func:`encode`, :func:`decode`), the
distance in ulps (:func:`ulp_distance`), and documents written atomically and read back with
every field checked (:func:`document`, :func:`write`, :func:`load`,
:class:`RegressFileError`).

Version 2 adds entries of backend ``"user"`` (:mod:`~toolkit.tools.regress.users`) and nothing
else: a file of the toolkit's kernels is written as version 1, a file with a user's entries as
version 2, which a reader of version 1 refuses as newer.
"""
from __future__ import annotations

import json
import os

import numpy as np

from .._support import DTYPES, provenance, storage_dtype

__all__ = ["FORMAT", "VERSION", "USER_VERSION", "USER", "ENCODINGS", "BACKENDS", "UINT", "RegressFileError", "encode",
           "decode", "ulp_distance", "entry_id", "document", "write", "load"]

FORMAT = "mxopt-regress"
VERSION = 1
ENCODINGS = ("bits", "float.hex")
BACKENDS = ("cpu", "cuda", "reference")
#: the backend of a user's entries, and the format version that added them (the newest read)
USER = "user"
USER_VERSION = 2
#: the fields a user's entry has beyond a kernel entry's: the index of the oracle's case,
#: the pinned hyperparameters, the reference's weight after each step (float.hex of float64)
#: and the distance of the recorded weight from it (ulps of the weight's dtype)
_USER_KEYS = {"case": int, "fixed": list, "reference": list, "error_ulps": list}

#: the unsigned integer type of each float width in bytes (the bits of a float of that width)
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
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
    return [format(int(x), f"0{width}x") for x in a.view(UINT[a.dtype.itemsize]).tolist()]


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
    return np.array(ints, dtype=UINT[dtype.itemsize]).view(dtype)


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
    ut = UINT[size]
    d = (hi.astype(ut) - lo.astype(ut)).astype(np.float64)  # modular: exact for hi >= lo
    na, nb = np.isnan(a), np.isnan(b)
    d[na & nb] = 0.0
    d[na ^ nb] = np.inf
    return d


def entry_id(optimizer, convention, backend, dtype, case=None):
    """``optimizer/convention/backend/dtype``, and ``/case`` for a user's entry."""
    eid = f"{optimizer}/{convention}/{backend}/{dtype}"
    return eid if case is None else f"{eid}/{case}"


# ----------------------------------------------------------------------------------------------
# documents
# ----------------------------------------------------------------------------------------------
def document(entries, *, scope, command=None, generator=None) -> dict:
    """A complete file: format, version, provenance, scope and entries (version
    :data:`USER_VERSION` where some entry is a user's, else :data:`VERSION`)."""
    prov = provenance(command, cuda=any(e["backend"] == "cuda" for e in entries))
    if generator:
        prov["generator"] = generator
    version = USER_VERSION if any(e["backend"] == USER for e in entries) else VERSION
    return {"format": FORMAT, "version": version, "provenance": prov, "scope": scope,
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


def _check_fields(e, keys, where):
    for k, t in keys.items():
        if k not in e:
            raise RegressFileError(f"{where}: missing field {k!r}")
        if not isinstance(e[k], t) or (t is int and isinstance(e[k], bool)):
            raise RegressFileError(f"{where}: field {k!r} must be a {t.__name__}")


def _check_entry(e, where, version=VERSION):
    if not isinstance(e, dict):
        raise RegressFileError(f"{where}: an entry must be an object")
    _check_fields(e, _ENTRY_KEYS, where)
    user = e["backend"] == USER
    if user and version < USER_VERSION:
        raise RegressFileError(f"{where}: unknown backend {USER!r} in a version {version} file "
                               f"(a user's entries are version {USER_VERSION})")
    if user:
        _check_fields(e, _USER_KEYS, where)
    where = f"{where} ({e['id']})"
    if e["id"] != entry_id(e["optimizer"], e["convention"], e["backend"], e["dtype"],
                           e["case"] if user else None):
        raise RegressFileError(f"{where}: id does not match optimizer/convention/backend/dtype"
                               f"{'/case' if user else ''}")
    if ((e["backend"] not in BACKENDS and not user) or e["dtype"] not in DTYPES
            or e["encoding"] not in ENCODINGS):
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
    if user:
        _check_user(e, size, where)


def _check_user(e, size, where):
    if len(e["reference"]) != len(e["steps"]) or len(e["error_ulps"]) != len(e["steps"]):
        raise RegressFileError(f"{where}: reference and error_ulps need one item per step")
    for k, r in enumerate(e["reference"]):
        if len(decode(r, np.float64, "float.hex", f"{where} reference[{k}]")) != size:
            raise RegressFileError(f"{where} reference[{k}]: expected {size} values")
    if not all(x == "inf" or (isinstance(x, int) and not isinstance(x, bool) and x >= 0)
               for x in e["error_ulps"]):
        raise RegressFileError(f"{where}: error_ulps must be ints >= 0 or \"inf\"")
    if not all(isinstance(x, str) for x in e["fixed"]):
        raise RegressFileError(f"{where}: fixed must be a list of hyperparameter names")


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
    if v > USER_VERSION:
        raise RegressFileError(f"{path}: format version {v} is newer than this toolkit "
                               f"reads ({USER_VERSION}); upgrade the toolkit")
    for k, t in (("provenance", dict), ("scope", dict), ("entries", list)):
        if not isinstance(doc.get(k), t):
            raise RegressFileError(f"{path}: missing or malformed {k!r}")
    for i, e in enumerate(doc["entries"]):
        _check_entry(e, f"{path}: entries[{i}]", v)
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
