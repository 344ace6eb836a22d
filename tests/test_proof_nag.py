"""Proof that NAG's stored-point form is the guide's look-ahead NAG (guide:76-77), and that
MXNet's ``nag_mom_update`` is the same algorithm when ``wd == 0`` but not when ``wd != 0``.

The guide's NAG needs the gradient at the look-ahead point ``w_i + gamma*v_i``;
``reference.nag.step_lookahead`` evaluates it there, exactly as written. An optimizer step only
has the gradient at the weight it holds, so ``reference.nag.step(..., convention="guide")`` holds
``w~_i = w_i + gamma*v_i`` instead. In exact arithmetic the two produce the same ``v`` and
``w~_i = w_i + gamma*v_i`` at every step (see the docstring of ``reference.nag.step``). On
quadratic objectives ``f(w) = 0.5*sum(a*(w - b)^2)`` (gradient ``a*(w - b)``) we run both in
float64 and check it.

Tolerance, and why it is tight and rigorous. For a quadratic the stored-point step is an affine
map ``F(s) = M s + c`` of ``s = (w~, v)``, per coordinate, with (``h = lr*(a + wd)``)::

    M = [[1 - (1+gamma)*h, gamma^2],
         [-h,              gamma  ]]

and the look-ahead step conjugates to it under ``T = [[1, gamma], [0, 1]]`` (``T (w, v) = (w~, v)``).
Write ``S_k`` for the computed stored-point trajectory, ``L_k`` for the computed look-ahead one, and
``r_k`` for the rounding error one step makes from its (exactly known) float64 input. Then
``D_k = S_k - T L_k`` obeys ``D_{k+1} = M D_k + r^S_k - T r^L_k`` exactly, so

    |D_k| <= |M^k| |D_0| + sum_j |M^(k-1-j)| (|r^S_j| + |T| |r^L_j|)        (elementwise)

with the true matrix powers (not ``|M|^n``: a running error bound carried through 50 steps
would use ``|M|`` and grow like ``(1 + 2*gamma)^k``, which is vacuous). The local errors ``r`` are
bounded rigorously, to first order in ``u = 2**-53``, by running each single step on
``reference.error_bound.Tracked`` inputs with zero error (their values are bit-identical to the
plain float64 run). The comparison ``S_k`` vs ``fl(w_k + gamma*v_k)`` adds the rounding of that
expression. The resulting tolerance is typically 1e-16..1e-13 relative to the trajectory's scale
(the sum of ``|M^n|`` is at most about 1e3 for gamma = 0.99 over 50 steps); a factor 2 covers the
second-order terms the first-order bounds drop. A fixed ``rtol`` would be too loose for
well-conditioned draws and too tight for ill-conditioned ones. MXNet's step, with wd = 0, is the
same affine map ``F`` and is checked against the stored-point trajectory the same way.
"""
from __future__ import annotations

import numpy as np
from hypothesis import assume, example, given, note, target
from hypothesis import strategies as st

from reference import nag
from reference.error_bound import Tracked, tiny

U64 = 2.0 ** -53
SLACK = 2.0   # second-order terms of the first-order bounds
TIGHT = 1e-11  # bound/scale stays below this (observed <= 3e-14; theory ~1e3 * 20u = 2e-12)


def tracked(x):
    """A float64 input with zero error: its Tracked run gives the step's local rounding bound."""
    return Tracked(np.asarray(x, dtype=np.float64), u=U64, tiny=tiny(np.float64))


def _quadratic(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return lambda x: a * (x - b)


def _signed(lo, hi, zero=True):
    x = st.builds(lambda s, e: s * 10.0 ** e, st.sampled_from([-1.0, 1.0]), st.floats(lo, hi))
    return st.one_of(st.just(0.0), x) if zero else x


@st.composite
def problems(draw, wd_zero=False):
    n = draw(st.integers(1, 5))
    a = 10.0 ** np.array(draw(st.lists(st.floats(-3.0, 3.0), min_size=n, max_size=n)))
    b = np.array(draw(st.lists(_signed(-3.0, 3.0), min_size=n, max_size=n)))
    w0 = np.array(draw(st.lists(_signed(-3.0, 3.0), min_size=n, max_size=n)))
    v0 = np.array(draw(st.lists(_signed(-4.0, 1.0), min_size=n, max_size=n)))
    wd = 0.0 if wd_zero else draw(st.one_of(st.just(0.0), st.floats(-5.0, -1.0).map(lambda e: 10.0 ** e)))
    # lr*(a + wd) <= 1 on the stiffest coordinate: NAG is stable for every momentum in [0, 1)
    lr = 10.0 ** draw(st.floats(-3.0, 0.0)) / float(np.max(a + wd))
    momentum = draw(st.floats(0.0, 0.99))
    steps = draw(st.integers(20, 50))
    return dict(a=a, b=b, w0=w0, v0=v0, lr=lr, momentum=momentum, wd=wd, steps=steps)


def _abs_powers(p):
    """|M^k| for k = 0..steps, per coordinate: shape (steps+1, n, 2, 2)."""
    mu = p["momentum"]
    h = p["lr"] * (p["a"] + p["wd"])
    n = h.size
    M = np.empty((n, 2, 2))
    M[:, 0, 0], M[:, 0, 1], M[:, 1, 0], M[:, 1, 1] = 1.0 - (1.0 + mu) * h, mu * mu, -h, mu
    powers = [np.broadcast_to(np.eye(2), (n, 2, 2))]
    for _ in range(p["steps"]):
        powers.append(M @ powers[-1])
    return np.abs(np.array(powers))


class _Propagated:
    """sum_j |M^(k-1-j)| r_j + |M^k| D_0: the first-order bound on a trajectory difference."""

    def __init__(self, p, d0):
        self.P = _abs_powers(p)
        self.d0 = d0                   # (n, 2)
        self.local = []                # r_j, each (n, 2)

    def add(self, r):
        self.local.append(r)

    def bound(self):
        k = len(self.local)
        tot = np.einsum("nij,nj->ni", self.P[k], self.d0)
        for j, r in enumerate(self.local):
            tot = tot + np.einsum("nij,nj->ni", self.P[k - 1 - j], r)
        return tot


def _lookahead_step(p, w, v):
    wn, vn = nag.step_lookahead(tracked(w), tracked(v), _quadratic(p["a"], p["b"]), lr=p["lr"],
                                momentum=p["momentum"], wd=p["wd"])
    mu = p["momentum"]
    # local error mapped to stored coordinates by |T|: (e_w + gamma*e_v, e_v)
    return wn.value, vn.value, np.stack([wn.err + mu * vn.err, vn.err], axis=1)


def _stored_step(p, w, v, t, convention):
    wt = tracked(w)
    wn, sn = nag.step(wt, _quadratic(p["a"], p["b"])(wt), {"mom": tracked(v)}, t=t, lr=p["lr"],
                      wd=p["wd"], momentum=p["momentum"], convention=convention, hyper_f32=False)
    if "mom" not in sn:      # momentum 0 keeps no state: v plays no part (M's column 2 is 0)
        return wn.value, np.zeros_like(wn.value), np.stack([wn.err, np.zeros_like(wn.err)], axis=1)
    return wn.value, sn["mom"].value, np.stack([wn.err, sn["mom"].err], axis=1)


def _check(diff_w, diff_v, bound, what, scale):
    """|diff| <= SLACK*bound componentwise; returns (worst diff/bound, bound/scale)."""
    d = np.stack([np.abs(diff_w), np.abs(diff_v)], axis=1)
    assert np.all(np.isfinite(bound)), f"{what}: bound not finite"
    assert np.all(d <= SLACK * bound), f"{what}: |diff| {d} > {SLACK}*bound {bound}"
    rel = float(np.max(bound)) / scale
    assert rel < TIGHT, f"{what}: bound {rel:.3g} x scale is not tight"
    return float(np.max(d / np.where(bound > 0, bound, 1.0))), rel


def _trajectories(p, mxnet):
    """Run look-ahead, stored-point and (optionally) mxnet forms; yield per step the values and
    the propagated bounds (stored vs look-ahead, mxnet vs stored)."""
    mu = p["momentum"]
    x0 = tracked(p["w0"]) + mu * tracked(p["v0"])          # the change of variables
    wg, vg = p["w0"], p["v0"]
    ws, vs = x0.value, p["v0"]
    wm, vm = ws, vs
    zero = np.zeros((np.size(ws), 2))
    gs = _Propagated(p, np.stack([x0.err, np.zeros_like(x0.err)], axis=1))
    ms = _Propagated(p, zero)
    scale = max(float(np.max(np.abs(p["b"]))), float(np.max(np.abs(ws))), 1e-300)
    for t in range(1, p["steps"] + 1):
        wg, vg, rg = _lookahead_step(p, wg, vg)
        ws, vs, rs = _stored_step(p, ws, vs, t, "guide")
        gs.add(rg + rs)
        out = dict(t=t, wg=wg, vg=vg, ws=ws, vs=vs)
        if mxnet:
            wm, vm, rm = _stored_step(p, wm, vm, t, "mxnet")
            ms.add(rm + rs)
            out.update(wm=wm, vm=vm)
        scale = max(scale, *(float(np.max(np.abs(x))) for x in (wg, vg, ws, vs, wm, vm)))
        meas = tracked(wg) + mu * tracked(vg)              # fl(w + gamma*v), rounding tracked
        out.update(lookahead_as_stored=meas.value, meas_err=meas.err, scale=scale,
                   bound_guide=gs.bound(), bound_mx=ms.bound())
        yield out


@given(problems())
@example(dict(a=np.array([1.0, 100.0]), b=np.array([0.5, -2.0]), w0=np.array([1.0, 0.0]),
              v0=np.array([0.0, 0.1]), lr=0.009, momentum=0.9, wd=0.0, steps=30))
@example(dict(a=np.array([1e-3, 1e3]), b=np.array([0.0, 1e-3]), w0=np.array([1e3, -1e-3]),
              v0=np.array([1.0, 0.0]), lr=9e-4, momentum=0.99, wd=0.1, steps=50))
def test_stored_point_form_is_the_lookahead_trajectory(p):
    """guide look-ahead (w, v) and stored-point (w~, v): w~ == w + gamma*v and the same v at every
    step, wd on or off (the guide's weight decay is part of the gradient at the point)."""
    worst, worst_rel = 0.0, 0.0
    for s in _trajectories(p, mxnet=False):
        bound = s["bound_guide"] + np.stack([s["meas_err"], np.zeros_like(s["meas_err"])], axis=1)
        dv = s["vs"] - s["vg"] if p["momentum"] != 0.0 else 0.0 * s["vs"]
        r, rel = _check(s["ws"] - s["lookahead_as_stored"], dv, bound,
                        f"stored vs look-ahead at step {s['t']}", s["scale"])
        worst, worst_rel = max(worst, r), max(worst_rel, rel)
    note(f"worst |diff|/bound {worst:.3g}; worst bound/scale {worst_rel:.3g}")
    target(worst, label="|diff| / bound")


@given(problems(wd_zero=True))
@example(dict(a=np.array([2.0, 0.5, 30.0]), b=np.array([1.0, 0.0, -1.0]),
              w0=np.array([0.0, 3.0, 1.0]), v0=np.array([0.0, 0.0, 0.0]), lr=0.03,
              momentum=0.9, wd=0.0, steps=40))
def test_mxnet_nag_is_the_guide_trajectory_without_wd(p):
    """MXNet's nag_mom_update (no clipping, hyperparameters unrounded) with wd == 0 is the same
    affine map as the stored-point form: the same trajectory, hence w_mx == w + gamma*v of the
    look-ahead guide and mom == v."""
    worst = 0.0
    for s in _trajectories(p, mxnet=True):
        r1, _ = _check(s["wm"] - s["ws"], s["vm"] - s["vs"], s["bound_mx"],
                       f"mxnet vs stored-point at step {s['t']}", s["scale"])
        both = s["bound_mx"] + s["bound_guide"] + np.stack(
            [s["meas_err"], np.zeros_like(s["meas_err"])], axis=1)
        dv = s["vm"] - s["vg"] if p["momentum"] != 0.0 else 0.0 * s["vm"]
        r2, _ = _check(s["wm"] - s["lookahead_as_stored"], dv, both,
                       f"mxnet vs look-ahead at step {s['t']}", s["scale"])
        worst = max(worst, r1, r2)
    target(worst, label="|diff| / bound")


def _with_momentum_and_wd(p):
    # the aliasing difference exists only with momentum and wd: at momentum 0 MXNet's NAG is
    # sgd_update, which is exactly the guide's SGD step
    return {**p, "momentum": p["momentum"] if p["momentum"] >= 0.05 else 0.5,
            "wd": p["wd"] if p["wd"] >= 1e-3 else 0.01}


@given(problems().map(_with_momentum_and_wd))
@example(dict(a=np.array([1.0, 4.0]), b=np.array([0.0, 1.0]), w0=np.array([2.0, -1.0]),
              v0=np.array([0.0, 0.0]), lr=0.1, momentum=0.9, wd=0.01, steps=20))
def test_mxnet_with_wd_leaves_the_guide_trajectory(p):
    """Free-running, wd != 0: MXNet's trajectory leaves the stored-point guide's by more than
    rounding could explain if the two were the same map."""
    assume(np.any(np.abs(p["w0"] - p["b"]) > 1e-2))
    left = False
    for s in _trajectories(p, mxnet=True):
        d = np.stack([np.abs(s["wm"] - s["ws"]), np.abs(s["vm"] - s["vs"])], axis=1)
        if np.any(d > SLACK * s["bound_mx"]):
            left = True
            break
    assert left, "MXNet with wd != 0 stayed within rounding of the guide trajectory"


@st.composite
def one_step_with_wd(draw):
    n = draw(st.integers(1, 6))
    w = np.array(draw(st.lists(_signed(-2.0, 2.0, zero=False), min_size=n, max_size=n)))
    g = np.array(draw(st.lists(_signed(-3.0, 2.0), min_size=n, max_size=n)))
    mom = np.array(draw(st.lists(_signed(-3.0, 0.0), min_size=n, max_size=n)))
    lr = 10.0 ** draw(st.floats(-3.0, -0.5))
    wd = 10.0 ** draw(st.floats(-3.0, -0.3))
    momentum = draw(st.floats(0.1, 0.99))
    return w, g, mom, lr, wd, momentum


def _one_step_same(x, y, what):
    """Two one-step results from identical exact inputs: |x - y| <= SLACK*(err_x + err_y)."""
    d = np.abs(x.value - y.value)
    bound = SLACK * (x.err + y.err)
    assert np.all(d <= bound), f"{what}: |diff| {d} > bound {bound}"


@given(one_step_with_wd())
@example((np.array([1.0, -2.0]), np.array([0.5, 0.0]), np.array([0.0, 0.1]), 0.1, 0.1, 0.9))
def test_mxnet_aliasing_is_the_only_difference_with_wd(case):
    """With wd != 0, one step from identical inputs: MXNet's weight equals the stored-point guide
    step (whose ``G = g + wd*w~`` is exactly MXNet's kernel without aliasing), and MXNet's momentum
    differs from the guide's v by exactly ``-lr*wd*(w_new - w)``: its momentum line reads the
    updated weight (in-place aliasing). That difference exists and is above rounding."""
    w, g, mom, lr, wd, mu = case
    tw, tg, tm = tracked(w), tracked(g), tracked(mom)
    wm, sm = nag.step(tw, tg, {"mom": tm}, t=1, lr=lr, wd=wd, momentum=mu, hyper_f32=False)
    ws, ss = nag.step(tw, tg, {"mom": tm}, t=1, lr=lr, wd=wd, momentum=mu, convention="guide")
    _one_step_same(wm, ws, "w_new")
    predicted = ss["mom"] - lr * wd * (ws - tw)        # the guide's v with the aliased wd term
    _one_step_same(sm["mom"], predicted, "aliased mom")
    diff = np.abs(sm["mom"].value - ss["mom"].value)
    bound = SLACK * (sm["mom"].err + ss["mom"].err)
    expected = lr * wd * np.abs(ws.value - w)
    assume(np.any(expected > 4 * bound))
    assert np.any(diff > bound), "the aliasing made no difference above rounding"


def test_lookahead_by_hand():
    """One look-ahead step by hand: w=1, v=0.5, gamma=0.5, lr=0.25, f = 0.5*2*(w-0)^2."""
    w_new, v_new = nag.step_lookahead(np.array([1.0]), np.array([0.5]), lambda x: 2.0 * x,
                                      lr=0.25, momentum=0.5)
    x = 1.0 + 0.5 * 0.5                 # look-ahead point 1.25, gradient 2.5
    v = 0.5 * 0.5 - 0.25 * 2.5          # -0.375
    assert v_new[0] == v and w_new[0] == 1.0 + v
    # with weight decay and clipping: G = clip(2*2.5, 1) + 0.1*1.25 = 1.125
    w_new, v_new = nag.step_lookahead(np.array([1.0]), np.array([0.5]), lambda x: 2.0 * x,
                                      lr=0.25, momentum=0.5, wd=0.1, rescale_grad=2.0,
                                      clip_gradient=1.0)
    G = min(2.0 * 2.0 * x, 1.0) + 0.1 * x
    assert v_new[0] == 0.25 - 0.25 * G and w_new[0] == 1.0 + (0.25 - 0.25 * G)


def test_lookahead_is_pure_and_tracked():
    w, v = np.array([1.0, -2.0, 0.0]), np.array([0.1, 0.0, -0.3])
    w0, v0 = w.copy(), v.copy()
    fn = _quadratic([1.0, 2.0, 3.0], [0.0, 1.0, -1.0])
    a = nag.step_lookahead(w, v, fn, lr=0.1, momentum=0.9, wd=0.01, clip_gradient=2.0)
    assert np.array_equal(w, w0) and np.array_equal(v, v0)
    from reference.error_bound import track
    b = nag.step_lookahead(track(w, np.float32), track(v, np.float32), fn, lr=0.1, momentum=0.9,
                           wd=0.01, clip_gradient=2.0)
    for x, y in zip(a, b):
        assert x.dtype == np.float64 and np.array_equal(x, y.value)
        assert np.all(y.err >= 0)
