"""``mxopt accuracy --state-dtype ...``: what holding an optimizer's moments below float32 costs,
measured as drift over thousands of steps.

Each case is a noisy, ill-conditioned quadratic (:func:`problem`): ``f(w) = sum(a*(w - c)^2)/2``
over ``SIZE`` elements (curvatures ``a`` over two decades), stepped from ``w0`` with gradients
``a*(w - c) + noise`` taken at each trajectory's own weights (the noise of step ``t`` the same for
all), as training is: a difference compounds. Four trajectories per case run in lockstep from the
same start, with the optimizer's spec's recorded and demo settings: float64 weights and states
(the yardstick), float32 weights and states (``state_dtype=None``), and float32 weights with each
requested ``state_dtype``. At checkpoints spread over the steps each float32 trajectory reports

* **drift**: ``|w - w64| / |w64 - w0|``, how far it is from the float64 one, as a fraction of the
  distance the float64 one has travelled;
* **lost progress** (at the end): ``(f(w) - f(w64)) / (f(w0) - f(w64))``, the share of the float64
  trajectory's decrease of the loss that it does not make (negative: it went further).

The weights hold ``SIZE`` = 16,384 elements (64 int8 blocks), above the size below which int8
keeps float32 states (``toolkit.optimizers.held.INT8_MIN_SIZE``). The result is a table and a plot
(docs/state-dtype.md). Every held optimizer's first convention; CPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["SIZE", "DEFAULT_STEPS", "DEFAULT_DRIFT_CASES", "problem", "checkpoints",
           "held_names", "DriftRow", "DriftResult", "measure_drift", "plot_drift", "print_drift",
           "run_drift"]

#: elements of a case's weight (64 blocks of 256)
SIZE = 1 << 14
#: steps of each trajectory by default
DEFAULT_STEPS = 2000
#: drift below this is drawn at it
PLOT_FLOOR = 1e-9


def problem(rng, size=SIZE):
    """``(a, c, w0, noise_seed)`` of one case: curvatures log-uniform over [1e-2, 1], a
    minimiser ``c`` and a start ``w0`` standard normal (times 2), the seed of its noise."""
    a = 10.0 ** rng.uniform(-2, 0, size)
    c = rng.standard_normal(size)
    w0 = 2.0 * rng.standard_normal(size)
    return a, c, w0, int(rng.integers(2 ** 32))


def _loss(a, c, w):
    d = np.asarray(w, np.float64) - c
    return float(0.5 * np.sum(a * d * d))


@dataclass
class DriftRow:
    """One optimizer x state dtype ("float32": ``state_dtype=None``) over the cases: the drift
    at each checkpoint (cases x checkpoints) and each case's lost progress at the end."""
    optimizer: str
    convention: str
    state_dtype: str
    steps: np.ndarray
    drift: np.ndarray
    lost: np.ndarray
    nonfinite: int = 0      # cases whose trajectory left the finite numbers

    def to_dict(self):
        return {"optimizer": self.optimizer, "convention": self.convention,
                "state_dtype": self.state_dtype, "steps": self.steps.tolist(),
                "drift_median": np.median(self.drift, axis=0).tolist(),
                "drift_max": np.max(self.drift, axis=0).tolist(),
                "lost_progress": self.lost.tolist(), "nonfinite": self.nonfinite}


@dataclass
class DriftResult:
    rows: list = field(default_factory=list)
    cases: int = 0
    steps: int = 0
    seed: int = 0
    seconds: float = 0.0

    def to_dict(self):
        return {"kind": "state_dtype drift", "cases": self.cases, "steps": self.steps,
                "size": SIZE, "seed": self.seed, "seconds": round(self.seconds, 2),
                "rows": [r.to_dict() for r in self.rows]}


def checkpoints(steps):
    """About 30 steps spread logarithmically over ``1..steps`` (the last one included)."""
    return np.unique(np.geomspace(1, steps, 30).astype(int))


def held_names():
    """The registry names whose moments ``state_dtype`` holds (and that have an oracle)."""
    from ..optimizers.registry import specs
    return [n for n, s in specs(oracle=True).items() if s.moments]


def _settings(name):
    from ..optimizers.registry import spec_of
    spec = spec_of(name)
    return spec.conventions[0], {**spec.record, **spec.demo}


def _case(name, state_dtypes, steps, rng):
    """Drift and lost progress of each trajectory of one case: ``{label: (drift, lost)}``."""
    from ..optimizer import create
    convention, kw = _settings(name)
    a, c, w0, noise_seed = problem(rng)
    labels = ("float32",) + tuple(state_dtypes)
    runs = {"float64": (create(name, convention=convention, **kw), w0.copy())}
    for label in labels:
        sd = None if label == "float32" else label
        runs[label] = (create(name, convention=convention, state_dtype=sd, **kw),
                       w0.astype(np.float32))
    states = {k: opt.create_state(0, w) for k, (opt, w) in runs.items()}
    noise = np.random.default_rng(noise_seed)
    marks = set(checkpoints(steps).tolist())
    drift = {k: [] for k in labels}
    with np.errstate(all="ignore"):
        for t in range(1, steps + 1):
            xi = 0.1 * noise.standard_normal(a.size)
            for k, (opt, w) in runs.items():
                g = a * (np.asarray(w, np.float64) - c) + xi
                opt.update(0, w, g.astype(w.dtype), states[k])
            if t in marks:
                ref = runs["float64"][1]
                travelled = np.linalg.norm(ref - w0)
                for k in labels:
                    d = np.linalg.norm(runs[k][1].astype(np.float64) - ref)
                    drift[k].append(d / travelled if travelled > 0 else math.inf)
        f0, f64 = _loss(a, c, w0), _loss(a, c, runs["float64"][1])
        out = {}
        for k in labels:
            fk = _loss(a, c, runs[k][1])
            lost = (fk - f64) / (f0 - f64) if f0 != f64 else 0.0
            out[k] = (np.array(drift[k]), lost)
    return out


def measure_drift(optimizers=None, state_dtypes=("bfloat16", "int8"), cases=5,
                  steps=DEFAULT_STEPS, seed=0, progress=None):
    """The drift of every held optimizer (or those named) for each of ``state_dtypes`` beside
    float32 states: a :class:`DriftResult`. ``progress(done, total)`` is called per case."""
    import time
    held = held_names()
    names = held if not optimizers else list(optimizers)
    unknown = [n for n in names if n not in held]
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: no moments to hold low; state_dtype applies to "
                         f"{', '.join(held)}")
    start = time.perf_counter()
    result = DriftResult(cases=cases, steps=steps, seed=seed)
    marks = checkpoints(steps)
    total, done = len(names) * cases, 0
    labels = ("float32",) + tuple(s for s in ("bfloat16", "int8") if s in state_dtypes)
    for name in names:
        rng = np.random.default_rng([seed, sum(map(ord, name))])
        per = []
        for _ in range(cases):
            per.append(_case(name, state_dtypes, steps, rng))
            done += 1
            if progress is not None:
                progress(done, total)
        for label in labels:
            d = np.array([p[label][0] for p in per])
            lost = np.array([p[label][1] for p in per])
            bad = int(np.count_nonzero(~np.isfinite(d).all(axis=1)))
            result.rows.append(DriftRow(name, _settings(name)[0], label, marks, d, lost, bad))
    result.seconds = time.perf_counter() - start
    return result


def plot_drift(result, path):
    """One panel per optimizer: the median drift of each state dtype over the checkpoints, the
    cases' range shaded (log scales)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(dict.fromkeys(r.optimizer for r in result.rows))
    cols = 2
    nrows = -(-len(names) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(11, 2.6 * nrows), squeeze=False,
                             sharex=True)
    colors = {"float32": "tab:blue", "bfloat16": "tab:orange", "int8": "tab:red"}
    for ax, name in zip(axes.flat, names):
        for r in (r for r in result.rows if r.optimizer == name):
            d = np.maximum(np.nan_to_num(r.drift, nan=np.inf), PLOT_FLOOR)
            col = colors.get(r.state_dtype, "tab:gray")
            ax.plot(r.steps, np.median(d, axis=0), color=col, label=r.state_dtype)
            ax.fill_between(r.steps, d.min(axis=0), np.minimum(d.max(axis=0), 1e3),
                            color=col, alpha=0.15, linewidth=0)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{name} ({next(r.convention for r in result.rows if r.optimizer == name)})",
                     fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7, title="states", title_fontsize=7)
    fig.suptitle(f"drift from the float64 trajectory, |w - w64| / |w64 - w0|, over {result.steps}"
                 f" steps ({result.cases} noisy quadratics of {SIZE} elements; line: median, "
                 f"shade: range)", fontsize=9)
    fig.supxlabel("step", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def print_drift(result):
    """The table: per optimizer and state dtype, the median and largest drift at the end and
    the median and worst lost progress."""
    from rich.console import Console
    from rich.table import Table
    import sys
    con = Console(width=None if sys.stdout.isatty() else 150)
    t = Table(title=f"drift from float64 after {result.steps} steps ({result.cases} cases of "
                    f"{SIZE} elements): |w - w64|/|w64 - w0|, and the share of float64's loss "
                    "decrease lost", title_justify="left")
    for col in ("optimizer", "convention", "states", "drift median", "drift max",
                "lost median", "lost worst", "non-finite"):
        t.add_column(col, justify="left" if col in ("optimizer", "convention", "states")
                     else "right")
    for r in result.rows:
        end = r.drift[:, -1]
        t.add_row(r.optimizer, r.convention, r.state_dtype, f"{np.median(end):.2e}",
                  f"{np.max(end):.2e}", f"{np.median(r.lost):+.2e}",
                  f"{r.lost[np.argmax(np.abs(r.lost))]:+.2e}", str(r.nonfinite))
    con.print(t)


#: cases per optimizer by default (each runs four trajectories of DEFAULT_STEPS steps)
DEFAULT_DRIFT_CASES = 5


def run_drift(parser, args, argv):
    """``mxopt accuracy --state-dtype ...`` from the parsed ``args`` of ``accuracy``'s parser;
    returns the exit code: 0 (a drift report has no bound to fail), 2 on a usage error."""
    import json
    import os
    import sys
    from ..oracle.seeds import resolve_seed
    from ._support import progress_bar, split_names

    def usage(msg):
        print(f"accuracy: error: {msg}", file=sys.stderr)
        return 2
    if not args.state_dtype:
        return usage("--steps measures drift: give --state-dtype bfloat16 and/or int8")
    if args.backend or args.dtype:
        return usage("--state-dtype measures float32 weights on the CPU; drop --backend and "
                     "--dtype")
    given = any(a == "--cases" or a.startswith("--cases=") for a in argv)
    cases = args.cases if given else DEFAULT_DRIFT_CASES
    steps = DEFAULT_STEPS if args.steps is None else args.steps
    if cases < 1 or steps < 1:
        return usage("--cases and --steps must be at least 1")
    seed = resolve_seed(args.seed)
    names = split_names(args.only)
    try:
        total = len(names or held_names()) * cases
        with progress_bar(not args.quiet and not args.json, total, "state_dtype drift") as bar:
            result = measure_drift(names, tuple(dict.fromkeys(args.state_dtype)), cases, steps,
                                   seed, lambda done, total: bar.update())
    except ValueError as exc:
        return usage(str(exc))
    path = None
    if not args.no_plot:
        path = plot_drift(result, args.plot or os.path.join(os.getcwd(), "drift.png"))
    if args.json:
        doc = result.to_dict()
        doc["plot"] = path
        print(json.dumps(doc, indent=1))
    else:
        print_drift(result)
        if path:
            print(f"plot: {path}")
    return 0
