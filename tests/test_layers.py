"""Layers that import downward (issue 20 item 4).

* The import graph of the ``toolkit`` package has no cycle. The graph is read from the sources
  (``ast``), not from ``sys.modules``, and counts every import wherever it is written: at the top
  of a module, inside a function or a method (a lazy import is still an edge), ``import a.b``,
  ``from a import b`` (an edge to the submodule ``a.b`` when ``b`` is one, otherwise to ``a``),
  relative imports at any level, and ``importlib.import_module("toolkit....")`` with a constant
  string. Only imports under ``if TYPE_CHECKING:`` are left out (they never run). A failure
  prints every cycle as a chain of modules with the line of each import.
* ``reference`` (the oracle) imports nothing from ``toolkit`` (README: ``import reference``
  needs numpy only, and the oracle shares no code with the kernels it checks).
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


def test_the_library_and_the_oracle_import_no_tool():
    """The tools (``toolkit/tools/``: the mxopt subcommands) sit on top: nothing outside them
    imports them but the command line's dispatcher (``toolkit/__main__.py``)."""
    graph = import_graph("toolkit")
    up = [f"{module} imports {target} (line {line})" for module, edges in sorted(graph.items())
          if not module.startswith("toolkit.tools") and module != "toolkit.__main__"
          for target, line in sorted(edges.items()) if target.startswith("toolkit.tools")]
    assert not up, "a tool imported from below:\n" + "\n".join(up)


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
                           "toolkit (README, \"reference/\"):\n" + "\n".join(offenders))


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


# ------------------------------------------------------------------------------------------------
# no module uses another module's private members
# ------------------------------------------------------------------------------------------------
#: names with a leading underscore that are public API of what they are read from: a namedtuple's
#: methods and fields, and two functions of the standard library
PUBLIC_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults",
                                "_getframe", "_exit"})

#: the sentence a module's docstring carries when it shares private members with the other
#: modules of its own package (a launcher and its kernels), followed by why; such uses are
#: allowed by rule when every module that defines the member is in the same package
SHARED_MARKER = "Shares private members within its package:"


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) \
        and name not in PUBLIC_UNDERSCORED


def _defined_by_classes(tree):
    """The names the classes of ``tree`` define: methods, class attributes, and attributes their
    methods assign on ``self``/``cls``."""
    names = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    for t in ast.walk(target):
                        if isinstance(t, ast.Name):
                            names.add(t.id)
                        elif (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                              and t.value.id in ("self", "cls")):
                            names.add(t.attr)
    return names


def _is_self(node):
    return ((isinstance(node, ast.Name) and node.id in ("self", "cls"))
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "super"))


def private_uses(package="toolkit"):
    """``{(file, name): [lines]}``: every use of another module's private member in
    ``package``: ``x._name`` where ``x`` is not ``self``/``cls``/``super()`` and no class of the
    same module defines ``_name``, and ``from m import _name`` (a private module of the same
    package excepted: importing it is how a package uses its own helper), less the uses a
    module's docstring shares within its package (:data:`SHARED_MARKER`)."""
    known = _modules(package)
    trees, owners = {}, {}
    for module, path in known.items():
        with open(path, encoding="utf-8") as f:
            trees[module] = tree = ast.parse(f.read(), filename=path)
        for name in _defined_by_classes(tree):
            owners.setdefault(name, set()).add(module)
        for node in tree.body:  # module-level names, for the owners of `from m import _name`
            for t in ast.walk(node) if isinstance(node, (ast.Assign, ast.AnnAssign)) else ():
                if isinstance(t, ast.Name):
                    owners.setdefault(t.id, set()).add(module)
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                owners.setdefault(node.name, set()).add(module)
    found = {}
    for module, tree in trees.items():
        path = os.path.relpath(known[module], ROOT).replace(os.sep, "/")
        own = _defined_by_classes(tree)
        is_package = known[module].endswith("__init__.py")
        package_of = module if is_package else module.rpartition(".")[0]
        shares = SHARED_MARKER in (ast.get_docstring(tree) or "")

        def shared(name):
            # the sources cannot say which class an object is of: a member that a module of the
            # same package defines is taken to be that one
            return shares and any(
                (o if known[o].endswith("__init__.py") else o.rpartition(".")[0]) == package_of
                for o in owners.get(name, ()))

        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                if _is_self(node.value) or node.attr in own or shared(node.attr):
                    continue
                found.setdefault((path, node.attr), []).append(node.lineno)
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if not _private(alias.name):
                        continue
                    (target,) = _targets(ast.ImportFrom(module=node.module, names=[alias],
                                                        level=node.level),
                                         module, is_package, known) or (None,)
                    if target is not None and target.rpartition(".")[2] == alias.name:
                        continue  # a private module of the package (toolkit.tools._support)
                    if shared(alias.name):
                        continue
                    found.setdefault((path, alias.name), []).append(node.lineno)
    return found


#: the cross-module private uses left, as (file, member): a ratchet. A new use fails
#: test_no_module_uses_another_modules_private_members; an entry no longer used fails
#: test_private_use_allow_list_only_shrinks (remove it), so the list only shrinks. 108 uses in
#: 54 (file, member) pairs on main at 454af51; the backends, dist and states now use public
#: seams (toolkit.backends.jit and order, the Trainer's parameters/groups/optimizer/backend/
#: apply_update, a Parameter's data()/grad_fresh/mark_grad_stale), row-sparse stepping is a
#: mixin of Optimizer (row_sparse.RowSparseSteps); the Trainer steps through the optimizer's
#: public plan (step_scalars, commit_counts, launch_step, plan_step, restored_on_error,
#: update_counts, restore_counts) and a Parameter's public hooks (trainer, grad_array,
#: sparse_grad, adopt, hold; Trainer.data_changed). What is left, another library's private:
ALLOWED = {
    # other libraries' privates: numba's simulated device array
    ("toolkit/backends/cuda.py", "_ary"),
}


def test_no_module_uses_another_modules_private_members():
    found = private_uses("toolkit")
    new = sorted(f"{path}:{line}: ._{name[1:]}" for (path, name), lines in found.items()
                 if (path, name) not in ALLOWED for line in sorted(lines))
    assert not new, (
        "uses of another module's private members: make a public, documented seam (a "
        "property, a method, a module of its own), or, for modules of one package that must "
        f"share (a launcher and its kernels), say why in the module docstring after "
        f"{SHARED_MARKER!r}:\n" + "\n".join(new))


def test_private_use_allow_list_only_shrinks():
    found = private_uses("toolkit")
    gone = sorted(f"{path}: {name}" for path, name in ALLOWED if (path, name) not in found)
    assert not gone, f"no longer used, remove from ALLOWED: {gone}"
    print(f"\n{sum(len(v) for v in found.values())} cross-module private uses left in "
          f"{len(found)} (file, member) pairs")


def _private_of(sources, tmp_path, monkeypatch):
    for rel, text in sources.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setitem(globals(), "ROOT", str(tmp_path))
    return {name: sorted(lines) for (_, name), lines in private_uses("pkg").items()}


def test_private_scanner_flags_other_modules_members(tmp_path, monkeypatch):
    found = _private_of({
        "pkg/__init__.py": "",
        "pkg/_helper.py": "def util():\n    pass\n",
        "pkg/a.py": "class A:\n    _slot = 1\n    def __init__(self):\n        self._x = 0\n"
                    "    def _m(self):\n        return self._x\n_cache = {}\n",
        "pkg/b.py": ("from . import a, _helper\nfrom .a import _cache\n"
                     "class B(a.A):\n    def go(self, other):\n"
                     "        super()._m()\n        self._m()\n"   # own hierarchy: allowed
                     "        return other._x + a._cache + other._asdict()\n"
                     "t = (1,)._replace\n"),
    }, tmp_path, monkeypatch)
    assert found == {"_cache": [2, 7], "_x": [7]}, found


def test_private_scanner_allows_a_package_that_says_why(tmp_path, monkeypatch):
    kernels = "class K:\n    def _launch(self):\n        pass\n"
    user = "def run(k):\n    return k._launch()\n"
    sources = {"pkg/__init__.py": "", "pkg/sub/__init__.py": "", "pkg/sub/kernels.py": kernels,
               "pkg/sub/launcher.py": f'"""Launcher.\n\n{SHARED_MARKER} its kernels."""\n' + user,
               "pkg/other.py": f'"""Other.\n\n{SHARED_MARKER} nothing."""\n' + user}
    # the launcher shares within pkg.sub; pkg/other.py is outside that package
    assert _private_of(sources, tmp_path, monkeypatch) == {"_launch": [5]}
