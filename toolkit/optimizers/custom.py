"""Custom optimizers from an element-wise rule: a CPU kernel without writing kernel code.

The guide's recipe for a custom optimizer is a subclass with ``create_state`` and ``update``
(which works here too: subclass :class:`~toolkit.optimizers.base.Optimizer` and override
``update``). Subclassing :class:`ElementwiseOptimizer` instead, you write only the update of one
element; the toolkit compiles it with Numba into the same serial/parallel loops as the built-in
optimizers, and validation, multipliers, schedules, ``t`` and multi-precision come for free.
See ``docs/custom-optimizer.md``.
"""
from __future__ import annotations

import warnings
import weakref

from ..backends.launches import Launch
from .base import Optimizer

__all__ = ["ElementwiseOptimizer"]

_factories: dict = {}

#: the classes already warned that their ``hyperparameters()`` returns a plain tuple
_warned = weakref.WeakSet()


def _factory(rule):
    """A rule factory (``f -> rule``) for a dtype-independent user rule, one per rule."""
    fac = _factories.get(rule)
    if fac is None:
        def fac(f, _rule=rule):
            return _rule
        _factories[rule] = fac
    return fac


def _is_row_class(row):
    """Whether ``row`` is a named-tuple class (``typing.NamedTuple`` or
    ``collections.namedtuple``)."""
    return isinstance(row, type) and issubclass(row, tuple) and hasattr(row, "_fields")


def _warn_positional(cls):
    """The old shape (a plain tuple unpacked by position), once per class, attributed to the
    class's ``hyperparameters`` so that the default filters show it for a script's class."""
    if cls in _warned:
        return
    _warned.add(cls)
    code = getattr(cls.hyperparameters, "__code__", None)
    warnings.warn_explicit(
        f"{cls.__qualname__} declares no row: the scalars of its hyperparameters() reach the "
        f"rule as a plain tuple unpacked by position. Name them once instead: declare a "
        f"typing.NamedTuple class as "
        f"{cls.__qualname__}.row, return an instance of it from hyperparameters() "
        f"(return self.row(lr=lr, wd=wd, ...)) and read it by name in the rule (p = Row(*hp); "
        f"p.lr); see docs/custom-optimizer.md. The plain tuple still works, with the same "
        f"numbers.",
        DeprecationWarning,
        filename=code.co_filename if code else "<unknown>",
        lineno=code.co_firstlineno if code else 0,
        module=cls.__module__)


class ElementwiseOptimizer(Optimizer):
    """Base class of optimizers given by a per-element rule.

    Subclasses define:

    ``state_names``
        tuple of state slot names (0 to 3), each a zeros array like the weight.
    ``row``
        a ``typing.NamedTuple`` class naming the per-step scalars the rule reads, in the order
        the rule receives them (declared once, at module level, so the rule can build it).
    ``hyperparameters(self, index, t, lr, wd) -> row``
        an instance of ``row``: the per-step scalars, computed on the host in float64 (they are
        cast to the weight's dtype once per step). A plain tuple with no ``row`` declared is
        deprecated: the same numbers, and a DeprecationWarning once per class.
    ``rule(w, g, *states, hp) -> (w, *states)``  (a staticmethod)
        the update of one element, plain Python with ``math`` only; it reads its scalars by
        name, ``p = Row(*hp)`` then ``p.lr`` (``hp`` arrives as a plain tuple of the row's
        values; building the named tuple costs nothing in the compiled loop). ``g`` is the raw
        gradient: apply ``rescale_grad``/``clip_gradient`` yourself if you want them (put them
        in the row). Keep float32 arithmetic float32: take every constant from ``hp`` (a
        literal such as ``1.0`` would promote the loop to float64).
    """

    state_names: tuple = ()

    #: the rule's scalars by name: a ``typing.NamedTuple`` class, or None (deprecated plain tuple)
    row = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        row = cls.__dict__.get("row")
        if row is not None and not _is_row_class(row):
            raise TypeError(f"{cls.__qualname__}.row must be a typing.NamedTuple class naming "
                            f"the scalars of the rule's hp (class Row(NamedTuple): lr: float; "
                            f"...), got {row!r}")

    def state_slots(self):
        return tuple(self.state_names)

    def _tuple_state(self):
        return len(self.state_names) > 1

    def hyperparameters(self, index, t, lr, wd):
        """The per-step scalars of ``rule``'s ``hp`` for index ``index`` at count ``t`` with
        learning rate ``lr`` and weight decay ``wd`` (floats, computed in float64): an
        instance of ``row``."""
        raise NotImplementedError("ElementwiseOptimizer subclasses define hyperparameters()")

    @staticmethod
    def rule(*args):  # pragma: no cover - replaced by subclasses
        """``rule(w, g, *states, hp) -> (w, *states)``: the update of one element."""
        raise NotImplementedError("ElementwiseOptimizer subclasses define rule()")

    def _row_values(self, index, t, lr, wd):
        """``hyperparameters()``'s values as a tuple of floats, checked against ``row``."""
        cls = type(self)
        values = self.hyperparameters(index, t, lr, wd)
        if cls.row is None:
            _warn_positional(cls)
        elif not isinstance(values, cls.row):
            raise TypeError(f"{cls.__qualname__}.hyperparameters() must return an instance of "
                            f"its row {cls.row.__qualname__} (return self.row("
                            f"{', '.join(f'{n}=...' for n in cls.row._fields)})), got "
                            f"{type(values).__qualname__} {values!r}")
        return tuple(float(h) for h in values)

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        hyper = self._row_values(index, t, lr, wd)
        rule = type(self).rule
        return Launch("rule", _factory(rule), weight, grad, self.state_arrays(state), hyper)
