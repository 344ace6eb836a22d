"""Nadam: the guide's look-ahead form (guide:179-183, ``reference.nadam.step_lookahead``) and
MXNet's form (Dozat's momentum schedule, ``reference.nadam.step``) are different algorithms.

Unlike NAG, where the guide's look-ahead gradient and the stored-point form are one trajectory
under a change of variables, no such change of variables exists here: MXNet never evaluates a
gradient anywhere but at the stored weight, warms its momentum with the schedule
``mu_t = beta1*(1 - 0.5*0.96**(t*schedule_decay))``, corrects the bias with the product of the
``mu`` (``m_schedule``, one value shared by every parameter of the optimizer), and mixes the
current gradient into the step (``m_bar``). The tests below pin the hand-checkable facts of both
forms and show their trajectories on the same quadratic separate far beyond rounding.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference import nadam


def mu(t, beta1=0.9, sd=0.004):
    return beta1 * (1 - 0.5 * 0.96 ** (t * sd))


def test_momentum_schedule_values():
    assert nadam.momentum_schedule(1, 0.9, 0.004) == mu(1)
    assert nadam.momentum_schedule(7, 0.8, 0.1) == 0.8 * (1 - 0.5 * 0.96 ** 0.7)
    # schedule_decay = 0: a constant beta1/2
    assert nadam.momentum_schedule(123, 0.9, 0.0) == 0.45
    # the schedule warms towards beta1
    ms = [nadam.momentum_schedule(t, 0.9, 0.004) for t in (1, 10, 100, 10_000)]
    assert all(a < b for a, b in zip(ms, ms[1:])) and ms[-1] < 0.9


def test_m_schedule_single_index_is_the_product():
    w = np.array([0.5, -1.0])
    state = nadam.init_state(w)
    prod = 1.0
    for t in range(1, 8):
        w, state = nadam.step(w, np.array([0.3, 0.1]) * t, state, t=t, lr=0.01)
        prod *= mu(t)
        assert state["m_schedule"] == prod          # same operations, same order: exact


def test_m_schedule_shared_by_two_alternating_indices():
    """MXNet multiplies the optimizer-wide m_schedule on every update of any index: after the
    calls (0, t=1), (1, t=1), (0, t=2), (1, t=2), (0, t=3) it is mu1*mu1*mu2*mu2*mu3."""
    w = {0: np.array([1.0, -2.0]), 1: np.array([0.5])}
    st_ = {k: nadam.init_state(v) for k, v in w.items()}
    g = {0: np.array([0.25, 1.0]), 1: np.array([-3.0])}
    m_schedule = 1.0
    seen = []
    t_of = {0: 0, 1: 0}
    for idx in (0, 1, 0, 1, 0):
        t_of[idx] += 1
        state = dict(st_[idx], m_schedule=m_schedule)       # the shared value travels in
        w[idx], st_[idx] = nadam.step(w[idx], g[idx], state, t=t_of[idx], lr=0.01)
        m_schedule = st_[idx]["m_schedule"]
        seen.append(m_schedule)
    expected = [mu(1), mu(1) * mu(1), mu(1) ** 2 * mu(2), (mu(1) * mu(2)) ** 2,
                (mu(1) * mu(2)) ** 2 * mu(3)]
    np.testing.assert_allclose(seen, expected, rtol=1e-15)


def test_second_index_differs_from_a_single_parameter_run():
    """Index 1's first update sees m_schedule = mu1*mu1 (not mu1): by hand, with m = (1-b1)*g,
    v_hat = g^2 (exact in reals), the step is lr*((1-mu1)*g/(1-ms) + mu2*(1-b1)*g/(1-ms*mu2))
    /(|g| + eps) with ms the m_schedule after the multiplication."""
    lr, b1, eps = 0.1, 0.9, 1e-8
    w1, g1 = np.array([0.5]), np.array([-3.0])
    shared, _ = nadam.step(w1, g1, dict(nadam.init_state(w1), m_schedule=mu(1)), t=1, lr=lr)
    alone, _ = nadam.step(w1, g1, nadam.init_state(w1), t=1, lr=lr)

    def by_hand(ms):
        return w1 - lr * ((1 - mu(1)) * g1 / (1 - ms) + mu(2) * (1 - b1) * g1 / (1 - ms * mu(2))) \
            / (np.abs(g1) + eps)

    np.testing.assert_allclose(shared, by_hand(mu(1) * mu(1)), rtol=1e-14)
    np.testing.assert_allclose(alone, by_hand(mu(1)), rtol=1e-14)
    assert abs(shared[0] - alone[0]) > 1e-2          # MXNet 1.9.1 measured 0.044 (nadam.md)


def test_lookahead_evaluates_the_two_points_of_the_guide():
    """guide:179 takes the gradient at w_i + beta1*v_i, guide:180 at w_i."""
    w = np.array([1.0, -2.0])
    state = {"m": np.array([0.5, 0.25]), "v": np.array([1.0, 4.0]), "m_schedule": 0.7}
    points = []

    def grad_fn(x):
        points.append(np.array(x))
        return 2.0 * x

    w_new, s_new = nadam.step_lookahead(w, state, grad_fn, t=2, lr=0.1, beta1=0.9, beta2=0.99,
                                        epsilon=1e-8)
    assert len(points) == 2
    assert np.array_equal(points[0], w + 0.9 * state["m"])
    assert np.array_equal(points[1], w)
    g_look, g_here = 2.0 * points[0], 2.0 * w
    v = 0.9 * state["m"] + 0.1 * g_look
    E = 0.99 * state["v"] + 0.01 * g_here * g_here
    expect = w - 0.1 / (np.sqrt(E / (1 - 0.99 ** 2)) + 1e-8) * (v / (1 - 0.9 ** 2))
    np.testing.assert_allclose(w_new, expect, rtol=1e-15)
    np.testing.assert_allclose(s_new["m"], v, rtol=1e-15)
    np.testing.assert_allclose(s_new["v"], E, rtol=1e-15)
    assert s_new["m_schedule"] == 0.7                  # passed through: no schedule in the guide
    assert np.array_equal(state["m"], [0.5, 0.25])     # pure
    # the guide gradient: clip(rs*grad, c) + wd*x at each point
    points.clear()
    w2, _ = nadam.step_lookahead(w, state, grad_fn, t=2, lr=0.1, beta1=0.9, beta2=0.99,
                                 epsilon=1e-8, wd=0.5, rescale_grad=0.5, clip_gradient=1.0)
    gl = np.clip(0.5 * 2.0 * points[0], -1, 1) + 0.5 * points[0]
    gh = np.clip(0.5 * 2.0 * w, -1, 1) + 0.5 * w
    v = 0.9 * state["m"] + 0.1 * gl
    E = 0.99 * state["v"] + 0.01 * gh * gh
    np.testing.assert_allclose(w2, w - 0.1 / (np.sqrt(E / (1 - 0.99 ** 2)) + 1e-8)
                               * (v / (1 - 0.9 ** 2)), rtol=1e-15)


@given(c=st.lists(st.one_of(st.floats(1e-3, 1e3), st.floats(-1e3, -1e-3)), min_size=1,
                  max_size=4),
       steps=st.integers(1, 20), lr=st.floats(1e-4, 1.0))
def test_lookahead_constant_gradient_by_hand(c, steps, lr):
    """With a constant gradient c the EMAs are (1-beta^t)*c and (1-beta2^t)*c^2, so the
    bias-corrected moments are exactly c and c^2 (in reals): every step moves by
    -lr*c/(|c| + eps), wherever the gradient is evaluated."""
    c = np.array(c)
    w0 = np.linspace(-1.0, 1.0, c.size)
    w, state = w0, nadam.init_state(w0)
    for t in range(1, steps + 1):
        w, state = nadam.step_lookahead(w, state, lambda x: c, t=t, lr=lr, beta1=0.9,
                                        beta2=0.999, epsilon=1e-8)
    expect = w0 - steps * lr * c / (np.abs(c) + 1e-8)
    np.testing.assert_allclose(w, expect, rtol=1e-11, atol=1e-11 * steps * lr)


def _quadratic(a, b):
    return lambda x: a * (x - b)


def _run_both(a, b, w0, sd, steps=30, lr=0.05):
    grad = _quadratic(a, b)
    hyper = dict(beta1=0.9, beta2=0.999, epsilon=1e-8)
    wl, sl = w0, nadam.init_state(w0)
    wm, sm = w0, nadam.init_state(w0)
    gaps = []
    for t in range(1, steps + 1):
        wl, sl = nadam.step_lookahead(wl, sl, grad, t=t, lr=lr, **hyper)
        wm, sm = nadam.step(wm, grad(wm), sm, t=t, lr=lr, schedule_decay=sd, hyper_f32=False,
                            **hyper)
        gaps.append(float(np.max(np.abs(wl - wm))))
    return wl, wm, gaps


def test_lookahead_and_mxnet_forms_are_different_algorithms():
    """Same quadratic, same start, same hyperparameters, no weight decay or clipping: both
    descend, but the trajectories separate far beyond rounding (~1e-16), also with
    schedule_decay = 0 (a constant momentum beta1/2 in MXNet's form)."""
    a = np.array([1.0, 0.5, 0.1, 0.3])
    b = np.array([1.0, -2.0, 0.5, 0.0])
    w0 = np.array([0.0, 0.0, 2.0, -1.0])
    loss0 = np.sum(a * (w0 - b) ** 2)
    for sd in (0.004, 0.0):
        wl, wm, gaps = _run_both(a, b, w0, sd)
        assert max(gaps) > 0.1, (sd, gaps)
        assert np.sum(a * (wl - b) ** 2) < 0.5 * loss0 and np.sum(a * (wm - b) ** 2) < 0.5 * loss0


def test_lookahead_as_written_can_diverge_where_mxnet_converges():
    """guide:179 adds beta1*v_i -- a gradient-sized quantity -- to the weight to get the
    look-ahead point. On a stiffer coordinate (curvature 10) that point overshoots and the
    guide's iteration diverges, while MXNet's (gradient at the stored weight) converges: more
    evidence that they are different algorithms, and that guide:179 is not Dozat's Nadam (whose
    look-ahead is in weight units, folded into m_bar)."""
    a = np.array([1.0, 10.0, 0.1, 3.0])
    b = np.array([1.0, -2.0, 0.5, 0.0])
    w0 = np.array([0.0, 0.0, 2.0, -1.0])
    loss0 = np.sum(a * (w0 - b) ** 2)
    wl, wm, _ = _run_both(a, b, w0, 0.004)
    assert np.sum(a * (wm - b) ** 2) < 0.5 * loss0
    assert np.sum(a * (wl - b) ** 2) > 1e3 * loss0


def test_lookahead_guide_first_step_differs_from_mxnet_even_at_the_stored_point():
    """At the first step v_0 = 0, so the look-ahead point is w_0 itself and both forms see the
    same gradient g; still the steps differ: the guide moves by lr*g/(|g|+eps), MXNet by
    lr*(g + mu2*(1-beta1)*g/(1-mu1*mu2))/(|g|+eps) (the Nesterov mix of m_bar)."""
    w0 = np.array([1.0, -1.0])
    g = np.array([0.5, -2.0])
    wl, _ = nadam.step_lookahead(w0, nadam.init_state(w0), lambda x: g, t=1, lr=0.1, beta1=0.9,
                                 beta2=0.999, epsilon=1e-8)
    wm, _ = nadam.step(w0, g, nadam.init_state(w0), t=1, lr=0.1)
    np.testing.assert_allclose(wl, w0 - 0.1 * g / (np.abs(g) + 1e-8), rtol=1e-15)
    ratio = (wm - w0) / (wl - w0)
    np.testing.assert_allclose(ratio, 1 + mu(2) * 0.1 / (1 - mu(1) * mu(2)), rtol=1e-12)
    assert np.all(ratio > 1.05)


def test_guide_convention_is_refused_by_step():
    w = np.ones(2)
    with pytest.raises(NotImplementedError, match="step_lookahead"):
        nadam.step(w, w, nadam.init_state(w), t=1, lr=0.1, convention="guide")
    with pytest.raises(ValueError):
        nadam.step(w, w, nadam.init_state(w), t=1, lr=0.1, convention="other")


def test_mxnet_two_index_run_against_hand_formula():
    """A two-index MXNet-convention run, recomputed with Python floats per element from the
    equations of docs/optimizers/nadam.md, convention "mxnet" (with the shared schedule)."""
    rng = np.random.default_rng(11)
    ws = {0: rng.standard_normal(3), 1: rng.standard_normal(2)}
    order = [0, 1, 1, 0, 1, 0]
    grads = [rng.standard_normal(ws[i].size) for i in order]
    kw = dict(lr=0.02, wd=0.1, rescale_grad=0.5, clip_gradient=0.75)
    beta1, beta2, eps, sd = 0.9, 0.999, 1e-8, 0.004
    ref_w = {k: v.copy() for k, v in ws.items()}
    ref_s = {k: nadam.init_state(v) for k, v in ws.items()}
    py_w = {k: [float(x) for x in v] for k, v in ws.items()}
    py_m = {k: [0.0] * v.size for k, v in ws.items()}
    py_v = {k: [0.0] * v.size for k, v in ws.items()}
    ms_ref = ms_py = 1.0
    t_of = {0: 0, 1: 0}
    for i, g in zip(order, grads):
        t_of[i] += 1
        t = t_of[i]
        ref_w[i], ref_s[i] = nadam.step(ref_w[i], g, dict(ref_s[i], m_schedule=ms_ref), t=t,
                                        hyper_f32=False, **kw)
        ms_ref = ref_s[i]["m_schedule"]
        mu_t = beta1 * (1 - 0.5 * 0.96 ** (t * sd))
        mu_t1 = beta1 * (1 - 0.5 * 0.96 ** ((t + 1) * sd))
        ms_py *= mu_t
        for k in range(len(py_w[i])):
            gk = min(max(0.5 * g[k] + 0.1 * py_w[i][k], -0.75), 0.75)
            py_m[i][k] = beta1 * py_m[i][k] + (1 - beta1) * gk
            py_v[i][k] = beta2 * py_v[i][k] + (1 - beta2) * gk * gk
            m_bar = (1 - mu_t) * gk / (1 - ms_py) + mu_t1 * py_m[i][k] / (1 - ms_py * mu_t1)
            v_hat = py_v[i][k] / (1 - beta2 ** t)
            py_w[i][k] -= 0.02 * m_bar / (math.sqrt(v_hat) + eps)
        np.testing.assert_allclose(ref_w[i], py_w[i], rtol=1e-13)
    assert ms_ref == pytest.approx(ms_py, rel=1e-15)
