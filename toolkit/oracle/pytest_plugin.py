"""The pytest plugin of the toolkit (registered through the ``pytest11`` entry point).

It adds one fixture, ``mxopt_oracle``: the :mod:`toolkit.oracle` module, so a user's test reads::

    def test_my_adam(mxopt_oracle):
        mxopt_oracle.assert_matches_oracle(make_my_adam, "adam", convention="guide")

``assert_matches_oracle`` raises an ``AssertionError`` whose message is the report's summary:
the worst case with its hyperparameters, inputs, step, element, expected and got. The plugin
imports nothing until the fixture is used.
"""
from __future__ import annotations

import pytest


@pytest.fixture
def mxopt_oracle():
    """The :mod:`toolkit.oracle` module (``verify``, ``identify``, ``assert_matches_oracle``),
    with the installed ``reference`` package in ``sys.modules`` (a ``reference.py`` in the
    rootdir, first on ``sys.path`` in a pytest run, is the user's own)."""
    from toolkit import oracle
    from toolkit.oracle.installed import ensure_reference
    ensure_reference()
    return oracle
