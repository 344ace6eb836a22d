"""The examples of docs/backends.md run: the simulator example prints what the guide shows; the
numba, CuPy and PyTorch examples run where their library and a GPU are present (under the
simulator the numba example runs on 1024 elements instead of 2**20, the simulator being Python)."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from conftest import SIMULATOR

GUIDE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "backends.md")
TEXT = open(GUIDE, encoding="utf-8").read()
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", TEXT, re.S)


def test_the_simulator_example_prints_what_the_guide_shows():
    block = re.search(r'```sh\nNUMBA_ENABLE_CUDASIM=1 python -c "\n(.*?)"\n```', TEXT, re.S)
    assert block, "the simulator example is missing from docs/backends.md"
    shown = re.search(r"It prints.*?:\n\n((?:    .*\n)+)", TEXT).group(1)
    expected = [line.strip() for line in shown.splitlines() if line.strip()]
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-c", block.group(1)], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout.split("\n")
    assert [line.strip() for line in out if line.strip()] == expected


@pytest.mark.parametrize("k", range(len(PYTHON_BLOCKS)))
def test_guide_python_examples_run(k):
    code = PYTHON_BLOCKS[k]
    for lib in ("cupy", "torch"):
        if f"import {lib}" in code:
            if SIMULATOR:
                pytest.skip(f"needs {lib} on a real GPU (the simulator has no {lib} arrays)")
            if importlib.util.find_spec(lib) is None:
                pytest.skip(f"needs {lib}, which is not installed")
    if SIMULATOR:
        code = code.replace("1 << 20", "1 << 10")
    exec(compile(code, f"docs/backends.md example {k}", "exec"), {"__name__": "__example__"})
