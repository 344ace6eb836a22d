"""How a distributed step sums each (dtype, device) group's gradient buffer across the ranks so
that every rank holds the same bits: the reduction modes, the 2-bit compressed exchange, the
per-group buffers (:class:`GroupComm`) and the bytes each mode sends (:func:`bytes_model`).
:class:`Reductions` is the part of :class:`~toolkit.trainer.dist.DistKVStore` that runs them.
"""
from __future__ import annotations

import os

import numpy as np

from . import compression as _compression

#: how a group's gradients are summed so that every rank holds the same bits
#: ("scatter_gather": Reduce_scatter + Allgatherv, the default; "reduce_bcast": Reduce to rank 0
#: + Bcast; "allreduce_bcast": Allreduce + Bcast from rank 0). Choose with MXOPT_DIST_REDUCE.
REDUCE_MODES = ("scatter_gather", "reduce_bcast", "allreduce_bcast")


def reduce_mode_from_env():
    """The reduction mode named by ``MXOPT_DIST_REDUCE`` (one of :data:`REDUCE_MODES`)."""
    mode = os.environ.get("MXOPT_DIST_REDUCE", "") or REDUCE_MODES[0]
    if mode not in REDUCE_MODES:
        raise ValueError(f"MXOPT_DIST_REDUCE must be one of {REDUCE_MODES}, got {mode!r}")
    return mode


def bytes_model(n_elements, itemsize, workers, compressed=False, mode="scatter_gather"):
    """Bytes one rank sends for one group per step under the ring model: ``2(N-1)/N * bytes`` for
    Reduce_scatter + Allgatherv (a ring allreduce; also a plain Allreduce), twice that for
    ``reduce_bcast`` and ``allreduce_bcast`` (the large-message Reduce and Bcast each move
    ``2(N-1)/N * bytes``), ``(N-1) * packed bytes`` for the compressed Allgather."""
    if workers <= 1:
        return 0
    if compressed:
        return (workers - 1) * _compression.words_for(n_elements) * 4
    factor = 2 if mode in ("reduce_bcast", "allreduce_bcast") else 1
    return int(round(factor * 2 * (workers - 1) / workers * n_elements * itemsize))


class GroupComm:
    """What one (dtype, device) group needs for its collectives, allocated once."""

    def __init__(self, kv, g):
        self.g = g
        self.n = g.size
        self.dtype = np.dtype(g.dtype)
        self.device = g.device
        # host staging for GPU groups (reused every step; MPI reads host memory here)
        self.stage = None
        if g.device == "cuda":
            try:
                from numba import cuda
                self.stage = cuda.pinned_array(self.n, self.dtype)
            except Exception:  # pragma: no cover - simulator or no pinned memory
                self.stage = np.empty(self.n, self.dtype)
        N = kv.num_workers
        base, extra = divmod(self.n, N)
        self.counts = np.array([base + (r < extra) for r in range(N)], np.int64)
        self.displs = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)
        self.chunk = None
        self.mpitype, self.op = kv._type_and_op(self.dtype)
        if kv.compression is not None:
            self.residual = np.zeros(self.n, np.float32)
            self.words = np.zeros(_compression.words_for(self.n), np.uint32)
            self.all_words = np.zeros((N, self.words.shape[0]), np.uint32)
            self.mask = None

    def host_grad(self):
        """The gradient as a host array (the flat buffer itself, or the staged copy)."""
        if self.stage is None:
            return self.g.grad
        self.g.grad.copy_to_host(self.stage)
        return self.stage

    def back(self, host):
        if self.stage is not None:
            self.g.grad.copy_to_device(host)


class Reductions:
    """The reductions of :class:`~toolkit.trainer.dist.DistKVStore` (a base class of it): they
    use its ``MPI``, ``comm``, ``watch``, ``rank``, ``num_workers``, ``compression``,
    ``reduce_mode`` and ``_f16_op``."""

    def _type_and_op(self, dtype):
        MPI = self.MPI
        if dtype == np.float32:
            return MPI.FLOAT, MPI.SUM
        if dtype == np.float64:
            return MPI.DOUBLE, MPI.SUM
        if dtype == np.float16:  # MPI has no half type: a user sum over 2-byte elements
            if self._f16_op is None:
                def add16(inbuf, inout, datatype):
                    a = np.frombuffer(inbuf, np.float16)
                    b = np.frombuffer(inout, np.float16)
                    np.add(b, a, out=b)
                self._f16_op = MPI.Op.Create(add16, commute=True)
            return MPI.UINT16_T, self._f16_op
        raise ValueError(f"distributed training has no reduction for dtype {dtype}")

    def _reduce_group(self, gc, skipped, stats):
        g = gc.g
        masked = [k for k, (_, p) in enumerate(g.members) if id(p) in skipped]
        grad = gc.host_grad()
        for k in masked:
            grad[int(g.offsets[k]):int(g.offsets[k + 1])] = 0
        N = self.num_workers
        stats["uncompressed_bytes"] += gc.n * gc.dtype.itemsize
        stats["uncompressed_ring_model_bytes"] += bytes_model(gc.n, gc.dtype.itemsize, N)
        if self.compression is not None:
            mask = None
            if masked:
                mask = np.ones(gc.n, np.uint8)
                for k in masked:
                    mask[int(g.offsets[k]):int(g.offsets[k + 1])] = 0
            _compression.quantize(grad, gc.residual, self.compression["threshold32"],
                                  out=gc.words, mask=mask)
            with self.watch("the compressed gradient Allgather"):
                self.comm.Allgather([gc.words, self.MPI.UINT32_T],
                                    [gc.all_words, self.MPI.UINT32_T])
            _compression.dequantize_sum(gc.all_words, self.compression["threshold32"], grad)
            stats["payload_bytes"] += gc.words.nbytes if N > 1 else 0
            stats["ring_model_bytes"] += bytes_model(gc.n, 4, N, compressed=True)
        else:
            if N > 1:
                self._sum(gc, grad)
            stats["payload_bytes"] += gc.n * gc.dtype.itemsize if N > 1 else 0
            stats["ring_model_bytes"] += bytes_model(gc.n, gc.dtype.itemsize, N,
                                                     mode=self.reduce_mode)
        gc.back(grad)

    def _sum(self, gc, buf, mode=None):
        """Sum ``buf`` over the ranks in place; every rank ends with the same bits."""
        MPI, comm, t, op = self.MPI, self.comm, gc.mpitype, gc.op
        mode = mode or self.reduce_mode
        with self.watch(f"the gradient reduction ({mode}, {gc.dtype.name})"):
            if mode == "scatter_gather":
                if gc.chunk is None:
                    gc.chunk = np.empty(int(gc.counts[self.rank]), gc.dtype)
                comm.Reduce_scatter([buf, t], [gc.chunk, t], recvcounts=gc.counts, op=op)
                comm.Allgatherv([gc.chunk, t], [buf, (gc.counts, gc.displs), t])
            elif mode == "reduce_bcast":
                if self.rank == 0:
                    comm.Reduce(MPI.IN_PLACE, [buf, t], op=op, root=0)
                else:
                    comm.Reduce([buf, t], None, op=op, root=0)
                comm.Bcast([buf, t], root=0)
            elif mode == "allreduce_bcast":
                comm.Allreduce(MPI.IN_PLACE, [buf, t], op=op)
                comm.Bcast([buf, t], root=0)
            elif mode == "allreduce":   # benchmarks only: MPI does not promise equal bits
                comm.Allreduce(MPI.IN_PLACE, [buf, t], op=op)
            else:  # pragma: no cover
                raise ValueError(mode)

