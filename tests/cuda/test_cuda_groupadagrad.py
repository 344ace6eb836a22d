"""GroupAdaGrad's CUDA row kernel (toolkit/backends/cuda_rows.py) beyond the generic matrix of
tests/cuda/test_cuda_vs_reference.py: the lazy update of a row-sparse gradient (only the rows
present move, within the oracle's bound under MXNet's row-sparse numerics; float16 weights with a
float32 master written in the same pass), Fortran-ordered weights, and more rows than blocks
and more columns than threads. Runs on a GPU, or under the simulator."""
import numpy as np
import pytest
from numba import cuda

import reference.groupadagrad as ref
from reference.error_bound import track
from toolkit import RowSparse, optimizer
from toolkit.backends import cuda_rows
from toolkit.error_bounds import normalised_error

SHAPE = (7, 2 * cuda_rows.THREADS + 3)          # more columns than a block has threads
ROWS = np.array([0, 2, 3, 6], np.int64)


def _data(dtype, seed=5):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(SHAPE).astype(dtype)
    values = (rng.standard_normal((len(ROWS), SHAPE[1])) * 3).astype(dtype)
    return w, values


@pytest.mark.parametrize("dtype,mp", [(np.float32, False), (np.float64, False),
                                      (np.float16, True)])
@pytest.mark.parametrize("kw", [dict(learning_rate=0.1, rescale_grad=0.7),
                                dict(learning_rate=0.3, clip_gradient=0.5, eps=1e-3),
                                dict(learning_rate=0.1, clip_gradient=0.0)])
def test_lazy_row_sparse_update_on_cuda_is_within_the_bound(dtype, mp, kw):
    w, values = _data(dtype)
    opt = optimizer.create("groupadagrad", backend="cuda", multi_precision=mp, **kw)
    w_dev = cuda.to_device(w)
    state = opt.create_state_multi_precision(0, w_dev)
    master, hist = opt.split_master(state) if mp else (w_dev, state)
    compute = np.float32 if mp else dtype
    w_in = master.copy_to_host().astype(np.float64)
    h_in = hist.copy_to_host().astype(np.float64)
    for step in range(2):
        g = (values * (step + 1)).astype(dtype)
        w_ref, st_ref = ref.step(track(w_in[ROWS], compute), track(g.astype(compute), compute),
                                 {"history": track(h_in[ROWS], compute)}, t=step + 1,
                                 lr=kw["learning_rate"], rescale_grad=kw.get("rescale_grad", 1.0),
                                 clip_gradient=kw.get("clip_gradient"), eps=kw.get("eps", 1e-5),
                                 row_sparse=True)
        opt.update_multi_precision(0, w_dev, RowSparse(ROWS, cuda.to_device(g), SHAPE), state)
        cuda.synchronize()
        w_out, h_out = master.copy_to_host(), hist.copy_to_host()
        absent = np.setdiff1d(np.arange(SHAPE[0]), ROWS)
        assert np.array_equal(w_out[absent], w_in[absent].astype(compute))
        assert np.array_equal(h_out[absent], h_in[absent].astype(compute))
        assert normalised_error(w_out[ROWS], w_ref)[0] <= 1.0
        assert normalised_error(h_out[ROWS], st_ref["history"])[0] <= 1.0
        if mp:  # the float16 weight written from the master by the same kernel
            assert np.array_equal(w_dev.copy_to_host(), w_out.astype(np.float16))
        if kw.get("clip_gradient") == 0.0:  # the row-sparse path does not clip at 0
            assert h_out[ROWS].min() > 0
        w_in, h_in = w_out.astype(np.float64), h_out.astype(np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fortran_ordered_weight_equals_c_ordered_on_cuda(dtype):
    rng = np.random.default_rng(8)
    w0 = rng.standard_normal((9, 21)).astype(dtype)          # 9 rows: more rows than blocks
    grads = [rng.standard_normal(w0.shape).astype(dtype) for _ in range(3)]
    outs = []
    for order in ("C", "F"):
        opt = optimizer.create("groupadagrad", backend="cuda", learning_rate=0.2,
                               clip_gradient=1.0, rescale_grad=0.5)
        w = cuda.to_device(np.asarray(w0, order=order))
        h = opt.create_state(0, w)
        for g in grads:
            opt.update(0, w, cuda.to_device(np.asarray(g, order=order)), h)
        outs.append((w.copy_to_host(), h.copy_to_host()))
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])
