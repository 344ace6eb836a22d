"""Muon's CUDA step (``toolkit.backends.cuda_matrix``) beyond the generic suites (every convention
and dtype against the oracle: test_cuda_vs_reference.py; the Trainer: test_cuda_trainer.py;
PyTorch and CuPy arrays, whose products are cuBLAS's, on a real GPU: test_cuda_interop.py).

Under the simulator the products are the module's own kernel (``products_for``): its four
transposes are checked against numpy here, and a Fortran-ordered weight, stepped as the
C-ordered transpose it is in memory, gives the C-ordered weight's step bit for bit (its Gram
matrix and products are the same sums in the same order, transposed)."""
from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from conftest import SIMULATOR
from toolkit import optimizer
from toolkit.backends import arrays, cuda_matrix


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_the_product_kernel_for_each_transpose(dtype, ta, tb):
    rng = np.random.default_rng(3)
    p, q, r = 3, 5, 4
    a = rng.standard_normal((r, p) if ta else (p, r)).astype(dtype)
    b = rng.standard_normal((q, r) if tb else (r, q)).astype(dtype)
    c = cuda.to_device(np.full(p * q, np.nan, dtype))
    kernel = cuda_matrix.matmul_kernel(dtype)
    kernel[(1, 1), (2, 1)](cuda.to_device(a.reshape(-1)), cuda.to_device(b.reshape(-1)), c,
                           p, q, r, ta, tb)
    opa, opb = (a.T if ta else a), (b.T if tb else b)
    exact = opa.astype(np.float64) @ opb.astype(np.float64)
    # a serial sum of r products, each rounded: |error| <= r u sum |a||b| (first order)
    bound = r * np.finfo(dtype).eps * (np.abs(opa).astype(np.float64) @ np.abs(opb))
    assert np.all(np.abs(c.copy_to_host().reshape(p, q) - exact) <= bound)


@pytest.mark.skipif(not SIMULATOR, reason="the simulator's products: the module's own kernel; "
                                          "a GPU's are cuBLAS's where PyTorch or CuPy is installed")
def test_the_simulator_multiplies_with_the_modules_kernel():
    d = arrays.describe(cuda.to_device(np.zeros((2, 3), np.float32)), "weight")
    assert cuda_matrix.products_for(d) == "numba"


@pytest.mark.parametrize("shape", [(3, 5), (5, 3)])
def test_a_fortran_ordered_weight_is_its_transposes_step_bit_for_bit(shape, monkeypatch):
    monkeypatch.setattr(cuda_matrix, "products_for", lambda w: "numba")
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal(shape).astype(np.float32)
    grads = [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]
    out = {}
    for order in "CF":
        opt = optimizer.create("muon", learning_rate=0.1)
        w = cuda.to_device(np.asarray(w0, order=order))
        assert arrays.describe(w).order == order
        state = opt.create_state(0, w)
        for g in grads:
            opt.update(0, w, cuda.to_device(np.asarray(g, order=order)), state)
        out[order] = (w.copy_to_host(), state[0].copy_to_host())
    assert np.array_equal(out["C"][0], out["F"][0])
    assert np.array_equal(out["C"][1], out["F"][1])


def test_a_gradient_in_another_memory_order_is_refused_and_nothing_written():
    rng = np.random.default_rng(6)
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    opt = optimizer.create("muon", learning_rate=0.1)
    w = cuda.to_device(w0)
    state = opt.create_state(0, w)
    g = cuda.to_device(np.asfortranarray(rng.standard_normal((3, 4)).astype(np.float32)))
    with pytest.raises(ValueError, match="memory order"):
        opt.update(0, w, g, state)
    assert np.array_equal(w.copy_to_host(), w0)
    assert not state[0].copy_to_host().any()


@pytest.mark.skipif(not SIMULATOR, reason="a library that fails at its first call: PyTorch, "
                                          "which has no CUDA beside the simulator")
def test_a_failing_product_library_writes_nothing(monkeypatch):
    """Everything that can fail (the library, its stream, its views, one product of its own)
    is done before the first launch writes the momentum buffer: found by review, a library's
    refusal at the first product (torch's deterministic mode without a cuBLAS workspace
    setting) left the buffer advanced and the weight not, so a retried step applied the
    momentum twice."""
    monkeypatch.setattr(cuda_matrix, "products_for", lambda w: "torch")
    rng = np.random.default_rng(8)
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    opt = optimizer.create("muon", learning_rate=0.1)
    w = cuda.to_device(w0)
    state = opt.create_state(0, w)
    with pytest.raises(Exception):  # noqa: B017 - whatever torch raises without CUDA
        opt.update(0, w, cuda.to_device(np.ones((3, 4), np.float32)), state)
    assert np.array_equal(w.copy_to_host(), w0)
    assert not state[0].copy_to_host().any()
