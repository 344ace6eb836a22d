"""``mxopt verify``, ``mxopt identify`` and ``mxopt list``.

``verify TARGET OPTIMIZER`` and ``identify TARGET OPTIMIZER`` run :func:`toolkit.oracle.verify`
and :func:`toolkit.oracle.identify` on a user's ``make_step``. ``TARGET`` is ``module:function``
(an importable module; the current directory is searched first) or ``path/to/file.py:function``.
``--fixed name=value`` pins a hyperparameter (the value is read as JSON, so ``None``/``null``,
numbers and booleans work: ``--fixed wd=0 --fixed clip_gradient=null``).

``verify`` prints the report's summary: the usual-domain and full-domain verdicts, where a
failure in the full domain only lies, and the explanation of a failure.

Exit codes (also with ``--json``, which prints the report as JSON on stdout):

* ``verify``: 0 passed, 1 failed (including an exception or a wrong output of the function),
  2 usage error (bad arguments, the target cannot be imported), 3 internal error (a bug of the
  oracle: the message asks for a report).
* ``identify``: 0 a convention was named, 1 none matches, 2 usage error, 3 internal error.
* ``list``: 0.

With ``--json`` stdout always holds one JSON object: the report, or on a usage or internal error
``{"error": "usage" | "internal", "message": ..., "exit_code": 2 | 3}``.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys

from .installed import user_folder
from .seeds import parse_seed

__all__ = ["main_verify", "main_identify", "main_list", "load_target", "parse_fixed",
           "parse_seed"]


class UsageError(Exception):
    """A bad argument or an unimportable target: exit code 2."""


def load_target(target):
    """The callable named by ``module:function`` or ``path/to/file.py:function``. The module is
    imported with its folder (the current directory for ``module:function``) first on
    ``sys.path`` meanwhile, and ours (``toolkit``, ``reference``) stay the installed ones
    (:func:`toolkit.oracle.installed.user_folder`): a ``reference.py`` beside it is its own."""
    if ":" not in target:
        raise UsageError(f"target must be module:function or file.py:function, got {target!r}")
    where, _, name = target.rpartition(":")
    try:
        if where.endswith(".py") or os.sep in where:
            path = os.path.abspath(where)
            if not os.path.isfile(path):
                raise UsageError(f"no such file: {where}")
            spec = importlib.util.spec_from_file_location(
                os.path.splitext(os.path.basename(path))[0], path)
            module = importlib.util.module_from_spec(spec)
            with user_folder(os.path.dirname(path)):  # its own imports as when it runs alone
                spec.loader.exec_module(module)
        else:
            with user_folder(os.getcwd()):
                module = importlib.import_module(where)
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - any import failure is the user's to see
        raise UsageError(f"cannot import {where!r}: {type(e).__name__}: {e}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"{where!r} has no callable {name!r}")
    return fn


def parse_fixed(items):
    """``["wd=0", "clip_gradient=null"]`` -> ``{"wd": 0, "clip_gradient": None}``."""
    fixed = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--fixed takes name=value, got {item!r}")
        raw = {"None": "null", "True": "true", "False": "false"}.get(raw, raw)
        try:
            fixed[key] = json.loads(raw)
        except json.JSONDecodeError:
            fixed[key] = raw  # a string value, such as warmup_strategy=lars
    return fixed


class _Parser(argparse.ArgumentParser):
    """argparse's parser, which with ``--json`` on the command line also writes its usage error
    as the JSON object of :func:`_error_json` on stdout (then exits 2, as argparse does)."""

    def parse_args(self, args=None, namespace=None):
        self.json_wanted = "--json" in (sys.argv[1:] if args is None else args)
        return super().parse_args(args, namespace)

    def error(self, message):
        if getattr(self, "json_wanted", False):
            _error_json("usage", f"{self.prog}: {message}", 2)
        super().error(message)


def _error_json(kind, message, code):
    print(json.dumps({"error": kind, "message": message, "exit_code": code}, indent=2))


def _parser(prog, what):
    ap = _Parser(prog=prog, description=what, epilog=_EPILOG)
    ap.add_argument("target", help="module:function or path/to/file.py:function returning "
                                   "make_step(weight0, **hyperparameters) -> step(grad)")
    ap.add_argument("optimizer", help="registry name of the optimizer it implements, e.g. adam "
                                      "(mxopt list shows them all)")
    ap.add_argument("--fixed", action="append", metavar="NAME=VALUE",
                    help="pin a hyperparameter (JSON value: --fixed wd=0 --fixed "
                         "clip_gradient=null); repeatable (default: none, every "
                         "hyperparameter drawn)")
    ap.add_argument("--dtype", default="float32", choices=("float16", "float32", "float64"),
                    help="the precision your implementation is given (default: %(default)s)")
    ap.add_argument("--seed", type=parse_seed, default=None, metavar="INT|random",
                    help="seed of the random cases: an int >= 0, or 'random' for a fresh one "
                         "(the report records it; default: the oracle's fixed default seed, "
                         "the same cases every run)")
    ap.add_argument("--allow-wider", action="store_true",
                    help="accept results of a wider floating dtype than --dtype (float64 for "
                         "float32 inputs), for an implementation that computes wider on purpose; "
                         "by default another dtype fails the step (default: off)")
    ap.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                    help="the most one step of your implementation may take, checked after it "
                         "returns: a slower step fails the run, saying so (default: no limit)")
    ap.add_argument("--json", action="store_true",
                    help="print the report as JSON on stdout (default: off)")
    return ap


_EPILOG = ("exit codes: 0 passed (verify) or a convention named (identify), 1 not, "
           "2 usage error, 3 internal error (a bug of the oracle: please report it)")


def _run(report_of, args, ok):
    from rich.console import Console
    from rich.markup import escape

    from .errors import InternalError
    err = Console(stderr=True)

    def fail(kind, e, code):
        if args.json:
            _error_json(kind, str(e), code)
        err.print(f"[red]{'error' if code == 2 else 'internal error'}:[/red] {escape(str(e))}",
                  highlight=False)
        return code

    try:
        make_step = load_target(args.target)
        fixed = parse_fixed(args.fixed)
        with Progress(err, f"{escape(args.target)} against the oracle "
                           f"({escape(args.optimizer)})") as progress:
            report = report_of(make_step, fixed, progress)
    except (UsageError, ValueError, TypeError) as e:
        return fail("usage", e, 2)  # the oracle checks its arguments before anything runs
    except InternalError as e:
        return fail("internal", e, 3)
    except Exception as e:  # noqa: BLE001 - outside the oracle's own guard: a bug of ours
        return fail("internal", _bug(e), 3)
    try:
        text = json.dumps(report.to_dict(), indent=2) if args.json else report.summary
    except Exception as e:  # noqa: BLE001
        return fail("internal", _bug(e), 3)
    print(text)
    return 0 if ok(report) else 1


class Progress:
    """Progress on stderr, shown only on a terminal and only once a run has taken ``after``
    seconds (a quick run prints nothing): "... 40 case(s) run, 6 s". Called with the cases run
    (``verify``'s and ``identify``'s ``progress``)."""

    def __init__(self, console, what, after=5.0, clock=None):
        import time
        self.console, self.what, self.after = console, what, after
        self.clock = clock or time.monotonic
        self.start, self.status = self.clock(), None

    def __enter__(self):
        return self

    def __call__(self, cases):
        elapsed = self.clock() - self.start
        if elapsed < self.after or not self.console.is_terminal:
            return
        text = f"running {self.what}: {cases} case(s) run, {elapsed:.0f} s"
        if self.status is None:
            self.status = self.console.status(text)
            self.status.start()
        else:
            self.status.update(text)

    def __exit__(self, *exc):
        if self.status is not None:
            self.status.stop()
        return False


def _bug(e):
    from .errors import REPORT_TO, InternalError
    return InternalError(f"mxopt failed: {type(e).__name__}: {e}. This is a bug of the toolkit: "
                         f"please report it to {REPORT_TO} with the command line and the "
                         f"versions (mxopt --version)")


def main_verify(argv):
    """``mxopt verify``: exit 0 passed, 1 failed, 2 usage error."""
    from ..optimizers.spec import CONVENTIONS
    ap = _parser("mxopt verify", "Check an optimizer implementation against the oracle.")
    ap.add_argument("--convention", default=None, choices=CONVENTIONS,
                    help="the equations to check against: MXNet 1.9.1's numerics, the guide's "
                         "equations, PyTorch's, or the paper's; mxopt identify names the one "
                         "you follow (default: the optimizer's first, mxnet for MXNet's family)")
    ap.add_argument("--examples", type=int, default=100,
                    help="random cases (hyperparameters, weights and gradients) to run over "
                         "the full domain; the usual domain, where the optimizer declares usual "
                         "ranges, takes half as many (default: %(default)s)")
    ap.add_argument("--state-dtype", default=None, choices=("float32", "bfloat16", "int8"),
                    help="how your implementation holds its moments between steps, where "
                         "not in the weight's precision; mxopt identify names it (default: "
                         "in the weight's precision)")
    ap.add_argument("--block", type=int, default=None,
                    help="with --state-dtype int8: elements per block (default: 256)")
    ap.add_argument("--whole-blocks", action="store_true",
                    help="with --state-dtype int8: only a weight that is whole blocks is held "
                         "(torchao's rule; default: every weight of 4096 elements or more)")
    args = ap.parse_args(argv)
    from . import verify
    return _run(lambda f, fixed, progress: verify(
                    f, args.optimizer, convention=args.convention, fixed=fixed,
                    dtype=args.dtype, examples=args.examples, allow_wider=args.allow_wider,
                    timeout=args.timeout, progress=progress, state_dtype=args.state_dtype,
                    block=args.block, whole_blocks=args.whole_blocks,
                    **({} if args.seed is None else {"seed": args.seed})),
                args, lambda r: r.passed)  # no --seed: verify's fixed default seed


def main_identify(argv):
    """``mxopt identify``: exit 0 a convention named, 1 none, 2 usage error."""
    ap = _parser("mxopt identify", "Name the convention an optimizer implementation follows.")
    ap.add_argument("--cases", type=int, default=24,
                    help="random cases run under every convention (default: %(default)s)")
    args = ap.parse_args(argv)
    from . import identify
    return _run(lambda f, fixed, progress: identify(
                    f, args.optimizer, fixed=fixed, dtype=args.dtype, cases=args.cases,
                    allow_wider=args.allow_wider, timeout=args.timeout, progress=progress,
                    seed=0 if args.seed is None else args.seed),
                args, lambda r: r.convention is not None)


def listing():
    """What this installation offers: optimizers with their conventions (kernels and oracle),
    and the backends with the reason one is missing."""
    from .. import optimizer
    from ..backends import cuda_available
    rows = []
    for name, klass in optimizer.registry().items():
        spec = optimizer.spec_of(name)
        row = {"optimizer": name, "class": klass.__name__,
               "kernel_conventions": tuple(spec.conventions)}
        if not spec.has_oracle:  # a custom optimizer registered by the user: no oracle
            rows.append({**row, "oracle_conventions": (), "pytorch": None})
            continue
        module = spec.reference_module()
        rows.append({**row, "oracle_conventions": tuple(module.CONVENTIONS),
                     "pytorch": module.PYTORCH})
    import numba
    ok, why = cuda_available()
    backends = [{"backend": "reference", "available": True, "why": "float64 oracle (numpy)"},
                {"backend": "cpu", "available": True, "why": f"numba {numba.__version__}"},
                {"backend": "cuda", "available": bool(ok), "why": why}]
    return {"optimizers": rows, "backends": backends}


def main_list(argv):
    """``mxopt list``: optimizers, conventions and backends (exit 0)."""
    ap = argparse.ArgumentParser(prog="mxopt list", description=listing.__doc__)
    ap.add_argument("--json", action="store_true",
                    help="print the listing as JSON on stdout (default: a table)")
    args = ap.parse_args(argv)
    data = listing()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    from rich.console import Console
    from rich.markup import escape  # a cell is text: '.[cuda]' in a hint is not markup
    from rich.table import Table
    t = Table(title="optimizers")
    for col in ("name", "class", "kernels", "oracle", "PyTorch's update"):
        t.add_column(col)
    for r in data["optimizers"]:
        py = {None: "-", "pytorch": "its own"}.get(r["pytorch"], f"= {r['pytorch']}")
        t.add_row(r["optimizer"], r["class"], ", ".join(r["kernel_conventions"]),
                  ", ".join(r["oracle_conventions"]) or "- (custom)", py)
    b = Table(title="backends")
    for col in ("backend", "available", "why"):
        b.add_column(col)
    for r in data["backends"]:
        b.add_row(r["backend"], "yes" if r["available"] else "no", escape(str(r["why"])))
    console = Console()
    console.print(t)
    console.print(b)
    return 0
