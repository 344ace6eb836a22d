"""The ``mxopt`` command line: verify, identify and list, their exit codes and ``--json``."""
from __future__ import annotations

import json
import textwrap

import pytest

from toolkit import optimizer
from toolkit.__main__ import _main

ADAM = textwrap.dedent('''
    import numpy as np

    def make_adam(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon):
        w = w.copy(); m = np.zeros_like(w); v = np.zeros_like(w); t = [0]
        def step(g):
            t[0] += 1
            g = rescale_grad * g
            if clip_gradient is not None:
                g = np.clip(g, -clip_gradient, clip_gradient)
            g = g + wd * w
            m[...] = beta1 * m + (1.0 - beta1) * g
            v[...] = beta2 * v + (1.0 - beta2) * g * g
            w[...] = w - learning_rate * (m / (1.0 - beta1 ** t[0])) / (
                np.sqrt(v / (1.0 - beta2 ** t[0])) + epsilon)
            return w
        return step

    def broken(w, **hyper):
        raise RuntimeError("not written yet")
''')


@pytest.fixture
def target(tmp_path):
    path = tmp_path / "my_adam.py"
    path.write_text(ADAM)
    return str(path)


def test_verify_exit_codes_and_json(target, capsys):
    assert _main(["verify", f"{target}:make_adam", "adam", "--convention", "guide",
                  "--examples", "15", "--seed", "1"]) == 0
    assert "PASSED" in capsys.readouterr().out
    assert _main(["verify", f"{target}:make_adam", "adam", "--examples", "15", "--seed", "1",
                  "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is False and report["convention"] == "mxnet"
    assert report["worst"]["step"] >= 1
    assert _main(["verify", f"{target}:broken", "adam", "--examples", "3"]) == 1
    assert "not written yet" in capsys.readouterr().out


def test_verify_fixed_values_are_json(target, capsys):
    assert _main(["verify", f"{target}:make_adam", "adam", "--convention", "guide",
                  "--examples", "5", "--fixed", "wd=0", "--fixed", "clip_gradient=None",
                  "--json"]) == 0
    h = json.loads(capsys.readouterr().out)["worst"]["hyperparameters"]
    assert h["wd"] == 0 and h["clip_gradient"] is None


@pytest.mark.parametrize("argv", [
    ["verify", "no_such_module_here:f", "adam"],
    ["verify", "missing.py:f", "adam"],
    ["verify", "{target}:nothing", "adam"],
    ["verify", "{target}:make_adam", "nosuchopt"],
    ["verify", "{target}:make_adam", "adam", "--fixed", "nonsense"],
    ["identify", "{target}", "adam"],
    ["identify", "{target}:make_adam", "adam", "--cases", "0"],
    ["identify", "{target}:make_adam", "sgd", "--cases", "2"],
])
def test_usage_errors_exit_2(argv, target, capsys):
    assert _main([a.format(target=target) for a in argv]) == 2
    assert "error:" in capsys.readouterr().err


def test_identify_exit_codes(target, capsys):
    assert _main(["identify", f"{target}:make_adam", "adam", "--cases", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["convention"] == "guide" and "mxnet" not in out["matches"]
    # Adam's function given AdaGrad's hyperparameters: the user's TypeError is a verdict
    assert _main(["identify", f"{target}:make_adam", "adagrad", "--cases", "4"]) == 1
    assert "could not run your implementation" in capsys.readouterr().out


def test_list_json_and_table(capsys):
    assert _main(["list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {r["optimizer"] for r in data["optimizers"]}
    assert names == set(optimizer.registry())  # every registered optimizer, one row each
    assert len(data["optimizers"]) == len(names)
    assert {b["backend"] for b in data["backends"]} == {"reference", "cpu", "cuda"}
    cuda = next(b for b in data["backends"] if b["backend"] == "cuda")
    assert cuda["available"] or cuda["why"]  # a missing backend says why
    assert _main(["list"]) == 0
    assert "backends" in capsys.readouterr().out


def test_list_shows_a_custom_optimizer_without_an_oracle(capsys):
    from toolkit import optimizer

    @optimizer.register
    class CliListProbe(optimizer.SGD):
        reference_name = None
    try:
        assert _main(["list", "--json"]) == 0
        rows = {r["optimizer"]: r for r in json.loads(capsys.readouterr().out)["optimizers"]}
        assert rows["clilistprobe"]["oracle_conventions"] == []
    finally:
        optimizer.unregister("clilistprobe")


def test_no_command_is_a_usage_error(capsys):
    assert _main([]) == 2 and "commands:" in capsys.readouterr().err
    assert _main(["nonsense"]) == 2


def test_check_json_rows_and_exit_code(capsys, monkeypatch):
    from toolkit.tools import check
    monkeypatch.setattr(check, "backend_rows", lambda with_cuda: [("sgd", "mxnet", "cpu",
                                                                   "float32")])
    monkeypatch.setattr(check, "PROOFS", [])
    assert _main(["check", "--json", "--seed", "3", "--cases", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["seed"] == 3 and out["failed"] == 0 and out["rows"][0]["optimizer"] == "sgd"
    monkeypatch.setattr(check, "run_backend_row", lambda *a, **k: 2.0)
    assert _main(["check", "--json", "--cases", "1"]) == 1
    assert json.loads(capsys.readouterr().out)["rows"][0]["passed"] is False


def test_check_draws_from_a_fixed_seed_unless_random_is_asked(capsys, monkeypatch):
    from toolkit.oracle import DEFAULT_SEED
    from toolkit.tools import check
    monkeypatch.setattr(check, "backend_rows", lambda with_cuda: [("sgd", "mxnet", "cpu",
                                                                   "float32")])
    monkeypatch.setattr(check, "PROOFS", [])
    seeds = []
    for argv in ([], [], ["--seed", "random"]):
        assert _main(["check", "--json", "--cases", "1", *argv]) == 0
        seeds.append(json.loads(capsys.readouterr().out)["seed"])
    assert seeds[:2] == [DEFAULT_SEED, DEFAULT_SEED] and isinstance(seeds[2], int), seeds
    with pytest.raises(SystemExit) as exc:
        _main(["check", "--seed", "-1"])
    assert exc.value.code == 2 and "'random'" in capsys.readouterr().err


def test_version_prints_the_version(capsys):
    from toolkit import __version__
    assert _main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"mxopt {__version__}"


def test_unknown_command_says_what_was_wrong(capsys):
    assert _main(["nonsense"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nonsense'" in err and "verify" in err and "bench" in err
    assert _main(["--bogus"]) == 2
    assert "unrecognized option '--bogus'" in capsys.readouterr().err
    assert _main(["--help"]) == 0
    assert "commands:" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["verify", "identify"])
def test_oracle_commands_help_gives_text_and_defaults(command, capsys):
    with pytest.raises(SystemExit) as exc:
        _main([command, "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps to the terminal
    assert out.startswith(f"usage: mxopt {command} ")
    assert "(default: float32)" in out and "exit codes" in out
    assert ("(default: the optimizer's first, mxnet for MXNet's family)" in out) == \
        (command == "verify")
    assert "(default: 24)" in out or command == "verify"


@pytest.mark.parametrize("command", ["check", "verify", "identify", "list", "regress", "accuracy",
                                     "demo", "bench", "launch"])
def test_every_usage_line_names_mxopt(command, capsys):
    try:
        code = _main([command, "--help"])
    except SystemExit as exc:
        code = exc.code
    assert code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: mxopt {command}"), out[:80]


def test_check_piped_prints_a_line_per_row(capsys, monkeypatch):
    """Not on a terminal (piped, CI): a progress line per proof and row on stderr as each
    finishes, not minutes of silence."""
    from toolkit.tools import check
    monkeypatch.setattr(check, "backend_rows", lambda with_cuda: [
        ("sgd", "mxnet", "cpu", "float32"), ("adam", "guide", "reference", "float64")])
    monkeypatch.setattr(check, "PROOFS", check.PROOFS[2:3])  # NAG's look-ahead proof: quick
    assert _main(["check", "--seed", "3", "--cases", "1"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "1 proofs, then 2 optimizer x convention x backend x dtype rows against " \
                     "the oracle"
    assert [line.split(": worst")[0] for line in err[1:]] == [
        "[1/3] proof nag", "[2/3] sgd mxnet cpu float32", "[3/3] adam guide reference float64"]


def test_the_launch_runner_reads_the_rank_with_the_librarys_one_definition_and_stays_light(
        tmp_path, monkeypatch):
    """``toolkit/mpi_jobs.py``, run by path on each rank before the script, names the rank with
    ``toolkit.mpi_env.rank_from_env`` (the one definition, shared with the distributed
    Trainer) and imports neither the ``toolkit`` package (Numba) nor mpi4py nor NumPy."""
    import os
    import pathlib
    import re
    import subprocess
    import sys
    import toolkit.mpi_env
    import toolkit.mpi_jobs
    import toolkit.trainer.dist
    root = pathlib.Path(toolkit.__file__).resolve().parent
    found = [(str(p.relative_to(root)), m) for p in sorted(root.rglob("*.py"))
             for m in re.findall(r"^\s*def (_?rank_from_env)\(", p.read_text(), re.M)]
    assert found == [("mpi_env.py", "rank_from_env")], found
    assert toolkit.mpi_jobs.rank_from_env is toolkit.mpi_env.rank_from_env
    assert toolkit.trainer.dist.rank_from_env is toolkit.mpi_env.rank_from_env
    script = tmp_path / "show.py"
    script.write_text("import json, sys\nprint(json.dumps(sorted(sys.modules)))\n")
    env = dict(os.environ, PMI_RANK="3", MXOPT_LAUNCH_SOCKET=str(tmp_path / "no-launcher"))
    env.pop("OMPI_COMM_WORLD_RANK", None)
    r = subprocess.run([sys.executable, str(root / "mpi_jobs.py"), str(script)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "mxopt launch: rank 3: cannot reach the launcher" in r.stderr, r.stderr
    heavy = [m for m in json.loads(r.stdout)
             if m.split(".")[0] in ("toolkit", "numba", "mpi4py", "numpy")]
    assert heavy == [], heavy
    for name in toolkit.mpi_env.RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert toolkit.mpi_env.rank_from_env() is None and toolkit.mpi_env.rank_from_env("?") == "?"
    for value, want in (("7", 7), ("", None), ("x", None), ("-1", None)):
        monkeypatch.setenv("PMIX_RANK", value)
        assert toolkit.mpi_env.rank_from_env("?") == ("?" if want is None else want)


def test_toolkit_launch_is_a_deprecated_alias_of_mpi_jobs(tmp_path):
    """``toolkit.launch`` (the old name of ``toolkit.mpi_jobs``), kept for one release: importing
    it warns and gives the same functions; run by path or with ``-m`` as a rank's runner, it
    warns, runs the script, and exits with the script's status, importing nothing heavy by path."""
    import os
    import pathlib
    import subprocess
    import sys
    import warnings
    import toolkit.mpi_jobs
    sys.modules.pop("toolkit.launch", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import toolkit.launch as launch
    assert [w.category for w in caught] == [DeprecationWarning], caught
    assert "toolkit.mpi_jobs" in str(caught[0].message)
    assert caught[0].filename == __file__, caught[0].filename   # points at the importer
    for name in toolkit.mpi_jobs.__all__:
        assert getattr(launch, name) is getattr(toolkit.mpi_jobs, name), name
    assert launch.__all__ == toolkit.mpi_jobs.__all__
    root = pathlib.Path(toolkit.mpi_jobs.__file__).resolve().parent
    script = tmp_path / "show.py"
    script.write_text("import json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
                      "sys.exit(int(sys.argv[1]))\n")
    env = dict(os.environ, PMI_RANK="1", MXOPT_LAUNCH_SOCKET=str(tmp_path / "no-launcher"),
               PYTHONPATH=str(root.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("OMPI_COMM_WORLD_RANK", None)
    for how in ([str(root / "launch.py")], ["-m", "toolkit.launch"]):
        for status in (0, 3):
            r = subprocess.run([sys.executable, *how, str(script), str(status)], env=env,
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == status, (how, r.stderr)
            assert "DeprecationWarning: toolkit.launch is deprecated" in r.stderr, r.stderr
            assert "toolkit.mpi_jobs" in r.stderr, r.stderr
            assert "mxopt launch: rank 1: cannot reach the launcher" in r.stderr, r.stderr
            if how[0] != "-m":
                heavy = [m for m in json.loads(r.stdout.splitlines()[-1])
                         if m.split(".")[0] in ("toolkit", "numba", "mpi4py", "numpy")]
                assert heavy == [], heavy


@pytest.mark.parametrize("command, extra", [("verify", ["--examples", "3"]),
                                            ("identify", ["--cases", "2"])])
def test_seed_takes_an_int_or_random(target, capsys, command, extra):
    # the oracle's own error for a bad seed tells the user to pass 'random': the CLI takes it
    argv = [command, f"{target}:make_adam", "adam", *extra, "--json", "--seed"]
    assert _main(argv + ["random"]) in (0, 1)
    seed = json.loads(capsys.readouterr().out)["seed"]
    assert isinstance(seed, int) and seed >= 0
    assert _main(argv + ["7"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["seed"] == 7
    for bad in ("-3", "lucky", "1.5"):
        with pytest.raises(SystemExit) as exc:  # argparse's usage error
            _main(argv + [bad])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "--seed" in err and "'random'" in err and repr(bad) in err, err


def test_an_internal_error_exits_3_and_asks_for_a_report(target, capsys, monkeypatch):
    from toolkit.oracle import core

    def broken(*args, **kwargs):
        raise ZeroDivisionError("float division by zero")
    monkeypatch.setattr(core, "_domain_verdict", broken)  # a bug of the oracle, planted
    argv = ["verify", f"{target}:make_adam", "adam", "--examples", "2"]
    assert _main(argv) == 3
    err = capsys.readouterr().err
    assert "internal error" in err and "bug of the toolkit" in err and "report" in err
    assert "ZeroDivisionError" in err
    assert _main(argv + ["--json"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["error"] == "internal" and out["exit_code"] == 3
    assert "ZeroDivisionError" in out["message"]
    from toolkit import oracle
    with pytest.raises(oracle.InternalError, match="bug of the toolkit"):
        oracle.verify(lambda w, **h: (lambda g: w), "adam", examples=2)


@pytest.mark.parametrize("argv", [
    ["verify", "no_such_module_here:f", "adam"],
    ["verify", "{target}:make_adam", "nosuchopt"],
    ["verify", "{target}:make_adam", "adam", "--fixed", "wd=-1"],
    ["identify", "{target}:make_adam", "adam", "--dtype", "float8"],
    ["verify", "{target}:make_adam", "adam", "--examples", "many"],
])
def test_json_always_writes_a_report_even_on_a_usage_error(argv, target, capsys):
    try:
        code = _main([a.format(target=target) for a in argv] + ["--json"])
    except SystemExit as exc:  # argparse's own usage error
        code = exc.code
    assert code == 2
    out = json.loads(capsys.readouterr().out)
    assert out["error"] == "usage" and out["exit_code"] == 2 and out["message"]


def test_allow_wider_on_the_command_line(tmp_path, capsys):
    path = tmp_path / "wide.py"
    path.write_text(ADAM + "\n\ndef wide(w, **hyper):\n"
                    "    step = make_adam(w.astype(np.float64), **hyper)\n"
                    "    return lambda g: step(g.astype(np.float64))\n")
    argv = ["verify", f"{path}:wide", "adam", "--convention", "guide", "--examples", "5"]
    assert _main(argv) == 1
    assert "returned float64 for float32 input" in capsys.readouterr().out
    assert _main(argv + ["--allow-wider", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["allow_wider"] is True and out["wider"] == "float64"


def _parser_of(command, monkeypatch):
    """The argparse parser ``mxopt <command>`` builds (caught as it parses)."""
    import argparse

    class Caught(Exception):
        pass
    got = []

    def catch(self, args=None, namespace=None):
        got.append(self)
        raise Caught
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", catch)
    try:
        _main([command, "--help"])
    except Caught:
        pass
    monkeypatch.undo()
    return got[0]


def _options(parser):
    import argparse
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _options(sub)
        elif (action.option_strings and action.help is not argparse.SUPPRESS
              and not isinstance(action, (argparse._HelpAction, argparse._VersionAction))):
            yield parser.prog, action


@pytest.mark.parametrize("command", ["check", "verify", "identify", "list", "audit", "regress",
                                     "accuracy", "demo", "bench", "launch"])
def test_every_option_shows_its_default_in_help(command, monkeypatch):
    missing = [f"{prog} {a.option_strings[-1]}" for prog, a in
               _options(_parser_of(command, monkeypatch)) if "default" not in (a.help or "")]
    assert not missing, f"--help gives no default for: {missing}"


HINT = 'needs numba-cuda: pip install -e ".[cuda]" (the numba-cuda package)'


def test_list_keeps_the_extra_of_an_install_hint(capsys, monkeypatch):
    import toolkit.backends
    monkeypatch.setattr(toolkit.backends, "cuda_available", lambda: (False, HINT))
    monkeypatch.setenv("COLUMNS", "300")  # one line per row
    assert _main(["list"]) == 0
    assert HINT in capsys.readouterr().out  # rich read '[cuda]' as markup and dropped it


def test_progress_shows_on_a_terminal_only_after_five_seconds():
    from toolkit.oracle.cli import Progress

    class Console:
        is_terminal = True
        shown = []

        def status(self, text):
            shown = self.shown
            shown.append(text)

            class Status:
                def start(self):
                    shown.append("start")

                def update(self, text):
                    shown.append(text)

                def stop(self):
                    shown.append("stop")
            return Status()
    now = [0.0]
    console = Console()
    with Progress(console, "my_adam.py:make", clock=lambda: now[0]) as progress:
        progress(1)
        now[0] = 4.9
        progress(7)
        assert console.shown == []  # a quick run prints nothing
        now[0] = 6.0
        progress(8)
        now[0] = 9.0
        progress(12)
    assert console.shown == ["running my_adam.py:make: 8 case(s) run, 6 s", "start",
                             "running my_adam.py:make: 12 case(s) run, 9 s", "stop"]
    console.is_terminal, console.shown = False, []
    now[0] = 0.0
    with Progress(console, "x", clock=lambda: now[0]) as progress:
        now[0] = 60.0
        progress(3)
    assert console.shown == []  # not a terminal: no progress


def test_timeout_on_the_command_line(tmp_path, capsys):
    path = tmp_path / "slow.py"
    path.write_text(ADAM + "\n\nimport time\n\ndef slow(w, **hyper):\n"
                    "    step = make_adam(w, **hyper)\n"
                    "    return lambda g: (time.sleep(0.05), step(g))[1]\n")
    argv = ["verify", f"{path}:slow", "adam", "--convention", "guide", "--examples", "20"]
    assert _main(argv + ["--timeout", "0.01"]) == 1
    assert "over the limit of 0.01 s per step" in capsys.readouterr().out
    assert _main(argv + ["--timeout", "-1"]) == 2
