"""Muon's Newton-Schulz iteration, proved (Jordan et al. 2024; reference/muon.py).

1. The iteration acts on singular values alone: for ``G = U diag(s) V^T`` (U, V with orthonormal
   columns from numpy's QR, ``s`` over decades), :func:`reference.muon.newton_schulz` in float64
   is ``U diag(phi^k(s/|s|_2)) V^T`` with the scalar quintic ``phi(s) = a s + b s^3 + c s^5``,
   to 1e-12 relative, for tall, wide and square matrices.
2. The default coefficients leave every normalised singular value in a band after 5 steps, not
   at 1: computed on a fine grid and asserted.
3. The reference's "pytorch" step (its iteration in float64) is torch.optim.Muon run in float64
   (its iteration in bfloat16) within a first-order bound in bfloat16's unit roundoff 2^-8,
   scaled by the Lipschitz constant of ``phi^5`` on the input's spectrum; the reference's
   ``form="bfloat16"`` (an emulation of torch's CPU arithmetic) is bit for bit torch's on small
   matrices and within the same bound on larger ones.
4. A weight that is not 2-D is refused with an error naming AdamW.
5. On Tracked inputs (the oracle's error bounds) the iteration carries a normwise first-order
   bound that a float32 iteration meets.
"""
from __future__ import annotations

import numpy as np
import pytest

from reference import muon as ref

torch = pytest.importorskip("torch")

#: bfloat16's unit roundoff (8 significant bits)
U_BF16 = 2.0 ** -8
SHAPES = [(6, 6), (12, 5), (5, 12), (40, 40), (64, 24), (24, 64)]


def orthonormal(rng, n, k):
    q, r = np.linalg.qr(rng.normal(size=(n, k)))
    return q * np.sign(np.diag(r))


def known_svd(rng, shape):
    n, m = shape
    k = min(n, m)
    s = np.sort(10.0 ** rng.uniform(-3, 0, size=k))[::-1]
    s[0] = 1.0
    return orthonormal(rng, n, k), s, orthonormal(rng, m, k)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", range(3))
def test_newton_schulz_acts_on_singular_values_by_the_quintic(shape, seed):
    rng = np.random.default_rng(seed)
    U, s, V = known_svd(rng, shape)
    scale = 10.0 ** rng.uniform(-4, 4)  # the normalisation removes it
    G = scale * (U * s) @ V.T
    s_hat = s / np.linalg.norm(s)     # |G|_F = |s|_2 (eps = 1e-7 is far below it)
    for steps in (1, 2, 5):
        expected = (U * ref.phi_iterate(s_hat, steps)) @ V.T
        for clamp in (True, False):
            got = ref.newton_schulz(G, ref.NS_COEFFICIENTS, steps, 0.0 if not clamp else 1e-7,
                                    clamp=clamp)
            assert got.shape == shape
            err = np.linalg.norm(got - expected, 2) / np.linalg.norm(expected, 2)
            assert err < 1e-12, (steps, clamp, err)


def test_phi_iterate_is_the_composition():
    s = np.linspace(0.0, 1.0, 11)
    x = s
    for k in range(6):
        np.testing.assert_array_equal(ref.phi_iterate(s, k), x)
        x = ref.phi(x)
    a, b, c = ref.NS_COEFFICIENTS
    np.testing.assert_allclose(ref.phi(s), a * s + b * s ** 3 + c * s ** 5, rtol=1e-15,
                               atol=1e-16)


def test_the_singular_values_after_five_steps_lie_in_a_band():
    """Keller Jordan's coefficients maximise the slope at 0 (``phi'(0) = a = 3.4445``) at the
    price of convergence: the composition oscillates about 1. On a log grid of 400,001 points
    the band after 5 steps is [0.68183, 1.13436] for s in [1e-2, 1] (the "roughly 0.7..1.1"
    of the post) and [0.47054, 1.20237] for s in [1e-3, 1], whose low end is s = 1e-3 itself
    (phi^5 ~ a^5 s = 480 s there, not yet in the band); the top, 1.20237, is reached near
    s = 0.00411."""
    for lo, band in ((1e-2, (0.68183, 1.13436)), (1e-3, (0.47054, 1.20237))):
        s = np.geomspace(lo, 1.0, 400_001)
        x = ref.phi_iterate(s, 5)
        assert band[0] - 1e-5 <= x.min() <= band[0] + 1e-5, (lo, x.min())
        assert band[1] - 1e-5 <= x.max() <= band[1] + 1e-5, (lo, x.max())
    # a singular value that starts in (0, 1] never leaves (0, 1.21) on the way either
    s = np.geomspace(1e-3, 1.0, 100_001)
    for _ in range(5):
        s = ref.phi(s)
        assert 0.0 < s.min() and s.max() < 1.21


def lipschitz(s_hat, steps=5):
    """First-order sensitivity of ``X -> U diag(phi^steps(s)) V^T`` at the normalised singular
    values ``s_hat``: the largest of ``|(phi^steps)'|`` and ``phi^steps(s)/s`` over
    [min s_hat, 1] (the divided differences of an odd function of the singular values, which
    bound its Frechet derivative, lie between these on that interval)."""
    t = np.geomspace(max(float(np.min(s_hat)), 1e-12), 1.0, 20_001)
    a, b, c = ref.NS_COEFFICIENTS
    x, d = t.copy(), np.ones_like(t)
    for _ in range(steps):
        d = d * (a + 3 * b * x * x + 5 * c * x ** 4)
        x = ref.phi(x)
    return float(max(np.max(np.abs(d)), np.max(x / t)))


def torch_run(shape, seed, *, nesterov, adjust, steps=3, lr=0.02, wd=0.1, form=None):
    """torch.optim.Muon on a float64 weight for ``steps`` steps; at each, the reference's step
    from torch's weight and buffer before it. Yields, per step, the difference of the weights
    over the adjusted lr (the difference of the two orthogonalised updates), the bound of
    :func:`lipschitz` for that update, and the two buffers."""
    rng = np.random.default_rng(seed)
    w0 = rng.normal(size=shape)
    p = torch.nn.Parameter(torch.tensor(w0))
    opt = torch.optim.Muon([p], lr=lr, weight_decay=wd, nesterov=nesterov, adjust_lr_fn=adjust)
    state = ref.init_state(w0)
    adj = ref.adjusted_lr(lr, adjust, shape)
    for t in range(1, steps + 1):
        g = rng.normal(size=shape) * 10.0 ** rng.uniform(-3, 3)
        before = p.detach().numpy().copy()
        p.grad = torch.tensor(g)
        opt.step()
        buf = opt.state[p]["momentum_buffer"].numpy().copy()
        w, new = ref.step(before, g, state, t=t, lr=lr, wd=wd, nesterov=nesterov,
                          adjust_lr=adjust, form=form)
        update = g + 0.95 * (buf - g) if nesterov else buf
        s = np.linalg.svd(update, compute_uv=False)
        yield (p.detach().numpy() - w) / adj, lipschitz(s / np.linalg.norm(s)), new, buf
        state = {"momentum_buffer": buf}


CASES = [(shape, seed, nesterov, adjust) for shape in [(8, 8), (16, 40), (40, 16), (64, 64),
                                                       (96, 32)]
         for seed in range(3) for nesterov, adjust in ((True, None), (False, "match_rms_adamw"))]


@pytest.mark.parametrize("shape, seed, nesterov, adjust", CASES)
def test_the_pytorch_step_is_torch_within_the_bfloat16_bound(shape, seed, nesterov, adjust):
    """torch rounds the update to bfloat16 (8 significant bits, ``u = 2^-8``) and runs 5
    iterations in it; the reference runs them in float64. The input's own rounding moves the
    normalised matrix by at most ``u`` (Frobenius, hence spectral), which the iteration carries
    to its output times :func:`lipschitz` at first order; the other 17 roundings (the norm, the
    division, three per iteration) fall mostly where ``phi`` contracts (``|phi'(1)| = 0.72``)
    and with random signs. Measured over these 30 cases (3 steps each): worst 0.72 of
    ``lipschitz * u`` (11.9 u with a Lipschitz constant of 16.5, 16x40); over 42 Gaussian
    matrices besides (torch's ``_zeropower_via_newtonschulz`` alone): worst 0.78 (11.5 u, 14.7,
    40x16). The assertion allows 2 (one ``lipschitz * u`` for the input's
    rounding, one for all the others). In absolute terms the worst difference is 47 u = 0.19
    (an 8x8 update whose smallest normalised singular value is 7e-3: phi^5's slope ~ 150 there),
    so no bound free of the spectrum holds."""
    for d, lip, new, buf in torch_run(shape, seed, nesterov=nesterov, adjust=adjust):
        # the momentum is float64 in both: equal but for torch's fused multiply-add
        np.testing.assert_allclose(new["momentum_buffer"], buf, rtol=0,
                                   atol=4e-16 * np.max(np.abs(buf)))
        err = np.linalg.norm(d, 2)
        assert err <= 2.0 * lip * U_BF16, (err / U_BF16, lip)


@pytest.mark.parametrize("shape, seed, nesterov, adjust", CASES)
def test_the_bfloat16_form_emulates_torch(shape, seed, nesterov, adjust):
    """``form="bfloat16"`` is torch's CPU arithmetic but for float32's accumulation order
    (float64's here): bit for bit on the 8x8 and 16x40 cases; on larger ones (40x16 already) a
    near tie flips a product's rounding now and then (about 3e-5 of the elements after one
    iteration of a 100x300 product), and the flip spreads through the later products.
    Measured worst over these cases: 0.13 of ``lipschitz * u`` (4.1 u, 96x32); 7.0 u (0.18)
    for a 200x100 matrix outside them; asserted:
    ``lipschitz * u``."""
    for d, lip, _, _ in torch_run(shape, seed, nesterov=nesterov, adjust=adjust,
                                  form="bfloat16"):
        if shape in ((8, 8), (16, 40)):
            assert np.max(np.abs(d)) < 1e-12, np.max(np.abs(d))
        assert np.linalg.norm(d, 2) <= lip * U_BF16


def test_the_paper_and_pytorch_conventions_agree_in_float64():
    """torch's lerp-buffer is ``(1 - momentum)`` times the post's sum-buffer, and so is the
    Nesterov mix; Newton-Schulz is scale-invariant but for ``eps``: with ``epsilon=0`` the two
    conventions give the same weights to rounding. (With the default 1e-7 they differ by about
    5e-11 here: ``|X|_F + eps`` against ``max(|X|_F, eps)``.)"""
    rng = np.random.default_rng(5)
    w = rng.normal(size=(7, 11))
    wp, sp = w.copy(), ref.init_state(w)
    wt, st = w.copy(), ref.init_state(w)
    for t in range(1, 6):
        g = rng.normal(size=w.shape)
        wp, sp = ref.step(wp, g, sp, t=t, lr=0.02, wd=0.1, convention="paper",
                          epsilon=0.0)
        wt, st = ref.step(wt, g, st, t=t, lr=0.02, wd=0.1, epsilon=0.0)
        np.testing.assert_allclose(st["momentum_buffer"], 0.05 * sp["momentum_buffer"],
                                   rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(wp, wt, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("shape", [(), (5,), (3, 4, 5), (2, 3, 4, 5)])
def test_non_matrix_weights_are_refused_naming_adamw(shape):
    w = np.ones(shape)
    with pytest.raises(ValueError, match="AdamW"):
        ref.init_state(w)
    with pytest.raises(ValueError, match="AdamW"):
        ref.step(w, w, {"momentum_buffer": np.zeros(shape)}, t=1, lr=0.02)
    with pytest.raises(ValueError, match="AdamW"):
        ref.newton_schulz(w)


def float32_newton_schulz(G, coefficients=ref.NS_COEFFICIENTS, steps=5, eps=1e-7):
    """The iteration as the toolkit's CPU kernel forms it in float32 (numpy's BLAS products,
    the norm in float64 rounded once)."""
    X = np.asarray(G, np.float32)
    tall = X.shape[0] > X.shape[1]
    X = X.T if tall else X
    X = X / np.float32(max(np.sqrt(np.sum(X.astype(np.float64) ** 2)), eps))
    a, b, c = (np.float32(k) for k in coefficients)
    for _ in range(steps):
        A = X @ X.T
        B = b * A + c * (A @ A)
        X = a * X + B @ X
    return X.T if tall else X


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (7, 1), (3, 3), (4, 10), (10, 4), (8, 8),
                                   (16, 40)])
@pytest.mark.parametrize("seed", range(4))
def test_the_tracked_bound_holds_for_a_float32_iteration(shape, seed):
    """On Tracked inputs the iteration returns the float64 value with the normwise bound of
    ``newton_schulz_bound``; a float32 iteration (BLAS products) lies within it (measured on
    the oracle's small matrices: up to 0.09 of it with 5 steps, 0.5 with none; far less on
    larger ones: rigorous, first order, and loose by the worst-case constants)."""
    from reference.error_bound import track
    rng = np.random.default_rng(seed)
    # a float32 input: the bound is for the iteration of the values it is given (Tracked
    # inputs are exact), so they are float32's
    G = (rng.normal(size=shape) * 10.0 ** rng.uniform(-3, 3)).astype(np.float32).astype(float)
    T = ref.newton_schulz(track(G, np.float32))
    np.testing.assert_array_equal(T.value, ref.newton_schulz(G))
    assert np.all(T.err == T.err.flat[0]) and not T.tie.any()
    for steps in (5, 2):
        T = ref.newton_schulz(track(G, np.float32), steps=steps)
        err = np.abs(float32_newton_schulz(G, steps=steps) - ref.newton_schulz(G, steps=steps))
        assert np.all(err <= T.err), (steps, np.max(err / T.err))


def test_the_bound_grows_with_a_worse_conditioned_input():
    """The Lipschitz constant of ``phi^5`` is largest near 0 (``a^5 ~ 480``): a matrix with a
    small singular value gets a larger bound than a well-conditioned one of the same size."""
    from reference.error_bound import track
    rng = np.random.default_rng(3)
    U, V = orthonormal(rng, 6, 6), orthonormal(rng, 6, 6)
    good = ref.newton_schulz(track((U * np.linspace(1.0, 0.5, 6)) @ V.T, np.float32))
    bad = ref.newton_schulz(track((U * np.geomspace(1.0, 1e-4, 6)) @ V.T, np.float32))
    assert bad.err.flat[0] > 3 * good.err.flat[0]
    assert ref.lipschitz(np.geomspace(1e-9, 1.0, 5), 5) == pytest.approx(3.4445 ** 5, rel=1e-3)
