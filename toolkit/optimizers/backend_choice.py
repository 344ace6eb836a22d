"""Which backend runs a step (``Optimizer.backend``: "auto", "reference", "cpu", "cuda") for
the arrays at hand, refused before anything is written where the two do not fit.

``Optimizer`` derives from :class:`BackendChoice`.
"""
from __future__ import annotations

from ..backends import arrays

__all__ = ["BackendChoice"]


class BackendChoice:
    """The backend of a step (a method of ``Optimizer``)."""

    def _resolve_backend(self, w):
        """The backend for a step on the described weight ``w``; an error, before anything is
        written, when the arrays and the requested backend do not fit together."""
        device = w.kind == arrays.DEVICE
        if self.backend == "auto":
            backend = "cuda" if device else "cpu"
        else:
            backend = self.backend
        if backend == "cuda":
            from ..backends import cuda_available
            ok, why = cuda_available()
            if not ok:
                raise RuntimeError(f"backend='cuda' cannot run: {why}" + (
                    "" if device else "; use backend='cpu' for numpy arrays"))
            if not device:
                raise TypeError("backend='cuda' updates CUDA arrays in place, but the weight is a "
                                "numpy.ndarray (host memory); pass device arrays (numba, CuPy "
                                "or PyTorch CUDA) or use backend='cpu'")
        elif device:
            raise TypeError(f"backend={self.backend!r} runs on numpy arrays, but the weight is "
                            f"{arrays.kind_name(w)}; use backend='cuda' or 'auto' for device "
                            "arrays")
        return backend
