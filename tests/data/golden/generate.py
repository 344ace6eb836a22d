"""Generate the golden float64 trajectories of the oracle (one JSON file per optimizer).

The files are in the regression format of ``toolkit.tools.regress`` (``format: "mxopt-regress"``,
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

from toolkit.tools import regress  # noqa: E402
from toolkit.tools._support import optimizer_conventions  # noqa: E402
from toolkit.optimizer import spec_of, specs  # noqa: E402
from toolkit.oracle import space  # noqa: E402

#: the common hyperparameters of every golden trajectory; each optimizer's own are its spec's
#: ``record``, with its ulp allowance ``record_ulps`` (pow/exp/log/cos involved)
COMMON = {"lr": 0.05, "wd": 0.01, "rescale_grad": 0.5, "clip_gradient": 2.0}
STEPS, N = 5, 6


def inputs(steps=STEPS):
    """The initial weight and ``steps`` gradients (the same for every optimizer and convention;
    more steps add gradients after the same first ones)."""
    rng = np.random.default_rng(20261122)
    w = rng.standard_normal(N) * 10.0 ** rng.uniform(-2, 1, N)
    grads = [rng.standard_normal(N) * 10.0 ** rng.uniform(-3, 1, N) for _ in range(steps)]
    for g in grads:
        g[0] = 0.0
    return w, grads


def steps(name):
    """The trajectory's length: :data:`STEPS`, or more where a branch of the update begins later
    (``Spec.case_steps``: RAdam's rectified step)."""
    return space.max_steps(name, STEPS)


def conventions(name):
    """The conventions a golden file holds: the optimizer's, but "pytorch" where it is not the
    optimizer's default (MXNet's family: those branches are proved against torch.optim itself,
    tests/test_pytorch_convention.py; RAdam's default is torch's update, so its file holds it)."""
    spec = spec_of(name)
    return [c for c in optimizer_conventions()[name]
            if c != "pytorch" or c == spec.default_convention]


def entry(name, convention):
    """One trajectory; the inputs shaped for the optimizer (GroupAdaGrad's matrices: two rows of
    three) and its pinned common hyperparameters applied (GroupAdaGrad's wd 0)."""
    spec = spec_of(name)
    w, grads = inputs(steps(name))
    shape = space.weight_shape(name, N)
    common = regress.common_for(name, COMMON)
    e = regress.new_entry(name, convention, "reference", "float64", w0=w.reshape(shape),
                          grads=[g.reshape(shape) for g in grads], hyper=spec.record,
                          common=common, ulps=spec.record_ulps, encoding="float.hex")
    return regress.fill_entry(e)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--force", action="store_true", help="overwrite existing golden files")
    p.add_argument("--only", help="comma-separated optimizers (default: all)")
    p.add_argument("--out", default=HERE, metavar="DIR",
                   help="folder to write the files to (default: this one; another one to check "
                        "that the generator reproduces these files byte for byte)")
    args = p.parse_args()
    known = list(specs(oracle=True))  # every optimizer with an oracle
    names = args.only.split(",") if args.only else known
    unknown = [n for n in names if n not in known]
    if unknown:
        sys.exit(f"unknown optimizer(s) {unknown}; known: {', '.join(known)}")
    command = "python tests/data/golden/generate.py " + " ".join(sys.argv[1:])
    for name in names:
        scope = {"optimizers": None, "backends": ["reference"], "dtypes": ["float64"],
                 "steps": steps(name), "size": N, "layout": "folder"}
        path = os.path.join(args.out, f"{name}.json")
        if os.path.exists(path) and not args.force:
            sys.exit(f"{path} exists; refusing to overwrite golden data without --force")
        doc = regress.document([entry(name, c) for c in conventions(name)],
                               scope=scope, command=command.strip(),
                               generator="tests/data/golden/generate.py")
        regress.write(path, doc)
        print("wrote", path)


if __name__ == "__main__":
    main()
