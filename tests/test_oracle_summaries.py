"""Every template of ``verify``'s and ``identify``'s summaries, rendered: the usual domain's
verdict and worst case come first, then the full domain's, and no sentence contradicts another
(the issue: "it fails outside the usual domain only: the worst case still fails with its
hyperparameters moved into their usual ranges")."""
from __future__ import annotations

import itertools
import re

import pytest

from toolkit.oracle import DomainVerdict, Explanation, IdentifyReport, VerifyReport, region
from toolkit.oracle.space import Decades, Interval

USUAL = {"beta1": Interval(0.5, 0.99), "epsilon": Decades(-8, -3)}


def _regions():
    """The four kinds of region text, from region.locate itself."""
    inside = dict(beta1=0.9, epsilon=1e-5)
    yield region.locate(inside, USUAL, {}, lambda **c: True, 2)            # no hyperparameter
    small = dict(beta1=1e-10, epsilon=1e-5)
    yield region.locate(small, USUAL, {}, lambda beta1=0.0, **c: beta1 < 1e-3, 2)  # a range
    both = dict(beta1=1e-10, epsilon=10.0)
    yield region.locate(both, USUAL, {}, lambda **c: True, 3)              # moved: still fails
    yield region.locate(both, USUAL, {}, lambda **c: len(c) < 2, 3)        # only together


def _case(step, element, beta1):
    return {"hyperparameters": {"learning_rate": 0.1, "beta1": beta1}, "weight0": [1.0, 2.0],
            "grads": [[0.5, -0.5]] * step, "step": step, "element": element,
            "expected": None if element is None else 1.0,
            "got": None if element is None else 2.0, "error": 3.0}


def _verdict(passed, beta1, pinned=None, outright=False):
    worst = _case(1, None if outright else 0, beta1)
    return DomainVerdict(passed, 0.5 if passed else (float("inf") if outright else 1e4), 10,
                         worst, pinned)


REGIONS = list(_regions())
EXPLANATIONS = [None, Explanation("variant", "lerp", "guide", "the same equations (lerp)", 0.5),
                Explanation("algorithm", None, None, "another algorithm (or a bug)", 1e4)]


def _reports():
    for usual_ok, full_ok, one, outright, pinned, wider in itertools.product(
            (True, False), (True, False), (False, True), (False, True), (None, "beta1 pinned"),
            (None, "float64")):
        if one and usual_ok != full_ok or outright and usual_ok and full_ok:
            continue
        full = _verdict(full_ok, 1e-10, outright=outright and not full_ok)
        usual = full if one else _verdict(usual_ok, 0.9, pinned, outright and not usual_ok)
        passed = usual.passed and full.passed
        regions = REGIONS if usual_ok and not full_ok and not one and not outright else [None]
        for text, explanation in itertools.product(regions, EXPLANATIONS):
            if passed and explanation is not None or outright and explanation is not None:
                continue
            yield VerifyReport(
                "adam", "mxnet", "float32", passed=passed,
                max_error=max(usual.max_error, full.max_error), examples=10,
                worst=full.worst if not full.passed else usual.worst,
                failure="step 1 raised RuntimeError: x" if outright else None,
                passes_under="guide" if explanation and explanation.kind == "algorithm" else None,
                seed=0, versions={"toolkit": "0"}, domains={"usual": usual, "full": full},
                region=text, explanation=explanation, allow_wider=wider is not None,
                wider=wider, indistinguishable=["wd_before_clip"] if pinned else [])


REPORTS = list(_reports())


def test_the_region_texts_are_four():
    assert len(set(REGIONS)) == 4 and sum(t.startswith("only ") for t in REGIONS) == 2


@pytest.mark.parametrize("r", REPORTS, ids=lambda r: f"{r.passed}-{bool(r.region)}")
def test_every_verify_summary_leads_with_the_usual_domain_and_never_contradicts_itself(r):
    text = r.summary
    lines = text.splitlines()
    head = lines[0]
    assert ("PASSED" in head) == r.passed and ("FAILED" in head) == (not r.passed)
    usual_at = next(i for i, l in enumerate(lines) if l.lstrip().startswith("usual domain"))
    full_at = next(i for i, l in enumerate(lines) if l.lstrip().startswith("full domain"))
    assert usual_at < full_at  # the usual domain first
    usual, full = r.domains["usual"], r.domains["full"]
    # a failing usual domain shows its worst case under its own line, before the full domain
    cases = [i for i, l in enumerate(lines) if "worst case:" in l or "failing case:" in l]
    if not usual.passed and usual is not full:
        assert cases and usual_at < cases[0] < full_at, text
        assert "beta1=0.9" in lines[cases[0] + 1]  # the usual domain's own case
    if r.passed:
        assert not cases and "explanation" not in text and "failed" not in text.lower()
    # "fails outside the usual domain only" only with a range, the usual domain passing, the
    # full failing; no sentence about the usual ranges that says the opposite
    if "fails outside the usual domain only" in text:
        assert usual.passed and not full.passed and r.region.startswith("only ")
        assert re.search(r"usual domain( \(.*\))?: PASSED", text) and "full domain: FAILED" in text
        assert "still fails" not in text and "every hyperparameter in its usual range" not in text
    if r.region is not None and not r.region.startswith("only "):
        assert "no range of the hyperparameters is to blame" in text
        assert "fails outside the usual domain only" not in text
    if r.failure:
        assert "your implementation failed" in text and "failing case: step 1" in text
    assert ("wider results allowed" in text) == r.allow_wider
    # the variants the pins leave no discriminating case for, on a line of their own
    said = [l for l in lines if "indistinguishable under these pins" in l]
    assert len(said) == bool(r.indistinguishable), text
    assert all(l.startswith("  indistinguishable under these pins: wd_before_clip (")
               for l in said), text
    assert lines[-1].startswith("  seed 0")


def test_a_usual_worst_case_equal_to_the_full_ones_is_shown_once():
    usual = _verdict(False, 0.9)
    full = DomainVerdict(False, 1e4, 10, usual.worst)
    r = VerifyReport("adam", "mxnet", "float32", passed=False, max_error=1e4, examples=10,
                     worst=usual.worst, seed=0, domains={"usual": usual, "full": full})
    assert r.summary.count("worst case: step") == 1
    assert "worst case: the usual domain's (above)" in r.summary


# --------------------------------------------------------------------------------------------
# identify
# --------------------------------------------------------------------------------------------
def test_identify_names_the_closest_convention_and_variant_as_verify_would():
    from toolkit import oracle
    from test_oracle import make_adam
    bad = make_adam("no bias correction")
    v = oracle.verify(bad, "adam", convention="guide", examples=20).explanation
    r = oracle.identify(bad, "adam")
    assert r.convention is None and r.explanation is not None, r.summary
    assert (r.explanation.kind, r.explanation.variant, r.explanation.convention) == (
        v.kind, v.variant, v.convention) == ("variant", "no_bias_correction", "guide")
    assert "variant no_bias_correction" in r.summary.splitlines()[0]
    assert "PyTorch" not in r.summary  # nothing matched: nothing to say of PyTorch's Adam
    assert r.to_dict()["explanation"]["variant"] == "no_bias_correction"


@pytest.mark.parametrize("matches, convention, explanation, failure", [
    (["guide", "pytorch"], "guide", None, None),
    (["mxnet"], "mxnet", None, None),
    ([], None, None, None),
    ([], None, EXPLANATIONS[1], None),
    ([], None, EXPLANATIONS[2], None),
    ([], None, None, "step 1 raised RuntimeError: x"),
])
def test_every_identify_summary_speaks_of_pytorch_only_when_it_matched(matches, convention,
                                                                        explanation, failure):
    errors = {"mxnet": 0.5 if "mxnet" in matches else 1e4,
              "guide": 0.5 if "guide" in matches else 3e3}
    errors["pytorch"] = errors["guide"]
    r = IdentifyReport("adam", "float32", matches, convention, errors, 4,
                       closest=None if convention else "guide", pytorch="guide",
                       failure=failure, worst=None if convention else _case(1, 0, 0.9),
                       seed=0, explanation=explanation)
    text = r.summary
    assert ("PyTorch's adam is the same update as the 'guide'" in text) == ("pytorch" in matches)
    assert ("explanation (" in text) == (explanation is not None)
    if explanation is not None and explanation.kind == "variant":
        assert f"written as variant {explanation.variant}" in text.splitlines()[0]
    if convention is None and not failure:
        assert "follows none of the conventions" in text and "closest is 'guide'" in text
