"""Shared test configuration: hypothesis profiles, chosen by TOOLKIT_HYPOTHESIS_PROFILE.

* ``ci`` (default): derandomized, so every CI run draws the same examples.
* ``thorough``: random, many more examples; run it locally before a release.
* ``dev``: few examples, for quick iteration.

A test that caps its examples for CI time writes ``examples_budget.scaled(n)``: ``n`` under
``ci``, scaled with the loaded profile (``thorough``: 25 times).
"""
import os

from hypothesis import HealthCheck, settings

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=40, derandomize=True, database=None, print_blob=True,
                          **_common)
settings.register_profile("thorough", max_examples=1000, **_common)
settings.register_profile("dev", max_examples=10, **_common)
settings.load_profile(os.environ.get("TOOLKIT_HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_finish(session):
    """What collection made (the imports: torch alone makes about 400,000 objects) goes to
    gc's permanent generation, which ``gc.get_objects()`` leaves out: the address check of
    ``toolkit.torch``'s launches (``tests/torch_memory.py``) then walks only what the tests
    make. A tensor made at import time is no longer found by it: a launch on one would fail
    the check, never pass it wrongly."""
    import gc
    gc.collect()
    gc.freeze()


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _toolkit_torch_create_in_train_mode(monkeypatch):
    """The generic suites make ``toolkit.torch`` optimizers with ``toolkit.torch.create`` and
    step them at once. An optimizer with the train/eval switch (Schedule-Free AdamW) starts in
    eval mode and refuses to step until ``train()``, as its authors' does; a user's loop calls
    ``optimizer.train()`` first, and so does ``create`` here. tests/test_adamwschedulefree.py
    checks the refusal itself with the class made directly."""
    import sys
    tt = sys.modules.get("toolkit.torch")
    if tt is None:
        return
    import functools
    create = tt.create

    @functools.wraps(create)
    def create_in_train_mode(*args, **kwargs):
        opt = create(*args, **kwargs)
        if callable(getattr(opt, "train", None)):
            opt.train()
        return opt
    monkeypatch.setattr(tt, "create", create_in_train_mode)
