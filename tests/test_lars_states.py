"""LARS's momentum correction reads the previous call's learning rate (MXNet's ``cur_lr`` and
``last_lr``): the Trainer's states file keeps them, so a resumed run equals an uninterrupted one
bit for bit, and a file with a bad value is refused."""
import json
import zipfile

import numpy as np
import pytest

from toolkit import Parameter, Trainer, lr_scheduler


def _trainer(init):
    p = Parameter("fc_weight", init=np.array(init, np.float32))
    sched = lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=0.5)
    return p, Trainer([p], "lars", {"learning_rate": 0.5, "momentum": 0.9, "eta": 1.0,
                                    "lr_scheduler": sched})


def _steps(p, tr, n):
    for _ in range(n):
        p.set_grad(np.arange(1, 6, dtype=np.float32))
        tr.step(1)


def test_resumed_run_equals_uninterrupted(tmp_path):
    p, tr = _trainer(np.ones(5))
    _steps(p, tr, 4)
    q, tq = _trainer(np.ones(5))
    _steps(q, tq, 2)
    tq.save_states(tmp_path / "lars.states")
    r, tr2 = _trainer(q.data().copy())
    tr2.load_states(tmp_path / "lars.states")
    assert (tr2.optimizer.cur_lr, tr2.optimizer.last_lr) == (tq.optimizer.cur_lr,
                                                            tq.optimizer.last_lr)
    _steps(r, tr2, 2)
    assert np.array_equal(r.data(), p.data())


def test_bad_host_state_refused():
    p, tr = _trainer(np.ones(5))
    with pytest.raises(ValueError, match="cur_lr and last_lr"):
        tr.optimizer.check_host_state({"cur_lr": -1.0, "last_lr": None}, {})
    with pytest.raises(ValueError, match="cur_lr and last_lr"):
        tr.optimizer.check_host_state({"cur_lr": 0.1}, {})
