"""The public optimizer API, as ``mxnet.optimizer``: ``from toolkit import optimizer``.

``optimizer.create("adam", learning_rate=0.01)`` builds one by registry name (case-insensitive);
``@optimizer.register`` adds a custom ``optimizer.Optimizer`` subclass.
"""
from .optimizers import (AdaDelta, AdaGrad, Adam, Adamax, AdamW, DCASGD, LARS, FTML, Ftrl, LBSGD, NAG, Nadam,
                         Optimizer, RMSProp, SGD, SGLD, Signum, create, register, registry)
from .optimizers import GroupAdaGrad
from .optimizers import LAMB
from .optimizers.custom import ElementwiseOptimizer

Ftrl = Ftrl
FTRL = Ftrl  # the guide's spelling

__all__ = ["Optimizer", "ElementwiseOptimizer", "create", "register", "registry", "SGD", "NAG",
           "AdaGrad", "RMSProp", "AdaDelta", "Adam", "Adamax", "Nadam", "Signum", "LBSGD",
           "DCASGD", "Ftrl", "FTRL", "FTML", "SGLD", "AdamW", "LARS", "GroupAdaGrad", "LAMB"]
