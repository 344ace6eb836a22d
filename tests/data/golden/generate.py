"""Generate the golden float64 trajectories of the oracle (one JSON file per optimizer).

Each file holds, per convention, a short trajectory: its inputs (initial weight, gradients,
hyperparameters) and, after every step, the weight and every state array, as exact hex strings
(``float.hex``), with provenance. ``tests/test_golden.py`` recomputes them with the current
``reference`` package: bit for bit, or within the stated number of ulps where the step uses
``pow``/``exp``/``log``/``cos`` (whose last bit may differ between libm builds).

    python tests/data/golden/generate.py [--force]

Refuses to overwrite existing files without ``--force``: a changed golden file means changed
numerics, which must be a deliberate decision recorded in the commit.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..", "..", "..")))

from reference import OPTIMIZERS  # noqa: E402

#: hyperparameters of each golden trajectory, and its ulp allowance (pow/exp/log/cos involved)
CONFIGS = {
    "sgd": ({"momentum": 0.9}, 0), "nag": ({"momentum": 0.9}, 0), "adagrad": ({"eps": 1e-7}, 0),
    "rmsprop": ({"gamma1": 0.9, "gamma2": 0.9, "epsilon": 1e-8, "centered": True,
                 "clip_weights": 2.0}, 0),
    "adadelta": ({"rho": 0.9, "epsilon": 1e-5}, 0),
    "adam": ({"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}, 1),
    "adamax": ({"beta1": 0.9, "beta2": 0.999}, 1),
    "nadam": ({"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "schedule_decay": 0.004}, 1),
    "signum": ({"momentum": 0.9, "wd_lh": 0.01}, 0),
    "lbsgd": ({"momentum": 0.9, "warmup_strategy": "linear", "warmup_epochs": 1,
               "batch_scale": 2, "updates_per_epoch": 4}, 0),
    "dcasgd": ({"momentum": 0.5, "lamda": 0.04}, 0),
    "ftrl": ({"lamda1": 0.01, "beta": 1.0}, 0),
    "ftml": ({"beta1": 0.6, "beta2": 0.999, "epsilon": 1e-8}, 1),
    "sgld": ({"seed": 7, "stream": 0}, 1),
}
COMMON = {"lr": 0.05, "wd": 0.01, "rescale_grad": 0.5, "clip_gradient": 2.0}
STEPS, N = 5, 6


def hexes(a):
    return [float(x).hex() for x in np.asarray(a, dtype=np.float64).ravel()]


def trajectory(name, convention):
    ref = OPTIMIZERS[name]
    hyper, _ = CONFIGS[name]
    rng = np.random.default_rng(20261122)
    w = rng.standard_normal(N) * 10.0 ** rng.uniform(-2, 1, N)
    grads = [rng.standard_normal(N) * 10.0 ** rng.uniform(-3, 1, N) for _ in range(STEPS)]
    for g in grads:
        g[0] = 0.0
    state_hyper = {k: v for k, v in hyper.items() if k not in ("seed", "stream")}
    st = ref.init_state(w, **state_hyper)
    out = {"convention": convention, "hyper": hyper, "common": COMMON, "w0": hexes(w),
           "grads": [hexes(g) for g in grads], "steps": []}
    for k, g in enumerate(grads):
        w, st = ref.step(w, g, st, t=k + 1, convention=convention, **COMMON, **hyper)
        out["steps"].append({"weight": hexes(w),
                             "state": {s: hexes(st[s]) for s in ref.state_slots(**state_hyper)}})
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--force", action="store_true", help="overwrite existing golden files")
    args = p.parse_args()
    for name in CONFIGS:
        path = os.path.join(HERE, f"{name}.json")
        if os.path.exists(path) and not args.force:
            sys.exit(f"{path} exists; refusing to overwrite golden data without --force")
        convs = ["mxnet"] if name == "nadam" else ["mxnet", "guide"]
        doc = {"provenance": {"generator": "tests/data/golden/generate.py",
                              "date": datetime.date.today().isoformat(),
                              "numpy": np.__version__, "python": platform.python_version(),
                              "machine": platform.machine()},
               "optimizer": name, "ulp": CONFIGS[name][1],
               "trajectories": [trajectory(name, c) for c in convs]}
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(doc, fh, indent=1)
        os.replace(tmp, path)
        print("wrote", path)


if __name__ == "__main__":
    main()
