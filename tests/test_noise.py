"""reference/noise.py: the counter-based Gaussian generator that makes SGLD reproducible.

Known values (published SplitMix64 outputs, an independent pure-Python transcription of the
documented construction, pinned first draws), the counter-based properties (a draw depends only
on its key and position), independence of seeds, streams and steps, and the moments of the
distribution. The statistical checks run on fixed keys, so they are deterministic; each bound is
set so that a correct generator would fail it with probability about 1e-6 or less (5 standard
errors, or the central 1 - 1e-6 of an exact distribution), while the errors they guard against
(a wrong scale, a shared or shifted stream, a biased transform) fail them by far.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from reference import noise

M64 = (1 << 64) - 1


def _mix(x):
    """SplitMix64's finaliser, written from its published definition with Python ints."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def _normal_python(seed, stream, step, size):
    """The documented construction (module docstring of reference/noise.py), element by element
    with Python ints and math."""
    key = _mix(_mix(_mix(seed & M64) ^ stream) ^ step)
    out = []
    for i in range(size):
        h1 = _mix((key + 2 * i) & M64)
        h2 = _mix((key + 2 * i + 1) & M64)
        u1 = ((h1 >> 11) + 1) * 2.0 ** -53
        u2 = (h2 >> 11) * 2.0 ** -53
        out.append(math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2))
    return np.array(out)


def test_splitmix64_published_values():
    """The SplitMix64 generator seeded with 0 outputs mix(0), mix(gamma), mix(2*gamma), ...:
    0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F (the reference sequence)."""
    gamma = 0x9E3779B97F4A7C15
    expected = [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    for k, e in enumerate(expected):
        assert noise.splitmix64((k * gamma) & M64) == e
        assert noise.splitmix64(np.array([(k * gamma) & M64], dtype=np.uint64))[0] == e


@given(st.lists(st.integers(0, M64), min_size=1, max_size=20))
def test_splitmix64_array_equals_int(xs):
    arr = noise.splitmix64(np.array(xs, dtype=np.uint64))
    assert [int(a) for a in arr] == [noise.splitmix64(x) for x in xs] == [_mix(x) for x in xs]


def test_stream_key():
    assert noise.stream_key(0, 0, 0) == _mix(_mix(_mix(0)))
    assert noise.stream_key(5, 3, 9) == _mix(_mix(_mix(5) ^ 3) ^ 9)
    assert noise.stream_key(2**64 + 5, 3, 9) == noise.stream_key(5, 3, 9)   # seed modulo 2**64
    for bad in ((-1, 0, 0), (0, -1, 0), (0, 0, -1), (0.5, 0, 0), (0, 1.5, 0)):
        with pytest.raises(ValueError):
            noise.stream_key(*bad)
    keys = {noise.stream_key(s, st_, t) for s in range(4) for st_ in range(4) for t in range(4)}
    assert len(keys) == 64


def test_first_values_pinned():
    """The first draws of two keys, pinned (a change of the specification must be deliberate:
    every backend implements these numbers)."""
    a = noise.normal(0, 0, 1, 4)
    b = noise.normal(12345, 7, 3, 3)
    pinned_a = [0.37649691093446686, -1.5884905489711552, -0.8273625753891728, 1.1628913952618802]
    np.testing.assert_allclose(a, pinned_a, rtol=1e-14, atol=0)   # log/cos: last-ulp freedom
    np.testing.assert_allclose(b, _normal_python(12345, 7, 3, 3), rtol=1e-15, atol=0)


@given(seed=st.integers(0, 2**64 - 1), stream=st.integers(0, 2**20), step=st.integers(0, 10**6),
       size=st.integers(0, 40))
def test_matches_independent_transcription(seed, stream, step, size):
    z = noise.normal(seed, stream, step, size)
    assert z.dtype == np.float64 and z.shape == (size,)
    # log and cos may differ in the last ulp between numpy and math
    np.testing.assert_allclose(z, _normal_python(seed, stream, step, size), rtol=1e-13,
                               atol=1e-15)


@given(seed=st.integers(0, 2**32), stream=st.integers(0, 100), step=st.integers(0, 1000),
       n=st.integers(1, 300), m=st.integers(0, 300))
def test_counter_based_prefix(seed, stream, step, n, m):
    """Draw i depends only on the key and i: a longer request extends a shorter one."""
    short = noise.normal(seed, stream, step, n)
    long = noise.normal(seed, stream, step, n + m)
    assert np.array_equal(short, long[:n])


def test_finite_and_bounded():
    z = noise.normal(3, 1, 1, 1_000_000)
    assert np.all(np.isfinite(z))
    # u1 >= 2**-53, so |z| <= sqrt(-2 log 2**-53) = 8.57...
    assert np.max(np.abs(z)) <= math.sqrt(-2 * math.log(2.0 ** -53))


N = 1_000_000


@pytest.fixture(scope="module")
def big():
    return noise.normal(2024, 0, 1, N)


def test_moments(big):
    z = big
    se = 1 / math.sqrt(N)
    assert abs(z.mean()) < 5 * se
    lo, hi = stats.chi2.ppf([0.5e-6, 1 - 0.5e-6], N - 1)
    assert lo < (N - 1) * z.var(ddof=1) < hi
    assert abs(stats.skew(z)) < 5 * math.sqrt(6 / N)
    assert abs(stats.kurtosis(z)) < 5 * math.sqrt(24 / N)          # excess kurtosis 0
    # tail mass beyond 3 sigma: binomial(N, p), p = 2*Phi(-3)
    p = 2 * stats.norm.cdf(-3)
    k = np.sum(np.abs(z) > 3)
    assert abs(k - N * p) < 5 * math.sqrt(N * p * (1 - p))
    assert stats.kstest(z, "norm").pvalue > 1e-6


def test_independence_of_keys(big):
    """Draws of neighbouring seeds, streams and steps are uncorrelated (|r| < 5/sqrt(N)), and so
    are neighbouring elements of one draw."""
    bound = 5 / math.sqrt(N)
    others = {
        "stream+1": noise.normal(2024, 1, 1, N),
        "step+1": noise.normal(2024, 0, 2, N),
        "seed+1": noise.normal(2025, 0, 1, N),
        "step 0": noise.normal(2024, 0, 0, N),
    }
    for name, o in others.items():
        r = np.corrcoef(big, o)[0, 1]
        assert abs(r) < bound, (name, r)
        assert not np.any(big == o), name
        # squares too: a shared magnitude with random signs would pass the linear test
        r2 = np.corrcoef(big * big, o * o)[0, 1]
        assert abs(r2) < bound, (name, r2)
    for lag in (1, 2, 7):
        r = np.corrcoef(big[:-lag], big[lag:])[0, 1]
        assert abs(r) < bound, (lag, r)
    # a stream is not a shifted copy of another (the key is mixed, not added)
    s1 = noise.normal(2024, 1, 1, 1000)
    for shift in range(1, 4):
        assert not np.array_equal(big[shift:shift + 1000], s1)


def test_independent_across_many_small_keys():
    """One draw per (stream, step) over a grid: the collection is standard normal too (the keys,
    not only the positions, spread the numbers)."""
    z = np.array([noise.normal(7, s, t, 1)[0] for s in range(200) for t in range(200)])
    n = z.size
    assert abs(z.mean()) < 5 / math.sqrt(n)
    lo, hi = stats.chi2.ppf([0.5e-6, 1 - 0.5e-6], n - 1)
    assert lo < (n - 1) * z.var(ddof=1) < hi
    assert stats.kstest(z, "norm").pvalue > 1e-6
