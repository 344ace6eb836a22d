"""Adafactor's factored second moment, proved (Shazeer and Stern 2018, section 3): the rank-1
matrix ``R C / (1^T R)`` rebuilt from the row and column sums of a nonnegative matrix ``V``
minimises the generalised Kullback-Leibler divergence (I-divergence)
``D(V || W) = sum V log(V/W) - V + W`` over nonnegative rank-1 ``W``; checked against scipy's
minimiser of ``D`` on random matrices, and through the reference's own state: after several
steps its estimate is that minimiser for the full exponential moving average of ``G^2`` the
unfactored algorithm would keep (the row and column sums are linear in the average)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize

from reference import adafactor as ref


def i_divergence(v, w):
    return float(np.sum(v * np.log(v / w) - v + w))


def scipy_rank1(v):
    """The nonnegative rank-1 minimiser of ``D(v || r c^T)`` by scipy, over ``log r`` and
    ``log c`` (unconstrained, so the factors stay positive), with the exact gradient."""
    n, m = v.shape

    def fun(z):
        r, c = np.exp(z[:n]), np.exp(z[n:])
        w = np.outer(r, c)
        dw = 1.0 - v / w  # dD/dW
        return i_divergence(v, w), np.concatenate([(dw @ c) * r, (dw.T @ r) * c])

    z0 = np.concatenate([np.log(v.mean(axis=1)), np.zeros(m)])
    res = optimize.minimize(fun, z0, jac=True, method="BFGS", options={"gtol": 1e-12,
                                                                       "maxiter": 10000})
    assert res.success or "precision" in res.message, res.message
    return np.outer(np.exp(res.x[:n]), np.exp(res.x[n:]))


@pytest.mark.parametrize("seed", range(8))
def test_the_factored_estimate_minimises_the_i_divergence(seed):
    rng = np.random.default_rng(seed)
    n, m = rng.integers(2, 7, size=2)
    v = rng.gamma(0.5, size=(n, m)) * 10.0 ** rng.uniform(-3, 3) + 1e-12
    closed = ref.estimate(v.sum(axis=1, keepdims=True), v.sum(axis=0, keepdims=True))
    found = scipy_rank1(v)
    assert i_divergence(v, closed) <= i_divergence(v, found) * (1 + 1e-12) + 1e-300
    np.testing.assert_allclose(closed, found, rtol=1e-6)
    # the divergence grows away from it along random rank-1 directions
    for _ in range(20):
        a, b = np.exp(rng.normal(0, 0.1, n)), np.exp(rng.normal(0, 0.1, m))
        assert i_divergence(v, closed * np.outer(a, b)) >= i_divergence(v, closed)


@pytest.mark.parametrize("convention", ["paper", "pytorch"])
def test_the_reference_state_estimates_the_full_moving_average(convention):
    rng = np.random.default_rng(7)
    shape = (4, 5)
    w = rng.normal(size=shape)
    state = ref.init_state(w)
    full = np.zeros(shape)
    decay, eps1 = -0.8, 1e-30
    for t in range(1, 7):
        g = rng.normal(size=shape)
        w, state = ref.step(w, g, state, t=t, lr=1e-2, convention=convention, epsilon1=eps1)
        omb = float(t) ** decay
        full = (1 - omb) * full + omb * (g * g + (eps1 if convention == "paper" else 0.0))
    estimate = ref.estimate(state["row_var"], state["col_var"], convention, eps1)
    np.testing.assert_allclose(estimate, scipy_rank1(full), rtol=1e-6)
    # "pytorch" keeps means, "paper" sums: the same estimate
    scale = (shape[1], shape[0]) if convention == "paper" else (1, 1)
    np.testing.assert_allclose(state["row_var"], full.sum(axis=1, keepdims=True) / shape[1]
                               * scale[0], rtol=1e-12)
    np.testing.assert_allclose(state["col_var"], full.sum(axis=0, keepdims=True) / shape[0]
                               * scale[1], rtol=1e-12)


def test_the_paper_and_torch_estimates_agree_without_epsilon():
    """Sums (the paper) and means (torch) rebuild the same matrix: ``R C / sum R``."""
    rng = np.random.default_rng(3)
    v = rng.gamma(1.0, size=(3, 6))
    r, c = v.sum(axis=1, keepdims=True), v.sum(axis=0, keepdims=True)
    np.testing.assert_allclose(ref.estimate(r, c, "paper"),
                               ref.estimate(r / 6, c / 3, "pytorch", 0.0), rtol=1e-14)
