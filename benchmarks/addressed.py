"""Benchmark: the addressed CPU kernel (one call over tensors at raw addresses) against the
segmented kernel over one flat buffer of the same bytes, the floor of the same traffic, and
torch's fused Adam over the same tensors.

Float32 Adam (28 bytes per element: weight and both moments read and written, the gradient read)
over three lists of tensors: 2000 tensors of 1024 values, ResNet-50's 161 parameter shapes, one
tensor of 2^24 values. Every step sees gradients at new addresses, as with autograd's fresh
``.grad`` each step: two sets of gradients, and each step takes the other one.

- ``addressed``: ``run_rule_addressed`` over numpy arrays, the address table's gradient column
  switched between the two sets (two prebuilt tables): the kernel call with its checks.
- ``segmented``: ``cpu.run_segmented`` over flat buffers holding the same values (the
  Trainer's call), the gradient buffer switched likewise. Since 0a7b15e it runs the same
  addressed loop over the buffers (one row of addresses per segment, all the buffers' starts):
  the ratio compares two layouts of the same bytes, no longer two loops.
- ``floor``: ``mxopt bench``'s floor kernel over the same number of bytes.
- with torch installed (``/tmp/benchenv/bin/python`` here): ``torch_regrad``: the new gradient
  tensors assigned to ``.grad`` (what both torch steps below include); ``addressed_torch``: that,
  then the gradient column read with ``p.grad.data_ptr()`` and ``run_rule_addressed`` over the
  torch tensors' memory (the weights' and moments' addresses kept from the first step);
  ``torch_host``: ``addressed_torch`` without the kernel (the new gradients assigned and their
  addresses read); ``addressed_torch_kernel``: the kernel alone over the torch tensors' memory
  (the two address tables prebuilt); ``torch_fused``: the new gradients assigned, then
  ``torch.optim.Adam(fused=True).step()``.

All steps are timed in one run, interleaved (``toolkit.tools.bench.timing.measure``), medians
and ratios of medians over repetitions; the floor's GB/s says what the machine's memory gave.

    PYTHONPATH=. /tmp/benchenv/bin/python benchmarks/addressed.py [--repeats 15] [--out PATH]

(``OMP_WAIT_POLICY`` is PASSIVE unless the environment sets it: see below the imports.)
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys

# Two OpenMP runtimes run in this process (numba's "omp" layer on the system's libgomp, torch's
# own libgomp): with libgomp's default wait policy each pool spins after its parallel regions,
# and on a machine with few cores the two spin against each other (measured on the 2-core
# machine: torch's fused Adam over 2000 tensors 350 ms instead of 65 ms, the addressed kernel
# 13 ms instead of 1.6 ms). Set before either runtime starts; pass OMP_WAIT_POLICY to override.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import toolkit  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(HERE))

from toolkit import optimizer  # noqa: E402
from toolkit.backends import addressed, cpu, launches, order  # noqa: E402
from toolkit.tools.bench.resnet import many_tensor_shapes, resnet50_shapes  # noqa: E402
from toolkit.tools.bench.floor import cpu_floor  # noqa: E402
from toolkit.tools.bench.settings import Traffic  # noqa: E402
from toolkit.tools.bench.timing import measure, paired  # noqa: E402

BYTES = 28
LR = 1e-3


def adam_call():
    """The rule and the row of the first step of ``Adam(learning_rate=LR)``, as its kernel
    step returns them."""
    opt = optimizer.create("adam", learning_rate=LR)
    w = np.zeros(4, np.float32)
    (call,) = launches.collect(opt.planned_step(0, w, np.zeros(4, np.float32),
                                                opt.create_state(0, w)), cpu.LAUNCHER)
    return call.factory, call.hyper


def case(shapes, repeats, rng, with_torch):
    factory, hyper = adam_call()
    sizes = np.array([int(np.prod(s)) for s in shapes], np.int64)
    n, count = int(sizes.sum()), len(shapes)
    table = np.zeros((count, 1 + len(hyper)), np.float32)
    table[:, 0] = 1
    table[:, 1:] = np.array(hyper, np.float64)
    # numpy arrays, one per tensor: weight, two gradient sets, two moments
    ws = [rng.standard_normal(k).astype(np.float32) * 0.01 for k in sizes]
    gsets = [[rng.standard_normal(k).astype(np.float32) for k in sizes] for _ in range(2)]
    ms = [np.zeros(k, np.float32) for k in sizes]
    vs = [np.zeros(k, np.float32) for k in sizes]
    tables = []
    for gs in gsets:
        tables.append(np.array([[w.ctypes.data, g.ctypes.data, m.ctypes.data, v.ctypes.data]
                                for w, g, m, v in zip(ws, gs, ms, vs)], np.int64))
    turn = [0]

    def addressed_step():
        turn[0] ^= 1
        addressed.run_rule_addressed(factory, np.float32, tables[turn[0]], sizes, table)

    flat_w, flat_m, flat_v = (np.concatenate(x) for x in (ws, ms, vs))
    flat_g = [np.concatenate(gs) for gs in gsets]
    chunks = order.chunk_table(np.concatenate([[0], np.cumsum(sizes)]))
    seg_turn = [0]

    def segmented_step():
        seg_turn[0] ^= 1
        cpu.run_segmented(factory, flat_w, flat_g[seg_turn[0]], (flat_m, flat_v), table, chunks)

    steps = {"addressed": addressed_step, "segmented": segmented_step,
             "floor": cpu_floor(n, Traffic(3, False, BYTES), False,
                                rng.standard_normal(n, dtype=np.float32))}
    row = {"tensors": count, "elements": n, "bytes_per_element": BYTES, "repeats": repeats}
    if with_torch:
        import torch
        ps = [torch.tensor(w.copy(), requires_grad=True) for w in ws]
        tgrads = [[torch.tensor(g) for g in gs] for gs in gsets]
        tm = [torch.zeros(int(k)) for k in sizes]
        tv = [torch.zeros(int(k)) for k in sizes]
        tptrs = np.array([[p.data_ptr(), 0, m.data_ptr(), v.data_ptr()]
                          for p, m, v in zip(ps, tm, tv)], np.int64)
        qs = [torch.tensor(w.copy(), requires_grad=True) for w in ws]
        opt = torch.optim.Adam(qs, lr=LR, fused=True)
        t_turn, q_turn = [0], [0]

        def regrad(params, which):
            for p, g in zip(params, tgrads[which]):
                p.grad = g

        def addressed_torch():
            t_turn[0] ^= 1
            regrad(ps, t_turn[0])
            tptrs[:, 1] = [p.grad.data_ptr() for p in ps]
            addressed.run_rule_addressed(factory, np.float32, tptrs, sizes, table)

        # the kernel alone over the torch tensors' memory (both gradient columns prebuilt)
        ktables = []
        for gs in tgrads:
            kt = tptrs.copy()
            kt[:, 1] = [g.data_ptr() for g in gs]
            ktables.append(kt)
        k_turn = [0]

        h_turn = [0]

        def torch_host():
            h_turn[0] ^= 1
            regrad(ps, h_turn[0])
            tptrs[:, 1] = [p.grad.data_ptr() for p in ps]

        def addressed_torch_kernel():
            k_turn[0] ^= 1
            addressed.run_rule_addressed(factory, np.float32, ktables[k_turn[0]], sizes, table)

        def torch_fused():
            q_turn[0] ^= 1
            regrad(qs, q_turn[0])
            opt.step()

        r_turn = [0]

        def torch_regrad():
            r_turn[0] ^= 1
            regrad(qs, r_turn[0])
        steps.update(addressed_torch=addressed_torch, torch_fused=torch_fused,
                     addressed_torch_kernel=addressed_torch_kernel, torch_host=torch_host,
                     torch_regrad=torch_regrad)
        row.update(torch_version=torch.__version__, torch_threads=torch.get_num_threads())
    times, _ = measure(steps, repeats, 0.005, lambda: None, untimed_first_call_skip=())
    for name, ts in times.items():
        t = statistics.median(ts)
        row[f"{name}_ms"] = t * 1e3
        if name not in ("torch_regrad", "torch_host"):
            row[f"{name}_GBps"] = BYTES * n / t / 1e9
    row["addressed_of_floor"] = paired(times["floor"], times["addressed"])
    row["segmented_of_floor"] = paired(times["floor"], times["segmented"])
    row["addressed_vs_segmented"] = paired(times["segmented"], times["addressed"])
    if with_torch:
        row["addressed_torch_of_floor"] = paired(times["floor"], times["addressed_torch"])
        row["addressed_torch_kernel_of_floor"] = paired(times["floor"],
                                                        times["addressed_torch_kernel"])
        row["addressed_torch_vs_torch_fused"] = paired(times["torch_fused"],
                                                       times["addressed_torch"])
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "addressed_cpu.json"))
    args = ap.parse_args(argv)
    with_torch = importlib.util.find_spec("torch") is not None
    rng = np.random.default_rng(0)
    cases = {"2000 x 1024": many_tensor_shapes(), "resnet50": resnet50_shapes(),
             "one 2^24": [(1 << 24,)]}
    rows = {}
    load_before = os.getloadavg()
    for label, shapes in cases.items():
        rows[label] = case(shapes, args.repeats, rng, with_torch)
        print(label, json.dumps(rows[label], indent=1), flush=True)
    import numba
    doc = {"benchmark": "benchmarks/addressed.py", "machine": platform.machine(),
           "cpus": os.cpu_count(), "load_average_before": load_before,
           "load_average_after": os.getloadavg(), "numba": numba.__version__,
           "numba_threads": numba.get_num_threads(),
           "numba_threading_layer": numba.threading_layer(),
           "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
           "numpy": np.__version__, "python": platform.python_version(),
           "timing": "toolkit.tools.bench.timing.measure: interleaved, fastest of up to 3 "
                     "sub-batches per repetition, medians; ratios are medians of per-repetition "
                     "ratios (>1: the addressed step is faster / nearer the floor)",
           "cases": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
