"""The cheap call and the many-tensor step, paired against another commit of the toolkit in
the same run (issue 34: one warm ``Optimizer.update`` of 2^12 float32 values at most 0.6x its
time at 04e8d6f for SGD and Adam; a Trainer step of 2000 tensors of 1024, Adam, no slower
than there, within 2%).

Two worker processes, one importing this tree's ``toolkit`` and one importing the baseline
commit's (extracted with ``git archive`` into a temporary folder), each time the warm update
of every case; the parent asks them in turn, round after round, so that both see the same
machine state. A round's time is the best of ``--inner`` batches of ``--calls`` updates; the
reported time is the median over ``--rounds`` rounds, and the ratio the median of the
per-round ratios. Prints a table and, with ``--out``, writes JSON.

    python benchmarks/cheap_call.py [--baseline 04e8d6f] [--rounds 11] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

#: (label, optimizer name, keyword arguments): a warm update of --size values; "many": a
#: Trainer step (Adam) over 2000 tensors of 1024, every gradient marked written first
CASES = (("sgd", "sgd", {"momentum": 0.9}),
         ("adam", "adam", {}),
         ("many", "adam", {}))

WORKER = r"""
import json, sys, time
import numpy as np
from toolkit import optimizer
cases = json.loads(sys.argv[1]); n = int(sys.argv[2]); calls = int(sys.argv[3])
inner = int(sys.argv[4])
from toolkit import Parameter, Trainer
setups = {}
for label, name, kw in cases:
    if label == "many":
        rng = np.random.default_rng(0)
        params = [Parameter(f"p{i:04d}", init=rng.standard_normal(1024).astype(np.float32))
                  for i in range(2000)]
        trainer = Trainer(params, name, dict(kw, learning_rate=1e-3))
        for p in params:
            p.set_grad(rng.standard_normal(1024).astype(np.float32))

        def step(params=params, trainer=trainer):
            for p in params:
                p.grad()  # written in place: fresh
            trainer.step(1)
        for _ in range(4):
            step()
        setups[label] = (None, step, max(1, calls // 1000))
        continue
    opt = optimizer.create(name, **kw)
    w = np.ones(n, np.float32); g = np.full(n, 1e-3, np.float32)
    s = opt.create_state(0, w)
    for _ in range(4):
        opt.update(0, w, g, s)
    setups[label] = ((opt.update, w, g, s), None, calls)
print("ready", flush=True)
for line in sys.stdin:
    arrays, call, count = setups[line.strip()]
    best = float("inf")
    for _ in range(inner):
        t0 = time.perf_counter()
        if call is None:  # the update itself in the loop: no wrapper's call timed
            update, w, g, s = arrays
            for _ in range(count):
                update(0, w, g, s)
        else:
            for _ in range(count):
                call()
        best = min(best, (time.perf_counter() - t0) / count)
    print(best, flush=True)
"""


def _extract(rev, into):
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)


def _start(path, args):
    env = dict(os.environ, PYTHONPATH=path)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    p = subprocess.Popen([sys.executable, "-c", WORKER, *args], env=env, cwd=path,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if p.stdout.readline().strip() != "ready":
        raise RuntimeError(f"the worker of {path} did not start")
    return p


def _ask(p, label):
    p.stdin.write(label + "\n")
    p.stdin.flush()
    return float(p.stdout.readline())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="04e8d6f", help="the commit to pair against")
    ap.add_argument("--size", type=int, default=1 << 12)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--inner", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    args = [json.dumps(CASES), str(a.size), str(a.calls), str(a.inner)]
    with tempfile.TemporaryDirectory() as tmp:
        _extract(a.baseline, tmp)
        workers = {"this": _start(ROOT, args), "baseline": _start(tmp, args)}
        times = {(w, c[0]): [] for w in workers for c in CASES}
        for r in range(a.rounds):
            for label, _, _ in CASES:
                order = ("this", "baseline") if r % 2 == 0 else ("baseline", "this")
                for w in order:
                    times[(w, label)].append(_ask(workers[w], label))
        for p in workers.values():
            p.stdin.close()
            p.wait(timeout=60)
    rows = {}
    print(f"warm update of {a.size} float32 values (many: a Trainer step over 2000 x 1024): "
          f"this tree ({head}, uncommitted changes included) against {a.baseline}, median of "
          f"{a.rounds} paired rounds")
    print(f"{'case':8} {'this us':>9} {'baseline us':>12} {'ratio':>7}")
    for label, name, kw in CASES:
        this, base = times[("this", label)], times[("baseline", label)]
        ratio = statistics.median(x / y for x, y in zip(this, base))
        rows[label] = {"optimizer": name, "kwargs": kw, "this_us": statistics.median(this) * 1e6,
                       "baseline_us": statistics.median(base) * 1e6, "ratio": ratio,
                       "this_all_us": [x * 1e6 for x in this],
                       "baseline_all_us": [x * 1e6 for x in base]}
        print(f"{label:8} {rows[label]['this_us']:9.2f} {rows[label]['baseline_us']:12.2f} "
              f"{ratio:7.3f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"this": head, "baseline": a.baseline, "size": a.size,
                       "rounds": a.rounds, "calls": a.calls, "inner": a.inner,
                       "python": platform.python_version(), "machine": platform.machine(),
                       "cpus": os.cpu_count(), "cases": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
