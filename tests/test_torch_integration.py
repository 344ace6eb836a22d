"""toolkit.torch where torch's machinery meets it: ``torch.compile`` of a train step that calls
``opt.step()``, torch's thread count, torch's random seed (SGLD), and error messages in torch's
words (docs/torch.md)."""
from __future__ import annotations

import numba
import pytest

torch = pytest.importorskip("torch", reason="toolkit.torch needs PyTorch")

import toolkit.torch as tt  # noqa: E402
from toolkit.torch import rule_table  # noqa: E402


def test_a_compiled_train_step_runs_with_a_graph_break_at_the_step():
    """torch.compile (backend "eager") of a step that calls opt.step() raised ("'ndarray' object
    has no attribute 'setflags'"); the step now breaks the graph and runs eagerly, with the
    numbers of the plain loop."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    twin = torch.nn.Linear(4, 2)
    twin.load_state_dict(model.state_dict())
    opt = tt.Adam(model.parameters(), lr=1e-2)
    ref = tt.Adam(twin.parameters(), lr=1e-2)
    x = torch.randn(8, 4)

    def train(m, o):
        o.zero_grad()
        loss = m(x).square().mean()
        loss.backward()
        o.step()
        return loss

    compiled = torch.compile(train, backend="eager")
    for _ in range(3):
        compiled(model, opt)
        train(twin, ref)
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_kernels_follow_torch_num_threads(monkeypatch):
    """torch.set_num_threads(1) was ignored (numba kept its own count): the kernels now run on
    torch's count, and numba's own setting is put back after the step."""
    seen = []
    real = rule_table.launch_addressed

    def spy(*args):
        seen.append(numba.get_num_threads())
        return real(*args)

    monkeypatch.setattr(rule_table, "launch_addressed", spy)
    p = torch.nn.Parameter(torch.zeros(1 << 17))  # above the parallel threshold
    opt = tt.Adam([p], lr=1e-3)
    before = torch.get_num_threads()
    numba_before = numba.get_num_threads()
    try:
        for threads in (1, 2, 1):
            torch.set_num_threads(threads)
            p.grad = torch.ones_like(p)
            opt.step()
            assert seen[-1] == threads
            assert numba.get_num_threads() == numba_before
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_a_first_step_keeps_torchs_thread_count():
    """numba's OpenMP pool, launched by a process's first step, set the OpenMP runtime it
    shares with torch to NUMBA_NUM_THREADS threads: a torch.set_num_threads(1) made before was
    lost (torch's own steps then ran on 2 threads). In a fresh process (the pool not yet
    launched): torch keeps its count."""
    import subprocess
    import sys
    code = ("import torch, toolkit.torch as tt\n"
            "torch.set_num_threads(1)\n"
            "p = torch.nn.Parameter(torch.ones(8)); p.grad = torch.ones(8)\n"
            "tt.Adam([p]).step()\n"
            "print(torch.get_num_threads())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split()[-1] == "1", out.stdout + out.stderr


def test_sgld_follows_torch_manual_seed_unless_given_a_seed():
    def run(torch_seed, **kw):
        torch.manual_seed(torch_seed)
        p = torch.nn.Parameter(torch.zeros(16))
        p.grad = torch.zeros(16)
        tt.SGLD([p], lr=0.01, **kw).step()
        return p.detach().clone()
    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))
    assert torch.equal(run(0, seed=5), run(1, seed=5))
    torch.manual_seed(3)
    assert tt.SGLD([torch.nn.Parameter(torch.zeros(2))]).param_groups[0]["seed"] == 3


def test_a_momentum_change_speaks_of_param_groups():
    """The SGD momentum-change error spoke of "a Trainer"."""
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    opt = tt.SGD([p], 0.1)
    opt.step()
    opt.param_groups[0]["momentum"] = 0.9
    with pytest.raises(ValueError, match=r"param group 0: momentum cannot change from 0.0 to "
                                         r"0.9 once the group's parameters have state.*"
                                         r"add_param_group") as e:
        opt.step()
    assert "Trainer" not in str(e.value)
