"""The CUDA backend: the CPU backend's per-element rules compiled by numba-cuda into grid-stride kernels.

:class:`Launcher`, the element-wise ``run`` and the array contract's operations on numba device
arrays are here; the kernel families (``cuda_elementwise``, ``cuda_reduce``, ``cuda_segmented``,
``cuda_noise``, ``cuda_rows``; ``cuda_device``: launch and dtypes) are re-exported from here.

The rule factory :mod:`toolkit.backends.cpu` compiles with ``numba.njit`` is compiled with
``cuda.jit(device=True)``. Each element is computed in float32 for float16 storage, else in its
storage type, and stored rounded to nearest; with ``multi_precision`` the float32 master is the
kernel's weight and the float16 weight is written in the same pass (the *mirror*).

Nothing is copied: arrays are used in place through their ``__cuda_array_interface__``,
hyperparameters are a kernel argument, and the kernel is enqueued on the caller's stream
(:func:`resolve_stream`) without waiting. Compile policy as the CPU's (explicit signatures, no
fastmath, on-disk cache); numba-cuda contracts ``a*b + c`` into FMAs, which round once and so
stay inside the same error bound (``reference.error_bound``): the tests hold CUDA to the CPU's
bound. Under ``NUMBA_ENABLE_CUDASIM=1`` the kernels run in numba's simulator (logic and
indexing only, not FMA, float16 hardware or races). ``toolkit`` imports this module only when a
CUDA array or ``backend="cuda"`` is used (``toolkit.backends.cuda_available``).
"""
from __future__ import annotations

import sys

import numpy as np
from numba import cuda

from . import arrays, cuda_rows, rules
from .arrays import ArrayDesc
from .cuda_device import (COMPILE_OPTIONS, NUMBA_TYPES, SIMULATOR, THREADS,
                          block_cap, compute_dtype, device_of, flat, launch, launch_config,
                          resolve_stream, row_tuple, single_device)
from .cuda_elementwise import device_rule, elementwise_kernel
from .cuda_noise import run_noise, run_noise_segmented
from .cuda_reduce import (DIRECTION_THREADS, REDUCE_BLOCKS, REDUCE_THREADS, direction_kernel,
                          direction_norms, lars_norms, run_direction, run_norms)
from .cuda_segmented import CHUNK, TableUpload, chunk_table, run_segmented, segmented_kernel
from .lowbit import Quantized

__all__ = ["SIMULATOR", "COMPILE_OPTIONS", "THREADS", "Launcher", "elementwise_kernel",
           "launch_config", "device_of", "resolve_stream", "zeros", "convert_into", "to_host",
           "lars_norms", "run_norms", "flat", "direction_norms", "run_direction",
           # re-exported from the modules beside this one, for the Trainer, finite and the tests
           "NUMBA_TYPES", "block_cap", "compute_dtype", "launch", "row_tuple", "single_device",
           "device_rule", "run_noise", "run_noise_segmented", "DIRECTION_THREADS",
           "REDUCE_BLOCKS", "REDUCE_THREADS", "direction_kernel", "CHUNK", "TableUpload",
           "chunk_table", "run_segmented", "segmented_kernel", "run", "dense_from_rows",
           "copy_from_host"]


# --------------------------------------------------------------------------------------------
# allocation and conversion for numba device arrays (create_state of non-CuPy/torch weights)
# --------------------------------------------------------------------------------------------
def zeros(like: ArrayDesc, dtype, shape=None):
    """A zero-filled numba device array with ``like``'s shape and memory order (or ``shape``,
    C order). Allocation time, not step time: the fill is waited for, so no later stream can
    see it unfinished."""
    shape, order = (like.shape, like.order) if shape is None else (shape, "C")
    if np.dtype(dtype) not in NUMBA_TYPES:  # a held state's codes or bits (uint8, uint16)
        return cuda.to_device(np.zeros(shape, dtype, order=order))
    out = cuda.device_array(shape, np.dtype(dtype), order=order)
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


#: why a factored step (Adafactor's) does not run on a CUDA array
NO_FACTORED = ("a factored step (Adafactor) runs on the CPU backend only: its kernels "
               "(toolkit.backends.cpu_factored) have no CUDA form yet; step numpy arrays or CPU "
               "tensors (nothing was written)")

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

    def run_rule(self, factory, weight, grad, states, hyper, key=None):
        """Run a per-element rule over ``weight``, ``grad`` and ``states`` in place; states
        held in another precision (``state_dtype``: bfloat16 bits in uint16 arrays, int8
        ``Quantized`` slots) through ``toolkit.backends.cuda_lowbit``, bfloat16 ones rounded
        stochastically with ``key`` where one is given."""
        w = self._describe(weight, "weight")
        g = self._describe(grad, "grad")
        if any(type(s) is Quantized for s in states):
            self.in_device(self._run_held, factory, w, g, states, hyper, key)
            return
        descs = tuple(self._describe(s, "state") for s in states)
        if any(d.dtype == np.uint16 for d in descs):
            self.in_device(self._run_held, factory, w, g, states, hyper, key)
            return
        self.in_device(self._run_rule, factory, w, g, descs, hyper, mirror=self._mirror_for(w))

    def _run_held(self, factory, w, g, states, hyper, key):
        """Held states (``cuda_lowbit.run_held``) over flat views in the weight's memory order."""
        if self.rows is not None or self._mirror_for(w) is not None:
            raise NotImplementedError("held states (state_dtype) step dense gradients without "
                                      "a float16 twin on CUDA")
        from . import cuda_lowbit
        held = tuple(s.replace(codes=flat(self._describe(s.codes, "state codes")))
                     if type(s) is Quantized else flat(self._describe(s, "state"))
                     for s in states)
        cuda_lowbit.run_held(factory, flat(w), flat(g), held, hyper, key, stream=self.stream)

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
        weight and history row ``rows[k]`` (``rows`` None: this launcher's own rows, which go
        up once per step, or row ``k`` when it has none)."""
        w = self._describe(weight, "weight")
        if rows is None or rows is self.rows:
            rows = self._device_rows()
        self.in_device(cuda_rows.run, factory, w, self._describe(grad, "grad"),
                        self._describe(history, "state['history']"), rows, hyper,
                        stream=self.stream, mirror=self._mirror_for(w))

    def zeros_like(self, a, dtype=None):
        return arrays.zeros_like(a, dtype)

    @staticmethod
    def check_kind(kind):
        """Raise where this launcher does not run launches of ``kind`` (a factored step: its
        kernels are the CPU's, ``toolkit.backends.cpu_factored``), so that a caller refuses
        before it commits or writes anything."""
        if kind == "factored":
            raise NotImplementedError(NO_FACTORED)

    def run_factored(self, factory, weight, grad, states, hyper):
        """A factored step (Adafactor) is refused before anything is written."""
        self.check_kind("factored")

    def run_matrix(self, factory, weight, grad, states, hyper):
        """A matrix step (Muon's; :mod:`toolkit.backends.cuda_matrix`) in place, its products
        by a GPU BLAS; the float16 twin written where the weight is this launcher's master."""
        self._no_lazy_form("a matrix step")
        from . import cuda_matrix
        w = self._describe(weight, "weight")
        self.in_device(cuda_matrix.run_matrix, factory, w, self._describe(grad, "grad"),
                       self._describe(states[0], "state"), hyper, stream=self.stream,
                       mirror=self._mirror_for(w))

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

    # --- a Trainer group's flat buffers, as the CPU launcher's (``cpu.Launcher.run_table``);
    # ``group`` adds ``uploads`` (its TableUploads), ``offsets_device`` and device ``chunks``

    def run_table(self, kind, factory, flats, table, group, keys=None, aux=None, chunks=None):
        """One segmented launch of ``kind`` over the flat ``(weight, grad, *states)``; the
        float16 twin is written where the weight is this launcher's master."""
        d = arrays.describe
        w, g, states = d(flats[0]), d(flats[1]), [d(a) for a in flats[2:]]
        mirror = self._mirror_for(w)
        self.check_kind(kind)
        if kind == "rows":
            self.in_device(cuda_rows.run_segmented, factory, w, g, states[0], table,
                           group.uploads[0], group.rows_layout(), stream=self.stream,
                           mirror=mirror)
        elif kind == "noise":
            self.in_device(run_noise_segmented, factory, w, g, table, keys, aux, group.uploads,
                           group.offsets_device, group.chunks, stream=self.stream, mirror=mirror)
        else:
            self.in_device(run_segmented, factory, w, g, states, table, group.uploads[0],
                           group.chunks, stream=self.stream, mirror=mirror)

    def group_norms(self, w, grad, cum, rows, group):
        d = arrays.describe
        return self.in_device(run_norms, d(w), d(grad), None if cum is None else d(cum), rows,
                              group.offsets_device, stream=self.stream)

    def group_directions(self, direction, w, grad, states, table, group):
        d = arrays.describe
        return self.in_device(run_direction, direction, d(w), d(grad), [d(a) for a in states],
                              table, group.direction_chunks(device=True),
                              group.direction_chunks(), stream=self.stream)

    def in_device(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` with this launcher's device current (the Trainer runs its
        group's segmented calls and reductions through it)."""
        if single_device() or cuda.get_current_device().id == self.device:
            return fn(*args, **kwargs)
        with cuda.gpus[self.device]:
            return fn(*args, **kwargs)


# the operations on numba device arrays that the kind-neutral array contract asks for
# (this module itself: device_of, zeros, convert_into, copy_from_host, to_host, read when called)
arrays.register_kind(arrays.DEVICE, sys.modules[__name__])
