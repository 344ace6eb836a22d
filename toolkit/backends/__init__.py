"""Backends: ``cpu`` (Numba kernels) here; ``cuda`` is imported lazily so the CPU path never
needs a GPU driver."""
from __future__ import annotations

__all__ = ["cuda_available"]


def cuda_available():
    """``(ok, reason)``: whether a CUDA GPU and driver are usable, and if not, why not.

    Never raises and never initialises more than numba.cuda's own detection does.
    """
    try:
        from numba import cuda
    except Exception as exc:  # pragma: no cover - numba is a hard dependency
        return False, f"numba.cuda cannot be imported ({exc})"
    try:
        if not cuda.is_available():
            return False, "no CUDA GPU or driver was found (numba.cuda.is_available() is False)"
    except Exception as exc:
        return False, f"CUDA detection failed ({exc})"
    return True, "a CUDA GPU is available"
