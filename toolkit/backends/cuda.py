"""The CUDA backend: the CPU backend's per-element rules compiled by numba-cuda into grid-stride kernels.

One module of over 700 lines: its kernel families (element-wise, segmented, norms, direction,
noise) are generated as source text by helpers they share (storage and compute types, the
float16 mirror, the row form) and launched by its one :class:`Launcher`, and only a GPU or
numba's simulator runs them; splitting it by family as ``cpu.py`` was is left to a change that
runs the CUDA tests.

The same rule factory that :mod:`toolkit.backends.cpu` compiles with ``numba.njit`` is compiled
here with ``cuda.jit(device=True)`` and called from a grid-stride kernel over the flattened arrays
(``rule(w, g, s0, ..., hp) -> (w, s0, ...)``, see the CPU module). One kernel source serves every
storage dtype: each element is loaded and converted to the compute type (float32 for float16
storage, else the storage type), updated, and stored back rounded to nearest. With
``multi_precision`` the float32 master copy is the kernel's weight and the float16 weight is
written from it in the same pass (the *mirror*), so a multi-precision step is one kernel.

What is and is not copied: nothing. Weight, gradient and state are read and written where they
are, through views built from their ``__cuda_array_interface__`` without synchronising on the
stream they export. Hyperparameters are a tuple of scalars passed as a kernel argument (no
host-to-device copy). The kernel is enqueued on the caller's stream: an explicit ``stream``
argument, else the stream the weight exports (CuPy exports its current stream), else for a
PyTorch tensor PyTorch's current stream (its interface exports none), else the default stream;
``update`` returns without waiting for it.

Compile policy, in one place (as the CPU backend's): explicit signatures, ``fastmath`` off, on-disk
cache. numba-cuda contracts ``a*b + c`` into fused multiply-adds; an FMA rounds once, so its
result lies within the same first-order error bound as the two roundings it replaces
(``reference.error_bound``): the tests hold CUDA results to the CPU's bound, not a wider one.

This module imports numba-cuda; ``toolkit`` imports it only when a CUDA array or
``backend="cuda"`` is used (``toolkit.backends.cuda_available`` says whether it can be).
Under ``NUMBA_ENABLE_CUDASIM=1`` the same kernels run in numba's simulator (in Python, one thread
at a time: it checks indexing and logic, not FMA, float16 hardware or races).
"""
from __future__ import annotations

import sys
import threading
import warnings

import numba
import numpy as np
from numba import cuda, types
from numba.cuda.core.errors import NumbaPerformanceWarning

from . import arrays, cuda_rows, rules
from .arrays import ArrayDesc
from .cuda_device import (COMPILE_OPTIONS, NUMBA_TYPES, SIMULATOR, THREADS,
                          block_cap, compute_dtype, device_of, flat, launch, launch_config,
                          resolve_stream, row_tuple, single_device)
from .order import DIRECTION_CHUNK, DIRECTION_LANES, single_chunks, sum_partials
from .order import chunk_table as host_chunks

__all__ = ["SIMULATOR", "COMPILE_OPTIONS", "THREADS", "Launcher", "elementwise_kernel",
           "launch_config", "device_of", "resolve_stream", "zeros", "convert_into", "to_host",
           "lars_norms", "run_norms", "flat", "direction_norms", "run_direction"]

#: The fixed grid of the sum-of-squares reduction: fixed (not derived from the device) so the
#: float64 partial sums are added in the same order on every GPU, run after run. Under the
#: simulator, which runs every thread of a block as a Python thread and every syncthreads() as
#: a hand-over between them, 2 blocks of 4 threads: the same code (a tree of any power of two),
#: a sixth of the simulator's time of 16 threads.
REDUCE_BLOCKS, REDUCE_THREADS = (2, 4) if SIMULATOR else (256, 256)

_lock = threading.Lock()
_kernels: dict = {}
_device_rules: dict = {}


# --------------------------------------------------------------------------------------------
# element-wise kernels from rule factories
# --------------------------------------------------------------------------------------------
def device_rule(factory, dtype):
    """``factory``'s rule for compute ``dtype`` as a CUDA device function (cached)."""
    dtype = np.dtype(dtype)
    key = (factory, dtype)
    fn = _device_rules.get(key)
    if fn is None:
        fn = _device_rules[key] = cuda.jit(device=True)(factory(dtype.type))
    return fn


def _source(rule, n_state, f, mirror, by_rows):
    """The grid-stride loop of a rule with ``n_state`` state arrays over the gradient's
    elements. Every load is converted to the compute type ``f``; with ``mirror`` the new weight
    is also stored into ``w16``. With ``by_rows`` (a lazy row-sparse step) gradient element
    ``e`` is column ``e % ncols`` of row ``rows[e // ncols]`` of the weight and the states, else
    element ``e`` of all of them (``rows`` and ``ncols`` unused)."""
    def at(e, rows, ncols):
        if by_rows:
            k = e // ncols
            return rows[k] * ncols + (e - k * ncols)
        return e
    at = cuda.jit(device=True)(at)

    if n_state == 0:
        def kernel(w, g, hp, w16, rows, ncols):
            e = cuda.grid(1)
            stride = cuda.gridsize(1)
            while e < g.shape[0]:
                i = at(e, rows, ncols)
                wi = rule(f(w[i]), f(g[e]), hp)
                w[i] = wi
                if mirror:
                    w16[i] = wi
                e += stride
    elif n_state == 1:
        def kernel(w, g, s0, hp, w16, rows, ncols):
            e = cuda.grid(1)
            stride = cuda.gridsize(1)
            while e < g.shape[0]:
                i = at(e, rows, ncols)
                wi, a = rule(f(w[i]), f(g[e]), f(s0[i]), hp)
                w[i] = wi
                s0[i] = a
                if mirror:
                    w16[i] = wi
                e += stride
    elif n_state == 2:
        def kernel(w, g, s0, s1, hp, w16, rows, ncols):
            e = cuda.grid(1)
            stride = cuda.gridsize(1)
            while e < g.shape[0]:
                i = at(e, rows, ncols)
                wi, a, b = rule(f(w[i]), f(g[e]), f(s0[i]), f(s1[i]), hp)
                w[i] = wi
                s0[i] = a
                s1[i] = b
                if mirror:
                    w16[i] = wi
                e += stride
    elif n_state == 3:
        def kernel(w, g, s0, s1, s2, hp, w16, rows, ncols):
            e = cuda.grid(1)
            stride = cuda.gridsize(1)
            while e < g.shape[0]:
                i = at(e, rows, ncols)
                wi, a, b, c = rule(f(w[i]), f(g[e]), f(s0[i]), f(s1[i]), f(s2[i]), hp)
                w[i] = wi
                s0[i] = a
                s1[i] = b
                s2[i] = c
                if mirror:
                    w16[i] = wi
                e += stride
    else:
        raise ValueError(f"rules with {n_state} state arrays are not supported (0 to 3)")
    return kernel


def elementwise_kernel(factory, storage: tuple, compute, n_hyper: int, mirror: bool,
                       by_rows: bool = False):
    """The compiled kernel of ``factory``'s rule (cached per process, compiled on first use).

    ``storage``: the dtypes of ``(w, g, s0, ..., w16)``; ``compute``: the arithmetic dtype;
    ``by_rows``: the lazy row-sparse variant (see :func:`_source`).
    """
    compute = np.dtype(compute)
    storage = tuple(np.dtype(s) for s in storage)
    key = (factory, storage, compute, n_hyper, bool(mirror), bool(by_rows))
    kernel = _kernels.get(key)
    if kernel is not None:
        return kernel
    with _lock:
        kernel = _kernels.get(key)
        if kernel is None:
            rule = device_rule(factory, compute)
            n_state = len(storage) - 3
            arrs = [NUMBA_TYPES[s][::1] for s in storage]
            hp = types.UniTuple(NUMBA_TYPES[compute], n_hyper)
            sig = types.void(*arrs[:-1], hp, arrs[-1], types.int64[::1], types.int64)
            src = _source(rule, n_state, compute.type, bool(mirror), bool(by_rows))
            kernel = _kernels[key] = cuda.jit(sig, **COMPILE_OPTIONS)(src)
    return kernel


# --------------------------------------------------------------------------------------------
# LARS norms (LBSGD): |w|^2 and |g|^2 per tensor, float64, fixed order, on the device
# --------------------------------------------------------------------------------------------
def _norms_sources(f, with_cum):
    """Block ``(b, s)`` sums its grid-stride share of segment ``s`` (``b`` of REDUCE_BLOCKS)
    and reduces it in a fixed tree; ``final`` adds a segment's block sums in order. The grid is
    fixed, not derived from the device, so the float64 sums are the same on every GPU, and a
    single tensor (one segment) gets the same numbers as inside a Trainer's group."""
    threads = REDUCE_THREADS

    def partial(x, y, cum, table, offsets, out):
        s = cuda.blockIdx.y
        sx = cuda.shared.array(threads, numba.float64)
        sy = cuda.shared.array(threads, numba.float64)
        tid = cuda.threadIdx.x
        ax = numba.float64(0.0)
        ay = numba.float64(0.0)
        if table[s, 0] != 0:
            bs = f(table[s, 1])
            i = offsets[s] + cuda.blockIdx.x * cuda.blockDim.x + tid
            stride = cuda.gridDim.x * cuda.blockDim.x
            while i < offsets[s + 1]:
                vx = numba.float64(x[i])
                if with_cum and bs != 0:  # batch_scale 0: this segment's gradient norms
                    vy = numba.float64((f(cum[i]) + f(y[i])) / bs)
                else:
                    vy = numba.float64(y[i])
                ax += vx * vx
                ay += vy * vy
                i += stride
        sx[tid] = ax
        sy[tid] = ay
        cuda.syncthreads()
        h = threads // 2
        while h > 0:
            if tid < h:
                sx[tid] += sx[tid + h]
                sy[tid] += sy[tid + h]
            cuda.syncthreads()
            h //= 2
        if tid == 0:
            out[s, 0, cuda.blockIdx.x] = sx[0]
            out[s, 1, cuda.blockIdx.x] = sy[0]

    def final(out, res):
        s = cuda.grid(1)
        if s < out.shape[0]:
            ax = numba.float64(0.0)
            ay = numba.float64(0.0)
            for b in range(out.shape[2]):
                ax += out[s, 0, b]
                ay += out[s, 1, b]
            res[s, 0] = ax
            res[s, 1] = ay
    return partial, final


def _norms_kernels(dx, dy, dc, with_cum):
    key = ("norms", dx, dy, dc, bool(with_cum))
    k = _kernels.get(key)
    if k is None:
        with _lock:
            k = _kernels.get(key)
            if k is None:
                partial, final = _norms_sources(compute_dtype(dx).type, bool(with_cum))
                out3 = types.float64[:, :, ::1]
                sig = types.void(NUMBA_TYPES[dx][::1], NUMBA_TYPES[dy][::1], NUMBA_TYPES[dc][::1], types.float64[:, ::1],
                                 types.int64[::1], out3)
                k = _kernels[key] = (
                    cuda.jit(sig, **COMPILE_OPTIONS)(partial),
                    cuda.jit(types.void(out3, types.float64[:, ::1]), **COMPILE_OPTIONS)(final))
    return k


def run_norms(w: ArrayDesc, g: ArrayDesc, cum, table, offsets, stream=0):
    """Per-segment ``(sum w^2, sum gm^2)`` of flat device buffers, as a host ``(n_seg, 2)``
    array (``gm = (cum + g)/table[s, 1]`` when ``cum`` is given and ``table[s, 1]`` is not 0,
    else ``g``). Copying the
    result back is the one synchronisation (MXNet's LARS reads its norms on the host too)."""
    n_seg = table.shape[0]
    c = cum if cum is not None else w
    partial, final = _norms_kernels(w.dtype, g.dtype, c.dtype, cum is not None)
    dev_table = cuda.to_device(np.ascontiguousarray(table, np.float64), stream=stream)
    dev_offsets = offsets if not isinstance(offsets, np.ndarray) else \
        cuda.to_device(offsets.astype(np.int64), stream=stream)
    out = cuda.device_array((n_seg, 2, REDUCE_BLOCKS), np.float64, stream=stream)
    res = cuda.device_array((n_seg, 2), np.float64, stream=stream)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaPerformanceWarning)
        partial[(REDUCE_BLOCKS, n_seg), REDUCE_THREADS, stream](flat(w), flat(g), flat(c),
                                                                dev_table, dev_offsets, out)
        final[max(1, -(-n_seg // 32)), 32, stream](out, res)
    host = res.copy_to_host(stream=stream)
    if not SIMULATOR:
        stream.synchronize() if hasattr(stream, "synchronize") else cuda.synchronize()
    return host


def lars_norms(w: ArrayDesc, g: ArrayDesc, cum, batch_scale, stream=0):
    """``(sum w^2, sum gm^2)`` of one tensor (one segment of :func:`run_norms`)."""
    res = run_norms(w, g, cum, np.array([[1.0, float(batch_scale)]]),
                    np.array([0, w.size], np.int64), stream=stream)
    return float(res[0, 0]), float(res[0, 1])


# --------------------------------------------------------------------------------------------
# two-pass steps (LAMB): pass 1 reduces |w|^2 and |u|^2 per tensor, writing nothing
# --------------------------------------------------------------------------------------------
#: Threads per block of the direction pass: one per lane on a GPU; under the simulator (which
#: runs every thread as a Python thread) 16, each keeping 16 lanes' sums: the same additions
#: in the same order, so the same sums, in a fraction of the simulator's time.
DIRECTION_THREADS = 16 if SIMULATOR else None


def _direction_source(toward, n_hyper, f, lanes, threads):
    """Block ``b`` takes chunks ``b, b + gridDim, ...`` (rows ``(start, end, segment)`` of the
    CPU backend's chunk table with ``DIRECTION_CHUNK``); lane ``l`` of ``lanes`` forms ``u`` of
    elements ``start + l, start + l + lanes, ...`` and adds ``w^2`` and ``u^2`` into its float64
    sums in that order; the block then adds the sums pairwise in shared memory
    (``sum[l] += sum[l + h]``, ``h = lanes/2, ..., 1``): the order of
    ``toolkit.backends.cpu.direction_kernel``, so both give the same sums. Thread ``t`` of the
    block's ``threads`` keeps lanes ``t, t + threads, ...`` (one lane per thread when ``threads
    == lanes``). Only ``partial`` is written."""
    per = lanes // threads

    def kernel(w, g, s0, s1, table, chunks, partial):
        sw = cuda.shared.array(lanes, numba.float64)
        su = cuda.shared.array(lanes, numba.float64)
        tid = cuda.threadIdx.x
        c = cuda.blockIdx.x
        while c < chunks.shape[0]:
            s = chunks[c, 2]
            active = table[s, 0] != 0
            for m in range(per):
                lane = tid + m * threads
                aw = numba.float64(0.0)
                au = numba.float64(0.0)
                if active:
                    hp = row_tuple(table[s, 1:], n_hyper)
                    i = chunks[c, 0] + lane
                    while i < chunks[c, 1]:
                        wi = f(w[i])
                        u, _, _ = toward(wi, f(g[i]), f(s0[i]), f(s1[i]), hp)
                        vw = numba.float64(wi)
                        vu = numba.float64(u)
                        aw += vw * vw
                        au += vu * vu
                        i += lanes
                sw[lane] = aw
                su[lane] = au
            cuda.syncthreads()
            h = lanes // 2
            while h > 0:
                for m in range(per):
                    j = tid + m * threads
                    if j < h:
                        sw[j] += sw[j + h]
                        su[j] += su[j + h]
                cuda.syncthreads()
                h //= 2
            if tid == 0 and active:
                partial[c, 0] = sw[0]
                partial[c, 1] = su[0]
            cuda.syncthreads()  # the sums are reused by the block's next chunk
            c += cuda.gridDim.x
    return kernel


def direction_kernel(direction, storage: tuple, compute, n_hyper: int):
    """The compiled first pass of a two-pass step (cached per process); ``storage``: the dtypes
    of ``(w, g, s0, s1)``."""
    compute = np.dtype(compute)
    storage = tuple(np.dtype(s) for s in storage)
    key = ("direction", direction, storage, compute, n_hyper)
    kernel = _kernels.get(key)
    if kernel is not None:
        return kernel
    with _lock:
        kernel = _kernels.get(key)
        if kernel is None:
            src = _direction_source(device_rule(direction, compute), n_hyper, compute.type,
                                    DIRECTION_LANES, DIRECTION_THREADS or DIRECTION_LANES)
            sig = types.void(*[NUMBA_TYPES[s][::1] for s in storage], NUMBA_TYPES[compute][:, ::1],
                             types.int64[:, ::1], types.float64[:, ::1])
            kernel = _kernels[key] = cuda.jit(sig, **COMPILE_OPTIONS)(src)
    return kernel


def run_direction(direction, w: ArrayDesc, g: ArrayDesc, states, table, chunks,
                  host_chunks, stream=0):
    """Pass 1 of a two-pass step over flat device buffers (``states``: two arrays, read only):
    the host ``(n_seg, 2)`` array of every active segment's ``(sum w^2, sum u^2)``. ``table``:
    the host ``(active, *hp)`` rows (compute dtype); ``chunks`` and ``host_chunks``: the device
    and host copies of the chunk table (``DIRECTION_CHUNK``). The per-chunk sums are added on the
    host in chunk order (as on the CPU); copying them back is the one synchronisation."""
    if len(states) != 2:
        raise ValueError(f"a direction pass takes two state arrays, got {len(states)}")
    out = np.zeros((table.shape[0], 2))
    n_chunks = host_chunks.shape[0]
    if w.size == 0 or n_chunks == 0:
        return out
    compute = compute_dtype(w.dtype)
    kernel = direction_kernel(direction, (w.dtype, g.dtype) + tuple(
        s.dtype for s in states), compute, table.shape[1] - 1)
    dev_table = cuda.to_device(np.ascontiguousarray(table, compute), stream=stream)
    partial = cuda.to_device(np.zeros((n_chunks, 2)), stream=stream)
    blocks = min(n_chunks, 2) if SIMULATOR else min(n_chunks, block_cap())
    launch(kernel, blocks, DIRECTION_THREADS or DIRECTION_LANES, stream, flat(w), flat(g),
           flat(states[0]),
           flat(states[1]), dev_table, chunks, partial)
    host = partial.copy_to_host(stream=stream)
    if not SIMULATOR:
        stream.synchronize() if hasattr(stream, "synchronize") else cuda.synchronize()
    sum_partials(np.ascontiguousarray(host_chunks, np.int64), host, out)
    return out


def direction_norms(direction, w: ArrayDesc, g: ArrayDesc, states, hyper, stream=0):
    """:func:`run_direction` over one tensor: ``(sum w^2, sum u^2)``."""
    compute = compute_dtype(w.dtype)
    table = np.array([(1.0,) + tuple(hyper)], compute)
    host_chunks = single_chunks(w.size, DIRECTION_CHUNK)
    res = run_direction(direction, w, g, states, table,
                        cuda.to_device(host_chunks, stream=stream), host_chunks, stream=stream)
    return float(res[0, 0]), float(res[0, 1])


# --------------------------------------------------------------------------------------------
# allocation and conversion for numba device arrays (create_state of non-CuPy/torch weights)
# --------------------------------------------------------------------------------------------
def zeros(like: ArrayDesc, dtype, shape=None):
    """A zero-filled numba device array with ``like``'s shape and memory order (or ``shape``,
    C order). Allocation time, not step time: the fill is waited for, so no later stream can
    see it unfinished."""
    out = cuda.device_array(like.shape if shape is None else shape, np.dtype(dtype),
                            order=like.order if shape is None else "C")
    d = arrays.describe(out)
    run(rules.fill_rule, d, d, (), rules.FillRow(value=0.0), stream=0)
    cuda.synchronize()
    return out


def convert_into(dst: ArrayDesc, src: ArrayDesc):
    """``dst[...] = src`` element by element, rounding to ``dst``'s dtype (same memory order);
    waited for, like :func:`zeros` (used when states are created)."""
    run(rules.copy_rule, dst, src, (), (0.0,), stream=0)
    cuda.synchronize()


def copy_from_host(d: ArrayDesc, host):
    """Copy a numpy array into any described device array (same shape), in its memory order."""
    flat(d).copy_to_device(np.ascontiguousarray(host.reshape(-1, order=d.order)))


def to_host(d: ArrayDesc):
    """A numpy copy of any device array (synchronising)."""
    a = flat(d)
    host = a.copy_to_host() if hasattr(a, "copy_to_host") else np.array(a._ary)
    return host.reshape(d.shape, order=d.order)


# --------------------------------------------------------------------------------------------
# launching
# --------------------------------------------------------------------------------------------
_NO_ROWS: list = []


def _no_rows():
    """The placeholder ``rows`` argument of a kernel that is not by rows (one device array)."""
    if not _NO_ROWS:
        _NO_ROWS.append(cuda.to_device(np.zeros(1, np.int64)))
    return _NO_ROWS[0]


def run(factory, w: ArrayDesc, g: ArrayDesc, states, hyper, stream=0, mirror=None, rows=None):
    """Run ``factory``'s rule over described device arrays in place (one launch). With
    ``rows`` (a device int64 array): a lazy row-sparse step, ``g`` the values of those rows."""
    n = g.size
    if n == 0 or w.size == 0:
        return
    compute = compute_dtype(w.dtype)
    hp = tuple(compute.type(h) for h in hyper)
    m = mirror if mirror is not None else w
    storage = (w.dtype, g.dtype) + tuple(s.dtype for s in states) + (m.dtype,)
    kernel = elementwise_kernel(factory, storage, compute, len(hp), mirror is not None,
                                rows is not None)
    blocks, threads = launch_config(n)
    ncols = (w.size // w.shape[0]) if rows is not None else 1
    args = [flat(w), flat(g)] + [flat(s) for s in states] + [
        hp, flat(m), rows if rows is not None else _no_rows(), ncols]
    launch(kernel, blocks, threads, stream, *args)


def dense_from_rows(values, rows, shape):
    """A zero array of ``shape`` of ``values``' kind and device with rows ``rows`` (host
    int64) set to ``values`` (a row-sparse gradient made dense)."""
    v = arrays.describe(values, "grad.values")
    out = arrays.zeros(shape, v.dtype, values)
    if rows.shape[0]:
        dev_rows = cuda.to_device(np.ascontiguousarray(rows, np.int64))
        run(rules.copy_rule, arrays.describe(out, "dense"), v, (), (0.0,), stream=0,
            rows=dev_rows)
        cuda.synchronize()
    return out


class Launcher:
    """Runs one optimizer step's rules on the CUDA backend.

    ``weight``: the described weight the step updates (the float32 master copy under
    multi_precision, whose float16 twin ``mirror`` each weight update also writes); ``stream``
    as :func:`resolve_stream`.
    """

    backend = "cuda"

    def __init__(self, weight: ArrayDesc, stream=None, mirror: ArrayDesc | None = None,
                 known=(), rows=None):
        self.weight, self.mirror = weight, mirror
        self.stream = resolve_stream(stream, mirror if mirror is not None else weight)
        self.device = device_of(weight)
        self._known = {id(d.obj): d for d in known}
        # a lazy row-sparse step: the host rows, uploaded once on first use
        self.rows = None if rows is None else np.ascontiguousarray(rows, np.int64)
        self._dev_rows = None

    def _device_rows(self):
        if self.rows is None:
            return None
        if self._dev_rows is None:
            self._dev_rows = cuda.to_device(self.rows, stream=self.stream)
        return self._dev_rows

    def _describe(self, a, what):
        """The description of ``a`` (reused from validation when it made one)."""
        d = self._known.get(id(a))
        return d if d is not None and d.obj is a else arrays.describe(a, what)

    def compute_dtype(self, a):
        return compute_dtype(self._describe(a, "array").dtype)

    def _mirror_for(self, w: ArrayDesc):
        """The float16 twin to write when ``w`` is the step's master weight, else None."""
        return self.mirror if (self.mirror is not None and w.ptr == self.weight.ptr) else None

    def run_rule(self, factory, weight, grad, states, hyper):
        w = self._describe(weight, "weight")
        self.in_device(self._run_rule, factory, w, self._describe(grad, "grad"),
                        tuple(self._describe(s, "state") for s in states), hyper,
                        mirror=self._mirror_for(w))

    def _run_rule(self, factory, w, g, states, hyper, mirror):
        if self.rows is not None and self.rows.shape[0] == 0:
            return
        run(factory, w, g, states, hyper, stream=self.stream, mirror=mirror,
            rows=self._device_rows())

    def _no_lazy_form(self, what):
        if self.rows is not None:
            raise NotImplementedError(f"{what} has no lazy row-sparse form")

    def run_noise_rule(self, factory, weight, grad, hyper, key, aux):
        self._no_lazy_form("a noise rule")
        w = self._describe(weight, "weight")
        self.in_device(run_noise, factory, w, self._describe(grad, "grad"), hyper, key, aux,
                        stream=self.stream, mirror=self._mirror_for(w))

    def run_rows(self, factory, weight, grad, history, rows, hyper):
        """A row rule (:mod:`toolkit.backends.rows`), one launch: gradient row ``k`` updates
        weight and history row ``rows[k]`` (row ``k`` when ``rows`` is None); this launcher's
        own ``rows`` go up once per step."""
        w = self._describe(weight, "weight")
        if rows is not None and rows is self.rows:
            rows = self._device_rows()
        self.in_device(cuda_rows.run, factory, w, self._describe(grad, "grad"),
                        self._describe(history, "state['history']"), rows, hyper,
                        stream=self.stream, mirror=self._mirror_for(w))

    def zeros_like(self, a, dtype=None):
        return arrays.zeros_like(a, dtype)

    def lars_norms(self, weight, grad, cum, batch_scale):
        self._no_lazy_form("LARS norms")
        return self.in_device(lars_norms, self._describe(weight, "weight"),
                               self._describe(grad, "grad"),
                               None if cum is None else self._describe(cum, "accumulator"),
                               batch_scale, stream=self.stream)

    def direction_norms(self, first, weight, grad, states):
        """Run the first pass of a two-pass step (``rules.DirectionPass``) over one tensor:
        ``(sum w^2, sum u^2)``, nothing written (reading them back is a synchronisation)."""
        self._no_lazy_form("a direction pass")
        return self.in_device(direction_norms, first.direction,
                               self._describe(weight, "weight"), self._describe(grad, "grad"),
                               tuple(self._describe(s, "state") for s in states), first.hyper,
                               stream=self.stream)

    def in_device(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` with this launcher's device current (the Trainer runs its
        group's segmented calls and reductions through it)."""
        if single_device() or cuda.get_current_device().id == self.device:
            return fn(*args, **kwargs)
        with cuda.gpus[self.device]:
            return fn(*args, **kwargs)


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
    kernel = _kernels.get(key)
    if kernel is not None:
        return kernel
    with _lock:
        kernel = _kernels.get(key)
        if kernel is None:
            rule = device_rule(factory, compute)
            arrs = [NUMBA_TYPES[s][::1] for s in storage]
            sig = types.void(*arrs[:-1], NUMBA_TYPES[compute][:, ::1], types.int64[:, ::1], arrs[-1])
            src = _segmented_source(rule, len(storage) - 3, n_hyper, compute.type, bool(mirror))
            kernel = _kernels[key] = cuda.jit(sig, **COMPILE_OPTIONS)(src)
    return kernel


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


# --------------------------------------------------------------------------------------------
# noise rules (SGLD): ``rule(w, g, z, hp, aux) -> w`` with z the element's normal draw
# --------------------------------------------------------------------------------------------
def _noise_sources(rule, f, mirror, n_hyper, n_aux):
    from . import noise
    normal = noise.generator(cuda.jit(device=True), "cuda")

    def single(w, g, hp, key, aux, w16):
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        while i < w.shape[0]:
            wi = rule(f(w[i]), f(g[i]), normal(key, np.uint64(i)), hp, aux)
            w[i] = wi
            if mirror:
                w16[i] = wi
            i += stride

    def segmented(w, g, table, keys, aux, offsets, chunks, w16):
        c = cuda.blockIdx.x
        while c < chunks.shape[0]:
            s = chunks[c, 2]
            if table[s, 0] != 0:
                hp = row_tuple(table[s, 1:], n_hyper)
                a = row_tuple(aux[s], n_aux)
                key = keys[s]
                base = offsets[s]
                i = chunks[c, 0] + cuda.threadIdx.x
                while i < chunks[c, 1]:
                    wi = rule(f(w[i]), f(g[i]), normal(key, np.uint64(i - base)), hp, a)
                    w[i] = wi
                    if mirror:
                        w16[i] = wi
                    i += cuda.blockDim.x
            c += cuda.gridDim.x
    return single, segmented


def _noise_kernel(kind, factory, w, g, m, compute, n_hyper, n_aux, mirror):
    key = ("noise", kind, factory, w, g, m, compute, n_hyper, n_aux, bool(mirror))
    kernel = _kernels.get(key)
    if kernel is None:
        with _lock:
            kernel = _kernels.get(key)
            if kernel is None:
                rule = device_rule(factory, compute)
                single, segmented = _noise_sources(rule, compute.type, bool(mirror), n_hyper,
                                                   n_aux)
                if kind == "single":
                    sig = types.void(NUMBA_TYPES[w][::1], NUMBA_TYPES[g][::1],
                                     types.UniTuple(NUMBA_TYPES[compute], n_hyper), types.uint64,
                                     types.UniTuple(types.float64, n_aux), NUMBA_TYPES[m][::1])
                    src = single
                else:
                    sig = types.void(NUMBA_TYPES[w][::1], NUMBA_TYPES[g][::1], NUMBA_TYPES[compute][:, ::1],
                                     types.uint64[::1], types.float64[:, ::1], types.int64[::1],
                                     types.int64[:, ::1], NUMBA_TYPES[m][::1])
                    src = segmented
                kernel = _kernels[key] = cuda.jit(sig, **COMPILE_OPTIONS)(src)
    return kernel


def run_noise(factory, w: ArrayDesc, g: ArrayDesc, hyper, key, aux, stream=0, mirror=None):
    """A noise rule over one tensor (element ``i`` draws ``normal(key, i)``), one launch."""
    if w.size == 0:
        return
    compute = compute_dtype(w.dtype)
    m = mirror if mirror is not None else w
    kernel = _noise_kernel("single", factory, w.dtype, g.dtype, m.dtype, compute, len(hyper),
                           len(aux), mirror is not None)
    hp = tuple(compute.type(h) for h in hyper)
    blocks, threads = launch_config(w.size)
    launch(kernel, blocks, threads, stream, flat(w), flat(g), hp, np.uint64(key),
           tuple(float(a) for a in aux), flat(m))


def run_noise_segmented(factory, w: ArrayDesc, g: ArrayDesc, table, keys, aux, uploads,
                        offsets, chunks, stream=0, mirror=None):
    """One launch of a noise rule over flat buffers holding many tensors; ``uploads``: three
    :class:`TableUpload` for the table, the keys and ``aux``; ``offsets``, ``chunks``: device
    arrays."""
    if w.size == 0:
        return
    compute = compute_dtype(w.dtype)
    m = mirror if mirror is not None else w
    kernel = _noise_kernel("segmented", factory, w.dtype, g.dtype, m.dtype, compute,
                           table.shape[1] - 1, aux.shape[1], mirror is not None)
    n_chunks = chunks.shape[0]
    blocks = min(n_chunks, 2) if SIMULATOR else min(n_chunks, block_cap())
    sent = [u.upload(a, stream) for u, a in zip(uploads, (table, keys, aux))]
    launch(kernel, blocks, THREADS, stream, flat(w), flat(g), sent[0][1], sent[1][1],
           sent[2][1], offsets, chunks, flat(m))
    for u, (k, _) in zip(uploads, sent):
        u.launched(k, stream)


# the operations on numba device arrays that the kind-neutral array contract asks for
# (this module itself: device_of, zeros, convert_into, copy_from_host, to_host, read when called)
arrays.register_kind(arrays.DEVICE, sys.modules[__name__])
