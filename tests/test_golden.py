"""Golden float64 trajectories of the oracle, recomputed bit for bit (tests/data/golden/).

A failure here means the reference's numerics changed. If that was deliberate, regenerate with
``python tests/data/golden/generate.py --force`` and say why in the commit.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from reference import OPTIMIZERS

HERE = os.path.join(os.path.dirname(__file__), "data", "golden")
NAMES = sorted(f[:-5] for f in os.listdir(HERE) if f.endswith(".json"))


def _arr(hexes):
    return np.array([float.fromhex(h) for h in hexes])


def _ulps(a, b):
    """Distance in units in the last place between float64 arrays (0 where equal)."""
    a, b = np.asarray(a), np.asarray(b)
    ia = a.view(np.int64).astype(object)
    ib = b.view(np.int64).astype(object)
    fix = lambda i: (-(1 << 63) - i) if i < 0 else i  # noqa: E731 - order-preserving map
    return max([abs(fix(x) - fix(y)) for x, y in zip(ia, ib)] + [0])


def test_every_optimizer_and_convention_has_golden_data():
    assert set(NAMES) == set(OPTIMIZERS)


@pytest.mark.parametrize("name", NAMES)
def test_golden_trajectory(name):
    with open(os.path.join(HERE, f"{name}.json")) as fh:
        doc = json.load(fh)
    ref = OPTIMIZERS[name]
    for traj in doc["trajectories"]:
        hyper = traj["hyper"]
        state_hyper = {k: v for k, v in hyper.items() if k not in ("seed", "stream")}
        w = _arr(traj["w0"])
        st = ref.init_state(w, **state_hyper)
        for k, (g, expect) in enumerate(zip(traj["grads"], traj["steps"])):
            w, st = ref.step(w, _arr(g), st, t=k + 1, convention=traj["convention"],
                             **traj["common"], **hyper)
            got = {"weight": w, **{s: st[s] for s in expect["state"]}}
            want = {"weight": _arr(expect["weight"]),
                    **{s: _arr(v) for s, v in expect["state"].items()}}
            for key in want:
                d = _ulps(got[key], want[key])
                assert d <= doc["ulp"], (f"{name} {traj['convention']} step {k + 1} {key}: "
                                         f"{d} ulp from the golden value")
