"""Each optimizer page (``docs/optimizers/<name>.md``, its spec's ``docs``) says what a flag does
as the code does it (issue 34 item 9). Automated for ``lazy_update``: the page's row of the
keyword table names the row-sparse behaviour ``row_sparse_mode`` has with it on and off."""
from __future__ import annotations

import os
import re

import pytest

from toolkit.optimizer import create, specs

ROOT = os.path.join(os.path.dirname(__file__), "..")
LAZY = sorted(name for name in specs() if "lazy_update" in create(name).hyperparameter_domains())


def _row(page, keyword):
    rows = [line for line in page.splitlines() if re.match(rf"\|\s*`{keyword}`\s*\|", line)]
    assert len(rows) == 1, f"no single table row for {keyword}"
    return rows[0]


def _mode(name, lazy):
    try:
        return create(name, lazy_update=lazy).row_sparse_mode(0)
    except ValueError:
        return "refused"


def test_the_pages_with_lazy_update_are_known():
    assert {"adam", "sgd", "lars"} <= set(LAZY)


@pytest.mark.parametrize("name", LAZY)
def test_lazy_update_row_says_what_it_does(name):
    with open(os.path.join(ROOT, specs()[name].docs), encoding="utf-8") as f:
        row = _row(f.read(), "lazy_update").lower()
    on, off = _mode(name, True), _mode(name, False)
    assert "sparse" in row, row                # it is about row-sparse gradients
    if on != off:                              # the flag changes the update: the page says how
        assert "no effect" not in row.replace("no effect on a dense gradient", ""), row
        for mode in (on, off):
            word = {"lazy": "lazily", "standard": "standard", "dense": "dense"}[mode]
            assert word in row, (mode, row)
    else:                                      # it does not: the page says so, and why
        assert "no effect" in row, row
        if on == "refused":
            assert "refuses" in row, row
