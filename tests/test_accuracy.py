"""``toolkit.tools.accuracy``: the normalised-error report (tiny runs: two optimizers, a few cases)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from toolkit.optimizer import spec_of
from toolkit.tools import accuracy

pytest.importorskip("rich")
pytest.importorskip("matplotlib")

TINY = ["--only", "sgd,adam", "--backend", "cpu", "--dtype", "float32", "--dtype", "float16-mp",
        "--cases", "3", "--quiet"]
#: the rows of TINY: sgd and adam, each in its spec's conventions, x its two dtypes
TINY_ROWS = sum(len(spec_of(n).conventions) for n in ("sgd", "adam")) * 2


def test_measure_rows_and_statistics():
    res = accuracy.measure(["sgd", "adam"], backends=["cpu"], dtypes=["float32", "float16"],
                           cases=4, progress=False)
    assert [r.id for r in res.rows] == [f"{n}/{c}/cpu/{d}" for n in ("sgd", "adam")
                                        for c in spec_of(n).conventions
                                        for d in ("float32", "float16")]
    for r in res.rows:
        assert r.cases == 4 and 0 <= r.median <= r.p99 <= r.worst <= 1.0
        assert r.worst_case["case"] in range(4) and not r.failures
    assert res.ok and res.exit_code == 0
    again = accuracy.measure(["adam"], backends=["cpu"], dtypes=["float16"], cases=4,
                             progress=False)
    # each row draws from its own generator: the same numbers whichever rows run with it
    assert np.array_equal(again.rows[0].errors, res.by_id("adam/mxnet/cpu/float16").errors)


def test_main_prints_the_table_and_writes_the_plot(tmp_path, capsys):
    png = tmp_path / "acc.png"
    assert accuracy.main(TINY + ["--plot", str(png)]) == 0
    out = capsys.readouterr().out
    for name in ("sgd", "adam"):
        for conv in spec_of(name).conventions:
            for dtype in ("float32", "float16-mp"):
                assert any(name in line and conv in line and dtype in line and "ok" in line
                           for line in out.splitlines()), (name, conv, dtype)
    assert "1.0 is the bound" in out and f"plot: {png}" in out
    data = png.read_bytes()
    assert len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_parses(tmp_path, capsys):
    assert accuracy.main(TINY + ["--json", "--no-plot"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["exit_code"] == 0 and doc["cases"] == 3
    assert len(doc["rows"]) == TINY_ROWS and doc["plot"] is None
    row = doc["rows"][0]
    assert {"median", "p99", "worst", "cases", "worst_case"} <= set(row)
    assert doc["provenance"]["numpy"] == np.__version__


def test_a_worst_above_the_bound_exits_1(monkeypatch, tmp_path, capsys):
    real = accuracy.step_errors

    def too_far(opt, *args, **kw):
        res = real(opt, *args, **kw)
        if opt.convention == "guide" and type(opt).__name__ == "Adam":
            res["weight"] = (2.5,) + tuple(res["weight"][1:])
        return res
    monkeypatch.setattr(accuracy, "step_errors", too_far)
    assert accuracy.main(TINY + ["--no-plot"]) == 1
    out = capsys.readouterr().out
    assert "ABOVE" in out and "adam/guide/cpu/float32" in out
    assert accuracy.main(TINY + ["--json", "--plot", str(tmp_path / "a.png")]) == 1
    doc = json.loads(capsys.readouterr().out)
    bad = [r for r in doc["rows"] if not r["ok"]]
    assert {r["id"] for r in bad} == {"adam/guide/cpu/float32", "adam/guide/cpu/float16-mp"}
    assert all(r["worst"] == 2.5 and r["above_bound"] == 3 for r in bad)
    assert (tmp_path / "a.png").stat().st_size > 0


def test_a_case_that_raises_is_reported_and_exits_1(monkeypatch, capsys):
    def boom(*args, **kw):
        raise RuntimeError("kernel exploded")
    monkeypatch.setattr(accuracy, "step_errors", boom)
    res = accuracy.measure(["sgd"], backends=["cpu"], dtypes=["float32"], cases=2,
                           progress=False)
    assert not res.ok and res.rows[0].failures[0] == "case 0: RuntimeError: kernel exploded"
    assert accuracy.main(["--only", "sgd", "--dtype", "float32", "--cases", "2", "--quiet",
                          "--no-plot"]) == 1


@pytest.mark.parametrize("argv", [["--only", "nosuch"], ["--cases", "0"],
                                  ["--dtype", "float8"], ["--backend", "tpu"], ["--bogus"]])
def test_usage_errors_exit_2(argv):
    assert accuracy.main(argv + ["--no-plot", "--quiet"]) == 2


ONE = ["--only", "sgd", "--backend", "cpu", "--dtype", "float32", "--cases", "1", "--no-plot",
       "--quiet"]


def test_seed_random_is_taken_and_recorded(capsys):
    assert accuracy.main(ONE + ["--json", "--seed", "random"]) == 0
    seed = json.loads(capsys.readouterr().out)["seed"]
    assert type(seed) is int and seed >= 0
    assert accuracy.measure(["sgd"], backends=["cpu"], dtypes=["float32"], cases=1,
                            seed="random", progress=False).seed >= 0
    for bad in ("-1", "lucky"):
        assert accuracy.main(ONE + ["--seed", bad]) == 2
        assert "'random'" in capsys.readouterr().err
    with pytest.raises(accuracy.UsageError, match="'random'"):
        accuracy.measure(["sgd"], backends=["cpu"], dtypes=["float32"], cases=1, seed=None)


def test_the_install_hint_of_a_skipped_backend_keeps_its_extra(capsys, monkeypatch):
    import toolkit.backends
    hint = 'needs numba-cuda: pip install -e ".[cuda]" (the numba-cuda package)'
    monkeypatch.setattr(toolkit.backends, "cuda_available", lambda: (False, hint))
    monkeypatch.setenv("COLUMNS", "300")
    assert accuracy.main([a for a in ONE if a not in ("--backend", "cpu")]) == 0
    assert f"cuda: not measured ({hint})" in capsys.readouterr().out
