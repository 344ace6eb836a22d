"""Row-sparse gradients on the CUDA backend: the row kernel updates the rows present in place
(float16 storage and a float32 master included) and equals the CPU's lazy update; the
fallback densifies on the device. Runs on a GPU, or under the simulator (docs/sparse.md)."""
import numpy as np
import pytest
from numba import cuda

import optim_db
from toolkit import RowSparse, optimizer

SHAPE = (29, 3, 2)
ROWS = np.array([0, 3, 4, 17, 28], np.int64)


def _data(dtype):
    rng = np.random.default_rng(3)
    w = rng.standard_normal(SHAPE).astype(dtype)
    values = rng.standard_normal((len(ROWS),) + SHAPE[1:]).astype(dtype)
    return w, values


def _host(state):
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(_host(s) for s in state)
    return state.copy_to_host()


#: the lazy row kernel (MXNet's kernels and a Python op), the standard update and the dense
#: fallback
CASES = [  # checked against the registry by test_cases_cover_every_mode_and_kind
    ("sgd", {}), ("sgd", dict(momentum=0.9)), ("adam", {}), ("adam", dict(clip_gradient=0.5)),
    ("adagrad", {}), ("ftrl", {}), ("sgd", dict(lazy_update=False)), ("rmsprop", {})]


def test_cases_cover_every_mode_and_kind():
    """The cases name built-in optimizers and take each row-sparse mode, the lazy one with both
    of MXNet's kinds (tests/optim_db.py's step_kinds)."""
    assert all(optim_db.is_builtin(name) for name, _ in CASES)
    modes = {optimizer.create(name, **kw).row_sparse_mode(0) for name, kw in CASES}
    assert modes == {"lazy", "standard", "dense"}
    lazy = [(name, kw) for name, kw in CASES
            if optimizer.create(name, **kw).row_sparse_mode(0) == "lazy"]
    assert optim_db.kinds_of(lazy) >= {"kernel", "python op"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,kw", CASES)
def test_cuda_row_sparse_equals_cpu(name, kw, dtype):
    w, values = _data(dtype)
    kw = dict(kw, learning_rate=0.1, rescale_grad=0.7, wd=0.0 if name == "adagrad" else 0.02)
    cpu_opt = optimizer.create(name, backend="cpu", **kw)
    gpu_opt = optimizer.create(name, backend="cuda", **kw)
    w_cpu = w.copy()
    s_cpu = cpu_opt.create_state(0, w_cpu)
    w_dev = cuda.to_device(w)
    s_dev = gpu_opt.create_state(0, w_dev)
    for step in range(2):
        cpu_opt.update(0, w_cpu, RowSparse(ROWS, values * (step + 1), SHAPE), s_cpu)
        gpu_opt.update(0, w_dev, RowSparse(ROWS, cuda.to_device(values * (step + 1)), SHAPE),
                       s_dev)
    cuda.synchronize()
    got = w_dev.copy_to_host()
    # a GPU may contract a*b + c into an FMA, and the simulator evaluates math functions in
    # Python: a few roundings apart from the CPU over two steps (tests/cuda/
    # test_cuda_vs_reference.py holds every kernel to the oracle's bound)
    np.testing.assert_allclose(got, w_cpu, rtol=64 * np.finfo(dtype).eps,
                               atol=64 * np.finfo(dtype).eps)
    absent = np.setdiff1d(np.arange(SHAPE[0]), ROWS)
    if cpu_opt.row_sparse_mode(0) == "lazy":
        assert np.array_equal(got[absent], w[absent])
        for a in gpu_opt.state_arrays(s_dev):
            assert not np.any(a.copy_to_host()[absent])


def test_cuda_groupadagrad_row_sparse():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((29, 6)).astype(np.float32)
    values = rng.standard_normal((len(ROWS), 6)).astype(np.float32)
    cpu_opt = optimizer.create("groupadagrad", backend="cpu", learning_rate=0.1)
    gpu_opt = optimizer.create("groupadagrad", backend="cuda", learning_rate=0.1)
    w_cpu, w_dev = w.copy(), cuda.to_device(w)
    h_cpu, h_dev = cpu_opt.create_state(0, w_cpu), gpu_opt.create_state(0, w_dev)
    cpu_opt.update(0, w_cpu, RowSparse(ROWS, values, w.shape), h_cpu)
    gpu_opt.update(0, w_dev, RowSparse(ROWS, cuda.to_device(values), w.shape), h_dev)
    got = w_dev.copy_to_host()
    np.testing.assert_allclose(got, w_cpu, rtol=1e-5, atol=1e-6)
    absent = np.setdiff1d(np.arange(29), ROWS)
    assert np.array_equal(got[absent], w[absent])
    assert not np.any(h_dev.copy_to_host()[absent])


def test_cuda_row_sparse_multi_precision():
    w, values = _data(np.float16)
    opt = optimizer.create("adam", backend="cuda", multi_precision=True, learning_rate=0.1)
    w_dev = cuda.to_device(w)
    st = opt.create_state_multi_precision(0, w_dev)
    opt.update_multi_precision(0, w_dev, RowSparse(ROWS, cuda.to_device(values), SHAPE), st)
    got = w_dev.copy_to_host()
    master = st[0].copy_to_host()
    absent = np.setdiff1d(np.arange(SHAPE[0]), ROWS)
    assert np.array_equal(got[absent], w[absent])
    assert np.array_equal(got, master.astype(np.float16))
    ref = optimizer.create("adam", multi_precision=True, learning_rate=0.1)
    sub = np.ascontiguousarray(w[ROWS])
    s_ref = ref.create_state_multi_precision(0, sub)
    ref.update_multi_precision(0, sub, values, s_ref)
    np.testing.assert_allclose(master[ROWS], s_ref[0], rtol=1e-6, atol=1e-6)


def test_cuda_to_dense():
    w, values = _data(np.float32)
    g = RowSparse(ROWS, cuda.to_device(values), SHAPE)
    dense = g.to_dense().copy_to_host()
    expected = np.zeros(SHAPE, np.float32)
    expected[ROWS] = values
    assert np.array_equal(dense, expected)


def test_cuda_values_on_host_refused():
    w, values = _data(np.float32)
    opt = optimizer.create("sgd", backend="cuda")
    w_dev = cuda.to_device(w)
    with pytest.raises(TypeError, match="values"):
        opt.update(0, w_dev, RowSparse(ROWS, values, SHAPE), None)
