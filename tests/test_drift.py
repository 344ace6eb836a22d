"""``mxopt accuracy --state-dtype``: the drift report of low-precision optimizer states
(toolkit/tools/drift.py): its numbers, its table, plot and JSON, its usage errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

from toolkit.tools import accuracy, drift


def test_float32_states_drift_least_and_int8_most():
    """Adam on the same noisy quadratics: float32 states stay within rounding of float64,
    bfloat16 states drift more, 8-bit states most (the ordering the report exists to show),
    and none leaves the finite numbers."""
    result = drift.measure_drift(["adam"], ("bfloat16", "int8"), cases=2, steps=60, seed=3)
    end = {r.state_dtype: r.drift[:, -1] for r in result.rows}
    assert set(end) == {"float32", "bfloat16", "int8"}
    assert np.all(end["float32"] < 1e-5)
    assert np.all(end["float32"] < end["bfloat16"]) and np.all(end["bfloat16"] < end["int8"])
    assert all(r.nonfinite == 0 for r in result.rows)
    assert result.rows[0].steps[-1] == 60 and result.rows[0].drift.shape[0] == 2


def test_the_same_seed_gives_the_same_report():
    a = drift.measure_drift(["sgd"], ("int8",), cases=1, steps=20, seed=1).to_dict()
    b = drift.measure_drift(["sgd"], ("int8",), cases=1, steps=20, seed=1).to_dict()
    a.pop("seconds"), b.pop("seconds")
    assert a == b


def test_main_prints_the_table_writes_the_plot_and_the_json(tmp_path, capsys):
    plot = tmp_path / "drift.png"
    argv = ["--state-dtype", "int8", "--only", "lion", "--cases", "1", "--steps", "5", "--quiet",
            "--plot", str(plot)]
    assert accuracy.main(argv) == 0
    out = capsys.readouterr().out
    assert "lion" in out and "int8" in out and plot.stat().st_size > 0
    assert accuracy.main(argv + ["--json", "--no-plot"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "state_dtype drift" and doc["steps"] == 5 and doc["plot"] is None
    assert [r["state_dtype"] for r in doc["rows"]] == ["float32", "int8"]


@pytest.mark.parametrize("argv, says", [
    (["--steps", "10"], "give --state-dtype"),
    (["--state-dtype", "int8", "--dtype", "float64"], "drop --backend and --dtype"),
    (["--state-dtype", "int8", "--only", "adafactor"], "no moments to hold low"),
    (["--state-dtype", "int8", "--steps", "0"], "at least 1"),
    (["--state-dtype", "float16"], "invalid choice"),
])
def test_usage_errors_exit_2(argv, says, capsys):
    assert accuracy.main(argv + ["--quiet", "--no-plot"]) == 2
    assert says in capsys.readouterr().err
