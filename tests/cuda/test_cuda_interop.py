"""CuPy arrays and PyTorch CUDA tensors through ``__cuda_array_interface__``, on a real GPU.

Skipped, with the missing piece named, where there is no GPU (the simulator has no foreign
arrays) or where CuPy or PyTorch is not installed.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conftest import SIMULATOR
from toolkit import optimizer
from toolkit.backends import arrays
from toolkit.error_bounds import step_errors

pytestmark = pytest.mark.skipif(SIMULATOR, reason="CuPy and PyTorch need a real GPU; the CUDA "
                                                  "simulator has no foreign device arrays")
HAS_CUPY = importlib.util.find_spec("cupy") is not None
HAS_TORCH = importlib.util.find_spec("torch") is not None
#: every registered optimizer with a reference and CUDA kernels (``Spec.cuda``), in its record
#: configuration (every state slot and branch on: ``Spec.record``)
NAMES = [n for n, s in optimizer.specs(oracle=True).items() if s.cuda]



def _torch_cuda():
    if not HAS_TORCH:
        pytest.skip("PyTorch is not installed")
    import torch
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    return torch


def _cupy():
    if not HAS_CUPY:
        pytest.skip("CuPy is not installed")
    import cupy
    return cupy


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_every_optimizer_on_foreign_arrays_matches_the_oracle(name, lib):
    rng = np.random.default_rng(7)
    w0 = rng.standard_normal((5, 7)).astype(np.float32)
    grads = [rng.standard_normal((5, 7)).astype(np.float32) for _ in range(3)]
    if lib == "cupy":
        cp = _cupy()
        to = cp.asarray
        kind = cp.ndarray
    else:
        torch = _torch_cuda()
        to = lambda a: torch.from_numpy(a).cuda()  # noqa: E731
        kind = torch.Tensor
    opt = optimizer.create(name, **{"learning_rate": 0.01, **optimizer.spec_of(name).record})
    w = to(w0)
    state = opt.create_state(0, w)
    for a in (state if isinstance(state, tuple) else (state,)):
        if a is not None:
            assert isinstance(a, kind)  # the weight's own kind, on its device
    for g in grads:
        res = step_errors(opt, 0, w, to(g), state)
        for out, (err, _, _) in res.items():
            assert err <= 1.0, f"{out}: normalised error {err:.3g}"


def test_torch_stream_ordering_and_tensor_that_requires_grad():
    """An update inside ``torch.cuda.stream(side)`` runs on the side stream (PyTorch's interface
    exports no stream; the toolkit asks PyTorch for its current one), so it sees a gradient
    written on that stream after a long GPU sleep. On the legacy default stream it would not:
    PyTorch's side streams do not synchronise with it."""
    torch = _torch_cuda()
    if not hasattr(torch.cuda, "_sleep"):
        pytest.skip("this PyTorch has no torch.cuda._sleep to hold a stream busy")
    opt = optimizer.SGD(learning_rate=1.0)
    w = torch.zeros(1 << 20, device="cuda")
    g = torch.zeros(1 << 20, device="cuda")
    opt.update(0, w, g, None)             # compiled and warm: the timing below is the stream's
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)  # about a second of GPU time on the side stream
        g.fill_(1.0)                      # enqueued after it, on the side stream
        opt.update(0, w, g, None)         # no stream given: PyTorch's current (side) stream
    torch.cuda.synchronize()
    assert torch.all(w == -1.0)
    p = torch.zeros(4, device="cuda", requires_grad=True)
    with pytest.raises(TypeError, match="detach"):
        opt.update(0, p, torch.ones(4, device="cuda"), None)
    opt.update(0, p.detach(), torch.ones(4, device="cuda"), None)
    torch.cuda.synchronize()
    assert torch.all(p.detach() == -1.0)


def test_cupy_multi_precision_float16():
    cp = _cupy()
    opt = optimizer.Adam(learning_rate=0.01, multi_precision=True)
    w = cp.asarray(np.random.default_rng(3).standard_normal(100).astype(np.float16))
    s = opt.create_state_multi_precision(0, w)
    assert isinstance(s[0], cp.ndarray) and s[0].dtype == cp.float32
    for _ in range(3):
        res = step_errors(opt, 0, w, cp.ones(100, dtype=cp.float16), s)
        assert all(err <= 1.0 for err, _, _ in res.values()), res
    assert np.array_equal(arrays.to_host(w), arrays.to_host(s[0]).astype(np.float16))
