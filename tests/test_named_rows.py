"""Named hyperparameter rows (issue 20, item 3; docs/backends.md, "A rule, its row and its
gradient"): the scalars a rule takes are declared once, as a NamedTuple beside the rule, packed
by name on the host and read by name in the kernel. No module of ``toolkit/`` reads a row, a step's constants or a recorded call by
position: no ``a, b, c = hp``, no ``hp[0]``, no ``constants[2]``, no ``call[5]``.
"""
from __future__ import annotations

import ast
import os
import textwrap

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
#: names that hold a row of scalars or a recorded call, wherever they appear
ROW_NAMES = {"hp", "hyper", "constants", "call"}


def positional_uses(source):
    """``(line, what)`` for every positional read of a row in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if isinstance(value, ast.Name) and value.id in ROW_NAMES and any(
                    isinstance(t, (ast.Tuple, ast.List)) for t in targets):
                found.append((node.lineno, f"unpacks {value.id} by position"))
        elif isinstance(node, ast.For) and isinstance(node.target, (ast.Tuple, ast.List)) \
                and isinstance(node.iter, ast.Name) and node.iter.id in ROW_NAMES:
            found.append((node.lineno, f"unpacks {node.iter.id} by position"))
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                and node.value.id in ROW_NAMES:
            index = node.slice
            if isinstance(index, ast.Constant) and isinstance(index.value, int) or \
                    isinstance(index, ast.Slice):
                found.append((node.lineno, f"reads {node.value.id}[{ast.unparse(index)}]"))
    return found


def _toolkit_files():
    for dirpath, _, files in os.walk(os.path.join(ROOT, "toolkit")):
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


def test_no_row_is_read_by_position():
    offenders = []
    for path in _toolkit_files():
        with open(path, encoding="utf-8") as f:
            for line, what in positional_uses(f.read()):
                offenders.append(f"{os.path.relpath(path, ROOT)}:{line}: {what}")
    assert not offenders, ("declare the row as a NamedTuple beside its rule, pack it by name and "
                           "read it by name (p = Row(*hp); p.lr):\n" + "\n".join(offenders))


@pytest.mark.parametrize("source,hits", [
    ("lr, wd, mu = hp", 1),
    ("x = hp[0]", 1),
    ("b1 = constants[2]", 1),
    ("f(call[5])", 1),
    ("rest = hyper[1:]", 1),
    ("for a, b in hp: pass", 1),
    ("p = Row(*hp); x = p.lr", 0),
    ("x = constants['b1']", 0),
    ("x = hp.lr", 0),
    ("w = weights[0]", 0),
])
def test_the_scan_finds_positional_reads(source, hits):
    assert len(positional_uses(textwrap.dedent(source))) == hits
