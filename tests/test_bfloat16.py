"""The bfloat16 conversions of the CPU kernels (toolkit/backends/bfloat16.py) and the addressed
multi-precision kernel with a bfloat16 weight (``run_rule_addressed_mp(..., weight="bfloat16")``)
against what toolkit.torch does today for a bfloat16 parameter: the float32 master updated by
the toolkit's own step, then rounded into the weight by ``Tensor.to(torch.bfloat16)``.

* Every one of the 65,536 bfloat16 values widens to torch's float32, bit for bit.
* float32 values rounded to bfloat16 as torch rounds them, bit for bit: every rounding boundary
  and its neighbours across the exponents (ties to even up and down, the carry into the
  exponent, overflow to infinity), subnormals, signed zeros, infinities, NaNs of every sign and
  payload, and random bit patterns.
* The kernel: for every optimizer and convention whose step is one rule call (the steady
  path's), float32 master, states and bfloat16 weight equal the toolkit's float32 step on the
  widened gradient followed by torch's rounding, bit for bit, with NaN, infinite, huge and
  subnormal gradients and masters at rounding ties, overflowing and subnormal.
"""
from __future__ import annotations

import numba
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed")
from toolkit.backends import addressed, bfloat16, cpu  # noqa: E402
from toolkit.optimizer import create, specs  # noqa: E402
from toolkit.backends import launches  # noqa: E402

from test_torch_numbers import options  # noqa: E402

_widen = numba.njit(bfloat16.bfloat16_to_single)
_narrow = numba.njit(bfloat16.single_to_bfloat16)


@numba.njit
def _widen_all(h, out):
    for i in range(h.shape[0]):
        out[i] = _widen(h[i])


@numba.njit
def _narrow_all(x, out):
    for i in range(x.shape[0]):
        out[i] = _narrow(x[i])


def _torch_bits(x32):
    """torch's bfloat16 bits of the float32 array ``x32``."""
    return torch.from_numpy(x32).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def test_every_bfloat16_widens_as_torch():
    h = np.arange(1 << 16, dtype=np.uint16)
    out = np.empty(h.size, np.float32)
    _widen_all(h, out)
    theirs = torch.from_numpy(h.view(np.int16)).view(torch.bfloat16).float().numpy()
    assert out.view(np.uint32).tobytes() == theirs.view(np.uint32).tobytes()


def _hard_floats():
    """float32 bit patterns at and around every rounding boundary of every exponent, the
    special values, and random patterns."""
    high = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    low = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x4000, 0xC000], np.uint32)
    bits = (high[:, None] | low[None, :]).reshape(-1)
    rng = np.random.default_rng(3)
    bits = np.concatenate([bits, rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64)
                           .astype(np.uint32)])
    return bits.view(np.float32)


def test_float32_rounds_to_bfloat16_as_torch():
    x = _hard_floats()
    assert np.isnan(x).sum() > 1000 and np.isinf(x).any()
    out = np.empty(x.size, np.uint16)
    _narrow_all(x, out)
    theirs = _torch_bits(x)
    bad = np.flatnonzero(out != theirs)
    assert bad.size == 0, [(hex(int(x.view(np.uint32)[k])), hex(int(out[k])),
                            hex(int(theirs[k]))) for k in bad[:10]]


VECTOR = [(name, conv) for name, spec in specs().items() for conv in spec.conventions
          if create(name).plans_by_scalars]


def _bf16(x32):
    return _torch_bits(np.ascontiguousarray(x32, np.float32))


def _widened(h):
    return torch.from_numpy(h.view(np.int16)).view(torch.bfloat16).float().numpy()


def _edge_values(rng, n):
    """bfloat16 gradients (bits) and float32 masters with the edge values in front."""
    g = _bf16(rng.standard_normal(n).astype(np.float32) * 0.5)
    g[:8] = _bf16(np.array([np.nan, np.inf, -np.inf, 3e38, -3e38, 1e-40, -1e-39, 0.0],
                           np.float32))
    w = rng.standard_normal(n).astype(np.float32)
    w[8:16] = np.array([1.00390625, 1.01171875, -1.00390625, 3.4028235e38, -3.4e38, 1e-40,
                        -1e-38, -0.0], np.float32)   # ties, overflow, subnormal, -0
    return g, w


@pytest.mark.parametrize("name, conv", VECTOR)
def test_the_bfloat16_kernel_is_the_float32_step_rounded_by_torch(name, conv):
    kw = dict(options(name, "float32"), convention=conv)
    rng = np.random.default_rng(9)
    n = 300
    sizes = [n, 7, n]   # the third with lr 0: most rules leave its masters (ties) as they are
    ref = create(name, **kw)
    rows, tensors, expected = [], [], []
    factory = None
    with np.errstate(all="ignore"):
        for i, size in enumerate(sizes):
            g16, w = _edge_values(rng, size) if i == 0 else (
                _bf16(rng.standard_normal(size).astype(np.float32)),
                rng.standard_normal(size).astype(np.float32))
            if i == 2:  # masters at rounding ties of every kind, the gradients finite
                w = (rng.integers(0, 1 << 16, size, dtype=np.uint32) << np.uint32(16)
                     | np.uint32(0x8000)).view(np.float32)
                w[~np.isfinite(w)] = 1.00390625
            g32 = _widened(g16)
            state = ref.create_state(i, w.copy())
            arrays = [np.array(a) for a in ref.state_arrays(state)]
            t, lr, wd = ref.step_scalars([i])
            t, lr, wd = int(t[0]), float(lr[0]), float(wd[0])
            if i == 2 and not ref.requires_positive_lr:
                lr = 0.0
            master = w.copy()
            (call,) = launches.collect(ref.step_launches(i, master, g32, state, t, lr, wd),
                                       cpu.LAUNCHER)
            assert call.kind == "rule"
            factory = call.factory
            rows.append(call.hyper)
            # today's path: the toolkit's float32 step on the master (update's launch), then
            # torch's rounding
            ref.launch_step(i, master, g32, state, t, lr, wd, cpu.LAUNCHER)
            expected.append((master, [np.array(a) for a in ref.state_arrays(state)],
                             _bf16(master)))
            weight16 = _bf16(w)
            tensors.append((w.copy(), g16, [a.copy() for a in arrays], weight16))
        table = np.ones((len(sizes), 1 + len(rows[0])), np.float32)
        table[:, 1:] = np.array(rows, np.float64)
        ptrs = np.array([[m.ctypes.data, g.ctypes.data] + [a.ctypes.data for a in states]
                         + [h.ctypes.data] for m, g, states, h in tensors], np.int64)
        addressed.run_rule_addressed_mp(factory, ptrs, np.array(sizes, np.int64), table,
                                        weight="bfloat16")
    for (m, _, states, h), (m_ref, states_ref, h_ref) in zip(tensors, expected):
        assert m.view(np.uint32).tobytes() == m_ref.view(np.uint32).tobytes()
        for a, b in zip(states, states_ref):
            assert a.tobytes() == b.tobytes()
        assert h.tobytes() == h_ref.tobytes(), np.flatnonzero(h != h_ref)[:10]


def test_an_unknown_weight_type_is_refused():
    with pytest.raises(ValueError, match="weight must be"):
        addressed.run_rule_addressed_mp(None, np.zeros((0, 3), np.int64),
                                        np.zeros(0, np.int64), np.zeros((0, 2), np.float32),
                                        weight="float8")
