"""examples/port_from_gluon.py runs as a porting user runs it (docs/torch.md): two epochs, the
PNG written to --out, one line per pair of runs. Skipped where torch or the demo extra is
missing."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="torch not installed")
pytest.importorskip("sklearn", reason="scikit-learn (the demo extra) not installed")
pytest.importorskip("matplotlib", reason="matplotlib (the demo extra) not installed")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def test_port_from_gluon_runs(tmp_path):
    out = tmp_path / "curves.png"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.abspath(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    done = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "port_from_gluon.py"),
                           "--epochs", "2", "--out", str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split("  ")[0] for line in lines[:3]] == ["NAG, constant lr", "NAG, step schedule",
                                                         "Adam"]
    assert out.exists() and out.stat().st_size > 10_000
