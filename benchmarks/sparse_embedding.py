"""Benchmark: a lazy Adam update of 1 % of the rows of a 2^20 x 64 float32 embedding, against the
dense update of the whole table (the same optimizer, the CPU backend; ``--optimizer`` another
lazy one, SparseAdam's included).

A lazy update (``toolkit.RowSparse`` gradient) reads and writes only the rows present: weight,
mean, variance and gradient of 10,486 rows (28 bytes per element: 18.8 MB), where the dense
step moves the whole table's (28 bytes x 2^26 elements: 1.88 GB). Both are timed in the same run,
interleaved (one lazy step, then one dense step, per repetition), as medians; the ratio is what to
read (absolute times on shared machines vary). Also shown: the lazy step's achieved bandwidth
over the bytes it must move, and the dense update of only the gathered rows (numpy gather, dense
kernel, scatter), which is what a user without a lazy kernel would write.

With ``--optimizer sparseadam`` and torch installed, the same step of ``torch.optim.SparseAdam``
and of ``toolkit.torch.SparseAdam`` on a torch embedding table with the same sparse COO gradient
(coalesced, as an embedding's is after torch's ``coalesce``), interleaved with the others: what
an ``nn.Embedding(sparse=True)`` user runs.

    python benchmarks/sparse_embedding.py [--rows 1048576] [--dim 64] [--fraction 0.01]
                                          [--optimizer adam] [--out PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import toolkit  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(HERE))

from toolkit import RowSparse, optimizer  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1 << 20)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--fraction", type=float, default=0.01)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--optimizer", default="adam", help="a registry name with a lazy update")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "sparse_embedding_cpu.json"))
    args = ap.parse_args(argv)

    rng = np.random.default_rng(0)
    shape = (args.rows, args.dim)
    nnz = max(1, int(round(args.rows * args.fraction)))
    print(f"embedding {shape[0]} x {shape[1]} float32, {nnz} rows per step "
          f"({100 * nnz / shape[0]:.2g} %)", flush=True)
    w = rng.standard_normal(shape, dtype=np.float32)
    rows = np.sort(rng.choice(args.rows, nnz, replace=False)).astype(np.int64)
    values = rng.standard_normal((nnz, args.dim), dtype=np.float32)
    dense_grad = np.zeros(shape, np.float32)
    dense_grad[rows] = values
    grad = RowSparse(rows, values, shape)

    name = args.optimizer
    lazy = optimizer.create(name, learning_rate=1e-3)
    if lazy.row_sparse_mode(0) != "lazy":
        ap.error(f"{name} has no lazy update (row_sparse_mode {lazy.row_sparse_mode(0)!r})")
    dense = optimizer.create(name, learning_rate=1e-3)
    gathered = optimizer.create(name, learning_rate=1e-3)
    w_dense = w.copy()
    s_lazy, s_dense = lazy.create_state(0, w), dense.create_state(0, w_dense)
    s_gather = gathered.create_state(0, w[rows])

    def step_lazy():
        lazy.update(0, w, grad, s_lazy)

    def step_dense():
        dense.update(0, w_dense, dense_grad, s_dense)

    def step_gathered():  # what a user without a lazy kernel writes: gather, update, scatter
        sub = w[rows]
        gathered.update(0, sub, values, s_gather)
        w[rows] = sub

    steps = {"lazy": step_lazy, "dense": step_dense, "gather_update_scatter": step_gathered}
    steps.update(_torch_steps(name, w, rows, values))
    for f in steps.values():  # compile and warm up
        f()
    times = {k: [] for k in steps}
    for _ in range(args.repeats):
        for key, f in steps.items():
            t0 = time.perf_counter()
            f()
            times[key].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    lazy_bytes = 28 * nnz * args.dim
    dense_bytes = 28 * args.rows * args.dim
    result = {
        "benchmark": "benchmarks/sparse_embedding.py",
        "shape": list(shape), "rows_per_step": nnz, "dtype": "float32", "optimizer": name,
        "median_s": med,
        "dense_over_lazy": med["dense"] / med["lazy"],
        "gather_over_lazy": med["gather_update_scatter"] / med["lazy"],
        "lazy_bandwidth_GBps": lazy_bytes / med["lazy"] / 1e9,
        "dense_bandwidth_GBps": dense_bytes / med["dense"] / 1e9,
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__, "load": os.getloadavg()},
        "repeats": args.repeats,
    }
    print(f"lazy   {med['lazy'] * 1e3:9.3f} ms  ({result['lazy_bandwidth_GBps']:.1f} GB/s over the "
          f"{lazy_bytes / 1e6:.1f} MB it must move)")
    print(f"dense  {med['dense'] * 1e3:9.3f} ms  ({result['dense_bandwidth_GBps']:.1f} GB/s)")
    print(f"gather/update/scatter {med['gather_update_scatter'] * 1e3:9.3f} ms")
    print(f"dense / lazy = {result['dense_over_lazy']:.0f}x;  gather-update-scatter / lazy = "
          f"{result['gather_over_lazy']:.1f}x")
    if "torch_optim" in med:
        result["torch_optim_over_toolkit_torch"] = med["torch_optim"] / med["toolkit_torch"]
        result["torch"] = _torch_version()
        print(f"torch.optim.SparseAdam {med['torch_optim'] * 1e3:9.3f} ms;  toolkit.torch."
              f"SparseAdam {med['toolkit_torch'] * 1e3:9.3f} ms  (torch / toolkit = "
              f"{result['torch_optim_over_toolkit_torch']:.1f}x)")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print("wrote", os.path.relpath(args.out))
    return 0


def _torch_version():
    import torch
    return str(torch.__version__)


def _torch_steps(name, w, rows, values):
    """``{"torch_optim": step, "toolkit_torch": step}`` for SparseAdam where torch is installed
    (each on its own copy of the table, the same coalesced sparse gradient), else nothing."""
    if name != "sparseadam":
        return {}
    try:
        import torch
    except ImportError:
        print("torch is not installed: no torch.optim.SparseAdam row")
        return {}
    import toolkit.torch as tt
    grad = torch.sparse_coo_tensor(torch.from_numpy(rows)[None], torch.from_numpy(values),
                                   w.shape, check_invariants=True).coalesce()
    out = {}
    for key, make in (("torch_optim", torch.optim.SparseAdam), ("toolkit_torch", tt.SparseAdam)):
        p = torch.nn.Parameter(torch.from_numpy(w.copy()))
        opt = make([p], lr=1e-3)
        p.grad = grad

        def step(opt=opt):
            opt.step()
        out[key] = step
    return out


if __name__ == "__main__":
    sys.exit(main())
