"""Loader for the golden MXNet 1.9.1 parity data in ``tests/data/mxnet/`` (numpy only).

Every float array in those files is stored exactly, as ``{"dtype", "shape", "hex"}`` with
``float.hex()`` of each element; :func:`load_cases` turns each of them back into a numpy
array of that dtype, bit for bit.  See ``tests/data/mxnet/README.md`` for the format.

Usage::

    import mxnet_data
    for case in mxnet_data.load_cases("adam"):
        w = case["init"][0]["weight"]            # numpy array, dtype as in case["dtype"]
        for call in case["calls"]:
            call["index"], call["grad"], call["weight"], call["states"]["mean"]
"""
import json
import os

import numpy as np

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "mxnet")

_ARRAY_KEYS = frozenset(("dtype", "shape", "hex"))
_SCALAR_KEYS = frozenset(("value", "hex"))
_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def decode_array(obj):
    """``{"dtype", "shape", "hex"}`` -> numpy array of that dtype (exact)."""
    dtype = _DTYPES[obj["dtype"]]
    values = [float.fromhex(h) for h in obj["hex"]]
    # float64 -> float16/float32 is exact here: the values were produced in that dtype.
    arr = np.array(values, dtype=np.float64).astype(dtype).reshape(obj["shape"])
    return arr


def decode_scalar(obj):
    """``{"value", "hex"}`` -> Python float (from the hex, exact)."""
    return float.fromhex(obj["hex"])


def _decode(obj):
    if isinstance(obj, dict):
        keys = frozenset(obj)
        if keys == _ARRAY_KEYS and isinstance(obj["hex"], list):
            return decode_array(obj)
        if keys == _SCALAR_KEYS and isinstance(obj["hex"], str):
            return decode_scalar(obj)
        return {k: _decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj


def _read(name):
    path = os.path.join(DATA_DIR, name + ".json")
    with open(path) as f:
        return json.load(f)


GENERATOR = "tests/data/mxnet/generate.py"


def _written_by_generate():
    """The optimizers whose data file ``tests/data/mxnet/generate.py`` wrote, sorted: the files
    of this folder whose provenance names that generator and that hold an ``optimizer`` (the
    other JSON files, e.g. ``lr_scheduler.json`` or ``generate_more.py``'s ``lamb.json``, come
    from other generators and have other formats). Read from the files, so the recorded data,
    not a list written here, says which optimizers MXNet 1.9.1 ran through ``generate.py``."""
    found = []
    for entry in sorted(os.listdir(DATA_DIR)):
        if entry.endswith(".json"):
            data = _read(entry[:-len(".json")])
            if data.get("provenance", {}).get("generator") == GENERATOR and "optimizer" in data:
                found.append(data["optimizer"])
    return tuple(found)


#: the optimizers of ``generate.py``'s data files, sorted
OPTIMIZERS = _written_by_generate()


def available():
    """Names (without ``.json``) of the optimizer data files that are present."""
    return [n for n in OPTIMIZERS if os.path.exists(os.path.join(DATA_DIR, n + ".json"))]


def load_file(name):
    """The whole decoded file: ``{"provenance", "optimizer", "cases"}``."""
    return _decode(_read(name))


def load_cases(name):
    """List of decoded cases for optimizer ``name`` (e.g. ``"adam"``).

    Each case is a dict with ``id``, ``optimizer``, ``kwargs`` (as passed to
    ``mx.optimizer.create``), ``dtype``, ``multi_precision``, ``steps``, ``shape``,
    ``state_layout``, ``state_names``, ``init`` (list of ``{"index", "weight"}``) and
    ``calls`` (list of ``{"index", "grad", "weight", "states": {name: array}, "extras"}``,
    where ``weight`` / ``states`` are the values right after that call; SGLD calls also
    carry ``noise``).
    """
    return load_file(name)["cases"]


def load_case(case_id):
    """One case by its id, e.g. ``"adam-allon-f64"``."""
    name = case_id.split("-", 1)[0]
    for case in load_cases(name):
        if case["id"] == case_id:
            return case
    raise KeyError(case_id)


def load_provenance(name="facts"):
    return _read(name)["provenance"]


def load_facts():
    """``{key: {"description", "value", ...}}`` from ``facts.json``."""
    return _decode(_read("facts"))["facts"]


def default_lr(name):
    """MXNet 1.9.1's default learning rate of optimizer ``name``, as measured
    (``facts.json``'s ``optimizer_defaults``: ``mx.optimizer.create(name).lr``)."""
    return load_facts()["optimizer_defaults"]["value"][name]["lr"]


def initial_weights(case):
    """``{index: initial weight array}`` for a decoded case."""
    return {p["index"]: p["weight"] for p in case["init"]}
