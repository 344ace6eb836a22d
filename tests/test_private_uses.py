"""Uses of another module's private members in ``toolkit`` and ``reference`` (issue 34, item 3),
counted by the issue's AST rule: ``obj._name`` where ``obj`` is not ``self``/``cls`` and no
function, class, assignment target or argument of the same module is named ``_name``, and every
``from m import _name``. The count may only go down.

What the rule still counts (6): namedtuple methods (``_fields``, ``_replace``, ``_asdict``:
custom.py, lamb.py, lars.py, lbsgd.py) and ``os._exit`` (dist_watchdog.py), public API spelled
with an underscore; numba's simulated device array ``_ary`` (backends/cuda.py).
tests/test_layers.py holds the stricter ratchet that names each allowed use.
"""
from __future__ import annotations

import ast
import collections
import os

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

#: the most uses the rule may find
MAX_USES = 6


def _private(name):
    return name.startswith("_") and not name.startswith("__")


def _names_defined(tree):
    """Every function, class, assignment target (names and attributes) and argument name."""
    defined = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        defined.add(n.id)
                    elif isinstance(n, ast.Attribute):
                        defined.add(n.attr)
    return defined


def private_uses(tree):
    """``[(line, text)]``: the uses of another module's private members in ``tree``."""
    defined = _names_defined(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr not in defined:
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom):
            found.extend((node.lineno, f"from {node.module} import {a.name}")
                         for a in node.names if _private(a.name))
    return found


def all_private_uses():
    """``{file: [(line, text)]}`` over the ``toolkit`` and ``reference`` packages."""
    found = {}
    for package in ("toolkit", "reference"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, package)):
            dirnames.sort()
            for name in sorted(f for f in filenames if f.endswith(".py")):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    uses = private_uses(ast.parse(f.read(), filename=path))
                if uses:
                    found[os.path.relpath(path, ROOT).replace(os.sep, "/")] = uses
    return found


def test_private_uses_do_not_grow():
    found = all_private_uses()
    total = sum(len(v) for v in found.values())
    per_file = collections.Counter({path: len(uses) for path, uses in found.items()})
    listing = "\n".join(f"{n:3d} {path}: " + ", ".join(f"{line}: {text}" for line, text
                                                         in sorted(found[path]))
                        for path, n in per_file.most_common())
    assert total <= MAX_USES, (
        f"{total} uses of another module's private members (at most {MAX_USES}): make a public, "
        f"documented seam or a method of the class itself:\n{listing}")
    print(f"\n{total} uses of another module's private members\n{listing}")


def test_rule_counts_what_the_issue_counts():
    source = ("from m import _hidden, shown\n"
              "_own = 1\n"
              "class A:\n"
              "    def _m(self, _arg):\n"
              "        self._x = cls._y = _arg._z\n"
              "        return other._far + self._m + _arg + this._own + obj.__dict__ + o._m\n")
    assert sorted(private_uses(ast.parse(source))) == [
        (1, "from m import _hidden"), (5, "_arg._z"), (6, "other._far")]
