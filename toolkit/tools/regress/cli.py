"""``python -m toolkit regress``: golden trajectories, recorded once and compared bit for bit.

The command line of :mod:`toolkit.tools.regress` (``record`` and ``compare``, their options, the
exit codes of :func:`main`, the report printed). ``record --target module:function --optimizer
NAME`` records a user's ``make_step`` on the oracle's cases instead of the toolkit's kernels
(:mod:`~toolkit.tools.regress.users`); ``compare`` loads that target again (or ``--target``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from .._support import DTYPES, UsageError, split_names
from .comparing import Report, compare, format_ulps
from .fileformat import BACKENDS, USER, RegressFileError
from .recording import DEFAULT_SIZE, DEFAULT_STEPS, record
from .users import DEFAULT_CASES, USER_DTYPES, load_make_step, record_user
from ...oracle.seeds import parse_seed

__all__ = ["main"]


# ----------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------
_PROV_KEYS = ("date", "toolkit", "git", "python", "numpy", "numba", "llvmlite", "numba_cuda",
              "platform", "cpu")


def _table(title, columns, rows, console=None):
    """A rich table, or plain aligned text without rich."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max([len(c)] + [len(str(r[i])) for r in rows]) for i, c in enumerate(columns)]
        print(title)
        for r in [columns] + [list(map(str, r)) for r in rows]:
            print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
        return
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, overflow="fold", no_wrap=i == 0)
    for r in rows:
        t.add_row(*map(str, r))
    # a log (CI, a pipe) is not 80 columns wide: do not fold the table into one
    (console or Console(width=None if sys.stdout.isatty() else 160)).print(t)


def _print_report(rep: Report):
    src = rep.sources[0]["provenance"] if rep.sources else {}
    keys = [k for k in _PROV_KEYS if src.get(k) is not None or rep.now.get(k) is not None]
    _table(f"{rep.path}: recorded vs now", ["", "recorded", "now"],
           [(k, src.get(k), rep.now.get(k)) for k in keys])
    rows, grouped = [], {}
    for e in rep.entries:
        if e.status == "same":
            continue
        if e.status in ("skipped", "missing"):  # one line per reason, not one row per entry
            grouped.setdefault((e.status, e.reason), []).append(e.id)
            continue
        w = e.worst
        if w is None:
            note = e.reason
        elif w.max_ulps == 0:
            note = f"the sign of a zero: stored {w.stored}, now {w.now}"
        else:
            note = f"[{w.index}] stored {w.stored}, now {w.now}"
        if e.reference is not None:
            note += f"; {e.reference.text()}"
        rows.append((e.id, e.status.upper() if e.failed else e.status,
                     format_ulps(e.max_ulps) if e.status in ("within", "changed") else "",
                     e.allowed_ulps if e.status not in ("missing",) else "",
                     f"step {w.step} {w.array}" if w else "",
                     f"{w.elements}/{w.size}" if w else "",
                     e.first_step or "", note))
    if rows:
        _table("entries that are not bit-identical", ["entry", "status", "max ulps", "allowed",
                                                      "worst at", "elements", "first step",
                                                      "detail"], rows)
    elif not grouped:
        print(f"all {len(rep.entries)} entries bit-identical")
    for (status, reason), ids in grouped.items():
        shown = ", ".join(ids[:4]) + (f", ... ({len(ids) - 4} more)" if len(ids) > 4 else "")
        print(f"{status} {len(ids)}: {shown}: {reason}")
    print(rep.summary())


def _parser():
    p = argparse.ArgumentParser(prog="mxopt regress",
                                description=__doc__.split("\n\n")[0].split(": ", 1)[-1],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="exit codes: 0 same (or within the bound), 1 differences "
                                       "beyond the bound, 2 usage or file error")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="record golden trajectories")
    r.add_argument("path", help="a .json file, or a folder (one file per optimizer)")
    r.add_argument("--only", action="append", metavar="NAMES",
                   help="optimizers, comma-separated or repeated (default: all)")
    r.add_argument("--backend", action="append", choices=BACKENDS,
                   help="repeatable (default: cpu, and cuda on a real GPU)")
    r.add_argument("--dtype", action="append", choices=DTYPES, help="repeatable (default: all)")
    r.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help="steps per trajectory (default: %(default)s)")
    r.add_argument("--size", type=int, default=DEFAULT_SIZE,
                   help="elements per array (default: %(default)s)")
    r.add_argument("--force", action="store_true",
                   help="overwrite existing files (default: refuse)")
    r.add_argument("--quiet", action="store_true", help="no progress bar (default: a bar)")
    u = r.add_argument_group(
        "a user's optimizer", "record your make_step(weight0, **hyper) -> step(grad) on the "
        "oracle's cases, with the reference beside each step (one .json file)")
    u.add_argument("--target", metavar="MODULE:FUNCTION",
                   help="module:function or path/to/file.py:function, as for mxopt verify "
                        "(default: none, the toolkit's kernels are recorded)")
    u.add_argument("--optimizer", metavar="NAME",
                   help="registry name of the optimizer it implements (with --target; "
                        "default: none)")
    u.add_argument("--convention", default=None,
                   help="the reference's convention (default: the optimizer's first, mxnet "
                        "for MXNet's family)")
    u.add_argument("--fixed", action="append", metavar="NAME=VALUE",
                   help="pin a hyperparameter as in mxopt verify; repeatable (default: none)")
    u.add_argument("--cases", type=int, default=DEFAULT_CASES,
                   help="the oracle's cases recorded (default: %(default)s)")
    u.add_argument("--seed", type=parse_seed, default=None, metavar="INT|random",
                   help="seed of the cases: an int >= 0, or 'random' for a fresh one (the "
                        "file records it; default: the oracle's fixed default seed, verify's "
                        "cases)")
    u.add_argument("--allow-wider", action="store_true",
                   help="accept results of a wider dtype than --dtype (default: off)")
    c = sub.add_parser("compare", help="rerun a recording and compare")
    c.add_argument("path", help="a .json file or a folder of them")
    c.add_argument("--bound", type=int, default=0,
                   help="allowed distance in ulps of each array's dtype (default 0: bit-exact)")
    c.add_argument("--json", action="store_true",
                   help="print the report as JSON on stdout (default: a summary)")
    c.add_argument("--only", action="append", metavar="NAMES",
                   help="optimizers to compare, comma-separated or repeated (default: every "
                        "one in the file; a name with no entry there is a usage error)")
    c.add_argument("--target", metavar="MODULE:FUNCTION",
                   help="the make_step a user's recording reruns (default: the target the "
                        "file names)")
    c.add_argument("--backend", action="append", choices=BACKENDS + (USER,),
                   help="backends to compare, repeatable (default: every one in the file)")
    c.add_argument("--quiet", action="store_true", help="no progress bar (default: a bar)")
    return p


def _record_user(args, command):
    from ...oracle.cli import UsageError as TargetError, parse_fixed
    if args.optimizer is None:
        raise UsageError("--target needs --optimizer NAME: the optimizer it implements")
    if args.only or args.backend:
        raise UsageError("--only and --backend choose the toolkit's kernels, not a --target")
    dtypes = args.dtype or ["float32"]
    if len(dtypes) != 1 or dtypes[0] not in USER_DTYPES:
        raise UsageError(f"a --target is recorded in one --dtype of {', '.join(USER_DTYPES)}")
    try:
        fixed = parse_fixed(args.fixed)
    except TargetError as exc:
        raise UsageError(str(exc)) from None
    return record_user(args.path, load_make_step(args.target), args.optimizer,
                       convention=args.convention, dtype=dtypes[0], fixed=fixed,
                       cases=args.cases, seed=args.seed, target=args.target,
                       allow_wider=args.allow_wider, overwrite=args.force, command=command)


def main(argv=None) -> int:
    """``regress record|compare``; returns the exit code (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help is 0, a usage error 2
        return int(exc.code or 0)
    command = "python -m toolkit regress " + " ".join(argv)
    try:
        if args.command == "record" and args.target is not None:
            res = _record_user(args, command)
            print(f"recorded {res.entries} entries ({USER}) in {res.seconds:.1f} s: "
                  f"{res.paths[0]}")
            return 0
        if args.command == "record":
            if args.optimizer is not None:
                raise UsageError("--optimizer names the optimizer a --target implements; "
                                 "the toolkit's kernels are chosen with --only")
            res = record(args.path, optimizers=split_names(args.only), backends=args.backend,
                         dtypes=args.dtype, steps=args.steps, size=args.size,
                         progress=not args.quiet, overwrite=args.force, command=command)
            for b, why in res.skipped.items():
                print(f"{b}: not recorded ({why})", file=sys.stderr)
            where = res.paths[0] if len(res.paths) == 1 else os.path.dirname(res.paths[0])
            print(f"recorded {res.entries} entries ({', '.join(res.backends)}) in "
                  f"{res.seconds:.1f} s: {where}")
            return 0
        if args.bound < 0:
            raise UsageError("--bound must be >= 0")
        rep = compare(args.path, bound=args.bound, optimizers=split_names(args.only),
                      backends=args.backend, progress=not args.quiet and not args.json,
                      command=command,
                      make_step=None if args.target is None else load_make_step(args.target))
    except (UsageError, RegressFileError, OSError) as exc:
        print(f"regress: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rep.to_dict(), indent=1))
    else:
        _print_report(rep)
    return rep.exit_code
