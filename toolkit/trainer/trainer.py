"""``Trainer``: Gluon's training step (``mxnet.gluon.Trainer``) over many parameters, one kernel
call per (dtype, device) group, bit for bit the per-parameter ``optimizer.update`` calls it
replaces (``docs/trainer.md``). Parameters are indexed as MXNet does (trainer.py:76-79: a dict
sorted by name, a list in order); ``rescale_grad = scale / batch_size`` (trainer.py:105, 338).
"""
from __future__ import annotations

import math
import numbers
import threading

import numpy as np

from .. import optimizer as _optimizer
from ..backends import arrays
from ..optimizers.batched import Kept
from . import compression as _compression, dist as _dist, held as _held
from .buffers import Group
from .errors import ParamsError, StaleGradientError
from .parameter import ParamDict, Parameter, holds_version
from .updates import Updates

__all__ = ["Trainer", "StaleGradientError", "ParamsError", "KVSTORES"]

#: kvstore types a single process trains with; "device" and "local" are the same here
KVSTORES = ("device", "local", None)


class Trainer(Updates):
    """Applies an optimizer to a set of parameters (Gluon's ``Trainer``).

    Parameters
    ----------
    params : dict of str to Parameter, or list of Parameter
        A dict is sorted by key; the sorted position is the optimizer index.
    optimizer : str or toolkit.optimizer.Optimizer
        A registry name (with ``optimizer_params``) or an instance.
    optimizer_params : dict, optional
        Keyword arguments of ``optimizer.create`` (only with a name).
    kvstore : {"device", "local", None, "dist_sync", "dist_device_sync"}, default "device"
        One process: the first three train the same way. "dist_sync"/"dist_device_sync":
        synchronous data parallelism over MPI (``docs/distributed.md``); async types raise.
    compression_params : dict or None
        ``{"type": "2bit", "threshold": t}`` (distributed kvstores only): MXNet's 2-bit
        gradient compression.
    update_on_kvstore : bool or None
        Accepted with MXNet's meaning; in one process the numbers are the same either way.
    backend : {"auto", "cpu", "cuda", "reference"}, default "auto"
        "auto": host parameters on the CPU kernels, device parameters on CUDA. "reference" runs
        the float64 oracle per parameter (slow; for checks).

    Example::

        >>> import numpy as np
        >>> from toolkit import Parameter, Trainer
        >>> w = Parameter("w", shape=(3,), init=1.0)
        >>> trainer = Trainer([w], "sgd", {"learning_rate": 1.0})
        >>> w.grad()[:] = 2.0                     # supply the gradient in place
        >>> trainer.step(batch_size=4)            # w - lr * grad / batch_size
        >>> w.data()
        array([0.5, 0.5, 0.5], dtype=float32)
    """

    def __init__(self, params, optimizer, optimizer_params=None, kvstore="device",
                 compression_params=None, update_on_kvstore=None, backend="auto"):
        self._params = self._check_params(params)
        if isinstance(optimizer, _optimizer.Optimizer):
            if optimizer_params:
                raise ValueError("optimizer_params must be None when optimizer is an Optimizer "
                                 "instance (set its hyperparameters on the instance)")
            opt = optimizer
        elif isinstance(optimizer, str):
            if optimizer_params is not None and not isinstance(optimizer_params, dict):
                raise TypeError("optimizer_params must be a dict of keyword arguments")
            opt = _optimizer.create(optimizer, **(optimizer_params or {}))
        else:
            raise TypeError(f"optimizer must be a registry name or an Optimizer instance, got "
                            f"{type(optimizer).__name__}")
        dist_type = _dist.kvstore_type(kvstore)  # refuses async and unknown dist types
        if dist_type is None and kvstore not in KVSTORES:
            raise ValueError(f"kvstore must be one of {KVSTORES} (one process) or "
                             f"{_dist.SYNC[:2]} (distributed), got {kvstore!r}")
        _held.refuse_unsupported(opt, self._params, dist_type is not None)  # state_dtype
        if compression_params is not None and dist_type is None:
            raise ValueError("compression_params needs a distributed kvstore ('dist_sync' or "
                             "'dist_device_sync'); pass None for one process")
        compression = _compression.check_params(compression_params)
        if update_on_kvstore not in (None, True, False):
            raise TypeError(f"update_on_kvstore must be None, True or False, got "
                            f"{update_on_kvstore!r}")
        if backend not in ("auto", "cpu", "cuda", "reference"):
            raise ValueError(f"backend must be one of ('auto', 'cpu', 'cuda', 'reference'), got "
                             f"{backend!r}")
        self._kvstore, self._update_on_kvstore, self._backend = kvstore, update_on_kvstore, backend
        sparse = [p.name for p in self._params if p.grad_stype == "row_sparse"]
        if dist_type is not None and sparse:
            raise ValueError(f"row-sparse gradients ({sparse}) are not supported with "
                             f"kvstore={kvstore!r} (MXNet's row_sparse_pull is not implemented); "
                             "use grad_stype='default' for these parameters")
        self._optimizer = opt
        self._scale = opt.rescale_grad
        self._lock = threading.Lock()  # a step, and save_states' copy, hold it (docs/trainer.md)
        self._build_groups()
        opt.param_dict = self._param_dict = ParamDict(enumerate(self._params))
        self._param_dict_seen = self._param_dict.changes
        # every parameter's freshness in one array (a step reads them all at once); the
        # parameters are this Trainer's now (the last one built with them wins)
        self._fresh_flags = np.zeros(len(self._params), bool)
        for i, p in enumerate(self._params):
            p.hold(self, self._fresh_flags, i)
        self._holds_seen = holds_version()
        #: the indices of the parameters with a gradient (grad_req is fixed while held); a
        #: step of all of them hands the optimizer the same ``Kept`` copy, whose bookkeeping
        #: then reads back the counts it wrote for it last step without a check
        self._live = np.array([i for i, p in enumerate(self._params) if p.grad_req != "null"],
                              np.int64)
        self._live_kept = Kept(self._live)
        self._live_members = self._member_of[self._live]  # their positions in their groups
        # where they are in the freshness flags: a slice when they are contiguous (a view)
        n_live = len(self._live)
        self._live_flags = slice(int(self._live[0]), int(self._live[-1]) + 1) if n_live and \
            int(self._live[-1]) - int(self._live[0]) + 1 == n_live else self._live
        self._any_sparse = any(p.grad_stype == "row_sparse" for p in self._params)
        self._mults = (None, None)  # (multipliers_version, (lr_mult, wd_mult) arrays)
        self._dist = None if dist_type is None else _dist.DistKVStore(
            self, dist_type, compression, update_on_kvstore)

    def __repr__(self):
        """``Trainer(Adam(...), 2 parameters in 1 group (float32 on cpu), kvstore='device',
        backend='auto')``: the optimizer, the parameters and their (dtype, device) groups (one
        kernel call each per step), the kvstore and the backend."""
        n = len(self._params)
        groups = ", ".join(f"{np.dtype(dtype).name} on {device}"
                           for dtype, device in ((g.dtype, g.device) for g in self._groups))
        frozen = sum(p.grad_req == "null" for p in self._params)
        return (f"Trainer({self._optimizer!r}, {n} parameter{'s' * (n != 1)}"
                f"{f' ({frozen} with grad_req null)' if frozen else ''} in "
                f"{len(self._groups)} group{'s' * (len(self._groups) != 1)} ({groups}), "
                f"kvstore={self._kvstore!r}, backend={self._backend!r})")

    # ---------------------------------------------------------------------------------------
    # construction
    # ---------------------------------------------------------------------------------------
    @staticmethod
    def _check_params(params):
        if isinstance(params, Parameter):
            raise ParamsError("params must be a dict or a list of Parameters, got a single "
                            "Parameter (wrap it in a list)")
        if isinstance(params, dict):
            items = [params[k] for k in sorted(params)]
        elif isinstance(params, (list, tuple)):
            items = list(params)
        else:
            raise ParamsError(f"params must be a dict or a list of Parameters, got "
                            f"{type(params).__name__}")
        seen, unique = set(), []
        for p in items:
            if not isinstance(p, Parameter):
                raise ParamsError(f"params must hold Parameters only, got {type(p).__name__}")
            if id(p) in seen:
                continue  # the same parameter twice (shared): once, as MXNet does
            p.data()  # a parameter without data yet is refused here
            seen.add(id(p))
            unique.append(p)
        items = unique
        names = [p.name for p in items]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"parameter names must be unique, repeated: {dup}")
        return items

    def _build_groups(self):
        keyed: dict = {}
        for i, p in enumerate(self._params):
            if p.grad_req == "null":
                continue
            if self._backend in ("cpu", "reference") and p.device == "cuda":
                raise ValueError(f"backend={self._backend!r} but parameter {p.name!r} lives on "
                                 "the GPU; use backend='cuda' or 'auto'")
            if self._backend == "cuda" and p.device != "cuda":
                raise ValueError(f"backend='cuda' but parameter {p.name!r} lives on the host; "
                                 "create it with device='cuda'")
            keyed.setdefault((p.dtype, p.device), []).append((i, p))
        self._groups = [Group(key, members, self._optimizer) for key, members in keyed.items()]
        self._where = {}
        #: by index: the position of its group in self._groups and its position in that group
        #: (-1 for a parameter outside the groups)
        self._group_of = np.full(len(self._params), -1, np.int64)
        self._member_of = np.full(len(self._params), -1, np.int64)
        for n, g in enumerate(self._groups):
            for k, (i, p) in enumerate(g.members):
                self._where[i] = (g, k)
                self._group_of[i], self._member_of[i] = n, k
        self.last_step_launches = 0

    # ---------------------------------------------------------------------------------------
    # MXNet's public surface
    # ---------------------------------------------------------------------------------------
    @property
    def optimizer(self):
        """The optimizer this Trainer steps with (the instance given, or the one created)."""
        return self._optimizer

    @property
    def learning_rate(self):
        """The optimizer's current learning rate (the scheduler's, if one is set)."""
        return self._optimizer.learning_rate

    def set_learning_rate(self, lr):
        """Set the learning rate; raises (UserWarning, as MXNet) when a scheduler is set."""
        self._optimizer.set_learning_rate(lr)

    def step(self, batch_size, ignore_stale_grad=False, *, skip_nonfinite=False):
        """One training step: ``rescale_grad = scale / batch_size``, gradients all-reduced (a
        no-op in one process), every parameter with a fresh gradient updated.

        ``skip_nonfinite`` (default False: MXNet's behaviour, NaN and infinity propagate):
        when True, every parameter whose (summed) gradient holds a NaN or an infinity is left
        as it was (weight, state, count) while the others step, and the names of those
        skipped are returned as a tuple and kept in :attr:`skipped` until the next step
        (docs/trainer.md, "Skipping non-finite gradients"). Without it this returns None."""
        guard = self._guard_flag(skip_nonfinite)
        self._check_train_mode()
        self._set_rescale(batch_size)
        self._begin_guard(guard)
        if self._dist is not None:
            return self._guarded_run(
                lambda stale: self._dist.step(stale, batch_size), ignore_stale_grad)
        self.allreduce_grads()
        return self._guarded_run(self._update, ignore_stale_grad)

    def allreduce_grads(self):
        """Sum gradients across devices (MXNet's kvstore pushpull). One process holds each
        parameter once, so there is nothing to sum; a distributed Trainer sums across ranks
        (``docs/distributed.md``)."""
        if self._dist is not None:
            self._dist.allreduce_grads()

    def update(self, batch_size, ignore_stale_grad=False, *, skip_nonfinite=False):
        """The update half of ``step`` (after ``allreduce_grads``); ``skip_nonfinite`` and
        the value returned: as ``step``'s (the decision reads the summed gradients)."""
        guard = self._guard_flag(skip_nonfinite)
        self._check_train_mode()
        self._set_rescale(batch_size)
        self._begin_guard(guard)
        if self._dist is not None:
            return self._guarded_run(self._dist.update, ignore_stale_grad)
        return self._guarded_run(self._update, ignore_stale_grad)

    # --- the non-finite guard ---------------------------------------------------------------
    #: names of the parameters the last ``step``/``update`` with ``skip_nonfinite=True`` left
    #: alone because their gradient held a NaN or an infinity (a tuple, index order); () after
    #: any other step
    skipped = ()
    _guard_on = False

    def _guard_flag(self, skip_nonfinite):
        if skip_nonfinite is not True and skip_nonfinite is not False:
            raise TypeError(f"skip_nonfinite must be True or False, got {skip_nonfinite!r}")
        if skip_nonfinite and self._dist is not None and self._dist.compression is not None:
            # 2-bit compression quantises a NaN to 0 (and keeps it in the residual): the summed
            # gradient the guard would read is finite, and the bad value is lost, not skipped
            raise ValueError("skip_nonfinite=True does not work with gradient compression: the "
                             "2-bit codes cannot carry a NaN or an infinity, so the summed "
                             "gradient looks finite; train without compression_params to use "
                             "the guard")
        return skip_nonfinite

    def _begin_guard(self, guard):
        self.skipped = ()
        self._guard_on = guard

    def _guarded_run(self, run, ignore_stale_grad):
        """``run(ignore_stale_grad)`` (this Trainer's ``_update``, or the distributed store's
        step or update, which calls it after the reduction) with the guard's setting read by
        ``_update``; returns the skipped names when the guard is on."""
        guard = self._guard_on
        try:
            run(ignore_stale_grad)
        finally:
            self._guard_on = False
        return self.skipped if guard else None

    @property
    def skipping_nonfinite(self):
        """True while a ``step`` or ``update`` called with ``skip_nonfinite=True`` runs, False
        otherwise (read-only). A distributed step compares it across ranks with the step's
        other settings (``docs/distributed.md``)."""
        return self._guard_on

    @property
    def step_lock(self):
        """The lock (a ``threading.Lock``, read-only) that every ``step`` and ``update`` holds
        while it changes weights, state and counts. Holding it (``with trainer.step_lock:``)
        keeps any step in another thread waiting, so what is read or replaced meanwhile is one
        whole step's: ``save_states`` copies the state under it, ``load_states`` checks and
        commits a file under it (``docs/trainer.md``, "States file"). It is not
        reentrant: do not step, save or load while holding it."""
        return self._lock

    @property
    def kvstore(self):
        """The distributed kvstore (``type``, ``rank``, ``num_workers``), None in one process."""
        return self._dist

    @property
    def num_workers(self):
        """Number of worker processes (MXNet's ``kv.num_workers``); 1 in one process."""
        return 1 if self._dist is None else self._dist.num_workers

    @property
    def rank(self):
        """This worker's rank (MXNet's ``kv.rank``); 0 in one process."""
        return 0 if self._dist is None else self._dist.rank

    # --- what the distributed kvstore and the states file read (public, documented) ---------
    @property
    def parameters(self):
        """The parameters, in optimizer-index order (a tuple: position ``i`` is the
        optimizer's index ``i``; a dict given to the constructor is sorted by key), those with
        ``grad_req == "null"`` included."""
        params = self._parameters
        if params is None:
            params = self._parameters = tuple(self._params)
        return params

    _parameters = None

    @property
    def groups(self):
        """The (dtype, device) groups of the parameters that take gradients, one kernel call
        each per step (a tuple of ``toolkit.trainer.buffers.Group``: ``dtype``, ``device``,
        ``members`` as ``(index, Parameter)`` pairs, and the group's flat ``data``, ``grad``
        and ``state`` buffers)."""
        return tuple(self._groups)

    @property
    def backend(self):
        """The ``backend`` setting this Trainer was built with ("auto", "cpu", "cuda" or
        "reference")."""
        return self._backend

    def apply_update(self, ignore_stale_grad=False):
        """Update every parameter with a fresh gradient from the gradients as they are now:
        the optimizer half of a step, without the gradients' reduction and without setting
        ``rescale_grad`` (``step`` and ``update`` do both first). Holds :attr:`step_lock`;
        raises ``StaleGradientError`` for a stale gradient unless ``ignore_stale_grad``; with
        the non-finite guard of the ``step``/``update`` it runs under, skips what it skips.
        The distributed kvstore calls it once the ranks' gradients are summed."""
        self._check_train_mode()
        self._update(ignore_stale_grad)

    def _set_rescale(self, batch_size):
        if type(batch_size) is int:  # the common cases, without an ABC check
            ok = batch_size > 0
        elif type(batch_size) is float:
            ok = batch_size > 0 and math.isfinite(batch_size)
        else:
            ok = not isinstance(batch_size, bool) and isinstance(batch_size, numbers.Real) \
                and np.isfinite(batch_size) and batch_size > 0
        if not ok:
            raise ValueError(f"batch_size must be a finite number > 0, got {batch_size!r}")
        rescale = self._scale / batch_size
        if not (math.isfinite(rescale) if type(rescale) is float else np.isfinite(rescale)):
            raise ValueError(f"batch_size {batch_size!r} makes rescale_grad = scale/batch_size = "
                             f"{rescale!r}, which is not finite")
        held = self._optimizer.rescale_grad
        if type(held) is float and type(rescale) is float and held == rescale and \
                math.copysign(1.0, held) == math.copysign(1.0, rescale):
            return  # the same bits: the object kept too (the optimizer's step constants,
            # remembered while their inputs are the same objects, stay remembered)
        self._optimizer.rescale_grad = rescale

    # ---------------------------------------------------------------------------------------
    # the step (the update paths of the fresh parameters: updates.Updates)
    # ---------------------------------------------------------------------------------------
    def _update(self, ignore_stale_grad):
        with self._lock:  # save_states copies the state of one whole step, never half of one
            self._update_unlocked(ignore_stale_grad)

    def _update_unlocked(self, ignore_stale_grad):
        if holds_version() != self._holds_seen:  # a Trainer took parameters since last checked
            taken = [p.name for p in self._params
                     if p.trainer is not self and p.grad_req != "null"]
            if taken:
                raise RuntimeError(f"parameter(s) {taken} now belong to a newer Trainer (a "
                                   "parameter is stepped by the last Trainer built with it); "
                                   "step that one")
            self._holds_seen = holds_version()
        live = self._live
        fresh = self._fresh_flags[self._live_flags]
        every = bool(fresh.all())
        if not ignore_stale_grad and not every:
            stale = [self._params[i].name for i in live[~fresh].tolist()]
            raise StaleGradientError(
                f"gradient of parameter(s) {stale} has not been written since the last step "
                "(write into param.grad() or call param.set_grad() first, or pass "
                "ignore_stale_grad=True to skip them); nothing was updated")
        active = live if every else live[fresh]  # indices, increasing
        self.last_step_launches = 0
        if not active.size:
            return
        skipped = []
        if self._guard_on:
            # one pass over the gradients (summed, in a distributed step: every rank reads the
            # same bits and skips the same parameters)
            skipped = self._nonfinite(active)
            if skipped:
                active = active[~np.isin(active, skipped)]
        if active.size:
            self._update_active(active)
        # the skipped gradients count as used, as the updated ones, once the step went through
        if skipped:
            self._fresh_flags[np.asarray(skipped, np.int64)] = False
        self.skipped = tuple(self._params[i].name for i in skipped) if skipped else ()

    def data_changed(self, param):
        """``Parameter.set_data`` calls it: a multi-precision parameter's float32 master
        follows the new weight, and the state of a parameter that has not stepped is made
        again from it (a state that starts from the weight's values: Schedule-Free AdamW's
        ``z``, DCASGD's ``w_prev``, as the optimizer alone makes it at the first update)."""
        where = [(g, k) for g in self._groups for k, (_, p) in enumerate(g.members) if p is param]
        opt = self._optimizer
        for g, k in where:
            index = g.members[k][0]
            if not opt.has_stepped(index):
                fresh = opt.create_state_multi_precision(index, param.data())
                for dst, src in zip(_held.state_arrays(g.member_state(k)),
                                    _held.state_arrays(fresh)):
                    arrays.copy_from_host(dst, arrays.to_host(src))
                continue
            if g.mp:
                master, _ = g.split_state(self._optimizer, g.views[k])
                arrays.copy_from_host(master, np.asarray(arrays.to_host(param.data()), np.float32))

    # --- a weight that moves between two points (Schedule-Free AdamW, SGD) ------------------
    def eval(self):
        """Move every parameter to the point to evaluate and to save (the optimizer's
        ``to_eval``: Schedule-Free AdamW's average ``x``); steps are refused until
        :meth:`train`. A Trainer starts in train mode; a second ``eval()`` changes nothing.
        The mode is the optimizer's ``eval_mode``, which a states file keeps: a Trainer that
        loads one saved in eval mode is in eval mode, its weights to be set to the saved
        ``x``, and :meth:`train` moves them back."""
        self._switch(eval_mode=True)

    def train(self):
        """Move every parameter back to where the steps take gradients (the optimizer's
        ``to_train``: Schedule-Free AdamW's ``y``) after :meth:`eval`."""
        self._switch(eval_mode=False)

    def _switch(self, eval_mode):
        opt = self._optimizer
        move = getattr(opt, "to_eval" if eval_mode else "to_train", None)
        if not callable(move):
            raise TypeError(f"{type(opt).__name__} has no train/eval switch: its weights are "
                            "the point to evaluate at every step (Schedule-Free AdamW and SGD "
                            "have one)")
        with self._lock:
            if opt.eval_mode is eval_mode:
                return
            for g in self._groups:  # element-wise: one move over each group's flat buffers
                move(g.data, g.state)
            opt.eval_mode = eval_mode

    def _check_train_mode(self):
        if getattr(self._optimizer, "eval_mode", False):
            raise RuntimeError("this Trainer is in eval mode (its weights are the average x): "
                               "call trainer.train() before the next step")

    # ---------------------------------------------------------------------------------------
    # states
    # ---------------------------------------------------------------------------------------
    def save_states(self, path):
        """Write the optimizer state of one whole step to ``path`` (``docs/trainer.md``: npz
        arrays + JSON metadata, checksummed, no pickle), atomically; a symlink's target is
        replaced. Safe while another thread steps. Distributed: rank 0 writes it."""
        if self._dist is not None:
            return self._dist.save_states(path)
        from .states import save
        save(self, path)

    def load_states(self, path, *, convert_states=False):
        """Restore the state saved by ``save_states`` from ``path`` (a path or a binary file
        object); a damaged, foreign, mismatched or malformed file is refused with ``ValueError``
        and the trainer is left exactly as it was (``docs/trainer.md``, "What a states file is
        checked for"). ``convert_states=True``: a file saved with another ``state_dtype`` has
        its moments held as this optimizer holds them (docs/trainer.md, "Held states").
        Distributed: every rank loads rank 0's file (no conversion)."""
        _held.check_convert(convert_states, self._dist is not None)
        if self._dist is not None:
            return self._dist.load_states(path)
        from .states import load
        load(self, path, convert=convert_states)
