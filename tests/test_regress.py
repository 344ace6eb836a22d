"""``toolkit.tools.regress``: record golden trajectories, compare them bit for bit, report changes.

Small on purpose: two optimizers, two dtypes, three steps of four elements.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from toolkit.optimizer import spec_of
from toolkit.tools import regress
from toolkit.tools._support import UsageError

OPTS, DTYPES, STEPS, SIZE = ["sgd", "adam"], ["float32", "float16-mp"], 3, 4
#: the entries recorded: each optimizer's conventions (its spec's) x DTYPES
ENTRIES = sum(len(spec_of(n).conventions) for n in OPTS) * len(DTYPES)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("regress") / "golden.json"
    regress.record(path, optimizers=OPTS, backends=["cpu"], dtypes=DTYPES, steps=STEPS,
                   size=SIZE, progress=False)
    return path


@pytest.fixture
def copy(recorded, tmp_path):
    dst = tmp_path / "copy.json"
    shutil.copy(recorded, dst)
    return dst


def _edit(path, fn):
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


def _entry(doc, eid):
    return next(e for e in doc["entries"] if e["id"] == eid)


def test_record_then_compare_is_bit_identical(recorded):
    (doc,) = regress.load(recorded)
    assert doc["format"] == "mxopt-regress" and doc["version"] == regress.VERSION
    ids = [e["id"] for e in doc["entries"]]
    assert len(ids) == ENTRIES and "adam/mxnet/cpu/float16-mp" in ids
    # the scope names the conventions known when recording (a scope without them, as the golden
    # files', covers mxnet and guide: tests/test_golden.py)
    assert doc["scope"]["conventions"] == ["mxnet", "guide", "pytorch", "paper"]
    prov = doc["provenance"]
    for key in ("numpy", "numba", "toolkit", "python", "platform", "cpu", "date", "command"):
        assert prov.get(key), key
    mp = _entry(doc, "adam/guide/cpu/float16-mp")
    assert mp["arrays"] == {"weight": "float16", "weight32": "float32", "mean": "float32",
                            "var": "float32"}
    assert len(mp["steps"]) == STEPS and all(len(h) == 4 for h in mp["w0"])
    report = regress.compare(recorded, progress=False)
    assert report.ok and report.exit_code == 0
    assert {e.status for e in report.entries} == {"same"}
    assert regress.main(["compare", str(recorded), "--quiet"]) == 0


def _flip_last_bit(doc, eid="adam/mxnet/cpu/float32", step=2, array="mean", index=1):
    e = _entry(doc, eid)
    h = e["steps"][step - 1][array][index]
    e["steps"][step - 1][array][index] = format(int(h, 16) ^ 1, f"0{len(h)}x")


def test_a_one_ulp_change_is_caught_and_located(copy, capsys):
    _edit(copy, _flip_last_bit)
    report = regress.compare(copy, progress=False)
    assert not report.ok and report.exit_code == 1
    bad = [e for e in report.entries if e.status != "same"]
    assert [e.id for e in bad] == ["adam/mxnet/cpu/float32"]
    (e,) = bad
    assert e.status == "changed" and e.max_ulps == 1 and e.first_step == 2
    (c,) = e.changes
    assert (c.step, c.array, c.dtype, c.max_ulps, c.elements, c.size, c.index) == (
        2, "mean", "float32", 1, 1, SIZE, 1)
    assert "1 ulp at step 2 mean[1]" in e.reason
    assert regress.main(["compare", str(copy), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "adam/mxnet/cpu/float32" in out and "CHANGED" in out and "step 2 mean" in out


def test_a_bound_of_one_ulp_accepts_it(copy):
    _edit(copy, _flip_last_bit)
    report = regress.compare(copy, bound=1, progress=False)
    assert report.ok
    assert report.by_id("adam/mxnet/cpu/float32").status == "within"
    assert regress.main(["compare", str(copy), "--bound", "1", "--quiet"]) == 0


def test_an_entry_allowance_accepts_it(copy):
    def fn(doc):
        _flip_last_bit(doc)
        _entry(doc, "adam/mxnet/cpu/float32")["ulps"] = 1
    _edit(copy, fn)
    assert regress.compare(copy, progress=False).ok


def test_json_report_parses(copy, capsys):
    _edit(copy, _flip_last_bit)
    assert regress.main(["compare", str(copy), "--json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] is False and rep["exit_code"] == 1 and rep["bound"] == 0
    assert rep["counts"]["changed"] == 1 and rep["counts"]["same"] == ENTRIES - 1
    (e,) = [e for e in rep["entries"] if e["status"] == "changed"]
    assert e["id"] == "adam/mxnet/cpu/float32" and e["max_ulps"] == 1 and e["first_step"] == 2
    assert e["changes"][0]["array"] == "mean" and e["changes"][0]["elements"] == 1
    assert rep["sources"][0]["provenance"]["numpy"] == np.__version__


@pytest.mark.parametrize("damage,message", [
    (lambda t: t[: len(t) // 2], "not valid JSON"),
    (lambda t: json.dumps({"optimizer": "adam", "trajectories": []}), "not a mxopt-regress"),
    (lambda t: t.replace('"version": 1', '"version": 99', 1), "newer"),
    (lambda t: t.replace('"steps": [', '"stepz": [', 1), "missing field 'steps'"),
])
def test_a_truncated_or_foreign_file_is_a_clear_error(copy, capsys, damage, message):
    copy.write_text(damage(copy.read_text()))
    with pytest.raises(regress.RegressFileError, match=message):
        regress.compare(copy, progress=False)
    assert regress.main(["compare", str(copy)]) == 2
    err = capsys.readouterr().err
    assert "regress: error:" in err and message in err


def test_corrupted_bits_are_a_file_error(copy):
    _edit(copy, lambda d: d["entries"][0]["steps"][0]["weight"].__setitem__(0, "zz"))
    with pytest.raises(regress.RegressFileError, match="malformed bits"):
        regress.load(copy)


def test_missing_file_and_usage_errors(tmp_path, recorded):
    assert regress.main(["compare", str(tmp_path / "nope.json")]) == 2
    assert regress.main(["compare"]) == 2
    assert regress.main(["record", str(recorded)]) == 2  # exists: refused without --force
    assert regress.main(["record", str(tmp_path / "x.json"), "--only", "nosuch"]) == 2
    assert regress.main(["compare", str(recorded), "--bound", "-1"]) == 2


@pytest.mark.parametrize("extra, says", [
    (["--only", "adm"], "no entry of optimizer 'adm'"),          # a typo compared 0 entries
    (["--only", "sgd,adm"], "no entry of optimizer 'adm'"),
    (["--only", "nag"], "no entry of optimizer 'nag'"),          # known, but not recorded here
    (["--backend", "cuda"], "no entry of backend 'cuda'"),       # the file has cpu only
    (["--backend", "reference"], "no entry of backend 'reference'"),
])
def test_a_selection_that_selects_nothing_is_a_usage_error(recorded, capsys, extra, says):
    assert regress.main(["compare", str(recorded), "--quiet", *extra]) == 2
    err = capsys.readouterr().err
    assert says in err and "it has" in err, err
    with pytest.raises(UsageError, match=says):
        regress.compare(recorded, progress=False, optimizers=[extra[1].split(",")[-1]]
                        if extra[0] == "--only" else None,
                        backends=[extra[1]] if extra[0] == "--backend" else None)


def test_a_selection_of_recorded_entries_still_compares(recorded):
    report = regress.compare(recorded, progress=False, optimizers=["SGD"], backends=["cpu"])
    assert report.ok and {e.id.split("/")[0] for e in report.entries} == {"sgd"}


def test_an_unavailable_backend_is_skipped_not_failed(copy, monkeypatch):
    def add_cuda(doc):
        e = dict(_entry(doc, "sgd/mxnet/cpu/float32"), backend="cuda",
                 id="sgd/mxnet/cuda/float32")
        doc["entries"].append(e)
        doc["scope"]["backends"].append("cuda")
    _edit(copy, add_cuda)
    monkeypatch.setattr(regress.comparing, "cuda_status", lambda: (False, None, "no GPU here (test)"))
    report = regress.compare(copy, progress=False)
    e = report.by_id("sgd/mxnet/cuda/float32")
    assert e.status == "skipped" and "no GPU here" in e.reason
    assert report.ok and report.counts()["skipped"] == 1


def test_missing_entries_are_reported_and_extra_ones_fail(copy):
    def fn(doc):
        doc["entries"] = [e for e in doc["entries"] if e["id"] != "sgd/guide/cpu/float32"]
        e = _entry(doc, "sgd/mxnet/cpu/float32")
        e["optimizer"], e["id"] = "gone", "gone/mxnet/cpu/float32"
    _edit(copy, fn)
    report = regress.compare(copy, progress=False)
    assert report.by_id("sgd/guide/cpu/float32").status == "missing"
    assert report.by_id("sgd/mxnet/cpu/float32").status == "missing"
    assert report.by_id("gone/mxnet/cpu/float32").status == "extra"
    assert not report.ok


def test_folder_layout_and_reference_backend(tmp_path):
    res = regress.record(tmp_path / "g", optimizers=["ftrl"], backends=["reference", "cpu"],
                         dtypes=["float64"], steps=2, size=3, progress=False)
    assert [p.rsplit("/", 1)[-1] for p in res.paths] == ["ftrl.json"]
    (doc,) = regress.load(tmp_path / "g")
    assert {e["id"] for e in doc["entries"]} == {
        f"ftrl/{c}/{b}/float64" for c in ("mxnet", "guide") for b in ("reference", "cpu")}
    assert all(e["encoding"] == ("float.hex" if e["backend"] == "reference" else "bits")
               for e in doc["entries"])
    assert regress.compare(tmp_path / "g", progress=False).ok


def test_ulp_distance():
    f32 = np.float32
    tiny = np.float32(np.finfo(f32).smallest_subnormal)
    a = np.array([0.0, -0.0, 1.0, -tiny, np.nan, np.nan, np.inf, 1.0], f32)
    b = np.array([-0.0, 0.0, np.nextafter(f32(1), f32(2)), tiny, np.nan, 1.0,
                  np.finfo(f32).max, -1.0], f32)
    d = regress.ulp_distance(a, b)
    assert d.tolist()[:7] == [0, 0, 1, 2, 0, np.inf, 1]
    assert d[7] == 2 * 0x3F800000
    big = np.array([np.finfo(np.float64).max]), np.array([-np.finfo(np.float64).max])
    assert regress.ulp_distance(*big)[0] == 2.0 * 0x7FEFFFFFFFFFFFFF


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("encoding", regress.ENCODINGS)
def test_encode_decode_round_trip(dtype, encoding):
    a = np.array([0.0, -0.0, 1.5, -3e-5, np.inf, 6e4], dtype)
    back = regress.decode(regress.encode(a, encoding), dtype, encoding)
    assert back.dtype == dtype and a.tobytes() == back.tobytes()


def test_a_scope_without_conventions_covers_mxnet_and_guide(copy):
    """A file recorded before the kernels had "pytorch" (its scope names no conventions, as
    the golden files') is complete without pytorch entries; one whose scope names "pytorch"
    is not."""
    def drop_pytorch(doc):
        doc["entries"] = [e for e in doc["entries"] if e["convention"] != "pytorch"]
    _edit(copy, drop_pytorch)
    missing = [e.id for e in regress.compare(copy, progress=False).entries
               if e.status == "missing"]
    assert missing and all("/pytorch/" in m for m in missing)

    def old_scope(doc):
        del doc["scope"]["conventions"]
    _edit(copy, old_scope)
    assert regress.compare(copy, progress=False).ok


def test_docs_entry_count_is_the_record_matrix():
    """docs/regression-testing.md's example counts what a default record on the CPU records
    (it read 140 after the kernels gained the "pytorch" convention's 32 entries)."""
    import re
    from pathlib import Path
    from toolkit.tools.regress.recording import entry_matrix, select_dtypes, select_optimizers
    text = (Path(__file__).resolve().parents[1] / "docs" / "regression-testing.md").read_text()
    n = len(entry_matrix(select_optimizers(None), ["cpu"], select_dtypes(None)))
    counts = {int(c) for c in re.findall(r"(\d+) entries", text.split("## Commands")[0])}
    assert counts == {n}
