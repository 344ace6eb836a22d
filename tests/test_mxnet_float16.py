"""float16 weights without multi_precision: MXNet 1.9.1 against the toolkit.

``tests/data/mxnet/float16.json`` (written by ``float16_gen.py`` from real MXNet 1.9.1 runs)
records, for every optimizer, what MXNet does with float16 weights and gradients when
``multi_precision=False``: AdaGrad, RMSProp, AdaDelta and Ftrl refuse (float32 state, an
``MXNetError`` at the first update); the others run in float16 arithmetic, so their results
differ from a float32 step rounded once to float16, and some of them give inf/NaN where the
float32 computation stays within float16's range (a square or a division by ``eps`` underflowing
or overflowing in float16).

The toolkit's documented behaviour (docs/known-differences.md, "float16 weights without
multi_precision"): every optimizer runs, state in float16, each step computed in float32 from
the float16 weight, state and gradient, then the weight and the state are rounded to float16
once.  These tests check that behaviour bit for bit on the recorded inputs, and that the toolkit
stays finite where MXNet's non-finite values came from float16 arithmetic.  numpy and the
toolkit only; MXNet is not needed.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import mxnet_data
from toolkit import optimizer

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "mxnet", "float16.json")
BACKENDS = ("cpu", "reference")


def _decode16(obj):
    assert obj["dtype"] == "float16"
    bits = np.array([int(b, 16) for b in obj["bits"]], dtype=np.uint16)
    return bits.view(np.float16).reshape(obj["shape"])


def _load():
    with open(DATA) as f:
        return json.load(f)


_DOC = _load()
CASES = _DOC["cases"]
RAN = [c for c in CASES if c["mxnet"]["outcome"] == "ran"]
REFUSED = [c for c in CASES if c["mxnet"]["outcome"] == "refused"]


def _ids(cases):
    return [c["id"] for c in cases]


def _differing(a, b):
    """Elements whose float16 bit patterns differ; NaN counts as equal to NaN."""
    a, b = np.asarray(a, dtype=np.float16), np.asarray(b, dtype=np.float16)
    same = (a.view(np.uint16) == b.view(np.uint16)) | (np.isnan(a) & np.isnan(b))
    return int((~same).sum())


def _ulps16(a, b):
    """Distance in float16 units in the last place (finite elements; monotone ordering)."""
    def key(x):
        u = np.asarray(x, dtype=np.float16).view(np.uint16).astype(np.int32)
        return np.where(u & 0x8000, 0x8000 - u, u)      # -0 and +0 both map to 0
    return np.abs(key(a) - key(b))


def _kwargs(case):
    kw = dict(case["kwargs"])
    assert kw["multi_precision"] is False
    return kw


def _arrays(opt, state):
    """The state's arrays in order: ``create_state`` returns None, an array, or a tuple whose
    slots are arrays or None (DCASGD's unused momentum)."""
    if state is None:
        return []
    if isinstance(state, tuple):
        return [a for a in state if a is not None]
    return [state]


def _run_toolkit(case, backend, lockstep=True):
    """The toolkit on the recorded float16 inputs. Per call returns (weight16, [state16...]) and,
    if ``lockstep``, the toolkit's own float32 step from the same float16 values, rounded to
    float16 once: ``(weight, [states])``."""
    w16 = _decode16(case["init"]).copy()
    opt16 = optimizer.create(case["optimizer"], backend=backend, **_kwargs(case))
    st16 = opt16.create_state_multi_precision(0, w16)
    opt32 = optimizer.create(case["optimizer"], backend=backend, **_kwargs(case))
    w32 = w16.astype(np.float32)
    st32 = opt32.create_state(0, w32)
    out = []
    for g in case["grads"]:
        g16 = _decode16(g)
        if lockstep:  # float32 copies of exactly the float16 values the float16 run starts from
            w32[...] = w16
            for a32, a16 in zip(_arrays(opt32, st32), _arrays(opt16, st16)):
                a32[...] = a16
        with np.errstate(all="ignore"):
            opt16.update(0, w16, g16, st16)
            if lockstep:
                opt32.update(0, w32, g16.astype(np.float32), st32)
        assert w16.dtype == np.float16
        assert all(a.dtype == np.float16 for a in _arrays(opt16, st16))
        with np.errstate(over="ignore"):
            ref = ((w32.astype(np.float16), [a.astype(np.float16) for a in _arrays(opt32, st32)])
                   if lockstep else None)
        out.append(((w16.copy(), [a.copy() for a in _arrays(opt16, st16)]), ref))
    return out


# ----------------------------------------------------------------------------------------
# the data: what MXNet 1.9.1 does
# ----------------------------------------------------------------------------------------
def _refusing():
    """The optimizers whose float16 weight without multi_precision MXNet 1.9.1 refused, as
    generate.py recorded them apart from this data (``facts.json``'s ``<name>_float16_no_mp``
    errors)."""
    errors = mxnet_data.load_facts()["errors"]["value"]
    return {key[:-len("_float16_no_mp")] for key in errors if key.endswith("_float16_no_mp")}


def test_data_covers_every_optimizer():
    """The optimizers MXNet ran through generate.py, each of them; the refusals are those of
    generate.py's own record (four: AdaGrad, RMSProp, AdaDelta, Ftrl), every variant of each."""
    names = {c["optimizer"] for c in CASES}
    assert len(mxnet_data.OPTIMIZERS) == 14 and names == set(mxnet_data.OPTIMIZERS)
    assert _DOC["provenance"]["mxnet_version"] == "1.9.1"
    refused = {c["variant"] for c in REFUSED}
    assert len(_refusing()) == 4
    assert refused == {c["variant"] for c in CASES if c["optimizer"] in _refusing()}
    assert len(refused) == 5  # RMSProp plain and centered
    # MXNet warns about float16 accumulation for every optimizer (the toolkit does not)
    assert all(any(w.startswith("UserWarning: Accumulating with float16")
                   for w in c["mxnet"]["warnings"]) for c in CASES)


@pytest.mark.parametrize("case", REFUSED, ids=_ids(REFUSED))
def test_mxnet_refusal_recorded(case):
    m = case["mxnet"]
    assert m["error"]["type"] == "mxnet.base.MXNetError"
    assert "Incompatible attr" in m["error"]["last_line"]
    assert "expected float" in m["error"]["last_line"]
    assert set(m["state_dtypes"].values()) == {"float32"}       # MXNet's state: float32
    assert m["refused_at_call"] == 1 and m["direct_call_error_same"]
    assert m["after_refusal"]["weight_unchanged"]


@pytest.mark.parametrize("case", RAN, ids=_ids(RAN))
def test_mxnet_computes_in_float16(case):
    """The recorded counts are reproduced from the recorded arrays (MXNet float16 result vs the
    MXNet float32 step rounded once), and MXNet's state is float16."""
    m = case["mxnet"]
    assert set(m["state_dtypes"].values()) <= {"float16"}
    assert m["direct_update_same"]
    for call in m["calls"]:
        ref = call["f32_rounded_once"]
        got = dict({"weight": call["weight"]}, **call["states"])
        for name, arr in got.items():
            n = _differing(_decode16(arr), _decode16(ref[name]))
            assert n == call["differ_from_f32_rounded_once"][name], name


def test_mxnet_float16_arithmetic_is_visible():
    """Summed over the uniform-input cases, every optimizer that runs differs from "float32,
    rounded once" somewhere: MXNet computes in float16."""
    per_opt = {}
    for c in RAN:
        if c["inputs"] != "uniform":
            continue
        n = sum(sum(call["differ_from_f32_rounded_once"].values()) for call in c["mxnet"]["calls"])
        per_opt[c["optimizer"]] = per_opt.get(c["optimizer"], 0) + n
    assert set(per_opt) == set(mxnet_data.OPTIMIZERS) - _refusing()
    assert all(n > 0 for n in per_opt.values()), per_opt


# ----------------------------------------------------------------------------------------
# the toolkit: float32 arithmetic, one rounding to float16 per stored value
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_toolkit_float16_is_float32_rounded_once(case, backend):
    for k, ((w, states), (w_ref, states_ref)) in enumerate(_run_toolkit(case, backend)):
        assert _differing(w, w_ref) == 0, "weight, call %d" % (k + 1)
        assert len(states) == len(states_ref)
        for j, (s, s_ref) in enumerate(zip(states, states_ref)):
            assert _differing(s, s_ref) == 0, "state %d, call %d" % (j, k + 1)


# SGLD's noise is the toolkit's own counter-based draw, not MXNet's: no elementwise comparison
RAN_DETERMINISTIC = [c for c in RAN if c["optimizer"] != "sgld"]


@pytest.mark.parametrize("case", RAN_DETERMINISTIC, ids=_ids(RAN_DETERMINISTIC))
def test_toolkit_first_call_matches_mxnet_float32_rounded_once(case):
    """On the first call both start from the same float16 values, so the toolkit's float16 result
    is MXNet's *float32* result rounded to float16 once: within one float16 ulp everywhere (the
    two float32 computations may differ by float32 rounding; measured: all weights bit-identical,
    2 of 3900 state elements 1 ulp apart), the same elements finite, and at most one weight
    element of the case not bit-identical.  Hence the toolkit differs from MXNet's float16 result
    wherever MXNet's float16 arithmetic moved it away from that value."""
    m = case["mxnet"]
    (w, states), _ = _run_toolkit(case, "cpu", lockstep=False)[0]
    ref = m["calls"][0]["f32_rounded_once"]
    names = [n for n in ref if n != "weight"]
    assert len(names) == len(states)
    for name, got in [("weight", w)] + list(zip(names, states)):
        r = _decode16(ref[name])
        fin = np.isfinite(r)
        assert (np.isfinite(got) == fin).all(), name
        assert int(_ulps16(got[fin], r[fin]).max(initial=0)) <= 1, name
    ref_w = _decode16(ref["weight"])
    assert _differing(w, ref_w) <= 1
    mx16 = _decode16(m["calls"][0]["weight"])
    recorded = m["calls"][0]["differ_from_f32_rounded_once"]["weight"]
    assert _differing(mx16, ref_w) == recorded
    assert _differing(w, mx16) >= recorded - _differing(w, ref_w)


NONFINITE_F16 = [c for c in RAN if any(c["mxnet"]["nonfinite_from_f16_arithmetic"])]
TOO_LARGE = [c for c in RAN if not all(r["fits_f16"] for r in c["mxnet"]["f32_run"])]

#: the variants where MXNet's float16 arithmetic gave inf/NaN on float16_gen.py's inputs (as
#: measured: a square or a division by eps leaving float16's range at the first call); all but
#: LBSGD's LARS variant also have a float32 value beyond float16's range
EXTREME = [  # checked against the registry by test_extreme_variants_are_recorded_and_ran
    "adam", "nadam", "ftml", "dcasgd", "lbsgd-lars"]
EXTREME_FITS_F32 = {"lbsgd-lars"}


def test_extreme_variants_are_recorded_and_ran():
    """Each is a recorded variant of a registered optimizer that MXNet ran in float16."""
    variants = {c["variant"]: c["optimizer"] for c in RAN}
    assert set(EXTREME) <= set(variants) and EXTREME_FITS_F32 <= set(EXTREME)
    assert {variants[v] for v in EXTREME} <= set(optimizer.registry())


def test_overflow_and_underflow_cases_exist():
    assert {c["variant"] for c in NONFINITE_F16} >= set(EXTREME)
    assert {c["variant"] for c in TOO_LARGE} >= set(EXTREME) - EXTREME_FITS_F32


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", NONFINITE_F16, ids=_ids(NONFINITE_F16))
def test_toolkit_finite_where_mxnet_float16_arithmetic_is_not(case, backend):
    """MXNet's float16 run has inf/NaN, yet its float32 run from the same inputs stays within
    float16's range: the toolkit's float16 run is finite at those calls."""
    runs = _run_toolkit(case, backend, lockstep=False)
    flags = case["mxnet"]["nonfinite_from_f16_arithmetic"]
    checked = 0
    for k, ((w, states), _) in enumerate(runs):
        if not all(r["fits_f16"] for r in case["mxnet"]["f32_run"][:k + 1]):
            break
        assert np.isfinite(w).all(), "weight, call %d" % (k + 1)
        assert all(np.isfinite(s).all() for s in states), "state, call %d" % (k + 1)
        checked += flags[k]
    assert checked >= 1
    mx = case["mxnet"]["calls"]
    assert any(sum(map(sum, mx[k]["nonfinite"].values())) for k in range(len(mx)) if flags[k])


def _first_call_f16_only(case):
    """Names of the arrays that MXNet's first float16 call left non-finite although MXNet's
    float32 value of that array fits in float16."""
    m = case["mxnet"]
    call, fits = m["calls"][0], m["f32_run"][0]["fits_f16_by_array"]
    return [n for n, (inf, nan) in call["nonfinite"].items() if inf + nan and fits[n]]


FIRST_CALL_F16_ONLY = [c for c in RAN if _first_call_f16_only(c)]


def test_first_call_cases_exist():
    # includes cases where some *other* array is too large for float16 (Nadam, FTML "large")
    assert {c["variant"] for c in FIRST_CALL_F16_ONLY} >= set(EXTREME)
    assert any(c in TOO_LARGE for c in FIRST_CALL_F16_ONLY)


@pytest.mark.parametrize("case", FIRST_CALL_F16_ONLY, ids=_ids(FIRST_CALL_F16_ONLY))
def test_toolkit_first_call_finite_array_by_array(case):
    """Array by array at the first call: where MXNet's float16 value is inf/NaN but its float32
    value fits in float16, the toolkit's value is finite -- also when another array of the same
    call is too large for float16 (then that one overflows in the toolkit too)."""
    (w, states), _ = _run_toolkit(case, "cpu", lockstep=False)[0]
    ref = case["mxnet"]["calls"][0]["f32_rounded_once"]
    ours = dict(zip([n for n in ref if n != "weight"], states), weight=w)
    for name in _first_call_f16_only(case):
        assert np.isfinite(ours[name]).all(), name


@pytest.mark.parametrize("case", TOO_LARGE, ids=_ids(TOO_LARGE))
def test_toolkit_overflows_too_where_the_value_exceeds_float16(case):
    """Where MXNet's *float32* run produces a weight or state beyond float16's range (e.g.
    Adam's var = 1e-3*g^2 for g ~ 6e4), storing it in float16 overflows in the toolkit as well:
    rounding once cannot make it fit."""
    runs = _run_toolkit(case, "cpu", lockstep=False)
    fits = [r["fits_f16"] for r in case["mxnet"]["f32_run"]]
    k = fits.index(False)
    (w, states), _ = runs[k]
    assert not all(np.isfinite(a).all() for a in [w] + states)


FIRST_OF_EACH_VARIANT = list({c["variant"]: c for c in reversed(CASES)}.values())


@pytest.mark.parametrize("case", FIRST_OF_EACH_VARIANT, ids=_ids(FIRST_OF_EACH_VARIANT))
def test_toolkit_issues_no_float16_warning(case):
    """MXNet warns "Accumulating with float16 ..." (recorded for every case); the toolkit, which
    does not accumulate in float16, warns about nothing."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run_toolkit(case, "cpu", lockstep=False)
    assert [str(w.message) for w in caught] == []
