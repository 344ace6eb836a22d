"""The launch context of a step: the launcher (CPU, CUDA, or the Trainer's recorder) that the
step in progress on an optimizer runs its rules through (``_launching``, ``_launcher``,
``_run_rule``, ``_run_noise_rule``), and the row-sparse mode of that step
(``_row_sparse_step``, ``_row_sparse_numerics``), both kept per thread.

``Optimizer`` derives from :class:`LaunchContext`.
"""
from __future__ import annotations

import threading

from ..backends import cpu

__all__ = ["LaunchContext"]

#: per thread: optimizer id -> the launcher of its step in progress (``launchers``), and the
#: row-sparse mode of its step in progress (``sparse``)
_ACTIVE = threading.local()

#: per table: how many ``_per_thread`` blocks are running now, in all threads together. A step
#: reads its thread's table only when this is not 0: a thread that set an entry counted it
#: before (under the lock), so it never reads 0 while its own entry is set; another thread's
#: count only sends it to its own (empty) table.
_IN_USE = {"launchers": 0, "sparse": 0}
_IN_USE_LOCK = threading.Lock()


class _per_thread:  # noqa: N801 - used as a function, like the generator it replaces
    """``_ACTIVE.<table>[key] = value`` while the block runs (this thread only), then what it
    was before; ``with`` gives ``value``. A class, not a generator: twice per Trainer step."""

    __slots__ = ("table", "key", "value", "outer", "entries")

    def __init__(self, table, key, value):
        self.table, self.key, self.value = table, key, value

    def __enter__(self):
        table = self.table
        entries = getattr(_ACTIVE, table, None)
        if entries is None:
            entries = {}
            setattr(_ACTIVE, table, entries)
        self.entries = entries
        self.outer = entries.get(self.key)
        with _IN_USE_LOCK:
            _IN_USE[table] = _IN_USE.get(table, 0) + 1
        entries[self.key] = self.value
        return self.value

    def __exit__(self, *exc):
        if self.outer is None:
            self.entries.pop(self.key, None)
        else:
            self.entries[self.key] = self.outer
        with _IN_USE_LOCK:
            _IN_USE[self.table] -= 1
        return False


class LaunchContext:
    """The launcher and row-sparse mode of the step in progress (methods of ``Optimizer``)."""

    def _row_sparse_step(self, mode):
        """While this runs, :attr:`_row_sparse_numerics` is ``mode`` for this optimizer in this
        thread."""
        return _per_thread("sparse", id(self), mode)

    @property
    def _row_sparse_numerics(self):
        """The row-sparse mode ("lazy" or "standard") of the step in progress, else None: an
        optimizer whose MXNet row-sparse kernel rounds differently from its dense one then uses
        that kernel's arithmetic."""
        if not _IN_USE["sparse"]:  # no sparse step in progress anywhere
            return None
        sparse = getattr(_ACTIVE, "sparse", None)
        return sparse.get(id(self)) if sparse else None  # empty outside a sparse step

    @property
    def _launcher(self):
        """The launcher of this thread's step in progress on this optimizer, or None (then the
        CPU one). Kept per thread: a step running in one thread never receives another
        thread's rule calls (the optimizer's counts are shared state all the same)."""
        if not _IN_USE["launchers"]:  # no launcher set anywhere: the CPU one
            return None
        return getattr(_ACTIVE, "launchers", {}).get(id(self))

    def _launching(self, launcher):
        """While this runs, :attr:`_launcher` is ``launcher`` for this optimizer in this
        thread."""
        return _per_thread("launchers", id(self), launcher)

    def _run_rule(self, factory, weight, grad, states, hyper):
        """Run a per-element rule over ``weight``, ``grad`` and ``states`` in place, on the
        backend of the step in progress."""
        (self._launcher or cpu.LAUNCHER).run_rule(factory, weight, grad, tuple(states), hyper)

    def _run_noise_rule(self, factory, weight, grad, hyper, key, aux):
        """Run a noise rule (``rule(w, g, z, hp, aux)``, z the element's draw of stream ``key``)
        on the backend of the step in progress."""
        (self._launcher or cpu.LAUNCHER).run_noise_rule(factory, weight, grad, hyper, key,
                                                        tuple(aux))
