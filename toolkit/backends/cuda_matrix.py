"""The CUDA form of a matrix step (``launches`` kind "matrix", Muon's): the algorithm of
:mod:`toolkit.backends.cpu_matrix` on device arrays, its element-wise parts compiled by
numba-cuda from the same rule, its matrix products by a GPU BLAS.

One call steps one weight ``W`` in place, in its memory order (a Fortran-ordered ``n x m``
weight is the C-ordered ``m x n`` matrix ``W^T``, whose iteration is the transpose of ``W``'s:
the same products, the other side's Gram matrix), with nothing copied and no host sync:

1. moment kernel: ``buf, x = moment(g, buf)`` per element into a scratch matrix ``X`` (the
   compute dtype: float32 for float16 storage), and the float64 sum of ``x^2`` in a fixed order:
   a fixed grid of :data:`MOMENT_BLOCKS` blocks of :data:`MOMENT_THREADS` threads, each thread's
   grid-stride share summed serially, each block's sums added in a fixed tree; the same on
   every GPU, run after run (not the CPU's order: the norm is float64 either way);
2. normalise kernel: each block adds the block sums in block order, takes the square root and
   ``max(norm, eps)`` (``clamp``) or ``norm + eps`` in float64 and divides its share of ``X``,
   each quotient rounded once to the compute dtype (the CPU's quotients);
3. ``steps`` iterations on the small Gram matrix's side, as the CPU's: ``A = X X^T`` (or
   ``X^T X``), ``B = A A``, ``B = a I + b A + c B`` (a compiled pass), ``X = B X`` (or ``X B``);
4. apply kernel: ``w = apply(w, o)`` from the last iterate, writing the float16 twin of a
   multi-precision weight in the same pass.

The products (:func:`products_for`) are the weight's own library's where it is a PyTorch
tensor or a CuPy array, else the first installed of PyTorch (with CUDA) and CuPy: cuBLAS,
enqueued on the step's stream (an external stream wrapped, never a sync), over the scratch
matrices (numba device arrays, one set per thread, device and stream, wrapped once through
``__cuda_array_interface__`` and kept). Everything that can fail (the library, its stream and
views, one product of its own) is done before the first launch writes the state.
Where neither is installed, and under the simulator, a compiled kernel of this module
(:func:`matmul_kernel`: one thread per output element, a serial sum in the compute dtype):
correct, not fast. PyTorch's products follow its TF32 setting: with
``torch.backends.cuda.matmul.allow_tf32`` (or a float32 matmul precision below "highest") its
float32 products are TF32's, outside the oracle's bound for a float32 iteration (docs/backends.md).
"""
from __future__ import annotations

import contextlib
import math
import threading

import numba
import numpy as np
from numba import cuda, types

from .arrays import ArrayDesc
from .cuda_device import (COMPILE_OPTIONS, NUMBA_TYPES, SIMULATOR, compute_dtype, flat, launch,
                          launch_config, stream_handle, tree_sum)
from .jit import KernelCache

__all__ = ["MOMENT_BLOCKS", "MOMENT_THREADS", "LIBRARIES", "products_for", "run_matrix",
           "matmul_kernel"]

#: The fixed grid of the moment kernel's sum of squares (fixed, not derived from the device, so
#: its float64 sums are added in one order on every GPU); the simulator's is small, as
#: ``cuda_reduce``'s: every simulated thread is a Python thread.
MOMENT_BLOCKS, MOMENT_THREADS = (2, 4) if SIMULATOR else (256, 256)
#: The tile of :func:`matmul_kernel`'s 2-D grid on a GPU, and the grid's cap in each dimension
#: (CUDA's limit for y; the kernel's grid-stride loops cover the rest)
TILE, MAX_GRID = 16, 65535
#: Under the simulator, whose every thread is a Python thread (its time is their start-up),
#: every kernel but the moment's runs one block of this many threads (the matmul's 2 x 1):
#: few, and still more than one, so the grid-stride loops stride
SIMULATED_THREADS = 2
#: The libraries whose products a step may use, in the order they are preferred
LIBRARIES = ("torch", "cupy", "numba")

_KERNELS = KernelCache()


# --------------------------------------------------------------------------------------------
# the compiled kernels
# --------------------------------------------------------------------------------------------
def _moment_source(moment, f):
    threads = MOMENT_THREADS

    def kernel(g, buf, x, hp, partial):
        sums = cuda.shared.array(threads, numba.float64)
        tid = cuda.threadIdx.x
        e = cuda.grid(1)
        stride = cuda.gridsize(1)
        s = numba.float64(0.0)
        while e < g.shape[0]:
            b, v = moment(f(g[e]), f(buf[e]), hp)
            buf[e] = b
            x[e] = v
            vv = numba.float64(v)
            s += vv * vv
            e += stride
        sums[tid] = s
        tree_sum(sums, tid, threads)
        if tid == 0:
            partial[cuda.blockIdx.x] = sums[0]
    return kernel


def _normalise(x, partial, eps, clamp):
    norm = cuda.shared.array(1, numba.float64)
    if cuda.threadIdx.x == 0:
        s = numba.float64(0.0)
        for b in range(partial.shape[0]):
            s += partial[b]
        r = math.sqrt(s)  # correctly rounded (a pow would not be)
        if clamp:
            if r < eps:  # max(|X|, eps); a NaN norm stays NaN (torch's clamp)
                r = eps
        else:
            r = r + eps
        norm[0] = r
    cuda.syncthreads()
    r = norm[0]
    e = cuda.grid(1)
    stride = cuda.gridsize(1)
    while e < x.shape[0]:
        x[e] = numba.float64(x[e]) / r
        e += stride


def _polynomial(bm, am, k, a, b, c):
    # B = a I + b A + c B (B holding A A), element by element of the k x k matrices
    e = cuda.grid(1)
    stride = cuda.gridsize(1)
    while e < k * k:
        v = b * am[e] + c * bm[e]
        if e // k == e % k:
            v = v + a
        bm[e] = v
        e += stride


def _apply_source(apply, f, mirror):
    def kernel(w, o, hp, w16):
        e = cuda.grid(1)
        stride = cuda.gridsize(1)
        while e < w.shape[0]:
            wi = apply(f(w[e]), o[e], hp)
            w[e] = wi
            if mirror:
                w16[e] = wi
            e += stride
    return kernel


def _matmul_source(f):
    def kernel(a, b, c, p, q, r, ta, tb):
        # c (p x q) = op(a) (p x r) op(b) (r x q), each a flat C-ordered array; op(a) reads a
        # stored r x p when ta, op(b) reads b stored q x r when tb; a 2-D grid-stride loop, the
        # grid's x over c's columns (neighbouring threads write neighbouring elements)
        j0, i0 = cuda.grid(2)
        sj, si = cuda.gridsize(2)
        i = i0
        while i < p:
            j = j0
            while j < q:
                s = f(0.0)
                for k in range(r):
                    av = a[k * p + i] if ta else a[i * r + k]
                    bv = b[j * r + k] if tb else b[k * q + j]
                    s += av * bv
                c[i * q + j] = s
                j += sj
            i += si
    return kernel


def _compile(fn, sig):
    return cuda.jit(sig, **COMPILE_OPTIONS)(fn)


def moment_kernel(factory, storage, compute, n_hyper):
    """The compiled moment kernel of ``factory``'s rule; ``storage``: the dtypes of ``(g,
    buf)``."""
    key = ("moment", factory, storage, compute, n_hyper)
    kernel = _KERNELS.get(key)
    if kernel is not None:
        return kernel

    def build():
        rule = factory(compute.type)
        src = _moment_source(cuda.jit(device=True)(rule.moment), compute.type)
        g, b = (NUMBA_TYPES[s][::1] for s in storage)
        sig = types.void(g, b, NUMBA_TYPES[compute][::1], types.UniTuple(types.float64, n_hyper),
                         types.float64[::1])
        return _compile(src, sig)
    return _KERNELS.cached(key, build)


def apply_kernel(factory, storage, compute, n_hyper, mirror):
    """The compiled apply kernel; ``storage``: the dtypes of ``(w, w16)``."""
    key = ("apply", factory, storage, compute, n_hyper, bool(mirror))
    kernel = _KERNELS.get(key)
    if kernel is not None:
        return kernel

    def build():
        rule = factory(compute.type)
        src = _apply_source(cuda.jit(device=True)(rule.apply), compute.type, bool(mirror))
        w, w16 = (NUMBA_TYPES[s][::1] for s in storage)
        sig = types.void(w, NUMBA_TYPES[compute][::1], types.UniTuple(types.float64, n_hyper),
                         w16)
        return _compile(src, sig)
    return _KERNELS.cached(key, build)


def _small_kernel(name, compute):
    """The compiled normalise, polynomial or matmul pass for ``compute``."""
    def build():
        fn = {"normalise": _normalise, "polynomial": _polynomial,
              "matmul": _matmul_source(compute.type)}[name]
        v = NUMBA_TYPES[compute][::1]
        f, i = NUMBA_TYPES[compute], types.int64
        sig = {"normalise": (v, types.float64[::1], types.float64, types.boolean),
               "polynomial": (v, v, i, f, f, f),
               "matmul": (v, v, v, i, i, i, types.boolean, types.boolean)}[name]
        return _compile(fn, types.void(*sig))
    return _KERNELS.cached((name, compute), build)


def matmul_kernel(compute):
    """The compiled product of the numba fallback (module docstring)."""
    return _small_kernel("matmul", np.dtype(compute))


# --------------------------------------------------------------------------------------------
# scratch matrices and the libraries that multiply them
# --------------------------------------------------------------------------------------------
class _Scratch:
    """A scratch array (a numba device array, reused while large enough: a fresh one a step
    would allocate again) and its views in the libraries that multiply it, made once."""

    __slots__ = ("dev", "views")

    def __init__(self, size, dtype):
        self.dev = cuda.device_array(max(size, 1), dtype)
        self.views = {}

    def view(self, lib):
        v = self.views.get(lib)
        if v is None:
            if lib == "torch":
                import torch
                # a plain tensor even when the first step runs under inference_mode (an
                # inference tensor refuses the later steps' out= outside it)
                with torch.inference_mode(False):
                    v = torch.as_tensor(self.dev,
                                        device=f"cuda:{cuda.get_current_device().id}")
            else:
                import cupy
                v = cupy.asarray(self.dev)
            self.views[lib] = v
        return v


_SCRATCH = threading.local()


def _scratch(name, size, dtype, handle):
    """The scratch array ``name`` of at least ``size`` elements of ``dtype`` on the current
    device, kept per thread and per stream (``handle``): the steps that use one follow each
    other on its stream, so a step never writes it while another stream's step still reads it
    (a larger one replaces it: numba's memory manager frees the old one once the device is done
    with it)."""
    held = getattr(_SCRATCH, "arrays", None)
    if held is None:
        held = _SCRATCH.arrays = {}
    key = (name, np.dtype(dtype), 0 if SIMULATOR else cuda.get_current_device().id, handle)
    s = held.get(key)
    if s is None or s.dev.shape[0] < size:
        s = held[key] = _Scratch(size, dtype)
    return s


_available: dict = {}


def _installed(lib):
    """Whether ``lib`` ("torch", "cupy") is importable and sees a GPU (asked once)."""
    ok = _available.get(lib)
    if ok is None:
        try:
            if lib == "torch":
                import torch
                ok = torch.cuda.is_available()
            else:
                import cupy
                ok = cupy.cuda.runtime.getDeviceCount() > 0
        except Exception:  # noqa: BLE001 - not installed, or installed without a driver
            ok = False
        _available[lib] = ok
    return ok


def products_for(w: ArrayDesc):
    """The library whose products step ``w`` (module docstring): "torch", "cupy" or "numba"."""
    if SIMULATOR:
        return "numba"
    if w.library in ("torch", "cupy") and _installed(w.library):
        return w.library
    return next((lib for lib in LIBRARIES[:-1] if _installed(lib)), "numba")


def _on_stream(lib, handle):
    """The context that makes ``lib`` enqueue on the stream of ``handle`` (0 and 1: the legacy
    default stream, the libraries' default; torch's current stream as itself, so that torch
    keeps no second cuBLAS workspace for it; another as an external stream)."""
    if lib == "torch":
        import torch
        dev = torch.device("cuda", cuda.get_current_device().id)
        current = torch.cuda.current_stream(dev)
        if handle in (0, 1):
            s = torch.cuda.default_stream(dev)
        elif current.cuda_stream == handle:
            s = current
        else:
            s = torch.cuda.ExternalStream(handle, device=dev)
        return torch.cuda.stream(s)
    import cupy
    return cupy.cuda.Stream.null if handle in (0, 1) else cupy.cuda.ExternalStream(handle)


class _Products:
    """``c = op(a) op(b)`` over scratch arrays by ``lib`` on ``stream`` (a library's
    ``matmul`` into ``c``'s view, or :func:`matmul_kernel`)."""

    def __init__(self, lib, compute, stream):
        self.lib, self.stream = lib, stream
        self.kernel = matmul_kernel(compute) if lib == "numba" else None

    def __call__(self, a, b, c, p, q, r, ta, tb):
        if self.kernel is not None:
            grid, threads = ((1, 1), (SIMULATED_THREADS, 1)) if SIMULATOR else (
                (min(-(-q // TILE), MAX_GRID), min(-(-p // TILE), MAX_GRID)), (TILE, TILE))
            launch(self.kernel, grid, threads, self.stream, a.dev, b.dev, c.dev, p, q, r, ta, tb)
            return
        av, bv, cv = a.view(self.lib), b.view(self.lib), c.view(self.lib)
        am = av[:p * r].reshape(r, p).T if ta else av[:p * r].reshape(p, r)
        bm = bv[:q * r].reshape(q, r).T if tb else bv[:q * r].reshape(r, q)
        if self.lib == "torch":
            import torch
            torch.matmul(am, bm, out=cv[:p * q].view(p, q))
        else:
            import cupy
            cupy.matmul(am, bm, out=cv[:p * q].reshape(p, q))


# --------------------------------------------------------------------------------------------
# one step
# --------------------------------------------------------------------------------------------
def _config(n):
    """``(blocks, threads)`` of a grid-stride kernel over ``n`` elements (the simulator's:
    :data:`SIMULATED_THREADS`)."""
    return (1, SIMULATED_THREADS) if SIMULATOR else launch_config(n)


def _check(w: ArrayDesc, g: ArrayDesc, buf: ArrayDesc, mirror):
    """Refuse what this step cannot take, before anything is written."""
    if len(w.shape) != 2:
        raise ValueError(f"a matrix step takes a 2-D weight, got shape {w.shape}")
    named = (("grad", g), ("state", buf)) + (() if mirror is None else (("float16 twin",
                                                                          mirror),))
    for what, d in (("weight", w),) + named:
        if not d.contiguous:
            raise ValueError(f"a matrix step on CUDA takes contiguous arrays; the {what} is "
                             "strided")
        if d.dtype not in NUMBA_TYPES:
            raise TypeError(f"a matrix step on CUDA takes float16, float32 or float64 arrays; "
                            f"the {what} is {d.dtype}")
    for what, d in named:
        if d.shape != w.shape or d.order != w.order:
            raise ValueError(f"a matrix step on CUDA takes the {what} in the weight's shape and "
                             f"memory order ({w.shape}, {w.order}), got {d.shape}, {d.order}")


def run_matrix(factory, w: ArrayDesc, g: ArrayDesc, buf: ArrayDesc, hyper, stream=0,
               mirror=None):
    """One matrix step (module docstring) in place on the described device arrays: the 2-D
    weight ``w`` (the float32 master of a multi-precision weight, whose float16 twin ``mirror``
    is written in the same pass), its gradient ``g`` and momentum buffer ``buf``; ``hyper``
    the float64 row (a NamedTuple with the iteration's fields ``a, b, c, eps, steps,
    clamp``); enqueued on ``stream``."""
    _check(w, g, buf, mirror)
    size = w.size
    if size == 0:
        return
    compute = compute_dtype(w.dtype)
    f = compute.type
    n, m = w.shape if w.order == "C" else w.shape[::-1]
    k, wide = min(n, m), n <= m
    # everything that can fail before the first launch writes the state: the scalars, the
    # scratch, the kernels, the library, its stream and views, and one product of its own
    hp = tuple(float(h) for h in hyper)
    eps, clamp, steps = float(hyper.eps), bool(hyper.clamp), int(hyper.steps)
    a, b, c = f(hyper.a), f(hyper.b), f(hyper.c)
    handle = stream_handle(stream)
    x, y = _scratch("x", size, compute, handle), _scratch("y", size, compute, handle)
    a_, b_ = _scratch("A", k * k, compute, handle), _scratch("B", k * k, compute, handle)
    partial = _scratch("partial", MOMENT_BLOCKS, np.float64, handle).dev[:MOMENT_BLOCKS]
    moment = moment_kernel(factory, (g.dtype, buf.dtype), compute, len(hp))
    normalise = _small_kernel("normalise", compute)
    polynomial = _small_kernel("polynomial", compute)
    twin = mirror if mirror is not None else w
    apply = apply_kernel(factory, (w.dtype, twin.dtype), compute, len(hp), mirror is not None)
    product = _Products(products_for(w), compute, stream)
    small = _config(k * k)
    arrays_ = flat(w), flat(g), flat(buf), flat(twin)
    with contextlib.nullcontext() if product.kernel is not None else _on_stream(
            product.lib, handle):
        if product.kernel is None and steps:
            for s in (x, y, a_, b_):
                s.view(product.lib)
            # a library's refusal (torch's deterministic mode without a cuBLAS workspace
            # setting, say) surfaces here, before the state is written
            product(b_, b_, a_, 1, 1, 1, False, False)
        launch(moment, MOMENT_BLOCKS, MOMENT_THREADS, stream, arrays_[1], arrays_[2], x.dev,
               hp, partial)
        launch(normalise, *_config(size), stream, x.dev[:size], partial, eps, clamp)
        for _ in range(steps):
            if wide:
                product(x, x, a_, n, n, m, False, True)      # A = X X^T
            else:
                product(x, x, a_, m, m, n, True, False)      # A = X^T X
            product(a_, a_, b_, k, k, k, False, False)       # B = A A
            launch(polynomial, *small, stream, b_.dev, a_.dev, k, a, b, c)
            if wide:
                product(b_, x, y, n, m, n, False, False)     # Y = B X
            else:
                product(x, b_, y, n, m, m, False, False)     # Y = X B
            x, y = y, x
        launch(apply, *_config(size), stream, arrays_[0], x.dev, hp, arrays_[3])
