"""``mxopt bench`` (toolkit/tools/bench/): a tiny run's JSON structure, table, plots and exit codes.

Never a timing assertion: benchmarks are not timed tests. Tiny sizes, one repetition.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from toolkit.tools import bench
from toolkit.__main__ import _main

TINY = ["--sizes", "10,12", "--optimizers", "adam,sgd", "--repeats", "1", "--batch-ms", "0.2",
        "--no-resnet", "--no-many", "--torch-cases", "none", "--no-progress"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "suite.json"
    import io
    import contextlib
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = bench.main(TINY + ["--out", str(out), "--markdown", str(out) + ".md"])
    return code, out, buf.getvalue()


def test_tiny_run_json_structure(tiny_run):
    code, out, _ = tiny_run
    assert code == 0
    r = json.loads(out.read_text())
    assert r["device"] == "cpu"
    for key in ("cpu", "cores", "numba_threads", "versions", "date"):
        assert key in r["machine"]
    assert {"numpy", "numba", "toolkit"} <= set(r["machine"]["versions"])
    assert r["config"]["sizes_log2"] == [10, 12]
    assert r["config"]["settings"] == ["adam", "sgd", "sgd mom"]  # registry-name order
    # 3 settings x 2 dtypes x 2 sizes
    assert len(r["cases"]) == 12
    for c in r["cases"]:
        assert c["dtype"] in ("float32", "float16-mp")
        assert c["bytes_per_element"] > 0
        for impl in ("floor", "toolkit", "numpy"):
            m = c["impls"][impl]
            assert m["median_s"] > 0 and len(m["times_s"]) == 1 and m["calls_per_subbatch"] >= 1
        assert c["ratios"]["of_floor"] > 0 and c["ratios"]["vs_numpy"] > 0
    # the numpy column says which baseline it is: the reference's float64 step
    assert r["numpy_baseline"]["kind"] == "reference-float64"
    assert "float64" in r["numpy_baseline"]["what"] and "float64" in r["definitions"]["numpy"]
    adam = {(c["dtype"], c["log2n"]): c for c in r["cases"] if c["setting"] == "adam"}
    assert adam[("float32", 12)]["bytes_per_element"] == 28         # w, g, m, v: 16 read, 12 written
    assert adam[("float16-mp", 12)]["bytes_per_element"] == 2 + 2 + 8 * 3  # g16, w16, master, m, v
    assert set(r["cheap_call_us"]) == {"sgd", "sgd mom", "adam"}
    keys = [t["key"] for t in r["targets"]]
    assert keys == ["floor_f32", "torch_fused", "floor_f16", "cheap_call", "resnet50"]
    by = {t["key"]: t for t in r["targets"]}
    assert by["floor_f32"]["met"] is None and "not measured" in by["floor_f32"]["why"]
    assert by["cheap_call"]["met"] in (True, False) and by["cheap_call"]["measured"] > 0
    assert r["resnet50"] is None and r["many_tensors"] is None
    assert r["wall_s"] > 0


def test_tiny_run_torch_columns(tiny_run):
    _, out, _ = tiny_run
    r = json.loads(out.read_text())
    if r["torch"] is None:
        assert "torch" in r["torch_missing"]
        return
    c = next(c for c in r["cases"] if c["setting"] == "adam" and c["dtype"] == "float32")
    for impl in ("torch fused", "torch foreach"):
        assert "median_s" in c["impls"][impl] or c["impls"][impl]["status"].startswith("n/a")
    h = next(c for c in r["cases"] if c["setting"] == "adam" and c["dtype"] == "float16-mp")
    assert h["impls"]["torch fused"]["status"].startswith("n/a")


def test_tiny_run_table_and_plots(tiny_run):
    _, out, text = tiny_run
    assert "of the floor" in text and "targets" in text and "sgd mom" in text
    assert "wrote" in text
    md = open(str(out) + ".md").read()
    assert "| adam |" in md and "| target | measured | result |" in md
    assert "| vs numpy f64 ref |" in md and "backend='reference'" in md
    assert "vs numpy f64 ref" in text
    # a JSON recorded before the baseline was derived says so when reported again
    old = json.loads(out.read_text())
    del old["numpy_baseline"]
    assert "| vs numpy f32 |" in bench.markdown_summary(old)
    stem = str(out)[:-len(".json")]
    for suffix in ("_bandwidth.png", "_ratios.png"):
        with open(stem + suffix, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_without_torch_says_so_and_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench.peers, "import_torch",
                        lambda: (None, "torch is not installed (test)"))
    out = tmp_path / "s.json"
    assert bench.main(["--sizes", "10", "--optimizers", "adagrad", "--dtypes", "float32",
                       "--repeats", "1", "--batch-ms", "0.1", "--no-resnet", "--no-plot",
                       "--no-progress", "--out", str(out)]) == 0
    assert "torch is not installed (test)" in capsys.readouterr().out
    r = json.loads(out.read_text())
    assert r["torch"] is None and r["torch_missing"] == "torch is not installed (test)"
    assert set(r["cases"][0]["impls"]) == {"floor", "toolkit", "numpy"}
    assert r["cases"][0]["ratios"]["vs_torch_fused"] is None


def test_trainer_case_structure():
    shapes = bench.resnet50_shapes()
    assert len(shapes) == 161 and sum(int(np.prod(s)) for s in shapes) == 25_557_032
    torch, _ = bench.import_torch()
    row = bench.trainer_case("cpu", [(8, 3, 3, 3), (8,), (8,), (10, 8)], 1, torch)
    assert row["tensors"] == 4 and row["elements"] == 216 + 8 + 8 + 80
    assert row["toolkit_ms"] > 0 and row["of_floor"] > 0
    assert row["toolkit_launches_per_step"] >= 1
    if torch is not None:
        assert row["vs_torch"] > 0 and row["torch_kind"] in ("fused", "foreach")
    targets = bench.evaluate_targets("cpu", [], row)
    assert targets[-1]["key"] == "resnet50" and targets[-1]["met"] in (
        (True, False) if torch is not None else (None,))


def test_many_tensor_case_structure():
    """The many-tensor case: the step without the marking of the gradients, the host time
    against its budget (50 us + 0.2 us per parameter), and its three targets."""
    shapes = bench.resnet.many_tensor_shapes(40, 16)
    assert shapes == [(16,)] * 40 and len(bench.resnet.many_tensor_shapes()) == 2000
    torch, _ = bench.import_torch()
    row = bench.trainer_case("cpu", shapes, 1, torch)
    assert row["tensors"] == 40 and row["elements"] == 640
    assert 0 < row["step_ms"] and row["toolkit_ms"] > 0 and row["marking_ms"] > 0
    assert row["step_of_floor"] > 0 and row["host_us"] > 0
    assert row["host_budget_us"] == pytest.approx(50 + 0.2 * 40)
    if torch is not None:
        assert row["step_vs_torch"] > 0
        assert row.get("step_vs_deepspeed", 1) > 0 and ("deepspeed" in row or
                                                         "deepspeed_version" in row)
    targets = {t["key"]: t for t in bench.evaluate_targets("cpu", [], None, row)}
    assert targets["many_floor"]["measured"] == row["step_of_floor"]
    assert targets["many_host"]["met"] == (row["host_us"] <= row["host_budget_us"])
    assert targets["many_torch"]["met"] in ((True, False) if torch is not None else (None,))
    lines = bench.report.trainer_lines({"many_tensors": row})
    assert lines and "host time" in lines[0]


def test_torch_case_structure():
    """The toolkit.torch case: toolkit.torch.Adam against torch's fused Adam over the same
    tensors, fresh gradients each step in both, the assignment of the gradients apart, and its
    targets; the three lists of tensors it steps."""
    torch, _ = bench.import_torch()
    if torch is None:
        pytest.skip("torch is not installed")
    labels = [label for label, _ in bench.torch_case.TORCH_CASES]
    assert labels == ["resnet50", "many_tensors", "one_2^24", "mlp_64_32_10",
                      "mlp_64_32_10_maximize", "bf16_2^12", "bf16_2^16", "bf16_2^22"]
    shapes = dict(bench.torch_case.TORCH_CASES)
    assert len(shapes["resnet50"]()) == 161 and len(shapes["many_tensors"]()) == 2000
    assert shapes["one_2^24"]() == [(1 << 24,)]
    assert shapes["mlp_64_32_10"]() == shapes["mlp_64_32_10_maximize"]() == [
        (32, 64), (32,), (10, 32), (10,)]
    assert [shapes[f"bf16_2^{k}"]() for k in (12, 16, 22)] == [[(1 << k,)] for k in (12, 16, 22)]
    options = bench.torch_case.TORCH_CASE_OPTIONS
    assert options["mlp_64_32_10"]["threads"] == 1 and \
        options["mlp_64_32_10"]["min_repeats"] >= 200
    assert options["mlp_64_32_10_maximize"]["maximize"] is True
    assert all(options[f"bf16_2^{k}"]["dtype"] == "bfloat16" for k in (12, 16, 22))
    threads = torch.get_num_threads()
    small = bench.torch_case.torch_case("cpu", [(16,)] * 4, 1, torch, maximize=True, threads=1,
                                        min_repeats=2)
    assert small["maximize"] is True and small["torch_threads"] == 1 and small["repeats"] == 2
    assert torch.get_num_threads() == threads        # put back
    bf16 = bench.torch_case.torch_case("cpu", [(64,)], 1, torch, dtype="bfloat16")
    assert bf16["dtype"] == "bfloat16" and bf16["bytes_per_element"] == 28 and \
        bf16["torch_bytes_per_element"] == 14 and bf16["of_floor"] > 0
    row = bench.torch_case.torch_case("cpu", [(16,)] * 40, 1, torch)
    assert row["tensors"] == 40 and row["elements"] == 640 and row["bytes_per_element"] == 28
    assert row["toolkit_torch_ms"] > 0 and row["torch_ms"] > 0 and row["regrad_ms"] > 0
    assert row["vs_torch"] > 0 and row["of_floor"] > 0
    assert row["torch_kind"] in ("fused", "foreach")
    adapter = {"many_tensors": row}
    targets = {t["key"]: t for t in bench.evaluate_targets("cpu", [], None, None, adapter)}
    assert targets["torch_many"]["measured"] == row["vs_torch"]
    assert targets["torch_many"]["met"] == (row["vs_torch"] >= 3.0)
    assert targets["torch_resnet50"]["met"] is None and "did not run" in \
        targets["torch_resnet50"]["why"]
    lines = bench.report.adapter_lines({"toolkit_torch": adapter})
    assert len(lines) == 1 and "toolkit.torch.Adam, many_tensors" in lines[0]


def test_a_prepared_steps_preparation_is_not_timed():
    """``timing.Prepared``: ``prepare()`` runs (untimed) before every timed ``run()``. (A run
    of 1 ms makes one call per sub-batch: an instant run made hundreds, each after a prepare
    of 20 ms, and the test took 17 s.)"""
    import time
    calls = {"prepare": 0, "run": 0}

    def prepare():
        calls["prepare"] += 1
        time.sleep(0.02)

    def run():
        assert calls["prepare"] == calls["run"] + 1  # prepared before each run
        calls["run"] += 1
        time.sleep(0.001)
    times, _ = bench.timing.measure({"p": bench.timing.Prepared(prepare, run)}, 2, 0.001,
                                    lambda: None)
    assert calls["run"] >= 3 and all(t < 0.01 for t in times["p"]), times


def test_an_unknown_torch_case_is_refused_before_the_run(capsys):
    assert bench.main(TINY[:-4] + ["--torch-cases", "many_tensors,resnet", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "unknown --torch-cases ['resnet']" in err and "one_2^24" in err


def test_every_setting_has_a_numpy_baseline_and_a_floor():
    """Every optimizer has a setting (read from its spec), and every setting builds: the
    toolkit's state, the numpy baseline (derived from the reference module: it steps the
    weight as the toolkit does) and a floor kernel for its traffic (without timing)."""
    from toolkit import optimizer
    names = {s.name for s in bench.SETTINGS}
    builtin = {k for k, c in optimizer.registry().items() if c.__module__.startswith("toolkit.")}
    assert names == builtin  # every optimizer of the toolkit has a setting
    assert [s.label for s in bench.SETTINGS] == [
        b.label for spec in optimizer.specs().values() for b in spec.bench_settings()]
    n = 2 * bench.ROW_COLS                      # a matrix weight: two rows
    w = np.linspace(-1, 1, n, dtype=np.float32)
    g = np.linspace(1, -0.5, n, dtype=np.float32) + np.float32(0.01)  # no exact zero
    for s in bench.SETTINGS:
        opt = bench.make_optimizer(s, "cpu")
        tr = bench.traffic(s, False)
        shape = bench.weight_shape(s, n)
        wk = w.copy().reshape(shape)
        # two steps: ADOPT's first only initialises its second moment (the weight moves on the
        # second), and the second is the steady step a benchmark times
        sk = opt.create_state(0, w.copy().reshape(shape))
        for _ in range(2):
            opt.update(0, wk, g.reshape(shape), sk)
        for half in (False, True):
            ww = (w.astype(np.float16) if half else w.copy()).reshape(shape)
            gg = (g.astype(np.float16) if half else g).reshape(shape)
            step = bench.numpy_baseline(s, half, ww, gg)
            assert callable(step), (s.label, step)
            step()
            step()
            assert ww.dtype == (np.float16 if half else np.float32), s.label
            assert np.isfinite(ww).all() and not np.array_equal(ww, w.reshape(shape)), s.label
            if not half:  # the reference's step, rounded to float32: the kernel's to a few ulps
                np.testing.assert_allclose(ww, wk, rtol=1e-5, atol=1e-6, err_msg=s.label)
        bench.cpu_floor(n, tr, False, g)()
        bench.cpu_floor(n, bench.traffic(s, True), True, g.astype(np.float16))()


def test_traffic_reads_the_spec():
    """The traffic model comes from the spec: the host buffers a step touches
    (``traffic_buffers``: LBSGD's accumulator only where ``batch_scale`` > 1 fills it) and the
    first pass (``first_pass``: LBSGD's 'lars' norms read the weight, and the accumulator when
    it accumulates)."""
    def tr(**kw):
        t = bench.traffic(bench.Setting("t", "lbsgd", dict(momentum=0.9, **kw), None), False)
        return t.rw, t.first_reads, t.bytes
    assert tr() == (2, 0, 4 + 8 * 2)                                  # w, mom
    assert tr(batch_scale=2) == (3, 0, 4 + 8 * 3)                     # w, mom, accumulator
    assert tr(warmup_strategy="lars") == (2, 1, 4 + 8 * 2 + 4 + 4)    # + w, g read first
    assert tr(warmup_strategy="lars", batch_scale=2) == (3, 2, 4 + 8 * 3 + 8 + 4)


def test_the_floor_moves_a_scratch_array_and_a_side_state(monkeypatch):
    """The traffic of a step whose passes write and read a scratch array (the spec's
    ``gradient_passes``) and whose state is not shaped like the weight (``side_state``):
    Adafactor's float32 step reads the gradient and the weight and writes its direction in its
    first pass, then reads the weight and the direction and writes the weight (24 bytes an
    element), and reads and writes its row, column and vector statistics (for the shapes
    asked for). The floor moves each: the first pass's reads, the scratch written (and read
    again where a spec reads it more: Muon's), the main kernel, the side state."""
    adafactor, muon = (next(x for x in bench.SETTINGS if x.name == name)
                       for name in ("adafactor", "muon"))
    tr = bench.traffic(adafactor, False, [(6, 5), (7,), (2, 3, 3)])
    assert (tr.rw, tr.first_reads, tr.bytes, tr.scratch) == (1, 1, 24, 1)
    assert tr.side == (6 + 5) + 7 + 2 * (3 + 3)
    assert tr.total(100) == 24 * 100 + bench.SIDE_BYTES * tr.side
    assert bench.traffic(adafactor, False).side == 0 and bench.traffic(muon, False).side == 0
    # float16 weights: the gradient read twice at 2 bytes, the float32 master read and written,
    # the float16 weight written, the master read by the first pass, the float32 scratch
    assert bench.traffic(adafactor, True).bytes == 2 + 8 + 2 + (4 + 2) + 4
    keys = []
    real = bench.floor.floor_kernel

    def spied(key, parallel):  # each pass as it runs
        kernel = real(key, parallel)
        return lambda *a: (keys.append(key), kernel(*a))[1]
    monkeypatch.setattr(bench.floor, "floor_kernel", spied)
    bench.cpu_floor(64, tr, False, np.ones(64, np.float32))()
    assert keys == [("read", 1), ("fill",), (1, False), ("side",)]
    keys.clear()
    tm = bench.traffic(muon, False)
    bench.cpu_floor(64, tm, False, np.ones(64, np.float32))()
    assert tm.scratch == 3 and keys == [("read", 1), ("fill",), ("read", 0), ("read", 0),
                                         (tm.rw, False)]


def test_a_plug_in_optimizer_is_benchmarked_from_its_spec():
    """An optimizer registered after ``toolkit.tools.bench`` was imported has its spec's rows in
    ``SETTINGS`` and its traffic from the spec; without a reference module its numpy baseline
    is "n/a" with the reason (the numpy baseline is derived from the reference, never written)."""
    from toolkit import optimizer
    from toolkit.optimizer import BenchSetting, Spec

    class BenchPlugIn(optimizer.SGD):
        spec = Spec(name="benchplugin", bench=(BenchSetting("benchplugin mom", {"momentum": 0.9}),
                                               BenchSetting("benchplugin", {"momentum": 0.0},
                                                            quick=True)),
                    first_pass=1, traffic_buffers=0)
    optimizer.register(BenchPlugIn)
    try:
        rows = [s for s in bench.SETTINGS if s.name == "benchplugin"]
        assert [s.label for s in rows] == ["benchplugin mom", "benchplugin"]
        assert [s.label for s in bench.select_settings(["benchplugin"], quick=True)] == [
            "benchplugin mom", "benchplugin"]
        assert "benchplugin" in [s.label for s in bench.select_settings(quick=True)]
        tr = bench.traffic(rows[0], False)
        assert (tr.rw, tr.first_reads, tr.bytes) == (2, 1, 4 + 16 + 4 + 4)
        w = np.ones(8, np.float32)
        why = bench.numpy_baseline(rows[0], False, w, w)
        assert isinstance(why, str) and why.startswith("n/a") and "reference" in why
    finally:
        optimizer.unregister("benchplugin")
    assert "benchplugin" not in {s.name for s in bench.SETTINGS}


def test_exit_codes(capsys, monkeypatch):
    # no GPU here (or only the simulator): --device cuda exits 2 with the reason
    from toolkit import backends
    ok, _ = backends.cuda_available()
    import os
    if ok and not os.environ.get("NUMBA_ENABLE_CUDASIM"):
        pytest.skip("a real GPU is present")
    assert bench.main(["--device", "cuda", "--no-progress"]) == 2
    assert "--device cuda cannot run" in capsys.readouterr().err
    assert bench.main(["--optimizers", "nosuch"]) == 2
    assert "unknown optimizer" in capsys.readouterr().err
    assert bench.main(["--dtypes", "float64"]) == 2
    assert bench.main(["--sizes", "x"]) == 2
    assert bench.main(["--help"]) == 0
    # wired into the command line
    assert _main(["bench", "--device", "cuda"]) == 2


def test_cuda_refuses_the_simulator(monkeypatch, capsys):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    monkeypatch.setattr("toolkit.backends.cuda_available", lambda: (True, "simulator"))
    assert bench.main(["--device", "cuda"]) == 2
    assert "simulator" in capsys.readouterr().err


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: --quick narrowed to seconds: one setting, one small size, one repetition
QUICK = ["--quick", "--optimizers", "sgd", "--sizes", "10", "--repeats", "1", "--batch-ms", "0.2",
         "--no-resnet", "--no-torch", "--no-progress"]


def _scratch_clone(tmp_path):
    """A git clone of this checkout with the working tree's changes on top (committed in the
    clone, so the code under test is this one and the clone starts clean)."""
    git = shutil.which("git")
    if git is None or not os.path.exists(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout (or no git)")
    clone = tmp_path / "clone"

    def run(*args, cwd=ROOT):
        return subprocess.run([git, *args], cwd=cwd, check=True, timeout=120,
                              capture_output=True, text=True).stdout

    run("clone", "-q", "--no-hardlinks", ROOT, str(clone))
    changed = run("diff", "HEAD", "--name-only").split() + run(
        "ls-files", "--others", "--exclude-standard").split()
    for path in changed:
        src = os.path.join(ROOT, path)
        if os.path.exists(src):
            os.makedirs(os.path.dirname(os.path.join(clone, path)), exist_ok=True)
            shutil.copy2(src, os.path.join(clone, path))
        elif os.path.exists(os.path.join(clone, path)):
            os.remove(os.path.join(clone, path))
    run("add", "-A", cwd=clone)
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m",
        "the working tree", cwd=clone)
    assert run("status", "--porcelain", cwd=clone) == ""
    return clone, lambda: run("status", "--porcelain", "--untracked-files=all", cwd=clone)


def test_quick_run_never_writes_over_the_recorded_results(tmp_path):
    """`mxopt bench --quick` as a new user runs it in a fresh clone: the JSON and PNGs land in
    --out, or in the working directory, and the clone's recorded benchmarks/results/ (and every
    other tracked file) stay as committed."""
    clone, status = _scratch_clone(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(clone))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "toolkit", "bench", *QUICK]
    done = subprocess.run(cmd + ["--out", str(out)], cwd=clone, env=env, timeout=600,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert status() == ""
    assert sorted(os.listdir(out)) == ["suite_cpu.json", "suite_cpu_bandwidth.png",
                                       "suite_cpu_ratios.png"]
    assert f"wrote {out / 'suite_cpu.json'}" in " ".join(done.stdout.split())
    # no --out: the working directory (here the clone's root: new files, nothing tracked touched)
    done = subprocess.run(cmd, cwd=clone, env=env, timeout=600, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    # the three new files, ignored by the checkout's .gitignore (the clone stays clean)
    assert status() == ""
    assert sorted(p.name for p in clone.iterdir() if p.name.startswith("suite_cpu")) == [
        "suite_cpu.json", "suite_cpu_bandwidth.png", "suite_cpu_ratios.png"]
    ignored = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=clone,
                             capture_output=True, text=True, timeout=60).stdout.splitlines()
    assert {"!! suite_cpu.json", "!! suite_cpu_bandwidth.png", "!! suite_cpu_ratios.png"} <= set(
        ignored)
    assert json.loads((clone / "suite_cpu.json").read_text())["config"]["sizes_log2"] == [10]
