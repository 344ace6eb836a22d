"""``mxopt regress`` of a user's optimizer (issue 33 item 7): a numpy Adam recorded on the
oracle's cases with the reference beside each step, then compared unchanged (every entry the
same) and with its weight moved by one ulp in one place (that entry, 1 ulp, away from the
reference; the reverse, toward it), through the Python API and the command line."""
from __future__ import annotations

import json
import re
import shlex
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from toolkit.oracle import regression
from toolkit.tools import regress
from toolkit.tools._support import UsageError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: the guide's Adam of docs/oracle.md, in numpy
ADAM = textwrap.dedent('''\
    import numpy as np

    def make_step(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon):
        w, m, v, t = w.copy(), np.zeros_like(w), np.zeros_like(w), [0]
        def step(g):
            t[0] += 1
            g = rescale_grad * g
            g = g if clip_gradient is None else np.clip(g, -clip_gradient, clip_gradient)
            g = g + wd * w
            m[...] = beta1 * m + (1.0 - beta1) * g
            v[...] = beta2 * v + (1.0 - beta2) * g * g
            w[...] = w - learning_rate * (m / (1.0 - beta1 ** t[0])) / (
                np.sqrt(v / (1.0 - beta2 ** t[0])) + epsilon)
            return w
        return step
    ''')

CASES = 6


def _adam():
    space = {}
    exec(compile(ADAM, "adam.py", "exec"), space)  # noqa: S102 - the test's own Adam
    return space["make_step"]


def _nudged(make_step, w0_bits, at_step, element, away_from):
    """``make_step`` whose weight, in the case that starts from ``w0_bits``, is moved by one
    ulp at step ``at_step`` (its last), element ``element``, away from ``away_from``."""
    def make(w, **hyper):
        inner = make_step(w, **hyper)
        mine = regress.encode(w) == w0_bits
        t = [0]

        def step(g):
            t[0] += 1
            out = inner(g)
            if mine and t[0] == at_step:
                out = out.copy()
                flat = out.reshape(-1)
                x = flat[element]
                way = np.inf if float(x) >= float(away_from) else -np.inf
                flat[element] = np.nextafter(x, np.float32(way))
            return out
        return step
    return make


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("user") / "adam.json")
    res = regress.record_user(path, _adam(), "adam", convention="guide", dtype="float32",
                              cases=CASES, target=None)
    return path, res


def _place(path):
    """``(entry, step, element, stored, reference)``: the first case of the file with 2 steps
    or more, its last step, the first element recorded there off the reference, the value
    recorded there and the reference's."""
    (doc,) = regress.load(path)
    for e in doc["entries"]:
        k = len(e["steps"])
        stored = regress.decode(e["steps"][-1]["weight"], np.float32)
        ref = regress.decode(e["reference"][-1], np.float64, "float.hex")
        off = np.flatnonzero(stored.astype(np.float64) != ref)
        if k >= 2 and off.size:
            i = int(off[0])
            return e, k, i, stored[i], ref[i]
    raise AssertionError("no case with 2 steps and an element off the reference")


def test_the_file_holds_the_oracles_cases_and_the_reference(recorded):
    path, res = recorded
    (doc,) = regress.load(path)
    assert doc["version"] == regress.USER_VERSION == 2
    assert res.entries == len(doc["entries"]) == CASES
    drawn = regression.cases("adam", count=CASES, dtype="float32")
    for e, (k, case) in zip(doc["entries"], drawn):
        assert e["id"] == f"adam/guide/user/float32/{k}" and e["case"] == k
        assert e["hyper"] == case.hyper
        w0 = regress.decode(e["w0"], np.float32).astype(np.float64)
        assert np.array_equal(w0, case.weight.reshape(-1))
        refs = regression.reference_weights("adam", case, convention="guide", dtype="float32")
        for stored, ref in zip(e["reference"], refs):
            assert regress.decode(stored, np.float64, "float.hex").tolist() == \
                ref.reshape(-1).tolist()
        # the guide's Adam is the reference up to rounding: a few ulps, never far
        assert all(isinstance(x, int) and x < 64 for x in e["error_ulps"])


def test_unchanged_implementation_is_all_same(recorded):
    path, _ = recorded
    rep = regress.compare(path, make_step=_adam(), progress=False)
    assert rep.ok and rep.exit_code == 0
    assert rep.counts()["same"] == CASES and len(rep.entries) == CASES


def test_one_ulp_away_from_the_reference_is_named(recorded):
    path, _ = recorded
    e, k, i, stored, ref = _place(path)
    moved = _nudged(_adam(), e["w0"], k, i, away_from=ref)
    rep = regress.compare(path, make_step=moved, progress=False)
    assert not rep.ok and rep.exit_code == 1
    changed = [r for r in rep.entries if r.status != "same"]
    assert [r.id for r in changed] == [e["id"]]
    (r,) = changed
    assert r.status == "changed" and r.max_ulps == 1
    assert (r.worst.step, r.worst.array, r.worst.index, r.worst.elements) == (k, "weight", i, 1)
    d = r.reference
    assert (d.direction, d.step, d.index, d.toward, d.away) == ("away", k, i, 0, 1)
    assert d.now_error_ulps > d.stored_error_ulps > 0
    assert "away from the reference" in r.reason
    assert rep.to_dict()["entries"][rep.entries.index(r)]["reference"]["direction"] == "away"
    # within a bound of 1 ulp it passes, and still says which way it went
    rep1 = regress.compare(path, make_step=moved, bound=1, progress=False)
    assert rep1.ok and rep1.by_id(e["id"]).status == "within"
    assert rep1.by_id(e["id"]).reference.direction == "away"


def test_moving_back_is_toward_the_reference(recorded, tmp_path):
    path, _ = recorded
    e, k, i, stored, ref = _place(path)
    moved = _nudged(_adam(), e["w0"], k, i, away_from=ref)
    worse = str(tmp_path / "worse.json")
    regress.record_user(worse, moved, "adam", convention="guide", cases=CASES)
    rep = regress.compare(worse, make_step=_adam(), progress=False)
    (r,) = [r for r in rep.entries if r.status != "same"]
    assert r.id == e["id"] and r.max_ulps == 1
    assert (r.reference.direction, r.reference.toward, r.reference.away) == ("toward", 1, 0)
    # the nudged file was one ulp further off than the original: now its error again
    assert r.reference.stored_error_ulps > r.reference.now_error_ulps


def test_a_kernel_file_is_still_version_1_and_a_user_entry_needs_version_2(recorded, tmp_path):
    path, _ = recorded
    with open(path) as f:
        text = f.read()
    old = tmp_path / "old.json"
    old.write_text(text.replace('"version": 2', '"version": 1', 1))
    with pytest.raises(regress.RegressFileError, match="unknown backend"):
        regress.load(str(old))
    doc = regress.document([], scope={})
    assert doc["version"] == regress.VERSION == 1


def test_a_file_with_a_broken_user_field_is_refused(recorded, tmp_path):
    path, _ = recorded
    doc = json.load(open(path))
    doc["entries"][0]["reference"] = doc["entries"][0]["reference"][:-1] + [["zz"]]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(regress.RegressFileError, match="reference"):
        regress.load(str(bad))


def test_an_implementation_that_fails_now_is_an_error_entry(recorded):
    path, _ = recorded

    def broken(w, **hyper):
        def step(g):
            raise ZeroDivisionError("oops")
        return step
    rep = regress.compare(path, make_step=broken, progress=False)
    assert rep.exit_code == 1 and rep.counts()["error"] == CASES
    assert "ZeroDivisionError: oops" in rep.entries[0].reason


def test_recording_a_failing_implementation_is_refused(tmp_path):
    def wrong_dtype(w, **hyper):
        return lambda g: w.astype(np.float64)
    with pytest.raises(UsageError, match="case 0 of adam cannot be recorded: step 1 returned "
                                         "float64 for float32"):
        regress.record_user(str(tmp_path / "x.json"), wrong_dtype, "adam", cases=2)
    assert not os.path.exists(tmp_path / "x.json")


def test_pinned_names_the_implementation_does_not_take_are_not_passed(tmp_path):
    def make_sgd(w, learning_rate, wd):  # no rescale_grad, clip_gradient, momentum
        w = w.copy()

        def step(g):
            w[...] = w - learning_rate * (g + wd * w)
            return w
        return step
    path = str(tmp_path / "sgd.json")
    fixed = dict(rescale_grad=1.0, clip_gradient=None, momentum=0.0)
    regress.record_user(path, make_sgd, "sgd", convention="guide", fixed=fixed, cases=3)
    (doc,) = regress.load(path)
    assert doc["scope"]["fixed"] == fixed
    assert all(e["fixed"] == sorted(fixed) for e in doc["entries"])
    assert regress.compare(path, make_step=make_sgd, progress=False).counts()["same"] == 3


# ----------------------------------------------------------------------------------------------
# the command line
# ----------------------------------------------------------------------------------------------
def _mxopt(*args, cwd):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "toolkit", "regress", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


def test_command_line_records_and_compares_a_target(tmp_path, recorded):
    (tmp_path / "my_adam.py").write_text(ADAM)
    r = _mxopt("record", "adam.json", "--target", "my_adam.py:make_step", "--optimizer", "adam",
               "--convention", "guide", "--cases", str(CASES), "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"recorded {CASES} entries (user) in ")
    with open(tmp_path / "adam.json") as f, open(recorded[0]) as g:
        mine, theirs = json.load(f), json.load(g)
    assert mine["entries"] == theirs["entries"]  # the same numbers as the API's
    assert mine["scope"]["target"] == "my_adam.py:make_step"
    r = _mxopt("compare", "adam.json", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{CASES} entries: {CASES} same; bound 0 ulps; OK" in r.stdout
    # another implementation given by --target: one ulp at the last step of case 0
    e, k, i, stored, ref = _place(str(tmp_path / "adam.json"))
    (tmp_path / "moved.py").write_text(
        ADAM + textwrap.dedent(f'''
        _inner = make_step

        def moved(w, **hyper):
            step = _inner(w, **hyper)
            t = [0]
            mine = w.view(np.uint32).tolist() == {[int(h, 16) for h in e["w0"]]}

            def nudged(g):
                t[0] += 1
                out = step(g).copy()
                if mine and t[0] == {k}:
                    x = out.reshape(-1)[{i}]
                    way = np.inf if float(x) >= {float(ref)!r} else -np.inf
                    out.reshape(-1)[{i}] = np.nextafter(x, np.float32(way))
                return out
            return nudged
        '''))
    r = _mxopt("compare", "adam.json", "--target", "moved.py:moved", "--quiet", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "away from the reference" in r.stdout and e["id"] in r.stdout
    assert f"{CASES} entries: {CASES - 1} same, 1 changed" in r.stdout
    r = _mxopt("compare", "adam.json", "--target", "moved.py:moved", "--json", cwd=tmp_path)
    rep = json.loads(r.stdout)
    (moved,) = [x for x in rep["entries"] if x["status"] != "same"]
    assert moved["id"] == e["id"] and moved["max_ulps"] == 1
    assert moved["reference"]["direction"] == "away"


@pytest.mark.parametrize("args, message", [
    (["--target", "my_adam.py:make_step"], "--target needs --optimizer"),
    (["--optimizer", "adam"], "--optimizer names the optimizer a --target implements"),
    (["--target", "my_adam.py:make_step", "--optimizer", "adam", "--dtype", "float16-mp"],
     "one --dtype of float16, float32, float64"),
    (["--target", "nope.py:make_step", "--optimizer", "adam"], "no such file"),
    (["--target", "my_adam.py:make_step", "--optimizer", "adamm"], "unknown optimizer"),
    (["--target", "my_adam.py:make_step", "--optimizer", "adam", "--convention", "nope"],
     "not 'nope'"),
])
def test_command_line_usage_errors(tmp_path, args, message):
    (tmp_path / "my_adam.py").write_text(ADAM)
    r = _mxopt("record", "x.json", "--quiet", *args, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr
    assert not (tmp_path / "x.json").exists()


# ----------------------------------------------------------------------------------------------
# the pytest fixture
# ----------------------------------------------------------------------------------------------
def _pytest(project, *args):
    # the plugin by name, not through the installed entry points (an install that predates
    # the fixture has none; one that has it would register it twice)
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "toolkit.tools.regress.pytest_plugin", "--rootdir",
                           str(project), *args, str(project / "test_my_adam.py")],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)


def test_the_fixture_records_then_compares_and_names_what_moved(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "my_adam.py").write_text(ADAM)
    (project / "test_my_adam.py").write_text(textwrap.dedent(f'''\
        from my_adam import make_step

        def test_adam_has_not_moved(mxopt_regress):
            rep = mxopt_regress(make_step, "adam", "golden/my_adam.json", convention="guide",
                                cases={CASES})
            assert rep.counts()["same"] == {CASES}
        '''))
    golden = project / "golden" / "my_adam.json"
    p = _pytest(project)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"recorded {CASES} entries of a user's adam into {golden}" in p.stdout
    assert "commit it; the next run compares" in p.stdout
    assert golden.exists()
    p = _pytest(project)
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout + p.stderr
    # one ulp moved at one place: the test fails and says where, by how much, which way
    e, k, i, stored, ref = _place(str(golden))
    (project / "my_adam.py").write_text(ADAM + textwrap.dedent(f'''
        _inner = make_step

        def make_step(w, **hyper):
            step = _inner(w, **hyper)
            t = [0]
            mine = w.view(np.uint32).tolist() == {[int(h, 16) for h in e["w0"]]}

            def nudged(g):
                t[0] += 1
                out = step(g).copy()
                if mine and t[0] == {k}:
                    x = out.reshape(-1)[{i}]
                    way = np.inf if float(x) >= {float(ref)!r} else -np.inf
                    out.reshape(-1)[{i}] = np.nextafter(x, np.float32(way))
                return out
            return nudged
        '''))
    p = _pytest(project)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"{CASES} entries: {CASES - 1} same, 1 changed; bound 0 ulps" in p.stdout
    assert f"{e['id']}: changed: 1 ulp at step {k} weight[{i}]" in p.stdout
    assert "away from the reference" in p.stdout
    # recorded again on purpose: the moved numbers are the golden ones now
    p = _pytest(project, "--mxopt-record")
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout + p.stderr
    (doc,) = regress.load(str(golden))
    (again,) = [x for x in doc["entries"] if x["id"] == e["id"]]
    assert again["steps"] != e["steps"]
    p = _pytest(project)
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout + p.stderr


# ----------------------------------------------------------------------------------------------
# docs/regression-testing.md's worked example prints what the code prints
# ----------------------------------------------------------------------------------------------
DOC = os.path.join(ROOT, "docs", "regression-testing.md")


def _example():
    """The worked example's text: from its heading to the fixture's."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    start = text.index("## A user's optimizer: record yours, catch its changes")
    return text[start:text.index("### In your test suite", start)]


def _shown(block, printed):
    """Every line ``block`` shows (``...`` elides lines, or the rest of a line) is a line of
    ``printed``."""
    have = [x.rstrip() for x in printed.splitlines()]
    for line in block:
        if line.strip() == "...":
            continue
        pattern = ".*".join(re.escape(part) for part in line.rstrip().split("..."))
        assert any(re.fullmatch(pattern, x) for x in have), (
            f"docs/regression-testing.md shows a line the code does not print:\n{line}\n"
            f"--- the code prints:\n{printed}")


def test_the_docs_worked_example_prints_what_the_docs_show(tmp_path):
    text = _example()
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    (diff,) = re.findall(r"```diff\n(.*?)```", text, re.S)
    consoles = re.findall(r"```console\n(.*?)```", text, re.S)
    assert code == ADAM  # the test's Adam is the docs' one
    lines = diff.splitlines(True)
    old = "".join(x[1:] for x in lines if x[0] in " -")
    edit = "".join(x[1:] for x in lines if x[0] in " +")
    assert old in code and edit != old
    (tmp_path / "my_adam.py").write_text(code)
    for n, console in enumerate(consoles):
        if n == 1:  # the refactor between the two sessions
            (tmp_path / "my_adam.py").write_text(code.replace(old, edit))
        runs = re.split(r"^\$ ", console, flags=re.M)[1:]
        assert runs
        for run in runs:
            command, *shown = run.splitlines()
            args = shlex.split(command)
            assert args[:2] == ["mxopt", "regress"]
            r = _mxopt(*args[2:], cwd=tmp_path)
            assert r.returncode == (1 if n == 1 and args[2] == "compare" else 0), \
                r.stdout + r.stderr
            _shown(shown, r.stdout)


@pytest.mark.parametrize("dtype, asked", [("float16", 7), ("float64", "random")])
def test_other_dtypes_and_a_random_seed_are_recorded_and_compare_same(tmp_path, dtype, asked):
    path = str(tmp_path / "adam.json")
    with np.errstate(all="ignore"):  # the float16 Adam's 0/0 (its own NaN, recorded as such)
        regress.record_user(path, _adam(), "adam", convention="guide", dtype=dtype, cases=3,
                            seed=asked)
    (doc,) = regress.load(path)
    seed = doc["scope"]["seed"]
    assert isinstance(seed, int) and seed >= 0 and seed == (seed if asked == "random" else asked)
    drawn = regression.cases("adam", count=3, dtype=dtype, seed=seed)
    assert [e["case"] for e in doc["entries"]] == [k for k, _ in drawn]
    assert all(e["arrays"] == {"weight": dtype} for e in doc["entries"])
    with np.errstate(all="ignore"):
        assert regress.compare(path, make_step=_adam(), progress=False).counts()["same"] == 3


@pytest.mark.parametrize("convention", ["mxnet", "guide"])
def test_the_stored_reference_is_verifys(convention):
    """A make_step that returns regression.reference_weights (rounded to float32) passes
    verify: the reference stored beside a user's steps is the one verify holds them to."""
    from toolkit import oracle
    from toolkit.oracle.cases import Case

    def make_step(w0, **hyper):
        grads = []

        def step(g):
            grads.append(np.asarray(g, dtype=np.float64))
            case = Case(hyper, np.asarray(w0, dtype=np.float64), list(grads))
            ref = regression.reference_weights("adam", case, convention=convention,
                                               dtype="float32")[-1]
            return ref.astype(np.float32)
        return step
    r = oracle.verify(make_step, "adam", convention=convention, examples=10)
    assert r.passed, r.summary
    # and one that is not the reference's is caught: the other convention's
    other = "guide" if convention == "mxnet" else "mxnet"
    assert not oracle.verify(make_step, "adam", convention=other, examples=10).passed


def test_pytorch_convention_runs_the_equations_verify_runs(tmp_path):
    # adam: PyTorch's update is the guide's (reference.adam.PYTORCH), as verify resolves it
    assert regression.equations("adam", "pytorch") == "guide"
    a, b = str(tmp_path / "pytorch.json"), str(tmp_path / "guide.json")
    regress.record_user(a, _adam(), "adam", convention="pytorch", cases=3)
    regress.record_user(b, _adam(), "adam", convention="guide", cases=3)
    (da,), (db,) = regress.load(a), regress.load(b)
    assert [e["id"] for e in da["entries"]] == [e["id"].replace("/guide/", "/pytorch/")
                                                 for e in db["entries"]]
    assert [e["reference"] for e in da["entries"]] == [e["reference"] for e in db["entries"]]
    with pytest.raises(UsageError, match="not 'pytorch'"):
        regress.record_user(str(tmp_path / "x.json"), _adam(), "ftrl", convention="pytorch",
                            cases=1)
