"""Training quality with low-precision optimizer states: an MLP on scikit-learn's digits.

The model: 64 inputs -> 256 ReLU units -> 10 classes, softmax cross-entropy, its gradient written
by hand (numpy, float32). The first layer's weight has 16,384 elements, so it is held in int8
where asked (``toolkit.optimizers.held.INT8_MIN_SIZE`` is 4096); the biases and the 2,560-element
second layer keep float32 states under int8, as bitsandbytes keeps small tensors. Each
optimizer whose moments ``state_dtype`` holds (or those of ``--only``; with its spec's demo
settings) trains for
``--epochs`` epochs with minibatches of 64 from the same initial weights and the same batch order
per seed, its moments held as float32 (``state_dtype=None``), bfloat16 (to nearest and
stochastically rounded) and int8, through ``optimizer.update`` per parameter; three seeds. It
reports the final training loss and the test accuracy (mean and spread over the seeds) beside
float32's, writes a JSON file and a plot of the loss curves. With ``--through torch`` the same
model is a ``torch.nn.Sequential`` whose gradients torch's autograd computes, stepped by
``toolkit.torch`` (``toolkit.torch.create(name, model.parameters(), state_dtype=...)``), from
the same initial weights and batches; its files are named ``state_dtype_quality_torch.*``.

    python benchmarks/state_dtype_quality.py [--epochs 30] [--seeds 3] [--only NAMES] [--out DIR]
                                             [--through numpy|torch]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import toolkit  # noqa: F401 (installed, else the checkout's)
except ImportError:  # pragma: no cover
    sys.path.insert(0, os.path.dirname(HERE))

from toolkit.optimizer import create, spec_of  # noqa: E402
from toolkit.tools.demo import load_digits  # noqa: E402
from toolkit.tools.drift import held_names  # noqa: E402

#: label -> (state_dtype, state_rounding)
STATES = {"float32": (None, "nearest"), "bfloat16": ("bfloat16", "nearest"),
          "bfloat16-sr": ("bfloat16", "stochastic"), "int8": ("int8", "nearest")}
HIDDEN = 256


def init(seed, n_in, n_out=10):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((HIDDEN, n_in)) * np.sqrt(2.0 / n_in)).astype(np.float32),
            np.zeros(HIDDEN, np.float32),
            (rng.standard_normal((n_out, HIDDEN)) * np.sqrt(1.0 / HIDDEN)).astype(np.float32),
            np.zeros(n_out, np.float32)]


def loss_grads(params, x, y):
    """Mean cross-entropy of a batch and its gradients (float32)."""
    w1, b1, w2, b2 = params
    h = np.maximum(x @ w1.T + b1, 0.0)
    logits = h @ w2.T + b2
    logits = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    p = e / e.sum(axis=1, keepdims=True)
    n = len(y)
    loss = float(-np.log(p[np.arange(n), y] + 1e-12).mean())
    d = p
    d[np.arange(n), y] -= 1.0
    d /= n
    gw2, gb2 = d.T @ h, d.sum(0)
    dh = (d @ w2) * (h > 0)
    gw1, gb1 = dh.T @ x, dh.sum(0)
    return loss, [g.astype(np.float32) for g in (gw1, gb1, gw2, gb2)]


def train(name, states, seed, epochs, data):
    (x, y), (xt, yt) = data
    state_dtype, rounding = STATES[states]
    kw = dict(spec_of(name).demo)
    opt = create(name, state_dtype=state_dtype, state_rounding=rounding, state_seed=seed, **kw)
    params = init(seed, x.shape[1])
    opt_states = [opt.create_state(i, p) for i, p in enumerate(params)]
    rng = np.random.default_rng(1000 + seed)
    curve = []
    for _ in range(epochs):
        order = rng.permutation(len(y))
        total = 0.0
        for start in range(0, len(y), 64):
            idx = order[start:start + 64]
            loss, grads = loss_grads(params, x[idx], y[idx])
            total += loss * len(idx)
            for i, (p, g, s) in enumerate(zip(params, grads, opt_states)):
                opt.update(i, p, g, s)
        curve.append(total / len(y))
    w1, b1, w2, b2 = params
    logits = np.maximum(xt @ w1.T + b1, 0.0) @ w2.T + b2
    return curve, float(np.mean(np.argmax(logits, axis=1) == yt))


def train_torch(name, states, seed, epochs, data):
    """:func:`train` with the model in torch (autograd's gradients) and ``toolkit.torch``'s
    step."""
    import torch
    import toolkit.torch as tt
    (x, y), (xt, yt) = data
    state_dtype, rounding = STATES[states]
    w1, b1, w2, b2 = (torch.from_numpy(a) for a in init(seed, x.shape[1]))
    model = torch.nn.Sequential(torch.nn.Linear(x.shape[1], HIDDEN), torch.nn.ReLU(),
                                torch.nn.Linear(HIDDEN, 10))
    with torch.no_grad():
        for param, value in zip(model.parameters(), (w1, b1, w2, b2)):
            param.copy_(value)
    opt = tt.create(name, model.parameters(), state_dtype=state_dtype,
                    state_rounding=rounding, state_seed=seed, **dict(spec_of(name).demo))
    xs, ys = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
    rng = np.random.default_rng(1000 + seed)
    curve = []
    for _ in range(epochs):
        order = torch.from_numpy(rng.permutation(len(y)))
        total = 0.0
        for start in range(0, len(y), 64):
            idx = order[start:start + 64]
            loss = torch.nn.functional.cross_entropy(model(xs[idx]), ys[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        curve.append(total / len(y))
    with torch.no_grad():
        pred = model(torch.from_numpy(xt)).argmax(1).numpy()
    return curve, float(np.mean(pred == yt))


def plot(results, path, epochs, through="numpy"):
    names = list(results)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.6), sharey=True,
                             squeeze=False)
    axes = axes[0]
    colors = {"float32": "tab:blue", "bfloat16": "tab:orange", "bfloat16-sr": "tab:green",
              "int8": "tab:red"}
    for ax, name in zip(axes, names):
        for label in STATES:
            curves = np.array(results[name][label]["curves"])
            acc = np.mean(results[name][label]["accuracy"])
            ax.plot(np.arange(1, epochs + 1), curves.mean(0), color=colors[label],
                    label=f"{label} ({acc:.1%})")
            ax.fill_between(np.arange(1, epochs + 1), curves.min(0), curves.max(0),
                            color=colors[label], alpha=0.15, linewidth=0)
        ax.set_yscale("log")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("epoch", fontsize=8)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, title="states (test accuracy)", title_fontsize=7)
    axes[0].set_ylabel("training loss (mean cross-entropy)", fontsize=8)
    how = "toolkit.torch, autograd" if through == "torch" else "optimizer.update"
    fig.suptitle(f"MLP 64-256-10 on digits ({how}): the moments held in float32, bfloat16 (to "
                 "nearest, stochastic) and int8 (mean of the seeds, range shaded)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=30, help="epochs per run (default 30)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per row (default 3)")
    ap.add_argument("--only", default=None, metavar="NAMES",
                    help="optimizers, comma-separated (default: every one whose moments "
                         "state_dtype holds)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"),
                    help="directory of the JSON and the plot (default benchmarks/results)")
    ap.add_argument("--through", choices=("numpy", "torch"), default="numpy",
                    help="numpy: hand-written gradients, optimizer.update (the default); "
                         "torch: torch's autograd, toolkit.torch's step")
    args = ap.parse_args(argv)
    run = train_torch if args.through == "torch" else train
    stem = "state_dtype_quality" + ("_torch" if args.through == "torch" else "")
    data = load_digits(0)
    names = args.only.split(",") if args.only else held_names()
    results = {}
    for name in names:
        results[name] = {}
        for label in STATES:
            runs = [run(name, label, seed, args.epochs, data) for seed in range(args.seeds)]
            results[name][label] = {"curves": [r[0] for r in runs],
                                    "final_loss": [r[0][-1] for r in runs],
                                    "accuracy": [r[1] for r in runs]}
    print(f"{'optimizer':10} {'states':12} {'final loss':>22} {'test accuracy':>22}")
    for name in names:
        for label in STATES:
            r = results[name][label]
            fl, acc = np.array(r["final_loss"]), np.array(r["accuracy"])
            print(f"{name:10} {label:12} {fl.mean():12.5f} +- {fl.std():.5f} "
                  f"{acc.mean():14.2%} +- {acc.std():.2%}")
    os.makedirs(args.out, exist_ok=True)
    doc = {"model": f"MLP 64-{HIDDEN}-10, ReLU, softmax cross-entropy",
           "through": args.through, "epochs": args.epochs,
           "batch": 64, "seeds": args.seeds, "settings": {n: dict(spec_of(n).demo)
                                                          for n in names},
           "results": results}
    with open(os.path.join(args.out, stem + ".json"), "w") as f:
        json.dump(doc, f, indent=1)
    plot(results, os.path.join(args.out, stem + ".png"), args.epochs, args.through)
    print(f"wrote {os.path.join(args.out, stem + '.json')} and .png")


if __name__ == "__main__":
    main()
