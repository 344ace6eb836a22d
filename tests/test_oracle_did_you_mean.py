"""An unknown optimizer name in ``verify``, ``identify`` and ``regress`` (API and command line)
is a usage error that suggests the closest registry names (difflib): "did you mean 'adam'?";
exit code 2 on the command line."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from toolkit import oracle
from toolkit.oracle import regression
from toolkit.tools import regress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STEP = textwrap.dedent('''\
    def make_step(w, **hyper):
        def step(g):
            return w
        return step
    ''')


def _make(w, **hyper):
    return lambda g: w


@pytest.mark.parametrize("call", [
    lambda name: oracle.verify(_make, name, examples=1),
    lambda name: oracle.identify(_make, name),
    lambda name: regression.cases(name, count=1),
])
def test_the_api_suggests_the_closest_names(call):
    with pytest.raises(ValueError, match=r"unknown optimizer 'adm' \(did you mean 'adam'"):
        call("adm")
    with pytest.raises(ValueError, match=r"unknown optimizer 'nadma' \(did you mean 'nadam'"):
        call("nadma")
    with pytest.raises(ValueError) as e:  # nothing close: no suggestion, every name known
        call("zzzz")
    assert "did you mean" not in str(e.value) and "the oracle knows " in str(e.value)
    assert all(name in str(e.value) for name in ("adadelta", "adam", "signum"))


def test_regress_record_user_suggests_the_closest_names(tmp_path):
    with pytest.raises(ValueError, match=r"did you mean 'adam'"):
        regress.record_user(tmp_path / "x.json", _make, "adm", cases=1)
    assert not (tmp_path / "x.json").exists()


def _mxopt(*args, cwd):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "toolkit", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("args", [
    ("verify", "mine.py:make_step", "adm", "--examples", "1"),
    ("identify", "mine.py:make_step", "adm"),
    ("regress", "record", "x.json", "--target", "mine.py:make_step", "--optimizer", "adm",
     "--quiet"),
])
def test_the_command_line_suggests_and_exits_2(tmp_path, args):
    (tmp_path / "mine.py").write_text(STEP)
    r = _mxopt(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "unknown optimizer 'adm' (did you mean 'adam'" in r.stdout + r.stderr
    assert not (tmp_path / "x.json").exists()


def test_docs_oracle_quotes_the_message_the_code_gives():
    with open(os.path.join(ROOT, "docs", "oracle.md"), encoding="utf-8") as f:
        text = " ".join(f.read().split())
    with pytest.raises(ValueError) as e:
        oracle.verify(_make, "adm", examples=1)
    shown = ("unknown optimizer 'adm' (did you mean 'adam' or 'radam' or 'nadam'?); "
             "the oracle knows")
    assert shown in text and str(e.value).startswith(shown), str(e.value)
