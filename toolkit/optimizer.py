"""The public optimizer API, as ``mxnet.optimizer``: ``from toolkit import optimizer``.

``optimizer.create("adam", learning_rate=0.01)`` builds one by registry name (case-insensitive);
``@optimizer.register`` adds a custom ``optimizer.Optimizer`` subclass. Every built-in optimizer's
class is here under its class name (``optimizer.Adam``, ``optimizer.FTML``, ...), imported from
its module; ``optimizer.FTRL`` is the guide's spelling of ``Ftrl``. A new built-in optimizer adds
its import and name here: tests/test_public_api.py checks these names are exactly the registry's
built-in classes.
"""
from .optimizers import (BenchSetting, Optimizer, Spec, create, register, registry, spec_of,
                         specs, unregister)
from .optimizers.adabelief import AdaBelief
from .optimizers.adadelta import AdaDelta
from .optimizers.adagrad import AdaGrad
from .optimizers.adam import Adam
from .optimizers.adamax import Adamax
from .optimizers.adamw import AdamW
from .optimizers.adamwschedulefree import AdamWScheduleFree
from .optimizers.adopt import ADOPT
from .optimizers.asgd import ASGD
from .optimizers.custom import ElementwiseOptimizer
from .optimizers.dcasgd import DCASGD
from .optimizers.ftml import FTML
from .optimizers.ftrl import Ftrl
from .optimizers.groupadagrad import GroupAdaGrad
from .optimizers.lamb import LAMB
from .optimizers.lars import LARS
from .optimizers.lbsgd import LBSGD
from .optimizers.lion import Lion
from .optimizers.muon import Muon
from .optimizers.nadam import Nadam
from .optimizers.nag import NAG
from .optimizers.radam import RAdam
from .optimizers.adafactor import Adafactor
from .optimizers.rmsprop import RMSProp
from .optimizers.rprop import Rprop
from .optimizers.sgd import SGD
from .optimizers.sgdschedulefree import SGDScheduleFree
from .optimizers.sgld import SGLD
from .optimizers.signum import Signum
from .optimizers.sparseadam import SparseAdam

FTRL = Ftrl  # the guide's spelling

__all__ = [  # checked against the registry by tests/test_public_api.py::test_optimizer_module_names_the_registry
           "Optimizer", "ElementwiseOptimizer", "Spec", "BenchSetting", "create", "register",
           "registry", "specs", "spec_of", "unregister",
           # the built-in optimizers' classes, by class name (in the registry's order)
           "AdaBelief", "AdaDelta", "Adafactor", "AdaGrad", "Adam", "Adamax", "AdamW", "AdamWScheduleFree", "ADOPT", "ASGD", "DCASGD", "FTML", "Ftrl",
           "GroupAdaGrad", "LAMB", "LARS", "LBSGD", "Lion", "Muon", "Nadam", "NAG", "RAdam", "RMSProp", "Rprop", "SGD", "SGDScheduleFree", "SGLD",
           "Signum", "SparseAdam", "FTRL"]
