"""The kernels' own float64 ``log`` and ``cos`` (toolkit/backends/noise.py) and the draws made with
them.

``log53`` and ``cos_0_2pi`` replace ``math.log`` and ``math.cos`` in the kernels' Box-Muller
transform so that the CPU loop vectorises (llvmlite has no vector libm). Held here: their
constants against independent high-precision values; at most 1 ulp from ``math.log`` /
``math.cos`` (the specification's, reference/noise.py) over millions of draws, near every
boundary of their argument reductions and at the edge cases; compiled code bit-identical to the
Python source (what the CUDA simulator runs); the CPU draws within 4 ulp of the specification;
and the compiled loop vectorised, with no call left to a scalar ``log`` or ``cos``.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal, getcontext
from fractions import Fraction

import numba
import numpy as np
import pytest
from hypothesis import example, given, target
from hypothesis import strategies as st

from reference import noise as spec
from toolkit import optimizer
from toolkit.backends import noise
from toolkit.backends.jit import COMPILE_OPTIONS, inlined

TWO53 = 2.0 ** 53


def _ulps(got, want):
    """|got - want| in units of the spacing of the float64 ``want``, 0 where equal."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    d = np.abs(got - want) / np.spacing(np.abs(want))
    return np.where(got == want, 0.0, d)


def _pi(bits):
    """pi as a Fraction within 2**-bits (Machin: pi = 16 atan(1/5) - 4 atan(1/239)), integers."""
    one = 1 << (bits + 16)

    def atan_inv(x):
        total, term, k, sign = 0, one // x, 1, 1
        while term:
            total += sign * (term // k)
            term //= x * x
            k += 2
            sign = -sign
        return total
    return Fraction(16 * atan_inv(5) - 4 * atan_inv(239), one)


def test_constants():
    """ln 2 and pi/2 in parts, checked against values computed here to far more bits; the parts
    have the trailing zero bits that make the products in the reductions exact."""
    getcontext().prec = 80
    ln2 = Fraction(Decimal(2).ln())
    assert abs(Fraction(noise._LN2_HI) + Fraction(noise._LN2_LO) - ln2) < Fraction(1, 2 ** 100)
    assert (Fraction(noise._LN2_HI) * 2 ** 42).denominator == 1          # 42 bits: n * hi exact
    pio2 = _pi(200) / 2
    parts = [Fraction(getattr(noise, f"_PIO2_{j}")) for j in (1, 2, 3, 4)]
    assert abs(sum(parts) - pio2) < Fraction(1, 2 ** 140)
    for p, q in zip(parts[:3], (26, 53, 86)):
        assert (p * 2 ** q).denominator == 1 and p * 2 ** q < 2 ** 33      # <= 33 bits
    assert noise._SQRT2 == math.sqrt(2.0)


def test_polynomial_errors():
    """The minimax polynomials against the functions they approximate, in 200-bit arithmetic
    (tests/noise_coefficients.py): the weighted errors of the derivation, 2**-57.9 (log's R),
    2**-57.3 (sin), 2**-59.9 (cos), each a small fraction of an ulp of the result."""
    pytest.importorskip("mpmath")
    from noise_coefficients import error_bound
    coefficients = {"log": [getattr(noise, f"_LOG{j}") for j in range(1, 8)],
                    "sin": [getattr(noise, f"_SIN{j}") for j in range(1, 7)],
                    "cos": [getattr(noise, f"_COS{j}") for j in range(1, 7)]}
    for name, bound in (("log", 2.0 ** -57.9), ("sin", 2.0 ** -57.3), ("cos", 2.0 ** -59.9)):
        assert error_bound(name, coefficients[name], points=3000) <= bound, name


# --------------------------------------------------------------------------------------------
# log53(m) = log(m * 2**-53), m an integer in [1, 2**53]
# --------------------------------------------------------------------------------------------
def test_log_edge_cases():
    one = noise.log53(TWO53)                      # u1 = 1: log is +0 exactly
    assert one == 0.0 and math.copysign(1.0, one) == 1.0
    assert noise.log53(1.0) == math.log(2.0 ** -53) == -53 * math.log(2.0)
    ms = {1.0, 2.0, 3.0, TWO53 - 1, TWO53 - 2}
    for k in range(54):
        for m in (2.0 ** k - 1, 2.0 ** k, 2.0 ** k + 1, math.floor(2.0 ** k * math.sqrt(2)),
                  math.ceil(2.0 ** k * math.sqrt(2))):
            if 1 <= m <= TWO53:
                ms.add(m)
    ms = sorted(ms)
    got = [noise.log53(m) for m in ms]
    want = [math.log(m * 2.0 ** -53) for m in ms]
    assert _ulps(got, want).max() <= 1, [(m, g, w) for m, g, w in zip(ms, got, want) if g != w]
    for k in range(54):                           # exact powers of two: n * ln 2 rounded once
        assert noise.log53(2.0 ** k) == math.log(2.0 ** (k - 53))


@given(st.integers(1, 2 ** 53))
@example(1).via("u1 = 2**-53")
@example(2 ** 53).via("u1 = 1")
@example(6369051672525773).via("x = fl(sqrt(2)): the largest x not halved")
@example(6369051672525774).via("the smallest x halved")
def test_log_within_one_ulp(m):
    got, want = noise.log53(float(m)), math.log(m * 2.0 ** -53)
    err = float(_ulps(got, want))
    target(err)
    assert err <= 1


# --------------------------------------------------------------------------------------------
# cos_0_2pi(x), x = 2*pi*u2 rounded as the specification rounds it, u2 = k * 2**-53 in [0, 1)
# --------------------------------------------------------------------------------------------
def _x(k):
    return 2.0 * math.pi * (float(k) * 2.0 ** -53)


def test_cos_edge_cases():
    assert noise.cos_0_2pi(0.0) == 1.0
    ks = set()
    for j in range(9):                            # quadrant (j even) and octant (j odd) boundaries
        base = j << 50                            # u2 = j/8
        ks.update(k for k in range(base - 300, base + 301) if 0 <= k < 2 ** 53)
    ks.update((2 ** 53 - 1, 1, 2, 3))
    ks = sorted(ks)
    got = [noise.cos_0_2pi(_x(k)) for k in ks]
    want = [math.cos(_x(k)) for k in ks]
    assert _ulps(got, want).max() <= 1
    # cos at the zeros of the cosine: u2 = 1/4 and 3/4 give cos(fl(2*pi)/4) = 6.1e-17 etc.
    for k in (2 ** 51, 3 * 2 ** 51):
        assert abs(noise.cos_0_2pi(_x(k))) < 1e-15
        assert _ulps(noise.cos_0_2pi(_x(k)), math.cos(_x(k))) <= 1


@given(st.integers(0, 2 ** 53 - 1))
@example(0).via("u2 = 0")
@example(2 ** 51).via("u2 = 1/4: x = fl(pi/2)")
@example(2 ** 53 - 1).via("largest u2")
def test_cos_within_one_ulp(k):
    got, want = noise.cos_0_2pi(_x(k)), math.cos(_x(k))
    err = float(_ulps(got, want))
    target(err)
    assert err <= 1


# --------------------------------------------------------------------------------------------
# compiled: millions of draws, bit-identical to the Python source, vectorised
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compiled():
    """log53 and cos_0_2pi compiled as the CPU backend compiles them, in loops over arrays, and
    the same loops with numba's math.log / math.cos (the same libm as Python's math)."""
    opts = dict(error_model="numpy", fastmath=False)
    log_, cos_ = inlined(noise._fresh(noise.log53)), inlined(noise._fresh(noise.cos_0_2pi))

    @numba.njit(**opts)
    def ours(m, x, out_log, out_cos):
        for i in range(m.shape[0]):
            out_log[i] = log_(m[i])
            out_cos[i] = cos_(x[i])

    @numba.njit(**opts)
    def libm(m, x, out_log, out_cos):
        for i in range(m.shape[0]):
            out_log[i] = math.log(m[i] * 2.0 ** -53)
            out_cos[i] = math.cos(x[i])

    def run(fn, m, x):
        a, b = np.empty_like(m), np.empty_like(x)
        fn(m, x, a, b)
        return a, b
    return lambda m, x: run(ours, m, x), lambda m, x: run(libm, m, x)


def _inputs(n, seed):
    rng = np.random.default_rng(seed)
    m = np.concatenate([(rng.integers(0, 2 ** 53, n, dtype=np.uint64) + 1).astype(np.float64),
                        np.floor(2.0 ** rng.uniform(0, 53, n))])      # uniform and log-uniform
    k = np.concatenate([rng.integers(0, 2 ** 53, n, dtype=np.uint64)]
                       + [np.arange(max((j << 50) - 50_000, 0), (j << 50) + 50_000,
                                    dtype=np.uint64) for j in range(8)])
    k = np.resize(k, m.shape[0])
    x = 2.0 * math.pi * (k.astype(np.float64) * 2.0 ** -53)
    return m, x


def test_millions_of_draws_within_one_ulp(compiled):
    ours, libm = compiled
    m, x = _inputs(2_000_000, 7)
    got_log, got_cos = ours(m, x)
    want_log, want_cos = libm(m, x)
    assert _ulps(got_log, want_log).max() <= 1
    assert _ulps(got_cos, want_cos).max() <= 1


def test_compiled_equals_python_source(compiled):
    """The CPU's compiled functions and the Python source (which the CUDA simulator runs) give
    the same bits: no contraction, no reassociation."""
    ours, _ = compiled
    m, x = _inputs(2000, 11)
    got_log, got_cos = ours(m, x)
    assert [float(v) for v in got_log] == [noise.log53(float(v)) for v in m]
    assert [float(v) for v in got_cos] == [noise.cos_0_2pi(float(v)) for v in x]


def _cpu_draws(seed, index, n):
    """Draws 0..n-1 of SGLD's noise made by the CPU kernel (lr = 1 on a zero weight: w = z)."""
    w = np.zeros(n)
    optimizer.SGLD(learning_rate=1.0, seed=seed).update(index, w, np.zeros(n), None)
    return w


def test_cpu_draws_equal_the_python_generator():
    """The CPU kernel's draws, serial and parallel, are the Python evaluation of the generator
    source bit for bit (the CUDA simulator's numbers)."""
    normal = noise.generator(lambda fn: fn, "python")
    key = np.uint64(noise.stream_key(31, 2, 1))
    for n in (300, 1 << 16):                      # below and above NOISE_PARALLEL_THRESHOLD
        cpu = _cpu_draws(31, 2, n)
        idx = np.unique(np.linspace(0, n - 1, 300).astype(np.int64))
        with np.errstate(over="ignore"):
            py = [normal(key, np.uint64(i)) for i in idx]
        assert [float(v) for v in cpu[idx]] == [float(v) for v in py]


def test_cpu_draws_within_four_ulp_of_the_specification():
    """log and cos within 1 ulp each, through sqrt and the product: at most 4 ulp of z (the bound
    the CUDA tests use; 3 measured over 10**7 draws)."""
    z = spec.normal(2024, 5, 1, 1_000_000)          # first update: step t = 1
    cpu = _cpu_draws(2024, 5, 1_000_000)
    assert _ulps(cpu, z).max() <= 4


def test_loop_vectorises():
    """The noise loop compiled with the backend's options is vectorised: no call to a scalar
    log or cos remains and the arithmetic is on vectors of doubles."""
    normal = noise.generator(inlined, "cpu")
    opts = {k: v for k, v in COMPILE_OPTIONS.items() if k != "cache"}

    @numba.njit(**opts)
    def loop(out, key):
        for i in range(out.shape[0]):
            out[i] = normal(key, np.uint64(i))
    out = np.empty(64)
    loop(out, np.uint64(5))
    ir = loop.inspect_llvm(loop.signatures[0])
    assert not re.search(r"call[^\n]*@(llvm\.)?(log|cos)\b", ir)
    assert re.search(r"<([2-9]|\d\d) x double>", ir)
    assert re.search(r"fdiv <\d+ x double>", ir) and re.search(r"sqrt\.v\d+f64", ir)


@pytest.mark.parametrize("shape", [(100,), (256, 256), (50, 100)])
def test_multi_precision_noise_in_one_pass(shape, monkeypatch):
    """float16 SGLD with multi_precision: one kernel widens the float16 gradient on load and
    writes the float16 weight rounded from the new master, with the same numbers as the float32
    update of the master on the widened gradient followed by rounding."""
    from toolkit.backends import cpu
    calls = []
    real = cpu.run_noise_mp
    monkeypatch.setattr(cpu, "run_noise_mp", lambda *a: (calls.append(1), real(*a)))
    rng = np.random.default_rng(0)
    w16 = rng.standard_normal(shape).astype(np.float16)
    g16 = rng.standard_normal(shape).astype(np.float16)
    kw = dict(learning_rate=0.01, seed=3, wd=0.1, clip_gradient=0.5)
    mp, plain = optimizer.SGLD(multi_precision=True, **kw), optimizer.SGLD(**kw)
    state = mp.create_state_multi_precision(0, w16)
    got = w16.copy()
    master = w16.astype(np.float32)
    for _ in range(3):
        mp.update_multi_precision(0, got, g16, state)
        plain.update(0, master, g16.astype(np.float32), None)
        assert np.array_equal(mp.split_master(state)[0], master)
        assert np.array_equal(got, master.astype(np.float16))
    assert len(calls) == 3
