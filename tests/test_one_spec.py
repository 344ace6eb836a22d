"""One entry per optimizer: the spec (``toolkit/optimizers/spec.py``) is the only list.

* No ``.py`` file under ``toolkit/``, ``reference/``, ``tests/`` or ``benchmarks/`` spells out a
  list of optimizers: no list, tuple or set display (nested displays and call arguments inside it
  count, so a list of ``("sgd", {...})`` pairs is one display) and no dict's keys holding 4 or
  more distinct registry names as string constants (case-insensitive, so class names count),
  no display of 4 or more registry module or class names (``(sgd, nag, adam, adamw)``,
  ``(optimizer.SGD, ...)``), no ``import``/``from ... import`` of 4 or more of them, no
  ``"sgd nag adam adamw".split()``, and no displays and comprehensions joined with ``+`` that
  hold 4 or more between them (``[("sgd", k, v) for v in V] + [("nag", k, v) for v in V] + ...``:
  a comprehension holds the names of its element and of what it iterates over). Such a table is read from ``toolkit.optimizer.specs()``
  (or ``registry()``) instead; a new optimizer then needs no edit outside its own module.
  A failure prints every offender as ``file:line``.

  Two exemptions, and only these:

  - ``tests/data/mxnet/``: the generators of the recorded MXNet data run under MXNet 1.9.1 in
    their own environment (no toolkit to import) and record what they ran, as provenance.
  - a display that a test checks against the registry: the display's first line carries
    ``# checked against the registry by <test name>``, and ``<test name>`` must be a function
    defined in that file (the scanner verifies it, so a marker cannot outlive its test); a
    script that a test imports (``tests/dist/worker.py``) names the test's file as well:
    ``... by tests/dist/test_dist.py::<test name>``.

* Every spec's docs page exists; ``docs/optimizers.md`` and ``docs/optimizers/README.md`` list in
  their tables exactly the registered optimizers with a reference (one row each, linking the
  page the spec names); ``spec.pytorch`` equals the reference module's ``PYTORCH``.
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from toolkit.optimizer import registry, specs

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SCANNED = ("toolkit", "reference", "tests", "benchmarks")
#: the MXNet 1.9.1 generators: they run in MXNet's environment, not the toolkit's (see above)
EXEMPT_DIRS = (os.path.join("tests", "data", "mxnet"),)
THRESHOLD = 4
MARKER = re.compile(r"#\s*checked against the registry by\s+(?:([\w./-]+\.py)::)?([A-Za-z_]\w*)")


def builtin_names():
    """The registry names of the built-in optimizers (lower case; a class name lower-cased is
    its registry name), whatever a test registered on top."""
    return frozenset(n for n, k in registry().items()
                     if k.__module__.startswith("toolkit.optimizers."))


def _names(node, names):
    """The registry names a display holds, as string constants or as module/class names."""
    if isinstance(node, ast.Constant):
        return {node.value.lower()} & names if isinstance(node.value, str) else set()
    if isinstance(node, ast.Name):
        return {node.id.lower()} & names
    if isinstance(node, ast.Attribute):
        return {node.attr.lower()} & names
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return set().union(*(_names(e, names) for e in node.elts))
    if isinstance(node, ast.Dict):
        keys = set().union(*(_names(k, names) for k in node.keys if k is not None))
        values = set().union(*(_names(v, names) for v in node.values
                               if isinstance(v, (ast.List, ast.Tuple, ast.Set, ast.Dict,
                                                 ast.Call))))
        return keys | values
    if isinstance(node, ast.Call):  # pytest.param("sgd", ...), ("sgd", dict(...)) inside a display
        return set().union(*(_names(a, names) for a in node.args))
    if isinstance(node, ast.Starred):
        return _names(node.value, names)
    return set()


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _joined_names(node, names):
    """The registry names held by the displays and comprehensions of a ``+`` chain (``[...] +
    [... for v in V] + ...``), or an empty set where ``node`` is no such chain."""
    def operands(n):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add):
            return operands(n.left) + operands(n.right)
        return [n]

    def held(n):
        if isinstance(n, _COMPREHENSIONS):
            parts = [n.key, n.value] if isinstance(n, ast.DictComp) else [n.elt]
            return set().union(*(_names(p, names) for p in parts + [g.iter for g in n.generators]))
        if isinstance(n, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            return _names(n, names)
        return set()

    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
        return set()
    return set().union(*(held(n) for n in operands(node)))


def _split_names(node, names):
    """``"sgd nag adam adamw".split()``: the names of the split string."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "split" and isinstance(node.func.value, ast.Constant)
            and isinstance(node.func.value.value, str)):
        return {w.lower() for w in re.split(r"[\s,]+", node.func.value.value)} & names
    return set()


def _functions(tree):
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef,
                                                            ast.AsyncFunctionDef))}


def _defined_in(path):
    """The functions defined in the repository's file ``path`` (none if it does not exist)."""
    full = os.path.join(ROOT, path)
    if not os.path.isfile(full):
        return set()
    with open(full, encoding="utf-8") as f:
        return _functions(ast.parse(f.read(), filename=path))


def scan_source(source, path, names):
    """``[(line, what)]``: every name list of ``source`` that is not exempt."""
    tree = ast.parse(source, filename=path)
    lines = source.splitlines()
    tests = _functions(tree)
    found = []

    def report(node, held, kind):
        line = lines[node.lineno - 1] if node.lineno <= len(lines) else ""
        mark = MARKER.search(line)
        if mark:
            where, test = mark.group(1) or path, mark.group(2)
            if test in (tests if mark.group(1) is None else _defined_in(where)):
                return
        why = (f" (marked, but {where} defines no {test})" if mark else "")
        found.append((node.lineno, f"{kind} of {len(held)} optimizer names "
                                   f"({', '.join(sorted(held))}){why}"))

    def visit(node):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            held = _names(node, names)
            if len(held) >= THRESHOLD:
                report(node, held, type(node).__name__.lower())
                return  # the outermost display is the offender; not its parts again
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            held = {a.name.rsplit(".", 1)[-1].lower() for a in node.names} & names
            if len(held) >= THRESHOLD:
                report(node, held, "import")
        elif isinstance(node, ast.BinOp):
            held = _joined_names(node, names)
            if len(held) >= THRESHOLD:
                report(node, held, "joined displays and comprehensions")
                return  # the whole chain is the offender; not its parts again
        else:
            held = _split_names(node, names)
            if len(held) >= THRESHOLD:
                report(node, held, "split string")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _python_files():
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")))
            rel = os.path.relpath(dirpath, ROOT)
            if any(rel == d or rel.startswith(d + os.sep) for d in EXEMPT_DIRS):
                continue
            for name in sorted(filenames):
                if name.endswith(".py"):
                    yield os.path.join(dirpath, name)


def _offenders():
    names = builtin_names()
    found = {}
    for path in _python_files():
        rel = os.path.relpath(path, ROOT)
        with open(path, encoding="utf-8") as f:
            source = f.read()
        hits = [f"{rel}:{line}: {what}" for line, what in scan_source(source, rel, names)]
        if hits:
            found[rel] = hits
    return found


def test_no_list_of_optimizer_names_outside_the_specs():
    offenders = [h for hits in _offenders().values() for h in hits]
    assert not offenders, (
        "read these from toolkit.optimizer.specs() (a per-optimizer fact is a Spec field), or "
        "mark a list that a test of the same file checks against the registry with "
        "'# checked against the registry by <test name>':\n" + "\n".join(offenders))


# the scanner itself: the sources below are built from the registry, so that this file holds
# no list of names of its own
def _some(k=THRESHOLD):
    return sorted(builtin_names())[:k]


@pytest.mark.parametrize("template", [
    "X = [{q}]",
    "X = ({q},)",
    "X = {{{q}}}",
    "X = {{{kv}}}",
    "X = [{pairs}]",
    "X = [{params}]",
    "X = {{'a': ({q1}), 'b': ({q2})}}",
    "for n in ({q}):\n    pass",
    "X = ({bare})",
    "X = (optimizer.{cls})",
    "from reference import {bare}",
    "import {dotted}",
    "X = '{words}'.split()",
    "X = [{Q}]",
    "X = ({comps})",
    "X = ({comps_multiline})",
    "X = [{q1}] + [(n, v) for n in ({q2}) for v in V]",
    "f([{q1}] + [{q2}])",
])
def test_scanner_flags_a_name_list(template):
    some = _some()
    names = builtin_names()
    classes = {n: k.__name__ for n, k in registry().items()}
    half = len(some) // 2
    source = template.format(
        q=", ".join(repr(n) for n in some), Q=", ".join(repr(n.upper()) for n in some),
        q1=", ".join(repr(n) for n in some[:half]) + ",",
        q2=", ".join(repr(n) for n in some[half:]) + ",",
        kv=", ".join(f"{n!r}: 1" for n in some),
        pairs=", ".join(f"({n!r}, {{}})" for n in some),
        params=", ".join(f"pytest.param({n!r}, id='x')" for n in some),
        bare=", ".join(some), cls=", optimizer.".join(classes[n] for n in some),
        dotted=", ".join(f"reference.{n}" for n in some), words=" ".join(some),
        comps=" + ".join(f"[({n!r}, 'k', v) for v in V]" for n in some),
        comps_multiline="\n     + ".join(f"[({n!r}, 'k', v) for v in V]" for n in some))
    assert [line for line, _ in scan_source(source, "x.py", names)] == [1], source


def test_scanner_passes_short_lists_and_values():
    names = builtin_names()
    few = _some(THRESHOLD - 1)
    some = _some()
    sources = [
        f"X = {few!r}",                                            # fewer than the threshold
        "X = {" + ", ".join(f"'k{i}': {n!r}" for i, n in enumerate(some)) + "}",  # values only
        f"X = {[n + '_x' for n in some]!r}",                       # not registry names
        "X = " + " + ".join(f"[({n!r}, v) for v in V]" for n in few),  # joined, too few
        "X = " + " + ".join(f"[(n, v) for v in {n!r}]" for n in ("a", "b", "c", "d")),
    ]
    for source in sources:
        assert scan_source(source, "x.py", names) == [], source


def test_scanner_marker_needs_the_named_test_in_the_same_file():
    names = builtin_names()
    display = f"X = {_some()!r}  # checked against the registry by test_x_matches\n"
    checked = display + "\n\ndef test_x_matches():\n    pass\n"
    assert scan_source(checked, "x.py", names) == []
    hits = scan_source(display, "x.py", names)
    assert [line for line, _ in hits] == [1] and "defines no test_x_matches" in hits[0][1]
    # a marker on another line exempts nothing
    moved = textwrap.dedent(f"""\
        # checked against the registry by test_x_matches
        X = {_some()!r}

        def test_x_matches():
            pass
        """)
    assert [line for line, _ in scan_source(moved, "x.py", names)] == [2]
    # a test in another file: that file must define it
    here = os.path.relpath(os.path.abspath(__file__), ROOT)
    elsewhere = f"X = {_some()!r}  # checked against the registry by {here}::"
    assert scan_source(elsewhere + "test_scanner_marker_needs_the_named_test_in_the_same_file",
                       "x.py", names) == []
    assert [line for line, _ in scan_source(elsewhere + "test_nothing_here", "x.py", names)] == [1]


# ------------------------------------------------------------------------------------------------
# the docs and the reference agree with the specs
# ------------------------------------------------------------------------------------------------

def _table_links(path):
    """The docs pages linked from the first cell of each row of the tables of ``path``
    (``| [`sgd`](optimizers/sgd.md) | ...``), as paths relative to the repository."""
    base = os.path.dirname(path)
    links = []
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\|\s*\[[^\]]*\]\(([^)#]+\.md)\)\s*\|", line)
            if m:
                links.append(os.path.normpath(os.path.join(base, m.group(1))))
    return links


@pytest.mark.parametrize("spec", list(specs().values()), ids=lambda s: s.name)
def test_every_spec_has_its_docs_page(spec):
    assert spec.docs is not None, f"{spec.name}: the spec names no docs page"
    assert os.path.isfile(os.path.join(ROOT, spec.docs)), f"{spec.name}: {spec.docs} is missing"


@pytest.mark.parametrize("index", ["docs/optimizers.md", "docs/optimizers/README.md"])
def test_docs_tables_list_exactly_the_optimizers_with_a_reference(index):
    links = _table_links(index)
    expected = sorted(os.path.normpath(s.docs) for s in specs(oracle=True).values())
    assert sorted(links) == expected, (
        f"{index}: its tables list {sorted(links)}; the registered optimizers with a reference "
        f"have the pages {expected}")


@pytest.mark.parametrize("spec", list(specs(oracle=True).values()), ids=lambda s: s.name)
def test_spec_pytorch_is_the_reference_decision(spec):
    module = spec.reference_module()
    assert module.NAME == spec.name
    assert spec.pytorch == module.PYTORCH, (
        f"{spec.name}: the spec says pytorch={spec.pytorch!r}, {spec.reference}.PYTORCH is "
        f"{module.PYTORCH!r}")


def test_reference_finds_its_modules_without_the_toolkit():
    """``reference.OPTIMIZERS`` is found by scanning the package (modules that declare ``NAME``);
    importing it imports neither the toolkit nor scipy (``reference.argmin``'s), and it holds
    exactly the references the specs name."""
    code = ("import json, sys, reference\n"
            "print(json.dumps([sorted(reference.OPTIMIZERS), "
            "sorted(m for m in sys.modules if m.split('.')[0] in ('toolkit', 'scipy', 'numba'))]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PYTHONPATH=ROOT), check=True)
    found, imported = json.loads(out.stdout)
    assert imported == []
    assert found == sorted(s.reference.rsplit(".", 1)[-1] for s in specs(oracle=True).values())
    assert all(s.reference == f"reference.{s.name}" for s in specs(oracle=True).values())
