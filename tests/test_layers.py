"""Layers that import downward (issue 20 item 4).

* The import graph of the ``toolkit`` package has no cycle. The graph is read from the sources
  (``ast``), not from ``sys.modules``, and counts every import wherever it is written: at the top
  of a module, inside a function or a method (a lazy import is still an edge), ``import a.b``,
  ``from a import b`` (an edge to the submodule ``a.b`` when ``b`` is one, otherwise to ``a``),
  relative imports at any level, and ``importlib.import_module("toolkit....")`` with a constant
  string. Only imports under ``if TYPE_CHECKING:`` are left out (they never run). A failure
  prints every cycle as a chain of modules with the line of each import.
* ``reference`` (the oracle) imports nothing from ``toolkit`` (DESIGN sections 1 and 3: the
  reference needs numpy only and shares no code with the kernels).
"""
from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


# ------------------------------------------------------------------------------------------------
# the import graph, from the sources
# ------------------------------------------------------------------------------------------------

def _modules(package):
    """``{dotted name: path}`` of every module of ``package`` (a package is its ``__init__``)."""
    found = {}
    top = os.path.join(ROOT, package)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")))
        if "__init__.py" not in filenames:
            dirnames[:] = []
            continue
        rel = os.path.relpath(dirpath, ROOT).split(os.sep)
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            parts = rel if name == "__init__.py" else rel + [name[:-3]]
            found[".".join(parts)] = os.path.join(dirpath, name)
    return found


def _is_type_checking(test):
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(tree):
    """Every import node of ``tree`` (at any depth) but those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id == "import_module"))):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _targets(node, module, is_package, known):
    """The modules of ``known`` that the import ``node`` of ``module`` loads by name."""
    def nearest(name):
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    if isinstance(node, ast.Import):
        return {nearest(a.name) for a in node.names} - {None}
    if isinstance(node, ast.Call):  # importlib.import_module("toolkit.x")
        return {nearest(node.args[0].value)} - {None}
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module
    found = set()
    for alias in node.names:
        sub = f"{source}.{alias.name}"
        found.add(sub if sub in known else nearest(source))
    return found - {None}


def import_graph(package="toolkit"):
    """``{module: {imported module: first line}}`` for the modules of ``package``, counting
    imports inside functions too (see the module docstring)."""
    known = _modules(package)
    graph = {}
    for module, path in known.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        edges = graph.setdefault(module, {})
        is_package = path.endswith("__init__.py")
        for node in _imports(tree):
            for target in _targets(node, module, is_package, known):
                if target != module:
                    edges[target] = min(edges.get(target, node.lineno), node.lineno)
    return graph


def cycles(graph):
    """The strongly connected components of ``graph`` with more than one module, each as one
    cycle through all of it where there is one (else a shortest cycle per module)."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    counter = [0]

    def strongconnect(v):  # Tarjan, iterative over each node's edges
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, edges = work[-1]
            for w in edges:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return components


def _shortest_cycle(graph, start, members):
    """A shortest path ``start -> ... -> start`` inside ``members``."""
    previous = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    return path[::-1] + [start]
                if w not in previous:
                    previous[w] = v
                    nxt.append(w)
        frontier = nxt
    return None


def describe(graph, component):
    """Each module's shortest cycle in ``component``, as ``a (line n) -> b (line m) -> a``."""
    members = set(component)
    seen, lines = set(), []
    for start in component:
        path = _shortest_cycle(graph, start, members)
        key = frozenset(path)
        if key in seen:
            continue
        seen.add(key)
        lines.append("  " + " -> ".join(
            f"{a} (line {graph[a][b]})" for a, b in zip(path, path[1:])) + f" -> {path[-1]}")
    return "\n".join(lines)


def test_toolkit_imports_have_no_cycle():
    graph = import_graph("toolkit")
    found = cycles(graph)
    assert not found, (
        "import cycles in toolkit/ (imports inside functions count): a lower layer must not "
        "import a higher one; move what both need into a module of its own:\n"
        + "\n".join(f"cycle through {', '.join(c)}:\n{describe(graph, c)}" for c in found))


def test_reference_imports_nothing_from_toolkit():
    offenders = []
    for module, path in sorted(_modules("reference").items()):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Call):
                names = [node.args[0].value]
            else:
                names = [] if node.level else [node.module or ""]
            offenders += [f"{os.path.relpath(path, ROOT)}:{node.lineno}: imports {n}"
                          for n in names if n == "toolkit" or n.startswith("toolkit.")]
    assert not offenders, ("the reference needs numpy only and shares no code with the "
                           "toolkit (DESIGN sections 1 and 3):\n" + "\n".join(offenders))


# ------------------------------------------------------------------------------------------------
# the graph reader itself
# ------------------------------------------------------------------------------------------------

def _graph_of(sources, tmp_path, monkeypatch):
    for rel, text in sources.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setitem(globals(), "ROOT", str(tmp_path))
    return import_graph("pkg")


@pytest.mark.parametrize("importer", [
    "from . import b",
    "from .b import thing",
    "from pkg import b",
    "import pkg.b",
    "import pkg.b as bee",
    "def f():\n    from . import b",
    "class C:\n    def m(self):\n        from .b import thing",
    "import importlib\ndef f():\n    return importlib.import_module('pkg.b')",
])
def test_reader_sees_every_kind_of_import(importer, tmp_path, monkeypatch):
    graph = _graph_of({"pkg/__init__.py": "", "pkg/a.py": importer + "\n",
                       "pkg/b.py": "from . import a\n"}, tmp_path, monkeypatch)
    assert "pkg.b" in graph["pkg.a"], importer
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_reader_resolves_relative_levels_and_packages(tmp_path, monkeypatch):
    graph = _graph_of({
        "pkg/__init__.py": "from .sub import c\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "from ..d import x\nfrom .. import e\n",
        "pkg/d.py": "",
        "pkg/e.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from .sub import c\n",
    }, tmp_path, monkeypatch)
    assert set(graph["pkg"]) == {"pkg.sub.c"}
    assert set(graph["pkg.sub.c"]) == {"pkg.d", "pkg.e"}
    assert graph["pkg.e"] == {}  # TYPE_CHECKING imports never run
    assert cycles(graph) == []


def test_reader_reports_a_long_cycle_with_lines(tmp_path, monkeypatch):
    graph = _graph_of({
        "pkg/__init__.py": "", "pkg/a.py": "from . import b\n",
        "pkg/b.py": "\nfrom . import c\n", "pkg/c.py": "def f():\n    from . import a\n",
    }, tmp_path, monkeypatch)
    (component,) = cycles(graph)
    assert component == ["pkg.a", "pkg.b", "pkg.c"]
    assert describe(graph, component) == (
        "  pkg.a (line 1) -> pkg.b (line 2) -> pkg.c (line 2) -> pkg.a")
