"""Generate the golden float64 trajectories of the oracle (one JSON file per optimizer).

The files are in the regression format of ``toolkit.regress`` (``format: "mxopt-regress"``,
``docs/regression-testing.md``), with ``backend: "reference"``: per convention, a short
trajectory of ``reference.<name>.step`` in float64, its inputs (initial weight, gradients,
hyperparameters) and, after every step, the weight and every state array as exact hex strings
(``encoding: "float.hex"``), with provenance. ``tests/test_golden.py`` recomputes them with the
current ``reference`` package (``python -m toolkit regress compare tests/data/golden`` does the
same): bit for bit, or within the entry's ``ulps`` where the step uses ``pow``/``exp``/``log``/
``cos`` (whose last bit may differ between libm builds).

    python tests/data/golden/generate.py [--force] [--only NAMES]

Refuses to overwrite existing files without ``--force``: a changed golden file means changed
numerics, which must be a deliberate decision recorded in the commit.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..", "..", "..")))

from reference import OPTIMIZERS  # noqa: E402
from toolkit import regress  # noqa: E402
from toolkit._support import optimizer_conventions  # noqa: E402
from toolkit.oracle import space  # noqa: E402

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
    "adamw": ({"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "eta": 0.5}, 1),
    "lars": ({"momentum": 0.9, "eta": 0.01, "eps": 1e-6, "momentum_correction": True}, 0),
    "groupadagrad": ({"eps": 1e-5}, 0),
    "lamb": ({"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6, "lower_bound": 0.5,
              "upper_bound": 10.0, "bias_correction": True}, 1),
}
COMMON = {"lr": 0.05, "wd": 0.01, "rescale_grad": 0.5, "clip_gradient": 2.0}
STEPS, N = 5, 6


def inputs():
    """The initial weight and gradients (the same for every optimizer and convention)."""
    rng = np.random.default_rng(20261122)
    w = rng.standard_normal(N) * 10.0 ** rng.uniform(-2, 1, N)
    grads = [rng.standard_normal(N) * 10.0 ** rng.uniform(-3, 1, N) for _ in range(STEPS)]
    for g in grads:
        g[0] = 0.0
    return w, grads


def entry(name, convention):
    """One trajectory; the inputs shaped for the optimizer (GroupAdaGrad's matrices: two rows of
    three) and its pinned common hyperparameters applied (GroupAdaGrad's wd 0)."""
    hyper, ulps = CONFIGS[name]
    w, grads = inputs()
    shape = space.weight_shape(name, N)
    common = {**COMMON, **space.COMMON_FIXED.get(name, {})}
    e = regress.new_entry(name, convention, "reference", "float64", w0=w.reshape(shape),
                          grads=[g.reshape(shape) for g in grads], hyper=hyper, common=common,
                          ulps=ulps, encoding="float.hex")
    return regress.fill_entry(e)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--force", action="store_true", help="overwrite existing golden files")
    p.add_argument("--only", help="comma-separated optimizers (default: all)")
    args = p.parse_args()
    assert set(CONFIGS) == set(OPTIMIZERS), "every optimizer of the oracle needs a golden config"
    names = args.only.split(",") if args.only else list(CONFIGS)
    scope = {"optimizers": None, "backends": ["reference"], "dtypes": ["float64"],
             "steps": STEPS, "size": N, "layout": "folder"}
    command = "python tests/data/golden/generate.py " + " ".join(sys.argv[1:])
    for name in names:
        path = os.path.join(HERE, f"{name}.json")
        if os.path.exists(path) and not args.force:
            sys.exit(f"{path} exists; refusing to overwrite golden data without --force")
        doc = regress.document([entry(name, c) for c in optimizer_conventions()[name]],
                               scope=scope, command=command.strip(),
                               generator="tests/data/golden/generate.py")
        regress.write(path, doc)
        print("wrote", path)


if __name__ == "__main__":
    main()
