"""Backends: ``cpu`` (Numba kernels) and ``cuda`` (numba-cuda kernels), with the array contract
both share (``arrays``). ``cuda`` is imported lazily, so the CPU path never needs numba-cuda or a
GPU driver: ``arrays`` reaches it through the operations it registers
(:func:`toolkit.backends.arrays.register_kind`), and this package registers the loader.

The modules import downward only (tests/test_layers.py checks the graph): ``jit``, ``arrays``,
``half``, ``rules``, ``noise``; then ``order`` and ``cuda_device``; then the kernel families
(``rows``, ``cuda_rows``, ``finite``, ``cpu_norms``, ``cpu_noise``, ``cpu_precision``); then
one launcher per kind, ``cpu`` and ``cuda``.
"""
from __future__ import annotations

import importlib.util
import os

from . import arrays

__all__ = ["cuda_available", "CUDA_EXTRA_HINT"]

CUDA_EXTRA_HINT = 'pip install -e ".[cuda]" (the numba-cuda package)'

_cached = None


def cuda_available():
    """``(ok, reason)``: whether the CUDA backend can run here (a GPU and driver, or numba's
    simulator under ``NUMBA_ENABLE_CUDASIM=1``), and if not, why not.

    Never raises; the answer is computed once per process.
    """
    global _cached
    if _cached is not None:
        return _cached
    if importlib.util.find_spec("numba_cuda") is None:
        _cached = (False, f"the CUDA backend needs numba-cuda, which is not installed: "
                          f"{CUDA_EXTRA_HINT}")
        return _cached
    try:
        from numba import cuda
    except Exception as exc:  # pragma: no cover - a broken numba-cuda install
        _cached = (False, f"numba.cuda cannot be imported ({exc})")
        return _cached
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        _cached = (True, "numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
        return _cached
    try:
        if not cuda.is_available():
            _cached = (False, "no CUDA GPU or driver was found (numba.cuda.is_available() is False)")
            return _cached
    except Exception as exc:
        _cached = (False, f"CUDA detection failed ({exc})")
        return _cached
    _cached = (True, "a CUDA GPU is available")
    return _cached


def _load_cuda():
    """Import the CUDA backend (it registers its device-array operations with ``arrays``)."""
    from . import cuda  # noqa: F401


arrays.register_loader(arrays.DEVICE, _load_cuda)
