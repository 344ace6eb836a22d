"""The examples users read run: docstring examples of the public modules (doctest) and the
README's Python snippets (the CPU ones; the GPU lines run in tests/cuda/test_docs_examples.py's
kind of check on a GPU)."""
from __future__ import annotations

import doctest
import importlib
import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
MODULES = ["toolkit.optimizers.sgd", "toolkit.optimizers.adam", "toolkit.optimizers.lbsgd",
           "toolkit.optimizers.sgld", "toolkit.trainer.parameter", "toolkit.trainer.trainer",
           "toolkit.verify"]


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
