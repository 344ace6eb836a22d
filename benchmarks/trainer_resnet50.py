"""Benchmark: one Trainer step (Adam) over ResNet-50's 161 parameter shapes, against torch's fused Adam.

ResNet-50 (He et al. 2016; the torchvision layout) has 161 parameter tensors, 25,557,032 float32
values: 53 convolutions, 53 batch norms (gamma and beta) and the classifier. The Trainer holds them
in one flat buffer per (dtype, device) group and steps them in one kernel call (CPU) or one
launch (CUDA); ``torch.optim.Adam(fused=True)`` steps the same list of tensors. Both are timed in
the same run, interleaved (each repetition times one toolkit step, then one torch step, so that
what else the machine does falls on both alike), as medians; a GPU step is synchronised before
the clock stops. The memory-traffic floor of the step (28 bytes per element for float32 Adam) is
shown as achieved bandwidth. Absolute times on shared machines vary; the ratio is what to read.

    python benchmarks/trainer_resnet50.py [--device cpu|cuda] [--repeats 20]
"""
from __future__ import annotations

import argparse
import importlib.util
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

# the shapes, the two steps and the interleaved timing are shared with the suite (mxopt bench)
from toolkit.tools.bench import (interleaved, make_torch, make_trainer,  # noqa: E402,F401
                           resnet50_shapes, timed)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/"
                                                "trainer_resnet50_<device>.json)")
    args = ap.parse_args(argv)
    if args.device == "cuda":
        from toolkit.backends import cuda_available
        ok, why = cuda_available()
        if not ok or os.environ.get("NUMBA_ENABLE_CUDASIM"):
            ap.exit(2, f"{ap.prog}: --device cuda needs a GPU ({why})\n")
    rng = np.random.default_rng(0)
    shapes = resnet50_shapes()
    n = int(sum(np.prod(s) for s in shapes))
    trainer, tk_step = make_trainer(args.device, shapes, rng)
    steps = [tk_step]
    have_torch = importlib.util.find_spec("torch") is not None
    if have_torch:
        torch_step, kind, tv = make_torch(args.device, shapes, rng)
        steps.append(torch_step)
    times = interleaved(steps, args.device, args.repeats)
    t_tk = statistics.median(times[0])
    launches = trainer.last_step_launches
    row = {"device": args.device, "tensors": len(shapes), "elements": n,
           "repeats": args.repeats, "timing": "interleaved, median",
           "toolkit_ms": t_tk * 1e3, "toolkit_launches_per_step": launches,
           "toolkit_GBps": 28 * n / t_tk / 1e9}
    if have_torch:
        t_torch = statistics.median(times[1])
        pair = statistics.median(b / a for a, b in zip(times[0], times[1]))
        row.update(torch_kind=kind, torch_version=tv, torch_ms=t_torch * 1e3,
                   torch_over_toolkit=t_torch / t_tk, torch_over_toolkit_paired=pair)
    else:
        row["torch"] = "not installed (pip install torch to compare)"
    if args.device == "cuda":
        from numba import cuda
        row["gpu"] = cuda.get_current_device().name.decode() \
            if isinstance(cuda.get_current_device().name, bytes) else cuda.get_current_device().name
    row.update(machine=platform.processor() or platform.machine(), cpus=os.cpu_count())
    print(f"ResNet-50 Adam step, {len(shapes)} tensors, {n:,} float32 values, {args.device}")
    print(f"  toolkit Trainer: {row['toolkit_ms']:8.2f} ms  ({launches} kernel call(s), "
          f"{row['toolkit_GBps']:.0f} GB/s of Adam traffic)")
    if "torch_ms" in row:
        print(f"  torch Adam {row['torch_kind']:7s}: {row['torch_ms']:8.2f} ms   "
              f"torch/toolkit = {row['torch_over_toolkit']:.2f}x (median of paired ratios "
              f"{row['torch_over_toolkit_paired']:.2f}x; >= 1.0 is the target)")
    else:
        print(f"  torch: {row['torch']}")
    out = args.out or os.path.join(HERE, "results", f"trainer_resnet50_{args.device}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(row, f, indent=2)
    print(f"  wrote {out}")


if __name__ == "__main__":
    main()
