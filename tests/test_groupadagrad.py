"""GroupAdaGrad beyond the generic matrix (tests/test_optimizers_vs_reference.py): the oracle
against an independent row-by-row formulation, the row kernel's interface (``_rows_step``: all
rows, listed rows, no rows, either memory order, serial and parallel), and the two MXNet paths'
preprocessing in the reference. MXNet's own numbers: tests/test_mxnet_parity_groupadagrad.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

import reference.groupadagrad as ref
from toolkit import optimizer
from toolkit.backends import cpu, jit, launches


def _by_rows(w, g, h, lr, eps, rs=1.0, c=None):
    """GroupAdaGrad written out row by row with Python floats (math.fsum: an exact row sum)."""
    w, h = w.copy(), h.copy()
    for r in range(w.shape[0]):
        p = [rs * x for x in g[r]]
        if c is not None:
            p = [min(max(x, -c), c) for x in p]
        h[r, 0] = h[r, 0] + math.fsum(x * x for x in p) / len(p)
        for j, x in enumerate(p):
            w[r, j] = w[r, j] - lr * x / math.sqrt(h[r, 0] + eps)
    return w, h


@pytest.mark.parametrize("c", [None, 0.7])
def test_guide_reading_is_the_row_by_row_formula(c):
    rng = np.random.default_rng(1)
    w, h = rng.standard_normal((4, 5)), np.zeros((4, 1))
    for _ in range(3):
        g = rng.standard_normal((4, 5)) * 10.0 ** rng.uniform(-2, 2, (4, 5))
        w_ref, st = ref.step(w, g, {"history": h}, t=1, lr=0.3, eps=1e-4, rescale_grad=0.5,
                             clip_gradient=c, convention="guide")
        w_by, h_by = _by_rows(w, g, h, 0.3, 1e-4, 0.5, c)
        np.testing.assert_allclose(w_ref, w_by, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(st["history"], h_by, rtol=1e-14)
        w, h = w_ref, st["history"]


def test_reference_paths_differ_only_in_preprocessing():
    rng = np.random.default_rng(2)
    w, g, h = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), np.zeros((3, 1))
    kw = dict(t=1, lr=0.1, rescale_grad=0.7, eps=1e-3)
    # clip_gradient=0: the dense path clips every gradient to 0, the row-sparse path does not clip
    dense, _ = ref.step(w, g, {"history": h}, clip_gradient=0.0, **kw)
    sparse, _ = ref.step(w, g, {"history": h}, clip_gradient=0.0, row_sparse=True, **kw)
    assert np.array_equal(dense, w) and not np.array_equal(sparse, w)
    # the row-sparse path's scalars are float32 fields; without rounding it is the dense formula
    exact, _ = ref.step(w, g, {"history": h}, clip_gradient=None, row_sparse=True,
                        hyper_f32=False, **kw)
    plain, _ = ref.step(w, g, {"history": h}, clip_gradient=None, **kw)
    assert np.array_equal(exact, plain)
    with pytest.raises(ValueError, match="wd must be 0"):
        ref.step(w, g, {"history": h}, wd=0.1, **kw)
    with pytest.raises(ValueError, match="history must have shape"):
        ref.step(w, g, {"history": np.zeros((3, 4))}, **kw)


def _rows_step(opt, w, values, rows, h):
    t, lr, wd = opt.next_step(0)[:3]
    launches.run(opt._rows_step(0, w, values, rows, h, t, lr, wd), cpu.LAUNCHER)
    opt._commit_count(0, t)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rows_step_all_listed_none_and_either_order(dtype):
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((6, 7)).astype(dtype)
    g = rng.standard_normal((6, 7)).astype(dtype)
    opt = optimizer.create("groupadagrad", learning_rate=0.1, clip_gradient=0.5)
    # rows=None and every row listed: the same step, bit for bit, as update
    a, b, c = w0.copy(), w0.copy(), w0.copy()
    ha, hb, hc = (opt.create_state(0, w0) for _ in range(3))
    opt.update(0, a, g, ha)
    _rows_step(opt, b, g, None, hb)
    _rows_step(opt, c, g, np.arange(6, dtype=np.int64), hc)
    assert np.array_equal(a, b) and np.array_equal(a, c)
    assert np.array_equal(ha, hb) and np.array_equal(ha, hc)
    # listed rows only, from gradient rows given F-ordered and strided, into an F-ordered weight
    rows = np.array([1, 4, 5], np.int64)
    wc, wf = w0.copy(), np.asfortranarray(w0)
    hc, hf = opt.create_state(0, wc), opt.create_state(0, wf)
    values = g[rows]
    _rows_step(opt, wc, values, rows, hc)
    _rows_step(opt, wf, np.asfortranarray(values), rows, hf)
    assert np.array_equal(wc, wf) and np.array_equal(hc, hf)
    strided = np.repeat(values, 2, axis=1)[:, ::2]
    wc2, hc2 = w0.copy(), opt.create_state(0, w0)
    _rows_step(opt, wc2, strided, rows, hc2)
    assert np.array_equal(wc, wc2)
    absent = [0, 2, 3]
    assert np.array_equal(wc[absent], w0[absent]) and not hc[absent].any()
    assert np.array_equal(wc[rows], a[rows]) and np.array_equal(hc[rows], ha[rows])
    # no rows: nothing moves
    before = wc.copy(), hc.copy()
    _rows_step(opt, wc, values[:0], rows[:0], hc)
    assert np.array_equal(wc, before[0]) and np.array_equal(hc, before[1])


def test_parallel_and_serial_row_kernels_agree_bit_for_bit(monkeypatch):
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((96, 40)).astype(np.float32)
    g = (rng.standard_normal((96, 40)) * 10.0 ** rng.uniform(-3, 2, (96, 40))).astype(np.float32)
    out = []
    for threshold in (1, 1 << 30):  # parallel, then serial
        monkeypatch.setattr(jit, "PARALLEL_THRESHOLD", threshold)
        opt = optimizer.create("groupadagrad", learning_rate=0.05)
        w = w0.copy()
        h = opt.create_state(0, w)
        for _ in range(2):
            opt.update(0, w, g, h)
        out.append((w, h))
    assert np.array_equal(out[0][0], out[1][0]) and np.array_equal(out[0][1], out[1][1])


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("clip", [None, 0.5])
def test_float16_master_step_in_one_pass_equals_widen_step_round(order, clip):
    """With multi_precision, the CPU row kernel widens the float16 gradient on load and writes
    the float16 weight from the new master in the same pass: bit for bit the float32 step on
    the widened gradient followed by rounding (numpy's astype), in either memory order."""
    rng = np.random.default_rng(7)
    w16 = np.asarray(rng.standard_normal((37, 13)), np.float16, order=order)
    grads = [np.asarray(rng.standard_normal((37, 13)) * 3, np.float16, order=order)
             for _ in range(3)]
    opt = optimizer.create("groupadagrad", learning_rate=0.1, multi_precision=True,
                           clip_gradient=clip)
    state = opt.create_state_multi_precision(0, w16)
    twin = optimizer.create("groupadagrad", learning_rate=0.1, clip_gradient=clip)
    w32 = w16.astype(np.float32)
    h32 = twin.create_state(0, w32)
    for g in grads:
        opt.update_multi_precision(0, w16, g, state)
        twin.update(0, w32, g.astype(np.float32), h32)
        assert np.array_equal(w16, w32.astype(np.float16))
        assert np.array_equal(state[0], w32) and np.array_equal(state[1], h32)


def _documented_row_sum(p):
    """The CPU row kernels' float64 sum of squares (toolkit/backends/rows.py): column ``j`` into
    running sum ``j % 4``, the last ``ncols % 4`` columns into sum 0, then
    ``(s0 + s1) + (s2 + s3)``."""
    s = [0.0, 0.0, 0.0, 0.0]
    quads = len(p) // 4
    for j in range(4 * quads):
        s[j % 4] += float(p[j]) ** 2
    for j in range(4 * quads, len(p)):
        s[0] += float(p[j]) ** 2
    return (s[0] + s[1]) + (s[2] + s[3])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_sum_is_in_the_documented_order(dtype):
    """The vectorised row sum adds in the documented order, bit for bit (rows of every length
    around the 4- and 16-element groups it loads), on data where the order shows."""
    import numba

    from toolkit.backends import rows

    @numba.njit
    def row_sum(x):
        return rows._row_squares(x)
    rng = np.random.default_rng(5)
    differs = 0
    for ncols in list(range(0, 40)) + [255, 256, 257, 1000]:
        x = (rng.standard_normal(ncols) * 10.0 ** rng.uniform(-2, 2, ncols)).astype(dtype)
        expected = _documented_row_sum(x)
        assert row_sum(x) == expected, ncols
        differs += expected != math.fsum(float(v) ** 2 for v in x)
    assert differs > 10  # the data tells orders apart
