"""What the Schedule-Free tests (tests/test_adamwschedulefree.py, tests/test_sgdschedulefree.py)
share: the authors' package, or a skip that names it, and a user's training loop with the
train/eval switch."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def authors():
    """The authors' ``schedulefree`` package (the test skips, naming it, where it is missing)."""
    return pytest.importorskip("schedulefree", reason="the authors' schedulefree package is "
                               "not installed (pip install schedulefree==1.4.1)")


def loop(make, dtype, steps=9):
    """A user's loop: ``train()`` before the steps, ``eval()`` to evaluate every third step and
    at the end. The parameters and the losses evaluated."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 1)).to(dtype)
    opt = make(model.parameters())
    x, target = torch.randn(16, 4, dtype=dtype), torch.randn(16, 1, dtype=dtype)
    losses = []
    for step in range(steps):
        opt.train()
        opt.zero_grad()
        ((model(x) - target) ** 2).mean().backward()
        opt.step()
        if step % 3 == 2:
            opt.eval()
            with torch.no_grad():
                losses.append(((model(x) - target) ** 2).mean().item())
    opt.eval()
    return [p.detach().clone() for p in model.parameters()], losses
