"""The optimizer toolkit: MXNet 1.x's optimizers with a float64 oracle and Numba kernels.

>>> from toolkit import optimizer, lr_scheduler
>>> opt = optimizer.create("adam", learning_rate=0.01)
"""
from . import lr_scheduler, optimizer  # noqa: F401

__version__ = "0.1.0"
__all__ = ["optimizer", "lr_scheduler"]
