#!/usr/bin/env python
"""Distributed Trainer step over ResNet-50's 161 parameter shapes (25.6 M float32, Adam), on 1, 2
and 3 MPI ranks of this machine: step time, reduction time, bytes per step, with and without
2-bit compression, for each way of summing the gradients.

    python benchmarks/dist_resnet50.py                 # runs mpiexec -n 1, 2, 3; prints, writes
                                                      # benchmarks/results/dist_resnet50.json
    python benchmarks/dist_resnet50.py --ranks 2 --steps 5

Each configuration: 3 warm-up steps, then ``--steps`` timed steps; the median is reported. The
reduction time is the time spent in ``allreduce_grads`` (agreeing on fresh flags, the
collectives, compression); the rest of the step is the optimizer update. ``allreduce`` (a plain
MPI_Allreduce, which MPI does not promise gives the same bits on every rank) is measured for
comparison only and checked for equal bits across ranks. On a 2-core machine 2 and 3 ranks share
the cores (``NUMBA_NUM_THREADS`` is set to cores // ranks, at least 1), so the numbers show the
cost of the protocol, not a speed-up.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

MODES = ("scatter_gather", "reduce_bcast", "allreduce_bcast", "allreduce")


def _trainer(shapes, compression, rank):
    from toolkit import Parameter, Trainer
    rng = np.random.default_rng(rank)
    params = [Parameter(f"p{i:03d}", init=0.01, shape=s) for i, s in enumerate(shapes)]
    t = Trainer(params, "adam", {"learning_rate": 1e-3}, kvstore="dist_sync",
                compression_params=compression)
    grads = [rng.standard_normal(p.shape).astype(np.float32) * 0.01 for p in params]
    return t, params, grads


def _one_step(t, params, grads):
    kv = t.kvstore
    for p, g in zip(params, grads):
        p.grad()[...] = g
    kv.barrier()
    t0 = time.perf_counter()
    t.allreduce_grads()
    t1 = time.perf_counter()
    t.update(kv.num_workers)
    t2 = time.perf_counter()
    return t2 - t0, t1 - t0


def _record(kv, times, same):
    total = statistics.median(x[0] for x in times)
    red = statistics.median(x[1] for x in times)
    return {"step_ms": 1e3 * total, "reduce_ms": 1e3 * red, "update_ms": 1e3 * (total - red),
            "bits_equal_on_all_ranks": same, "bytes": dict(kv.last_step_bytes)}


def worker(args):
    from mpi4py import MPI
    shapes = resnet50_shapes()
    n = sum(int(np.prod(s)) for s in shapes)
    comm = MPI.COMM_WORLD
    out = {"ranks": comm.Get_size(), "elements": n, "tensors": len(shapes), "modes": {}}
    t, params, grads = _trainer(shapes, None, comm.Get_rank())
    kv = t.kvstore
    times = {m: [] for m in MODES}
    same = {m: True for m in MODES}
    # the modes interleaved, round after round, so that drift on a shared machine hits all alike
    for rnd in range(2 + args.steps):
        for mode in MODES:
            kv.reduce_mode = mode
            dt = _one_step(t, params, grads)
            if rnd >= 2:
                times[mode].append(dt)
            # equal bits on every rank? (the gradient buffer after this reduction)
            digest = hashlib.sha256(np.asarray(kv._groups[0].g.grad).tobytes()).hexdigest()
            same[mode] &= len(set(comm.allgather(digest))) == 1
    for mode in MODES:
        kv.reduce_mode = mode
        out["modes"][mode] = _record(kv, times[mode], same[mode])
    del t, params
    t, params, grads = _trainer(shapes, {"type": "2bit", "threshold": 0.005}, comm.Get_rank())
    times = [_one_step(t, params, grads) for _ in range(2 + args.steps)][2:]
    out["modes"]["2bit"] = _record(t.kvstore, times, t.kvstore.check_in_sync() is not None)
    if comm.Get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump(out, f)


def driver(args):
    from toolkit.mpi_jobs import command, find_mpiexec
    mpiexec = find_mpiexec()
    if mpiexec is None:
        sys.exit("no mpiexec: pip install -e '.[dist]'")
    results = []
    cores = os.cpu_count() or 1
    for n in args.ranks:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "out.json")
            env = dict(os.environ, NUMBA_NUM_THREADS=str(max(1, cores // n)),
                       PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                       MXOPT_DIST_TIMEOUT="600")
            cmd = command(n, os.path.abspath(__file__),
                          ["--worker", "--out", path, "--steps", str(args.steps)], mpiexec)
            subprocess.run(cmd, env=env, check=True, cwd=ROOT)
            with open(path) as f:
                results.append(json.load(f))
    print(f"ResNet-50: {results[0]['tensors']} tensors, {results[0]['elements']:,} float32, "
          f"Adam; {platform.node()} ({cores} cores); median of {args.steps} steps")
    print(f"{'ranks':>5} {'reduction':>16} {'step ms':>9} {'reduce ms':>10} {'update ms':>10} "
          f"{'payload MB':>11} {'ring MB/rank':>13} {'same bits':>10}")
    for r in results:
        for mode, m in r["modes"].items():
            b = m["bytes"]
            print(f"{r['ranks']:>5} {mode:>16} {m['step_ms']:9.1f} {m['reduce_ms']:10.1f} "
                  f"{m['update_ms']:10.1f} {b['payload_bytes'] / 1e6:11.2f} "
                  f"{b['ring_model_bytes'] / 1e6:13.2f} {str(m['bits_equal_on_all_ranks']):>10}")
    record = {"machine": {"node": platform.node(), "cores": cores,
                          "python": platform.python_version()},
              "steps": args.steps, "results": results}
    if args.write:
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        with open(os.path.join(HERE, "results", "dist_resnet50.json"), "w") as f:
            json.dump(record, f, indent=1)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--no-write", dest="write", action="store_false")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
