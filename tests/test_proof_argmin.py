"""The FTRL and FTML closed forms (reference.ftrl, reference.ftml) are the argmins of the
objectives of guide:233 and guide:250, read as ``reference.argmin`` derives them, solved
numerically by scipy from the raw gradient history.

Tolerances. The closed form and the solver evaluate the same minimiser with different
operations, each with a rounding error of a few times ``eps*S/A`` per coordinate, where ``S`` is
the sum of the magnitudes of the terms that make up the linear coefficient ``z_i`` (with the
cancellation inside each ``sigma_j``) and ``A`` the curvature (``(beta + sqrt(n_i))/lr + lamda2``
for FTRL, ``d_i`` for FTML): ``argmin.ftrl_error_scale`` / ``ftml_error_scale``. Each sum of
``i`` terms adds at most about ``i`` roundings, so the per-step check is
``|closed - argmin| <= 4*(i + 4)*eps*S/A``: a wrong reading of the guide (a missing gradient
term, an undiscounted proximal term, beta centred elsewhere) is off by O(1) of the step, many
orders of magnitude above it. A near tie of FTRL's threshold (``| |z| - lamda1 |`` within the same
rounding scale) may put the two on different sides of it; the tolerance then covers the
difference automatically, since the nonzero side is itself within ``eps*S/A`` of zero.
"""
from __future__ import annotations

import numpy as np
from hypothesis import example, given, note
from hypothesis import strategies as st

from reference import argmin, ftml, ftrl

EPS = float(np.finfo(np.float64).eps)


def decades(lo, hi):
    return st.floats(lo, hi).map(lambda e: float(10.0 ** e))


@st.composite
def arrays(draw, shape, lo, hi, zeros=True):
    n = int(np.prod(shape))
    exps = np.array(draw(st.lists(st.floats(lo, hi), min_size=n, max_size=n)))
    signs = np.array(draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=n, max_size=n)))
    x = signs * 10.0 ** exps
    if zeros:
        mask = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        x[mask & (np.arange(n) % 3 == 0)] = 0.0
    return x.reshape(shape)


@st.composite
def histories(draw, steps=(3, 12)):
    n = draw(st.integers(1, 4))
    T = draw(st.integers(*steps))
    w0 = draw(arrays((n,), -3, 2))
    grads = draw(arrays((T, n), -6, 3))
    common = {"wd": draw(st.one_of(st.just(0.0), decades(-5, -1))),
              "rescale_grad": draw(st.one_of(st.just(1.0), decades(-2, 1))),
              "clip_gradient": draw(st.one_of(st.none(), st.just(0.0), decades(-3, 2)))}
    return w0, grads, common


def closed_form_trajectory(mod, w0, grads, hyper, lrs, *, convention, common, t0=0):
    """The reference's weights w_1 (= w0), w_2, ..., w_{T+1}."""
    w, state = w0, mod.init_state(w0, **hyper)
    ws = [w0]
    for k, g in enumerate(grads):
        w, state = mod.step(w, g, state, t=t0 + k + 1, lr=float(lrs[k]), convention=convention,
                            hyper_f32=False, **common, **hyper)
        ws.append(w)
    return np.array(ws)


# ------------------------------------------------------------------------------------------------
# FTRL
# ------------------------------------------------------------------------------------------------

def _ftrl_check(w0, grads, lr, lamda1, beta, common, convention):
    T = grads.shape[0]
    hyper = {"lamda1": lamda1, "beta": beta}
    ws = closed_form_trajectory(ftrl, w0, grads, hyper, [lr] * T, convention=convention,
                                common=common)
    sol, G, W = argmin.ftrl_argmin_trajectory(w0, grads, lr=lr, lamda1=lamda1, beta=beta,
                                              convention=convention, weights=ws[:-1], **common)
    lamda2 = common["wd"] if convention == "mxnet" else 0.0
    zeros_seen = 0
    worst = 0.0
    for i in range(1, T + 1):
        ref, arg = ws[i], sol[i - 1]
        scale = argmin.ftrl_error_scale(G[:i], W[:i], lr=lr, lamda1=lamda1, beta=beta,
                                        lamda2=lamda2)
        tol = 4 * (i + 4) * EPS * scale
        err = np.abs(ref - arg)
        worst = max(worst, float(np.max(err / np.where(tol > 0, tol, 1.0))))
        assert np.all(err <= tol), (i, ref, arg, tol)
        # exact zeros: where the subdifferential at 0 contains 0 away from a near tie, both the
        # closed form and the argmin are exactly 0, and nowhere else
        sig, roots = argmin.ftrl_sigmas(G[:i], lr)
        a = np.sum(G[:i] - sig * W[:i], axis=0)
        S = np.sum(np.abs(G[:i]) + (roots[1:] + roots[:-1]) / lr * np.abs(W[:i]), axis=0)
        clear = np.abs(np.abs(a) - lamda1) > 4 * (i + 4) * EPS * (S + lamda1)
        inside = clear & (np.abs(a) < lamda1)
        assert np.all(ref[inside] == 0.0) and np.all(arg[inside] == 0.0)
        outside = clear & (np.abs(a) > lamda1)
        assert np.all(ref[outside] != 0.0) and np.all(arg[outside] != 0.0)
        zeros_seen += int(np.sum(inside))
    return zeros_seen, worst


@given(h=histories(), lr=decades(-4, 0), lamda1=st.one_of(st.just(0.0), decades(-4, 1)),
       beta=st.one_of(st.just(0.0), decades(-2, 1)), convention=st.sampled_from(["mxnet", "guide"]))
@example(h=(np.array([0.0, 1.0, -0.5]),
            np.array([[1.0, -0.125, 3.0], [0.5, 0.0, -1e-6], [-2.0, 1e3, 0.25], [1e-6, 1.0, 0.0]]),
            {"wd": 0.0, "rescale_grad": 1.0, "clip_gradient": None}),
         lr=0.5, lamda1=0.25, beta=1.0, convention="mxnet")
@example(h=(np.array([2.0, -3.0]), np.array([[1e-6, 2e2], [-1e-5, 3e2], [1e3, -1.0]]),
            {"wd": 0.1, "rescale_grad": 0.5, "clip_gradient": 50.0}),
         lr=1e-3, lamda1=10.0, beta=0.01, convention="guide")
def test_ftrl_closed_form_is_the_argmin(h, lr, lamda1, beta, convention):
    w0, grads, common = h
    zeros, worst = _ftrl_check(w0, grads, lr, lamda1, beta, common, convention)
    note(f"exact zeros checked: {zeros}; worst |closed - argmin|/tol = {worst:.3g}")


def test_ftrl_beta_zero_without_gradient_is_zero_not_nan():
    """beta = 0, wd = 0 and an all-zero gradient history: the objective is lamda1*|w| (or 0), the
    minimiser 0. MXNet's masked product gives 0/0*0 = NaN there; the reference selects 0."""
    w0 = np.array([1.5, -2.0, 0.0])
    grads = np.array([[0.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    for convention in ("mxnet", "guide"):
        for lamda1 in (0.0, 0.5):
            common = {"wd": 0.0, "rescale_grad": 1.0, "clip_gradient": None}
            ws = closed_form_trajectory(ftrl, w0, grads, {"lamda1": lamda1, "beta": 0.0},
                                        [0.1, 0.1], convention=convention, common=common)
            assert np.all(np.isfinite(ws))
            assert np.array_equal(ws[1], [0.0, 0.0, 0.0])
            _ftrl_check(w0, grads, 0.1, lamda1, 0.0, common, convention)


def test_ftrl_exact_zeros_are_exercised():
    """A deterministic family with many coordinates inside the lamda1 band (so the zero branch
    and its exactness are really tested), both conventions, wd on and off."""
    rng = np.random.default_rng(0)
    total = 0
    for convention in ("mxnet", "guide"):
        for wd in (0.0, 0.05):
            w0 = rng.standard_normal(12) * 0.1
            grads = rng.standard_normal((8, 12)) * np.logspace(-3, 1, 12)
            common = {"wd": wd, "rescale_grad": 1.0, "clip_gradient": None}
            z, _ = _ftrl_check(w0, grads, 0.1, 0.5, 1.0, common, convention)
            total += z
    assert total > 50


def test_ftrl_free_running_argmin_trajectory():
    """The argmin run on its own weights (no input from the closed form at all) follows the
    closed-form trajectory."""
    rng = np.random.default_rng(1)
    for convention, wd in (("mxnet", 0.0), ("mxnet", 0.1), ("guide", 0.0), ("guide", 0.1)):
        w0 = rng.standard_normal(6) * np.logspace(-2, 1, 6)
        grads = rng.standard_normal((15, 6)) * np.logspace(-3, 2, 6)
        common = {"wd": wd, "rescale_grad": 0.5, "clip_gradient": 30.0}
        ws = closed_form_trajectory(ftrl, w0, grads, {"lamda1": 0.05, "beta": 1.0}, [0.2] * 15,
                                    convention=convention, common=common)
        sol, G, W = argmin.ftrl_argmin_trajectory(w0, grads, lr=0.2, lamda1=0.05, beta=1.0,
                                                  convention=convention, **common)
        np.testing.assert_allclose(sol, ws[1:], rtol=1e-12, atol=1e-14)


def test_ftrl_guide_literal_z_update_is_not_the_argmin():
    """guide:239 as printed (z += (sqrt(eta + g^2) - sqrt(eta))*w/lr) does not minimise the
    objective; the corrected update does (docs/conventions.md, FTRL)."""
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal(8)
    grads = rng.standard_normal((5, 8)) * 3
    lr, l1, beta = 0.1, 0.01, 1.0
    w, z, n = w0.copy(), np.zeros(8), np.zeros(8)
    lit = []
    for g in grads:
        z = z + (np.sqrt(n + g * g) - np.sqrt(n)) * w / lr
        n = n + g * g
        w = (np.abs(z) > l1) * (-lr / (beta + np.sqrt(n)) * (z - l1 * np.sign(z)))
        lit.append(w)
    sol, _, _ = argmin.ftrl_argmin_trajectory(w0, grads, lr=lr, lamda1=l1, beta=beta,
                                              convention="guide", weights=[w0] + lit[:-1])
    assert np.max(np.abs(np.array(lit) - sol)) > 0.1


def test_ftrl_beta_term_is_centred_at_the_origin():
    """The derivation's choice: McMahan's beta enters as beta/(2*lr)*||w||^2 (sigma_0 = beta/lr
    at w_0 = 0). Centring it at the initial weight instead (sigma_1 = (beta + sqrt(n_1))/lr at
    w_1) is a different objective: its minimiser differs whenever w_1 != 0, and coincides when
    w_1 = 0."""
    rng = np.random.default_rng(3)
    lr, l1, beta = 0.1, 0.01, 2.0
    for w_init, should_differ in ((rng.standard_normal(8), True), (np.zeros(8), False)):
        grads = rng.standard_normal((4, 8))
        ws = closed_form_trajectory(ftrl, w_init, grads, {"lamda1": l1, "beta": beta},
                                    [lr] * 4, convention="mxnet",
                                    common={"wd": 0.0, "rescale_grad": 1.0,
                                            "clip_gradient": None})
        G, W = grads, ws[:-1]
        sig, roots = argmin.ftrl_sigmas(G, lr)
        a = np.sum(G - sig * W, axis=0) - beta / lr * w_init     # the alternative's z
        A = (beta + roots[-1]) / lr
        alt = (np.abs(a) > l1) * (-(a - l1 * np.sign(a)) / A)
        gap = np.max(np.abs(alt - ws[-1]))
        assert (gap > 1e-3) == should_differ, gap


def test_ftrl_derivative_free_cross_check():
    """Powell (values only) agrees with the brentq argmin to about 1e-8 on small cases."""
    rng = np.random.default_rng(4)
    for convention, wd in (("mxnet", 0.0), ("mxnet", 0.2), ("guide", 0.2)):
        w0 = rng.standard_normal(3)
        grads = rng.standard_normal((4, 3)) * 2
        common = {"wd": wd, "rescale_grad": 1.0, "clip_gradient": None}
        ws = closed_form_trajectory(ftrl, w0, grads, {"lamda1": 0.3, "beta": 1.0}, [0.5] * 4,
                                    convention=convention, common=common)
        lamda2 = wd if convention == "mxnet" else 0.0
        for i in range(1, 5):
            G = np.array([argmin.convention_gradient("ftrl", grads[j], ws[j],
                                                     convention=convention, **common)[0]
                          for j in range(i)])
            W = ws[:i]
            exact = argmin.ftrl_argmin(G, W, lr=0.5, lamda1=0.3, beta=1.0, lamda2=lamda2)
            df = argmin.ftrl_argmin_derivative_free(G, W, lr=0.5, lamda1=0.3, beta=1.0,
                                                    lamda2=lamda2)
            np.testing.assert_allclose(df, exact, rtol=0, atol=1e-8 * (1 + np.max(np.abs(W))))
            np.testing.assert_allclose(exact, ws[i], rtol=1e-13, atol=1e-15)


# ------------------------------------------------------------------------------------------------
# FTML
# ------------------------------------------------------------------------------------------------

def _ftml_check(w0, grads, lrs, hyper, common, convention, t0):
    T = grads.shape[0]
    ws = closed_form_trajectory(ftml, w0, grads, hyper, lrs, convention=convention,
                                common=common, t0=t0)
    sol, G, W = argmin.ftml_argmin_trajectory(w0, grads, lrs=lrs, t0=t0,
                                              convention=convention, weights=ws[:-1],
                                              **hyper, **common)
    worst = 0.0
    for i in range(1, T + 1):
        scale = argmin.ftml_error_scale(G[:i], W[:i], lrs=lrs[:i], ts=np.arange(t0 + 1, t0 + i + 1),
                                        **hyper)
        tol = 4 * (i + 4) * EPS * scale
        err = np.abs(ws[i] - sol[i - 1])
        worst = max(worst, float(np.max(err / np.where(tol > 0, tol, 1.0))))
        assert np.all(err <= tol), (i, ws[i], sol[i - 1], tol)
    return worst


@given(h=histories(), lr=decades(-4, 0), vary_lr=st.booleans(),
       beta1=st.one_of(st.just(0.0), st.floats(0.05, 0.95)),
       beta2=st.one_of(st.just(0.0), st.floats(0.3, 0.9999)),
       epsilon=decades(-10, -3), t0=st.integers(0, 5),
       convention=st.sampled_from(["mxnet", "guide"]))
@example(h=(np.array([1.0, -2.0, 0.0]),
            np.array([[3.0, 0.0, 1e-6], [-1e-6, 5.0, 2.0], [0.0, 1e3, -0.5], [1e-3, -1.0, 0.0]]),
            {"wd": 0.0, "rescale_grad": 1.0, "clip_gradient": None}),
         lr=0.01, vary_lr=False, beta1=0.9, beta2=0.5, epsilon=1e-8, t0=0, convention="mxnet")
def test_ftml_closed_form_is_the_argmin(h, lr, vary_lr, beta1, beta2, epsilon, t0, convention):
    w0, grads, common = h
    T = grads.shape[0]
    lrs = lr * (np.linspace(1.0, 0.1, T) if vary_lr else np.ones(T))
    hyper = {"beta1": beta1, "beta2": beta2, "epsilon": epsilon}
    worst = _ftml_check(w0, grads, lrs, hyper, common, convention, t0)
    note(f"worst |closed - argmin|/tol = {worst:.3g}")


def test_ftml_negative_sigmas_beta2_below_beta1_squared():
    """beta2 < beta1^2 with a shrinking second moment gives negative sigma_j (the FTML paper's
    condition beta1 <= sqrt(beta2) fails), yet sum_j beta1^(i-j)*sigma_j = d_i > 0: the
    objective stays strictly convex and the closed form is still its minimiser."""
    rng = np.random.default_rng(5)
    hyper = {"beta1": 0.9, "beta2": 0.5, "epsilon": 1e-8}
    w0 = rng.standard_normal(5)
    grads = rng.standard_normal((10, 5)) * np.array([[10.0 ** (-k)] for k in range(10)])
    common = {"wd": 0.0, "rescale_grad": 1.0, "clip_gradient": None}
    for convention in ("mxnet", "guide"):
        _ftml_check(w0, grads, 0.05 * np.ones(10), hyper, common, convention, 0)
    _, sig = argmin.ftml_schedule(grads, lrs=0.05, ts=np.arange(1, 11), **hyper)
    assert np.sum(sig < 0) > 10


def test_ftml_undiscounted_proximal_terms_are_not_minimised():
    """guide:250 as printed discounts only the linear terms; with undiscounted proximal terms
    the quadratic coefficient is sum_j sigma_j != d_i and the closed form is not the minimiser
    (from the second step on). The first step has a single term: both readings coincide."""
    rng = np.random.default_rng(6)
    hyper = {"beta1": 0.6, "beta2": 0.999, "epsilon": 1e-8}
    w0 = rng.standard_normal(6)
    grads = rng.standard_normal((5, 6))
    common = {"wd": 0.0, "rescale_grad": 1.0, "clip_gradient": None}
    ws = closed_form_trajectory(ftml, w0, grads, hyper, [0.1] * 5, convention="guide",
                                common=common)
    lit, _, _ = argmin.ftml_argmin_trajectory(w0, grads, lrs=0.1, convention="guide",
                                              weights=ws[:-1], discount_prox=False, **hyper)
    np.testing.assert_allclose(lit[0], ws[1], rtol=1e-12)
    for i in range(2, 6):
        assert np.max(np.abs(lit[i - 1] - ws[i])) > 1e-3


def test_ftml_free_running_argmin_trajectory():
    rng = np.random.default_rng(7)
    for convention, wd, clip in (("mxnet", 0.0, None), ("mxnet", 0.1, 0.5), ("guide", 0.1, 0.5)):
        w0 = rng.standard_normal(6) * np.logspace(-2, 1, 6)
        grads = rng.standard_normal((15, 6)) * np.logspace(-3, 2, 6)
        hyper = {"beta1": 0.6, "beta2": 0.999, "epsilon": 1e-8}
        common = {"wd": wd, "rescale_grad": 1.0, "clip_gradient": clip}
        ws = closed_form_trajectory(ftml, w0, grads, hyper, [0.01] * 15, convention=convention,
                                    common=common)
        sol, _, _ = argmin.ftml_argmin_trajectory(w0, grads, lrs=0.01, convention=convention,
                                                  **hyper, **common)
        np.testing.assert_allclose(sol, ws[1:], rtol=1e-11, atol=1e-14)


def test_ftml_derivative_free_cross_check():
    """Powell (values only) agrees with the trust-exact argmin to about 1e-8."""
    rng = np.random.default_rng(8)
    hyper = {"beta1": 0.6, "beta2": 0.99, "epsilon": 1e-8}
    for convention in ("mxnet", "guide"):
        w0 = rng.standard_normal(2)
        grads = rng.standard_normal((4, 2))
        common = {"wd": 0.1, "rescale_grad": 1.0, "clip_gradient": None}
        ws = closed_form_trajectory(ftml, w0, grads, hyper, [0.1] * 4, convention=convention,
                                    common=common)
        for i in range(1, 5):
            G = np.array([argmin.convention_gradient("ftml", grads[j], ws[j],
                                                     convention=convention, **common)[0]
                          for j in range(i)])
            W = ws[:i]
            exact = argmin.ftml_argmin(G, W, lrs=0.1, ts=np.arange(1, i + 1), **hyper)
            df = argmin.ftml_argmin_derivative_free(G, W, lrs=0.1, ts=np.arange(1, i + 1),
                                                    **hyper)
            np.testing.assert_allclose(df, exact, rtol=0, atol=1e-8 * (1 + np.max(np.abs(W))))
            np.testing.assert_allclose(exact, ws[i], rtol=1e-13, atol=1e-15)
