"""LAMB's two-pass step (docs/optimizers/lamb.md): the first pass writes nothing and reduces
``|w|^2`` and ``|u|^2`` in the documented fixed order; the step size is MXNet's float32
trust ratio ("mxnet") or the float64 one ("guide"). The generic checks against the oracle are in
tests/test_optimizers_vs_reference.py, MXNet's own numbers in tests/test_mxnet_parity_more.py."""
from __future__ import annotations

import numpy as np
import pytest

from toolkit import optimizer
from toolkit.backends import cpu, order
from toolkit.optimizers import lamb


def documented_sum(x):
    """``sum x^2`` in float64 as docs/optimizers/lamb.md describes it: chunks of
    ``DIRECTION_CHUNK`` elements; in a chunk element ``j`` goes into running sum
    ``j % DIRECTION_LANES`` in element order, the sums are added pairwise
    (``s[l] += s[l + h]``, ``h = LANES/2, ..., 1``); the chunks are added in order."""
    lanes, chunk = order.DIRECTION_LANES, order.DIRECTION_CHUNK
    total = 0.0
    for a in range(0, max(x.size, 1), chunk):
        s = np.zeros(lanes)
        for j, v in enumerate(x[a:a + chunk]):
            s[j % lanes] += float(v) * float(v)
        h = lanes // 2
        while h > 0:
            s[:h] += s[h:2 * h]
            h //= 2
        total += s[0]
    return total


@pytest.mark.parametrize("n", [1, 255, 257, 4096, 4097, 40000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_first_pass_writes_nothing_and_sums_in_the_documented_order(n, dtype):
    rng = np.random.default_rng(n)
    w = (rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3, n)).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    m, v = np.full(n, 0.25, dtype), np.full(n, 0.5, dtype)
    opt = optimizer.create("lamb", wd=0.01)
    first = opt._direction_pass(2, opt.wd)
    before = [a.copy() for a in (w, g, m, v)]
    w2, u2 = cpu.LAUNCHER.direction_norms(first, w, g, (m, v))
    assert all(np.array_equal(a, b) for a, b in zip((w, g, m, v), before))
    assert w2 == documented_sum(w)
    # u as the second pass forms it (the same rule, the same inputs)
    rule = lamb.mxnet_direction_rule(np.dtype(dtype).type)
    hp = tuple(np.array(first.hyper, dtype))
    u = np.array([rule(w[i], g[i], m[i], v[i], hp)[0] for i in range(n)], dtype)
    assert u2 == documented_sum(u)
    # and the step it scales: the apply rule writes the moments the direction rule formed
    apply = lamb.mxnet_apply_rule(np.dtype(dtype).type)
    k = np.dtype(dtype).type(0.001)
    for i in range(0, n, max(n // 7, 1)):
        w1, m1, v1 = apply(w[i], g[i], m[i], v[i], hp[:-1] + (k,))
        _, m2, v2 = rule(w[i], g[i], m[i], v[i], hp)
        assert (m1, v1) == (m2, v2) and w1 == w[i] - k * u[i]


@pytest.mark.parametrize("convention", ["mxnet", "guide"])
def test_zero_weight_or_direction_gives_ratio_one(convention):
    opt = optimizer.create("lamb", learning_rate=0.5, convention=convention)
    assert opt.step_size(0.5, 0.0, 4.0) == 0.5
    assert opt.step_size(0.5, 9.0, 0.0) == 0.5
    w = np.zeros(3)
    s = opt.create_state(0, w)
    opt.update(0, w, np.array([1.0, -1.0, 0.0]), s)  # |w| = 0: the plain step lr*u
    u = 1.0 / (1.0 + 1e-6)
    np.testing.assert_allclose(w, [-0.5 * u, 0.5 * u, 0.0], rtol=1e-6)


def test_bounds_clamp_the_weight_norm_before_the_zero_test():
    """``r1 = min(max(|w|, lower), upper)``, and a lower bound scales a zero weight (MXNet)."""
    opt = optimizer.create("lamb", lower_bound=2.0, upper_bound=3.0)
    assert opt.step_size(1.0, 0.0, 4.0) == 1.0        # r1 = max(0, 2) = 2, r2 = 2
    assert opt.step_size(1.0, 100.0, 4.0) == 1.5      # r1 = min(10, 3)
    assert opt.step_size(1.0, 6.25, 4.0) == 1.25      # inside the bounds
    off = optimizer.create("lamb", lower_bound=0.0, upper_bound=0.0)  # 0: no bound
    assert off.step_size(1.0, 6.25, 4.0) == 1.25


def test_mxnet_trust_ratio_is_float32_arithmetic():
    opt = optimizer.create("lamb", learning_rate=0.1)
    w2, u2 = 2.0, 3.0
    f = np.float32
    expect = float(f(0.1)) * float(np.sqrt(f(w2)) / np.sqrt(f(u2)))
    assert opt.step_size(opt.lr, w2, u2) == expect
    guide = optimizer.create("lamb", learning_rate=0.1, convention="guide")
    assert guide.step_size(0.1, w2, u2) == 0.1 * (np.sqrt(w2) / np.sqrt(u2))


@pytest.mark.parametrize("n", [1, 4097, 1 << 16])
def test_first_pass_widens_a_float16_gradient_on_load(n):
    """A float32 master's first pass reads the float16 gradient itself (no float32 copy), with
    the sums of the widened copy, bit for bit, serial and parallel (2^16 elements)."""
    rng = np.random.default_rng(n)
    w = rng.standard_normal(n).astype(np.float32)
    g16 = (rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 4, n)).astype(np.float16)
    g16[::7] = 0
    m, v = rng.standard_normal(n).astype(np.float32), rng.uniform(0, 1, n).astype(np.float32)
    opt = optimizer.create("lamb", wd=0.01, multi_precision=True)
    first = opt._direction_pass(3, opt.wd)
    widened = cpu.LAUNCHER.direction_norms(first, w, g16.astype(np.float32), (m, v))
    assert cpu.LAUNCHER.direction_norms(first, w, g16, (m, v)) == widened
    launcher = cpu.MirrorLauncher(w, w.astype(np.float16))
    assert launcher.direction_norms(first, w, g16, (m, v)) == widened
    assert launcher._g32 is None  # no float32 copy of the gradient was made
