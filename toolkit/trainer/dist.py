"""Synchronous data-parallel training over MPI: ``Trainer(..., kvstore="dist_sync")``.

The protocol (construction, a step, the states file, the checks) is here; the reductions are in
``dist_reduce``, what the ranks must hold alike in ``dist_agreement``, MPI's start-up, the abort
hook and the watchdog in ``dist_watchdog``. ``docs/distributed.md`` has the why and the
measurements. Start one process per worker (``mxopt launch -n N train.py``); each builds the
same Trainer.

* **construction**: every rank's description of its Trainer is gathered and compared, so a
  mismatch raises :class:`DistMismatchError` on every rank (never a hang in a later
  collective); then rank 0's parameters and state are broadcast, as MXNet's kvstore
  ``init``/``broadcast`` does.
* **a step**: the ranks agree on the fresh gradients and the step's settings, then each (dtype,
  device) group's gradient buffer is summed with one ``Reduce_scatter`` + one ``Allgatherv``
  (each element summed on one rank, so every rank holds the same bits, which ``MPI_Allreduce``
  does not promise; 2-bit compression exchanges the codes with one ``Allgather``). Every rank
  then runs the same step on the same bits.
* **numerics** (MXNet 1.9.1 Gluon, python/mxnet/gluon/trainer.py at tag 1.9.1): ``rescale_grad =
  scale / batch_size`` (trainer.py:338) scales the **sum over workers** (trainer.py:371-395);
  Gluon does not multiply by the number of workers (Module does: module/module.py:503-506), so
  pass the global batch to average over every sample.
* **faults**: an uncaught exception on any rank aborts the MPI job, and every collective runs
  under a watchdog (``MXOPT_DIST_TIMEOUT`` seconds, default 600) (docs/distributed.md, "What ends
  a job, and how fast").

mpi4py is imported only when a distributed Trainer is built (``pip install "mxopt-toolkit[dist]"``).
"""
from __future__ import annotations

import hashlib
import json
import os
import time

import numpy as np

from ..mpi_env import rank_from_env
from ..backends import arrays
from .buffers import state_leaves
from .dist_agreement import differences, same, settings_digest, spread, step_settings
# REDUCE_MODES, bytes_model and DEFAULT_TIMEOUT are imported to be importable from here
from .dist_reduce import REDUCE_MODES, GroupComm, Reductions, bytes_model, reduce_mode_from_env
from .dist_watchdog import (DEFAULT_TIMEOUT, StartUpGuard, install_abort_hook, mpi,
                            timeout_from_env, watchdog)
from .errors import DistMismatchError, StaleGradientError

__all__ = ["SYNC", "ASYNC", "kvstore_type", "DistKVStore", "DistMismatchError", "REDUCE_MODES",
           "bytes_model"]

#: kvstore names of synchronous data-parallel training (MXNet reads any name containing "dist"
#: and not "_async" as synchronous; these are its documented spellings)
SYNC = ("dist_sync", "dist_device_sync", "dist_sync_device", "dist")
#: MXNet's asynchronous parameter-server modes: refused
ASYNC = ("dist_async", "dist_device_async", "dist_async_device")
_OTHER = ("horovod", "byteps", "nccl")

#: bytes a step's agreement carries beside one fresh flag per parameter: ignore_stale_grad (one
#: byte), batch_size (float64) and the digest of the optimizer's settings (8 bytes)
_HEADER = 17
_UNKNOWN = 255    # ignore_stale_grad not given (allreduce_grads() on its own)


def _everywhere(exc):
    """Mark ``exc`` as raised by every rank at the same point (the abort hook then lets each rank
    exit by itself, so that every rank prints its error)."""
    try:
        exc.raised_on_every_rank = True
    except AttributeError:  # pragma: no cover - exceptions with __slots__
        pass
    return exc


def kvstore_type(kvstore):
    """The distributed kvstore type named by ``kvstore``, or None for a one-process name.
    Asynchronous and other distributed types raise ``ValueError`` saying what is supported."""
    if not isinstance(kvstore, str):
        return None
    if kvstore in SYNC:
        return kvstore
    if kvstore in ASYNC or (kvstore.startswith("dist") and "async" in kvstore):
        raise ValueError(
            f"kvstore={kvstore!r}: asynchronous distributed training (MXNet's parameter-server "
            "dist_async modes) is not supported; supported distributed kvstores are 'dist_sync' "
            "and 'dist_device_sync' (synchronous, over MPI: docs/distributed.md)")
    if kvstore.startswith("dist") or kvstore in _OTHER:
        raise ValueError(
            f"kvstore={kvstore!r} is not supported; distributed training supports 'dist_sync' "
            "and 'dist_device_sync' (synchronous, over MPI), one process 'device', 'local' or "
            "None")
    return None


# -------------------------------------------------------------------------------------------
# the communicator
# -------------------------------------------------------------------------------------------
_communicator = None


def use_communicator(comm):
    """Train over ``comm`` (an mpi4py communicator) instead of ``MPI.COMM_WORLD``: every
    distributed Trainer built afterwards duplicates it."""
    global _communicator
    _communicator = comm


_dups: dict = {}


def _duplicate(base):
    key = id(base)
    if key not in _dups:
        _dups[key] = (base, base.Dup())   # keep base alive: its id stays unique
    return _dups[key][1]


# -------------------------------------------------------------------------------------------
# the kvstore
# -------------------------------------------------------------------------------------------
class DistKVStore(Reductions):
    """The distributed side of a Trainer (``trainer.kvstore``): MXNet's ``kv.type``,
    ``kv.rank``, ``kv.num_workers``, plus the statistics of the last reduction."""

    def __init__(self, trainer, kvtype, compression, update_on_kvstore):
        # the watchdog first: MPI's start-up (MPI_Init, at the import of mpi4py.MPI) and the
        # communicator's duplication wait for every rank, like any other collective
        self.timeout = timeout_from_env()
        self.reduce_mode = reduce_mode_from_env()
        rank = rank_from_env("?")   # MPI is not started yet: as the launcher states it
        self.watch = watchdog(None, rank, self.timeout)
        with StartUpGuard(self.timeout, rank):
            MPI = self.MPI = mpi()
        self.watch.MPI = MPI
        base = _communicator if _communicator is not None else MPI.COMM_WORLD
        # one duplicate of the base communicator per process, shared by every distributed
        # Trainer (their collectives run in program order, the same on every rank): the
        # Trainer's traffic never mixes with the script's own, and no communicator leaks
        with self.watch("duplicating the communicator (MPI_Comm_dup)"):
            self.comm = _duplicate(base)
        self.type = kvtype
        self.rank = self.comm.Get_rank()
        self.num_workers = self.comm.Get_size()
        self.watch.rank = self.rank
        self.compression = compression
        #: MXNet's default for a dense dist kvstore is True (the optimizer runs on the servers);
        #: here every rank runs it on the same summed gradient: the numbers are the same
        self.update_on_kvstore = True if update_on_kvstore is None else update_on_kvstore
        self.last_step_bytes = {}
        self._pending = False
        self._f16_op = None
        self._trainer = trainer
        if self.num_workers > 1:
            install_abort_hook(MPI, self.rank)
        self._check_same(trainer)
        if compression is not None:
            bad = sorted({np.dtype(g.dtype).name for g in trainer.groups
                          if np.dtype(g.dtype) != np.float32})
            if bad:
                raise _everywhere(ValueError(
                    f"2-bit gradient compression needs float32 gradients (MXNet 1.9.1's "
                    f"quantiser is float32 only); this Trainer has {bad} parameters: pass "
                    "compression_params=None"))
        self._groups = [GroupComm(self, g) for g in trainer.groups]
        self._broadcast_initial(trainer)

    # --- helpers --------------------------------------------------------------------------
    def _bcast_bytes(self, data: bytes | None, what) -> bytes:
        n = np.array([len(data) if data is not None and self.rank == 0 else 0], np.int64)
        with self.watch(what):
            self.comm.Bcast(n, root=0)
            buf = bytearray(data) if self.rank == 0 else bytearray(int(n[0]))
            if n[0]:
                self.comm.Bcast([buf, self.MPI.BYTE], root=0)
        return bytes(buf)

    def _allgather_bytes(self, data: bytes, what):
        n = np.array([len(data)], np.int64)
        lengths = np.zeros(self.num_workers, np.int64)
        with self.watch(what):
            self.comm.Allgather(n, lengths)
            out = bytearray(int(lengths.sum()))
            displs = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            self.comm.Allgatherv([data, self.MPI.BYTE],
                                 [out, (lengths, displs), self.MPI.BYTE])
        return [bytes(out[int(d):int(d) + int(m)]) for d, m in zip(displs, lengths)]

    def _agree(self, ok: bool, what) -> np.ndarray:
        """Every rank's flag, on every rank."""
        flags = np.zeros(self.num_workers, np.uint8)
        with self.watch(what):
            self.comm.Allgather(np.array([1 if ok else 0], np.uint8), flags)
        return flags

    def barrier(self):
        """Wait for every rank (MXNet's ``kv._barrier()``)."""
        with self.watch("barrier"):
            self.comm.Barrier()

    # --- construction -------------------------------------------------------------------------
    def _describe(self, trainer):
        opt = trainer.optimizer
        comp = None if self.compression is None else {
            "type": self.compression["type"], "threshold": self.compression["threshold"]}
        return {
            "kvstore": self.type, "compression": comp, "backend": trainer.backend,
            "update_on_kvstore": self.update_on_kvstore, "reduce": self.reduce_mode,
            "optimizer": type(opt).__module__ + "." + type(opt).__name__,
            "hyperparameters": opt.settings(),
            "params": [{"name": p.name, "shape": list(p.shape), "dtype": p.dtype.name,
                        "device": p.device, "grad_req": p.grad_req,
                        "lr_mult": float(p.lr_mult), "wd_mult": float(p.wd_mult)}
                       for p in trainer.parameters],
        }

    def _check_same(self, trainer):
        mine = self._describe(trainer)
        texts = self._allgather_bytes(json.dumps(mine, sort_keys=True).encode("utf-8"),
                                      "comparing the ranks' Trainers")
        descs = [json.loads(t.decode("utf-8")) for t in texts]
        problems = differences(descs)
        if problems:
            shown = "; ".join(problems[:8]) + ("; ..." if len(problems) > 8 else "")
            raise DistMismatchError(
                f"the {self.num_workers} ranks do not hold the same Trainer (seen on rank "
                f"{self.rank}; every rank raises this): {shown}. Build the same parameters "
                "(names, shapes, dtypes, devices, grad_req, multipliers) and the same optimizer "
                "with the same settings on every rank")

    def _broadcast_initial(self, trainer):
        """Rank 0's weights and optimizer state into every rank's buffers (MXNet's kvstore
        init broadcasts rank 0's weights)."""
        if self.num_workers == 1:
            return
        for gc in self._groups:
            g = gc.g
            flats = [g.data] + state_leaves(g.state) + list(g.host_flats.values())
            for flat in flats:
                self._bcast_array(flat, f"broadcasting rank 0's {g.dtype} parameters")
        for p in trainer.parameters:   # parameters without a gradient are outside the groups
            if p.grad_req == "null":
                self._bcast_array(p.data(), f"broadcasting rank 0's parameter {p.name!r}")

    def _bcast_array(self, a, what):
        host = a if isinstance(a, np.ndarray) else np.ascontiguousarray(arrays.to_host(a))
        if not host.flags.c_contiguous:  # pragma: no cover - the buffers are contiguous
            host = np.ascontiguousarray(host)
        view = host.reshape(-1).view(np.uint8)
        with self.watch(what):
            self.comm.Bcast([view, self.MPI.BYTE], root=0)
        if host is not a:
            arrays.copy_from_host(a, host)

    # --- a step -----------------------------------------------------------------------------
    def allreduce_grads(self, raise_stale=False, batch_size=None, ignore_stale_grad=None):
        """Agree on fresh gradients and settings, then sum every group's gradient buffer across
        ranks.

        The rule (the same decision on every rank): a parameter takes part in a step only when
        its gradient is fresh on **every** rank. ``raise_stale`` (``step`` without
        ``ignore_stale_grad``): any other parameter raises ``StaleGradientError`` on every rank
        before anything is reduced. Otherwise its gradient is zeroed on every rank, left out of
        the compression residual, and marked stale everywhere, so ``update`` skips it (with
        ``ignore_stale_grad=True``) or raises (without).

        The same message carries this rank's ``batch_size`` and ``ignore_stale_grad`` (``step``
        gives them; ``allreduce_grads()`` alone does not know them yet) and an 8-byte digest of
        the optimizer's settings; ranks that differ raise :class:`DistMismatchError` on every
        rank, naming what differs and where, before anything is reduced."""
        trainer = self._trainer
        if self._pending:
            raise RuntimeError("the gradients were already all-reduced and not applied yet: "
                               "call update() before allreduce_grads() again (a second "
                               "reduction would sum them again)")
        live = [p for p in trainer.parameters if p.grad_req != "null"]
        L = len(live)
        mine = np.empty(L + _HEADER, np.uint8)
        mine[:L] = [1 if p.grad_fresh else 0 for p in live]
        mine[L] = _UNKNOWN if ignore_stale_grad is None else (1 if ignore_stale_grad else 0)
        mine[L + 1:L + 9] = np.array([np.nan if batch_size is None else batch_size],
                                     np.float64).view(np.uint8)
        mine[L + 9:L + 17] = settings_digest(trainer)
        allm = np.zeros((self.num_workers, L + _HEADER), np.uint8)
        with self.watch("agreeing on fresh gradients and settings"):
            self.comm.Allgather(mine, allm)
        if not (allm == allm[0]).all():
            self._check_step_agreement(allm[:, L:])
        every = allm[:, :L]
        fresh = every.all(axis=0) if live else np.zeros(0, bool)
        if raise_stale and not fresh.all():
            where = []
            for k in np.flatnonzero(~fresh):
                ranks = [int(r) for r in np.flatnonzero(every[:, k] == 0)]
                where.append(f"{live[k].name} (stale on rank{'s' if len(ranks) > 1 else ''} "
                             f"{', '.join(map(str, ranks))})")
            raise _everywhere(StaleGradientError(
                f"gradient of parameter(s) {where} has not been written since the last step on "
                "every rank (a distributed step updates a parameter only when its gradient is "
                "fresh on all ranks; write it on every rank, or pass ignore_stale_grad=True to "
                "skip it everywhere); nothing was reduced or updated"))
        skipped = {id(p) for p, f in zip(live, fresh) if not f}
        for p in live:
            if id(p) in skipped:
                p.mark_grad_stale()
        stats = {"groups": len(self._groups), "payload_bytes": 0, "uncompressed_bytes": 0,
                 "ring_model_bytes": 0, "uncompressed_ring_model_bytes": 0, "seconds": 0.0}
        t0 = time.perf_counter()
        for gc in self._groups:
            self._reduce_group(gc, skipped, stats)
        stats["seconds"] = time.perf_counter() - t0
        self.last_step_bytes = stats
        self._pending = True

    def _check_step_agreement(self, headers):
        """Raise on every rank when the ranks' per-step headers (ignore_stale_grad, batch_size,
        settings digest) differ; every rank holds the same headers, so every rank decides the
        same and, if the digests differ, takes part in the one extra exchange that names the
        settings."""
        problems = []
        ignore = [int(h[0]) for h in headers]
        known = [v for v in ignore if v != _UNKNOWN]
        if any(v != known[0] for v in known):
            problems.append("ignore_stale_grad differs: " + spread(
                [None if v == _UNKNOWN else bool(v) for v in ignore]))
        batch = [float(h[1:9].view(np.float64)[0]) for h in headers]
        given = [b for b in batch if not np.isnan(b)]
        if any(b != given[0] for b in given):
            problems.append("batch_size differs: " + spread(
                [None if np.isnan(b) else b for b in batch]))
        if any(not np.array_equal(h[9:17], headers[0][9:17]) for h in headers):
            texts = self._allgather_bytes(
                json.dumps(step_settings(self._trainer), sort_keys=True).encode("utf-8"),
                "naming the settings that differ between the ranks")
            settings = [json.loads(t.decode("utf-8")) for t in texts]
            for name in sorted(set().union(*settings)):
                vals = [d.get(name, "(not set)") for d in settings]
                if any(not same(v, vals[0]) for v in vals):
                    note = " (set by step's or update's batch_size)" \
                        if name == "the optimizer's rescale_grad" else ""
                    problems.append(f"{name}{note} differs: {spread(vals)}")
        if problems:
            raise DistMismatchError(
                f"the {self.num_workers} ranks took this step with different settings (seen on "
                f"rank {self.rank}; every rank raises this): {'; '.join(problems)}; nothing was "
                "reduced or updated in this step. Give every rank the same batch_size, "
                "ignore_stale_grad, learning rate and hyperparameters (with allreduce_grads() "
                "and update(), update's batch_size is compared at the next allreduce_grads())")

    def step(self, ignore_stale_grad, batch_size=None):
        self.allreduce_grads(raise_stale=not ignore_stale_grad, batch_size=batch_size,
                             ignore_stale_grad=bool(ignore_stale_grad))
        self.update(ignore_stale_grad)

    def update(self, ignore_stale_grad):
        if not self._pending:
            raise RuntimeError("a distributed Trainer's update() applies the gradients summed by "
                               "allreduce_grads(): call allreduce_grads() first (or step())")
        self._trainer.apply_update(ignore_stale_grad)
        self._pending = False

    # --- states -------------------------------------------------------------------------------
    def save_states(self, path):
        """Rank 0 writes the file; every rank returns once it is written, or raises if rank 0
        could not write it."""
        from .states import save
        error = None
        if self.rank == 0:
            try:
                save(self._trainer, path)
            except Exception as exc:  # noqa: BLE001 - reported to every rank below
                error = exc
        msg = self._bcast_bytes(b"" if error is None else
                                f"{type(error).__name__}: {error}".encode("utf-8"),
                                "save_states (waiting for rank 0)")
        if error is not None:
            raise _everywhere(error)
        if msg:
            raise _everywhere(RuntimeError(f"save_states failed on rank 0: "
                                           f"{msg.decode('utf-8')}"))

    def load_states(self, path):
        """Rank 0 reads the file and sends its bytes to every rank; every rank loads the same
        bytes (files on other ranks are not read). A failure on any rank raises on every rank:
        when rank 0 cannot read the file (any ``Exception``), it raises its own and every other
        rank a ``RuntimeError`` naming rank 0's exception type and message."""
        from .states import load, read_bytes
        raw, error = None, None
        if self.rank == 0:
            try:   # bounded by what this trainer's file can be, before it is read
                raw = read_bytes(self._trainer, path)
            except Exception as exc:  # noqa: BLE001 - any failure is told to every rank below
                error = exc
        msg = self._bcast_bytes(b"" if error is None else
                                f"{type(error).__name__}: {error}".encode("utf-8"),
                                "load_states (waiting for rank 0)")
        if error is not None:
            raise _everywhere(error)
        if msg:
            shown = os.fspath(path) if isinstance(path, (str, bytes, os.PathLike)) else path
            raise _everywhere(RuntimeError(f"load_states: rank 0 could not read "
                                           f"{shown!r}: {msg.decode('utf-8')}"))
        raw = self._bcast_bytes(raw, "load_states (receiving the file from rank 0)")
        local_error = None
        try:
            load(self._trainer, path, raw=raw)
        except Exception as exc:  # noqa: BLE001 - agreed on below
            local_error = exc
        ok = self._agree(local_error is None, "load_states (agreeing on the result)")
        if local_error is not None:
            raise _everywhere(local_error) if ok.sum() == 0 else local_error
        if not ok.all():
            bad = [int(r) for r in np.flatnonzero(ok == 0)]
            raise RuntimeError(f"load_states failed on rank(s) {bad} but not on this one: the "
                               "ranks no longer hold the same state; do not continue training")
        self._pending = False

    # --- checks -------------------------------------------------------------------------------
    def digest(self):
        """SHA-256 of this rank's parameters, optimizer state and optimizer counts."""
        h = hashlib.sha256()
        t = self._trainer
        for gc in self._groups:
            g = gc.g
            for flat in [g.data] + state_leaves(g.state) + list(g.host_flats.values()):
                h.update(np.ascontiguousarray(arrays.to_host(flat)).tobytes())
        for p in t.parameters:
            if p.grad_req == "null":
                h.update(np.ascontiguousarray(arrays.to_host(p.data())).tobytes())
        opt = t.optimizer
        h.update(json.dumps([opt.num_update, sorted((str(k), v) for k, v in
                                                    opt.update_counts.items())]).encode())
        return h.hexdigest()

    def check_in_sync(self):
        """Compare every rank's :meth:`digest`; raises ``RuntimeError`` on every rank when they
        differ, else returns the common digest."""
        mine = self.digest()
        every = self._allgather_bytes(mine.encode("ascii"), "comparing the ranks' digests")
        if len(set(every)) != 1:
            diff = [r for r, d in enumerate(every) if d != every[0]]
            raise RuntimeError(f"the ranks' parameters or optimizer states differ: rank(s) {diff} "
                               "differ from rank 0")
        return mine

    def __repr__(self):
        return (f"DistKVStore(type={self.type!r}, rank={self.rank}, num_workers="
                f"{self.num_workers}, compression={self.compression and self.compression['type']!r}"
                f", reduce={self.reduce_mode!r})")
