"""The examples users read run: docstring examples of the public modules (doctest), the README's
Python examples as written (the CPU ones everywhere, the GPU one where CuPy and a GPU are), and
the README's promises a first-hour user checks (two commands, every optimizer named). What an
example prints is compared with what its page shows (``_run_block``)."""
from __future__ import annotations

import ast
import contextlib
import doctest
import io
import tokenize
import glob
import warnings
import importlib
import os
import re

import pytest

from toolkit.optimizer import registry

ROOT = os.path.join(os.path.dirname(__file__), "..")
#: every built-in optimizer's module (each class docstring has an example), and these
MODULES = sorted({k.__module__ for k in registry().values()
                  if k.__module__.startswith("toolkit.optimizers.")}) + [
    "toolkit.trainer.parameter", "toolkit.trainer.trainer", "toolkit.error_bounds",
    "toolkit.oracle", "reference.error_bound"]
#: docs pages whose ```python blocks run here, in order, in one namespace per page
#: (docs/backends.md: its GPU examples run in tests/cuda/test_cuda_guide_examples.py)
DOC_PAGES = sorted(p for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
                   if os.path.basename(p) != "backends.md")


#: ``print(...)  # comment`` lines whose comment is not the printed text: (page, the line's code)
#: -> why. Every other top-level ``print(...)`` with a trailing comment shows its output there
#: (``...`` elides, as the pages use it); a ```python block followed by a bare or ```text block
#: shows its whole output there.
ILLUSTRATIVE = {
    ("README.md", 'print(oracle.identify(make_adam, "adam").summary)'):
        "a paraphrase of a four-line summary that names the versions installed; "
        "tests/test_docs_outputs_more.py checks the lines it paraphrases",
}


def _comments(code):
    """{line number: the text of the comment that ends it} of ``code``."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string[1:].strip()
    return out


def _shown_matches(shown, printed):
    """``printed`` is ``shown`` exactly (trailing whitespace stripped), ``...`` eliding any text."""
    printed = "\n".join(line.rstrip() for line in printed.rstrip().splitlines())
    shown = shown.rstrip()
    if "..." not in shown:
        return printed == shown
    pattern = ".*".join(re.escape(part) for part in shown.split("..."))
    return re.fullmatch(pattern, printed, re.S) is not None


def _run_block(code, page, where, namespace, shown_after=None):
    """Run ``code`` in ``namespace`` one top-level statement at a time, capturing what each
    prints; a ``print(...)`` whose line ends in a comment must print that comment (unless
    ILLUSTRATIVE names it), and ``shown_after`` (the block the page shows after this one) must
    be the block's whole output. Returns the number of outputs compared."""
    lines = code.splitlines()
    comments = _comments(code)
    compared, whole = 0, []
    for stmt in ast.parse(code).body:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(ast.Module(body=[stmt], type_ignores=[]), where, "exec"), namespace)
        printed = buf.getvalue()
        whole.append(printed)
        is_print = (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                    and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "print")
        if not is_print or stmt.end_lineno not in comments:
            continue
        line = lines[stmt.end_lineno - 1].split("#", 1)[0].strip()
        if (page, line) in ILLUSTRATIVE:
            continue
        shown = comments[stmt.end_lineno]
        assert _shown_matches(shown, printed), (
            f"{where}, line {stmt.end_lineno}: {page} shows\n  {shown}\nthe code prints\n"
            f"  {printed.rstrip()}")
        compared += 1
    if shown_after is not None:
        printed = "".join(whole)
        assert _shown_matches(shown_after, printed), (
            f"{where}: {page} shows the output\n{shown_after}\nthe code prints\n{printed}")
        compared += 1
    return compared


def _python_blocks(text):
    """The page's ```python blocks, each with the bare or ```text block that follows it
    (only blank lines between), or None."""
    out = []
    for m in re.finditer(r"```python\n(.*?)```\n", text, re.S):
        after = re.match(r"\s*\n```(?:text)?\n(.*?)```", text[m.end():], re.S)
        out.append((m.group(1), after.group(1) if after else None))
    return out


def test_illustrative_marks_name_lines_the_pages_hold():
    for (page, line), why in ILLUSTRATIVE.items():
        text = open(os.path.join(ROOT, page), encoding="utf-8").read()
        assert any(l.split("#", 1)[0].strip() == line and "#" in l
                   for l in text.splitlines()), (page, line, why)


def test_shown_output_comparison_can_fail():
    ns = {}
    assert _run_block("print(1 + 1)  # 2\nprint('a b')  # a ...\n", "x.md", "x", ns) == 2
    with pytest.raises(AssertionError, match="shows"):
        _run_block("print(1 + 1)  # 3\n", "x.md", "x", ns)
    with pytest.raises(AssertionError, match="shows the output"):
        _run_block("print(2)\n", "x.md", "x", ns, shown_after="2\n3\n")
    assert _python_blocks("```python\nprint(2)\n```\n\n```\n2\n```\n") == [("print(2)\n", "2\n")]
    assert _python_blocks("```python\nx = 1\n```\n\nText.\n```\n2\n```\n") == [("x = 1\n", None)]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0


README = os.path.join(ROOT, "README.md")
#: a README example for the GPU: it imports CuPy (its own block, never inside a CPU example)
GPU_MARK = "import cupy"


def _readme_blocks(torch=False):
    """The README's Python examples: (CPU ones without torch, GPU ones), or with ``torch`` the
    ones that import torch (``toolkit.torch``)."""
    text = open(README, encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    if torch:
        return [b for b in blocks if "import torch" in b and GPU_MARK not in b]
    plain = [b for b in blocks if "import torch" not in b]
    return [b for b in plain if GPU_MARK not in b], [b for b in plain if GPU_MARK in b]


def test_readme_torch_examples_run_as_written(tmp_path, monkeypatch):
    """The README's toolkit.torch example runs as written (CI installs torch)."""
    blocks = _readme_blocks(torch=True)
    assert len(blocks) == 1
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch not installed (pip install -e '.[torch]')")
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], "README.md torch example", "exec"), {"__name__": "__readme__"})


def test_readme_cpu_examples_run_as_written(tmp_path, monkeypatch, capsys):
    """Every Python example of the README runs as written, each in a fresh namespace, on a
    machine without a GPU, CuPy or PyTorch; the GPU example is its own block, and so is the
    toolkit.torch one (above)."""
    cpu, gpu = _readme_blocks()
    assert len(cpu) >= 4 and len(gpu) == 1
    for block in cpu:
        assert "cupy" not in block and "torch" not in block
    monkeypatch.chdir(tmp_path)  # the Trainer example writes a states file
    compared = 0
    for k, block in enumerate(cpu):
        compared += _run_block(block, "README.md", f"README.md example {k}",
                               {"__name__": "__readme__"})
    assert (tmp_path / "adam.states").exists()
    assert compared >= 1  # print(sgd): its repr as the README shows it


def test_readme_gpu_example_runs_on_a_gpu():
    from toolkit.backends import cuda_available
    if importlib.util.find_spec("cupy") is None or not cuda_available()[0] or \
            os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        pytest.skip("needs CuPy and a real GPU")
    (block,) = _readme_blocks()[1]
    exec(compile(block, "README.md GPU example", "exec"), {"__name__": "__readme__"})


def test_readme_says_what_the_toolkit_does():
    text = open(README, encoding="utf-8").read()
    two = text.split("## Two commands\n", 1)[1].split("\n## ", 1)[0]
    commands = [p for p in two.split("\n\n") if p.startswith("    ")]  # indented: code
    assert [c.strip().split(" && ")[-1] for c in commands] == [  # exactly two: the job, the tests
        "python -m toolkit check", "python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile"]
    # CI runs exactly the README's test command: its install, then its pytest line
    ci = open(os.path.join(os.path.dirname(README), ".ci", "run"), encoding="utf-8").read()
    install, run = commands[1].strip().split(" && ")
    quiet = install.replace("pip install ", "pip install -q ")  # CI's log without pip's lines
    assert f"\n{quiet}\n" in ci and f"\n{run}\n" in ci
    intro = text.split("## Two commands", 1)[0]
    from toolkit import optimizer
    registry = optimizer.registry()
    assert f"{len(registry)} optimizers" in intro
    for klass in registry.values():  # every optimizer named (FTRL: its registry spelling)
        assert klass.__name__ in intro or klass.__name__.upper() in intro, klass.__name__
    assert "Signum/SignSGD" not in text and "momentum=0" in intro  # SignSGD is a setting
    # the optimizers that refuse a row-sparse gradient are named as refusing it
    refusing = []
    for name, klass in sorted(registry.items()):
        try:
            klass().row_sparse_mode(0)
        except ValueError:
            refusing.append(klass.__name__)
    assert refusing and f"{' and '.join(refusing)} refuse it" in " ".join(text.split())
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in text


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_docs_python_blocks_run(page, tmp_path, monkeypatch, capsys):
    text = open(page, encoding="utf-8").read()
    if "import torch" in text and importlib.util.find_spec("torch") is None:
        pytest.skip("torch not installed")  # docs/torch.md: the torch extra
    blocks = _python_blocks(text)
    assert len(blocks) == len(re.findall(r"```python\n", text))
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    from toolkit import optimizer
    before = optimizer.registry()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # a page re-registers its example classes
            for k, (block, shown) in enumerate(blocks):
                _run_block(block, os.path.relpath(page, ROOT),
                           f"{os.path.relpath(page, ROOT)} block {k}", namespace, shown)
    finally:  # the page's example optimizers do not outlive it
        for name in set(optimizer.registry()) - set(before):
            optimizer.unregister(name)
