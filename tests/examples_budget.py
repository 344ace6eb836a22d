"""Hypothesis example counts that follow the loaded profile (tests/conftest.py): a test that caps
its examples for CI time writes ``scaled(n)``, which is ``n`` under the ``ci`` profile and grows
or shrinks with the loaded profile's ``max_examples`` (``thorough``: 25 times, ``dev``: a quarter,
never below 1)."""
from __future__ import annotations

from hypothesis import settings


def scaled(n):
    """``n`` examples under the ``ci`` profile, scaled by the loaded profile's ``max_examples``
    over ``ci``'s."""
    ci = settings.get_profile("ci").max_examples
    return max(1, round(n * settings.default.max_examples / ci))
