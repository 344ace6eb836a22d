"""Record MXNet 1.9.1's numbers for the toolkit's ``adamw`` and ``lars`` (tests/data/mxnet/).

Same conventions and file format as ``generate.py`` (whose encoding and input helpers it reuses):
fixed seeds (a case's seed is the CRC32 of its id), exact hex encoding, a ``provenance`` block,
and it refuses to overwrite existing files without ``--force``. Run with MXNet's interpreter::

    /tmp/mxvenv/bin/python tests/data/mxnet/generate_more.py            # refuses: files exist
    /tmp/mxvenv/bin/python tests/data/mxnet/generate_more.py --force --only lars

``adamw``: MXNet 1.9.1 registers no such optimizer (``mx.optimizer.create('adamw')`` fails), so
each call is one call of the operator ``mx.nd.contrib.adamw_update`` with the case's keywords as
the toolkit's AdamW passes them (``lr = learning_rate``, ``clip_gradient`` None as -1, the
moments updated in place). ``lars``: ``mx.optimizer.create('lars', **kwargs)`` driven through
``mx.optimizer.get_updater`` exactly as generate.py drives the other optimizers.
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
    }
    return prov


def main(argv=None):
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--force", action="store_true", help="overwrite existing data files")
    ap.add_argument("--only", nargs="*", default=None, choices=["adamw", "lars"])
    ap.add_argument("--out", default=HERE, help="output folder (default: this folder)")
    args = ap.parse_args(argv[1:])

    import mxnet as mx
    assert mx.__version__ == "1.9.1", mx.__version__
    assert "adamw" not in mx.optimizer.Optimizer.opt_registry  # the fact the adamw file rests on

    jobs = {"adamw": (specs("adamw", ADAMW_SETTINGS), run_adamw),
            "lars": (specs("lars", LARS_SETTINGS), run_lars)}
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
