"""Modules a reader can hold (issue 34, item 2): no Python module of ``toolkit/`` or
``reference/`` is longer than 500 lines; a module that grows past it is split by what it does."""
from __future__ import annotations

import os

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
LIMIT = 500


def test_no_module_is_longer_than_the_limit():
    long = {}
    for package in ("toolkit", "reference"):
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    with open(path, encoding="utf-8") as f:
                        n = sum(1 for _ in f)
                    if n > LIMIT:
                        long[os.path.relpath(path, ROOT)] = n
    assert not long, f"modules over {LIMIT} lines (split them by responsibility): {long}"
