"""The pytest fixture ``mxopt_regress``: a regression test of a user's optimizer in their suite.

Registered through the ``pytest11`` entry point ``mxopt-regress``, or with
``-p toolkit.tools.regress.pytest_plugin``. A test reads::

    def test_my_adam_has_not_moved(mxopt_regress):
        mxopt_regress(make_adam, "adam", "golden/my_adam.json", convention="guide")

The first run records the golden file (:func:`~toolkit.tools.regress.record_user`) and fails,
saying so; later runs compare (:func:`~toolkit.tools.regress.compare`). ``pytest --mxopt-record``
records again. A relative path is relative to the test file's folder.
"""
from __future__ import annotations

import os

import pytest

__all__ = ["mxopt_regress", "RegressCheck", "RECORD_OPTION"]

#: the command-line option that records the golden files again
RECORD_OPTION = "--mxopt-record"


def pytest_addoption(parser):
    parser.addoption(RECORD_OPTION, action="store_true", default=False,
                     help="mxopt_regress: record the golden files of a user's optimizer again "
                          "instead of comparing (default: compare; a missing file is recorded)")


class RegressCheck:
    """``check(make_step, optimizer, path, *, convention=None, dtype="float32", fixed=None,
    cases=20, bound=0, allow_wider=False) -> Report``: compare ``make_step`` with the golden
    file ``path`` (record it where it is missing, or with ``--mxopt-record``)."""

    def __init__(self, folder, rerecord):
        self.folder, self.rerecord = folder, rerecord

    def __call__(self, make_step, optimizer, path, *, convention=None, dtype="float32",
                 fixed=None, cases=None, bound=0, allow_wider=False):
        from . import compare, record_user
        from .users import DEFAULT_CASES
        path = os.path.join(self.folder, os.fspath(path))
        if self.rerecord or not os.path.exists(path):
            res = record_user(path, make_step, optimizer, convention=convention, dtype=dtype,
                              fixed=fixed, cases=DEFAULT_CASES if cases is None else cases,
                              allow_wider=allow_wider, overwrite=True,
                              command=f"mxopt_regress({optimizer!r}, {path!r})")
            if not self.rerecord:
                pytest.fail(f"recorded {res.entries} entries of a user's {optimizer} into "
                            f"{path} (there was no golden file): commit it; the next run "
                            "compares", pytrace=False)
        rep = compare(path, bound=bound, make_step=make_step, progress=False)
        if not rep.ok:
            lines = [f"{e.id}: {e.status}: {e.reason}" for e in rep.entries if e.failed]
            pytest.fail(f"{path}: {rep.summary()}\n" + "\n".join(lines), pytrace=False)
        return rep


@pytest.fixture
def mxopt_regress(request):
    """Compare a user's ``make_step`` with its golden file (:class:`RegressCheck`)."""
    from ...oracle.installed import ensure_reference
    ensure_reference()
    return RegressCheck(os.path.dirname(str(request.path)),
                        request.config.getoption(RECORD_OPTION))
