"""MXNet's bookkeeping of an optimizer, index by index: the learning rate and its schedule, the
per-index and per-name multipliers, the per-index counts ``t`` and ``num_update`` (MXNet 1.9.1
python/mxnet/optimizer/optimizer.py: ``_get_lr``, ``_get_wd``, ``_update_count``), and
:class:`Counts`, the mapping that holds the counts.

A step of index ``i`` reads three scalars (``Optimizer.next_step``): the count ``t`` after it,
the learning rate (schedule at ``num_update``, times ``lr_mult``) and the weight decay (times
``wd_mult``); :meth:`Bookkeeping._step_scalars` computes them and
:meth:`Bookkeeping._commit_count` commits the count. The same numbers for many indices at once,
as arrays, are :mod:`toolkit.optimizers.batched`'s.

:class:`Counts` is a mapping like the dict MXNet keeps (``_index_update_count``, ``{index: t}``)
that reads and writes the same way index by index. An index that is a non-negative integer below
``2**31`` with a count in int64 lives in an int64 array at its own position (-1 where it has no
count) while the array stays dense (an index below twice the number of counts plus 1024);
anything else in a dict beside it. An index in the array that is not an int but equals one (a
numpy integer, True, 3.0) reads back as that int, where a dict keeps the object first stored. It
iterates the array's indices in increasing order, then the others in the order stored, and it is
not a ``dict`` instance (read ``Optimizer.update_counts``, a dict, to save or compare counts).
:meth:`Counts.gather` and :meth:`Counts.scatter` read and write many indices with numpy (a dict
would cost a Python lookup per index: 140 us per step of 2000 parameters read and written).
"""
from __future__ import annotations

import contextlib
import itertools
import math
import numbers
from collections.abc import Mapping, MutableMapping

import numpy as np

from .validation import check_nonneg

__all__ = ["Bookkeeping", "Counts", "builtin_schedule", "keeps_hooks", "INT64_MAX", "HOOKS",
           "COMMIT"]

#: the largest count (an int64)
INT64_MAX = 2 ** 63 - 1


#: indices at or above this live in the dict
_ARRAY_LIMIT = 2 ** 31
#: the array grows to an index below ``2 * counts + _DENSE``, so it holds at most a few times
#: more positions than counts
_DENSE = 1024
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
    return type(value) is int and 0 <= value <= INT64_MAX


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
                key < _ARRAY_LIMIT and 0 <= value <= INT64_MAX:  # no lookups
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


def builtin_schedule(sched):
    """Whether ``sched`` is one of the toolkit's schedulers: a function of the count it is
    given, whatever it was given before, so that reading it once per distinct count is reading
    it once per index."""
    from .. import lr_scheduler
    cls = type(sched)
    return (isinstance(sched, lr_scheduler.LRScheduler)
            and cls.__module__ == lr_scheduler.__name__
            and cls.__call__ is lr_scheduler.LRScheduler.__call__)


def _as_float(mult):
    """A multiplier of the tables as the float64 MXNet multiplied by (a table assigned
    directly may hold numpy float32s: NumPy 2 would make ``lr * mult`` a float32 product)."""
    return mult if type(mult) is float or not isinstance(mult, numbers.Real) else float(mult)


def _integral_count(index, t):
    """``t`` (a count + 1 of another type than int, counts assigned directly as a dict of
    numpy ints or floats; or beyond int64) as the int it equals, or a ValueError naming the
    index."""
    try:
        k = int(t) if isinstance(t, numbers.Real) or hasattr(t, "__index__") else None
    except (TypeError, OverflowError, ValueError):  # NaN, infinity, a number int refuses
        k = None
    if k is None or k != t:
        raise ValueError(f"the update count of index {index!r} is {t - 1!r}; counts are "
                         "integers (check what was assigned to _index_update_count)")
    if k > INT64_MAX:
        raise ValueError(f"the update count of index {index!r} would be {k}, beyond int64 "
                         f"(2**63 - 1); a count this large cannot be stepped (check the counts "
                         "put back by restore_counts or assigned to _index_update_count)")
    return k


class Bookkeeping:
    """Learning rate, schedule, multipliers and counts (the attributes ``lr``,
    ``lr_scheduler``, ``wd``, ``lr_mult``, ``wd_mult``, ``param_dict``, ``idx2name``,
    ``begin_num_update``, ``num_update``, ``_index_update_count``, ``requires_positive_lr``
    are ``Optimizer``'s)."""

    @property
    def learning_rate(self):
        """The current base learning rate (the scheduler's value at ``num_update`` if set)."""
        if self.lr_scheduler is not None:
            return self.lr_scheduler(self.num_update)
        return self.lr

    def set_learning_rate(self, lr):
        """Set the base learning rate. With an lr_scheduler this raises UserWarning, as MXNet."""
        if self.lr_scheduler is not None:
            raise UserWarning("LRScheduler of the optimizer has already been defined. "
                              "Note that set_learning_rate can mutate the value of the learning "
                              "rate of the optimizer only when the LRScheduler of the optimizer "
                              "is undefined.")
        self.lr = check_nonneg("learning_rate", lr)

    def set_lr_mult(self, args_lr_mult):
        """Per-index (or per-name) learning-rate multipliers; replaces earlier ones."""
        if not isinstance(args_lr_mult, dict):
            raise TypeError("set_lr_mult expects a dict of index or name to multiplier")
        mult = {k: check_nonneg(f"lr_mult[{k!r}]", v) for k, v in args_lr_mult.items()}
        self.lr_mult = mult

    def set_wd_mult(self, args_wd_mult):
        """Per-index (or per-name) weight-decay multipliers; replaces earlier ones.

        As in MXNet, every name of ``param_idx2name`` that ends neither in ``_weight`` nor in
        ``_gamma`` first gets multiplier 0 (biases and batch-norm betas are not decayed).
        """
        if not isinstance(args_wd_mult, dict):
            raise TypeError("set_wd_mult expects a dict of index or name to multiplier")
        mult = {}
        for name in self.idx2name.values():
            if not (name.endswith("_weight") or name.endswith("_gamma")):
                mult[name] = 0.0
        mult.update({k: check_nonneg(f"wd_mult[{k!r}]", v) for k, v in args_wd_mult.items()})
        self.wd_mult = mult

    def _mult(self, index, table, attr):
        pd = self.param_dict
        if isinstance(pd, dict):  # a Trainer's ParamDict too, without an ABC check
            p = pd.get(index) if pd else None
        else:  # any mapping, as MXNet's ``index in param_dict`` reads it
            p = pd.get(index) if isinstance(pd, Mapping) else None
        if p is not None and hasattr(p, attr):
            return float(getattr(p, attr))
        if not table:  # no multipliers (the common case): neither lookup below can match
            return 1.0
        if index in table:
            return _as_float(table[index])
        name = self.idx2name.get(index)
        if name is not None and name in table:
            return _as_float(table[name])
        return 1.0

    def _get_lr(self, index, num_update=None):
        """The learning rate of ``index``: schedule (at ``num_update``) times its multiplier."""
        sched = self.lr_scheduler
        if sched is not None:
            lr = self._read_schedule(sched, index,
                                     self.num_update if num_update is None else num_update)
        else:
            lr = self.lr
        pd = self.param_dict
        if self.lr_mult or type(pd) is not dict or pd:
            lr = lr * self._mult(index, self.lr_mult, "lr_mult")
        else:  # no multipliers at all (the common case): _mult's 1.0 without the call
            lr = lr * 1.0
        if type(lr) is float and 0.0 <= lr < math.inf:  # the common case, without an ABC check
            return lr
        if not (isinstance(lr, numbers.Real) and math.isfinite(lr) and lr >= 0):
            raise ValueError(f"the learning rate for index {index!r} is {lr!r}; it must be "
                             "finite and >= 0 (check the lr_scheduler and lr_mult)")
        return float(lr)

    def _read_schedule(self, sched, index, n):
        """The rate of schedule ``sched`` at count ``n`` for a step of ``index``: one read,
        or within :meth:`schedule_read_once` what the first read of ``(index, n)`` gave."""
        once = self.__dict__.get("_read_once")
        if once is None or once[0] is not sched:
            return sched(n)
        lr = once[1].get((index, n), once)
        if lr is once:
            lr = once[1][(index, n)] = sched(n)
        return lr

    def _get_wd(self, index):
        pd = self.param_dict
        if self.wd_mult or type(pd) is not dict or pd:
            wd = self.wd * self._mult(index, self.wd_mult, "wd_mult")
            if type(wd) is float and 0.0 <= wd < math.inf:  # the common case
                return wd
            if not (isinstance(wd, numbers.Real) and math.isfinite(wd) and wd >= 0):
                raise ValueError(f"the weight decay for index {index!r} is {wd!r}; it must be "
                                 "finite and >= 0 (check wd and wd_mult)")
            return float(wd)
        return self.wd * 1.0  # no multipliers at all: _mult's 1.0 without the call

    def has_stepped(self, index):
        """Whether ``index`` has a count: it has stepped, or its count was restored (a states
        file). A state made from the weight's values (Schedule-Free AdamW's ``z``, DCASGD's
        ``w_prev``) is made again from a weight set before the first step
        (``Trainer.data_changed``)."""
        return index in self._index_update_count

    def _next_count(self, index):
        """``(t, num_update)`` after this index's next update, without committing them."""
        t = self._index_update_count.get(index, self.begin_num_update) + 1
        if type(t) is not int or t > INT64_MAX:  # assigned as another number, or too large
            t = _integral_count(index, t)
        n = self.num_update
        return t, (t if t > n else n)  # max(n, t)

    def _lr_count(self, num_update_after):
        """The ``num_update`` the schedule is read at: MXNet increments the count first."""
        return num_update_after

    def _commit_count(self, index, t):
        counts = self._index_update_count
        if type(counts) is Counts and type(index) is int and type(t) is int and \
                0 <= index < len(counts._t) and counts._t.item(index) >= 0 and 0 <= t <= INT64_MAX:
            counts._t[index] = t  # a count rewritten in place: Counts.__setitem__'s first case
            counts._changes = next(_WRITES)
        else:
            counts[index] = t
        if t > self.num_update:  # num_update = max(num_update, t)
            self.num_update = t

    def _update_count(self, index):
        """MXNet's ``_update_count``: add 1 to the count of ``index`` (or of each index of a
        list) and update ``num_update``. For custom optimizers that override ``update`` (the
        guide's recipe, after MXNet's NAG source); built-in updates count by themselves."""
        for i in (index if isinstance(index, (list, tuple)) else [index]):
            self._commit_count(i, self._next_count(i)[0])


    def _step_scalars(self, index):
        """``(t, lr, wd)`` of this index's next step, checked, without committing anything."""
        counts = self._index_update_count
        if type(index) is int and type(counts) is Counts and _PLAIN.get(type(self)) \
                and self.lr_scheduler is None and not self.lr_mult and not self.wd_mult and \
                type(self.param_dict) is dict and not self.param_dict and \
                0 <= index < len(counts._t):
            # an int index counted in the array, no schedule, no multipliers: what the hooks
            # below compute, without their calls
            c = counts._t.item(index)
            lr = self.lr * 1.0
            if 0 <= c < INT64_MAX and type(lr) is float and 0.0 <= lr < math.inf and \
                    (lr > 0.0 or not self.requires_positive_lr):
                return c + 1, lr, self.wd * 1.0
        keeps_hooks(type(self))  # known from now on: the next step may take the shortcut
        t, num_update = self._next_count(index)
        lr = self._get_lr(index, self._lr_count(num_update))
        if self.requires_positive_lr and not lr > 0:
            raise ValueError(f"{type(self).__name__} divides by the learning rate; it must be "
                             f"> 0, got {lr} for index {index!r}")
        return t, lr, self._get_wd(index)

    @property
    def update_counts(self):
        """A copy of the per-index counts ``{index: t}`` (MXNet's ``_index_update_count``):
        what a states file saves and a distributed step compares across ranks."""
        return dict(self._index_update_count)

    def count_of(self, index):
        """The count ``t`` of ``index``'s last update, or None where it has none."""
        return self._index_update_count.get(index)

    def restore_counts(self, counts, num_update):
        """Put back the per-index counts and ``num_update`` (a states file's, once every check
        of it passed)."""
        self._index_update_count = Counts(counts)
        self.num_update = num_update

    @contextlib.contextmanager
    def schedule_read_once(self):
        """Within the block, a learning-rate schedule of the user's own is read once per index
        and count: the first read of index ``i`` at count ``n`` is kept, and a later read of
        the same ``(i, n)`` gets what it returned. A caller that checks every index's step
        (:meth:`step_scalars`) before updating them one by one (the Trainer's per-parameter
        path) so reads the schedule as the updates alone would, once per index and update as
        MXNet does: a schedule that keeps state between calls gives the same rates. The
        toolkit's schedules (a function of the count) are read as usual."""
        sched = self.lr_scheduler
        if sched is None or builtin_schedule(sched) or "_read_once" in self.__dict__:
            yield self
            return
        self.__dict__["_read_once"] = (sched, {})
        try:
            yield self
        finally:
            self.__dict__.pop("_read_once", None)


#: the per-index methods a step's scalars and its commit are made of: a class that keeps
#: Bookkeeping's own definitions of them all computes them as this module does (then
#: ``_step_scalars`` takes its shortcut and ``toolkit.optimizers.batched`` vectorises them)
HOOKS = ("_step_scalars", "_next_count", "_lr_count", "_get_lr", "_get_wd", "_mult",
         "_commit_count")
#: the commit alone
COMMIT = ("_commit_count",)
_KEEPS: dict = {}
#: class -> keeps_hooks(class) for all of HOOKS (what _step_scalars reads, without a tuple key)
_PLAIN: dict = {}


def keeps_hooks(cls, names=HOOKS):
    """Whether ``cls`` keeps :class:`Bookkeeping`'s own definitions of the methods ``names``
    (found once per class)."""
    known = _KEEPS.get((cls, names))
    if known is None:
        known = _KEEPS[(cls, names)] = all(getattr(cls, m) is Bookkeeping.__dict__[m]
                                           for m in names)
        if names is HOOKS:
            _PLAIN[cls] = known
    return known
