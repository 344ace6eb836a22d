"""The CPU kernels' float16 conversions (toolkit/backends/half.py) against numpy, bit for bit:
every float16, and the float32 values at and around every rounding boundary (each midpoint
between neighbouring float16 values, one and two float32 ulps either side), the overflow and
underflow thresholds, NaN payloads, and a random sample. ``python tests/test_half.py
--exhaustive`` checks all 2**32 float32 values (minutes; done once when the conversion was
written: 0 mismatches)."""
from __future__ import annotations

import sys

import numba
import numpy as np
from numba.extending import register_jitable

from toolkit.backends.half import half_to_single, single_to_half

_h2s = register_jitable(inline="always")(half_to_single)
_s2h = register_jitable(inline="always")(single_to_half)


@numba.njit(parallel=True)
def _to_single(h, out):
    for i in numba.prange(h.shape[0]):
        out[i] = _h2s(h[i])


@numba.njit(parallel=True)
def _to_half(f, out):
    for i in numba.prange(f.shape[0]):
        out[i] = _s2h(f[i])


def _check_to_half(f):
    out = np.empty(f.shape, np.uint16)
    _to_half(f, out)
    with np.errstate(all="ignore"):
        ref = f.astype(np.float16).view(np.uint16)
    bad = np.nonzero(out != ref)[0]
    assert bad.size == 0, [(hex(f.view(np.uint32)[i]), hex(out[i]), hex(ref[i]))
                           for i in bad[:5]]


def test_every_half_converts_to_single_exactly():
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    out = np.empty(h.shape, np.float32)
    _to_single(h, out)
    ref = h.view(np.float16).astype(np.float32)
    assert np.array_equal(out.view(np.uint32), ref.view(np.uint32))


def test_rounding_boundaries_and_special_values_round_as_numpy():
    h = np.arange(0, 0x7C00, dtype=np.uint16)           # every finite non-negative half
    lo = h[:-1].view(np.float16).astype(np.float32)
    hi = h[1:].view(np.float16).astype(np.float32)
    mid = ((lo.astype(np.float64) + hi.astype(np.float64)) / 2).astype(np.float32)
    bits = np.concatenate([mid.view(np.uint32).astype(np.int64) + d for d in (-2, -1, 0, 1, 2)] +
                          [lo.view(np.uint32).astype(np.int64)]).astype(np.uint32)
    special = np.array([0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000,
                        0x7F7FFFFF, 0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF,
                        0x7F802000, 0x33000000, 0x33000001, 0x32FFFFFF, 0x387FFFFF,
                        0x38800000, 0x00000001, 0x00000000], np.uint32)
    bits = np.concatenate([bits, special])
    bits = np.concatenate([bits, bits | np.uint32(0x80000000)])
    _check_to_half(bits.view(np.float32))


def test_a_random_sample_of_floats_rounds_as_numpy():
    rng = np.random.default_rng(0)
    _check_to_half(rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
                   .view(np.float32))


if __name__ == "__main__" and "--exhaustive" in sys.argv:
    chunk = 1 << 26
    for c in range((1 << 32) // chunk):
        _check_to_half(np.arange(c * chunk, (c + 1) * chunk, dtype=np.uint64)
                       .astype(np.uint32).view(np.float32))
    print("all 2**32 float32 values round to float16 as numpy does")


def test_array_conversions_equal_numpys_in_every_layout():
    """``cpu.to_single`` and ``cpu.to_half_into`` (the kernels that replace numpy's float16
    conversions on the CPU paths) give numpy's bits: every float16, and float32 values around
    the rounding boundaries, overflow and NaN, in C order, Fortran order and strided."""
    from toolkit.backends import cpu
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    assert np.array_equal(cpu.to_single(every).view(np.uint32),
                          every.astype(np.float32).view(np.uint32))
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(1 << 16) * np.exp2(rng.integers(-30, 18, 1 << 16))).astype(
        np.float32)
    x[:6] = [np.inf, -np.inf, np.nan, 65520.0, 65519.996, 2.0 ** -25]
    for a in (x.reshape(256, 256), np.asfortranarray(x.reshape(256, 256)), x[::2]):
        out = np.zeros(a.shape, np.float16, order="F" if a.flags.f_contiguous else "C")
        cpu.to_half_into(out, a)
        with np.errstate(over="ignore"):
            assert np.array_equal(out.view(np.uint16), a.astype(np.float16).view(np.uint16))
        h = a.astype(np.float16)
        assert np.array_equal(cpu.to_single(h).view(np.uint32),
                              h.astype(np.float32).view(np.uint32))
    assert cpu.to_single(x).dtype == np.float32  # not float16: numpy's astype
