"""``mxopt regress compare``: every entry of a recording rerun and compared with the stored
bits, in ulps of each array's storage dtype (:func:`compare`), and what it found
(:class:`Report`, one :class:`EntryResult` per entry, an :class:`ArrayChange` per array that
differs).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

import numpy as np

from .._support import (DTYPES, UsageError, cuda_status, optimizer_conventions, progress_bar,
                        provenance, select_optimizers)
from .fileformat import (BACKENDS, FORMAT, UINT, USER, VERSION, decode, encode, entry_id, load,
                         ulp_distance)
from ...optimizers.spec import DEFAULT_CONVENTIONS
from .recording import entry_matrix, run_entry
from . import users

__all__ = ["ArrayChange", "EntryResult", "Report", "FAILING", "STATUSES", "format_ulps",
           "compare"]


# ----------------------------------------------------------------------------------------------
# compare
# ----------------------------------------------------------------------------------------------
@dataclass
class ArrayChange:
    """One array at one step that differs from the file."""
    step: int          # 1-based step
    array: str         # "weight", "weight32" (master copy) or a state slot
    dtype: str
    max_ulps: float    # largest distance in ulps of ``dtype`` (inf: NaN against a number)
    elements: int      # elements that differ
    size: int
    index: int         # flat index of the largest difference
    stored: str        # its stored bits and value
    now: str           # its bits and value now


@dataclass
class EntryResult:
    id: str
    status: str        # same, within, changed, error, extra, skipped, missing
    allowed_ulps: int = 0
    max_ulps: float = 0.0
    changes: list = field(default_factory=list)
    reason: str = ""
    #: a user's entry that moved: toward or away from the reference (users.Direction)
    reference: object = None

    @property
    def worst(self):
        """The change with the largest distance (the first such), or None."""
        return max(self.changes, key=lambda c: c.max_ulps, default=None)

    @property
    def first_step(self):
        return min((c.step for c in self.changes), default=None)

    @property
    def failed(self):
        return self.status in FAILING


FAILING = ("changed", "error", "extra")
STATUSES = ("same", "within", "changed", "error", "extra", "skipped", "missing")


def format_ulps(x):
    return "inf" if x == np.inf else str(int(x))


@dataclass
class Report:
    """What :func:`compare` found: one :class:`EntryResult` per entry (and per missing one)."""
    path: str
    bound: int
    entries: list
    sources: list      # [{"path", "provenance", "scope"}] of the files read
    now: dict          # provenance of this run

    @property
    def ok(self):
        return not any(e.failed for e in self.entries)

    @property
    def exit_code(self):
        return 0 if self.ok else 1

    def counts(self):
        c = {s: 0 for s in STATUSES}
        for e in self.entries:
            c[e.status] += 1
        return c

    def by_id(self, eid):
        for e in self.entries:
            if e.id == eid:
                return e
        raise KeyError(eid)

    def summary(self):
        c = self.counts()
        parts = [f"{c[s]} {s}" for s in STATUSES if c[s]]
        return (f"{len(self.entries)} entries: {', '.join(parts) or 'none'}; bound "
                f"{self.bound} ulp{'s' if self.bound != 1 else ''}; "
                f"{'OK' if self.ok else 'DIFFERENCES BEYOND THE BOUND'}")

    def to_dict(self):
        def entry(e):
            d = asdict(e)
            d["max_ulps"] = _json_ulps(e.max_ulps)
            d["first_step"] = e.first_step
            for c in d["changes"]:
                c["max_ulps"] = _json_ulps(c["max_ulps"])
            if e.reference is None:
                del d["reference"]  # a kernel entry: no reference to report
            else:
                for k in ("stored_error_ulps", "now_error_ulps"):
                    x = d["reference"][k]
                    d["reference"][k] = "inf" if x == np.inf else x
            return d
        return {"format": f"{FORMAT}-report", "version": VERSION, "path": self.path,
                "bound": self.bound, "ok": self.ok, "exit_code": self.exit_code,
                "counts": self.counts(), "summary": self.summary(),
                "entries": [entry(e) for e in self.entries], "sources": self.sources,
                "now": self.now}


def _json_ulps(x):
    """ulps for JSON: an integer, or the string "inf" (NaN against a number)."""
    return "inf" if x == np.inf else int(x)


def _describe(a, i, encoding="bits"):
    return f"{encode(a[i:i + 1], encoding)[0]} ({float(a[i])!r})"


def _compare_entry(entry, outputs, allowed):
    res = EntryResult(entry["id"], "same", allowed)
    want_names = list(entry["arrays"])
    got_names = list(outputs[0]) if outputs else []
    if got_names != want_names:
        res.status, res.max_ulps = "changed", np.inf
        res.reason = f"the arrays are now {got_names}, the file has {want_names}"
        return res
    for k, (stored, now) in enumerate(zip(entry["steps"], outputs), 1):
        for name in want_names:
            dt = np.dtype(entry["arrays"][name])
            a = decode(stored[name], dt, entry["encoding"], f"{entry['id']} step {k} {name}")
            b = np.ascontiguousarray(now[name]).ravel()
            if b.dtype != dt:
                res.status, res.max_ulps = "changed", np.inf
                res.reason = f"step {k} {name}: dtype is now {b.dtype.name}, the file has {dt.name}"
                return res
            d = ulp_distance(a, b)
            ut = UINT[dt.itemsize]
            # bits that differ: a distance > 0, or a zero of the other sign (0 ulps apart)
            differ = (a.view(ut) != b.view(ut)) & ~(np.isnan(a) & np.isnan(b))
            nz = int(np.count_nonzero(differ))
            if nz:
                i = int(np.argmax(np.where(differ, d, -1.0)))
                res.changes.append(ArrayChange(k, name, dt.name, float(d[i]), nz, int(d.size), i,
                                               _describe(a, i), _describe(b, i)))
    if res.changes:
        res.max_ulps = max(c.max_ulps for c in res.changes)
        res.status = "within" if res.max_ulps <= allowed else "changed"
        w = res.worst
        what = "the sign of a zero" if w.max_ulps == 0 else f"stored {w.stored}, now {w.now}"
        res.reason = (f"{format_ulps(w.max_ulps)} ulp{'s' if w.max_ulps != 1 else ''} at step "
                      f"{w.step} {w.array}[{w.index}] ({what}); first difference at step "
                      f"{res.first_step}")
    return res


def _known_now(entry):
    """None when the toolkit (or the oracle) still has the entry's optimizer and convention,
    else why not. A user's entry holds its reference: it needs neither."""
    if entry["backend"] == USER:
        return None
    convs = optimizer_conventions().get(entry["optimizer"])
    if entry["backend"] == "reference":
        if convs is None:
            return f"the oracle has no optimizer {entry['optimizer']!r}"
        return None
    if convs is None:
        return f"the toolkit has no optimizer {entry['optimizer']!r}"
    if entry["convention"] not in convs:
        return f"{entry['optimizer']} has no convention {entry['convention']!r} now"
    return None


def compare(path, *, bound=0, optimizers=None, backends=None, progress=True,
            command=None, make_step=None) -> Report:
    """Rerun every entry of ``path`` (a file or a folder) and compare with the stored bits.

    ``bound``: ulps of each array's storage dtype; an entry passes when its largest distance
    is at most ``max(bound, entry["ulps"])``. ``optimizers``/``backends`` restrict the entries
    compared. CUDA entries are skipped where CUDA cannot run, and where the file was recorded on
    a GPU and this is the simulator (or the reverse) unless ``backends`` names "cuda".

    A user's entries (backend "user", :mod:`~toolkit.tools.regress.users`) rerun
    ``make_step``, by default the target the file names (``scope["target"]``, loaded as
    ``mxopt verify`` loads it); one that moved says whether toward or away from the reference
    (``EntryResult.reference``).
    """
    if isinstance(bound, bool) or not isinstance(bound, (int, np.integer)) or bound < 0:
        raise UsageError(f"bound must be an integer number of ulps >= 0, got {bound!r}")
    bound = int(bound)
    docs = load(path)
    only = None if optimizers is None else {str(n).lower() for n in optimizers}
    if backends is not None:
        for b in backends:
            if b not in BACKENDS + (USER,):
                raise UsageError(f"unknown backend {b!r}; expected one of "
                                 f"{', '.join(BACKENDS + (USER,))}")
    work = [(d, e) for d in docs for e in d["entries"]
            if (only is None or e["optimizer"] in only)
            and (backends is None or e["backend"] in backends)]
    missing = _missing(docs, only, backends, folder=os.path.isdir(path))
    _check_selection(path, docs, only, backends, work, missing)
    cuda_ok, cuda_kind, cuda_why = cuda_status()
    steppers = {}  # a user's make_step per document
    results = []
    with progress_bar(progress, len(work), "compare") as bar:
        for d, e in work:
            bar.update(e["id"], advance=0)
            allowed = max(bound, e["ulps"])
            why = _known_now(e)
            if why:
                results.append(EntryResult(e["id"], "extra", allowed, reason=why))
            elif e["backend"] == "cuda" and not cuda_ok:
                results.append(EntryResult(e["id"], "skipped", allowed, reason=cuda_why))
            elif (e["backend"] == "cuda" and (backends is None or "cuda" not in backends)
                  and (d["provenance"].get("cuda") or {}).get("kind") not in (None, cuda_kind)):
                rec = d["provenance"]["cuda"]["kind"]
                results.append(EntryResult(
                    e["id"], "skipped", allowed,
                    reason=f"recorded on the CUDA {rec}, this is the {cuda_kind} "
                           "(--backend cuda compares anyway)"))
            elif e["backend"] == USER:
                if id(d) not in steppers:
                    steppers[id(d)] = make_step or _make_step_of(d)
                results.append(_compare_user(e, steppers[id(d)], allowed,
                                             d["scope"].get("allow_wider", False)))
            else:
                try:
                    outputs = run_entry(e)
                except Exception as exc:  # the rerun itself failing is a finding, not a crash
                    results.append(EntryResult(e["id"], "error", allowed, np.inf,
                                               reason=f"{type(exc).__name__}: {exc}"))
                else:
                    results.append(_compare_entry(e, outputs, allowed))
            bar.update(advance=1)
    results.extend(missing)
    sources = [{"path": d["path"], "provenance": d["provenance"], "scope": d["scope"]}
               for d in docs]
    return Report(os.fspath(path), bound, results, sources, provenance(command))


def _make_step_of(doc):
    target = doc["scope"].get("target")
    if not target:
        raise UsageError(f"{doc['path']} names no target: give the make_step to compare "
                         "(compare(..., make_step=f), mxopt regress compare --target "
                         "module:function)")
    return users.load_make_step(target)


def _compare_user(entry, make_step, allowed, allow_wider):
    """A user's entry rerun with ``make_step`` and compared; a moved one says which way."""
    try:
        outputs = users.rerun(entry, make_step, allow_wider)
    except RuntimeError as exc:  # the user's code failing now is a finding, not a crash
        return EntryResult(entry["id"], "error", allowed, np.inf, reason=str(exc))
    res = _compare_entry(entry, outputs, allowed)
    if res.changes and res.worst.max_ulps > 0 and res.worst.array == "weight":
        res.reference = users.direction(entry, outputs, res.worst)
        res.reason += f"; {res.reference.text()}"
    return res


def _check_selection(path, docs, only, backends, work, missing):
    """A name of ``only`` or ``backends`` that selects nothing in ``path`` (no entry, none
    missing from its recorded scope) is a UsageError naming what the file has: a typo
    (``--only adm``) or a backend the file never recorded compared 0 entries and passed."""
    chosen = [e for _, e in work] + [dict(zip(("optimizer", "convention", "backend"),
                                              r.id.split("/"))) for r in missing]
    for what, names, key in (("optimizer", only, "optimizer"), ("backend", backends, "backend")):
        for name in sorted(names or ()):
            if not any(e[key] == name for e in chosen):
                has = sorted({e[key] for d in docs for e in d["entries"]})
                raise UsageError(f"no entry of {what} {name!r} in {os.fspath(path)}"
                                 f"{' with the other choices' if only and backends else ''}; "
                                 f"it has {', '.join(has) or 'no entries'}")


def _missing(docs, only, backends, folder):
    """Entries the recorded scopes would hold today but no file has (new optimizers, ...).

    One file of a folder layout read on its own answers for its own optimizers only."""
    present = {e["id"] for d in docs for e in d["entries"]}
    expected = []
    for d in docs:
        sc = d["scope"]
        try:
            names = select_optimizers(sc.get("optimizers"))
        except UsageError:
            names = [n for n in sc.get("optimizers") or [] if n in optimizer_conventions()]
        if sc.get("layout") == "folder" and not folder:
            mine = {e["optimizer"] for e in d["entries"]}
            names = [n for n in names if n in mine]
        names = [n for n in names if only is None or n in only]
        bks = [b for b in sc.get("backends") or [] if b in BACKENDS
               and (backends is None or b in backends)]
        dts = [x for x in sc.get("dtypes") or [] if x in DTYPES]
        # a scope without "conventions" was recorded when the kernels had "mxnet" and "guide"
        # only (before "pytorch"): it covers those
        convs = sc.get("conventions", DEFAULT_CONVENTIONS)
        for row in entry_matrix(names, bks, dts, convs):
            eid = entry_id(*row)
            if eid not in present and eid not in expected:
                expected.append(eid)
    return [EntryResult(eid, "missing", reason="in the recorded scope but not in the file "
                                              "(new since it was recorded?)") for eid in expected]
