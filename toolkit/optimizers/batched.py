"""The bookkeeping of a step of many indices at once, as arrays, bit for bit what the per-index
loop (:mod:`toolkit.optimizers.bookkeeping`) computes: :meth:`BatchedBookkeeping.step_scalars`
and :meth:`BatchedBookkeeping.commit_counts` (the Trainer's and ``toolkit.torch``'s plans).

MXNet computes a step's scalars one index at a time, in index order, committing each count
before the next index is read, so ``num_update`` (and with it the schedule) grows along the way.
For a sorted list of indices, as arrays:

* ``t = count + 1`` (``begin_num_update + 1`` for an index never stepped);
* ``num_update`` after index ``j`` is ``max(num_update, t_0, ..., t_j)``, a running maximum;
* the schedule is read once per distinct ``num_update``, in increasing order as the per-index
  loop reads it (the toolkit's schedulers give the same value for the same count however often
  they are asked; a schedule of the user's own is read once per index, as MXNet does);
* ``lr = base * lr_mult`` and ``wd = wd * wd_mult`` are float64 products: the products Python's
  floats form one at a time.

Where any of this cannot be shown to be the per-index computation (a subclass that overrides a
piece of the bookkeeping, a base rate that is not a Python float, a value the per-index checks
refuse), ``step_scalars`` runs the per-index computation (counts put back afterwards), which
also raises its errors. Nothing there writes to the optimizer; ``commit_counts`` does, once the
step is planned. ``Optimizer`` derives from :class:`BatchedBookkeeping`.
"""
from __future__ import annotations

import math
import operator
from typing import NamedTuple

import numpy as np

from .bookkeeping import COMMIT, INT64_MAX, Bookkeeping, Counts, builtin_schedule, keeps_hooks

__all__ = ["BatchedBookkeeping", "HostScalars", "Kept", "StepScalars"]


class StepScalars(NamedTuple):
    """The scalars of one step of many indices (:meth:`Bookkeeping.step_scalars`), one entry
    per index, in the order the indices were given."""
    t: np.ndarray    #: int64: each index's count after this step
    lr: np.ndarray   #: float64: learning rate with schedule and multiplier
    wd: np.ndarray   #: float64: weight decay with multiplier

    #: the host scalars after the step (:class:`HostScalars`); None: the optimizer keeps none
    host = None

    def distinct(self):
        """``(first, inverse)``: the position of the first index of each distinct
        ``(t, lr, wd)`` (told apart by their bits; a list, in the order of those triples'
        bits), and for every index the position in ``first`` of its triple; ``inverse`` is
        None when all are one triple (``first == [0]``, no table of keys sorted)."""
        lr_bits, wd_bits = self.lr.view(np.int64), self.wd.view(np.int64)
        if (self.t == self.t[0]).all() and (lr_bits == lr_bits[0]).all() and \
                (wd_bits == wd_bits[0]).all():
            return [0], None
        key = np.stack([self.t, lr_bits, wd_bits], axis=1)
        _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
        return first.tolist(), inverse.reshape(-1)

    def subset(self, at):
        """The scalars of the positions ``at`` (an index array or a slice), of the same kind
        (one triple stays one)."""
        return type(self)(self.t[at], self.lr[at], self.wd[at])

    def row_kwargs(self, j):
        """The keywords of ``kernel_row`` for position ``j`` beside ``(t, lr, wd)``: none
        (:class:`HostScalars`: the index's host scalars)."""
        return {}


class HostScalars(StepScalars):
    """:class:`StepScalars` of an optimizer that keeps per-index scalars on the host which
    advance with each step and enter its row (``Optimizer.host_scalars``: Schedule-Free
    AdamW's ``lr_max`` and ``weight_sum``), with ``host``: a float64 array, one row per index,
    of those scalars *after* this step (as ``t`` is the count after it). A planner hands each
    index's to ``kernel_row(..., host=...)`` (:meth:`row_kwargs`), tells indices apart by
    them too (:meth:`distinct`), and commits them with the counts
    (``commit_counts(indices, t, host)``)."""

    def __new__(cls, t, lr, wd, host):
        self = super().__new__(cls, t, lr, wd)
        self.host = host
        return self

    def distinct(self):
        host_bits = np.ascontiguousarray(self.host, np.float64).view(np.int64)
        key = np.concatenate([np.stack([self.t, self.lr.view(np.int64),
                                        self.wd.view(np.int64)], axis=1), host_bits], axis=1)
        if (key == key[0]).all():
            return [0], None
        _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
        return first.tolist(), inverse.reshape(-1)

    def subset(self, at):
        return HostScalars(self.t[at], self.lr[at], self.wd[at], self.host[at])

    def row_kwargs(self, j):
        return {"host": tuple(self.host[j].tolist())}

    def _replace(self, **changes):  # the host scalars belong to these t and lr
        raise TypeError("HostScalars cannot be changed: the host scalars are those of its "
                        "t and lr")


class Kept:
    """An array that a caller hands to :meth:`Bookkeeping.step_scalars` and
    :meth:`Bookkeeping.commit_counts` step after step (the Trainer: its indices when every
    parameter is fresh, and its multipliers): a private read-only copy, taken here and reachable
    by no public name, so that the optimizer may keep, by this object's identity, what it made
    of it (the counts its last commit wrote, the rates). ``len`` and :meth:`values` (a copy)
    read it."""

    __slots__ = ("_a",)

    def __init__(self, values, dtype=np.int64):
        a = np.array(values, dtype)
        if a.ndim != 1:
            raise ValueError(f"Kept holds a 1-D array, got shape {a.shape}")
        a.setflags(write=False)
        self._a = a

    def __len__(self):
        return len(self._a)

    def values(self):
        """A copy of the array."""
        return self._a.copy()

    def __repr__(self):
        return f"Kept({self._a.tolist()!r}, {self._a.dtype})"


def _read_only(a):
    """A read-only view of ``a``, made read-only first: a view of a read-only array cannot be
    made writeable (what the caller receives cannot change what is kept)."""
    a.setflags(write=False)
    return a.view()


class _UniformScalars(StepScalars):
    """:class:`StepScalars` known, from how they were made, to be one ``(t, lr, wd)``."""

    __slots__ = ()

    def distinct(self):
        return [0], None

    def _replace(self, **changes):  # other values: no longer known to be one triple
        return StepScalars(*self)._replace(**changes)


class _Committed(NamedTuple):
    """What the last vectorised commit of a :class:`Kept` array of indices wrote, so that the
    next step of the same one reads its counts back without a check: the counts of ``kept``
    (increasing) at the array positions ``where`` (a slice when they are contiguous) of
    ``counts``, whose ``changes`` were then ``changes``; the largest of them and whether they
    were all equal."""
    counts: Counts
    changes: int
    kept: Kept
    where: object
    top: int
    uniform: bool


class _Rates(NamedTuple):
    """The checked learning rates and weight decays of a step without a schedule, kept while
    what they were made from is the very same objects: the :class:`Kept` indices, ``lr``,
    ``wd``, ``requires_positive_lr`` and the :class:`Kept` multipliers (none: no multipliers
    anywhere)."""
    key: tuple
    lr: np.ndarray   # read-only
    wd: np.ndarray   # read-only
    uniform: bool    # every lr one value, bit for bit, and every wd


def _same(key, held):
    return len(key) == len(held) and all(map(operator.is_, key, held))


#: ``step_scalars``' multipliers when there are none anywhere (every index's is 1.0)
_NO_MULTIPLIERS = ("none anywhere",)


def _as_list(indices):
    return indices.tolist() if isinstance(indices, np.ndarray) else list(indices)


def _index_array(indices):
    """``indices`` as an int64 array when it is a list, tuple or range of ints (what
    ``toolkit.torch`` and a user pass), so the counts are read and written as arrays; else as
    given (names, other numbers: the mapping's own reads)."""
    if isinstance(indices, (list, tuple, range)) and len(indices):
        try:
            a = np.array(indices)
        except (OverflowError, ValueError, TypeError):
            return indices
        if a.dtype == np.int64 and a.ndim == 1 and all(type(i) is int for i in indices[:1]):
            return a
    return indices


class BatchedBookkeeping(Bookkeeping):
    """:class:`~toolkit.optimizers.bookkeeping.Bookkeeping` with the steps of many indices at once
    (methods of ``Optimizer``)."""

    #: names of the per-index scalars this optimizer keeps on the host, which advance with
    #: each step and enter its row (Schedule-Free AdamW: ``("lr_max", "weight_sum")``); then
    #: :meth:`step_scalars` gives :class:`HostScalars` (their values after the step, from
    #: :meth:`host_next`), ``kernel_row`` takes an index's as ``host=`` and
    #: :meth:`commit_counts` commits them (:meth:`commit_host`)
    host_scalars = ()

    def host_next(self, indices, t, lr):
        """The host scalars (:attr:`host_scalars`) of each index of ``indices`` after its step
        at count ``t[j]`` with learning rate ``lr[j]``: a float64 array ``(len(t), k)``.
        Changes nothing. Implemented by an optimizer that declares host scalars."""
        raise NotImplementedError(f"{type(self).__name__} declares no host scalars")

    def commit_host(self, indices, host):
        """Keep ``host`` (:meth:`host_next`'s rows) as the host scalars of ``indices``.
        Implemented by an optimizer that declares host scalars."""
        raise NotImplementedError(f"{type(self).__name__} declares no host scalars")

    def _commit_step(self, index, t, lr):
        """Commit one index's step at count ``t`` with learning rate ``lr``: its count, and
        its host scalars after the step (:attr:`host_scalars`: :meth:`host_next`)."""
        if self.host_scalars:
            self.commit_host([index], self.host_next([index], np.array([t]), np.array([lr])))
        self._commit_count(index, t)

    def step_scalars(self, indices, *, multipliers=None):
        """The scalars of the next step of ``indices`` (:meth:`_count_scalars`); with
        :attr:`host_scalars`, :class:`HostScalars` holding each index's host scalars after the
        step too."""
        scalars = self._count_scalars(indices, multipliers=multipliers)
        if not self.host_scalars:
            return scalars
        idx = indices.values().tolist() if type(indices) is Kept else _as_list(indices)
        return HostScalars(scalars.t, scalars.lr, scalars.wd,
                           self.host_next(idx, scalars.t, scalars.lr))

    def _count_scalars(self, indices, *, multipliers=None):
        """:class:`StepScalars` of the next step of every index of ``indices`` (ints, in
        increasing order for the array reads; in any other order, or with an index twice, the
        loop's numbers in the order given), as the per-index loop (``next_step`` of each, its count committed
        before the next) computes them, bit for bit; nothing is committed (see
        :meth:`commit_counts`). Raises what that loop raises, for the first index it would.

        ``multipliers``: None, or ``(lr_mult, wd_mult)``: float64 arrays indexed by index,
        holding the multiplier each index takes (the Trainer keeps them for its parameters,
        whose ``lr_mult`` and ``wd_mult`` attributes are what ``param_dict`` gives); None reads
        them index by index.

        ``indices`` and each multiplier array may be a :class:`Kept` (the Trainer's, when
        every parameter is fresh): the next step of the same one reads back what the last
        commit of it wrote, and the rates made of the same ones, without a check, as long as
        the counts mapping has taken no other write (``Counts.changes``) and ``lr``, ``wd``
        are the same objects. The arrays returned are read-only."""
        kept = indices if type(indices) is Kept else None
        if kept is not None:
            indices = kept._a
        mults_kept = ()
        if multipliers is not None and len(multipliers) == 2 and \
                all(type(m) is Kept for m in multipliers):
            mults_kept, multipliers = tuple(multipliers), tuple(m._a for m in multipliers)
        if not self._vectorises():
            return self._scalars_per_index(_as_list(indices))
        counts = self._index_update_count
        c = None
        done = self.__dict__.get("_committed")
        if kept is not None and done is not None and kept is done.kept and \
                counts is done.counts and counts.changes == done.changes:
            # the counts the last commit wrote for these very indices, untouched since
            c, top, uniform = counts.read(done.where), done.top, done.uniform
        else:
            uniform = False  # not known
            if isinstance(counts, Counts):
                indices = _index_array(indices)
            if isinstance(indices, np.ndarray) and indices.dtype == np.int64 and \
                    isinstance(counts, Counts):
                if not indices.size:
                    return self._scalars_per_index([])
                if indices[0] >= 0:  # increasing: all of them
                    c = counts.gather(indices, self.begin_num_update)
            if c is None:
                idx = _as_list(indices)
                n = len(idx)
                if n == 0:
                    return self._scalars_per_index(idx)
                try:  # an index twice: the loop commits the first before it reads the second
                    repeated = len(set(idx)) < n
                except TypeError:  # an index a dict cannot hold: the loop says what happens
                    repeated = True
                if repeated:
                    return self._scalars_per_index(idx)
                start = self.begin_num_update
                values = [counts.get(i, start) for i in idx]  # never stepped: begin_num_update
                # a count that is not an int of int64 (assigned directly): the loop says what
                # it is
                if not all(type(v) is int and 0 <= v <= INT64_MAX for v in values):
                    return self._scalars_per_index(idx)
                c = np.array(values, np.int64)
            top = int(c.max())
        if top == INT64_MAX:  # t would wrap: the loop says what it does
            return self._scalars_per_index(_as_list(indices))
        t = c + 1
        sched = self.lr_scheduler
        wd = self.wd
        if type(wd) is not float or (sched is None and type(self.lr) is not float) or \
                (sched is not None and not builtin_schedule(sched)):
            # a schedule of the user's own: read once per index, as MXNet does
            return self._scalars_per_index(_as_list(indices))
        # the multipliers first: reading them changes nothing (the schedule may keep state)
        pd = self.param_dict
        if multipliers is None and type(pd) is dict and not pd and not self.lr_mult and \
                not self.wd_mult:
            multipliers = _NO_MULTIPLIERS  # every index's is 1.0 (x * 1.0 is x)
        if sched is None:
            # what the rates are made of, when it is all kept objects (else they are not kept)
            key = None
            if kept is not None and (multipliers is _NO_MULTIPLIERS or mults_kept):
                key = (kept, self.lr, wd, self.requires_positive_lr, *mults_kept)
            rates = self.__dict__.get("_rates")
            if rates is None or key is None or not _same(key, rates.key):
                rates = self._rates_of(indices, t, multipliers, key)
                if rates is None:  # the per-index loop raises the error that names the index
                    return self._scalars_per_index(_as_list(indices))
            if uniform and rates.uniform:
                t = _read_only(t)  # commit_counts then reads what is kept of it
                self.__dict__["_stepped"] = (t, top + 1)
                return _UniformScalars(t, rates.lr, rates.wd)
            return StepScalars(t, rates.lr, rates.wd)
        lr_mult, wd_mult = self._multiplier_arrays(indices, multipliers)
        if lr_mult is False:
            return self._scalars_per_index(_as_list(indices))
        num_update = np.maximum.accumulate(np.maximum(t, self.num_update))
        distinct = np.unique(num_update)  # increasing: the order the loop reads them in
        # the schedule keeps state (Factor's decays): what reading it did is undone where
        # the loop takes over, which reads it from where it was (and raises what it raises
        # for the first index it would: a refused index before a schedule that raises)
        sched_state = sched.state_dict()
        try:
            values = [sched(v) for v in distinct.tolist()]
        except Exception:
            values = None
        if values is None or any(type(v) is not float for v in values):
            sched.load_state_dict(sched_state)
            return self._scalars_per_index(_as_list(indices))
        base = np.array(values, np.float64)[np.searchsorted(distinct, num_update)]
        lr, wd = self._products(base, wd, lr_mult, wd_mult, len(t))
        if not self._rates_ok(lr, wd):  # the per-index loop raises the error that names it
            sched.load_state_dict(sched_state)
            return self._scalars_per_index(_as_list(indices))
        return StepScalars(t, lr, wd)

    def _vectorises(self):
        """Whether this class keeps every piece of bookkeeping ``step_scalars`` vectorises
        (found once per class)."""
        return keeps_hooks(type(self))

    def _multiplier_arrays(self, indices, multipliers):
        """``(lr_mult, wd_mult)`` of ``indices``: float64 arrays, None for none anywhere
        (``_NO_MULTIPLIERS``), or ``(False, False)`` when one is not a number (the per-index
        loop says what happens)."""
        if multipliers is _NO_MULTIPLIERS:
            return None, None
        if multipliers is None:
            idx = _as_list(indices)
            try:
                return (np.fromiter((self._mult(i, self.lr_mult, "lr_mult") for i in idx),
                                    np.float64, len(idx)),
                        np.fromiter((self._mult(i, self.wd_mult, "wd_mult") for i in idx),
                                    np.float64, len(idx)))
            except (TypeError, ValueError):
                return False, False
        where = indices if isinstance(indices, np.ndarray) and indices.dtype == np.int64 \
            else np.asarray(_as_list(indices), np.int64)
        return multipliers[0][where], multipliers[1][where]

    @staticmethod
    def _products(base, wd, lr_mult, wd_mult, n):
        """``lr = base * lr_mult`` and ``wd * wd_mult``, float64 arrays of ``n``."""
        if lr_mult is None:
            return (np.full(n, base, np.float64) if np.ndim(base) == 0 else base,
                    np.full(n, wd, np.float64))
        return base * lr_mult, wd * wd_mult

    def _rates_ok(self, lr, wd):
        """Every lr and wd in [0, inf) (lr > 0 where required): read from the extremes, which
        are NaN where any is NaN (and a NaN compares False)."""
        lo, hi = float(lr.min()), float(lr.max())
        if not (lo >= 0.0 and hi < math.inf and (lo > 0.0 or not self.requires_positive_lr)):
            return False
        lo, hi = float(wd.min()), float(wd.max())
        return lo >= 0.0 and hi < math.inf

    def _rates_of(self, indices, t, multipliers, key):
        """The checked :class:`_Rates` of a step without a schedule, kept for the next step
        when ``key``'s arrays cannot change under us; None when a check fails."""
        lr_mult, wd_mult = self._multiplier_arrays(indices, multipliers)
        if lr_mult is False:
            return None
        lr, wd = self._products(self.lr, self.wd, lr_mult, wd_mult, len(t))
        if not self._rates_ok(lr, wd):
            return None
        lr_bits, wd_bits = lr.view(np.int64), wd.view(np.int64)
        rates = _Rates(key, _read_only(lr), _read_only(wd),
                       bool((lr_bits == lr_bits[0]).all()) and bool((wd_bits == wd_bits[0]).all()))
        if key is not None:
            self.__dict__["_rates"] = rates
        return rates

    def _scalars_per_index(self, idx):
        """:meth:`step_scalars` the way it is defined: index by index, each count committed
        before the next index is read, and the counts put back afterwards."""
        n = len(idx)
        t = np.empty(n, np.int64)
        lr = np.empty(n, np.float64)
        wd = np.empty(n, np.float64)
        counts = self._index_update_count
        saved = (counts.copy() if isinstance(counts, Counts) else dict(counts), self.num_update)
        sched = self.lr_scheduler
        # a refusal commits nothing: the toolkit's schedule's state (Factor's decays) included
        sched_state = sched.state_dict() if builtin_schedule(sched) else None
        try:
            for j, i in enumerate(idx):
                tj, lr[j], wd[j] = self._step_scalars(i)
                t[j] = tj
                self._commit_count(i, tj)
        except BaseException:
            if sched_state is not None:
                sched.load_state_dict(sched_state)
            raise
        finally:
            self._index_update_count, self.num_update = saved
        return StepScalars(t, lr, wd)

    def commit_counts(self, indices, t, host=None):
        """Commit the counts ``t`` (from :meth:`step_scalars`) of a step of ``indices``, as
        the per-index loop commits them one by one: each index's count, and ``num_update`` the
        largest count seen; ``host`` (a :class:`HostScalars`' ``host``), the host scalars
        after the step (:meth:`commit_host`)."""
        if host is not None:
            self.commit_host(indices.values().tolist() if type(indices) is Kept else
                             _as_list(indices), host)
        kept = indices if type(indices) is Kept else None
        if kept is not None:
            indices = kept._a
        counts = self._index_update_count
        done = self.__dict__.get("_committed")
        if kept is not None and done is not None and kept is done.kept and \
                counts is done.counts and counts.changes == done.changes and self._vectorises():
            # the very indices the last commit wrote, untouched since: at the same positions
            stepped = self.__dict__.pop("_stepped", None)
            if stepped is not None and stepped[0] is t and not t.flags.writeable:
                top, uniform = stepped[1], done.uniform  # t = the counts read + 1
                low = 1
            else:
                top = int(t.max())
                low = int(t.min())
                uniform = low == top
            if low >= 0:  # a negative count belongs in the dict beside (scatter puts it there)
                counts.rewrite(done.where, t)
                self.__dict__["_committed"] = _Committed(counts, counts.changes, kept,
                                                         done.where, top, uniform)
                if top > self.num_update:
                    self.num_update = top
                return
        if isinstance(counts, Counts):
            indices = _index_array(indices)
        if keeps_hooks(type(self), COMMIT) and isinstance(counts, Counts) \
                and isinstance(indices, np.ndarray) and indices.dtype == np.int64:
            if not indices.size:
                return
            if indices[0] >= 0 and indices[-1] < 2 ** 31:  # increasing: all of them
                whole = counts.scatter(indices, t)
                top = int(t.max())
                if whole and kept is not None and self._vectorises():
                    a, b = int(indices[0]), int(indices[-1]) + 1
                    where = slice(a, b) if b - a == indices.size else indices
                    self.__dict__["_committed"] = _Committed(
                        counts, counts.changes, kept, where, top, bool(t.min() == top))
                if top > self.num_update:
                    self.num_update = top
                return
        idx = _as_list(indices)
        if not idx:
            return
        ts = t.tolist()
        if not keeps_hooks(type(self), COMMIT):
            for i, tj in zip(idx, ts):
                self._commit_count(i, tj)
            return
        counts.update(zip(idx, ts))
        top = max(ts)
        if top > self.num_update:
            self.num_update = top
