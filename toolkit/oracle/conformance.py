"""``mxopt audit`` and :func:`toolkit.oracle.audit`: the conformance table of other frameworks'
optimizers.

For every installed framework with an adapter module (:mod:`toolkit.oracle.frameworks`), every
adapter and dtype: :func:`~toolkit.oracle.identify` names the conventions it follows, then
:func:`~toolkit.oracle.verify` checks it under each. :class:`AuditReport` holds the rows
(:class:`AuditRow`); ``to_markdown()`` is the table of docs/conformance.md, ``to_dict()`` its
JSON. A framework whose float64 needs a process-wide switch (JAX's x64) is audited in a
subprocess (``python -m toolkit.oracle.frameworks ...``, :func:`worker`).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

from .core import verify
from .identification import identify, least_cases
from .reports import versions as _oracle_versions
from . import frameworks as _frameworks
from .seeds import DEFAULT_SEED, parse_seed, resolve_seed

__all__ = ["audit", "AuditReport", "AuditRow", "verdict_of", "worst_error", "main", "worker"]

#: verify's cases per row, and identify's discriminating cases, unless asked otherwise
EXAMPLES = 200
CASES = 24
#: the longest a subprocess worker (one framework in one dtype) may run, in seconds
WORKER_TIMEOUT = 3 * 3600
#: the columns of the Markdown table (a test checks docs/conformance.md has exactly these)
COLUMNS = ("framework", "optimizer", "audited as", "dtype", "convention", "verdict",
           "usual domain", "full domain", "explanation")


#: the lines around the table in a document (docs/conformance.md) that ``--into`` rewrites
BEGIN = "<!-- the audit's table: written by mxopt audit --into; do not edit by hand -->"
END = "<!-- end of the audit's table -->"


@dataclass
class AuditRow:
    """One framework optimizer in one dtype: the ``convention`` it follows (None, with the
    ``closest``, when none), ``matches`` (every convention identified and verified), ``passed``,
    the worst normalised error in the ``usual`` (None where the report has no domains;
    ``usual_pinned``: what its cases held outside the usual ranges) and ``full`` domains, the
    ``region`` of a failure in the full domain only, the ``explanation`` and ``case`` of a
    failure, and ``failure``, the framework's own exception, if any; ``states``: how its moments
    are held where not in the weight's precision ("with bfloat16 states"), the form verified."""
    framework: str
    label: str
    optimizer: str
    dtype: str
    convention: str | None
    passed: bool
    full: float
    usual: float | None = None
    usual_pinned: str | None = None
    matches: list = field(default_factory=list)
    closest: str | None = None
    region: str | None = None
    explanation: str | None = None
    case: dict | None = None
    failure: str | None = None
    note: str = ""
    states: str | None = None


@dataclass
class AuditReport:
    """The audit: its ``rows`` (:class:`AuditRow`), the ``versions`` audited (the toolkit,
    hypothesis, numpy and each framework's packages), the ``seed``, ``examples`` and
    ``cases`` it ran with, and the frameworks ``skipped`` with the reason."""
    rows: list
    versions: dict
    seed: int
    examples: int
    cases: int
    skipped: dict = field(default_factory=dict)

    def to_dict(self):
        """JSON-ready data (infinities as strings); :meth:`from_dict` reads it back."""
        return {"versions": dict(self.versions), "seed": self.seed, "examples": self.examples,
                "cases": self.cases, "skipped": dict(self.skipped),
                "rows": [{**_asdict(r), "full": _finite(r.full),
                          "usual": None if r.usual is None else _finite(r.usual)}
                         for r in self.rows]}

    @classmethod
    def from_dict(cls, data):
        """The report :meth:`to_dict` wrote (a recorded audit: docs/conformance.json)."""
        rows = [AuditRow(**{**r, "full": float(r["full"]),
                            "usual": None if r["usual"] is None else float(r["usual"])})
                for r in data["rows"]]
        return cls(rows, data["versions"], data["seed"], data["examples"], data["cases"],
                   data.get("skipped", {}))

    def to_markdown(self):
        """The conformance table: a line of versions and settings, one row per framework
        optimizer and dtype, then the case of every failure."""
        vers = ", ".join(f"{k} {v}" for k, v in self.versions.items())
        lines = [f"Audited with {vers}; seed {self.seed}, {self.examples} verify examples and "
                 f"up to {self.cases} identify cases per row (and the known variants' "
                 f"discriminating cases).", "",
                 "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        for r in self.rows:
            lines.append("| " + " | ".join(_cells(r)) + " |")
        failed = [r for r in self.rows if not r.passed]
        if failed:
            lines += ["", "Failing cases (the worst case of each failed row):", ""]
            for r in failed:
                lines.append(f"* {r.label}, {r.dtype}: {_case_text(r)}")
        for name, why in self.skipped.items():
            lines += ["", f"Not audited: {name} ({why})."]
        return "\n".join(lines) + "\n"


def _finite(x):
    return x if math.isfinite(x) else str(x)


def _asdict(row):
    """A row as a dict, ``states`` left out where the moments are in the weight's precision
    (the rows recorded before held states read the same)."""
    return {k: v for k, v in asdict(row).items() if k != "states" or v is not None}


def _err(x):
    return "—" if x is None else (f"{x:.3g}" if math.isfinite(x) else str(x))


def _cells(r):
    if r.convention is not None:
        conv = " = ".join(r.matches or [r.convention])
    else:
        conv = f"none (closest: {r.closest})"
    verdict = "passes" if r.passed else "FAILS"
    why = (r.explanation or "") + (f" ({r.region})" if r.region else "")
    usual = _err(r.usual) + (f" ({r.usual_pinned})" if r.usual_pinned else "")
    audited = r.optimizer + (f" {r.states}" if r.states else "")
    return (r.framework, r.label, audited, r.dtype, conv, verdict, usual,
            _err(r.full), why.replace("|", "\\|").replace("\n", " ") or "—")


def _case_text(r):
    if r.failure:
        return f"it raised: {r.failure}".replace("\n", " ")
    c = r.case or {}
    # a sequence (Muon's ns_coefficients) as the tuple it was given, whether it comes from this
    # process or back from JSON (a list): the recorded table and its JSON read the same
    hyper = ", ".join(f"{k}={tuple(v) if isinstance(v, list) else v!r}"
                      for k, v in (c.get("hyperparameters") or {}).items())
    return (f"step {c.get('step')}, element {c.get('element')}: expected {c.get('expected')!r}, "
            f"got {c.get('got')!r}; {hyper}")


def verdict_of(report):
    """What a row takes from a :class:`~toolkit.oracle.VerifyReport`: ``{"passed", "usual",
    "full", "usual_pinned", "region", "explanation", "case"}``. The one place that reads a
    report for the table."""
    usual, full = report.domains["usual"], report.domains["full"]
    explained = report.explanation
    if explained is not None:
        text = f"{explained.kind}: {explained.text}"
    elif report.passed:
        text = None
    else:  # the implementation failed outright: the row's failure says how
        text = "failed outright (see failure)"
    return {"passed": report.passed, "usual": usual.max_error, "full": full.max_error,
            "usual_pinned": usual.pinned, "region": report.region, "explanation": text,
            "case": None if report.passed else _small(report.worst)}


def _small(case):
    """A failing case as a row keeps it: a held case's thousands of values (its weight and
    gradients, :mod:`toolkit.oracle.held`) left out, its hyperparameters and worst element
    kept; ``verify`` with the row's seed repeats it."""
    import numpy as np
    if not case or np.size(case.get("weight0") or ()) < 1024:
        return case
    return {**case, "weight0": None, "grads": None}


def _audit_row(framework, adapter, dtype, examples, cases, seed):
    """identify, then verify under every convention it matches (PyTorch's, where it is one of
    ours, counts as that one); the row's ``convention`` is the first that verify passes too.
    When none passes: the first candidate's failure (or identify's closest), unless verify names
    another convention it passes (``passes_under``), which is then verified and taken."""
    make_step = adapter.make(dtype)
    fixed = dict(adapter.fixed)
    ident = identify(make_step, adapter.optimizer, fixed=fixed, dtype=dtype, cases=cases,
                     seed=seed)
    held = ({"state_dtype": ident.state_dtype, "block": ident.block,
             "whole_blocks": ident.whole_blocks} if ident.states else dict(adapter.held))
    reports = {}

    def run(convention):
        if convention not in reports:
            reports[convention] = verify(make_step, adapter.optimizer, convention=convention,
                                         fixed=fixed, dtype=dtype, examples=examples, seed=seed,
                                         **held)
        return reports[convention]

    alias = ident.pytorch not in (None, "pytorch")  # "pytorch" is then one of ours
    candidates = ([c for c in ident.matches if not (alias and c == "pytorch")]
                  or [ident.closest or "mxnet"])
    passing = [c for c in candidates if run(c).passed]
    other = reports[candidates[0]].passes_under
    if not passing and other is not None and run(other).passed:
        passing = [other]
    convention = passing[0] if passing else None
    if alias and ident.pytorch in passing:
        passing.append("pytorch")
    report = reports[convention or candidates[0]]
    return AuditRow(framework=framework, label=adapter.label, optimizer=adapter.optimizer,
                    dtype=dtype, convention=convention, matches=passing,
                    closest=None if convention else candidates[0],
                    failure=report.failure or ident.failure, note=adapter.note,
                    states=report.states, **verdict_of(report))


def _rows(fw, dtype, examples, cases, seed, progress):
    adapters = [a for a in fw.adapters() if dtype in a.dtypes]
    rows = []
    for k, adapter in enumerate(adapters, start=1):
        t0 = time.perf_counter()
        row = _audit_row(fw.name, adapter, dtype, examples, cases, seed)
        rows.append(row)
        progress(f"[{fw.name} {dtype} {k}/{len(adapters)}] {adapter.label}: "
                 f"{'passes' if row.passed else 'FAILS'} "
                 f"({row.convention or 'none, closest ' + str(row.closest)}; worst "
                 f"{_err(worst_error(row))}) in {time.perf_counter() - t0:.1f} s")
    return rows


def worst_error(row):
    """The worse of a row's usual and full domains' normalised errors (the full one's where it
    has no usual one): what its verdict rests on, so what its progress line prints."""
    return row.full if row.usual is None else max(row.usual, row.full)


def _in_subprocess(fw, dtype, examples, cases, seed, env):
    """The rows of ``fw`` in ``dtype`` from a fresh interpreter with ``env`` set."""
    cmd = [sys.executable, "-m", "toolkit.oracle.frameworks", fw.name, dtype,
           "--examples", str(examples), "--cases", str(cases), "--seed", str(seed)]
    done = subprocess.run(cmd, env={**os.environ, **env}, stdout=subprocess.PIPE, text=True,
                          timeout=WORKER_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"the {fw.name} {dtype} audit worker exited with "
                           f"{done.returncode} (its stderr is above)")
    report = AuditReport.from_dict(json.loads(done.stdout))
    return report.rows, report.versions


def _resolve(frameworks):
    """Framework objects: all installed ones (None), or the named ones / objects given."""
    if frameworks is None:
        return [f for f in map(_frameworks.get, _frameworks.names()) if f.available()], {
            n: "not installed" for n in _frameworks.names()
            if not _frameworks.get(n).available()}
    if isinstance(frameworks, str):
        frameworks = frameworks.split(",")
    out = []
    for f in frameworks:
        fw = _frameworks.get(f) if isinstance(f, str) else f
        if not isinstance(fw, _frameworks.Framework):
            raise TypeError(f"frameworks must name frameworks ({', '.join(_frameworks.names())})"
                            f" or be Framework objects, got {f!r}")
        if not fw.available():
            raise ValueError(f"framework {fw.name!r} is not installed here (no module "
                             f"{fw.module!r}); {fw.install or 'install it'}, or leave it out")
        out.append(fw)
    return out, {}


def audit(frameworks=None, dtypes=("float32", "float64"), examples=EXAMPLES, seed=DEFAULT_SEED,
          cases=CASES, progress=None) -> AuditReport:
    """Identify and verify the installed frameworks' optimizers: the conformance table.

    Parameters
    ----------
    frameworks : None, str or sequence
        Adapter module names (``"torch"``, ``"optax"``, or ``"torch,optax"``) or
        :class:`~toolkit.oracle.frameworks.Framework` objects; None: every framework with an
        adapter module that is installed here (the others are listed in ``skipped``).
    dtypes : sequence of {"float32", "float64"}
        The precisions to audit (an adapter audits only those it declares: ``foreach`` and
        ``fused`` in float32).
    examples : int
        ``verify``'s cases per row. ``cases``: ``identify``'s discriminating cases per row.
    seed : int or "random"
        The seed of both (an int: the same table every run; "random": a fresh one, which the
        report records).
    progress : callable, optional
        ``progress(line)`` after each row; by default a line on stderr.
    """
    for dt in dtypes:
        if dt not in ("float32", "float64"):
            raise ValueError(f"dtypes must be float32 and/or float64, got {dt!r}")
    for name, value in (("examples", examples), ("cases", cases)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    seed = resolve_seed(seed)
    fws, skipped = _resolve(frameworks)
    for fw in fws:  # identify's least cases, for every optimizer audited, before any row runs
        for adapter in fw.adapters():
            if cases < least_cases(adapter.optimizer):
                raise ValueError(f"cases must be at least {least_cases(adapter.optimizer)} to "
                                 f"audit {fw.name}'s {adapter.label} (identify runs one case "
                                 f"per pair of {adapter.optimizer}'s conventions), got {cases}")
    if progress is None:
        def progress(line):
            print(line, file=sys.stderr, flush=True)
    rows, vers = [], {}
    for fw in fws:
        vers.update(fw.versions())
        for dt in dtypes:
            env = fw.env(dt)
            if env and any(os.environ.get(k) != v for k, v in env.items()):
                progress(f"[{fw.name} {dt}] in a subprocess ({', '.join(env)})")
                got, more = _in_subprocess(fw, dt, examples, cases, seed, env)
                rows += got
                vers.update(more)
            else:
                rows += _rows(fw, dt, examples, cases, seed, progress)
    order = {(fw.name, a.label): (i, k) for i, fw in enumerate(fws)
             for k, a in enumerate(fw.adapters())}  # each adapter's dtypes together
    rows.sort(key=lambda r: (order.get((r.framework, r.label), (len(fws), 0)), r.dtype))
    return AuditReport(rows, {**_oracle_versions(), **vers}, seed, examples, cases, skipped)


def worker(argv):
    """``python -m toolkit.oracle.frameworks FRAMEWORK DTYPE [--examples N --cases N --seed
    S]``: that framework's rows in that dtype, as the JSON of an :class:`AuditReport` on stdout
    (progress on stderr). The audit runs it in a subprocess where a dtype needs its own
    environment (``Framework.env``)."""
    ap = argparse.ArgumentParser(prog="python -m toolkit.oracle.frameworks")
    ap.add_argument("framework")
    ap.add_argument("dtype")
    ap.add_argument("--examples", type=int, default=EXAMPLES)
    ap.add_argument("--cases", type=int, default=CASES)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = ap.parse_args(argv)
    fw = _frameworks.get(args.framework)
    rows = _rows(fw, args.dtype, args.examples, args.cases, args.seed,
                 lambda line: print(line, file=sys.stderr, flush=True))
    report = AuditReport(rows, {**_oracle_versions(), **fw.versions()}, args.seed,
                         args.examples, args.cases)
    json.dump(report.to_dict(), sys.stdout)
    return 0


def main(argv):
    """``mxopt audit``: exit 0 the table was written, 2 usage error (an unknown or missing
    framework, bad arguments). A framework's failing optimizer is a finding, not an error."""
    ap = argparse.ArgumentParser(
        prog="mxopt audit",
        description="Identify and verify the optimizers of the frameworks installed here "
                    "(torch.optim, optax) against the oracle, in float32 and float64, and write "
                    "the conformance table. Progress goes to stderr.")
    ap.add_argument("--frameworks", default=None,
                    help=f"comma-separated, of {','.join(_frameworks.names())} (default: every "
                         "one installed here)")
    ap.add_argument("--dtypes", default="float32,float64",
                    help="comma-separated (default: %(default)s)")
    ap.add_argument("--examples", type=int, default=EXAMPLES,
                    help="verify's cases per row (default: %(default)s)")
    ap.add_argument("--cases", type=int, default=CASES,
                    help="identify's discriminating cases per row (default: %(default)s)")
    ap.add_argument("--seed", type=parse_seed, default=DEFAULT_SEED, metavar="INT|random",
                    help="seed of the cases: an int >= 0 (default: %(default)s, the same table "
                         "every run) or 'random' for a fresh one (recorded in the table)")
    ap.add_argument("--json", metavar="PATH",
                    help="write the report as JSON to PATH (default: none)")
    ap.add_argument("--markdown", metavar="PATH",
                    help="write the Markdown table to PATH (without --json, --markdown or "
                         "--into: the table on stdout; default: none)")
    ap.add_argument("--into", metavar="PATH",
                    help="replace the table between the audit's marker lines in the document "
                         "PATH (docs/conformance.md), keeping the rest (default: none)")
    args = ap.parse_args(argv)
    if args.into:
        try:
            with open(args.into) as f:
                _splice(f.read(), "")
        except (OSError, ValueError) as e:
            print(f"mxopt audit: error: --into {args.into}: {e}", file=sys.stderr)
            return 2
    try:
        report = audit(args.frameworks, dtypes=tuple(args.dtypes.split(",")),
                       examples=args.examples, seed=args.seed, cases=args.cases)
    except (ValueError, TypeError) as e:
        print(f"mxopt audit: error: {e}", file=sys.stderr)
        return 2
    if not report.rows:
        hints = "; ".join(f"{n}: {_frameworks.get(n).install}" for n in _frameworks.names())
        print(f"mxopt audit: no framework with an adapter is installed here ({hints})",
              file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_dict(), f, indent=1)
            f.write("\n")
        print(f"wrote {args.json}", file=sys.stderr)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(report.to_markdown())
        print(f"wrote {args.markdown}", file=sys.stderr)
    if args.into:
        with open(args.into) as f:
            text = _splice(f.read(), report.to_markdown())
        with open(args.into, "w") as f:
            f.write(text)
        print(f"wrote the table into {args.into}", file=sys.stderr)
    if not (args.json or args.markdown or args.into):
        print(report.to_markdown(), end="")
    return 0


def _splice(document, table):
    """``document`` with the lines between :data:`BEGIN` and :data:`END` replaced by
    ``table`` (a ValueError when the markers are not there once each, in order)."""
    if document.count(BEGIN) != 1 or document.count(END) != 1 or (
            document.index(BEGIN) > document.index(END)):
        raise ValueError(f"the document must hold the lines {BEGIN!r} and {END!r} once each, "
                         "in that order")
    head, rest = document.split(BEGIN)
    return head + BEGIN + "\n" + table + END + rest.split(END)[1]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
