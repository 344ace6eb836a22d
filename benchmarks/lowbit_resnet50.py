"""Benchmark: one Adam step over ResNet-50's 161 parameter shapes with its moments held in
float32, bfloat16 and int8 (``state_dtype``), in a Trainer and in ``toolkit.torch``, against
torch's fused Adam and bitsandbytes' ``Adam8bit`` where installed.

All steps run in one process, interleaved (each repetition times one step of each case in
turn), and are reported as medians and as ratios to the Trainer's float32-state step paired
repetition by repetition. The memory-traffic floor of each state dtype is shown as the
bandwidth the step achieves over the bytes it must move: 28 bytes an element for float32
moments, 20 for bfloat16, 16 and two block maxima per 256 for int8; a tensor below 4096
elements keeps float32 moments under int8, and is counted so. Absolute times on shared machines
vary by 2x; the ratios are what to read.

    python benchmarks/lowbit_resnet50.py [--repeats 10]
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
    import toolkit  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(HERE))

from toolkit.backends import lowbit  # noqa: E402
from toolkit.optimizers.held import INT8_MIN_SIZE  # noqa: E402
from toolkit.tools.bench import interleaved, make_trainer, resnet50_shapes  # noqa: E402
from toolkit.tools.bench.floor import ADAM_TRAFFIC, adam_floor  # noqa: E402

STATE_DTYPES = (None, "bfloat16", "int8")


def traffic(shapes, state_dtype):
    """Bytes Adam must move in one step over ``shapes`` with ``state_dtype``."""
    total = 0
    for s in shapes:
        n = int(np.prod(s))
        if state_dtype == "bfloat16":
            total += 20 * n
        elif state_dtype == "int8" and n >= INT8_MIN_SIZE:
            total += 16 * n + 2 * 8 * lowbit.blocks_of(n)
        else:
            total += 28 * n
    return total


def torch_case(shapes, rng, make):
    """A step of the torch optimizer ``make(params)`` over ``shapes`` with gradients set."""
    import torch
    params = [torch.nn.Parameter(torch.from_numpy(rng.standard_normal(s).astype(np.float32)
                                                  * np.float32(0.01))) for s in shapes]
    for p in params:
        p.grad = torch.from_numpy(rng.standard_normal(p.shape).astype(np.float32))
    opt = make(params)
    opt.step()
    return opt.step


def cases(shapes, rng):
    """``{name: (step, state_dtype)}``: each case's step and the state dtype of its traffic."""
    out = {}
    for sd in STATE_DTYPES:
        _, step = make_trainer("cpu", shapes, rng, **({} if sd is None else
                                                      {"state_dtype": sd}))
        out[f"Trainer {sd or 'float32'}"] = (step, sd)
    try:
        import torch
        import toolkit.torch as tt
    except ImportError:
        print("torch: not installed; the toolkit.torch and torch cases are not timed")
        return out
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    for sd in STATE_DTYPES:
        out[f"toolkit.torch {sd or 'float32'}"] = (torch_case(
            shapes, rng, lambda ps, sd=sd: tt.Adam(ps, lr=1e-3, state_dtype=sd)), sd)
    out["torch fused Adam"] = (torch_case(
        shapes, rng, lambda ps: torch.optim.Adam(ps, lr=1e-3, fused=True)), None)
    try:
        import bitsandbytes as bnb
        out["bitsandbytes Adam8bit"] = (torch_case(
            shapes, rng, lambda ps: bnb.optim.Adam8bit(ps, lr=1e-3)), "int8")
    except Exception as e:  # not installed, or no CPU kernel: reported, not timed
        print(f"bitsandbytes Adam8bit: not timed ({type(e).__name__}: {str(e)[:100]})")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "lowbit_resnet50_cpu.json"))
    args = ap.parse_args(argv)
    shapes = resnet50_shapes()
    n = int(sum(np.prod(s) for s in shapes))
    rng = np.random.default_rng(0)
    steps = cases(shapes, rng)
    # the floor: float32 Adam's traffic over as many elements, by a trivial kernel, in the run
    steps["floor (float32 traffic)"] = (adam_floor("cpu", n, rng), None)
    names = list(steps)
    times = dict(zip(names, interleaved([steps[k][0] for k in names], "cpu", args.repeats)))
    base = times["Trainer float32"]
    floor_GBps = ADAM_TRAFFIC.bytes * n / statistics.median(times.pop(
        "floor (float32 traffic)")) / 1e9
    names.remove("floor (float32 traffic)")
    rows = []
    print(f"ResNet-50 Adam step, {len(shapes)} tensors, {n:,} float32 weights, CPU "
          f"({os.cpu_count()} cpus); the floor moves {floor_GBps:.1f} GB/s")
    print(f"{'case':<24}{'ms':>9}{'GB/s of its traffic':>22}{'of floor':>10}"
          f"{'vs Trainer float32':>20}")
    for name in names:
        sd = steps[name][1]
        med = statistics.median(times[name])
        ratio = statistics.median(a / b for a, b in zip(base, times[name]))
        row = {"case": name, "state_dtype": sd or "float32", "ms": med * 1e3,
               "traffic_bytes": traffic(shapes, sd),
               "GBps": traffic(shapes, sd) / med / 1e9, "speedup_over_trainer_float32": ratio}
        row["of_floor"] = row["GBps"] / floor_GBps
        rows.append(row)
        print(f"{name:<24}{row['ms']:9.2f}{row['GBps']:22.1f}{row['of_floor']:10.2f}"
              f"{ratio:20.2f}")
    out = {"benchmark": "lowbit_resnet50", "tensors": len(shapes), "elements": n,
           "repeats": args.repeats, "timing": "interleaved, median; ratios paired",
           "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
           "floor_GBps": floor_GBps, "rows": rows}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(out, fh, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
