"""``python -m toolkit accuracy``: how close each kernel is to the float64 oracle, measured.

For every optimizer x convention x backend x dtype, ``--cases`` random cases run through
:func:`toolkit.error_bounds.step_errors`; a case's value is its worst normalised error over all
steps and arrays (**1.0 is the bound**), and each row reports the median, the 99th percentile and
the worst. The plot has one panel per optimizer (docs/accuracy.md).

    python -m toolkit accuracy [--cases N] [--only NAMES] [--backend cpu|cuda] [--dtype D]
                               [--seed INT|random] [--json] [--plot PATH | --no-plot] [--quiet]
    python -m toolkit accuracy --state-dtype int8 [--state-dtype bfloat16] [--steps N] ...

The second form measures what low-precision optimizer states cost instead
(:mod:`toolkit.tools.drift`).

Exit codes of :func:`main`: ``0`` every worst <= 1; ``1`` some worst > 1 (or a case raised);
``2`` usage error (unknown optimizer or dtype, an unavailable backend asked for, a bad count,
rich or matplotlib missing where needed).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
import zlib
from dataclasses import dataclass, field

import numpy as np

from ._support import (UsageError, choose_backends, optimizer_conventions, progress_bar,
                       provenance, select_dtypes, select_optimizers, split_names, storage_dtype,
                       to_device)
from ..oracle.seeds import parse_seed, resolve_seed
from ..error_bounds import step_errors

__all__ = ["measure", "draw_case", "draw_hyper", "Row", "AccuracyResult", "plot", "main", "DEFAULT_CASES"]

DEFAULT_CASES = 100
#: errors below this are drawn at it (exact results have error 0)
PLOT_FLOOR = 1e-4


# ----------------------------------------------------------------------------------------------
# random cases (drawn with numpy from the specs' spaces, as ``identify`` does)
# ----------------------------------------------------------------------------------------------
def draw_hyper(rng, name, dtype):
    """The constructor keywords of one random case of optimizer ``name``: the common
    hyperparameters (``toolkit.oracle.space.common_space``: ``COMMON`` with the spec's ``fixed``
    pinned, GroupAdaGrad's wd 0), then the optimizer's own from its spec's ``space`` (aimed at
    branch points: momentum 0, exact zeros, clip bounds on and off), made consistent by its
    ``dependent`` (Signum's wd_lh needs momentum). A float16 *state* without a master copy
    (``dtype`` "float16") draws the learning rate from ``Spec.half_state_lr`` up (FTRL/FTML:
    the state grows like w/lr)."""
    from ..oracle import space
    from ..optimizers.registry import spec_of
    spec = spec_of(name)
    kw = {k: s.sample(rng) for k, s in space.common_space(name).items()}
    kw.update({k: s.sample(rng) for k, s in spec.space.items()})
    kw = space.fix_dependent(name, kw)
    if dtype == "float16" and spec.half_state_lr is not None and "learning_rate" not in spec.fixed:
        # from the least rate the state needs up to 1 (COMMON's top)
        kw["learning_rate"] = space.Decades(math.log10(spec.half_state_lr), 0).sample(rng)
    return kw


def _array(rng, n, lo, hi):
    """Random signs, magnitudes over 10**lo .. 10**hi, some exact zeros."""
    x = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(lo, hi, n)
    x[(rng.random(n) < 0.5) & (np.arange(n) % 3 == 0)] = 0.0
    return x


def draw_case(rng, name, dtype):
    """``(constructor kwargs, w0, grads)`` of one random case (float64 arrays, to be cast to
    the dtype's storage type). The ranges keep a float16 *state* (no master copy) inside
    float16's range, as the CUDA tests do: it holds squared gradients, and FTRL/FTML's grows
    like w/lr. Shapes and pinned hyperparameters come from ``toolkit.oracle.space`` (GroupAdaGrad:
    matrices, and wd 0)."""
    from ..oracle import space
    kw = draw_hyper(rng, name, dtype)
    plain16 = dtype == "float16"
    f16 = dtype.startswith("float16")
    shape = space.shape_space(name, 32).sample(rng)
    n = math.prod(shape)
    lo_w, hi_w = (-2, 1 if plain16 else 2) if f16 else (-4, 2)
    lo_g, hi_g = (-4, 1 if plain16 else 3) if f16 else (-7, 3)
    w = _array(rng, n, lo_w, hi_w).reshape(shape)
    grads = [_array(rng, n, lo_g, hi_g).reshape(shape) for _ in range(int(rng.integers(1, 5)))]
    return kw, w, grads


# ----------------------------------------------------------------------------------------------
# measurement
# ----------------------------------------------------------------------------------------------
@dataclass
class Row:
    """One optimizer x convention x backend x dtype: the worst normalised error of each case."""
    optimizer: str
    convention: str
    backend: str
    dtype: str
    errors: np.ndarray
    worst_output: str = ""          # the array of the worst case ("weight", a state slot, ...)
    worst_case: dict = field(default_factory=dict)  # how to reproduce it
    failures: list = field(default_factory=list)    # cases that raised: "case k: Error: msg"

    @property
    def id(self):
        return f"{self.optimizer}/{self.convention}/{self.backend}/{self.dtype}"

    @property
    def cases(self):
        return int(self.errors.size)

    @property
    def median(self):
        return float(np.median(self.errors)) if self.errors.size else 0.0

    @property
    def p99(self):
        if not self.errors.size:
            return 0.0
        with np.errstate(invalid="ignore"):  # inf - inf between two infinite cases
            p = float(np.percentile(self.errors, 99))
        return math.inf if math.isnan(p) else p

    @property
    def worst(self):
        return float(np.max(self.errors)) if self.errors.size else 0.0

    @property
    def above_bound(self):
        return int(np.count_nonzero(self.errors > 1.0))

    @property
    def ok(self):
        return self.worst <= 1.0 and not self.failures

    def to_dict(self):
        return {"id": self.id, "optimizer": self.optimizer, "convention": self.convention,
                "backend": self.backend, "dtype": self.dtype, "cases": self.cases,
                "median": _num(self.median), "p99": _num(self.p99), "worst": _num(self.worst),
                "above_bound": self.above_bound, "ok": self.ok,
                "worst_output": self.worst_output, "worst_case": self.worst_case,
                "failures": self.failures}


def _num(x):
    """A float for JSON: "inf"/"nan" as strings (JSON has neither)."""
    return x if math.isfinite(x) else str(x)


@dataclass
class AccuracyResult:
    rows: list
    seed: int
    cases: int
    seconds: float
    skipped: dict           # backend -> why it was not measured
    provenance: dict

    @property
    def ok(self):
        return all(r.ok for r in self.rows)

    @property
    def exit_code(self):
        return 0 if self.ok else 1

    @property
    def worst(self):
        return max((r.worst for r in self.rows), default=0.0)

    def by_id(self, rid):
        """The row ``"optimizer/convention/backend/dtype"``."""
        for r in self.rows:
            if r.id == rid:
                return r
        raise KeyError(rid)

    def to_dict(self):
        return {"format": "mxopt-accuracy", "version": 1, "seed": self.seed,
                "cases": self.cases, "ok": self.ok, "exit_code": self.exit_code,
                "worst": _num(self.worst), "seconds": round(self.seconds, 2),
                "rows": [r.to_dict() for r in self.rows], "skipped": self.skipped,
                "provenance": self.provenance}


def _rows(names, backends, dtypes):
    convs = optimizer_conventions()
    return [(n, c, b, d) for n in names for c in convs[n] for b in backends for d in dtypes]


def _run_case(opt, w, grads, dev, sd):
    """The worst normalised error of one case over its steps and arrays, and where."""
    worst, where = 0.0, ""
    state = opt.create_state_multi_precision(0, w)
    for g in grads:
        res = step_errors(opt, 0, w, dev(g.astype(sd)), state)
        for out, (err, _, _) in res.items():
            if not err <= worst:  # NaN counts as worse than anything
                worst, where = (err if err == err else math.inf), out
    return worst, where


def _measure_row(name, conv, backend, dtype, cases, seed, bar):
    from .. import optimizer
    rid = f"{name}/{conv}/{backend}/{dtype}"
    rng = np.random.default_rng([seed, zlib.crc32(rid.encode())])
    sd = storage_dtype(dtype)
    dev = to_device if backend == "cuda" else (lambda a: a)
    errors = np.zeros(cases)
    row = Row(name, conv, backend, dtype, errors)
    for k in range(cases):
        kw, w64, grads = draw_case(rng, name, dtype)
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                # overflow to inf in a float16 weight is part of what is measured, not news
                warnings.simplefilter("ignore", RuntimeWarning)
                opt = optimizer.create(name, convention=conv, backend=backend,
                                       multi_precision=dtype == "float16-mp", **kw)
                worst, where = _run_case(opt, dev(w64.astype(sd)), grads, dev, sd)
        except Exception as exc:  # a case that crashes is a finding, not the end of the report
            row.failures.append(f"case {k}: {type(exc).__name__}: {exc}")
            worst, where = math.inf, "exception"
        if k == 0 or worst > errors[:k].max():
            row.worst_output = where
            row.worst_case = {"case": k, "seed": seed, "n": int(w64.size), "steps": len(grads),
                              "hyper": kw}
        errors[k] = worst
        bar.update(advance=1)
    return row


def measure(optimizers=None, backends=None, dtypes=None, cases=DEFAULT_CASES, seed=0,
            progress=True, command=None) -> AccuracyResult:
    """Measure the distribution of normalised error against the float64 oracle for every
    optimizer x convention x backend x dtype (see the module docstring).

    ``backends`` None: "cpu", plus "cuda" on a real GPU. Each row draws its cases from its own
    generator (``seed`` and the row's name), so a row's numbers do not depend on which other
    rows run: ``measure(["adam"], cases=k + 1)`` reproduces the adam rows' case ``k``.
    ``seed``: an int >= 0, or ``"random"`` for a fresh one (the result records it).
    """
    try:
        seed = resolve_seed(seed)
    except ValueError as e:
        raise UsageError(str(e)) from None
    names = select_optimizers(optimizers)
    bks, skipped = choose_backends(backends)
    dts = select_dtypes(dtypes)
    if isinstance(cases, bool) or not isinstance(cases, (int, np.integer)) or cases < 1:
        raise UsageError(f"cases must be an integer >= 1, got {cases!r}")
    rows = _rows(names, bks, dts)
    t0 = time.perf_counter()
    out = []
    with progress_bar(progress, len(rows) * cases, "accuracy") as bar:
        for n, c, b, d in rows:
            bar.update(f"{n} {c} {b} {d}", advance=0)
            out.append(_measure_row(n, c, b, d, int(cases), seed, bar))
    return AccuracyResult(out, seed, int(cases), time.perf_counter() - t0, skipped,
                          provenance(command))


# ----------------------------------------------------------------------------------------------
# output
# ----------------------------------------------------------------------------------------------
def _fmt(x):
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if x > 1:
        return f"{x:.6g}"  # never round a value above the bound down to "1"
    return f"{x:.4f}" if x >= 1e-3 else f"{x:.1e}"


def plot(result: AccuracyResult, path):
    """Write the plot of ``result`` to ``path`` (PNG, or any format matplotlib knows by the
    suffix)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r.optimizer for r in result.rows))
    dtypes = list(dict.fromkeys(r.dtype for r in result.rows))
    colors = dict(zip(dtypes, plt.get_cmap("tab10").colors))
    ncols = max(sum(r.optimizer == n for r in result.rows) for n in names)
    fig, axes = plt.subplots(len(names), 1, figsize=(max(8.0, 0.8 * ncols + 3), 1.9 * len(names)),
                             squeeze=False, sharey=True)
    floor = math.log10(PLOT_FLOOR)
    top = max(0.5, math.log10(max(result.worst, PLOT_FLOOR)) + 0.3
              if math.isfinite(result.worst) else 1.5)
    jitter = np.random.default_rng(0)
    for ax, name in zip(axes[:, 0], names):
        rows = [r for r in result.rows if r.optimizer == name]
        data = [np.clip(np.log10(np.maximum(r.errors, PLOT_FLOOR)), floor, top) for r in rows]
        pos = np.arange(1, len(rows) + 1)
        ax.boxplot(data, positions=pos, widths=0.6, showfliers=False, whis=(1, 99),
                   medianprops={"color": "black"})
        for p, r, y in zip(pos, rows, data):
            ax.scatter(p + jitter.uniform(-0.22, 0.22, y.size), y, s=5, alpha=0.35,
                       color=colors[r.dtype], linewidths=0)
            if not r.ok:
                ax.annotate(f"{_fmt(r.worst)}", (p, top), ha="center", va="top", color="red",
                            fontsize=7)
        ax.axhline(0.0, color="red", linestyle="--", linewidth=1)
        ax.set_xticks(pos, [f"{r.convention}\n{r.backend} {r.dtype}" for r in rows], fontsize=7)
        ticks = list(range(int(floor), int(math.floor(top)) + 1))
        ax.set_yticks(ticks, [f"<={PLOT_FLOOR:g}" if t == floor else "1 (bound)" if t == 0
                              else f"{10.0 ** t:g}" for t in ticks], fontsize=7)
        ax.set_ylabel(name, fontsize=9)
        ax.set_ylim(floor - 0.2, top)
        ax.grid(axis="y", alpha=0.3)
    axes[0, 0].set_title(f"normalised error vs the float64 oracle (log scale; dashed: the bound "
                         f"1.0)\n{result.cases} cases per box (whiskers p1-p99), one dot per "
                         f"case; errors <= {PLOT_FLOOR:g}, exact results included, at the floor",
                         fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _print_table(result: AccuracyResult):
    from rich.console import Console
    from rich.table import Table
    con = Console(width=None if sys.stdout.isatty() else 150)
    t = Table(title="normalised error vs the float64 oracle (1.0 is the bound)",
              title_justify="left")
    for c, just in (("optimizer", "left"), ("convention", "left"), ("backend", "left"),
                    ("dtype", "left"), ("cases", "right"), ("median", "right"),
                    ("p99", "right"), ("worst", "right"), ("worst in", "left"), ("", "left")):
        t.add_column(c, justify=just, no_wrap=True)
    for r in result.rows:
        t.add_row(r.optimizer, r.convention, r.backend, r.dtype, str(r.cases), _fmt(r.median),
                  _fmt(r.p99), _fmt(r.worst), r.worst_output,
                  "ok" if r.ok else "[bold red]ABOVE[/]")
    con.print(t)
    for r in result.rows:
        if not r.ok:
            con.print(f"[red]{r.id}[/]: worst {_fmt(r.worst)} in {r.worst_output}, case "
                      f"{r.worst_case}", highlight=False)
            for f in r.failures[:3]:
                con.print(f"  {f}", highlight=False, markup=False)
    for b, why in result.skipped.items():  # a reason is text: '.[cuda]' in a hint is not markup
        con.print(f"{b}: not measured ({why})", highlight=False, markup=False)
    prov = result.provenance
    con.print(f"{len(result.rows)} rows x {result.cases} cases, seed {result.seed}, "
              f"{result.seconds:.0f} s on {prov.get('cpu')} ({prov.get('cpu_count')} cores), "
              f"numpy {prov.get('numpy')}, numba {prov.get('numba')}, toolkit "
              f"{prov.get('toolkit')}; worst {_fmt(result.worst)}: "
              f"{'every row within the bound' if result.ok else 'ROWS ABOVE THE BOUND'}",
              highlight=False)


def main(argv=None) -> int:
    """``accuracy``; returns the exit code (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="mxopt accuracy",
                                description=__doc__.split("\n\n")[0].split(": ", 1)[-1],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="exit codes: 0 every worst <= 1, 1 some worst > 1, "
                                       "2 usage error")
    p.add_argument("--cases", type=int, default=DEFAULT_CASES,
                   help=f"random cases per row (default {DEFAULT_CASES})")
    p.add_argument("--only", action="append", metavar="NAMES",
                   help="optimizers, comma-separated or repeated (default: all)")
    p.add_argument("--backend", action="append", choices=("cpu", "cuda"),
                   help="repeatable (default: cpu, and cuda on a real GPU)")
    p.add_argument("--dtype", action="append", help="float32, float64, float16-mp, float16 "
                   "(repeatable; default: all)")
    p.add_argument("--seed", type=parse_seed, default=0, metavar="INT|random",
                   help="seed of the random cases: an int >= 0, or 'random' for a fresh one "
                        "(recorded in the result; default: 0)")
    p.add_argument("--json", action="store_true",
                   help="print the result as JSON on stdout (default: a table)")
    p.add_argument("--plot", default=None, metavar="PATH",
                   help="where to write the plot (default: accuracy.png in the current directory)")
    p.add_argument("--no-plot", action="store_true", help="write no plot (default: a plot)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar (default: a progress bar)")
    p.add_argument("--state-dtype", action="append", choices=("bfloat16", "int8"),
                   help="instead: the drift of trajectories with the moments held in this "
                        "dtype from float64's, beside float32 states (repeatable; "
                        "toolkit/tools/drift.py; default: none, the kernels' errors)")
    p.add_argument("--steps", type=int, default=None,
                   help="steps of each trajectory with --state-dtype (default 2000)")
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.state_dtype or args.steps is not None:
        from .drift import run_drift
        return run_drift(p, args, argv)
    import importlib.util
    missing = [m for m in (["rich"] if not args.json else []) +
               (["matplotlib"] if not args.no_plot else [])
               if importlib.util.find_spec(m) is None]
    if missing:
        print(f"accuracy: error: needs {' and '.join(missing)} "
              f"(pip install -e \".[test]\"; --json --no-plot needs neither)", file=sys.stderr)
        return 2
    try:
        result = measure(split_names(args.only), args.backend, args.dtype, args.cases, args.seed,
                         progress=not args.quiet and not args.json,
                         command="python -m toolkit accuracy " + " ".join(argv))
    except UsageError as exc:
        print(f"accuracy: error: {exc}", file=sys.stderr)
        return 2
    plot_path = None
    if not args.no_plot:
        plot_path = plot(result, args.plot or os.path.join(os.getcwd(), "accuracy.png"))
    if args.json:
        doc = result.to_dict()
        doc["plot"] = plot_path
        print(json.dumps(doc, indent=1))
    else:
        _print_table(result)
        if plot_path:
            print(f"plot: {plot_path}")
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
