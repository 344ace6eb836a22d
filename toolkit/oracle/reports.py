"""The reports of :func:`~toolkit.oracle.verify` and :func:`~toolkit.oracle.identify`: what a
run found (:class:`VerifyReport`, with a :class:`DomainVerdict` per domain and the
:class:`Explanation` of a failure; :class:`IdentifyReport`), their readable ``summary`` and their
JSON form, and the versions a report records (:func:`versions`). ``verify``
(:mod:`toolkit.oracle.core`) and ``identify`` (:mod:`toolkit.oracle.identification`) fill
them in.
"""
from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass, field

import numpy as np

__all__ = ["KINDS", "Explanation", "DomainVerdict", "VerifyReport", "IdentifyReport", "finite",
           "FRAMEWORKS", "versions"]


#: the kinds of :class:`Explanation`, in the order they are looked for
KINDS = ("convention", "variant", "algorithm")
#: frameworks whose version a report records when the implementation has imported them (the
#: audit's, :mod:`toolkit.oracle.frameworks`, among them: a test checks that)
FRAMEWORKS = ("torch", "optax", "jax", "jaxlib", "tensorflow", "mxnet", "cupy", "lion_pytorch",
              "adopt", "adabelief_pytorch", "schedulefree", "bitsandbytes", "torchao")


def versions():
    """``{package: version}`` a verdict depends on: the toolkit, hypothesis, numpy, and each of
    :data:`FRAMEWORKS` that is imported (an implementation's framework, once it has run)."""
    import hypothesis

    from .. import __version__
    out = {"toolkit": __version__, "hypothesis": hypothesis.__version__,
           "numpy": np.__version__}
    for name in FRAMEWORKS:
        module = sys.modules.get(name)
        if module is None:
            continue
        version = getattr(module, "__version__", None)
        if version is None:  # a package without one (lion-pytorch): its distribution's
            version = _distribution_version(name)
        if version is not None:
            out[name] = str(version)
    return out


def _distribution_version(name):
    """The installed version of the distribution whose files hold the imported top-level module
    ``name`` (not a user's module of the same name), or None."""
    import importlib.metadata as md

    from .installed import installed_by
    path = getattr(sys.modules.get(name), "__file__", None)
    for dist in _distributions().get(name, ()):
        if installed_by(path, dist):
            return md.version(dist)
    return None


@functools.lru_cache(maxsize=1)
def _distributions():
    """``importlib.metadata.packages_distributions()``, read once (it scans every installed
    distribution)."""
    import importlib.metadata as md
    return md.packages_distributions()


@dataclass(frozen=True)
class Explanation:
    """Why a :func:`verify` run failed, found by re-running its cases under the other
    conventions and under each known variant the optimizer's spec declares
    (:mod:`toolkit.oracle.variants`).

    ``kind``: ``"convention"`` (it passes ``convention``), ``"variant"`` (it passes variant
    ``variant`` of ``convention``'s equations) or ``"algorithm"`` (neither: another algorithm,
    or a bug; ``variant`` and ``convention`` None). ``text``: one readable line. ``max_error``:
    the worst normalised error of the run's cases under the explanation (<= 1), or, for
    ``"algorithm"``, the run's own."""
    kind: str
    variant: str | None
    convention: str | None
    text: str
    max_error: float

    def to_dict(self):
        """The explanation as JSON-ready data."""
        return {"kind": self.kind, "variant": self.variant, "convention": self.convention,
                "text": self.text, "max_error": finite(self.max_error)}


@dataclass(frozen=True)
class DomainVerdict:
    """The verdict of :func:`verify` over one domain (``"usual"``: ``Spec.usual``, the ranges
    people train with; ``"full"``: ``Spec.space``): ``passed``, ``max_error``, ``examples`` and
    the ``worst`` case (or None). ``pinned``: in the usual domain, the values ``fixed`` pins
    outside their usual ranges (the summary names the domain by them), else None.
    ``discriminating``: how many discriminating cases ran before the drawn ones."""
    passed: bool
    max_error: float
    examples: int
    worst: dict | None = None
    pinned: str | None = None
    discriminating: int = 0

    def to_dict(self):
        """The verdict as JSON-ready data."""
        return {"passed": self.passed, "max_error": finite(self.max_error),
                "examples": self.examples, "worst": self.worst, "pinned": self.pinned,
                "discriminating": self.discriminating}


@dataclass
class VerifyReport:
    """The verdict of :func:`verify`. ``max_error`` is normalised (<= 1: within the rigorous
    rounding bound of the dtype); ``worst`` the case with the largest error; ``failure`` the
    user's exception or bad output, if any; ``passes_under`` another convention the
    implementation passes when it fails this one; ``seed`` (``verify(..., seed=report.seed)``
    repeats the run) and ``versions`` (:func:`versions`).

    ``passed`` is both domains' verdict, ``max_error`` and ``worst`` the worse domain's,
    ``examples`` the full domain's count; ``domains`` is ``{"usual": DomainVerdict, "full":
    DomainVerdict}``. ``region``: when only the full domain fails, where the failure lies
    (bisected towards the usual ranges: "only for beta1 < 1.1e-05"), else None.
    ``explanation`` (:class:`Explanation`): why a run failed, None when it passed or failed
    outright. ``indistinguishable``: the known variants ``fixed`` leaves no discriminating case
    for. ``state_dtype`` and ``block``: the held moments asked for (``states``: how the summary
    names them, "with bfloat16 states"), None without."""
    optimizer: str
    convention: str
    dtype: str
    passed: bool
    max_error: float
    examples: int
    worst: dict | None = None
    failure: str | None = None
    passes_under: str | None = None
    seed: int | None = None
    versions: dict = field(default_factory=dict)
    domains: dict = field(default_factory=dict)
    region: str | None = None
    explanation: Explanation | None = None
    allow_wider: bool = False
    wider: str | None = None
    indistinguishable: list = field(default_factory=list)
    state_dtype: str | None = None
    block: int | None = None
    states: str | None = None

    @property
    def summary(self) -> str:
        """The verdict in a few readable lines, with the worst case, the convention it passes
        instead (if any), the seed and the versions."""
        held = f", {self.states}" if self.states else ""
        head = (f"{self.optimizer} ({self.convention} convention, {self.dtype}{held}): "
                f"{'PASSED' if self.passed else 'FAILED'} over {self.examples} example(s); "
                f"worst normalised error {self.max_error:.3g} (1.0 is the rounding bound)")
        lines = [head]
        if self.allow_wider:
            lines.append(_wider_line(self.wider, self.dtype))
        if self.passes_under:
            c = self.passes_under
            lines.append(f"  it passes the {c!r} convention instead (same seed and examples): "
                         f"ask for it with convention={c!r} (mxopt verify ... --convention {c})")
        if self.failure:
            lines.append(f"  your implementation failed: {self.failure}")
        usual, full = self.domains.get("usual"), self.domains.get("full")
        if usual is None or full is None:  # a report made by hand: its worst case only
            lines += _case_lines(self.worst if self.max_error > 0 else None, "  ")
        elif usual is full:
            lines.append("  usual domain: the full one (no usual ranges are declared)")
            lines += _domain_lines("full", full, None)
        else:  # the hyperparameters people train with first, then everything explored
            lines += _domain_lines("usual", usual, None)
            lines += _domain_lines("full", full, usual, self.region)
        if self.explanation is not None:
            lines.append(f"  explanation ({self.explanation.kind}): {self.explanation.text}")
        if self.indistinguishable:
            lines.append(f"  indistinguishable under these pins: "
                         f"{', '.join(self.indistinguishable)} (no case with the fixed values "
                         "tells these variants from the equations checked; without the pins "
                         "some case does)")
        lines.append(_provenance(self.seed, self.versions))
        return "\n".join(lines)

    def __str__(self):
        return self.summary

    def to_dict(self):
        """The report as JSON-ready data (``summary`` included; infinities as strings)."""
        return {"optimizer": self.optimizer, "convention": self.convention,
                "dtype": self.dtype, "passed": self.passed, "max_error": finite(self.max_error),
                "examples": self.examples, "worst": self.worst, "failure": self.failure,
                "passes_under": self.passes_under, "seed": self.seed,
                "versions": dict(self.versions),
                "domains": {k: d.to_dict() for k, d in self.domains.items()},
                "region": self.region,
                "explanation": None if self.explanation is None else self.explanation.to_dict(),
                "allow_wider": self.allow_wider, "wider": self.wider,
                "indistinguishable": list(self.indistinguishable),
                **({"state_dtype": self.state_dtype, "block": self.block,
                    "states": self.states} if self.states else {}),
                "summary": self.summary}


def _wider_line(wider, dtype):
    """The summary's line for ``allow_wider=True``: whether the results came wider."""
    return ("  wider results allowed (allow_wider=True): " +
            (f"yours are {wider} for {dtype} inputs, held to the {dtype} bound" if wider else
             f"yours were all {dtype}"))


def _domain_lines(name, d, before, region=None):
    """A domain's verdict line, then, where it failed, its worst case (the usual domain's is
    not shown twice: ``before``) and the region of a failure in the full domain only."""
    label = f"{name} domain" + (f" ({d.pinned})" if d.pinned else "")
    lines = [f"  {label}: {'PASSED' if d.passed else 'FAILED'} over {d.examples} example(s); "
             f"worst normalised error {d.max_error:.3g}"]
    if region:
        lines.append("    " + _region_line(region))
    if not d.passed:
        if before is not None and not before.passed and before.worst == d.worst:
            lines.append("    worst case: the usual domain's (above)")
        else:
            lines += _case_lines(d.worst, "    ")
    return lines


def _region_line(region):
    """The region's line: a range of hyperparameters ("only for beta1 < 0.00258") is where the
    full domain fails outside the usual one; any other text says why none is named."""
    if region.startswith("only "):
        return f"it fails outside the usual domain only: {region}"
    return f"the usual domain passed, and no range of the hyperparameters is to blame: {region}"


def _case_lines(w, indent):
    """The lines of a worst case (a ``worst`` dict), or none."""
    if not w or w.get("step") is None:
        return []
    if w["element"] is None:  # the implementation failed outright at this step
        lines = [f"{indent}failing case: step {w['step']}"]
    else:
        lines = [f"{indent}worst case: step {w['step']}, element {w['element']}: "
                 f"expected {w['expected']!r}, got {w['got']!r}"]
    lines.append(f"{indent}hyperparameters: {_fmt(w['hyperparameters'])}")
    lines.append(f"{indent}weight0: {_short(w['weight0'])}")
    lines += [f"{indent}grad {k}: {_short(g)}" for k, g in enumerate(w["grads"], start=1)]
    return lines


def _provenance(seed, vers):
    """The summary's last line: the seed (how to repeat the run) and the versions."""
    return (f"  seed {seed} (seed={seed} repeats this run); "
            + ", ".join(f"{k} {v}" for k, v in vers.items()))


def finite(x):
    """``x`` for JSON: itself when finite, else its text (\"inf\", \"nan\")."""
    return x if math.isfinite(x) else str(x)


def _fmt(h):
    return ", ".join(f"{k}={v!r}" for k, v in h.items())


def _short(xs, n=6):
    xs = np.ravel(np.asarray(xs, dtype=np.float64))  # a matrix weight's values in C order
    body = ", ".join(f"{x:.6g}" for x in xs[:n])
    return f"[{body}{', ...' if len(xs) > n else ''}] ({len(xs)} values)"


@dataclass
class IdentifyReport:
    """The verdict of :func:`identify`: ``matches`` (every convention the implementation agrees
    with on all cases; "pytorch" has the error of the convention that is PyTorch's update),
    ``convention`` (the one it follows, or None), ``errors`` (the worst normalised error against
    each), ``closest`` and ``explanation`` (as :func:`verify` would give it for the closest) when
    none matches, ``indistinguishable`` (pairs of conventions no case told apart under
    ``fixed``), ``seed`` and ``versions``. For an optimizer with moments, how it holds them on
    its ``held_cases`` (:mod:`toolkit.oracle.held`): ``state_dtype`` and ``block`` (None: in
    the weight's precision; ``states``: how the summary names the form), with ``held_error``,
    the worst error there under that form (under the weight's precision where no form fits),
    and ``held_failure``, the implementation's failure on them."""
    optimizer: str
    dtype: str
    matches: list
    convention: str | None
    errors: dict
    cases: int
    closest: str | None = None
    pytorch: str | None = None
    indistinguishable: list = field(default_factory=list)
    failure: str | None = None
    worst: dict | None = None
    seed: int | None = None
    versions: dict = field(default_factory=dict)
    allow_wider: bool = False
    wider: str | None = None
    explanation: Explanation | None = None
    state_dtype: str | None = None
    block: int | None = None
    whole_blocks: bool = False
    states: str | None = None
    held_cases: int = 0
    held_error: float | None = None
    held_failure: str | None = None

    @property
    def summary(self) -> str:
        """The verdict in a few readable lines (the closest convention's worst case if none
        matches)."""
        errs = ", ".join(f"{c} {_fmt_err(e)}" for c, e in self.errors.items()
                         if c != "pytorch" or self.pytorch == "pytorch")
        if self.failure:
            head = f"{self.optimizer}: could not run your implementation: {self.failure}"
        elif self.convention is not None:
            head = (f"{self.optimizer}: your implementation follows the {self.convention!r} "
                    f"convention" + (f" {self.states}" if self.states else ""))
        else:
            e = self.explanation
            head = (f"{self.optimizer}: your implementation follows none of the conventions"
                    + (f" exactly: it follows the {e.convention!r} convention's equations "
                       f"written as variant {e.variant}" if e is not None and e.kind == "variant"
                       else "")
                    + f"; closest is {self.closest!r}, off by "
                      f"{_fmt_err(self.errors[self.closest])} bounds")
        lines = [head, f"  worst normalised error per convention over {self.cases} "
                       f"discriminating case(s): {errs} (<= 1 matches)"]
        if self.allow_wider:
            lines.append(_wider_line(self.wider, self.dtype))
        lines += _held_lines(self)
        if self.pytorch not in (None, "pytorch") and self.pytorch in self.matches:
            lines.append(f"  PyTorch's {self.optimizer} is the same update as the "
                         f"{self.pytorch!r} convention")
        if self.convention and "pytorch" in self.matches and self.pytorch == "pytorch":
            lines.append(f"  this is PyTorch's {self.optimizer} (torch.optim)")
        for a, b in self.indistinguishable:
            lines.append(f"  {a!r} and {b!r} give the same results under these hyperparameters "
                         "(no case could tell them apart)")
        if self.explanation is not None:
            lines.append(f"  explanation ({self.explanation.kind}): {self.explanation.text}")
        if self.convention is None and self.worst:
            w = self.worst
            lines.append(f"  against {self.closest!r}: step {w['step']}, element {w['element']}:"
                         f" expected {w['expected']!r}, got {w['got']!r}; hyperparameters "
                         f"{_fmt(w['hyperparameters'])}")
        lines.append(_provenance(self.seed, self.versions))
        return "\n".join(lines)

    def __str__(self):
        return self.summary

    def to_dict(self):
        """The report as JSON-ready data (``summary`` included; infinities as strings)."""
        return {"optimizer": self.optimizer, "dtype": self.dtype, "matches": self.matches,
                "convention": self.convention,
                "errors": {k: finite(v) for k, v in self.errors.items()},
                "cases": self.cases, "closest": self.closest, "pytorch": self.pytorch,
                "indistinguishable": [list(p) for p in self.indistinguishable],
                "failure": self.failure, "worst": self.worst, "seed": self.seed,
                "versions": dict(self.versions), "allow_wider": self.allow_wider,
                "wider": self.wider,
                "explanation": None if self.explanation is None else self.explanation.to_dict(),
                **({"state_dtype": self.state_dtype, "block": self.block,
                    "whole_blocks": self.whole_blocks, "states": self.states,
                    "held_cases": self.held_cases, "held_error": finite(self.held_error),
                    "held_failure": self.held_failure} if _held_shown(self) else {}),
                "summary": self.summary}


def _held_shown(r):
    """Whether the held cases found something to say: a low-bit form, or none that fits."""
    return bool(r.states) or r.held_failure is not None or (
        r.held_error is not None and not r.held_error <= 1.0)


def _held_lines(r):
    """The summary's lines on the held cases, where they found something (:func:`_held_shown`;
    moments held in the weight's precision, as most implementations hold them, go unsaid)."""
    if not _held_shown(r):
        return []
    n = f"{r.held_cases} held case(s) of 4096 elements or more"
    if r.held_failure is not None:
        return [f"  on its {n} it failed: {r.held_failure}"]
    if r.states:
        how = (f"in 8-bit blocks of {r.block} elements" if r.block else f"in {r.state_dtype}")
        return [f"  its moments are held {how}: worst normalised "
                f"error {_fmt_err(r.held_error)} over its {n} (toolkit.oracle.held; verify it "
                f"with state_dtype={r.state_dtype!r}" +
                (f", block={r.block}" if r.block else "") +
                (", whole_blocks=True" if r.whole_blocks else "") + ")"]
    return [f"  on its {n} it follows no known way of holding its moments (worst normalised "
            f"error {_fmt_err(r.held_error)} with them in the weight's precision)"]


def _fmt_err(e):
    return f"{e:.3g}" if math.isfinite(e) else str(e)
