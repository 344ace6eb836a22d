"""``python -m toolkit demo``: every optimizer trains softmax regression on a real data set.

The data: scikit-learn's handwritten digits (shipped with the package, nothing is downloaded),
standardised, split 80/20 with a fixed seed. The model: softmax regression with a hand-written
gradient summed over the batch (the Trainer divides by ``batch_size``, as Gluon's does)::

    p = softmax(X W^T + b);   dL/dW = (p - Y)^T X;   dL/db = sum(p - Y)

Each optimizer trains through a ``toolkit.Trainer`` for ``--epochs`` epochs and reports its final
training loss, test accuracy and times; "first step" is a warm-up step on a throw-away model
that includes the JIT compilation of its kernels. An optimizer with a train/eval switch
(Schedule-Free AdamW, SGD) is tested in eval mode (``Trainer.eval()``: at the average of its
iterates), its training loss is that of the steps (at its gradient points). A PNG of the loss
curves is written to the working directory (or ``--out DIR``). Needs the ``demo`` extra
(scikit-learn, matplotlib, rich). ``--state-dtype bfloat16`` (or ``int8``) trains the
optimizers whose moments ``state_dtype`` holds with their moments so (docs/state-dtype.md); the
model's 640-element weight is below int8's 4096 elements, so ``int8`` keeps its moments in
float32 and says so (``benchmarks/state_dtype_quality.py`` trains an MLP whose first layer is
held in int8).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

def settings():
    """``{registry name: optimizer_params}``: the optimizers with demo settings (a user's
    sensible choice, ``Spec.demo``), sorted by name. An optimizer whose spec declares none is
    not in the demo."""
    from ..optimizers.registry import specs
    return {name: dict(spec.demo) for name, spec in specs().items() if spec.demo}


def full_data_gradient(name):
    """Whether optimizer ``name`` needs the gradient of the whole data set's loss
    (``Spec.full_data_gradient``): SGLD's noise (sqrt(lr) per step) is calibrated to the
    posterior of all N examples (Welling and Teh 2011), so its gradient is the batch sum times
    N/batch_size (rescale_grad = N). With the mean gradient it samples a posterior N times too
    hot, and the noise swamps the drift (measured: test accuracy 11%)."""
    from ..optimizers.registry import spec_of
    return spec_of(name).full_data_gradient


#: the test accuracy a user would call trained, for this model and data set
TRAINED = 0.90


def load_digits(seed=0):
    try:
        from sklearn.datasets import load_digits as sk_digits
    except ImportError:  # pragma: no cover - the demo extra is missing
        raise SystemExit('the demo needs scikit-learn: pip install -e ".[demo]"') from None
    data = sk_digits()
    x = data.data.astype(np.float64)
    y = data.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    x, y = x[order], y[order]
    n_test = len(y) // 5
    mean, std = x[n_test:].mean(0), x[n_test:].std(0) + 1e-6
    x = ((x - mean) / std).astype(np.float32)
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def softmax_loss_grad(w, b, x, y):
    """Summed cross-entropy of a batch, and its gradients (summed over the batch)."""
    logits = x @ w.T + b
    logits = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    p = e / e.sum(axis=1, keepdims=True)
    loss = -np.log(p[np.arange(len(y)), y] + 1e-12).sum()
    d = p
    d[np.arange(len(y)), y] -= 1.0
    return float(loss), (d.T @ x).astype(np.float32), d.sum(0).astype(np.float32)


def train(name, params_kw, train_set, test_set, epochs, batch, device, progress=None, task=None):
    from .. import Parameter, Trainer
    from ..backends import arrays
    from ..optimizers.registry import spec_of
    (x, y), (xt, yt) = train_set, test_set
    w = Parameter("softmax_weight", shape=(10, x.shape[1]), device=device)
    # an optimizer that takes matrices only (GroupAdaGrad: one accumulator per row) gets the
    # bias as a column, one row per class
    b_shape = (10, 1) if spec_of(name).matrix else (10,)
    b = Parameter("softmax_bias", shape=b_shape, wd_mult=0.0, device=device)
    kw = dict(params_kw)
    if full_data_gradient(name):
        kw["rescale_grad"] = float(len(y))
    trainer = Trainer([w, b], name, kw)
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(epochs):
        order = rng.permutation(len(y))
        total = 0.0
        for start in range(0, len(y), batch):
            idx = order[start:start + batch]
            wh, bh = arrays.to_host(w.data()), arrays.to_host(b.data()).reshape(-1)
            loss, gw, gb = softmax_loss_grad(wh, bh, x[idx], y[idx])
            total += loss
            w.set_grad(gw)
            b.set_grad(gb.reshape(b_shape))
            trainer.step(len(idx))
        losses.append(total / len(y))
        if progress is not None:
            progress.advance(task)
    if callable(getattr(trainer.optimizer, "to_eval", None)):
        trainer.eval()  # Schedule-Free: tested at the average x, trained at y
    wh, bh = arrays.to_host(w.data()), arrays.to_host(b.data()).reshape(-1)
    accuracy = float(np.mean(np.argmax(xt @ wh.T + bh, axis=1) == yt))
    return losses, accuracy


def plot(curves, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5.5))
    colors = plt.get_cmap("tab20").colors
    for k, (name, (losses, acc)) in enumerate(curves.items()):
        ax.plot(np.arange(1, len(losses) + 1), losses, label=f"{name} ({acc:.1%})",
                color=colors[(2 * k) % 20 if k < 10 else (2 * k + 1) % 20],
                linestyle=("-", "--", "-.", ":")[k % 4], linewidth=1.6)
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss (cross-entropy, mean per sample)")
    ax.set_title("Softmax regression on scikit-learn digits: every optimizer "
                 "(legend: test accuracy)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="mxopt demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu",
                    help="where the parameters live and the optimizer runs (default: "
                         "%(default)s)")
    ap.add_argument("--epochs", type=int, default=30,
                    help="passes over the training set (default: %(default)s)")
    ap.add_argument("--batch-size", type=int, default=64,
                    help="examples per step (default: %(default)s)")
    known = settings()
    ap.add_argument("--optimizers", default=",".join(known),
                    help="comma-separated registry names (default: every optimizer whose spec "
                         "has demo settings)")
    ap.add_argument("--out", default=".", metavar="DIR",
                    help="directory for the PNG (default: the working directory)")
    ap.add_argument("--plot", default="mxopt-demo-loss.png",
                    help="file name of the PNG of the loss curves, in --out (default: "
                         "%(default)s)")
    ap.add_argument("--state-dtype", choices=("bfloat16", "int8"), default=None,
                    help="hold the moments of the optimizers that have them in bfloat16 or int8 "
                         "(docs/state-dtype.md); only those optimizers train (default: none, "
                         "each optimizer's own rule)")
    ap.add_argument("--state-rounding", choices=("nearest", "stochastic"), default="nearest",
                    help="how bfloat16 moments are rounded (default: %(default)s)")
    args = ap.parse_args(argv)
    names = [n.strip().lower() for n in args.optimizers.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        ap.error(f"unknown optimizer(s) {unknown} (or without demo settings in its spec); "
                 f"choose from {sorted(known)}")
    held = {}
    if args.state_rounding != "nearest" and args.state_dtype != "bfloat16":
        ap.error("--state-rounding stochastic rounds bfloat16 moments: give --state-dtype "
                 "bfloat16")
    if args.state_dtype is not None:
        from ..optimizers.held import held_optimizers
        if args.backend == "cuda":
            ap.error("--state-dtype: moments are held on the CPU only (no CUDA kernels yet)")
        can = held_optimizers()
        cannot = [n for n in names if n not in can]
        if cannot and args.optimizers != ap.get_default("optimizers"):
            ap.error(f"--state-dtype: {cannot} have no moments to hold; those that do: "
                     f"{', '.join(can)}")
        names = [n for n in names if n in can]
        held = {"state_dtype": args.state_dtype, "state_rounding": args.state_rounding}
    if args.backend == "cuda":
        from ..backends import cuda_available
        from ..optimizers.registry import spec_of
        ok, why = cuda_available()
        if not ok:
            ap.exit(2, f"--backend cuda: {why}\n")
        cpu_only = [n for n in names if not spec_of(n).cuda]
        if cpu_only and args.optimizers != ap.get_default("optimizers"):
            ap.error(f"--backend cuda: {cpu_only} run on the CPU backend only (no CUDA kernels)")
        names = [n for n in names if n not in cpu_only]
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
        from rich.table import Table
    except ImportError:
        ap.exit(2, 'the demo needs rich, scikit-learn and matplotlib: pip install -e ".[demo]"\n')
    train_set, test_set = load_digits()
    console = Console()
    console.print(f"softmax regression on scikit-learn digits: {len(train_set[1])} training and "
                  f"{len(test_set[1])} test images, {args.epochs} epochs, batch "
                  f"{args.batch_size}, backend {args.backend}")
    if held:
        console.print(f"moments held in {args.state_dtype}" + (
            f" (rounded {args.state_rounding})" if args.state_dtype == "bfloat16" else ""))
    if args.state_dtype == "int8":
        from ..optimizers.held import INT8_MIN_SIZE
        console.print(f"--state-dtype int8: the weight has {10 * train_set[0].shape[1]} "
                      f"elements, below {INT8_MIN_SIZE}, so its moments stay float32 (as "
                      "bitsandbytes keeps small tensors); benchmarks/state_dtype_quality.py "
                      "trains an MLP whose first layer is held in int8")
    curves, seconds, first = {}, {}, {}
    warm_up = tuple(part[:args.batch_size] for part in train_set)  # one batch: one step
    with Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
                  console=console) as progress:
        for name in names:
            task = progress.add_task(name, total=args.epochs)
            t0 = time.perf_counter()  # one step on a throw-away model: compiles the kernels
            train(name, {**known[name], **held}, warm_up, test_set, 1, args.batch_size,
                  args.backend)
            first[name] = time.perf_counter() - t0
            t0 = time.perf_counter()
            curves[name] = train(name, {**known[name], **held}, train_set, test_set,
                                 args.epochs, args.batch_size, args.backend, progress, task)
            seconds[name] = time.perf_counter() - t0
    table = Table(title="final training loss and test accuracy")
    for col in ("optimizer", "settings", "first loss", "final loss", "test accuracy",
                "first step s", "training s"):
        table.add_column(col, justify="left" if col in ("optimizer", "settings") else "right")
    failed = []
    for name, (losses, acc) in curves.items():
        ok = acc >= TRAINED and losses[-1] < losses[0]
        failed += [] if ok else [name]
        shown = ", ".join(f"{k}={v}" for k, v in known[name].items())
        if full_data_gradient(name):
            shown += ", rescale_grad=N"
        table.add_row(name, shown, f"{losses[0]:.4f}", f"{losses[-1]:.4f}",
                      f"[{'green' if ok else 'red'}]{acc:.1%}[/]", f"{first[name]:.2f}",
                      f"{seconds[name]:.2f}")
    console.print(table)
    console.print("first step s: one step on a throw-away model before training, timed apart: "
                  "it includes the JIT compilation of the optimizer's kernels on a first run "
                  "(Numba caches them on disk); training s: the epochs after it")
    os.makedirs(args.out, exist_ok=True)
    png = os.path.abspath(os.path.join(args.out, args.plot))
    plot(curves, png)
    console.print(f"loss curves written to {png}", soft_wrap=True, highlight=False)
    if failed:
        console.print(f"[red]not trained (test accuracy below {TRAINED:.0%} or loss not "
                      f"reduced): {failed}[/]")
        return 1
    console.print(f"every optimizer trained (test accuracy >= {TRAINED:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
