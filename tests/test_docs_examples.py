"""The examples users read run: docstring examples of the public modules (doctest) and the
README's Python snippets (the CPU ones; the GPU lines run in tests/cuda/test_docs_examples.py's
kind of check on a GPU)."""
from __future__ import annotations

import doctest
import glob
import warnings
import importlib
import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
MODULES = ["toolkit.optimizers.sgd", "toolkit.optimizers.adam", "toolkit.optimizers.lbsgd",
           "toolkit.optimizers.sgld", "toolkit.optimizers.lamb", "toolkit.trainer.parameter", "toolkit.trainer.trainer",
           "toolkit.verify", "toolkit.oracle", "reference.error_bound"]
#: docs pages whose ```python blocks run here, in order, in one namespace per page
#: (docs/backends.md: its GPU examples run in tests/cuda/test_cuda_guide_examples.py)
DOC_PAGES = sorted(p for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
                   if os.path.basename(p) != "backends.md")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0


def test_readme_snippets_run(tmp_path, monkeypatch):
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)  # the Trainer snippet writes a states file
    for k, block in enumerate(blocks):
        cpu_part = block.split("# the same optimizer on GPU arrays")[0]
        exec(compile(cpu_part, f"README.md snippet {k}", "exec"), {"__name__": "__readme__"})
    assert (tmp_path / "adam.states").exists()


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_docs_python_blocks_run(page, tmp_path, monkeypatch, capsys):
    text = open(page, encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a page re-registers its example classes
        for k, block in enumerate(blocks):
            exec(compile(block, f"{os.path.relpath(page, ROOT)} block {k}", "exec"), namespace)
