"""``python -m toolkit check``: the oracle's proofs and every backend against the oracle.

Two parts, on random cases drawn from a fixed default seed (the oracle's ``DEFAULT_SEED``, 0: the
same cases and verdict every run; ``--seed N`` for others, ``--seed random`` for a fresh one,
printed so that it can be repeated):

1. the oracle's own proofs: FTRL and FTML equal the guide's argmin formulations solved by scipy
   from the raw gradient history; NAG's stored-point form equals the guide's look-ahead form; Adam
   "mxnet" equals Adam "guide" with epsilon*sqrt(1-beta2^t); SGLD's noise is the same on the
   kernel as in the specification;
2. every optimizer x convention x backend x dtype against the oracle, per step from identical
   inputs, reporting the worst normalised error (``toolkit.error_bounds``: 1.0 is the bound).

Prints a table (``--json``: the rows as JSON) and exits 1 on any failure, 0 otherwise. Progress
goes to stderr: a bar on a terminal, else (piped, in CI) a line per row as it finishes.
"""
from __future__ import annotations

import argparse
import functools
import math
import sys
import time

import numpy as np

from .. import optimizer
from ..oracle.seeds import DEFAULT_SEED, parse_seed, resolve_seed
from ..error_bounds import step_errors

DTYPES = ("float16-mp", "float32", "float64")


def _decades(rng, n, lo, hi, zeros=True):
    x = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(lo, hi, n)
    if zeros:
        x[rng.random(n) < 0.15] = 0.0
    return x


# --- part 1: proofs ---------------------------------------------------------------------------
def proof_ftrl_argmin(rng):
    from reference import argmin, ftrl
    worst = 0.0
    for _ in range(5):
        n, T = 6, int(rng.integers(2, 8))
        lr, lamda1, beta = 10 ** rng.uniform(-2, 0), 10 ** rng.uniform(-3, -0.5), rng.uniform(0, 2)
        w0 = np.zeros(n)
        grads = np.array([_decades(rng, n, -3, 1) for _ in range(T)])
        w, st = w0, ftrl.init_state(w0)
        closed = []
        for k in range(T):
            w, st = ftrl.step(w, grads[k], st, t=k + 1, lr=lr, convention="guide", lamda1=lamda1,
                              beta=beta)
            closed.append(w)
        args, _, _ = argmin.ftrl_argmin_trajectory(w0, grads, lr=lr, lamda1=lamda1, beta=beta,
                                                   convention="guide", weights=[w0] + closed[:-1])
        scale = np.maximum(np.abs(args), 1e-300)
        err = np.max(np.where(np.array(closed) == args, 0.0, np.abs(np.array(closed) - args) / scale))
        worst = max(worst, err / 1e-9)
    return worst


def proof_ftml_argmin(rng):
    from reference import argmin, ftml
    worst = 0.0
    for _ in range(5):
        n, T = 5, int(rng.integers(2, 6))
        lr = 10 ** rng.uniform(-3, -1)
        b1, b2, eps = rng.uniform(0.1, 0.9), rng.uniform(0.0, 0.999), 10 ** rng.uniform(-8, -3)
        w0 = _decades(rng, n, -2, 0, zeros=False)
        grads = np.array([_decades(rng, n, -3, 1, zeros=False) for _ in range(T)])
        w, st = w0, ftml.init_state(w0)
        closed = []
        for k in range(T):
            w, st = ftml.step(w, grads[k], st, t=k + 1, lr=lr, convention="guide", beta1=b1,
                              beta2=b2, epsilon=eps)
            closed.append(w)
        args, _, _ = argmin.ftml_argmin_trajectory(w0, grads, lrs=lr, beta1=b1, beta2=b2,
                                                   epsilon=eps, convention="guide",
                                                   weights=[w0] + closed[:-1])
        err = np.max(np.abs(np.array(closed) - args) / np.maximum(np.abs(args), 1e-12))
        worst = max(worst, err / 1e-8)
    return worst


def proof_nag_lookahead(rng):
    from reference import nag
    worst = 0.0
    for _ in range(5):
        n = 4
        a, b = 10 ** rng.uniform(-1, 1, n), rng.standard_normal(n)
        lr, mu = 10 ** rng.uniform(-3, -1), rng.uniform(0, 0.95)
        grad_fn = lambda x: a * (x - b)  # noqa: E731
        w, v = rng.standard_normal(n), np.zeros(n)
        wt, st = w.copy(), nag.init_state(w, momentum=mu)
        for k in range(30):
            w, v = nag.step_lookahead(w, v, grad_fn, lr=lr, momentum=mu)
            wt, st = nag.step(wt, grad_fn(wt), st, t=k + 1, lr=lr, convention="guide", momentum=mu)
            err = np.max(np.abs((w + mu * v) - wt) / (np.abs(wt) + np.abs(w) + 1e-300))
            worst = max(worst, err / 1e-12)
    return worst


def proof_adam_relation(rng):
    from reference import adam
    worst = 0.0
    for _ in range(5):
        n = 8
        b1, b2, eps, lr = rng.uniform(0, 0.99), rng.uniform(0, 0.9999), 10 ** rng.uniform(-8, -2), 0.01
        w = rng.standard_normal(n)
        wm, sm, wg, sg = w, adam.init_state(w), w, adam.init_state(w)
        for t in range(1, 8):
            g = _decades(rng, n, -3, 1)
            wm, sm = adam.step(wm, g, sm, t=t, lr=lr, beta1=b1, beta2=b2, epsilon=eps,
                               convention="mxnet", hyper_f32=False)
            wg, sg = adam.step(wg, g, sg, t=t, lr=lr, beta1=b1, beta2=b2,
                               epsilon=eps / np.sqrt(1 - b2 ** t), convention="guide")
            worst = max(worst, np.max(np.abs(wm - wg) / (np.abs(wm) + 1e-300)) / 1e-13)
            wg, sg = wm, sm
    return worst


def proof_sgld_noise(rng):
    from reference import noise
    seed = int(rng.integers(0, 2 ** 32))
    opt = optimizer.SGLD(learning_rate=1.0, seed=seed)
    w = np.zeros(1000)
    opt.update(3, w, np.zeros(1000), None)
    z = noise.normal(seed, 3, 1, 1000)
    # the kernels' own log and cos draw within 4 ulp of the specification (reference/noise.py;
    # the same bound as tests/cuda/test_cuda_contract.py and tests/test_noise_math.py)
    return float(np.max(np.abs(w - z) / (4 * np.spacing(np.abs(z)))))


PROOFS = [  # checked against the registry by tests/test_spec_tools.py::test_every_proof_names_a_registered_optimizer
    ("ftrl", "guide", "closed form == scipy argmin (brentq), rel/1e-9", proof_ftrl_argmin),
    ("ftml", "guide", "closed form == scipy argmin (trust-exact), rel/1e-8", proof_ftml_argmin),
    ("nag", "guide", "stored-point == look-ahead form, rel/1e-12", proof_nag_lookahead),
    ("adam", "both", "mxnet(eps) == guide(eps/sqrt(1-b2^t)), rel/1e-13", proof_adam_relation),
    ("sgld", "both", "kernel noise == reference.noise, 4 ulp", proof_sgld_noise),
]


# --- part 2: backends -------------------------------------------------------------------------
def backend_rows(with_cuda=False):
    """(optimizer, convention, backend, dtype) rows; the CUDA rows add float16 without
    multi_precision (the CPU covers it through the same float32 kernels)."""
    from ._support import optimizer_conventions
    rows = []
    for name, convs in optimizer_conventions().items():  # every optimizer with an oracle
        for conv in convs:
            for backend in ("cpu", "reference") + (("cuda",) if with_cuda else ()):
                for dtype in DTYPES + (("float16",) if backend == "cuda" else ()):
                    if backend == "reference" and dtype != "float64":
                        continue
                    rows.append((name, conv, backend, dtype))
    return rows


def run_backend_row(rng, name, conv, backend, dtype, cases=4, steps=4):
    from ..oracle import space
    spec = optimizer.spec_of(name)
    worst = 0.0
    for _ in range(cases):
        kw = dict(convention=conv, backend=backend, multi_precision=dtype == "float16-mp",
                  learning_rate=float(10 ** rng.uniform(-3, -1)),
                  wd=float(rng.choice([0.0, 10 ** rng.uniform(-4, -1)])),
                  rescale_grad=float(rng.choice([1.0, 10 ** rng.uniform(-1, 1)])),
                  clip_gradient=[None, float(10 ** rng.uniform(-1, 1))][int(rng.integers(2))])
        if dtype == "float16" and spec.half_state_lr is not None:
            # a float16 state without a master copy (FTRL/FTML: it holds about w/lr)
            kw["learning_rate"] = float(10 ** rng.uniform(math.log10(spec.half_state_lr), 0))
        kw.update(spec.fixed)  # GroupAdaGrad: wd 0
        opt = optimizer.create(name, **kw)
        dt = np.float16 if dtype.startswith("float16") else np.dtype(dtype).type
        to = _device if backend == "cuda" else (lambda a: a)
        shape = space.shape_space(name, 63).sample(rng)  # GroupAdaGrad: a matrix
        n = math.prod(shape)
        w = to(_decades(rng, n, -2, 1).reshape(shape).astype(dt))
        state = opt.create_state_multi_precision(0, w)
        hi_g = 1 if dtype == "float16" else 2  # float16 state holds squared gradients
        for _ in range(steps):
            g = to(_decades(rng, n, -4 if dt == np.float16 else -6, hi_g).reshape(shape).astype(dt))
            res = step_errors(opt, 0, w, g, state)
            worst = max([worst] + [v[0] for v in res.values()])
    return worst


def _device(a):
    from numba import cuda
    return cuda.to_device(a)


def main(argv=None):
    p = argparse.ArgumentParser(prog="mxopt check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=parse_seed, default=DEFAULT_SEED, metavar="INT|random",
                   help="seed of the random cases: an int >= 0, or 'random' for a fresh one "
                        "(printed; default: the oracle's fixed default seed, "
                        f"{DEFAULT_SEED}: the same cases every run)")
    p.add_argument("--cases", type=int, default=4,
                   help="random cases per backend row (default: %(default)s)")
    p.add_argument("--json", action="store_true",
                   help="print the rows as JSON on stdout (exit codes unchanged: 0 all pass, "
                        "1 a row failed; default: a table)")
    args = p.parse_args(argv)
    seed = resolve_seed(args.seed)
    rng = np.random.default_rng(seed)
    say = (lambda *a, **k: None) if args.json else functools.partial(print, flush=True)
    say(f"toolkit check (seed {seed}); normalised error: 1.0 is the bound, lower is better\n")
    from ..backends import cuda_available
    cuda_ok, cuda_why = cuda_available()
    say(f"CUDA rows: {'included' if cuda_ok else 'absent'} ({cuda_why})\n")
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
        TimeElapsedColumn
    from rich.table import Table
    table = []
    rows = backend_rows(with_cuda=cuda_ok)
    err_console = Console(stderr=True)
    columns = (TextColumn("{task.description:<36}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    total, started = len(PROOFS) + len(rows), time.perf_counter()
    # piped (not a terminal): no bar, a line per row on stderr as each finishes
    lines = not err_console.is_terminal

    def done(what, err):
        bar.advance(task)
        if lines:
            print(f"[{len(table)}/{total}] {what}: worst {err:.3g} "
                  f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)

    if lines:
        print(f"{len(PROOFS)} proofs, then {len(rows)} optimizer x convention x backend x dtype "
              "rows against the oracle", file=sys.stderr, flush=True)
    with Progress(*columns, console=err_console, transient=True, disable=lines) as bar:
        task = bar.add_task("proofs", total=total)
        for name, conv, what, fn in PROOFS:
            bar.update(task, description=f"proof {name}")
            try:
                err = float(fn(rng))
            except Exception as exc:  # a proof that crashes is a failure, reported as such
                err, what = float("inf"), f"{what} [{type(exc).__name__}: {exc}]"
            table.append((name, conv, "oracle", "float64", what, err))
            done(f"proof {name}", err)
        for name, conv, backend, dtype in rows:
            bar.update(task, description=f"{name} {conv} {backend} {dtype}")
            try:
                err = run_backend_row(rng, name, conv, backend, dtype, cases=args.cases)
            except Exception as exc:
                err = float("inf")
                err_console.print(f"{name} {conv} {backend} {dtype}: {type(exc).__name__}: "
                                  f"{exc}", markup=False)
            table.append((name, conv, backend, dtype, "per step vs oracle (resync)", err))
            done(f"{name} {conv} {backend} {dtype}", err)
    if args.json:
        import json
        rows_ = [{"optimizer": n, "convention": c, "backend": b, "dtype": d, "check": w,
                  "worst": e if np.isfinite(e) else str(e), "passed": bool(e <= 1.0)}
                 for n, c, b, d, w, e in table]
        print(json.dumps({"seed": seed, "cuda": {"available": bool(cuda_ok), "why": cuda_why},
                          "rows": rows_, "failed": sum(not r["passed"] for r in rows_)},
                         indent=2))
        return 1 if any(not r["passed"] for r in rows_) else 0
    out = Table(show_edge=False)
    for col, just in (("optimizer", "left"), ("convention", "left"), ("backend", "left"),
                      ("dtype", "left"), ("proof", "left"), ("worst", "right"),
                      ("result", "left")):
        out.add_column(col, justify=just)
    failed = 0
    for name, conv, backend, dtype, what, err in table:
        ok = err <= 1.0
        failed += not ok
        out.add_row(name, conv, backend, dtype, what, f"{err:.3g}",
                    "pass" if ok else "[bold red]FAIL[/]")
    console = Console(width=max(Console().width, 120))
    console.print(out)
    print(f"\n{len(table) - failed} passed, {failed} failed")
    return 1 if failed else 0
