"""Custom optimizers from an element-wise rule: a CPU kernel without writing kernel code.

The guide's recipe for a custom optimizer is a subclass with ``create_state`` and ``update``
(which works here too: subclass :class:`~toolkit.optimizers.base.Optimizer` and override
``update``). Subclassing :class:`ElementwiseOptimizer` instead, you write only the update of one
element; the toolkit compiles it with Numba into the same serial/parallel loops as the built-in
optimizers, and validation, multipliers, schedules, ``t`` and multi-precision come for free.
See ``docs/custom-optimizer.md``.
"""
from __future__ import annotations

from .base import Optimizer

__all__ = ["ElementwiseOptimizer"]

_factories: dict = {}


def _factory(rule):
    """A rule factory (``f -> rule``) for a dtype-independent user rule, one per rule."""
    fac = _factories.get(rule)
    if fac is None:
        def fac(f, _rule=rule):
            return _rule
        _factories[rule] = fac
    return fac


class ElementwiseOptimizer(Optimizer):
    """Base class of optimizers given by a per-element rule.

    Subclasses define:

    ``state_names``
        tuple of state slot names (0 to 3), each a zeros array like the weight.
    ``hyperparameters(self, index, t, lr, wd) -> tuple of float``
        the per-step scalars the rule needs, computed on the host in float64 (they are cast to
        the weight's dtype once per step).
    ``rule(w, g, *states, hp) -> (w, *states)``  (a staticmethod)
        the update of one element, plain Python with ``math`` only. ``g`` is the raw gradient:
        apply ``rescale_grad``/``clip_gradient`` yourself if you want them (pass them in ``hp``).
        Keep float32 arithmetic float32: take every constant from ``hp`` (a literal such as
        ``1.0`` would promote the loop to float64).
    """

    state_names: tuple = ()

    def state_slots(self):
        return tuple(self.state_names)

    def _tuple_state(self):
        return len(self.state_names) > 1

    def hyperparameters(self, index, t, lr, wd):
        """The per-step scalars of ``rule``'s ``hp`` for index ``index`` at count ``t`` with
        learning rate ``lr`` and weight decay ``wd`` (floats, computed in float64)."""
        raise NotImplementedError("ElementwiseOptimizer subclasses define hyperparameters()")

    @staticmethod
    def rule(*args):  # pragma: no cover - replaced by subclasses
        """``rule(w, g, *states, hp) -> (w, *states)``: the update of one element."""
        raise NotImplementedError("ElementwiseOptimizer subclasses define rule()")

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        hyper = tuple(float(h) for h in self.hyperparameters(index, t, lr, wd))
        rule = type(self).rule
        self._run_rule(_factory(rule), weight, grad, self.state_arrays(state), hyper)
