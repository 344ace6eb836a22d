"""The road from ``update`` to the kernel (issue 34, item 1): the fourth ``Optimizer.update`` of
Adam with the same index, shape and dtype (float32 state) enters at most 12 Python functions of
``toolkit/`` in at most 4 files, counted with ``sys.setprofile`` (comprehension,
generator-expression and lambda frames not counted; numba reports its compiled loop as a call,
which counts)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from toolkit import optimizer

TOOLKIT = os.path.join(os.path.dirname(os.path.abspath(optimizer.__file__)), "")
UNCOUNTED = ("<listcomp>", "<genexpr>", "<lambda>", "<dictcomp>", "<setcomp>")


def _entries(call):
    """``[(file under toolkit/, function)]`` entered while ``call()`` runs."""
    seen = []

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(TOOLKIT) and code.co_name not in UNCOUNTED:
                seen.append((code.co_filename[len(TOOLKIT):], code.co_name))
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the goal is stated for CPython 3.11")
@pytest.mark.parametrize("name, kwargs", [("adam", {}), ("sgd", {"momentum": 0.9})])
def test_a_warm_update_enters_few_functions_in_few_files(name, kwargs):
    opt = optimizer.create(name, **kwargs)
    w = np.ones(4096, np.float32)
    g = np.full(4096, 0.1, np.float32)
    s = opt.create_state(0, w)
    for _ in range(3):
        opt.update(0, w, g, s)
    for grad in (g, g.copy()):  # the same gradient, or a new array (a training loop's)
        before = w.copy()
        seen = _entries(lambda: opt.update(0, w, grad, s))
        assert not np.array_equal(w, before)  # it stepped
        files = {f for f, _ in seen}
        assert len(seen) <= 12 and len(files) <= 4, seen
        assert seen[0] == (os.path.join("optimizers", "base.py"), "update")


def test_the_count_sees_a_cold_update():
    """The tracer itself: a first update (every check) enters many more."""
    opt = optimizer.create("adam")
    w = np.ones(16, np.float32)
    s = opt.create_state(0, w)
    seen = _entries(lambda: opt.update(0, w, np.ones(16, np.float32), s))
    assert len(seen) > 12
