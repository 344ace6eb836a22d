"""Explained failures and the usual and full domains of ``toolkit.oracle.verify``.

Each known variant of the equations (``toolkit.oracle.variants.VARIANTS``) is planted in a small
numpy Adam written here from the equations (docs/conventions.md), and the report must name it; a
correct implementation has no explanation, another algorithm is called one, a guide Adam checked
under MXNet's convention is told the convention. The lerp Adam (torch's form, in numpy; and
torch.optim.Adam itself where torch is installed) passes the usual domain, fails the full one,
and the report locates the failure at small beta1. Every case is aimed at the regime it tests
(fixed hyperparameters where a variant changes the result by many bounds, ``ranges`` that draw
beta1 and beta2 where the lerp's rounding shows), so no test leans on one seed's draws.
"""
from __future__ import annotations

import importlib.util
import json
import textwrap

import numpy as np
import pytest

from toolkit import oracle
from toolkit.optimizer import spec_of, specs
from toolkit.oracle import discriminating
from toolkit.oracle.space import Decades, Interval
from toolkit.oracle.variants import VARIANTS, check_declared, variants_of

HAVE_TORCH = importlib.util.find_spec("torch") is not None
EXAMPLES = 30
#: the optimizer the planted variants are written for: every variant is declared by its spec
#: (test_every_variant_is_declared_by_the_optimizer_it_is_planted_in)
PLANTED_IN = "adam"


# --------------------------------------------------------------------------------------------
# a numpy Adam, in either convention, with one variant planted
# --------------------------------------------------------------------------------------------
def _f32(x):
    return None if x is None else float(np.float32(x))


def make_adam(convention, variant=None):
    """Adam as docs/conventions.md writes it. ``convention="guide"``: ``G = clip(rs*g, c) +
    wd*w``, bias-corrected moments, ``w -= lr*mhat/(sqrt(vhat) + eps)``, everything in double
    precision. ``convention="mxnet"``: ``lr_t = lr*sqrt(1-beta2^t)/(1-beta1^t)`` in double, the
    kernel's hyperparameters rounded to float32, ``g = clip(rs*g + wd*w, c)`` (clipping on when
    ``c`` is truthy), ``w -= lr_t*m/(sqrt(v) + eps)``. ``variant`` changes one line."""
    def make(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon):
        w = w.copy()
        m, v, t = np.zeros_like(w), np.zeros_like(w), [0]
        dtype = w.dtype.type
        lr, b1, b2, eps, rs, c = learning_rate, beta1, beta2, epsilon, rescale_grad, clip_gradient
        rounded = (convention == "mxnet") != (variant == "hyper_f64") or variant == "hyper_f32"

        # the betas of the bias corrections: MXNet forms lr_t from the unrounded ones
        cb1, cb2 = (_f32(beta1), _f32(beta2)) if rounded and convention == "guide" else (beta1,
                                                                                           beta2)

        def corrections(n):
            if variant == "no_bias_correction":
                return 1.0, 1.0
            if variant == "constants_in_dtype":  # in the weight's precision
                return dtype(1) - dtype(cb1) ** n, dtype(1) - dtype(cb2) ** n
            return 1.0 - cb1 ** n, 1.0 - cb2 ** n

        def step(g):
            t[0] += 1
            c1, c2 = corrections(t[0])
            if convention == "mxnet":
                lr_t = lr * np.sqrt(c2) / c1
                e = eps * np.sqrt(1.0 - beta2 ** t[0]) if variant == "eps_corrected" else eps
                if rounded:
                    lr_t, e = _f32(lr_t), _f32(e)
                h = [_f32(x) if rounded else x for x in (wd, rs, c, b1, b2)]
                wd_, rs_, c_, b1_, b2_ = h
                if variant == "wd_after_clip":
                    G = rs_ * g
                    G = (np.clip(G, -c_, c_) if c_ else G) + wd_ * w
                else:
                    G = rs_ * g + wd_ * w
                    G = np.clip(G, -c_, c_) if c_ else G
            else:
                lr_, wd_, rs_, c_, b1_, b2_, e = (
                    [_f32(x) for x in (lr, wd, rs, c, b1, b2, eps)] if rounded
                    else (lr, wd, rs, c, b1, b2, eps))
                if variant == "wd_before_clip":
                    G = rs_ * g + wd_ * w
                    G = G if c_ is None else np.clip(G, -c_, c_)
                else:
                    G = rs_ * g
                    G = (G if c_ is None else np.clip(G, -c_, c_)) + wd_ * w
            if variant == "lerp":
                m[...] = m + (1.0 - b1_) * (G - m)
            else:
                m[...] = b1_ * m + (1.0 - b1_) * G
            v[...] = b2_ * v + (1.0 - b2_) * G * G
            if convention == "mxnet":
                root = np.sqrt(v + e) if variant == "eps_inside_root" else np.sqrt(v) + e
                w[...] = w - lr_t * m / root
            elif variant == "eps_inside_root":
                w[...] = w - lr_ * (m / c1) / np.sqrt(v / c2 + e)
            elif variant == "eps_uncorrected":
                w[...] = w - lr_ * (np.sqrt(c2) / c1) * m / (np.sqrt(v) + e)
            else:
                w[...] = w - lr_ * (m / c1) / (np.sqrt(v / c2) + e)
            return w
        return step
    return make


#: where each variant changes the result by many bounds: the convention it is planted in, the
#: dtype (float64 shows a float32 rounding of a hyperparameter), pinned hyperparameters and the
#: ranges the full domain draws from. Keyed by variant name: a variant Adam declares without a row
#: fails test_every_variant_is_declared_by_the_optimizer_it_is_planted_in.
NO_CLIP = dict(wd=0.0, rescale_grad=1.0, clip_gradient=None)
PLANTED = {
    "hyper_f32": ("guide", "float64", dict(learning_rate=0.1, epsilon=1e-3), None),
    "hyper_f64": ("mxnet", "float64", dict(learning_rate=0.1, epsilon=1e-3), None),
    "constants_in_dtype": ("guide", "float32", dict(learning_rate=0.1, beta2=0.9999, **NO_CLIP),
                           None),
    "lerp": ("guide", "float64", dict(learning_rate=1.0, **NO_CLIP),
             {"beta1": Decades(-16, -10), "beta2": Decades(-40, -10)}),  # LERP_RANGES
    "eps_inside_root": ("guide", "float64", dict(learning_rate=0.1, epsilon=1e-2), None),
    "eps_uncorrected": ("guide", "float64", dict(learning_rate=0.1, beta2=0.999, epsilon=1e-2),
                        None),
    "eps_corrected": ("mxnet", "float64", dict(learning_rate=0.1, beta2=0.999, epsilon=1e-2),
                      None),
    "wd_before_clip": ("guide", "float64", dict(learning_rate=0.1, wd=0.05, clip_gradient=0.5),
                       None),
    "wd_after_clip": ("mxnet", "float64", dict(learning_rate=0.1, wd=0.05, clip_gradient=0.5),
                      None),
    "no_bias_correction": ("guide", "float64", dict(learning_rate=0.1, beta1=0.9, beta2=0.999),
                           None),
}


def _verify(make, convention, dtype, fixed, ranges=None, examples=EXAMPLES, **kw):
    return oracle.verify(make, PLANTED_IN, convention=convention, dtype=dtype, fixed=fixed,
                         ranges=ranges, examples=examples, **kw)


# --------------------------------------------------------------------------------------------
# the registry and the specs
# --------------------------------------------------------------------------------------------
def test_every_declared_variant_is_known_and_written_by_its_reference():
    for name, spec in specs().items():
        check_declared(spec)
        ref = spec.reference_module()
        for v in variants_of(spec):
            if v.in_reference:
                assert v.name in ref.FORMS, (name, v.name)
                assert any(v.applies(ref, c) for c in ref.CONVENTIONS), (name, v.name)


def test_an_unknown_variant_in_a_spec_is_refused_by_name():
    from toolkit.optimizers.spec import Spec
    bad = Spec(name="mine", variants=("lerp", "nope"))
    with pytest.raises(ValueError, match="'nope'.*known: hyper_f32"):
        check_declared(bad)
    with pytest.raises(TypeError, match="variants must be a tuple"):
        Spec(name="mine", variants="lerp")
    with pytest.raises(ValueError, match="usual names"):
        Spec(name="mine", space={"beta1": Interval(0, 1)}, usual={"beta9": Interval(0, 1)})


def test_a_reference_form_is_checked_against_its_convention():
    import reference.adam as ref
    w = np.ones(2)
    state = ref.init_state(w)
    with pytest.raises(ValueError, match="form must be None or one of"):
        ref.step(w, w, state, t=1, lr=0.1, convention="guide", form="nope")
    with pytest.raises(ValueError, match="changes the mxnet convention"):
        ref.step(w, w, state, t=1, lr=0.1, convention="guide", form="wd_after_clip")
    # the default form is the convention's own equations, bit for bit
    for conv in ("mxnet", "guide"):
        a, _ = ref.step(w, w, state, t=1, lr=0.1, convention=conv)
        b, _ = ref.step(w, w, state, t=1, lr=0.1, convention=conv, form=None)
        assert np.array_equal(a, b)


def test_every_variant_is_declared_by_the_optimizer_it_is_planted_in():
    # Adam declares every variant but NAdam's, Lion's, ADOPT's, RAdam's, AdaBelief's,
    # Rprop's, ASGD's, Schedule-Free AdamW's, Adafactor's and Muon's own
    # (planted in tests/test_oracle_variants_more.py)
    assert set(spec_of(PLANTED_IN).variants) == set(PLANTED)
    assert set(VARIANTS) - set(PLANTED) == {"schedule_product_f32", "momentum_first",
                                            "wd_coupled", "var_first", "decay_first_step",
                                            "residual_old_mean", "eps_outside_s",
                                            "backtracking", "no_forget", "unclamped_kept",
                                            "lag", "scalars_f32", "no_decay", "warmup_lag",
                                            "warmup_f32", "unfactored", "rms_after_decay",
                                            "no_update_clipping", "no_relative_step",
                                            "bfloat16"}


# --------------------------------------------------------------------------------------------
# explanations
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", list(PLANTED))
def test_every_variant_is_named_when_planted(variant):
    convention, dtype, fixed, ranges = PLANTED[variant]
    make = make_adam(convention, variant)
    r = _verify(make, convention, dtype, fixed, ranges)
    assert not r.passed, r.summary
    e = r.explanation
    assert e is not None and e.kind == "variant", r.summary
    assert (e.variant, e.convention) == (variant, convention), r.summary
    assert e.max_error <= 1.0 and f"variant {variant}:" in e.text
    assert f"explanation (variant): " in r.summary and f"variant {variant}:" in r.summary
    assert r.to_dict()["explanation"] == {"kind": "variant", "variant": variant,
                                          "convention": convention, "text": e.text,
                                          "max_error": e.max_error}
    # and the same implementation without the variant passes: the variant is what failed
    assert _verify(make_adam(convention), convention, dtype, fixed, ranges).passed


def test_rounding_variants_and_written_variants_read_differently():
    rounding = {"hyper_f32", "hyper_f64", "constants_in_dtype", "lerp", "schedule_product_f32",
                "scalars_f32", "bfloat16"}
    assert {n for n, v in VARIANTS.items() if v.rounding} == rounding


def test_a_correct_implementation_has_no_explanation():
    for convention in ("guide", "mxnet"):
        r = _verify(make_adam(convention), convention, "float64", None)
        assert r.passed and r.explanation is None and r.region is None, r.summary
        assert r.domains["usual"].passed and r.domains["full"].passed
        assert r.to_dict()["explanation"] is None and "explanation" not in r.summary


def make_sgd_called_adam(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2,
                         epsilon):
    """Another algorithm under Adam's name: plain SGD."""
    w = w.copy()

    def step(g):
        w[...] = w - learning_rate * rescale_grad * g
        return w
    return step


def test_another_algorithm_is_called_one():
    r = _verify(make_sgd_called_adam, "guide", "float64", dict(learning_rate=0.1))
    e = r.explanation
    assert not r.passed and e.kind == "algorithm", r.summary
    assert e.variant is None and e.convention is None and e.max_error == r.max_error
    assert "another algorithm" in e.text and "no known variant" in e.text


def test_a_guide_adam_under_the_mxnet_convention_is_told_the_convention():
    fixed = dict(learning_rate=0.1, beta2=0.999, epsilon=0.01)  # the two conventions apart
    r = _verify(make_adam("guide"), "mxnet", "float64", fixed)
    e = r.explanation
    assert e.kind == "convention" and e.convention == "guide" and e.variant is None, r.summary
    assert e.max_error <= 1.0 and "convention='guide'" in e.text
    assert r.passes_under == "guide"


def test_a_variant_of_another_convention_names_both():
    # the guide's Adam without bias correction, checked under MXNet's: MXNet's hyperparameters
    # are float32, so no variant of MXNet's equations passes; the guide's without correction does
    fixed = PLANTED["no_bias_correction"][2]
    r = _verify(make_adam("guide", "no_bias_correction"), "mxnet", "float64", fixed)
    e = r.explanation
    assert (e.kind, e.variant, e.convention) == ("variant", "no_bias_correction", "guide")
    assert "convention='guide'" in e.text and r.passes_under is None, r.summary


def _reference_as_implementation(ref, convention, round_hyper):
    """An implementation made of the reference's own float64 step (plain numpy arrays), for
    the variants every optimizer declares: MXNet's equations with the hyperparameters kept in
    double (``round_hyper=False``), or another convention's with them rounded to float32."""
    def make(w, **hyper):
        if round_hyper:
            hyper = {k: _f32(v) if isinstance(v, float) else v for k, v in hyper.items()}
        own = {k: v for k, v in hyper.items() if k in ref.HYPER and k != "learning_rate"}
        box = {"w": w.copy(), "state": ref.init_state(w, **own), "t": 0}

        def step(g):
            box["t"] += 1
            box["w"], box["state"] = ref.step(
                box["w"], g, box["state"], t=box["t"], lr=hyper["learning_rate"],
                wd=hyper["wd"], rescale_grad=hyper["rescale_grad"],
                clip_gradient=hyper["clip_gradient"], convention=convention,
                **({"hyper_f32": False} if convention == "mxnet" else {}), **own)
            return box["w"]
        return step
    return make


def _resolved(name):
    """The conventions optimizer ``name``'s reference runs under (PyTorch's resolved: NAdam's
    "pytorch" is MXNet's equations)."""
    implemented, pytorch = oracle.conventions_of(name)
    return [c for c in implemented if c != "pytorch"] + (["pytorch"] if pytorch == "pytorch"
                                                         else [])


@pytest.mark.parametrize("name", [n for n, s in specs(oracle=True).items() if not s.noise])
def test_every_declared_variant_applies_under_some_convention(name):
    # a declared variant that applies under none of the optimizer's conventions is never tried:
    # its declaration would promise an explanation the oracle cannot give
    spec = spec_of(name)
    ref = spec.reference_module()
    never = [v.name for v in variants_of(spec)
             if not any(v.applies(ref, c) for c in _resolved(name))]
    assert never == [], (name, never, _resolved(name))


@pytest.mark.parametrize("name", [n for n, s in specs(oracle=True).items() if not s.noise])
def test_every_optimizer_is_told_a_precision_of_its_hyperparameters(name):
    spec = spec_of(name)
    ref = spec.reference_module()
    # hyper_f64 for MXNet's convention, hyper_f32 for any other one the optimizer has
    assert ("hyper_f64" in spec.variants) == ("mxnet" in ref.CONVENTIONS)
    assert ("hyper_f32" in spec.variants) == bool(set(_resolved(name)) - {"mxnet"})
    for convention, variant in (("mxnet", "hyper_f64"), ("guide", "hyper_f32")):
        if convention not in ref.CONVENTIONS:
            continue
        make = _reference_as_implementation(ref, convention, variant == "hyper_f32")
        r = oracle.verify(make, name, convention=convention, dtype="float64", examples=20)
        e = r.explanation
        assert not r.passed and e is not None, r.summary
        # where the variant is another convention's equations (SGD: MXNet's in double are the
        # guide's, the guide's in float32 MXNet's), that convention is named
        assert (e.kind, e.variant, e.convention) == ("variant", variant, convention) or (
            e.kind == "convention" and e.convention != convention
            and r.passes_under == e.convention), r.summary


# --------------------------------------------------------------------------------------------
# usual and full domains
# --------------------------------------------------------------------------------------------
#: the lerp's rounding shows where beta1 is small (1 - (1 - beta1) is not beta1: below 1e-10 in
#: float64, 1e-1 in float32, whose 1 - beta1 is coarser) and beta2 forgets a large earlier
#: gradient (so a later, small step carries the error): the full domain is drawn there; the
#: usual domain keeps Adam's usual ranges
LERP_FIXED = dict(learning_rate=1.0, **NO_CLIP)
LERP_RANGES = {"float64": {"beta1": Decades(-16, -10), "beta2": Decades(-40, -10)},
               "float32": {"beta1": Decades(-8, -1), "beta2": Decades(-40, -10)}}


def _assert_fails_for_small_beta1_only(r, variant="lerp"):
    usual, full = r.domains["usual"], r.domains["full"]
    assert usual.passed and not full.passed and not r.passed, r.summary
    assert (full.max_error, full.examples, full.worst) == (r.max_error, r.examples, r.worst)
    assert r.region is not None and r.region.startswith("only for beta1 < "), r.summary
    edge = float(r.region.split()[4])
    assert r.worst["hyperparameters"]["beta1"] < edge < 0.5  # between the failure and usual
    assert r.explanation.kind == "variant" and r.explanation.variant == variant, r.summary
    assert "usual domain: PASSED" in r.summary and "full domain: FAILED" in r.summary
    assert "it fails outside the usual domain only: only for beta1 < " in r.summary
    d = r.to_dict()
    assert d["domains"]["usual"]["passed"] is True and d["domains"]["full"]["passed"] is False
    assert d["region"] == r.region


@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_lerp_adam_fails_the_full_domain_only_for_small_beta1(dtype, seed):
    r = _verify(make_adam("guide", "lerp"), "guide", dtype, LERP_FIXED, LERP_RANGES[dtype],
                seed=seed)
    _assert_fails_for_small_beta1_only(r)
    assert r.domains["usual"].examples == EXAMPLES // 2


def test_a_pin_outside_the_usual_range_is_named_and_not_taken_for_the_region():
    # beta1 pinned at 1e-10 is in every case of both domains: the usual verdict names the pin
    # (it is not the plain usual domain), and the region is sought among the drawn
    # hyperparameters (here beta2, aimed at the tiny values that make the lerp's error show),
    # not the pinned beta1 the passing usual domain holds too
    fixed = dict(LERP_FIXED, beta1=1e-10)
    r = _verify(make_adam("guide", "lerp"), "guide", "float32", fixed,
                {"beta2": Decades(-40, -10)})
    usual, full = r.domains["usual"], r.domains["full"]
    assert usual.passed and not full.passed and not r.passed, r.summary
    assert usual.pinned == "beta1 pinned at 1e-10, outside its usual range [0.5, 0.99]"
    assert usual.worst["hyperparameters"]["beta1"] == 1e-10
    assert "usual domain: PASSED" not in r.summary, r.summary
    assert ("usual domain (beta1 pinned at 1e-10, outside its usual range [0.5, 0.99]): "
            "PASSED") in r.summary
    assert r.region is not None and r.region.startswith("only for beta2 < "), r.summary
    assert r.worst["hyperparameters"]["beta2"] < float(r.region.split()[4]) <= 0.9
    assert r.to_dict()["domains"]["usual"]["pinned"] == usual.pinned
    # a pin inside the usual range is the plain usual domain
    ok = _verify(make_adam("guide"), "guide", "float32", dict(LERP_FIXED, beta1=0.9))
    assert ok.passed and ok.domains["usual"].pinned is None, ok.summary
    assert "usual domain: PASSED" in ok.summary


def test_ranges_aim_the_full_domain_and_what_has_no_usual_range():
    """``ranges`` aims the full domain; in the usual domain a hyperparameter with a usual range
    keeps it, one without (its usual range is its whole space) is aimed too."""
    from toolkit.oracle.space import Just, hyper_space
    aimed = {"beta1": Just(1e-12), "wd": Just(0.5)}  # one with a usual range, one without
    full = hyper_space("adam", domain="full", ranges=aimed)
    usual = hyper_space("adam", domain="usual", ranges=aimed)
    assert full["beta1"] == Just(1e-12) and full["wd"] == Just(0.5)
    assert usual["beta1"] == spec_of("adam").usual["beta1"]
    assert usual["wd"] == Just(0.5)


def test_a_failure_ranges_aim_at_a_hyperparameter_without_a_usual_range_fails_both_domains():
    """Found by review: with ``ranges`` aiming wd (no usual range) at where a wrong Adam fails,
    the usual domain drew wd from its whole space and passed, and the region blamed the weights
    and gradients. The usual domain is aimed there too now, and says so: both fail, no region."""
    good = make_adam("guide")

    def make(w, learning_rate, wd, **kw):
        return good(w, learning_rate=learning_rate, wd=3 * wd if 0.05 < wd < 0.06 else wd, **kw)
    r = oracle.verify(make, "adam", convention="guide", dtype="float64", examples=30,
                      usual_examples=30, fixed=dict(clip_gradient=None),
                      ranges={"wd": Interval(0.051, 0.059)})
    assert not r.domains["full"].passed and not r.domains["usual"].passed, r.summary
    assert r.region is None, r.summary
    assert "wd aimed at [0.051, 0.059] by ranges" in r.domains["usual"].pinned
    assert "wd aimed at [0.051, 0.059] by ranges" in r.summary


def test_a_region_above_the_usual_range_says_where_it_passes():
    """A failure only above the usual range reads "only for epsilon > e (... passes up to e)"
    (it said "passes from e on", the wrong way round)."""
    good = make_adam("guide")

    def make(w, learning_rate, epsilon, **kw):
        return good(w, learning_rate=learning_rate,
                    epsilon=epsilon * 4 if epsilon > 5e-3 else epsilon, **kw)
    r = oracle.verify(make, "adam", convention="guide", dtype="float64", examples=60,
                      usual_examples=30, fixed=dict(clip_gradient=None),
                      ranges={"epsilon": Decades(-2.2, -2)})
    assert r.domains["usual"].passed and not r.domains["full"].passed, r.summary
    assert r.region is not None and r.region.startswith("only for epsilon > "), r.region
    assert "passes up to" in r.region and "passes from" not in r.region, r.region


def test_a_numpy_scalar_pinned_inside_its_usual_range_is_not_called_outside():
    """Found by review: ``np.float32(0.9)`` was not a number to the range checks, so a beta1
    pinned at it was reported "outside its usual range [0.5, 0.99]"."""
    from toolkit.oracle.space import neighbours, nearest, pinned_outside_usual
    usual = spec_of("adam").usual["beta1"]
    assert pinned_outside_usual("adam", {"beta1": np.float32(0.9)}) == {}
    assert pinned_outside_usual("adam", {"beta1": np.float64(1e-10)}) == {"beta1": 1e-10}
    assert nearest(usual, np.float32(0.1)) == 0.5 and neighbours(usual, np.int64(2)) == (0.99,
                                                                                          None)


def _torch_make(klass, dtype):
    """``make_step`` of torch's Adam or AdamW (``klass``) in ``dtype``: MXNet's AdamW ``eta``
    scales the learning rate, as torch's ``lr`` (Adam has no ``eta``: 1)."""
    import torch
    tdt = getattr(torch, dtype)

    def make(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon, eta=1.0):
        p = torch.nn.Parameter(torch.tensor(w, dtype=tdt))
        lr = learning_rate if klass is torch.optim.Adam else eta * learning_rate
        opt = klass([p], lr=lr, betas=(beta1, beta2), eps=epsilon, weight_decay=wd)

        def step(g):
            p.grad = torch.tensor(g * rescale_grad, dtype=tdt)
            opt.step()
            return p.detach()
        return step
    return make


@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed (pip install torch to check "
                                           "torch.optim.Adam's usual and full domains)")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_adam_fails_the_full_domain_only_for_small_beta1(dtype):
    import torch
    r = oracle.verify(_torch_make(torch.optim.Adam, dtype), "adam", convention="pytorch", dtype=dtype, examples=EXAMPLES,
                      fixed=LERP_FIXED, ranges=LERP_RANGES[dtype])
    _assert_fails_for_small_beta1_only(r)
    assert r.explanation.convention == "guide"  # PyTorch's Adam is the guide's


def make_adamw(lerp):
    """torch.optim.AdamW's algorithm box in numpy (``gamma = eta*lr``): ``w *= 1 - gamma*wd``,
    then the bias-corrected Adam step; the first moment as a lerp when ``lerp``."""
    def make(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon, eta):
        w, m, v, t = w.copy(), np.zeros_like(w), np.zeros_like(w), [0]
        gamma = eta * learning_rate

        def step(g):
            t[0] += 1
            g = rescale_grad * g
            g = g if clip_gradient is None else np.clip(g, -clip_gradient, clip_gradient)
            w[...] = w * (1.0 - gamma * wd)
            m[...] = m + (1.0 - beta1) * (g - m) if lerp else beta1 * m + (1.0 - beta1) * g
            v[...] = beta2 * v + (1.0 - beta2) * g * g
            w[...] = w - gamma * (m / (1.0 - beta1 ** t[0])) / (
                np.sqrt(v) / np.sqrt(1.0 - beta2 ** t[0]) + epsilon)
            return w
        return step
    return make


ADAMW_FIXED = dict(eta=1.0, **LERP_FIXED)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_lerp_adamw_fails_the_full_domain_only_for_small_beta1(dtype):
    r = oracle.verify(make_adamw(lerp=True), "adamw", convention="pytorch", dtype=dtype,
                      examples=EXAMPLES, fixed=ADAMW_FIXED, ranges=LERP_RANGES[dtype])
    _assert_fails_for_small_beta1_only(r)
    assert r.explanation.convention == "pytorch"
    assert oracle.verify(make_adamw(lerp=False), "adamw", convention="pytorch", dtype=dtype,
                         examples=EXAMPLES, fixed=ADAMW_FIXED,
                         ranges=LERP_RANGES[dtype]).passed


@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed (pip install torch to check "
                                           "torch.optim.AdamW's usual and full domains)")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_adamw_fails_the_full_domain_only_for_small_beta1(dtype):
    import torch
    r = oracle.verify(_torch_make(torch.optim.AdamW, dtype), "adamw", convention="pytorch", dtype=dtype, examples=EXAMPLES,
                      fixed=ADAMW_FIXED, ranges=LERP_RANGES[dtype])
    _assert_fails_for_small_beta1_only(r)
    assert r.explanation.convention == "pytorch"


def test_an_optimizer_without_usual_ranges_has_one_domain():
    # FTRL declares no usual ranges; its own reference step (float64, the guide's equations) as
    # the implementation passes
    import reference.ftrl as ref
    assert not spec_of("ftrl").usual
    make = _reference_as_implementation(ref, "guide", round_hyper=False)
    r = oracle.verify(make, "ftrl", convention="guide", dtype="float64", examples=10,
                      fixed=dict(clip_gradient=None))
    assert r.passed and r.domains["usual"] == r.domains["full"], r.summary
    assert r.domains["full"].examples == 10
    assert "usual domain: the full one (no usual ranges are declared)" in r.summary
    assert r.to_dict()["domains"]["usual"] == r.to_dict()["domains"]["full"]


def test_the_usual_domain_draws_the_usual_ranges():
    seen = []

    def make(w, **h):
        seen.append(h)
        return make_adam("guide")(w, **h)
    r = _verify(make, "guide", "float64", None, usual_examples=12)
    assert r.domains["usual"].examples == 12 and r.domains["full"].examples == EXAMPLES
    # each domain runs its variants' discriminating cases first (drawn from that domain)
    first = len(discriminating.cases("adam", "guide", "float64", "full"))
    usual, full = seen[first + EXAMPLES:], seen[:first + EXAMPLES]
    assert len(usual) == len(discriminating.cases("adam", "guide", "float64", "usual")) + 12
    assert all(0.5 <= h["beta1"] <= 0.99 and 0.9 <= h["beta2"] <= 0.9999 and
               1e-8 <= h["epsilon"] <= 1e-3 for h in usual)
    assert any(h["beta1"] < 0.5 or h["beta2"] < 0.9 for h in full)


def test_bad_ranges_and_usual_examples_are_clear_errors():
    make = make_adam("guide")
    with pytest.raises(ValueError, match="ranges names unknown hyperparameter"):
        oracle.verify(make, "adam", ranges={"beta9": Interval(0, 1)})
    with pytest.raises(TypeError, match=r"ranges\['beta1'\] must be a Space"):
        oracle.verify(make, "adam", ranges={"beta1": (0.0, 0.5)})
    with pytest.raises(ValueError, match="both fixed and given ranges"):
        oracle.verify(make, "adam", fixed={"beta1": 0.9}, ranges={"beta1": Interval(0, 1)})
    with pytest.raises(ValueError, match="usual_examples must be an int"):
        oracle.verify(make, "adam", usual_examples=0)


# --------------------------------------------------------------------------------------------
# the same report every run; the command line
# --------------------------------------------------------------------------------------------
def test_two_runs_give_identical_reports_explanation_and_domains_included():
    ranges = LERP_RANGES["float64"]
    a = _verify(make_adam("guide", "lerp"), "guide", "float64", LERP_FIXED, ranges)
    b = _verify(make_adam("guide", "lerp"), "guide", "float64", LERP_FIXED, ranges)
    assert a.explanation is not None and a.region is not None
    assert a.to_dict() == b.to_dict()
    assert (a.explanation, a.domains, a.region) == (b.explanation, b.domains, b.region)


LERP_FILE = textwrap.dedent('''
    import numpy as np

    def make_adam(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon):
        w = w.copy(); m = np.zeros_like(w); v = np.zeros_like(w); t = [0]
        def step(g):
            t[0] += 1
            m[...] = m + (1.0 - beta1) * (g - m)
            v[...] = beta2 * v + (1.0 - beta2) * g * g
            w[...] = w - learning_rate * (m / (1.0 - beta1 ** t[0])) / (
                np.sqrt(v / (1.0 - beta2 ** t[0])) + epsilon)
            return w
        return step
''')


def test_mxopt_verify_prints_the_explanation_and_both_verdicts(tmp_path, capsys):
    from toolkit.__main__ import _main
    path = tmp_path / "lerp_adam.py"
    path.write_text(LERP_FILE)
    argv = ["verify", f"{path}:make_adam", "adam", "--convention", "guide", "--dtype",
            "float64", "--examples", "30", "--fixed", "learning_rate=1.0", "--fixed", "wd=0",
            "--fixed", "rescale_grad=1", "--fixed", "clip_gradient=null", "--fixed",
            "beta1=0", "--fixed", "beta2=1e-30"]
    assert _main(argv) == 1
    out = capsys.readouterr().out
    # the usual domain holds the pinned betas, outside their usual ranges: it says so
    assert ("usual domain (beta1 pinned at 0, outside its usual range [0.5, 0.99]; beta2 pinned "
            "at 1e-30, outside its usual range [0.9, 0.9999]): FAILED") in out, out
    assert "full domain: FAILED" in out
    assert "explanation (variant): the same equations, rounded differently (variant lerp:" in out
    assert _main(argv + ["--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["explanation"]["variant"] == "lerp" and set(d["domains"]) == {"usual", "full"}
