"""Multi-precision: a float16 weight stepped through a float32 master copy (MXNet's
``multi_precision``): the state with the master copy (``create_state_multi_precision``, MXNet's
``(weight32, state)`` layout unless a subclass says otherwise), its checks, and
``update_multi_precision``, which on the CPU and on CUDA widens the float16 gradient on load and
writes the float16 weight from the updated master in the same pass.

``Optimizer`` derives from :class:`MultiPrecision`.
"""
from __future__ import annotations

import numpy as np

from ..backends import arrays, cpu
from ..sparse import RowSparse

__all__ = ["MultiPrecision"]


class MultiPrecision:
    """The float32 master copy of float16 weights (methods of ``Optimizer``)."""

    def create_state_multi_precision(self, index, weight):
        """State including a float32 master copy for float16 weights with multi_precision.

        The layout is MXNet's base wrapper ``(weight32, state)``; SGD and NAG override it with
        their ``(state, weight32)``.
        """
        if self.uses_master(weight):
            self._check_weight(weight)
            self._refuse_held_master()
            w32 = arrays.astype(weight, np.float32)
            return (w32, self.create_state(index, w32))
        return self.create_state(index, weight)

    def _refuse_held_master(self):
        if self.state_dtype is not None:
            raise NotImplementedError(
                f"state_dtype={self.state_dtype!r} with a float32 master copy of a float16 "
                "weight is not implemented: step a float32 weight, or use multi_precision "
                "without state_dtype")

    def uses_master(self, weight):
        """Whether ``weight`` is stepped through a float32 master copy (float16 with
        ``multi_precision``)."""
        if not self.multi_precision:
            return False
        try:
            return arrays.describe(weight).dtype == np.float16
        except TypeError:
            return False

    def split_master(self, state):
        """``(master, inner_state)`` of a state from ``create_state_multi_precision`` for a
        float16 weight (MXNet's base wrapper layout; SGD and NAG override it)."""
        return state[0], state[1]

    def update_multi_precision(self, index, weight, grad, state, *, stream=None,
                               skip_nonfinite=False):
        """``update`` through the float32 master copy when the weight is float16 and
        multi_precision is on; plain ``update`` otherwise. ``skip_nonfinite`` and the value
        returned: as :meth:`update`'s."""
        if skip_nonfinite is not False:
            return self._guarded(True, index, weight, grad, state, stream, skip_nonfinite)
        if type(grad) is RowSparse:
            return self._row_sparse_update(index, weight, grad, state, multi_precision=True,
                                           stream=stream)
        if not self.uses_master(weight):
            if stream is None:  # MXNet's signature: a subclass's own ``update`` need not take it
                return self.update(index, weight, grad, state)
            return self.update(index, weight, grad, state, stream=stream)
        self._check_index(index)
        w = self._check_weight(weight)
        self._refuse_held_master()
        backend = self._resolve_backend(w)
        g = self._check_grad(w, grad)
        master, m, inner, known = self._check_master_state(state, w, g)
        if backend == "cuda":
            # one kernel: the float16 gradient is widened on load, the float16 weight written
            # from the updated master in the same pass
            self._apply(index, master, grad, inner, backend, m, stream=stream, mirror=w,
                        known=[w, g, m] + known)
            return
        if backend == "reference":
            self._apply(index, master, grad.astype(np.float32), inner, backend, m)
            np.copyto(weight, master, casting="same_kind")
            return
        # one pass on the CPU too: the float16 gradient is widened on load and the float16
        # weight rounded from the updated master by the kernel that updates it
        launcher = cpu.MirrorLauncher(master, weight)
        self._apply(index, master, grad, inner, backend, m, launcher=launcher)
        if not launcher.mirrored:
            cpu.to_half_into(weight, master)

    def _check_master_state(self, state, w, g, grad_name="grad"):
        """A multi-precision ``state`` against the described float16 weight ``w`` and
        gradient ``g``: ``(master, master_desc, inner_state, inner_descs)``."""
        if not isinstance(state, tuple) or len(state) != 2:
            raise TypeError("a multi-precision state must be the 2-tuple that "
                            "create_state_multi_precision returned")
        master, inner = self.split_master(state)
        m = self._check_array("state (float32 master copy)", master, w.shape, np.float32, w)
        if arrays.overlaps(g, m):
            raise ValueError(f"state (float32 master copy) shares memory with the {grad_name}")
        known = self._check_state(inner, m, self.create_state_template(m),
                                  others=((grad_name, g), ("weight", w)))
        return master, m, inner, known
