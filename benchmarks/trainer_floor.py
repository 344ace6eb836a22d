"""Benchmark: one Trainer step over ResNet-50's 161 parameter shapes for any ``mxopt bench``
setting, against the memory-traffic floor of the same bytes, measured in the same run.

``benchmarks/trainer_resnet50.py`` and ``mxopt bench`` time Adam's whole-model step against
torch's fused Adam; this script times the others' (Lion, ...) against their own floor: the
Trainer (one kernel call per dtype group) steps 25,557,032 float32 values, and the floor kernel
moves the setting's bytes (``toolkit.tools.bench.settings.traffic``: gradient read, weight and
state read and written per element, a first pass's reads and a scratch array's passes, and a
side state's elements read and written: Adafactor's statistics, for these shapes), the two interleaved as ``mxopt bench``
interleaves its cases (fastest of up to 3 sub-batches per repetition, medians, the ratio the
median of paired ratios). The floor's bandwidth is recorded with every ratio.

    python benchmarks/trainer_floor.py [--optimizers lion,adam] [--repeats 10] [--out PATH]
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
from toolkit.tools.bench.resnet import resnet50_shapes  # noqa: E402
from toolkit.tools.bench.settings import SIDE_BYTES, select_settings, traffic  # noqa: E402
from toolkit.tools.bench.timing import device_sync, measure, paired  # noqa: E402


def trainer_step(setting, shapes, rng):
    """The Trainer over ``shapes`` with ``setting``'s optimizer and keywords, gradients in
    place, and its step."""
    from toolkit import Parameter, Trainer
    params = [Parameter(f"p{i:03d}", init=rng.standard_normal(s).astype(np.float32) * 0.01)
              for i, s in enumerate(shapes)]
    trainer = Trainer(params, setting.name, {"learning_rate": 1e-3, **setting.kwargs})
    for p in params:
        p.set_grad(rng.standard_normal(p.shape).astype(np.float32))

    def step():
        for p in params:
            p.grad()  # the gradients are written in place (marked fresh)
        trainer.step(1)
    return trainer, step


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--optimizers", default="lion,adam",
                    help="comma-separated mxopt bench settings (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "trainer_floor_cpu.json"))
    args = ap.parse_args(argv)
    shapes = resnet50_shapes()
    n = int(sum(np.prod(s) for s in shapes))
    rows = []
    for setting in select_settings(args.optimizers.split(",")):
        rng = np.random.default_rng(0)
        trainer, step = trainer_step(setting, shapes, rng)
        tr = traffic(setting, False, shapes)
        floor = cpu_floor(n, tr, False, rng.standard_normal(n, dtype=np.float32))
        times, _ = measure({"toolkit": step, "floor": floor}, args.repeats, 0.005,
                           device_sync("cpu"), untimed_first_call_skip=())
        t_tk, t_floor = statistics.median(times["toolkit"]), statistics.median(times["floor"])
        row = {"setting": setting.label, "optimizer": setting.name,
               "kwargs": dict(setting.kwargs), "tensors": len(shapes), "elements": n,
               "bytes_per_element": tr.bytes, "side_bytes": SIDE_BYTES * tr.side,
               "toolkit_ms": t_tk * 1e3,
               "toolkit_launches_per_step": trainer.last_step_launches,
               "floor_ms": t_floor * 1e3, "floor_GBps": tr.total(n) / t_floor / 1e9,
               "of_floor": paired(times["floor"], times["toolkit"])}
        rows.append(row)
        side = f" + {SIDE_BYTES * tr.side / 1e6:.0f} MB of side state" if tr.side else ""
        print(f"{setting.label:12s} {row['toolkit_ms']:8.2f} ms, floor {row['floor_ms']:.2f} ms "
              f"({row['floor_GBps']:.1f} GB/s of {tr.bytes} B/element{side}): "
              f"{row['of_floor']:.2f} of the floor, {row['toolkit_launches_per_step']} call(s)")
    out = {"device": "cpu", "machine": platform.processor() or platform.machine(),
           "cpus": os.cpu_count(), "loadavg": list(os.getloadavg()), "repeats": args.repeats,
           "timing": "interleaved with the floor, fastest of up to 3 sub-batches per repetition, "
                     "medians; of_floor the median of paired ratios",
           "rows": rows}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
