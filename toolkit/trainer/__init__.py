"""The Trainer (Gluon's ``mxnet.gluon.Trainer``): parameters, flat buffers, the one-call step and
the states file."""
from .parameter import Parameter
from .errors import ParamsError, StaleGradientError
from .trainer import Trainer

__all__ = ["Parameter", "Trainer", "StaleGradientError", "ParamsError"]
