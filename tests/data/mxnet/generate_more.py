"""Record MXNet 1.9.1's numbers for the toolkit's ``adamw``, ``lars`` and ``groupadagrad``
(tests/data/mxnet/).

Same conventions and file format as ``generate.py`` (whose encoding and input helpers it reuses):
fixed seeds (a case's seed is the CRC32 of its id), exact hex encoding, a ``provenance`` block,
and it refuses to overwrite existing files without ``--force``. Run with MXNet's interpreter::

    /tmp/mxvenv/bin/python tests/data/mxnet/generate_more.py            # refuses: files exist
    /tmp/mxvenv/bin/python tests/data/mxnet/generate_more.py --force --only lars

``groupadagrad``: ``mx.optimizer.create('groupadagrad', **kwargs)`` (contrib.GroupAdaGrad) with
dense gradients, driven by ``opt.update(index, weight, grad, history)`` with a history the
generator makes, ``zeros((rows, 1), dtype)``: MXNet's own ``create_state`` gives a float32
history (contrib.py:67-68 at tag 1.9.1), with which a float64 weight fails ("Incompatible attr"),
so its float64 arithmetic is recorded with a float64 history; float16 weights run through
``mx.optimizer.get_updater`` with ``multi_precision=True``. ``groupadagrad_rows``: one call of the
operator ``mx.nd.contrib.group_adagrad_update`` per step, the gradient a row-sparse array of some
rows (``mx.nd.sparse.row_sparse_array``), keywords as the optimizer passes them (contrib.py:80-93:
``clip_gradient`` only when truthy), float32 and float64 (a float64 history), to record what the
row-sparse path computes beside the dense one.

``adamw``: MXNet 1.9.1 registers no such optimizer (``mx.optimizer.create('adamw')`` fails), so
each call is one call of the operator ``mx.nd.contrib.adamw_update`` with the case's keywords as
the toolkit's AdamW passes them (``lr = learning_rate``, ``clip_gradient`` None as -1, the
moments updated in place). ``lars``: ``mx.optimizer.create('lars', **kwargs)`` driven through
``mx.optimizer.get_updater`` exactly as generate.py drives the other optimizers.

``lamb``: ``mx.optimizer.create('lamb', **kwargs)`` driven through ``mx.optimizer.get_updater``
as generate.py drives the others: MXNet's ``Updater`` hands LAMB lists of indices
(optimizer.py:2103-2124 at tag 1.9.1), so every call runs the aggregated kernel
``multi_lamb_update`` (optimizer.py:1316-1359). ``lamb_paths``: MXNet's other LAMB paths, for the
differences they show: ``opt.update(index, weight, grad, state)`` with one integer index (the
single-tensor operators, optimizer.py:1274-1315), float32 and float64; and float16 weights with
``multi_precision=True`` through both paths (``opt.update_multi_precision`` with an integer index:
its float32 master copy is never updated; the updater: ``multi_mp_lamb_update``), one case with a
weight element of 300 (its float16 square overflows in the aggregated path's weight norm).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate as base  # noqa: E402  (tests/data/mxnet/generate.py)

ADAMW_SETTINGS = [
    ("default", {}),
    ("allon", dict(learning_rate=0.1, wd=0.1, rescale_grad=0.5, clip_gradient=0.6, eta=0.5,
                   beta1=0.8, beta2=0.99, epsilon=1e-6)),
    ("wd", dict(learning_rate=0.01, wd=0.05, eta=0.7)),
    ("clip", dict(learning_rate=0.01, clip_gradient=2.0, rescale_grad=0.25)),
    ("clip0", dict(learning_rate=0.01, clip_gradient=0.0, wd=0.01)),
]

LARS_SETTINGS = [
    ("default", {}),
    ("mom", dict(learning_rate=0.1, momentum=0.9)),
    ("allon", dict(learning_rate=0.1, wd=0.1, rescale_grad=0.5, clip_gradient=0.6,
                   momentum=0.9, eta=0.01, eps=1e-3)),
    ("wdeta", dict(learning_rate=0.5, wd=0.01, eta=0.1)),
    ("clip", dict(learning_rate=0.1, clip_gradient=2.0, momentum=0.5, eta=0.02,
                  momentum_correction=False)),
]


def specs(name, settings):
    out = []
    for label, kw in settings:
        for dt in ("float32", "float64"):
            out.append({"id": f"{name}-{label}-{'f32' if dt == 'float32' else 'f64'}",
                        "optimizer": name, "kwargs": kw, "dtype": dt, "shape": (11,),
                        "order": [0, 1, 0, 0, 1, 0]})
    return out


def run_adamw(spec):
    import mxnet as mx
    kw = dict(spec["kwargs"])
    dtype = np.dtype(spec["dtype"])
    shape = tuple(spec["shape"])
    order = spec["order"]
    seed = base.case_seed(spec["id"])
    rng = np.random.default_rng(seed)
    indices = sorted(set(order))
    init = {i: base.draw_weight(rng, shape, dtype) for i in indices}
    grads = [base.draw_grad(rng, shape, dtype, True) for _ in order]
    weights = {i: mx.nd.array(init[i], dtype=dtype) for i in indices}
    means = {i: mx.nd.zeros(shape, dtype=dtype) for i in indices}
    vars_ = {i: mx.nd.zeros(shape, dtype=dtype) for i in indices}
    c = kw.get("clip_gradient")
    counts = {i: 0 for i in indices}
    calls = []
    for idx, g in zip(order, grads):
        mx.nd.contrib.adamw_update(
            weights[idx], mx.nd.array(g, dtype=dtype), means[idx], vars_[idx],
            kw.get("rescale_grad", 1.0), lr=kw.get("learning_rate", 0.001),
            eta=kw.get("eta", 1.0), beta1=kw.get("beta1", 0.9), beta2=kw.get("beta2", 0.999),
            epsilon=kw.get("epsilon", 1e-8), wd=kw.get("wd", 0.0),
            clip_gradient=-1.0 if c is None else c, out=weights[idx])
        counts[idx] += 1
        calls.append({"index": idx, "grad": base.enc(g),
                      "weight": base.enc(weights[idx].asnumpy()),
                      "states": {"mean": base.enc(means[idx].asnumpy()),
                                 "var": base.enc(vars_[idx].asnumpy())},
                      "extras": {"t": counts[idx], "num_update": max(counts.values())}})
    return {"id": spec["id"], "optimizer": "adamw", "kwargs": spec["kwargs"],
            "dtype": str(dtype), "multi_precision": False, "steps": len(order),
            "shape": list(shape), "seed": seed, "state_layout": "(mean, var)",
            "state_names": ["mean", "var"],
            "init": [{"index": i, "weight": base.enc(init[i])} for i in indices], "calls": calls}


def run_lars(spec):
    names = base.inner_state_names
    # LARS's create_state: a momentum array when momentum != 0, else None (optimizer.py:903-908)
    base.inner_state_names = (lambda n, kw: ("mom" if kw.get("momentum", 0.0) != 0 else None)
                              if n == "lars" else names(n, kw))
    try:
        return base.run_case(spec)
    finally:
        base.inner_state_names = names


#: (label, kwargs, dtype, shape, rows made exactly zero as (call, row)); the hyperparameters
#: are literals that dmlc-core's parser reads exactly (tests/data/mxnet/README.md, item 1)
GROUPADAGRAD_SETTINGS = [
    ("default", {}, ("float32", "float64"), (4, 7), ()),
    ("allon", dict(learning_rate=0.1, rescale_grad=0.5, clip_gradient=0.6, eps=1e-3),
     ("float32", "float64"), (5, 9), ((1, 0), (3, 4))),
    ("clip0", dict(learning_rate=0.1, clip_gradient=0.0), ("float32", "float64"), (4, 6), ()),
    ("eps", dict(learning_rate=0.05, rescale_grad=0.25, eps=1e-8), ("float32", "float64"),
     (5, 9), ()),
    ("clip", dict(learning_rate=0.5, clip_gradient=2.0, eps=0.1), ("float32", "float64"),
     (3, 11), ()),
    ("wide", dict(learning_rate=0.1, rescale_grad=0.5), ("float32",), (2, 128), ()),
    ("onecol", dict(learning_rate=0.1), ("float32",), (6, 1), ()),
    ("mp-allon", dict(learning_rate=0.1, rescale_grad=0.5, clip_gradient=0.6, eps=1e-3,
                      multi_precision=True), ("float16",), (5, 9), ()),
]

#: the operator's cases: (label, kwargs, dtype, shape, rows present per call)
GROUPADAGRAD_ROWS_SETTINGS = [
    ("plain", dict(learning_rate=0.1, rescale_grad=0.7), ("float32", "float64"), (6, 5),
     [[1, 4], [0, 1, 5], [], [4], [2, 3, 4]]),
    ("clip", dict(learning_rate=0.3, clip_gradient=0.5, eps=1e-3), ("float32", "float64"),
     (6, 5), [[0, 2, 5], [2], [1, 2, 3, 4, 5]]),
    ("clip0", dict(learning_rate=0.1, clip_gradient=0.0), ("float32", "float64"), (4, 3),
     [[1, 3], [0, 1, 2, 3]]),
    ("wide", dict(learning_rate=0.1, rescale_grad=0.5), ("float32",), (3, 128),
     [[0, 1, 2], [1]]),
]

_TAG = {"float32": "f32", "float64": "f64", "float16": "f16mp"}


def groupadagrad_specs(name, settings):
    return [{"id": f"{name}-{label}-{_TAG[dt]}", "optimizer": name, "kwargs": kw, "dtype": dt,
             "shape": shape, "extra": extra}
            for label, kw, dtypes, shape, extra in settings for dt in dtypes]


def run_groupadagrad(spec):
    """Dense gradients; two indices, calls in the order 0, 1, 0, 0, 1, 0."""
    import mxnet as mx
    kw = dict(spec["kwargs"])
    dtype = np.dtype(spec["dtype"])
    shape = tuple(spec["shape"])
    order = [0, 1, 0, 0, 1, 0]
    seed = base.case_seed(spec["id"])
    rng = np.random.default_rng(seed)
    indices = sorted(set(order))
    init = {i: base.draw_weight(rng, shape, dtype) for i in indices}
    grads = [base.draw_grad(rng, shape, dtype, True) for _ in order]
    for call, row in spec["extra"]:
        grads[call][row] = 0
    opt = mx.optimizer.create("groupadagrad", **kw)
    mp = dtype == np.float16
    weights = {i: mx.nd.array(init[i], dtype=dtype) for i in indices}
    if mp:  # MXNet's own states: (weight32, history), through the updater
        updater = mx.optimizer.get_updater(opt)
    else:   # the history in the weight's dtype (MXNet's create_state would give float32)
        hist = {i: mx.nd.zeros((shape[0], 1), dtype=dtype) for i in indices}
    calls = []
    for idx, g in zip(order, grads):
        if mp:
            updater(idx, mx.nd.array(g, dtype=dtype), weights[idx])
            w32, h = updater.states[idx]
            states = {"weight32": base.enc(w32.asnumpy()), "history": base.enc(h.asnumpy())}
        else:
            opt.update(idx, weights[idx], mx.nd.array(g, dtype=dtype), hist[idx])
            states = {"history": base.enc(hist[idx].asnumpy())}
        calls.append({"index": idx, "grad": base.enc(g), "weight": base.enc(weights[idx].asnumpy()),
                      "states": states,
                      "extras": {"t": opt._index_update_count[idx], "num_update": opt.num_update}})
    return {"id": spec["id"], "optimizer": "groupadagrad", "kwargs": spec["kwargs"],
            "dtype": str(dtype), "multi_precision": mp, "steps": len(order), "shape": list(shape),
            "seed": seed, "state_layout": "(weight32, history)" if mp else "history",
            "state_names": sorted(calls[0]["states"]),
            "init": [{"index": i, "weight": base.enc(init[i])} for i in indices], "calls": calls}


def run_groupadagrad_rows(spec):
    """One ``group_adagrad_update`` per call with a row-sparse gradient of the listed rows."""
    import mxnet as mx
    kw = dict(spec["kwargs"])
    dtype = np.dtype(spec["dtype"])
    shape = tuple(spec["shape"])
    seed = base.case_seed(spec["id"])
    rng = np.random.default_rng(seed)
    init = base.draw_weight(rng, shape, dtype)
    weight = mx.nd.array(init, dtype=dtype)
    hist = mx.nd.zeros((shape[0], 1), dtype=dtype)
    op_kw = {"epsilon": kw.get("eps", 1e-5), "rescale_grad": kw.get("rescale_grad", 1.0)}
    if kw.get("clip_gradient"):  # contrib.py:85-86 at tag 1.9.1: only a truthy clip_gradient
        op_kw["clip_gradient"] = kw["clip_gradient"]
    calls = []
    for rows in spec["extra"]:
        values = base.draw_grad(rng, (len(rows), shape[1]), dtype, len(rows) * shape[1] >= 6) \
            if rows else np.zeros((0, shape[1]), dtype)
        g = mx.nd.sparse.row_sparse_array((mx.nd.array(values, dtype=dtype),
                                           mx.nd.array(rows, dtype="int64")), shape=shape,
                                          dtype=dtype)
        mx.nd.contrib.group_adagrad_update(weight, g, hist, out=weight,
                                           lr=kw.get("learning_rate", 0.01), **op_kw)
        calls.append({"index": 0, "rows": list(rows), "grad": base.enc(values),
                      "weight": base.enc(weight.asnumpy()),
                      "states": {"history": base.enc(hist.asnumpy())}, "extras": {}})
    return {"id": spec["id"], "optimizer": "groupadagrad", "kwargs": spec["kwargs"],
            "dtype": str(dtype), "multi_precision": False, "steps": len(calls),
            "shape": list(shape), "seed": seed, "state_layout": "history",
            "state_names": ["history"], "grad_stype": "row_sparse",
            "init": [{"index": 0, "weight": base.enc(init)}], "calls": calls}


LAMB_SETTINGS = [
    ("default", {}),
    ("allon", dict(learning_rate=0.1, wd=0.1, rescale_grad=0.5, clip_gradient=0.6,
                   beta1=0.8, beta2=0.99, epsilon=1e-3)),
    ("nobc", dict(learning_rate=0.01, wd=0.01, bias_correction=False)),
    ("lower", dict(learning_rate=0.01, lower_bound=50.0, wd=0.5)),
    ("upper", dict(learning_rate=0.1, upper_bound=0.5, rescale_grad=0.25)),
    ("bounds0", dict(learning_rate=0.1, lower_bound=0.0, upper_bound=0.0, clip_gradient=0.0)),
    ("clip", dict(learning_rate=0.01, clip_gradient=2.0, rescale_grad=0.25, beta2=0.9)),
]

#: (label, kwargs, dtype, path, weight element 0 set to): MXNet's other LAMB paths
LAMB_PATH_SETTINGS = [
    ("single", {}, "float32", "single", None),
    ("single", {}, "float64", "single", None),
    ("single-allon", dict(learning_rate=0.1, wd=0.1, rescale_grad=0.5, clip_gradient=0.6,
                          lower_bound=0.5, upper_bound=5.0), "float32", "single", None),
    ("single-allon", dict(learning_rate=0.1, wd=0.1, rescale_grad=0.5, clip_gradient=0.6,
                          lower_bound=0.5, upper_bound=5.0), "float64", "single", None),
    ("single-nobc", dict(learning_rate=0.01, bias_correction=False), "float32", "single", None),
    ("mp", dict(learning_rate=0.1, multi_precision=True), "float16", "single", None),
    ("mp", dict(learning_rate=0.1, multi_precision=True), "float16", "aggregated", None),
    ("mp-big", dict(learning_rate=0.1, multi_precision=True), "float16", "aggregated", 300.0),
]


def lamb_path_specs():
    tag = {"float32": "f32", "float64": "f64", "float16": "f16mp"}
    return [{"id": f"lamb_paths-{label}{'-agg' if path == 'aggregated' and 'mp' in label else ''}"
                   f"-{tag[dt]}", "optimizer": "lamb", "kwargs": kw, "dtype": dt, "path": path,
             "big": big, "shape": (11,), "order": [0, 1, 0, 0, 1, 0]}
            for label, kw, dt, path, big in LAMB_PATH_SETTINGS]


def run_lamb(spec):
    names = base.inner_state_names
    # LAMB's create_state: (mean, var) (optimizer.py:1264-1268)
    base.inner_state_names = (lambda n, kw: ("mean", "var") if n == "lamb" else names(n, kw))
    try:
        return base.run_case(spec)
    finally:
        base.inner_state_names = names


def run_lamb_path(spec):
    """One of MXNet's other LAMB paths: ``opt.update``/``opt.update_multi_precision`` with an
    integer index (``path`` "single") or the updater (``path`` "aggregated")."""
    import mxnet as mx
    kw = dict(spec["kwargs"])
    dtype = np.dtype(spec["dtype"])
    shape = tuple(spec["shape"])
    order = spec["order"]
    seed = base.case_seed(spec["id"])
    rng = np.random.default_rng(seed)
    indices = sorted(set(order))
    init = {i: base.draw_weight(rng, shape, dtype) for i in indices}
    if spec["big"] is not None:
        for i in indices:
            init[i].flat[0] = spec["big"]
    grads = [base.draw_grad(rng, shape, dtype, True) for _ in order]
    opt = mx.optimizer.create("lamb", **kw)
    mp = bool(kw.get("multi_precision")) and dtype == np.float16
    weights = {i: mx.nd.array(init[i], dtype=dtype) for i in indices}
    if spec["path"] == "aggregated":
        updater = mx.optimizer.get_updater(opt)
    else:
        states = {i: opt.create_state_multi_precision(i, weights[i]) for i in indices}
    calls = []
    for idx, g in zip(order, grads):
        g_nd = mx.nd.array(g, dtype=dtype)
        if spec["path"] == "aggregated":
            updater(idx, g_nd, weights[idx])
            state = updater.states[idx]
        else:
            opt.update_multi_precision(idx, weights[idx], g_nd, states[idx])
            state = states[idx]
        out = {}
        base.extract_states(("weight32", ("mean", "var")) if mp else ("mean", "var"), state, out)
        calls.append({"index": idx, "grad": base.enc(g), "weight": base.enc(weights[idx].asnumpy()),
                      "states": out,
                      "extras": {"t": opt._index_update_count[idx], "num_update": opt.num_update}})
    return {"id": spec["id"], "optimizer": "lamb", "kwargs": spec["kwargs"], "dtype": str(dtype),
            "multi_precision": mp, "path": spec["path"], "steps": len(order), "shape": list(shape),
            "seed": seed, "state_layout": "(weight32, (mean, var))" if mp else "(mean, var)",
            "state_names": sorted(calls[0]["states"]),
            "init": [{"index": i, "weight": base.enc(init[i])} for i in indices], "calls": calls}


def provenance(argv):
    prov = base.provenance(argv)
    with open(os.path.abspath(__file__), "rb") as f:
        import hashlib
        prov["generator"] = "tests/data/mxnet/generate_more.py"
        prov["generator_sha256"] = hashlib.sha256(f.read()).hexdigest()
    prov["command"] = " ".join([sys.executable, "tests/data/mxnet/generate_more.py"] + argv[1:])
    prov["api"] = {
        "adamw": "per call: mx.nd.contrib.adamw_update(weight, mx.nd.array(grad, dtype), mean, "
                 "var, rescale_grad, lr=learning_rate, eta, beta1, beta2, epsilon, wd, "
                 "clip_gradient (None as -1), out=weight) on cpu(0); mean and var start at 0",
        "lars": base.provenance(argv)["api"],
        "lamb": base.provenance(argv)["api"],
        "lamb_paths": "opt = mx.optimizer.create('lamb', **kwargs); path 'single': per call "
                      "opt.update_multi_precision(index, weight, mx.nd.array(grad, dtype), state) "
                      "with an integer index and state = opt.create_state_multi_precision(index, "
                      "weight); path 'aggregated': upd = mx.optimizer.get_updater(opt), per call "
                      "upd(index, grad, weight), states from upd.states[index]; on cpu(0)",
        "groupadagrad": "opt = mx.optimizer.create('groupadagrad', **kwargs); per call "
                        "opt.update(index, weight, mx.nd.array(grad, dtype), history) with "
                        "history = mx.nd.zeros((rows, 1), dtype) made by the generator; float16 "
                        "(multi_precision): upd = mx.optimizer.get_updater(opt), upd(index, grad, "
                        "weight), states from upd.states[index]; on cpu(0)",
        "groupadagrad_rows": "per call mx.nd.contrib.group_adagrad_update(weight, "
                             "mx.nd.sparse.row_sparse_array((values, rows), shape), history, "
                             "out=weight, lr=learning_rate, epsilon=eps, rescale_grad, "
                             "clip_gradient only when truthy); history = mx.nd.zeros((rows, 1), "
                             "dtype); each call's 'grad' is the values, 'rows' their row indices",
    }
    return prov


def main(argv=None):
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--force", action="store_true", help="overwrite existing data files")
    ap.add_argument("--only", nargs="*", default=None,
                    choices=["adamw", "lars", "groupadagrad", "groupadagrad_rows", "lamb",
                             "lamb_paths"])
    ap.add_argument("--out", default=HERE, help="output folder (default: this folder)")
    args = ap.parse_args(argv[1:])

    import mxnet as mx
    assert mx.__version__ == "1.9.1", mx.__version__
    assert "adamw" not in mx.optimizer.Optimizer.opt_registry  # the fact the adamw file rests on

    assert "groupadagrad" in mx.optimizer.Optimizer.opt_registry
    jobs = {"adamw": (specs("adamw", ADAMW_SETTINGS), run_adamw),
            "lars": (specs("lars", LARS_SETTINGS), run_lars),
            "groupadagrad": (groupadagrad_specs("groupadagrad", GROUPADAGRAD_SETTINGS),
                             run_groupadagrad),
            "groupadagrad_rows": (groupadagrad_specs("groupadagrad_rows",
                                                     GROUPADAGRAD_ROWS_SETTINGS),
                                  run_groupadagrad_rows),
            "lamb": (specs("lamb", LAMB_SETTINGS), run_lamb),
            "lamb_paths": (lamb_path_specs(), run_lamb_path)}
    targets = args.only or list(jobs)
    paths = {t: os.path.join(args.out, t + ".json") for t in targets}
    existing = [p for p in paths.values() if os.path.exists(p)]
    if existing and not args.force:
        sys.stderr.write("refusing to overwrite existing data (use --force):\n  "
                         + "\n  ".join(existing) + "\n")
        return 2
    prov = provenance(argv)
    for t in targets:
        spec_list, run = jobs[t]
        data = {"provenance": prov, "optimizer": t, "cases": [run(s) for s in spec_list]}
        base.dump_json(data, paths[t])
        print("wrote %s (%d cases, %d bytes)" % (os.path.relpath(paths[t]), len(data["cases"]),
                                                os.path.getsize(paths[t])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
