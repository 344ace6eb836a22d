"""One public description of a step: ``Optimizer.next_step`` says what the next update of an
index reads; the reference backend, ``toolkit.error_bounds`` and the oracle read steps through it
and through public methods only."""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

from toolkit import optimizer
from toolkit.oracle import space

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(optimizer.registry()))
def test_next_step_changes_nothing_and_matches_the_update(name):
    wd = space.COMMON_FIXED.get(name, {}).get("wd", 0.01)   # GroupAdaGrad refuses weight decay
    opt = optimizer.create(name, learning_rate=0.1, wd=wd)
    shape = space.weight_shape(name, 4)                       # GroupAdaGrad: a matrix
    w = np.ones(shape, np.float32)
    state = opt.create_state(0, w)
    before = (dict(opt._index_update_count), opt.num_update, dict(vars(opt)).keys())
    s1, s2 = opt.next_step(0, w), opt.next_step(0, w)
    assert (s1.t, s1.lr, s1.wd) == (s2.t, s2.lr, s2.wd) == (1, 0.1, wd)
    assert (dict(opt._index_update_count), opt.num_update) == before[:2]
    opt.update(0, w, np.full(shape, 0.5, np.float32), state)
    assert opt.next_step(0, w).t == 2 and opt.next_step(1, w).t == 1


def test_the_bookkeeping_each_optimizer_hands_the_oracle():
    w = np.ones(3, np.float32)
    assert set(optimizer.create("nadam").next_step(0, w).reference_state) == {"m_schedule"}
    lb = optimizer.create("lbsgd", batch_scale=2).next_step(0, w)
    assert set(lb.reference_state) == {"cum", "ncum"} and lb.reference_state["cum"].shape == (3,)
    sgld = optimizer.create("sgld", seed=5).next_step(3, w)
    assert sgld.reference_kwargs["seed"] == 5 and "stream" in sgld.reference_kwargs
    assert optimizer.create("adam").next_step(0, w).reference_state == {}


def test_a_bad_learning_rate_is_refused_by_next_step_as_by_update():
    opt = optimizer.create("ftrl", learning_rate=0.0)
    with pytest.raises(ValueError, match="learning rate"):
        opt.next_step(0, np.ones(2, np.float32))


@pytest.mark.parametrize("path", ["toolkit/error_bounds.py", "toolkit/oracle/__init__.py",
                                  "toolkit/oracle/cli.py"])
def test_the_oracle_side_uses_public_optimizer_methods_only(path):
    src = (ROOT / path).read_text()
    private = sorted(set(re.findall(r"\bopt\._[a-z]\w*", src)))
    assert private == [], f"{path} reaches into {private}"
