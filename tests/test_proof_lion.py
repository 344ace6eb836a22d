"""Proof that Lion's update is sign-valued before weight decay (Chen et al. 2023, Algorithm 2,
line 6: ``theta_t = theta_{t-1} - lr*(sign(c_t) + lambda*theta_{t-1})``), in the reference and in
every kernel.

With ``wd = 0`` the step of every element is ``-lr*sign(c_t)``: ``(w_old - w_new)/lr`` is -1, 0
or 1, and it is the sign of ``c_t = beta1*m_{t-1} + (1 - beta1)*g_t`` formed from the state the
step started from. The check is exact, not within a tolerance: ``lr`` is a power of two and the
weights are integer multiples of it far below ``2^24*lr``, so ``w - lr*s`` and the division are
exact in float32 and float64 alike; any other step (an AdamW-like scaling, a lost sign, a
momentum used in place of the interpolation) moves an element by something else.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from reference import lion as ref_lion
from reference.error_bound import track
from toolkit import optimizer, oracle


@st.composite
def trajectories(draw):
    n = draw(st.integers(1, 40))
    steps = draw(st.integers(1, 5))
    lr = 2.0 ** -draw(st.integers(0, 20))
    k = np.array(draw(st.lists(st.integers(-2 ** 20, 2 ** 20), min_size=n, max_size=n)),
                 dtype=np.float64)
    grads = [np.array(draw(st.lists(st.floats(-1e3, 1e3, width=32), min_size=n, max_size=n)),
                      dtype=np.float64) for _ in range(steps)]
    beta1 = draw(st.sampled_from([0.0, 0.5, 0.9, 0.95, 0.99]))
    beta2 = draw(st.sampled_from([0.0, 0.9, 0.98, 0.99, 0.999]))
    return k * lr, grads, lr, beta1, beta2


def _signs_of_c(m, g, beta1):
    return np.sign(beta1 * m + (1.0 - beta1) * g)


@settings(max_examples=60, deadline=None)
@given(trajectories())
def test_reference_update_is_the_sign_of_the_interpolation(case):
    w, grads, lr, beta1, beta2 = case
    state = ref_lion.init_state(w)
    for t, g in enumerate(grads, 1):
        w_new, new = ref_lion.step(w, g, state, t=t, lr=lr, beta1=beta1, beta2=beta2)
        u = (w - w_new) / lr
        assert set(np.unique(u)) <= {-1.0, 0.0, 1.0}
        np.testing.assert_array_equal(u, _signs_of_c(state["mean"], g, beta1))
        w, state = w_new, new


@settings(max_examples=40, deadline=None)
@given(trajectories(), st.sampled_from(["float32", "float64"]))
def test_kernel_update_is_sign_valued(case, dtype):
    w0, grads, lr, beta1, beta2 = case
    opt = optimizer.create("lion", learning_rate=lr, beta1=beta1, beta2=beta2, backend="cpu")
    w = w0.astype(dtype)
    state = opt.create_state(0, w)
    for g in grads:
        g = g.astype(dtype)
        m_before = np.array(state, dtype=np.float64)
        w_before = w.copy()
        opt.update(0, w, g, state)
        u = (w_before.astype(np.float64) - w.astype(np.float64)) / lr
        assert set(np.unique(u)) <= {-1.0, 0.0, 1.0}
        # the sign is that of c formed in the weight's precision (a rounding may zero a tiny c)
        f = np.dtype(dtype).type
        c = f(beta1) * m_before.astype(dtype) + (f(1.0) - f(beta1)) * g
        np.testing.assert_array_equal(u, np.sign(c.astype(np.float64)))


def test_exact_zeros_stay_exact_in_the_bound():
    """``0*y`` and ``x + 0`` are exact in every precision: the bound keeps an exact zero's error
    at 0, so ``sign`` of it is no near tie (the hole a review found: the smallest subnormal added
    by every rounding made each exact zero a tie, and the element unchecked from then on)."""
    z = track(np.zeros(3), np.float32)
    c = 0.9 * z + (1.0 - 0.9) * z
    assert np.all(c.err == 0) and not np.any(np.sign(c).tie)
    x = track(np.array([1.0, -2.0, 0.5]), np.float32) * 0.3
    assert np.array_equal((x + z).err, x.err) and np.array_equal((x - z).err, x.err)


def _sign_zero_is_one(w0, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2):
    """Lion whose sign maps 0 to 1 (``np.where(c >= 0, 1, -1)``), a common mistake."""
    w, m = w0.copy(), np.zeros_like(w0)
    f = w.dtype.type

    def step(g):
        g = f(rescale_grad) * g
        if clip_gradient is not None:
            g = np.clip(g, -f(clip_gradient), f(clip_gradient))
        c = f(beta1) * m + (f(1) - f(beta1)) * g
        w[...] = w - f(learning_rate) * (np.where(c >= 0, f(1), f(-1)) + f(wd) * w)
        m[...] = f(beta2) * m + (f(1) - f(beta2)) * g
        return w
    return step


def test_a_sign_of_zero_that_is_one_fails_at_one_example():
    for seed in (0, 1, 2):
        r = oracle.verify(_sign_zero_is_one, "lion", examples=1, seed=seed)
        assert not r.passed, r.summary
