"""``decoupled_weight_decay`` on NAdam (torch's flag, NAdamW): the weight decays by
``1 - lr*wd`` first and no ``wd*w`` enters the gradient, under convention "pytorch" only
(MXNet's Nadam couples ``wd``); off, nothing changes. Its equality with torch.optim.NAdam is
tests/test_pytorch_convention.py's and tests/test_reference_pytorch.py's (cases with the flag)."""
from __future__ import annotations

import numpy as np
import pytest

import reference
from torch_crossing import loaded_from_torch
from toolkit import optimizer


def test_refused_under_mxnet_at_construction_and_on_assignment():
    with pytest.raises(ValueError, match="decoupled_weight_decay=True is refused under "
                                         "convention 'mxnet'"):
        optimizer.create("nadam", decoupled_weight_decay=True)
    with pytest.raises(ValueError, match="refused under convention 'mxnet'"):
        reference.nadam.step(np.ones(2), np.ones(2), reference.nadam.init_state(np.ones(2)),
                             t=1, lr=0.1, wd=0.1, decoupled_weight_decay=True)
    opt = optimizer.create("nadam", decoupled_weight_decay=True, convention="pytorch")
    with pytest.raises(ValueError, match="refused under convention 'mxnet'"):
        opt.convention = "mxnet"
    assert opt.convention == "pytorch" and opt.decoupled_weight_decay


def test_the_decay_is_the_weights_and_off_changes_nothing():
    """With a zero gradient the decoupled step is ``w*(1 - lr*wd)`` exactly where the moments
    stay zero; the flag off is the coupled update of before, bit for bit."""
    w = np.array([1.0, -2.0, 4.0])
    opt = optimizer.create("nadam", learning_rate=0.1, wd=0.5, convention="pytorch",
                           decoupled_weight_decay=True)
    s = opt.create_state(0, w)
    opt.update(0, w, np.zeros(3), s)
    assert np.array_equal(w, np.array([1.0, -2.0, 4.0]) * (1 - 0.1 * 0.5))
    assert not s[0].any() and not s[1].any()
    a, b = (optimizer.create("nadam", learning_rate=0.1, wd=0.5, convention="pytorch", **kw)
            for kw in ({}, {"decoupled_weight_decay": False}))
    wa, wb = np.linspace(-1, 1, 5), np.linspace(-1, 1, 5)
    sa, sb = a.create_state(0, wa), b.create_state(0, wb)
    for k in range(4):
        g = np.cos(np.arange(5) * (k + 1))
        a.update(0, wa, g, sa)
        b.update(0, wb, g, sb)
    assert np.array_equal(wa, wb)


def test_toolkit_torch_takes_it_and_a_torch_state_dict_carries_it():
    torch = pytest.importorskip("torch")
    import toolkit.torch as tt
    p, q, theirs, mine = loaded_from_torch(torch.optim.NAdam, tt.NAdam, weight_decay=0.1,
                                           decoupled_weight_decay=True)
    assert mine.param_groups[0]["decoupled_weight_decay"] is True
    # MXNet's Nadam cannot continue it
    with pytest.raises(ValueError, match="refused under convention 'mxnet'"):
        tt.Nadam([torch.nn.Parameter(torch.zeros(3))]).load_state_dict(theirs.state_dict())
