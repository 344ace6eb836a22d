"""Segmented CUDA kernels: one launch of a rule over flat buffers holding many tensors (the
Trainer's groups), chunk by chunk, each segment reading its hyperparameters from a per-step
table sent up through a :class:`TableUpload` without a synchronous copy.

This module imports numba-cuda; :mod:`toolkit.backends.cuda` re-exports its entry points.
"""
from __future__ import annotations

import numpy as np
from numba import cuda, types

from .arrays import ArrayDesc
from .cuda_device import (COMPILE_OPTIONS, NUMBA_TYPES, SIMULATOR, THREADS, block_cap,
                          compute_dtype, flat, launch, row_tuple)
from .cuda_elementwise import device_rule
from .jit import KernelCache
from .order import chunk_table as host_chunks

_KERNELS = KernelCache()  # the segmented kernels of this process


# --------------------------------------------------------------------------------------------
# segmented kernels: many tensors in one launch (the Trainer's flat buffers)
# --------------------------------------------------------------------------------------------
#: Elements per chunk of a segmented kernel: one block-iteration handles one chunk, which lies
#: inside one segment, so a block reads its segment's table row once per chunk.
CHUNK = 64 if SIMULATOR else 4096


def _segmented_source(rule, n_state, n_hyper, f, mirror):
    """The segmented loop: block ``b`` takes chunks ``b, b + gridDim, ...``; chunk ``c`` is the
    row ``(start, end, segment)``; segment ``s`` reads ``(active, *hp)`` from ``table[s]``.

    The row becomes a tuple before the element loop, as the single-tensor kernel's ``hp``
    argument is one: the rule then compiles to the same code in both kernels (the same fused
    multiply-adds), so a Trainer step equals the per-tensor updates bit for bit."""
    if n_state == 0:
        def kernel(w, g, table, chunks, w16):
            c = cuda.blockIdx.x
            while c < chunks.shape[0]:
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = row_tuple(table[s, 1:], n_hyper)
                    i = chunks[c, 0] + cuda.threadIdx.x
                    while i < chunks[c, 1]:
                        wi = rule(f(w[i]), f(g[i]), hp)
                        w[i] = wi
                        if mirror:
                            w16[i] = wi
                        i += cuda.blockDim.x
                c += cuda.gridDim.x
    elif n_state == 1:
        def kernel(w, g, s0, table, chunks, w16):
            c = cuda.blockIdx.x
            while c < chunks.shape[0]:
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = row_tuple(table[s, 1:], n_hyper)
                    i = chunks[c, 0] + cuda.threadIdx.x
                    while i < chunks[c, 1]:
                        wi, a = rule(f(w[i]), f(g[i]), f(s0[i]), hp)
                        w[i] = wi
                        s0[i] = a
                        if mirror:
                            w16[i] = wi
                        i += cuda.blockDim.x
                c += cuda.gridDim.x
    elif n_state == 2:
        def kernel(w, g, s0, s1, table, chunks, w16):
            c = cuda.blockIdx.x
            while c < chunks.shape[0]:
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = row_tuple(table[s, 1:], n_hyper)
                    i = chunks[c, 0] + cuda.threadIdx.x
                    while i < chunks[c, 1]:
                        wi, a, b = rule(f(w[i]), f(g[i]), f(s0[i]), f(s1[i]), hp)
                        w[i] = wi
                        s0[i] = a
                        s1[i] = b
                        if mirror:
                            w16[i] = wi
                        i += cuda.blockDim.x
                c += cuda.gridDim.x
    elif n_state == 3:
        def kernel(w, g, s0, s1, s2, table, chunks, w16):
            c = cuda.blockIdx.x
            while c < chunks.shape[0]:
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = row_tuple(table[s, 1:], n_hyper)
                    i = chunks[c, 0] + cuda.threadIdx.x
                    while i < chunks[c, 1]:
                        wi, a, b, d = rule(f(w[i]), f(g[i]), f(s0[i]), f(s1[i]), f(s2[i]), hp)
                        w[i] = wi
                        s0[i] = a
                        s1[i] = b
                        s2[i] = d
                        if mirror:
                            w16[i] = wi
                        i += cuda.blockDim.x
                c += cuda.gridDim.x
    else:
        raise ValueError(f"rules with {n_state} state arrays are not supported (0 to 3)")
    return kernel


def segmented_kernel(factory, storage: tuple, compute, n_hyper: int, mirror: bool):
    """The compiled segmented kernel of ``factory``'s rule (cached per process)."""
    compute = np.dtype(compute)
    storage = tuple(np.dtype(s) for s in storage)
    key = ("segmented", factory, storage, compute, n_hyper, bool(mirror))
    kernel = _KERNELS.get(key)
    if kernel is not None:
        return kernel

    def build():
        rule = device_rule(factory, compute)
        arrs = [NUMBA_TYPES[s][::1] for s in storage]
        sig = types.void(*arrs[:-1], NUMBA_TYPES[compute][:, ::1], types.int64[:, ::1], arrs[-1])
        src = _segmented_source(rule, len(storage) - 3, n_hyper, compute.type, bool(mirror))
        return cuda.jit(sig, **COMPILE_OPTIONS)(src)
    return _KERNELS.cached(key, build)


class TableUpload:
    """A per-step table reaching the device without a synchronous copy: two pinned host buffers
    and two device buffers used in turn; before a pair is reused, the host waits for the event
    recorded after the launch that last read it (only if the GPU is two steps behind)."""

    def __init__(self, shape, dtype):
        self.host = [cuda.pinned_array(shape, dtype) for _ in range(2)]
        self.device = [cuda.device_array(shape, dtype) for _ in range(2)]
        self.events = [None, None]
        self.turn = 0

    def upload(self, table, stream):
        k = self.turn
        if self.events[k] is not None:
            self.events[k].synchronize()
        if self.host[k].shape != table.shape or self.host[k].dtype != table.dtype:
            self.host[k] = cuda.pinned_array(table.shape, table.dtype)
            self.device[k] = cuda.device_array(table.shape, table.dtype)
        self.host[k][...] = table
        self.device[k].copy_to_device(self.host[k], stream=stream)
        return k, self.device[k]

    def launched(self, k, stream):
        if not SIMULATOR:
            ev = cuda.event(timing=False)
            ev.record(stream)
            self.events[k] = ev
        self.turn = 1 - k


def chunk_table(offsets):
    """The device-side chunk rows ``(start, end, segment)`` of a segmented kernel."""
    return host_chunks(offsets, CHUNK)


def run_segmented(factory, w: ArrayDesc, g: ArrayDesc, states, table, upload: TableUpload,
                  chunks, stream=0, mirror=None):
    """One launch of ``factory``'s rule over flat device buffers holding many tensors.

    ``table``: the host ``(active, *hp)`` rows (compute dtype), sent through ``upload``;
    ``chunks``: a device array from :func:`chunk_table`.
    """
    if w.size == 0:
        return
    compute = compute_dtype(w.dtype)
    m = mirror if mirror is not None else w
    storage = (w.dtype, g.dtype) + tuple(s.dtype for s in states) + (m.dtype,)
    kernel = segmented_kernel(factory, storage, compute, table.shape[1] - 1, mirror is not None)
    n_chunks = chunks.shape[0]
    blocks = min(n_chunks, 2) if SIMULATOR else min(n_chunks, block_cap())
    k, dev_table = upload.upload(table, stream)
    args = [flat(w), flat(g)] + [flat(s) for s in states] + [dev_table, chunks, flat(m)]
    launch(kernel, blocks, THREADS, stream, *args)
    upload.launched(k, stream)
