"""Golden float64 trajectories of the oracle, recomputed bit for bit (tests/data/golden/).

The files are in the regression format of ``toolkit.tools.regress`` (``backend: "reference"``; see
``docs/regression-testing.md``), so ``python -m toolkit regress compare tests/data/golden`` runs
the same check from the command line. A failure here means the reference's numerics changed. If
that was deliberate, regenerate with ``python tests/data/golden/generate.py --force`` and say why
in the commit.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from reference import OPTIMIZERS
from toolkit.tools import regress

HERE = os.path.join(os.path.dirname(__file__), "data", "golden")
NAMES = sorted(f[:-5] for f in os.listdir(HERE) if f.endswith(".json"))


def test_every_optimizer_and_convention_has_golden_data():
    assert set(NAMES) == set(OPTIMIZERS)
    docs = regress.load(HERE)
    ids = {e["id"] for d in docs for e in d["entries"]}
    # "pytorch" only where it is the optimizer's default (tests/data/golden/generate.py)
    want = {f"{n}/{c}/reference/float64" for n in OPTIMIZERS
            for c in OPTIMIZERS[n].CONVENTIONS if c != "pytorch" or c == OPTIMIZERS[n].CONVENTIONS[0]}
    assert ids == want


@pytest.mark.parametrize("name", NAMES)
def test_golden_trajectory(name):
    """Through ``regress.compare``: every entry bit-identical, or within its ``ulps``."""
    report = regress.compare(os.path.join(HERE, f"{name}.json"), progress=False)
    assert report.entries and report.ok, report.summary()
    for e in report.entries:
        assert e.status in ("same", "within"), f"{e.id}: {e.status}: {e.reason}"


@pytest.mark.parametrize("name", NAMES)
def test_golden_trajectory_recomputed_directly(name):
    """The same check without ``regress.run_entry``: the stored inputs decoded, the oracle
    called here, and the distance counted in ulps (so a fault in the regress runner cannot hide
    a change of the oracle)."""
    (doc,) = regress.load(os.path.join(HERE, f"{name}.json"))
    ref = OPTIMIZERS[name]
    for e in doc["entries"]:
        dec = lambda h: regress.decode(h, np.float64, e["encoding"])  # noqa: E731
        hyper = e["hyper"]
        state_hyper = {k: v for k, v in hyper.items() if k not in ("seed", "stream")}
        shape = tuple(e["shape"])  # a matrix for GroupAdaGrad
        w = dec(e["w0"]).reshape(shape)
        st = ref.init_state(w, **state_hyper)
        for k, (g, expect) in enumerate(zip(e["grads"], e["steps"])):
            w, st = ref.step(w, dec(g).reshape(shape), st, t=k + 1, convention=e["convention"],
                             **e["common"], **hyper)
            got = {"weight": w, **{s: st[s] for s in expect if s != "weight"}}
            for key, hexes in expect.items():
                d = regress.ulp_distance(np.asarray(got[key], np.float64).reshape(-1),
                                         dec(hexes)).max(initial=0.0)  # (empty: unused slot)
                assert d <= e["ulps"], (f"{e['id']} step {k + 1} {key}: {d} ulp from the golden "
                                        "value")
