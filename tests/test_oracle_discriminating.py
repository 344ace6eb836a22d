"""Every distinguishable variant is caught at every setting: ``verify`` runs the discriminating
cases of the known variants (``toolkit.oracle.discriminating``) before its drawn ones, so an
implementation of a variant fails with ``examples=1`` at any seed, and the report names it.

Each variant the reference writes as other values (the hyperparameters' precision, a term
elsewhere) is planted as the reference's own step of that variant
(``discriminating.variant_make_step``); the rounding the reference writes as a wider bound
(constants formed in the dtype) is planted as a numpy Adam computing it
(tests/test_oracle_variants.py's ``make_adam`` and the issue's Adam of
tests/test_oracle_prefix.py). The prefix test covers larger counts.
"""
from __future__ import annotations

import numpy as np
import pytest

from toolkit import oracle
from toolkit.optimizer import specs
from toolkit.oracle import discriminating
from toolkit.oracle.variants import variants_of

from test_oracle_prefix import _adam_with_float32_constants
from test_oracle_variants import make_adam

SEEDS = (0, 1, 2)
DTYPE = "float64"


def _conventions(name):
    implemented, pytorch = oracle.conventions_of(name)
    return [c for c in implemented if c != "pytorch"] + (["pytorch"] if pytorch == "pytorch"
                                                         else [])


def _written():
    """``(optimizer, variant, convention, dtype)``: every variant the reference writes as other
    values, under each convention where it applies and each dtype where some case tells it
    apart (in the full domain)."""
    out = []
    for name, spec in specs(oracle=True).items():
        if spec.noise:
            continue
        ref = spec.reference_module()
        for convention in _conventions(name):
            for dtype in discriminating.DTYPES:
                told = discriminating.find(name, convention, dtype)
                for v in variants_of(spec):
                    if v.applies(ref, convention) and not discriminating._bound_only(v) \
                            and v.name in told:
                        out.append((name, v.name, convention, dtype))
    return out


WRITTEN = _written()


def _named(report, variant, convention):
    """The report names the variant (or, where the variant is another convention's equations,
    that convention: SGD's hyperparameters in double are the guide's equations)."""
    e = report.explanation
    return e is not None and ((e.kind, e.variant) == ("variant", variant) or (
        e.kind == "convention" and e.convention != convention
        and report.passes_under == e.convention))


def test_every_declared_variant_is_planted_somewhere():
    # every optimizer's precision variants at least are told apart in float64: MXNet's
    # family's hyperparameters in double, the others' in float32
    for name, spec in specs(oracle=True).items():
        if spec.noise:
            continue
        precision = "hyper_f64" if "mxnet" in spec.conventions else "hyper_f32"
        assert any(n == name and v == precision and d == DTYPE for n, v, _, d in WRITTEN), \
            name


@pytest.mark.parametrize("name, variant, convention, dtype", WRITTEN)
def test_a_written_variant_fails_at_one_example_and_is_named(name, variant, convention, dtype):
    make = discriminating.variant_make_step(name, variant, convention, dtype)
    for seed in SEEDS:
        r = oracle.verify(make, name, convention=convention, dtype=dtype, examples=1, seed=seed)
        assert not r.passed and _named(r, variant, convention), (seed, r.summary)


@pytest.mark.parametrize("convention", ["guide", "mxnet"])
def test_constants_in_float32_fail_at_one_example_and_are_named(convention):
    make = make_adam(convention, "constants_in_dtype")
    for seed in SEEDS:
        r = oracle.verify(make, "adam", convention=convention, dtype="float32", examples=1,
                          seed=seed)
        assert not r.passed and r.explanation.variant == "constants_in_dtype", (seed, r.summary)


@pytest.mark.parametrize("variant, dtype", [("constants_in_dtype", "float32"),
                                            ("schedule_product_f32", "float64")])
def test_nadams_roundings_fail_at_one_example_and_are_named(variant, dtype):
    from test_oracle_variants_more import MAKERS
    make = MAKERS[("nadam", "mxnet")](variant)
    for seed in SEEDS:
        r = oracle.verify(make, "nadam", dtype=dtype, examples=1, seed=seed)
        assert not r.passed and r.explanation.variant == variant, (seed, r.summary)


def test_the_issues_float32_constants_adam_fails_at_one_example():
    make = _adam_with_float32_constants()
    for seed in SEEDS:
        r = oracle.verify(make, "adam", convention="guide", examples=1, seed=seed)
        assert not r.passed and r.explanation.variant == "constants_in_dtype", (seed, r.summary)


def test_a_variant_implementation_passes_under_its_own_variant():
    # the planted implementation is the variant: its failing cases are explained by it alone
    make = discriminating.variant_make_step("adam", "eps_inside_root", "guide", DTYPE)
    r = oracle.verify(make, "adam", convention="guide", dtype=DTYPE, examples=3)
    assert r.explanation.variant == "eps_inside_root" and r.explanation.max_error <= 1.0


def test_the_discriminating_cases_are_the_same_in_every_process_order():
    a = discriminating.cases("adam", "guide", "float32", "full")
    discriminating._find.cache_clear()
    b = discriminating.cases("adam", "guide", "float32", "full")
    assert [(c.hyper, c.weight.tolist(), [g.tolist() for g in c.grads]) for c in a] == \
        [(c.hyper, c.weight.tolist(), [g.tolist() for g in c.grads]) for c in b]
    assert len(a) >= 1


def test_the_discriminating_cases_run_first_at_every_seed():
    calls = []
    correct = make_adam("guide")

    def recording(w, **hyper):
        calls.append((w.tobytes(), tuple(sorted(hyper.items(), key=str))))
        return correct(w, **hyper)
    first = discriminating.cases("adam", "guide", "float32", "full")
    for seed in SEEDS:
        calls.clear()
        oracle.verify(recording, "adam", convention="guide", examples=2, seed=seed)
        assert [c[0] for c in calls[:len(first)]] == [c.weight.astype("float32").tobytes()
                                                      for c in first]


def test_a_pin_that_removes_a_variants_cases_is_reported():
    # without weight decay and clipping, their order cannot show
    fixed = dict(wd=0.0, clip_gradient=None)
    r = oracle.verify(make_adam("guide"), "adam", convention="guide", dtype="float64",
                      fixed=fixed, examples=1)
    assert r.passed and r.indistinguishable == ["wd_before_clip"], r.summary
    assert "indistinguishable under these pins: wd_before_clip" in r.summary
    assert r.to_dict()["indistinguishable"] == ["wd_before_clip"]
    assert oracle.verify(make_adam("guide"), "adam", convention="guide", dtype="float64",
                         examples=1).indistinguishable == []


def test_the_discriminating_cases_hold_the_pins_and_still_catch_a_variant():
    fixed = dict(wd=0.0, clip_gradient=None, epsilon=1e-3)
    for case in discriminating.cases("adam", "guide", DTYPE, "full", fixed):
        assert all(case.hyper[k] == v for k, v in fixed.items()), case.hyper
    make = discriminating.variant_make_step("adam", "eps_inside_root", "guide", DTYPE)
    for seed in SEEDS:
        r = oracle.verify(make, "adam", convention="guide", dtype=DTYPE, fixed=fixed,
                          examples=1, seed=seed)
        assert not r.passed and r.explanation.variant == "eps_inside_root", r.summary


def test_the_cases_of_fewer_examples_are_a_prefix_discriminating_cases_first():
    calls = []
    correct = make_adam("guide")

    def recording(w, **hyper):
        calls.append((w.tobytes(), tuple(sorted(hyper.items(), key=str))))
        return correct(w, **hyper)

    def full(n):
        calls.clear()
        r = oracle.verify(recording, "adam", convention="guide", examples=n, usual_examples=1)
        return list(calls[:len(discriminating.cases("adam", "guide", "float32", "full")) +
                          r.domains["full"].examples])
    longer = full(12)
    for n in (1, 5):
        assert full(n) == longer[:len(full(n))]


# --------------------------------------------------------------------------------------------
# the stored indices and docs/oracle.md's table of indistinguishable variants
# --------------------------------------------------------------------------------------------
def test_the_docs_table_is_the_one_the_stored_indices_give():
    from pathlib import Path
    text = (Path(__file__).parents[1] / "docs" / "oracle.md").read_text()
    start, end = discriminating.MARKERS
    shown = text.split(start + "\n", 1)[1].split(end, 1)[0].strip()
    assert shown == discriminating.markdown(), \
        "docs/oracle.md's table is stale: python -m toolkit.oracle.discriminating"
    # row by row: each line is one (optimizer, variant, convention), each cell its domains
    rows = discriminating.table()
    for line in shown.splitlines()[2:]:
        name, variant, convention, *cells = [c.strip() for c in line.strip("|").split("|")]
        for dtype, cell in zip(discriminating.DTYPES, cells):
            cell = cell.split("; not guaranteed")[0]  # the lerp's domains with cases follow
            domains = [] if cell in ("told apart", "not guaranteed") else cell.split(", ")
            assert sorted(domains) == sorted(
                d for n, v, c, t, d in rows
                if (n, f"`{v}`", c, t) == (name, variant, convention, dtype)), line
            for domain in domains:
                assert variant.strip("`") in discriminating.indistinguishable(
                    name, convention, dtype, domain), line


def test_every_setting_is_stored():
    from toolkit.oracle._discriminating_indices import INDICES
    assert sorted(INDICES) == sorted(" ".join(s) for s in discriminating.settings())


@pytest.mark.parametrize("setting", discriminating.settings(), ids=" ".join)
def test_every_stored_case_tells_its_variant_apart(setting):
    from toolkit.oracle.trajectory import reference_module, reference_trajectory
    from toolkit.oracle.variants import VARIANTS
    name, convention, dtype, domain = setting
    ref = reference_module(name)
    dt = np.dtype(dtype)
    for variant, case in discriminating.find(*setting).items():
        v = VARIANTS[variant]
        refs = reference_trajectory(ref, case, convention, dt)
        score = (discriminating._spread(ref, case, convention, dt, refs, v)
                 / discriminating.SPREAD if discriminating._bound_only(v) else
                 discriminating._variant_error(ref, case, convention, dt, refs, v))
        assert score > 1.0, (setting, variant, score)


@pytest.mark.parametrize("name", sorted({s[0] for s in discriminating.settings()}))
def test_the_stored_float64_indices_are_what_the_search_finds(name):
    # the search itself, for every float64 setting (all dtypes: python -m
    # toolkit.oracle.discriminating, about a minute and a half)
    from toolkit.oracle._discriminating_indices import INDICES
    for setting in discriminating.settings():
        if setting[0] == name and setting[2] == "float64":
            assert discriminating._search(*setting, ()) == INDICES[" ".join(setting)], setting
