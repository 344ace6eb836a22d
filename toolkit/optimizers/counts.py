"""MXNet's per-index update counts (``_index_update_count``, ``{index: t}``), kept so that a
step of many indices reads and commits them as arrays.

:class:`Counts` is a mapping like the dict MXNet keeps, and reads and writes the same way
index by index. An index that is a non-negative integer below ``2**31`` with a count in int64
(every Trainer index, every count a step takes) lives in an int64 array at its own position
(-1 where it has no count) when the array stays dense (an index below twice the number of
counts plus 1024), anything else in a dict beside it. An index in the array that is not an
int but equals one (a numpy integer, True, 3.0) reads back as that int, where a dict keeps the
object first stored (a states file writes it as that int). Where it is not a dict: it iterates
the array's indices in increasing order, then the others in the order stored (a dict iterates in
the order stored), and it is not a ``dict`` instance (``json.dumps`` refuses it; read
``Optimizer.update_counts``, a dict, to save or compare counts). :meth:`Counts.gather` and
:meth:`Counts.scatter` read and write many such indices with numpy (the vectorised plan,
``Bookkeeping.step_scalars``); the dict MXNet kept would cost a Python lookup per index (about
70 ns each, 140 us per step of 2000 parameters read and written).
"""
from __future__ import annotations

import itertools
from collections.abc import MutableMapping

import numpy as np

__all__ = ["Counts"]

#: indices at or above this live in the dict
_ARRAY_LIMIT = 2 ** 31
#: the array grows to an index below ``2 * counts + _DENSE``, so it holds at most a few times
#: more positions than counts
_DENSE = 1024
_INT64_MAX = 2 ** 63 - 1
#: every write of every Counts takes the next number (``Counts.changes``): no two share one
_WRITES = itertools.count(1)


def _increasing(indices):
    """Whether the int64 array ``indices`` is non-negative and strictly increasing (distinct):
    what :meth:`Counts.gather` and :meth:`Counts.scatter` read and write with numpy. Anything
    else (a negative index, which numpy would read from the array's end; an index twice, which
    would count twice) goes one index at a time, as the dict does."""
    return bool(indices[0] >= 0) and bool((indices[1:] > indices[:-1]).all())


def _slot(key):
    """The array position of ``key``, or None when it lives in the dict. A key a dict finds as
    an int ``k`` (one that hashes as ``k`` and equals it: a numpy integer or bool, True, 3.0,
    ``Decimal(3)``) is that int, as a dict finds it."""
    if type(key) is int:
        k = key
    else:
        try:
            k = hash(key)  # an int k hashes as k: a key the dict finds as k hashes as k too
        except TypeError:
            return None
        if not 0 <= k < _ARRAY_LIMIT:
            return None
        try:
            if not bool(key == k):
                return None
        except Exception:  # noqa: BLE001 - a comparison that fails: not an int's key
            return None
    return k if 0 <= k < _ARRAY_LIMIT else None


def _fits(value):
    return type(value) is int and 0 <= value <= _INT64_MAX


class Counts(MutableMapping):
    """``{index: t}`` with the integer indices' counts in one int64 array (see the module)."""

    __slots__ = ("_t", "_size", "_other", "_changes")

    def __init__(self, items=()):
        self._t = np.full(8, -1, np.int64)
        self._size = 0  # how many array positions hold a count
        self._other = {}
        self._changes = 0
        self.update(items)

    @property
    def changes(self):
        """A number that every write moves (each assignment, deletion, scatter and rewrite;
        a copy starts at a new one): equal between two reads, nothing was written in between.
        No two writes of any two Counts give the same number."""
        return self._changes

    # --- the mapping ------------------------------------------------------------------------
    def __getitem__(self, key):
        k = _slot(key)
        if k is not None and k < len(self._t):
            t = int(self._t[k])
            if t >= 0:
                return t
        return self._other[key]

    def __setitem__(self, key, value):
        self._changes = next(_WRITES)
        t = self._t
        if type(key) is int and type(value) is int and 0 <= key < len(t) and \
                key < _ARRAY_LIMIT and 0 <= value <= _INT64_MAX:  # no lookups
            if t[key] < 0:
                self._size += 1
                self._other.pop(key, None)
            t[key] = value
            return
        k = _slot(key)
        if k is not None and _fits(value) and self._room(k):
            if self._t[k] < 0:
                self._size += 1
                self._other.pop(key, None)
            self._t[k] = value
            return
        if k is not None and k < len(self._t) and self._t[k] >= 0:
            self._t[k] = -1
            self._size -= 1
        self._other[key] = value

    def __delitem__(self, key):
        self._changes = next(_WRITES)
        k = _slot(key)
        if k is not None and k < len(self._t) and self._t[k] >= 0:
            self._t[k] = -1
            self._size -= 1
            return
        del self._other[key]

    def __iter__(self):
        if self._size:
            yield from np.flatnonzero(self._t >= 0).tolist()
        yield from self._other

    def __len__(self):
        return self._size + len(self._other)

    def __contains__(self, key):
        k = _slot(key)
        if k is not None and k < len(self._t) and self._t[k] >= 0:
            return True
        return key in self._other

    def get(self, key, default=None):
        k = _slot(key)
        if k is not None and k < len(self._t):
            t = int(self._t[k])
            if t >= 0:
                return t
        return self._other.get(key, default)

    def copy(self):
        c = Counts.__new__(Counts)
        c._t, c._size, c._other = self._t.copy(), self._size, dict(self._other)
        c._changes = next(_WRITES)
        return c

    __copy__ = copy

    def __deepcopy__(self, memo):
        return self.copy()

    def __repr__(self):
        return f"Counts({dict(self)!r})"

    def _room(self, k, adding=1):
        """Whether position ``k`` is in the array, after growing it when that keeps it dense
        (with ``adding`` more counts to come)."""
        if k < len(self._t):
            return True
        if k >= _ARRAY_LIMIT or k >= 2 * (self._size + adding) + _DENSE:
            return False
        t = np.full(max(k + 1, 2 * len(self._t)), -1, np.int64)
        t[:len(self._t)] = self._t
        self._t = t
        return True

    # --- many indices at once ---------------------------------------------------------------
    def gather(self, indices, default):
        """The counts of ``indices`` (an int64 array), ``default`` where an index has none;
        None when one of them may live in the dict (the caller reads them one by one),
        ``default`` is not an int64 or ``indices`` is not non-negative and strictly increasing
        (the caller reads them one by one)."""
        if self._other or not _fits(default) or (indices.size and not _increasing(indices)):
            return None
        t = self._t
        if indices.size and int(indices.max()) >= len(t):  # those beyond the array: no count
            c = np.full(indices.size, -1, np.int64)
            inside = indices < len(t)
            c[inside] = t[indices[inside]]
        else:
            c = t[indices]
        if c.size and c.min() >= 0:  # every index counted (a step after the first): as read
            return c
        return np.where(c < 0, np.int64(default), c)

    def scatter(self, indices, t):
        """Set the counts of ``indices`` (an int64 array) to ``t`` (an int64 array), as
        ``self[i] = t_i`` one by one would (one by one where ``indices`` is not non-negative
        and strictly increasing, or a count is negative: the dict beside holds those). Returns
        whether every count now lives in the array at its index's position (then
        :meth:`rewrite` may write them again)."""
        if not indices.size:
            return False
        if not _increasing(indices) or t.min() < 0 or \
                not self._room(int(indices[-1]), adding=indices.size):
            for i, v in zip(indices.tolist(), t.tolist()):
                self[i] = v
            return False
        self._changes = next(_WRITES)
        if self._other:
            for i in indices.tolist():
                self._other.pop(i, None)
        self._size += int(np.count_nonzero(self._t[indices] < 0))
        self._t[indices] = t
        return True

    def rewrite(self, where, t):
        """Set the counts at the array positions ``where`` (a slice or an int64 array) to
        ``t`` (a non-negative int64 array), where each of those positions holds a count: the
        caller's last :meth:`scatter` of them returned True and :attr:`changes` has moved by
        that scatter's (or the last rewrite's) one since. No check."""
        self._changes = next(_WRITES)
        self._t[where] = t

    def read(self, where):
        """The counts at the array positions ``where`` (as for :meth:`rewrite`), as read."""
        return self._t[where]
