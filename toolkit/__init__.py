"""The optimizer toolkit: MXNet 1.x's optimizers and Gluon Trainer, with a float64 oracle and Numba
CPU and CUDA kernels.

>>> from toolkit import optimizer, lr_scheduler, Trainer, Parameter
>>> opt = optimizer.create("adam", learning_rate=0.01)
"""
from . import lr_scheduler, optimizer  # noqa: F401
from .sparse import RowSparse  # noqa: F401
from .trainer import Parameter, ParamsError, StaleGradientError, Trainer  # noqa: F401

__version__ = "0.1.0"
__all__ = ["optimizer", "lr_scheduler", "Trainer", "Parameter", "StaleGradientError", "ParamsError",
           "RowSparse"]
