"""Record MXNet 1.9.1's updates from row-sparse gradients (tests/data/mxnet/sparse.json).

Same conventions and file format as ``generate.py`` (whose encoding and input helpers it reuses):
fixed seeds (a case's seed is the CRC32 of its id), exact hex encoding, a ``provenance`` block,
and it refuses to overwrite an existing file without ``--force``. Run with MXNet's interpreter::

    /tmp/mxvenv/bin/python tests/data/mxnet/generate_sparse.py --force

Each case drives ``mx.optimizer.create(name, **kwargs)`` by ``opt.update(0, weight, grad,
state)`` with ``state = opt.create_state(0, weight)``, as Gluon's updater does, on a weight of
shape (10, 4) and five gradients ``mx.nd.sparse.row_sparse_array((values, rows), shape)`` whose
rows change from call to call (one call has no rows). ``weight_stype`` says whether the weight
is a dense NDArray ("default", what a Gluon Parameter holds unless told otherwise) or
``tostype('row_sparse')`` with every row present (Gluon's ``stype='row_sparse'``): MXNet's FTRL
is lazy only in the second case. After each call the file holds the weight and every state array.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate as base  # noqa: E402  (tests/data/mxnet/generate.py)

SHAPE = (10, 4)
ROWS = [[1, 4, 7], [0, 1, 9], [], [4], [2, 3, 4, 5, 6]]

# (label, optimizer, kwargs, weight_stype); what each optimizer does is in docs/sparse.md
SETTINGS = [
    ("sgd-lazy", "sgd", dict(learning_rate=0.37, wd=0.013, rescale_grad=0.7), "default"),
    ("sgd-lazy-clip", "sgd", dict(learning_rate=0.011, wd=0.3, rescale_grad=3.3,
                                  clip_gradient=0.5), "default"),
    ("sgd-mom-lazy", "sgd", dict(learning_rate=0.1, momentum=0.9, wd=0.05, rescale_grad=0.7),
     "default"),
    ("sgd-std", "sgd", dict(learning_rate=0.37, wd=0.013, rescale_grad=0.7, lazy_update=False),
     "default"),
    ("sgd-mom-std", "sgd", dict(learning_rate=0.1, momentum=0.9, wd=0.05, clip_gradient=1.0,
                                lazy_update=False), "default"),
    ("sgd-rspw", "sgd", dict(learning_rate=0.2, momentum=0.5, wd=0.1), "row_sparse"),
    ("adam-lazy", "adam", dict(learning_rate=0.05, wd=0.02, rescale_grad=0.5), "default"),
    ("adam-lazy-clip", "adam", dict(learning_rate=0.05, clip_gradient=0.8, beta1=0.8,
                                    beta2=0.99, epsilon=1e-6), "default"),
    ("adam-std", "adam", dict(learning_rate=0.05, wd=0.02, lazy_update=False), "default"),
    ("adagrad", "adagrad", dict(learning_rate=0.1, rescale_grad=0.7), "default"),
    ("adagrad-clip", "adagrad", dict(learning_rate=0.3, clip_gradient=0.5, eps=1e-4),
     "default"),
    ("ftrl", "ftrl", dict(learning_rate=0.1, lamda1=0.01, beta=1.0, wd=0.02), "row_sparse"),
    ("ftrl-clip", "ftrl", dict(learning_rate=0.5, lamda1=0.1, beta=0.5, rescale_grad=0.5,
                               clip_gradient=1.0), "row_sparse"),
    ("nag", "nag", dict(learning_rate=0.2, wd=0.05, rescale_grad=0.7), "default"),
    ("groupadagrad", "groupadagrad", dict(learning_rate=0.1, rescale_grad=0.7), "default"),
    ("groupadagrad-clip", "groupadagrad", dict(learning_rate=0.3, clip_gradient=0.5, eps=1e-3),
     "default"),
    # no sparse kernel: MXNet's storage fallback computes the dense update
    ("rmsprop-fallback", "rmsprop", dict(learning_rate=0.01, wd=0.05), "default"),
    ("signum-fallback", "signum", dict(learning_rate=0.01, wd=0.05), "default"),
    ("nadam-fallback", "nadam", dict(learning_rate=0.01, wd=0.05), "default"),
    ("nag-mom-fallback", "nag", dict(learning_rate=0.1, momentum=0.9, wd=0.05), "default"),
]


def state_arrays(state):
    if state is None:
        return []
    if isinstance(state, (tuple, list)):
        out = []
        for s in state:
            out.extend(state_arrays(s))
        return out
    return [state]


def run_case(label, name, kwargs, stype, dtype):
    import mxnet as mx
    case_id = f"{label}-{'f32' if dtype == np.float32 else 'f64'}"
    seed = base.case_seed(case_id)
    rng = np.random.default_rng(seed)
    init = base.draw_weight(rng, SHAPE, dtype)
    opt = mx.optimizer.create(name, **kwargs)
    weight = mx.nd.array(init, dtype=dtype)
    if stype == "row_sparse":
        weight = weight.tostype("row_sparse")
    state = opt.create_state(0, weight)
    calls = []
    for rows in ROWS:
        values = base.draw_grad(rng, (len(rows),) + SHAPE[1:], dtype, True) if rows else \
            np.zeros((0,) + SHAPE[1:], dtype)
        grad = mx.nd.sparse.row_sparse_array((values, np.array(rows, dtype=np.int64)),
                                             shape=SHAPE, dtype=dtype)
        opt.update(0, weight, grad, state)
        calls.append({"indices": list(rows), "values": base.enc(values),
                      "weight": base.enc(weight.asnumpy()),
                      "states": [base.enc(s.asnumpy()) for s in state_arrays(state)]})
    return {"id": case_id, "optimizer": name, "kwargs": kwargs, "dtype": np.dtype(dtype).name,
            "weight_stype": stype, "shape": list(SHAPE), "seed": seed,
            "init": base.enc(init), "calls": calls}


def main(argv=None):
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--force", action="store_true", help="overwrite the existing file")
    ap.add_argument("--out", default=HERE, help="output folder (default: this folder)")
    args = ap.parse_args(argv[1:])
    import mxnet as mx
    assert mx.__version__ == "1.9.1", mx.__version__
    path = os.path.join(args.out, "sparse.json")
    if os.path.exists(path) and not args.force:
        sys.stderr.write(f"refusing to overwrite {path} (use --force)\n")
        return 2
    prov = base.provenance(argv)
    with open(os.path.abspath(__file__), "rb") as f:
        prov["generator"] = "tests/data/mxnet/generate_sparse.py"
        prov["generator_sha256"] = hashlib.sha256(f.read()).hexdigest()
    prov["command"] = " ".join([sys.executable, "tests/data/mxnet/generate_sparse.py"]
                               + argv[1:])
    prov["api"] = ("per call: opt.update(0, weight, mx.nd.sparse.row_sparse_array((values, "
                   "rows), shape, dtype), state) with opt = mx.optimizer.create(name, **kwargs) "
                   "and state = opt.create_state(0, weight), on cpu(0)")
    cases, refused = [], []
    for label, name, kw, stype in SETTINGS:
        for dt in (np.float32, np.float64):
            try:
                cases.append(run_case(label, name, kw, stype, dt))
            except mx.base.MXNetError as e:
                # AdaGrad, FTRL and GroupAdaGrad create float32 state whatever the weight's
                # dtype (MXNet's float32-only state), which their kernels refuse for float64
                refused.append({"id": f"{label}-{np.dtype(dt).name}",
                                "error": str(e).strip().splitlines()[-1][:200]})
    prov["refused_by_mxnet"] = refused
    base.dump_json({"provenance": prov, "cases": cases}, path)
    print("wrote %s (%d cases, %d bytes)" % (os.path.relpath(path), len(cases),
                                            os.path.getsize(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
