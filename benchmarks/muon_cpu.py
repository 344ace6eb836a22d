"""Benchmark: Muon's step on a GPT-2-small block's matrices on the CPU: how much of it is outside
the matrix products, and torch.optim.Muon on the same matrices with the same threads.

For each shape (768 x 768, the attention's output projection; 768 x 3072 and 3072 x 768, the MLP's
two matrices; 768 x 2304, the fused q, k, v projection) and float32, four steps are timed
interleaved (``toolkit.tools.bench.timing.measure``: shuffled repetitions, the fastest of a few
calls each, medians):

* ``toolkit``: ``optimizer.create("muon").update`` on numpy arrays (one launch of kind "matrix":
  ``toolkit.backends.cpu_matrix``);
* ``products``: the same ``numpy.matmul`` calls alone, on arrays of the same shapes (5 steps of
  ``A = X X^T``, ``A A``, ``B X``, the small Gram matrix's side);
* ``passes``: the step's work outside the products alone, on arrays of the same shapes: its
  compiled moment and update passes, the division by the norm and the polynomial's pass per
  iteration (``toolkit.backends.cpu_matrix``'s own kernels);
* ``floor``: ``mxopt bench``'s floor kernel reading the gradient and reading and writing two
  arrays (20 bytes an element), for the bandwidth that the time outside the products is
  compared with (the element-wise passes move ``PASS_BYTES`` an element);
* ``torch``: ``torch.optim.Muon.step`` (its iteration in bfloat16), threads set to numba's.

The time outside the products is ``passes / toolkit`` (the issue's target: at most 10% of the
step; ``toolkit - products`` is reported too, but two timings' difference is noise when the
passes take a few percent); the ratio to torch is paired per repetition.

    python benchmarks/muon_cpu.py [--repeats 7] [--out PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import toolkit  # noqa: F401 (installed, else the checkout's)
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(HERE))

from toolkit.tools.bench.floor import cpu_floor  # noqa: E402
from toolkit.tools.bench.settings import Traffic  # noqa: E402
from toolkit.tools.bench.timing import measure, paired  # noqa: E402

#: GPT-2 small (d_model 768): torch's nn.Linear weights are (out, in)
SHAPES = [(768, 768), (768, 3072), (3072, 768), (2304, 768)]
STEPS = 5
#: bytes per element of the weight that the passes outside the products move (float32): the
#: moment pass (g, buf read; buf, X written), the division (X read and written) and the update
#: (W, X read; W written); and per element of the k x k Gram matrix, each iteration's
#: polynomial pass (A, B read; B written)
PASS_BYTES = 4 * (4 + 2 + 3)
GRAM_BYTES = 4 * 3


def pass_bytes(shape):
    """The bytes the passes outside the products move for a weight of ``shape``."""
    k = min(shape)
    return shape[0] * shape[1] * PASS_BYTES + STEPS * k * k * GRAM_BYTES
#: the floor kernel's bytes an element (the gradient read, two arrays read and written)
FLOOR_BYTES = 20


def products(shape):
    n, m = shape
    k = min(n, m)
    rng = np.random.default_rng(1)
    X = rng.standard_normal(shape).astype(np.float32) / np.float32(np.sqrt(n * m))
    A, B, Y = (np.empty((k, k), np.float32), np.empty((k, k), np.float32),
               np.empty(shape, np.float32))

    def run():
        for _ in range(STEPS):
            if n <= m:
                np.matmul(X, X.T, out=A)
            else:
                np.matmul(X.T, X, out=A)
            np.matmul(A, A, out=B)
            if n <= m:
                np.matmul(B, X, out=Y)
            else:
                np.matmul(X, B, out=Y)
    return run


def passes(opt, w, g, state):
    """The step's element-wise work alone (module docstring), with the kernels it runs."""
    from toolkit.backends import cpu_matrix as cm
    n, m = w.shape
    k = min(n, m)
    factory, row = opt.matrix_row(1, 0.02, 0.0, w.shape)
    hp = np.asarray(tuple(row), np.float64)
    moment = cm.compiled_pass(factory, "moment", hp.size, w.dtype, False)
    apply = cm.compiled_pass(factory, "apply", hp.size, w.dtype, False)
    poly = cm.polynomial_kernel(w.dtype, False)
    x = np.empty(w.size, w.dtype)
    partial = np.zeros(-(-w.size // cm.CHUNK))
    A, B = np.eye(k, dtype=w.dtype), np.eye(k, dtype=w.dtype)
    a, b, c = (w.dtype.type(v) for v in (row.a, row.b, row.c))
    buf, w1, g1 = state.reshape(-1), w.reshape(-1), g.reshape(-1)

    def run():
        moment(g1, buf, x, hp, partial)
        np.divide(x, np.float64(2.0), out=x, casting="same_kind")
        for _ in range(STEPS):
            poly(B, A, a, b, c)
        apply(w1, x, hp)
    return run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "muon_cpu.json"))
    args = ap.parse_args(argv)
    import numba

    from toolkit import optimizer
    try:
        import torch
        torch.set_num_threads(numba.get_num_threads())
    except ImportError:
        torch = None
    rows = []
    for shape in SHAPES:
        rng = np.random.default_rng(0)
        w = rng.standard_normal(shape).astype(np.float32) * 0.02
        g = rng.standard_normal(shape).astype(np.float32)
        opt = optimizer.create("muon", learning_rate=0.02)
        state = opt.create_state(0, w)
        steps = {"toolkit": lambda: opt.update(0, w, g, state), "products": products(shape),
                 "passes": passes(opt, w.copy(), g, state.copy())}
        n = w.size
        steps["floor"] = cpu_floor(n, Traffic(rw=2, first_reads=0, bytes=FLOOR_BYTES), False,
                                   g.reshape(-1))
        if torch is not None:
            p = torch.nn.Parameter(torch.from_numpy(w.copy()))
            t_opt = torch.optim.Muon([p], lr=0.02)
            p.grad = torch.from_numpy(g.copy())
            steps["torch"] = t_opt.step
        times, _ = measure(steps, args.repeats, 0.3, lambda: None)
        med = {k: statistics.median(v) for k, v in times.items()}
        bandwidth = n * FLOOR_BYTES / med["floor"]  # bytes per second
        floor_s = pass_bytes(shape) / bandwidth
        row = {"shape": list(shape), "ms": {k: v * 1e3 for k, v in med.items()},
               "outside_products": paired(times["passes"], times["toolkit"]),
               "toolkit_minus_products": paired(times["toolkit"], times["products"]) - 1.0,
               "floor_GBps": bandwidth / 1e9,
               "passes_over_floor": paired(times["passes"], times["floor"]) * n * FLOOR_BYTES
               / pass_bytes(shape),
               "passes_floor_ms": floor_s * 1e3}
        if torch is not None:
            row["toolkit_over_torch"] = paired(times["toolkit"], times["torch"])
        rows.append(row)
        print(f"{shape[0]:>5} x {shape[1]:<5} toolkit {med['toolkit'] * 1e3:7.1f} ms, products "
              f"{med['products'] * 1e3:7.1f} ms, passes {med['passes'] * 1e3:5.2f} ms = "
              f"{100 * row['outside_products']:4.1f}% of the step "
              f"({row['passes_over_floor']:.1f} floors at {row['floor_GBps']:.0f} GB/s)"
              + (f", torch {med['torch'] * 1e3:7.1f} ms (toolkit/torch "
                 f"{row['toolkit_over_torch']:.2f})" if torch is not None else ""))
    out = {"benchmark": "muon_cpu", "dtype": "float32", "steps": STEPS,
           "threads": numba.get_num_threads(), "machine": platform.machine(),
           "processor": platform.processor(), "numpy": np.__version__,
           "torch": None if torch is None else torch.__version__, "rows": rows}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(out, fh, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
