"""Citations in the repository are ones a user can follow.

The project was written from internal documents (a semantics specification and design notes)
that users of the package do not have. Code comments, docstrings and docs must cite what a user
can open instead: the project's own docs (``docs/mxnet-facts.md``, ``docs/optimizers/<name>.md``,
``docs/conventions.md``, ...) or MXNet's source by path and line at tag 1.9.1.

* No ``.py`` or ``.md`` file of the repository (anything outside ``.git``) cites the internal
  documents; a failure names every ``file:line`` that still does.
* Every line of the MXNet optimizer guide cited as ``guide:L`` (or ``guide line(s) L``) is quoted
  in ``docs/conventions.md``, section "The optimizer guide and guide:L", so the citation resolves
  inside the repository.
* Every registered optimizer with a reference has its page (``Spec.docs``, in
  ``docs/optimizers/``), linked from ``docs/optimizers.md``.
"""
from __future__ import annotations

import os
import re

import pytest

from toolkit.optimizer import specs

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# The patterns are assembled from pieces so that this file does not match them itself.
_SPEC = "sp" + "ec"
_DESIGN = "DES" + "IGN"
_INTERNAL = re.compile(
    "|".join([
        _SPEC + r"\s+sections?\b",                # "<spec> section 2.6", "<spec> sections 1.1 and 4"
        _SPEC + r"\s*\u00a7",                     # "<spec> (section sign)2.6"
        _SPEC + r"\s+\d+(\.\d+)*\b",              # "<spec> 1.6"
        _SPEC + "/",                              # "<spec>/<file>"
        _DESIGN + r"\s+sections?\b",              # "<design> section 4"
        _DESIGN + r"\.md",                        # "<design>.md"
        r"mxnet-1\.9\.1-" + "seman" + "tics",     # the internal semantics file
        "optimizer-" + r"guide\.(txt|md)",        # the internal copies of the guide
    ]),
    re.IGNORECASE)


def _files():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        # the repository's own files: not .git, and not what an install or a tool put inside
        # the checkout (a virtualenv, caches, build output)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in
                             ("build", "dist", "node_modules", "__pycache__")
                             and not d.endswith(".egg-info")
                             and not os.path.exists(os.path.join(dirpath, d, "pyvenv.cfg")))
        for name in sorted(filenames):
            if name.endswith((".py", ".md")):
                yield os.path.join(dirpath, name)


def _lines(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        yield from enumerate(f, 1)


def test_no_citation_of_internal_documents():
    hits = []
    for path in _files():
        for n, line in _lines(path):
            if _INTERNAL.search(line):
                hits.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
    assert not hits, ("cite docs/ or MXNet's source (path:line at tag 1.9.1) instead of the "
                      "internal documents:\n" + "\n".join(hits))


# "guide:35", "guide:52-58", "guide:35, 43, 52-58", "guide line 216", "guide lines 110-111"
_GUIDE_CITE = re.compile(r"\bguide(?::|\s+lines?\s+)(\d+(?:-\d+)?(?:,\s*\d+(?:-\d+)?)*)")
# a quoted line of docs/conventions.md: "  guide:35   w_{i+1} = ..." or "  guide:212-214 (text) ..."
_GUIDE_QUOTE = re.compile(r"^\s+guide:(\d+)(?:-(\d+))?\s")


def _quoted_guide_lines():
    text = open(os.path.join(ROOT, "docs", "conventions.md"), encoding="utf-8").read()
    section = text.split("## The optimizer guide and `guide:L`", 1)
    assert len(section) == 2, "docs/conventions.md has no section quoting the guide's lines"
    body = section[1].split("\n## ", 1)[0]
    quoted = set()
    for line in body.splitlines():
        m = _GUIDE_QUOTE.match(line)
        if m:
            first = int(m.group(1))
            quoted.update(range(first, int(m.group(2) or first) + 1))
    return quoted


def test_every_cited_guide_line_is_quoted():
    quoted = _quoted_guide_lines()
    missing = []
    for path in _files():
        for n, line in _lines(path):
            for m in _GUIDE_CITE.finditer(line):
                for item in m.group(1).split(","):
                    ends = [int(x) for x in item.strip().split("-")]
                    # a range is resolved when both ends are quoted (its inner lines may be prose)
                    for L in ends:
                        if L not in quoted:
                            missing.append(f"{os.path.relpath(path, ROOT)}:{n}: guide:{L}")
    assert not missing, ("guide lines cited but not quoted in docs/conventions.md:\n"
                         + "\n".join(missing))


@pytest.mark.parametrize("spec", list(specs(oracle=True).values()), ids=lambda s: s.name)
def test_every_optimizer_has_a_linked_page(spec):
    """Every registered optimizer with a reference has its page (``Spec.docs``), linked from
    docs/optimizers.md, with the four sections."""
    index = open(os.path.join(ROOT, "docs", "optimizers.md"), encoding="utf-8").read()
    page = os.path.join(ROOT, spec.docs)
    assert os.path.exists(page), f"{spec.docs} is missing"
    link = os.path.relpath(spec.docs, "docs").replace(os.sep, "/")
    assert f"({link})" in index, f"docs/optimizers.md does not link {link}"
    text = open(page, encoding="utf-8").read()
    for heading in ("## Constructor", "## State", "## Update", "## Differences"):
        assert heading in text, f"{spec.docs} has no '{heading}' section"
    assert os.path.exists(os.path.join(ROOT, "docs", "optimizers", "README.md"))
