"""The non-finite guard of ``update(..., skip_nonfinite=True)``: the gradient is read once
first (``toolkit/backends/finite.py``), and when it holds a NaN or an infinity nothing is written;
a skipped call is checked as the update would have been.

``Optimizer`` derives from :class:`NonFiniteGuard`.
"""
from __future__ import annotations

import numpy as np

from ..backends import arrays
from ..sparse import RowSparse

__all__ = ["NonFiniteGuard"]


class NonFiniteGuard:
    """``skip_nonfinite`` (methods of ``Optimizer``)."""

    def _guarded(self, multi_precision, index, weight, grad, state, stream, skip_nonfinite):
        """``update``/``update_multi_precision`` with ``skip_nonfinite=True``: True when the
        update was made, False when ``grad`` holds a NaN or an infinity and nothing was
        touched. A skipped call is checked as the update would have been (a bad argument
        raises the same error either way)."""
        if skip_nonfinite is not True:
            raise TypeError(f"skip_nonfinite must be True or False, got {skip_nonfinite!r}")
        from ..backends import finite
        if type(grad) is not RowSparse and grad is not None and type(grad) is not np.ndarray \
                and arrays.is_device_array(grad):
            # the weight's stream: the step would run there, after what wrote the gradient
            self._check_index(index)
            w = self._check_weight(weight)
            ok = finite.all_finite(grad, self._guard_stream(stream, w))
        elif grad is None:
            ok = True  # the update's own check says what is wrong
        else:
            ok = finite.all_finite(grad)
        if ok:
            step = self.update_multi_precision if multi_precision else self.update
            step(index, weight, grad, state, stream=stream)
            return True
        self._check_skipped_update(multi_precision, index, weight, grad, state)
        return False

    @staticmethod
    def _guard_stream(stream, w):
        if w.kind != "cuda":
            return None
        from ..backends import cuda
        return cuda.resolve_stream(stream, w)

    def _check_skipped_update(self, multi_precision, index, weight, grad, state):
        """The checks of the update a non-finite gradient skips: index, weight, gradient
        (a ``RowSparse``'s rows and values, and the optimizer's row-sparse refusals), state and
        the next step's scalars; nothing is written."""
        self._check_index(index)
        w = self._check_weight(weight)
        self._resolve_backend(w)
        if type(grad) is RowSparse:
            _, g = grad.check(w)
            self.row_sparse_mode(index)
            name = "grad.values"
        else:
            g = self._check_grad(w, grad)
            name = "grad"
        if multi_precision and self.uses_master(weight):
            self._check_master_state(state, w, g, name)
        else:
            self._check_state(state, w, self.create_state_template(w), others=((name, g),))
        # read as the update would read them, the schedule put back after: a skipped call
        # takes no step, so the toolkit's (stateful) schedule must not move either
        from ..lr_scheduler import LRScheduler
        sched = self.lr_scheduler
        saved = sched.state_dict() if isinstance(sched, LRScheduler) else None
        try:
            self._step_scalars(index)
        finally:
            if saved is not None:
                sched.load_state_dict(saved)
