"""Updates from row-sparse gradients (``toolkit.RowSparse``): MXNet 1.9.1's lazy and standard
updates, and its dense fallback.

Each optimizer says how it takes a row-sparse gradient (``Optimizer.row_sparse_mode``):

* ``"lazy"``: only the rows present are updated, weight and state; every other row keeps its
  weight and state exactly (MXNet's ``lazy_update``: sgd and adam with ``lazy_update=True``,
  adagrad, ftrl, groupadagrad, nag without momentum). The update of a present row is the dense
  update of that row.
* ``"standard"``: every row is updated, the absent ones with a zero gradient (MXNet's
  ``lazy_update=False`` for sgd and adam): the dense update of the dense gradient, with the
  numerics of MXNet's row-sparse kernel.
* ``"dense"``: the gradient is made dense and the dense update runs (what MXNet 1.9.1 does for
  the optimizers without a sparse kernel: its storage fallback).

Under convention "mxnet" the optimizers whose row-sparse kernel rounds differently from their
dense one (SGD without momentum: MXNet's ``sgd_update`` forms ``(lr*rescale_grad)*grad``
where its aggregated dense kernel forms ``lr*grad`` after the multiplication) read
``Optimizer._row_sparse_numerics`` during the step.

How a lazy step runs: on the CPU, C-contiguous float32/float64 weights are updated in place by a
row kernel (``cpu.RowsLauncher``); anything else on the host (float16 storage, a float32 master
copy, Fortran order, the reference backend) gathers the present rows, runs the dense update on
them, and writes them back; on CUDA a row kernel updates the rows in place (``rows`` of the
CUDA launcher). Everything is checked before anything is written.

``Optimizer`` derives from :class:`RowSparseSteps`: ``update`` and ``update_multi_precision``
hand a ``RowSparse`` gradient to its ``_row_sparse_update``, which runs their checks and launch
context on the optimizer itself. The mode of the step in progress is kept per thread
(``_row_sparse_step``): the dense update it runs reads it (``kernel_row``'s ``sparse``).
"""
from __future__ import annotations

import threading

import numpy as np

from ..backends import cpu, jit

__all__ = ["RowSparseSteps", "MODES", "RUNNING"]

MODES = ("lazy", "standard", "dense")

#: per thread: optimizer id -> the row-sparse mode of its step in progress (``modes``)
_ACTIVE = threading.local()
#: how many row-sparse steps are in progress now, in all threads together (``update`` takes
#: no prepared step while one is): a step reads its thread's table only when this is not 0 (a thread that set an entry counted it first, under
#: the lock, so it never reads 0 while its own entry is set)
RUNNING = [0]
_IN_USE_LOCK = threading.Lock()


class _SparseStep:
    """The row-sparse mode of one optimizer's step in progress in this thread, while the block
    runs; then what it was before."""

    __slots__ = ("key", "mode", "outer", "entries")

    def __init__(self, key, mode):
        self.key, self.mode = key, mode

    def __enter__(self):
        entries = getattr(_ACTIVE, "modes", None)
        if entries is None:
            entries = _ACTIVE.modes = {}
        self.entries = entries
        self.outer = entries.get(self.key)
        with _IN_USE_LOCK:
            RUNNING[0] += 1
        entries[self.key] = self.mode
        return self.mode

    def __exit__(self, *exc):
        if self.outer is None:
            self.entries.pop(self.key, None)
        else:
            self.entries[self.key] = self.outer
        with _IN_USE_LOCK:
            RUNNING[0] -= 1
        return False


def _gather(state, rows):
    """``state`` (None, an array, or nested tuples of arrays) with every array's rows taken."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(_gather(s, rows) for s in state)
    return np.ascontiguousarray(state[rows])


def _scatter(dst, src, rows):
    if dst is None:
        return
    if isinstance(dst, tuple):
        for d, s in zip(dst, src):
            _scatter(d, s, rows)
        return
    dst[rows] = src


class RowSparseSteps:
    """The row-sparse half of ``update`` (methods of ``Optimizer``)."""

    def _row_sparse_step(self, mode):
        """While this runs, :attr:`_row_sparse_numerics` is ``mode`` for this optimizer in this
        thread."""
        return _SparseStep(id(self), mode)

    @property
    def _row_sparse_numerics(self):
        """The row-sparse mode ("lazy" or "standard") of the step in progress, else None: an
        optimizer whose MXNet row-sparse kernel rounds differently from its dense one then uses
        that kernel's arithmetic."""
        if not RUNNING[0]:  # no sparse step in progress anywhere
            return None
        modes = getattr(_ACTIVE, "modes", None)
        return modes.get(id(self)) if modes else None

    def _row_sparse_update(self, index, weight, grad, state, *, multi_precision, stream=None):
        """``update`` (or ``update_multi_precision``) with the ``RowSparse`` gradient ``grad``."""
        self._check_index(index)
        w = self._check_weight(weight)
        backend = self._resolve_backend(w)
        rows, v = grad.check(w)
        mode = self.row_sparse_mode(index)
        if mode not in MODES:  # pragma: no cover - a subclass bug
            raise ValueError(f"row_sparse_mode returned {mode!r}, expected one of {MODES}")
        dense_update = self.update_multi_precision if multi_precision else self.update
        if mode != "dense" and self.holds_low(w):
            raise NotImplementedError(
                f"a row-sparse gradient steps {mode} rows, but state_dtype="
                f"{self.state_dtype!r} holds blocks of many rows: pass grad.to_dense(), or "
                f"state_dtype=None")
        if mode == "dense":
            return dense_update(index, weight, grad.to_dense(), state, stream=stream)
        if mode == "standard":
            with self._row_sparse_step(mode):
                return dense_update(index, weight, grad.to_dense(), state, stream=stream)
        master = multi_precision and self.uses_master(weight)
        # the whole arrays' checks (a check of gathered rows could not see overlaps and shapes)
        if master:
            m_arr, m, inner, known = self._check_master_state(state, w, v, "grad.values")
            known = [w, v, m] + known
        else:
            known = [w, v] + self._check_state(state, w, self.create_state_template(w),
                                               others=(("grad.values", v),))
        if backend == "cuda":  # the row kernel, in place (one launch per rule)
            if not w.c_contiguous:
                raise ValueError("a lazy row-sparse update on CUDA needs a C-contiguous weight")
            with self._row_sparse_step("lazy"):
                if master:
                    self._apply(index, m_arr, grad.values, inner, "cuda", m, stream=stream,
                                mirror=w, known=known, rows=rows)
                else:
                    self._apply(index, weight, grad.values, state, "cuda", w, stream=stream,
                                known=known, rows=rows)
            return None
        if backend == "cpu" and not master and w.dtype in jit.DTYPES and w.c_contiguous:
            with self._row_sparse_step("lazy"):
                self._apply(index, weight, grad.values, state, backend, w,
                            launcher=cpu.RowsLauncher(rows))
            return None
        # the rows present, gathered: the dense update checks them before anything is written
        sub_w, sub_state = np.ascontiguousarray(weight[rows]), _gather(state, rows)
        with self._row_sparse_step("lazy"):
            dense_update(index, sub_w, np.ascontiguousarray(grad.values), sub_state)
        weight[rows] = sub_w
        _scatter(state, sub_state, rows)
        return None
