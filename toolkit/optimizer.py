"""The public optimizer API, as ``mxnet.optimizer``: ``from toolkit import optimizer``.

``optimizer.create("adam", learning_rate=0.01)`` builds one by registry name (case-insensitive);
``@optimizer.register`` adds a custom ``optimizer.Optimizer`` subclass. Every built-in optimizer's
class is here under its class name (``optimizer.Adam``, ``optimizer.FTML``, ...), read from the
registry; ``optimizer.FTRL`` is the guide's spelling of ``Ftrl``.
"""
from .optimizers import (BenchSetting, Optimizer, Spec, create, register, registry, spec_of,  # noqa: F401
                         specs, unregister)
from .optimizers.custom import ElementwiseOptimizer

#: the built-in optimizers' classes, by class name
_BUILT_IN = {klass.__name__: klass for klass in registry().values()}
globals().update(_BUILT_IN)
FTRL = _BUILT_IN["Ftrl"]  # the guide's spelling

__all__ = (["Optimizer", "ElementwiseOptimizer", "Spec", "BenchSetting", "create", "register",
            "registry", "specs", "spec_of", "unregister"] + list(_BUILT_IN) + ["FTRL"])
