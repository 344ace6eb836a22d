"""Start-up cost per optimizer: the cold compile (empty numba cache) and the warm time to the
first update (a second process, kernels loaded from the on-disk cache), each in a fresh process,
for every registered optimizer with a reference, in its ``Spec.record`` configuration (every
state slot and branch on).

Each measurement is one process that imports the toolkit and times the first ``update`` that
steps (with the calls before it: LBSGD's ``batch_scale`` accumulates first) of a 2^12 float32
tensor (the serial kernel) and then of a 2^16 one (the parallel kernel), with
``NUMBA_CACHE_DIR`` pointing at a folder of this run: empty for "cold", filled by the cold run
for "warm". Prints a table and writes ``benchmarks/results/startup_cpu.json``.

    python benchmarks/startup.py [--only adam sgd ...]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from toolkit import optimizer
t1 = time.perf_counter()
from toolkit.oracle.space import weight_shape
name = sys.argv[1]
kw = dict(optimizer.spec_of(name).record)  # every state slot and branch on
out = {"import_s": t1 - t0}
for label, n in (("serial_s", 1 << 12), ("parallel_s", 1 << 16)):
    opt = optimizer.create(name, **kw)
    shape = weight_shape(name, n)  # 2-D where the optimizer takes matrices only
    w = np.ones(shape, np.float32); s = opt.create_state(0, w)
    a = time.perf_counter()
    for _ in range(8):  # the first update that steps (LBSGD's batch_scale accumulates first)
        opt.update(0, w, np.ones(shape, np.float32), s)
        if not (w == 1).all():
            break
    out[label] = time.perf_counter() - a
print(json.dumps(out))
"""


def _child(name, cache):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    r = subprocess.run([sys.executable, "-c", CHILD, name], env=env, capture_output=True,
                       text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{name}: {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "startup_cpu.json"))
    args = ap.parse_args(argv)
    rows = []
    print(f"{'optimizer':10s} {'cold first update':>18s} {'warm first update':>18s} "
          f"{'import':>8s}   (serial 2^12 + parallel 2^16 kernels)")
    from toolkit.optimizer import specs
    for name in args.only or list(specs(oracle=True)):
        with tempfile.TemporaryDirectory() as cache:
            cold = _child(name, cache)
            warm = _child(name, cache)
        row = {"optimizer": name,
               "cold_s": cold["serial_s"] + cold["parallel_s"],
               "warm_s": warm["serial_s"] + warm["parallel_s"],
               "import_s": warm["import_s"], "cold": cold, "warm": warm}
        rows.append(row)
        print(f"{name:10s} {row['cold_s']:17.2f}s {row['warm_s']:17.3f}s "
              f"{row['import_s']:7.2f}s")
    total_cold = sum(r["cold_s"] for r in rows)
    total_warm = sum(r["warm_s"] for r in rows)
    print(f"{'all':10s} {total_cold:17.2f}s {total_warm:17.3f}s")
    import numba
    import numpy
    data = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "numpy": numpy.__version__,
            "numba": numba.__version__, "rows": rows,
            "total_cold_s": total_cold, "total_warm_s": total_warm}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(data, f, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
