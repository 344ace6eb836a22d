"""Porting a Gluon model to PyTorch: train it with torch.optim and with toolkit.torch (MXNet's
numbers) side by side, and see where the two part.

A small network (64-32-10, tanh) on scikit-learn's handwritten digits, the same initial weights
and the same mini-batches for every run:

* ``torch.optim.SGD(momentum=0.9, nesterov=True)`` beside ``toolkit.torch.NAG(momentum=0.9,
  convention="mxnet")``, first with a constant learning rate, then with a step schedule;
* ``torch.optim.Adam`` beside ``toolkit.torch.Adam`` (MXNet's Adam).

The loss curves go into one PNG (``port_from_gluon.png`` in the working directory, or
``--out``), and the script prints, per pair, the largest difference of the training losses and of
the final weights. Where they part (docs/torch.md, "What differs"): with a constant learning rate
and no weight decay, MXNet's NAG and torch's Nesterov SGD are the same algorithm written
differently, so they agree up to rounding; once the learning rate changes, torch applies the new
rate to its whole momentum buffer while MXNet's buffer already holds the old rates, and the
curves separate. MXNet's Adam adds epsilon to the uncorrected root: early steps, where
``1 - beta2**t`` is small, differ most.

Needs the ``torch`` and ``demo`` extras: ``pip install -e ".[torch,demo]"``.

    python examples/port_from_gluon.py [--epochs 30] [--out port_from_gluon.png]
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

import toolkit.torch


def digits():
    from sklearn.datasets import load_digits
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    x = (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-3)
    return torch.from_numpy(x), torch.from_numpy(data.target.astype(np.int64))


def network(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Tanh(), torch.nn.Linear(32, 10))


def train(make_optimizer, x, y, epochs, batch=128, schedule=False):
    """Losses per epoch, and the final weights, of one run (the same initial weights and the
    same batches for every run)."""
    model = network()
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=max(1, epochs // 3), gamma=0.3) \
        if schedule else None
    order = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=order)
        total = 0.0
        for k in range(0, len(x), batch):
            idx = perm[k:k + batch]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        losses.append(total / len(x))
        if sched is not None:
            sched.step()
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return np.array(losses), weights


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--out", default="port_from_gluon.png")
    args = ap.parse_args(argv)
    x, y = digits()
    pairs = {
        "NAG, constant lr": (
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
            lambda p: toolkit.torch.NAG(p, lr=0.05, momentum=0.9, convention="mxnet"), False),
        "NAG, step schedule": (
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
            lambda p: toolkit.torch.NAG(p, lr=0.05, momentum=0.9, convention="mxnet"), True),
        "Adam": (
            lambda p: torch.optim.Adam(p, lr=1e-3),
            lambda p: toolkit.torch.Adam(p, lr=1e-3), False),
    }
    results = {}
    for label, (theirs, ours, schedule) in pairs.items():
        lt, wt = train(theirs, x, y, args.epochs, schedule=schedule)
        lo, wo = train(ours, x, y, args.epochs, schedule=schedule)
        results[label] = (lt, lo)
        loss_gap = float(np.max(np.abs(lt - lo)))
        weight_gap = float(torch.max(torch.abs(wt - wo)) / torch.max(torch.abs(wt)))
        print(f"{label:20s} final loss torch.optim {lt[-1]:.6f}, toolkit.torch {lo[-1]:.6f}; "
              f"largest loss difference {loss_gap:.2e}, final weights differ by "
              f"{weight_gap:.2e} (relative)")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4))
    for ax, (label, (lt, lo)) in zip(axes, results.items()):
        epochs = np.arange(1, len(lt) + 1)
        ax.plot(epochs, lt, label="torch.optim", lw=2)
        ax.plot(epochs, lo, "--", label='toolkit.torch (convention="mxnet")', lw=2)
        ax.set_yscale("log")
        ax.set_title(label)
        ax.set_xlabel("epoch")
        ax.legend()
    axes[0].set_ylabel("training loss (cross-entropy)")
    fig.suptitle("A digits network ported from Gluon: torch.optim beside MXNet's numbers")
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
