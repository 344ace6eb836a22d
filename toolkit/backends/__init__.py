"""Backends: ``cpu`` (Numba kernels) and ``cuda`` (numba-cuda kernels), with the array contract
both share (``arrays``). ``cuda`` is imported lazily, so the CPU path never needs numba-cuda or a
GPU driver.

The modules import downward only (tests/test_layers.py checks the graph, imports inside functions
included):

* ``jit`` (the CPU compile policy and kernel cache), ``arrays`` (the kind-neutral array
  contract), ``half`` (float16 bits), ``rules`` (shared element-wise rules), ``noise``;
* ``order`` (chunking and reduction order, shared by both kinds), ``cuda_device`` (the CUDA
  compile policy, streams, views, launch);
* the kernel families: ``rows`` (row kernels on the CPU, and the dispatch of a group's row step
  to ``cuda_rows``), ``cuda_rows``, ``finite``; on the CPU ``cpu_norms`` (the norm and
  direction reductions), ``cpu_noise`` (noise rules), ``cpu_precision`` (multi-precision loops
  and float16 conversions);
* one launcher per kind over its own kernel families: ``cpu`` and ``cuda``.

``arrays`` reaches the CUDA backend's allocation and copies through the operations ``cuda``
registers (:func:`toolkit.backends.arrays.register_kind`); this package registers the loader
that imports ``cuda`` the first time a device array needs them.
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
