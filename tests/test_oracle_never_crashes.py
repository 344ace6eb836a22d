"""The oracle never crashes on what a user's code does: whatever ``make_step`` or ``step``
returns or raises, ``verify`` and ``identify`` return a report (docs/oracle.md, "What the oracle
refuses"); only ``SystemExit`` and ``KeyboardInterrupt`` pass through."""
from __future__ import annotations

import numpy as np

from toolkit import oracle
from toolkit.oracle import region
from toolkit.oracle.space import Decades

from test_oracle import make_adam


def test_bisection_between_far_apart_ends_stays_inside_them():
    # sqrt(bad*good) underflowed to 0 once the ends were 1e-300 and 1e-150 apart, and the next
    # ratio max/min divided by it (ZeroDivisionError)
    edge = region.bisect(lambda x: x < 1e-200, 1e-300, 0.5)
    assert 1e-200 <= edge <= 1.02e-200
    assert region.bisect(lambda x: x < 1e-320 or x == 0.0, 5e-324, 1e308) >= 1e-320
    assert 0.3 <= region.bisect(lambda x: x < 0.3, 0.0, 0.5) <= 0.3005


def _adam_wrong_below(limit):
    correct = make_adam()

    def make(w, **hyper):
        step = correct(w, **hyper)
        return lambda g: step(g) * (1.5 if hyper["beta1"] < limit else 1.0)
    return make


def test_a_failure_only_for_beta1_below_1e_200_is_located_not_a_crash():
    # the Adam: verify ended in ZeroDivisionError at the region's bisection
    r = oracle.verify(_adam_wrong_below(1e-200), "adam", convention="guide", dtype="float64",
                      examples=10, ranges={"beta1": Decades(-310, -290)})
    assert r.domains["usual"].passed and not r.domains["full"].passed
    assert r.region.startswith("only for beta1 < 1e-200"), r.region
