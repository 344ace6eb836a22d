#!/usr/bin/env python
"""Generate ``compression_2bit.json``: MXNet 1.9.1's 2-bit gradient compression, measured.

Run with the Python of the MXNet virtual environment (README.md in this folder)::

    /tmp/mxvenv/bin/python tests/data/mxnet/compression_gen.py            # refuses to overwrite
    /tmp/mxvenv/bin/python tests/data/mxnet/compression_gen.py --force    # rewrite

MXNet 1.9.1 exposes no 2-bit quantise operator to Python, so the data come from its kvstore,
which compresses in one process when it merges gradients from several contexts: a ``'device'``
kvstore over ``n`` CPU contexts with ``set_gradient_compression(params)``; per step every context
pushes its own gradient and the merged value is pulled back. Each context quantises its gradient
plus its own residual, the merging side dequantises and sums. This script only drives MXNet and
records what it returns (no quantiser is implemented here).

Format::

    {"provenance": {...}, "cases": [case, ...], "errors": [error, ...]}

A case: ``id``, ``params`` (the dict passed to ``set_gradient_compression``), ``contexts`` (n),
``shape``, ``seed`` (numpy seed of the inputs: CRC32 of the id), ``steps``, ``grads``
(``[step][context]`` float32 arrays, as pushed), ``merged`` (``[step]``: the value pulled after
that step's push, float32; every context pulled the same bits, ``pulled_equal``). Arrays are
encoded as in the optimizer files: ``{"dtype", "shape", "hex": [float.hex() per element]}``.

An error: ``params``, ``dtype``, and MXNet's ``error`` (exception type and the ``Check
failed``/``MXNetError`` line of its message) for a refused configuration.
"""
import argparse
import datetime
import hashlib
import os
import platform
import sys
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from generate import dump_json, enc  # noqa: E402  (same encoding as the optimizer files)

OUT_NAME = "compression_2bit.json"
FORMAT_VERSION = 1

#: (id, params, contexts, shape, steps); 2.7245463 is a threshold that dmlc-core's
#: ParseFloat<float> reads one ulp above float32(2.7245463) (README.md, "Facts", item 1)
CASES = [
    ("t0.5-ctx2", {"type": "2bit", "threshold": 0.5}, 2, (37,), 6),
    ("t0.5-ctx3", {"type": "2bit", "threshold": 0.5}, 3, (37,), 6),
    ("default-ctx2", {"type": "2bit"}, 2, (33,), 4),
    ("t0.3-ctx2-2d", {"type": "2bit", "threshold": 0.3}, 2, (5, 7), 6),
    ("t0.3-ctx3", {"type": "2bit", "threshold": 0.3}, 3, (50,), 6),
    ("t2.7245463-ctx2", {"type": "2bit", "threshold": 2.7245463}, 2, (40,), 5),
    ("t1e-3-ctx2", {"type": "2bit", "threshold": 1e-3}, 2, (17,), 4),
]

ERRORS = [
    ({"type": "2bit", "threshold": 0}, "float32"),
    ({"type": "2bit", "threshold": -0.5}, "float32"),
    ({"type": "1bit", "threshold": 0.5}, "float32"),
    ({"type": "foo", "threshold": 0.5}, "float32"),
    ({"threshold": 0.5}, "float32"),
    ({"type": "2bit", "threshold": "abc"}, "float32"),
    ({"type": "2bit", "threshold": 0.5}, "float64"),
    ({"type": "2bit", "threshold": 0.5}, "float16"),
]


def case_seed(case_id):
    return zlib.crc32(case_id.encode()) & 0x7FFFFFFF


def draw_grad(rng, shape, t):
    """Gradients around the threshold: normal at scale t, some several times t (the residual
    carries), exact +-t, exact zeros and tiny values."""
    n = int(np.prod(shape))
    g = t * rng.standard_normal(n)
    perm = rng.permutation(n)
    g[perm[0:3]] *= 4.0
    g[perm[3:5]] = t * np.array([1.0, -1.0])
    g[perm[5:7]] = 0.0
    g[perm[7:9]] = 1e-3 * t * rng.standard_normal(2)
    return g.reshape(shape).astype(np.float32)


def run_case(case_id, params, nctx, shape, steps):
    import mxnet as mx
    rng = np.random.default_rng(case_seed(case_id))
    t = float(params.get("threshold", 0.5))
    ctxs = [mx.cpu(i) for i in range(nctx)]
    kv = mx.kv.create("device")
    kv.set_gradient_compression(dict(params))
    kv.init(0, mx.nd.zeros(shape, dtype="float32"))
    grads, merged, equal = [], [], []
    for _ in range(steps):
        gs = [draw_grad(rng, shape, t) for _ in ctxs]
        kv.push(0, [mx.nd.array(g, ctx=c, dtype="float32") for g, c in zip(gs, ctxs)])
        outs = [mx.nd.zeros(shape, ctx=c, dtype="float32") for c in ctxs]
        kv.pull(0, out=outs)
        got = [o.asnumpy() for o in outs]
        equal.append(all(np.array_equal(got[0].view(np.uint32), o.view(np.uint32))
                         for o in got))
        grads.append([enc(g) for g in gs])
        merged.append(enc(got[0]))
    return {"id": case_id, "params": params, "contexts": nctx, "shape": list(shape),
            "seed": case_seed(case_id), "steps": steps, "grads": grads, "merged": merged,
            "pulled_equal": equal}


def run_error(params, dtype):
    import mxnet as mx
    try:
        kv = mx.kv.create("device")
        kv.set_gradient_compression(dict(params))
        ctxs = [mx.cpu(0), mx.cpu(1)]
        kv.init(0, mx.nd.zeros((5,), dtype=dtype))
        kv.push(0, [mx.nd.array([1, -1, 0.2, 0.7, -0.31], ctx=c, dtype=dtype) for c in ctxs])
        outs = [mx.nd.zeros((5,), ctx=c, dtype=dtype) for c in ctxs]
        kv.pull(0, out=outs)
        outs[0].wait_to_read()
        return {"params": params, "dtype": dtype, "error": None}
    except Exception as exc:  # noqa: BLE001 - recording what MXNet raises
        lines = [ln.strip() for ln in str(exc).splitlines()
                 if "Check failed" in ln or ln.strip().startswith("MXNetError:")]
        return {"params": params, "dtype": dtype,
                "error": {"type": type(exc).__name__, "line": lines[-1] if lines else ""}}


def provenance(argv):
    import mxnet as mx
    with open(os.path.abspath(__file__), "rb") as f:
        script_sha = hashlib.sha256(f.read()).hexdigest()
    feats = mx.runtime.Features()
    return {
        "generator": "tests/data/mxnet/compression_gen.py",
        "generator_sha256": script_sha,
        "format_version": FORMAT_VERSION,
        "mxnet_version": mx.__version__,
        "mxnet_features_enabled": sorted(f.name for f in feats.values() if f.enabled),
        "numpy_version": np.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([sys.executable, "tests/data/mxnet/compression_gen.py"] + argv[1:]),
        "api": "kv = mx.kv.create('device'); kv.set_gradient_compression(params); "
               "kv.init(0, zeros); per step: kv.push(0, [grad on cpu(i) for i in contexts]); "
               "kv.pull(0, out=[zeros on cpu(i)])",
    }


def main(argv=None):
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--force", action="store_true", help="overwrite an existing " + OUT_NAME)
    ap.add_argument("--out", default=os.path.join(HERE, OUT_NAME), help="output file")
    args = ap.parse_args(argv[1:])
    import mxnet as mx
    assert mx.__version__ == "1.9.1", mx.__version__
    if os.path.exists(args.out) and not args.force:
        sys.stderr.write("refusing to overwrite existing data (use --force):\n  %s\n" % args.out)
        return 2
    cases = [run_case(*c) for c in CASES]
    errors = [run_error(p, d) for p, d in ERRORS]
    dump_json({"provenance": provenance(argv), "cases": cases, "errors": errors}, args.out)
    print("wrote %s (%d cases, %d error records)" % (os.path.relpath(args.out), len(cases),
                                                      len(errors)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
