"""A user's ``reference.py`` or ``toolkit.py`` beside their code (or in a pytest rootdir) does not
break the oracle: ``mxopt verify``, the API and the pytest fixture load the toolkit's own
packages as installed, and the user's code still imports its own modules of those names
(``toolkit.oracle.installed``; the issue: "No module named 'reference.adam'; 'reference' is not
a package")."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import toolkit
from toolkit.__main__ import _main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(toolkit.__file__)))

ADAM = textwrap.dedent('''
    import numpy as np
    import reference          # the user's own module of that name
    import toolkit as mine    # and this one too
    assert reference.WHOSE == "mine" and mine.WHOSE == "mine"

    def make_adam(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon):
        w = w.copy(); m = np.zeros_like(w); v = np.zeros_like(w); t = [0]
        def step(g):
            assert reference.WHOSE == "mine"
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
''')


@pytest.fixture
def project(tmp_path):
    """A user's folder: their Adam, beside their own reference.py and toolkit.py."""
    user = tmp_path / "project"
    user.mkdir()
    (user / "reference.py").write_text('WHOSE = "mine"\n')
    (user / "toolkit.py").write_text('WHOSE = "mine"\n')
    (user / "my_adam.py").write_text(ADAM)
    bin_ = tmp_path / "bin"  # a console script's folder: what is first on its sys.path
    bin_.mkdir()
    (bin_ / "mxopt.py").write_text("import sys\nfrom toolkit.__main__ import console\n"
                                   "console()\n")
    (bin_ / "run_pytest.py").write_text("import sys\nimport pytest\nsys.exit(pytest.main())\n")
    return user


def _run(args, cwd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.parametrize("form", ["path", "module"])
def test_mxopt_verify_with_a_reference_py_beside_the_code(project, form):
    target = (f"{project / 'my_adam.py'}:make_adam" if form == "path" else "my_adam:make_adam")
    p = _run([str(project.parent / "bin" / "mxopt.py"), "verify", target, "adam",
              "--convention", "guide", "--examples", "5", "--json"],
             cwd=project if form == "module" else project.parent)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout)["passed"] is True


def test_mxopt_verify_in_process_keeps_the_users_module_and_ours(project, capsys):
    import reference
    assert _main(["verify", f"{project / 'my_adam.py'}:make_adam", "adam", "--convention",
                  "guide", "--examples", "3"]) == 0, capsys.readouterr()
    assert sys.modules["reference"] is reference and sys.modules["toolkit"] is toolkit
    assert sys.path[-1] == str(project)  # its later imports of siblings still resolve


def test_the_api_from_a_script_beside_a_reference_py(project):
    # a script's own folder is first on its sys.path (Python's rule): beside a toolkit.py it
    # could not import ours at all, so this folder holds the user's reference.py only
    (project / "toolkit.py").unlink()
    (project / "my_adam.py").write_text(ADAM.replace("import toolkit as mine", "mine = reference"))
    (project / "check.py").write_text(
        "from my_adam import make_adam\n"
        "from toolkit import oracle\n"
        "r = oracle.verify(make_adam, 'adam', convention='guide', examples=5)\n"
        "assert r.passed, r.summary\n"
        "print(oracle.identify(make_adam, 'adam', cases=4, screen=50).convention)\n")
    p = _run(["check.py"], cwd=project)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip() == "guide"


def test_the_pytest_fixture_in_a_rootdir_with_a_reference_py(project):
    # the plugin imports the installed toolkit when pytest starts, so the user's code gets ours
    # under that name there; its toolkit.py must not break the fixture, its reference.py is its
    (project / "my_adam.py").write_text(ADAM.replace("import toolkit as mine", "mine = reference"))
    (project / "test_my_adam.py").write_text(
        "from my_adam import make_adam\n\n"
        "def test_it(mxopt_oracle):\n"
        "    mxopt_oracle.assert_matches_oracle(make_adam, 'adam', convention='guide',\n"
        "                                       examples=5)\n")
    p = _run([str(project.parent / "bin" / "run_pytest.py"), "-q", "-p", "no:cacheprovider",
              str(project / "test_my_adam.py")], cwd=project)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 passed" in p.stdout
