"""The oracle as a product: ``toolkit.oracle.verify`` passes correct implementations written
independently here (numpy; PyTorch's own optimizers where torch is installed) and fails planted
bugs with a worst case that points at the bug; ``identify`` names each convention."""
from __future__ import annotations

import importlib.util
import inspect

import numpy as np
import pytest

from toolkit import oracle
from toolkit.optimizer import specs
from toolkit.oracle.frameworks.torch import gradient_for

HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (pip install "
                                                        "torch to check PyTorch's optimizers)")
EXAMPLES = 60


# --------------------------------------------------------------------------------------------
# implementations written here from the equations (docs/conventions.md), with planted bugs
# --------------------------------------------------------------------------------------------
def _pre(g, rescale_grad, clip_gradient, f32_clip=False):
    g = rescale_grad * g
    if clip_gradient is None:
        return g
    if f32_clip:  # MXNet's nd.clip takes float32 bounds (docs/conventions.md)
        clip_gradient = float(np.float32(clip_gradient))
    return np.clip(g, -clip_gradient, clip_gradient)


def make_adam(bug=None):
    """Adam, convention "guide": ``G = clip(rs*g, c) + wd*w``, bias-corrected moments,
    ``w -= lr*mhat/(sqrt(vhat) + eps)``."""
    def make(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon):
        w = w.copy()
        m, v, t = np.zeros_like(w), np.zeros_like(w), [0]

        def step(g):
            t[0] += 1
            g = _pre(g, rescale_grad, clip_gradient) + wd * w
            # scalars in double precision (Python floats), as MXNet and PyTorch compute them: a
            # float32 1 - beta2**t loses most of its digits when beta2 is near 1
            m[...] = beta1 * m + (1.0 - beta1) * g
            v[...] = beta2 * v + (1.0 - beta2) * g * g
            if bug == "no bias correction":
                mh, vh = m, v
            else:
                mh, vh = m / (1.0 - beta1 ** t[0]), v / (1.0 - beta2 ** t[0])
            w[...] = w - learning_rate * mh / (np.sqrt(vh) + epsilon)
            return w
        return step
    return make


def make_adagrad(bug=None):
    """AdaGrad, convention "mxnet": ``g = clip(rs*grad, c); h += g*g;
    w -= lr*(g/sqrt(h + eps) + wd*w)``."""
    def make(w, learning_rate, wd, rescale_grad, clip_gradient, eps):
        w = w.copy()
        h = np.zeros_like(w)

        def step(g):
            g = _pre(g, rescale_grad, clip_gradient, f32_clip=True)
            h[...] = h + g * g
            root = np.sqrt(h) + eps if bug == "epsilon outside the root" else np.sqrt(h + eps)
            w[...] = w - learning_rate * (g / root + wd * w)
            return w
        return step
    return make


_SHARED = {}  # a planted bug: state kept across make_step calls


def make_sgd(bug=None):
    """SGD with momentum, convention "guide": ``G = clip(rs*g, c) + wd*w; mom = mu*mom - lr*G;
    w += mom``."""
    def make(w, learning_rate, wd, rescale_grad, clip_gradient, momentum):
        w = w.copy()
        if bug == "state never reset":
            mom = _SHARED.setdefault("mom", {}).setdefault(w.shape, np.zeros_like(w))
        else:
            mom = np.zeros_like(w)

        def step(g):
            if bug == "clip after weight decay":
                G = rescale_grad * g + wd * w
                G = G if clip_gradient is None else np.clip(G, -clip_gradient, clip_gradient)
            else:
                G = _pre(g, rescale_grad, clip_gradient) + wd * w
            if bug == "wrong momentum sign":
                mom[...] = -momentum * mom - learning_rate * G
            else:
                mom[...] = momentum * mom - learning_rate * G
            w[...] = w + mom
            return w
        return step
    return make


# --------------------------------------------------------------------------------------------
# correct implementations pass, and identify names their convention
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,make,convention", [
    ("adam", make_adam(), "guide"), ("adagrad", make_adagrad(), "mxnet"),
    ("sgd", make_sgd(), "guide")])
def test_correct_numpy_implementations_pass(name, make, convention, dtype):
    report = oracle.verify(make, name, convention=convention, dtype=dtype, examples=EXAMPLES,
                           seed=3)
    assert report.passed, report.summary
    assert 0.0 <= report.max_error <= 1.0 and report.examples == EXAMPLES


def test_identify_names_the_convention_of_correct_implementations():
    r = oracle.identify(make_adam(), "adam", dtype="float64")
    assert r.convention == "guide" and "mxnet" not in r.matches, r.summary
    assert "pytorch" in r.matches and "same update as the 'guide'" in r.summary
    r = oracle.identify(make_adagrad(), "adagrad", dtype="float64")
    assert r.convention == "mxnet" and r.matches[0] == "mxnet", r.summary


# --------------------------------------------------------------------------------------------
# planted bugs fail, with a worst case that points at the bug
# --------------------------------------------------------------------------------------------
def test_missing_bias_correction_fails_at_the_first_step():
    r = oracle.verify(make_adam("no bias correction"), "adam", convention="guide",
                      examples=EXAMPLES, seed=4)
    assert not r.passed and r.max_error > 1e3, r.summary
    assert "FAILED" in r.summary and "worst case: step" in r.summary
    h = r.worst["hyperparameters"]
    # without the correction the first step is off by sqrt(1-beta2)/(1-beta1): far from 1
    assert abs(np.sqrt(1 - h["beta2"]) / (1 - h["beta1"]) - 1) > 1e-3


def test_epsilon_outside_the_root_fails_where_epsilon_matters():
    r = oracle.verify(make_adagrad("epsilon outside the root"), "adagrad", convention="mxnet",
                      examples=EXAMPLES, seed=5)
    assert not r.passed, r.summary
    h = r.worst["hyperparameters"]
    g = np.concatenate([np.ravel(x) for x in r.worst["grads"][:r.worst["step"]]])
    # the placements differ where eps is not negligible beside g*g (of the steps run)
    assert h["eps"] > 1e-6 * np.min(np.abs(g[g != 0]) * h["rescale_grad"]) ** 2 or \
        h["clip_gradient"] is not None


def test_clip_after_weight_decay_fails_with_clipping_and_decay_on():
    r = oracle.verify(make_sgd("clip after weight decay"), "sgd", convention="guide",
                      examples=EXAMPLES, seed=6)
    assert not r.passed, r.summary
    h = r.worst["hyperparameters"]
    assert h["clip_gradient"] is not None and h["wd"] > 0, r.summary


#: momentum where a momentum bug shows at every step after the first (drawn momenta are often 0
#: or tiny: with them a seed could miss the bug, seeds 1 and 6 did)
MOMENTUM_ON = {"momentum": 0.9}


def test_wrong_momentum_sign_fails_from_the_second_step():
    r = oracle.verify(make_sgd("wrong momentum sign"), "sgd", convention="guide",
                      examples=EXAMPLES, seed=7, fixed=MOMENTUM_ON)
    assert not r.passed, r.summary
    assert r.worst["step"] >= 2, r.summary


def test_state_never_reset_fails():
    _SHARED.clear()
    r = oracle.verify(make_sgd("state never reset"), "sgd", convention="guide",
                      examples=EXAMPLES, seed=8, fixed=MOMENTUM_ON)
    assert not r.passed, r.summary


def test_identify_reports_the_closest_convention_for_a_bug():
    r = oracle.identify(make_adam("no bias correction"), "adam", dtype="float64")
    assert r.convention is None and r.matches == [] and r.closest in ("mxnet", "guide")
    assert "closest is" in r.summary and r.worst is not None


# --------------------------------------------------------------------------------------------
# a user's failure is a failed report, never a crash
# --------------------------------------------------------------------------------------------
def test_an_exception_or_a_wrong_shape_is_a_failed_report():
    def raises(w, **h):
        def step(g):
            raise RuntimeError("my kernel broke")
        return step

    r = oracle.verify(raises, "adam", examples=5, seed=1)
    assert not r.passed and "my kernel broke" in r.failure and "RuntimeError" in r.summary
    r = oracle.verify(lambda w, **h: (lambda g: np.zeros(w.size + 1)), "sgd", examples=5, seed=1)
    assert not r.passed and "shape" in r.failure
    r = oracle.verify(lambda w, **h: None, "sgd", examples=5, seed=1)
    assert not r.passed and "not a callable" in r.failure
    r = oracle.identify(raises, "adam", cases=4, screen=40)
    assert r.convention is None and "my kernel broke" in r.failure


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="unknown optimizer"):
        oracle.verify(make_adam(), "nosuchopt")
    with pytest.raises(ValueError, match="noise"):
        oracle.verify(make_adam(), "sgld")
    with pytest.raises(ValueError, match="fixed names unknown"):
        oracle.verify(make_adam(), "adam", fixed={"momentum": 0.9})
    with pytest.raises(ValueError, match="dtype"):
        oracle.verify(make_adam(), "adam", dtype="int32")
    with pytest.raises(ValueError, match="convention"):
        oracle.verify(make_adam(), "nadam", convention="guide")
    with pytest.raises(ValueError, match="examples"):
        oracle.verify(make_adam(), "adam", examples=0)


def test_assert_matches_oracle_shows_the_worst_case():
    oracle.assert_matches_oracle(make_adam(), "adam", convention="guide", examples=10, seed=1)
    with pytest.raises(AssertionError, match="worst case: step"):
        oracle.assert_matches_oracle(make_adam("no bias correction"), "adam",
                                     convention="guide", examples=10, seed=1)


def test_reports_serialise_to_json():
    import json
    r = oracle.verify(make_adam("no bias correction"), "adam", convention="guide", examples=5,
                      seed=1)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["passed"] is False and d["worst"]["step"] >= 1 and "summary" in d
    r = oracle.identify(make_adam(), "adam", dtype="float64", cases=6, screen=60)
    assert json.loads(json.dumps(r.to_dict()))["convention"] == "guide"


# --------------------------------------------------------------------------------------------
# PyTorch's own optimizers
# --------------------------------------------------------------------------------------------
def torch_make(cls, to_torch, dtype):
    """``make_step`` around ``torch.optim.<cls>``: ``to_torch(own hyperparameters)`` gives its
    keyword arguments (MXNet's names mapped to torch's); rescale and clipping are applied to
    the gradient first, as the oracle's "pytorch" convention reads them."""
    import torch
    tdtype = getattr(torch, dtype)

    def make(w, learning_rate, wd, rescale_grad, clip_gradient, **own):
        p = torch.tensor(w, dtype=tdtype, requires_grad=True)
        klass = getattr(torch.optim, cls)
        # Rprop takes no weight_decay (its spec fixes wd at 0)
        decay = {"weight_decay": wd} if "weight_decay" in inspect.signature(klass).parameters \
            else {}
        opt = klass([p], lr=learning_rate, **decay, **to_torch(own))

        def step(g):
            g = _pre(np.asarray(g, np.float64), rescale_grad, clip_gradient)
            # SparseAdam takes sparse gradients only: every row present (gradient_for)
            p.grad = gradient_for(cls, torch.tensor(g, dtype=tdtype))
            with torch.no_grad():
                opt.step()
            return p.detach()  # a tensor: the oracle converts it
        return step
    return make


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_adam_passes_as_pytorch_and_is_named_guide(dtype):
    # torch writes the first moment as a lerp (m.lerp_(g, 1 - beta1)): the usual domain passes,
    # and the lerp's discriminating case (beta1 near 0, run first at every seed) fails the full
    # one, explained as the guide's equations written as the lerp; identify, which runs the
    # same cases, names the guide as the closest with that variant
    adam = torch_make("Adam", lambda h: {"betas": (h["beta1"], h["beta2"]),
                                         "eps": h["epsilon"]}, dtype)
    r = oracle.verify(adam, "adam", convention="pytorch", dtype=dtype, examples=40, seed=9)
    assert r.domains["usual"].passed and not r.domains["full"].passed, r.summary
    assert (r.explanation.convention, r.explanation.variant) == ("guide", "lerp"), r.summary
    ident = oracle.identify(adam, "adam", dtype=dtype, cases=12, screen=200)
    assert ident.convention is None and ident.closest == "guide", ident.summary
    assert ident.explanation.variant == "lerp", ident.summary


TORCH_CASES = {  # checked against the registry by test_torch_cases_are_the_pytorch_optimizers
    # registry name: (torch class, MXNet's names -> torch's keywords, pinned hyperparameters)
    "adagrad": ("Adagrad", lambda h: {"eps": h["eps"]}, {}),
    # plain RMSProp here; centered below (torch's variance can round negative)
    "rmsprop": ("RMSprop", lambda h: {"alpha": h["gamma1"], "eps": h["epsilon"],
                                      "centered": h["centered"],
                                      "momentum": h["gamma2"] if h["centered"] else 0.0},
                {"clip_weights": None, "centered": False}),
    "adadelta": ("Adadelta", lambda h: {"rho": h["rho"], "eps": h["epsilon"]}, {}),
    "adamax": ("Adamax", lambda h: {"betas": (h["beta1"], h["beta2"]), "eps": 1e-8}, {}),
    "sgd": ("SGD", lambda h: {"momentum": h["momentum"]}, {}),
    "radam": ("RAdam", lambda h: {"betas": (h["beta1"], h["beta2"]), "eps": h["epsilon"],
                                  "decoupled_weight_decay": h["decoupled_weight_decay"]}, {}),
    "asgd": ("ASGD", lambda h: {"lambd": h["lambd"], "alpha": h["alpha"], "t0": h["t0"]}, {}),
    "rprop": ("Rprop", lambda h: {"etas": (h["etaminus"], h["etaplus"]),
                                  "step_sizes": (h["step_size_min"], h["step_size_max"])}, {}),
    "sparseadam": ("SparseAdam", lambda h: {"betas": (h["beta1"], h["beta2"]),
                                            "eps": h["epsilon"]}, {}),
    "adafactor": ("Adafactor", lambda h: {"beta2_decay": h["beta2_decay"],
                                          "eps": (h["epsilon1"], h["epsilon2"]),
                                          "d": h["clip_threshold"]}, {}),
    "muon": ("Muon", lambda h: {"momentum": h["momentum"], "nesterov": h["nesterov"],
                                "ns_coefficients": tuple(h["ns_coefficients"]),
                                "eps": h["epsilon"], "ns_steps": h["ns_steps"],
                                "adjust_lr_fn": h["adjust_lr"]}, {}),
}
#: optimizers whose update is PyTorch's but that oracle.verify does not run against torch.optim
#: here (a known gap): their reference's pytorch branch is run against torch.optim in
#: tests/test_reference_pytorch.py
NOT_VERIFIED_HERE = {"nag": "torch.optim.SGD(nesterov=True)", "adamw": "torch.optim.AdamW"}


def test_torch_cases_are_the_pytorch_optimizers():
    """TORCH_CASES and NOT_VERIFIED_HERE hold between them exactly the optimizers whose spec
    says their update is PyTorch's, each with the torch.optim class its spec names."""
    pytorch = {n: s for n, s in specs(oracle=True).items() if s.pytorch == "pytorch"}
    assert not TORCH_CASES.keys() & NOT_VERIFIED_HERE.keys()
    assert TORCH_CASES.keys() | NOT_VERIFIED_HERE.keys() == pytorch.keys()
    assert all(cls == pytorch[name].torch for name, (cls, _, _) in TORCH_CASES.items())


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(TORCH_CASES))
def test_torch_optimizers_pass_as_pytorch(name, dtype):
    cls, to_torch, fixed = TORCH_CASES[name]
    make = torch_make(cls, to_torch, dtype)
    r = oracle.verify(make, name, convention="pytorch", fixed=fixed, dtype=dtype, examples=40,
                      seed=10)
    if (name, dtype) in LERP_CAUGHT:
        assert r.domains["usual"].passed and r.explanation.variant == "lerp", r.summary
        return
    if (name, dtype) in SCALARS_F32_CAUGHT:
        assert not r.passed and r.explanation.variant == "scalars_f32", r.summary
        return
    if name in BFLOAT16_CAUGHT:
        assert not r.passed and r.explanation.variant == "bfloat16", r.summary
        return
    assert r.passed, r.summary


#: torch.optim.Muon runs its Newton-Schulz iteration in bfloat16 whatever the parameter's dtype:
#: far beyond both dtypes' bounds, named (docs/conformance.md, finding 16)
BFLOAT16_CAUGHT = {"muon"}


#: torch.optim.ASGD holds eta and mu in float32 (tensors of its default dtype) whatever the
#: parameter's: a float64 step is off the equations by float32's rounding of eta, named
SCALARS_F32_CAUGHT = {("asgd", "float64")}


#: torch.optim.Adamax writes its first moment as a lerp: in float64 the lerp's discriminating
#: case (beta1 = 2.4e-5 after a large gradient that beta2 = 0 forgets) fails the full domain
LERP_CAUGHT = {("adamax", "float64")}


@needs_torch
@pytest.mark.parametrize("name", ["adagrad", "rmsprop", "adamax"])
def test_identify_says_this_is_pytorchs_optimizer(name):
    cls, to_torch, fixed = TORCH_CASES[name]
    dtype = "float32" if (name, "float64") in LERP_CAUGHT else "float64"
    r = oracle.identify(torch_make(cls, to_torch, dtype), name, fixed=fixed,
                        dtype=dtype, cases=12, screen=200)
    assert r.convention == "pytorch" and r.matches == ["pytorch"], r.summary
    assert f"this is PyTorch's {name}" in r.summary
    if dtype != "float64":  # in float64 the lerp's case: the closest, with the variant
        r = oracle.identify(torch_make(cls, to_torch, "float64"), name, fixed=fixed,
                            dtype="float64", cases=12, screen=200)
        assert r.convention is None and r.closest == "pytorch", r.summary
        assert r.explanation.variant == "lerp" and "PyTorch" not in r.summary, r.summary


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_centered_rmsprop_passes_but_its_variance_can_cancel_to_nan(dtype):
    """A finding: torch's centered RMSprop takes ``sqrt(E[g^2] - E[g]^2)`` without a floor, so
    when the two nearly cancel (alpha, our gamma1, near 0: both averages are the last gradient)
    rounding makes it negative and the weight NaN; the equation's variance is >= 0, and the
    oracle (which floors it at 0) flags the NaN. With an ordinary gamma1 torch passes."""
    cls, to_torch, _ = TORCH_CASES["rmsprop"]
    make = torch_make(cls, to_torch, dtype)
    ok = oracle.verify(make, "rmsprop", convention="pytorch", dtype=dtype, examples=40, seed=10,
                       fixed={"clip_weights": None, "centered": True, "gamma1": 0.9})
    assert ok.passed, ok.summary
    found = oracle.verify(make, "rmsprop", convention="pytorch", dtype=dtype, examples=40,
                          seed=10, fixed={"clip_weights": None, "centered": True,
                                          "gamma1": 1e-12})
    assert not found.passed and np.isnan(found.worst["got"]), found.summary
    assert np.isfinite(found.worst["expected"])


# --------------------------------------------------------------------------------------------
# GroupAdaGrad: the oracle hands a matrix to make_step (one accumulator per row)
# --------------------------------------------------------------------------------------------
def make_groupadagrad(bug=None, f32_clip=False):
    """GroupAdaGrad: ``h += mean(g^2 over the row)``, ``w -= lr*g/sqrt(h + eps)``; planted bug
    "eps_outside": ``sqrt(h) + eps``; "element": one accumulator per element (plain AdaGrad)."""
    def make(w, learning_rate, wd, rescale_grad, clip_gradient, eps):
        assert w.ndim == 2 and wd == 0.0
        w = w.copy()
        h = np.zeros((w.shape[0], 1)) if bug != "element" else np.zeros_like(w)

        def step(g):
            g = _pre(g, rescale_grad, clip_gradient, f32_clip)
            h[...] += g * g if bug == "element" else np.mean(g * g, axis=1, keepdims=True)
            den = np.sqrt(h) + eps if bug == "eps_outside" else np.sqrt(h + eps)
            w[...] = w - learning_rate * g / den
            return w
        return step
    return make


def test_groupadagrad_gets_matrices_and_its_readings_are_told_apart():
    good = oracle.verify(make_groupadagrad(), "groupadagrad", convention="guide",
                         dtype="float64", examples=EXAMPLES, seed=3)
    assert good.passed, good.summary
    assert good.worst["hyperparameters"]["wd"] == 0.0          # wd is pinned to 0
    for bug in ("eps_outside", "element"):
        bad = oracle.verify(make_groupadagrad(bug), "groupadagrad", convention="guide",
                            dtype="float64", examples=EXAMPLES, seed=3,
                            fixed={"eps": 0.5, "clip_gradient": None})
        assert not bad.passed and "weight0: [" in bad.summary, (bug, bad.summary)
        assert np.ndim(bad.worst["weight0"]) == 2
    ident = oracle.identify(make_groupadagrad(f32_clip=True), "groupadagrad", dtype="float64",
                            cases=12, screen=200)
    assert ident.convention == "mxnet" and ident.matches == ["mxnet"], ident.summary
    with pytest.raises(ValueError, match="fixed names unknown"):
        oracle.verify(make_groupadagrad(), "groupadagrad", fixed={"momentum": 0.9})


# --------------------------------------------------------------------------------------------
# LAMB: a per-tensor trust ratio (the norm of the update direction, not of the gradient)
# --------------------------------------------------------------------------------------------
def make_lamb(bug=None):
    """LAMB, convention "guide" (the paper's Algorithm 2): Adam's bias-corrected direction
    ``u = mhat/(sqrt(vhat) + eps) + wd*w``, ``w -= lr*phi(|w|)/|u|*u`` with ``phi`` the clamp
    to the bounds (ratio 1 when a norm is 0). Planted bugs: "gradient norm" (the trust ratio
    divides by |g|, as LARS does), "decay in the moments" (wd*w added to the gradient)."""
    def make(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon,
             lower_bound, upper_bound, bias_correction):
        w = w.copy()
        m, v, t = np.zeros_like(w), np.zeros_like(w), [0]

        def step(grad):
            t[0] += 1
            g = _pre(grad, rescale_grad, clip_gradient)
            if bug == "decay in the moments":
                g = g + wd * w
            m[...] = beta1 * m + (1.0 - beta1) * g
            v[...] = beta2 * v + (1.0 - beta2) * g * g
            mh, vh = (m / (1.0 - beta1 ** t[0]), v / (1.0 - beta2 ** t[0])) \
                if bias_correction else (m, v)
            u = mh / (np.sqrt(vh) + epsilon)
            if bug != "decay in the moments":
                u = u + wd * w
            phi = np.linalg.norm(w)
            if lower_bound:
                phi = max(phi, lower_bound)
            if upper_bound:
                phi = min(phi, upper_bound)
            den = np.linalg.norm(g) if bug == "gradient norm" else np.linalg.norm(u)
            ratio = phi / den if (phi > 0 and den > 0) else 1.0
            w[...] = w - learning_rate * ratio * u
            return w
        return step
    return make


def test_lamb_verify_passes_the_paper_and_fails_planted_bugs():
    good = oracle.verify(make_lamb(), "lamb", convention="guide", dtype="float64",
                         examples=EXAMPLES, seed=5)
    assert good.passed, good.summary
    for bug, fixed in (("gradient norm", {}), ("decay in the moments", {"wd": 0.1})):
        bad = oracle.verify(make_lamb(bug), "lamb", convention="guide", dtype="float64",
                            examples=EXAMPLES, seed=5, fixed=fixed)
        assert not bad.passed, (bug, bad.summary)


def test_a_seed_draws_the_same_cases_whatever_modules_are_loaded(tmp_path, monkeypatch):
    """Hypothesis draws, now and then, numbers written in the source of locally loaded modules;
    verify shuts that pool off, so a seed gives the same cases after an import as before."""
    first = oracle.verify(make_sgd("wrong momentum sign"), "sgd", convention="guide",
                          examples=20, seed=3)
    module = tmp_path / "mxopt_constants_probe.py"
    module.write_text("A = [0.000123456789, 7.25e-07, 3.0517578125e-05, 0.987654321, 12345]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import mxopt_constants_probe  # noqa: F401  (a local module full of constants)
    again = oracle.verify(make_sgd("wrong momentum sign"), "sgd", convention="guide",
                          examples=20, seed=3)
    assert (again.max_error, again.worst) == (first.max_error, first.worst)


# --------------------------------------------------------------------------------------------
# what the oracle refuses (issue 19 item 8): fixed values the optimizer refuses, and results
# that are not real numbers
# --------------------------------------------------------------------------------------------
def _all_nan(w, **h):
    return lambda g: np.full_like(w, np.nan)


@pytest.mark.parametrize("run", [
    lambda make, name, **kw: oracle.verify(make, name, examples=5, **kw),
    lambda make, name, **kw: oracle.identify(make, name, cases=4, screen=40, **kw)],
    ids=["verify", "identify"])
def test_fixed_is_checked_by_the_optimizers_own_constructor(run):
    # a NaN learning rate made an all-NaN implementation pass (the reference was all NaN too)
    with pytest.raises(ValueError, match=r"fixed\['learning_rate'\] = nan .*finite"):
        run(_all_nan, "sgd", fixed={"learning_rate": float("nan")})
    with pytest.raises(ValueError, match=r"fixed\['beta1'\] = 1.0 .*\[0, 1\)"):
        run(make_adam(), "adam", fixed={"beta1": 1.0})
    with pytest.raises(ValueError, match=r"fixed\['wd'\] = -0.5"):
        run(make_adam(), "adam", fixed={"wd": -0.5, "beta1": 0.5})
    with pytest.raises(TypeError, match=r"fixed\['epsilon'\] = 'small'"):
        run(make_adam(), "adam", fixed={"epsilon": "small"})
    # values accepted alone but refused together name both
    with pytest.raises(ValueError, match="lower_bound.*upper_bound.*together|each value alone"):
        run(make_lamb(), "lamb", fixed={"lower_bound": 5.0, "upper_bound": 1.0})
    with pytest.raises(TypeError, match="fixed must be a dict"):
        run(make_adam(), "adam", fixed=[("wd", 0.0)])


def test_a_fixed_value_excludes_the_drawn_values_its_constructor_refuses():
    """``upper_bound`` pinned at the bottom of ``lower_bound``'s range: every drawn lower bound
    but None (and 1e-3 itself) would exceed it; the oracle draws only cases LAMB accepts."""
    seen = []

    def checked(w, **h):
        seen.append((h["lower_bound"], h["upper_bound"]))
        if h["lower_bound"] is not None and h["lower_bound"] > h["upper_bound"]:
            raise AssertionError(f"drawn lower_bound {h['lower_bound']} > upper_bound")
        return make_lamb()(w, **h)

    r = oracle.verify(checked, "lamb", convention="guide", dtype="float64", examples=20,
                      fixed={"upper_bound": 1e-3})
    assert r.passed and r.examples == 20, r.summary
    i = oracle.identify(checked, "lamb", dtype="float64", fixed={"upper_bound": 1e-3},
                        cases=6, screen=60)
    assert i.failure is None, i.summary
    assert len(seen) >= 20


class _Unreadable:
    def __array__(self, *args, **kwargs):
        raise RuntimeError("no array here")


@pytest.mark.parametrize("result,says", [
    (lambda w: w + 1e6j, "complex values"),
    (lambda w: w.astype(np.complex128), "complex values"),     # even with no imaginary part
    (lambda w: [str(x) for x in w], "dtype <U"),
    (lambda w: None, "NoneType of dtype object"),
    (lambda w: w.astype(np.int64), "dtype int64"),
    (lambda w: _Unreadable(), "numpy cannot read"),
], ids=["complex", "complex-real", "strings", "none", "ints", "unreadable"])
def test_a_complex_or_non_numeric_result_is_a_failed_example(result, says):
    make = lambda w, **h: (lambda g: result(w))  # noqa: E731
    r = oracle.verify(make, "sgd", examples=5)
    assert not r.passed and r.max_error == np.inf and says in r.failure, r.summary
    assert "your implementation failed: step 1 returned" in r.summary and says in r.summary
    assert r.worst["step"] == 1 and "failing case: step 1" in r.summary
    i = oracle.identify(make, "sgd", cases=4, screen=40)
    assert i.convention is None and i.matches == [] and says in i.failure, i.summary


# --------------------------------------------------------------------------------------------
# reproducible verdicts (issue 22 item 1): a fixed default seed, recorded with the versions
# --------------------------------------------------------------------------------------------
def test_two_runs_of_verify_give_the_same_report_in_any_process(tmp_path):
    """No seed asked for: the same cases, hence the same report, every run, here and in fresh
    processes (through the command line, whose default is the library's)."""
    import json
    import os
    import subprocess
    import sys
    module = tmp_path / "mxopt_seed_probe.py"
    module.write_text(
        "import numpy as np\n"
        "def make(w, learning_rate, wd, rescale_grad, clip_gradient, momentum):\n"
        "    w, mom = w.copy(), np.zeros_like(w)\n"
        "    def step(g):\n"
        "        g = rescale_grad * g\n"
        "        g = g if clip_gradient is None else np.clip(g, -clip_gradient, clip_gradient)\n"
        "        mom[...] = -momentum * mom - learning_rate * (g + wd * w)\n"  # the sign bug
        "        w[...] = w + mom\n"
        "        return w\n"
        "    return step\n")
    here = [oracle.verify(make_sgd("wrong momentum sign"), "sgd", convention="guide",
                          examples=30).to_dict() for _ in range(2)]
    assert here[0] == here[1] and here[0]["seed"] == oracle.DEFAULT_SEED
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(oracle.__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-m", "toolkit", "verify",
                            f"{module}:make", "sgd", "--convention", "guide", "--examples", "30",
                            "--json"], capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 1, p.stderr
        runs.append(json.loads(p.stdout))
    assert runs[0] == runs[1]
    assert runs[0]["seed"] == oracle.DEFAULT_SEED and not runs[0]["passed"]
    # the same cases as in this process: the same worst case and error
    assert (runs[0]["worst"], runs[0]["max_error"]) == (here[0]["worst"], here[0]["max_error"])


def test_the_report_records_the_seed_and_the_versions():
    import hypothesis

    import toolkit
    r = oracle.verify(make_sgd(), "sgd", convention="guide", examples=5)
    assert r.seed == oracle.DEFAULT_SEED == 0
    assert {k: r.versions[k] for k in ("toolkit", "hypothesis", "numpy")} == {
        "toolkit": toolkit.__version__, "hypothesis": hypothesis.__version__,
        "numpy": np.__version__}
    last = r.summary.splitlines()[-1]
    assert "seed 0" in last and f"hypothesis {hypothesis.__version__}" in last
    assert r.to_dict()["seed"] == 0 and r.to_dict()["versions"] == r.versions
    # another seed, or a random one, only when asked for; a random seed is recorded and repeats
    fresh = oracle.verify(make_sgd("wrong momentum sign"), "sgd", convention="guide",
                          examples=10, seed="random")
    assert isinstance(fresh.seed, int) and f"seed {fresh.seed}" in fresh.summary
    again = oracle.verify(make_sgd("wrong momentum sign"), "sgd", convention="guide",
                          examples=10, seed=fresh.seed)
    assert again.to_dict() == fresh.to_dict()
    ident = oracle.identify(make_adam(), "adam", dtype="float64", cases=6, screen=60)
    assert ident.seed == 0 and ident.versions == r.versions and "seed 0" in ident.summary
    assert oracle.identify(make_adam(), "adam", dtype="float64", cases=6, screen=60,
                           seed="random").seed is not None
    for bad in (None, -1, 1.5, "0", True):
        with pytest.raises(ValueError, match="seed must be"):
            oracle.verify(make_sgd(), "sgd", seed=bad)
        with pytest.raises(ValueError, match="seed must be"):
            oracle.identify(make_sgd(), "sgd", seed=bad)


@needs_torch
def test_the_report_records_the_frameworks_version():
    import torch
    adam = torch_make("Adam", lambda h: {"betas": (h["beta1"], h["beta2"]),
                                         "eps": h["epsilon"]}, "float32")
    r = oracle.verify(adam, "adam", convention="pytorch", examples=5)
    assert r.versions["torch"] == str(torch.__version__) and "torch " in r.summary


# --------------------------------------------------------------------------------------------
# a failure under one convention that passes another says so (issue 22 item 2, first part)
# --------------------------------------------------------------------------------------------
#: a regime where MXNet's Adam and the guide's differ at every step: float64 (MXNet rounds the
#: hyperparameters to float32) and an epsilon that matters (MXNet adds it to the uncorrected root)
GUIDE_APART = dict(learning_rate=0.1, beta2=0.999, epsilon=0.01)


def test_a_correct_guide_adam_under_the_default_convention_is_told_the_flag():
    r = oracle.verify(make_adam(), "adam", dtype="float64", examples=20, fixed=GUIDE_APART)
    assert not r.passed and r.convention == "mxnet" and r.passes_under == "guide", r.summary
    assert "passes the 'guide' convention" in r.summary
    assert "convention='guide'" in r.summary and "--convention guide" in r.summary
    assert r.to_dict()["passes_under"] == "guide"
    # a bug passes no convention: no hint
    bug = oracle.verify(make_adam("no bias correction"), "adam", dtype="float64", examples=20,
                        fixed=GUIDE_APART)
    assert not bug.passed and bug.passes_under is None and "--convention" not in bug.summary
    # and the other way round: MXNet's Adam checked against the guide is told "mxnet"
    ok = oracle.verify(make_adam(), "adam", convention="guide", dtype="float64", examples=20,
                       fixed=GUIDE_APART)
    assert ok.passed and ok.passes_under is None, ok.summary


def test_identify_errors_cover_every_convention_it_matches():
    r = oracle.identify(make_adam(), "adam", dtype="float64")
    assert "pytorch" in r.matches and set(r.matches) <= set(r.errors), r.errors
    assert r.errors["pytorch"] == r.errors["guide"] and r.pytorch == "guide"
    assert r.to_dict()["errors"]["pytorch"] == r.to_dict()["errors"]["guide"]
    for make, name in ((make_adagrad(), "adagrad"), (make_sgd(), "sgd")):
        r = oracle.identify(make, name, dtype="float64", cases=8, screen=100)
        assert set(r.matches) <= set(r.errors), (name, r.matches, r.errors)
    def raises(w, **h):
        raise RuntimeError("no")
    r = oracle.identify(raises, "adam", cases=4, screen=40)
    assert set(r.errors) == {"mxnet", "guide", "pytorch"}
