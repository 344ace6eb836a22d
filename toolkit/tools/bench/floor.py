"""``mxopt bench``'s CPU floor: a parallel Numba kernel that reads and writes the same arrays as
the optimizer's step (grad read; weight and every state slot read and written; the float16
weight written from the float32 master; the host buffers a step touches; a first pass's reads),
with trivial arithmetic, and passes of their own for the rest of its traffic (a scratch array
written, then read: Adafactor's direction, Muon's matrix; a side state read and written:
Adafactor's statistics), so that it moves every byte of ``Traffic.total``. Serial below the
toolkit's ``PARALLEL_THRESHOLD``, as the toolkit.
The CUDA floor is a device-to-device copy of the same bytes (:func:`cuda_floor`).
"""
from __future__ import annotations

import types as pytypes

import numba
import numpy as np
from numba import prange

from .settings import Traffic

__all__ = ["floor_kernel", "cpu_floor", "cuda_floor", "adam_floor", "ADAM_TRAFFIC"]


# ``g`` is the float32 grad, or a float16 grad viewed as uint16 (converted, not decoded: only the
# bytes matter); ``o`` the float16 weight viewed as uint16, written only.
def _floor1(g, a0):
    for i in prange(a0.shape[0]):
        x = np.float32(g[i])
        a0[i] = a0[i] + x


def _floor2(g, a0, a1):
    for i in prange(a0.shape[0]):
        x = np.float32(g[i])
        a0[i] = a0[i] + x
        a1[i] = a1[i] + x


def _floor3(g, a0, a1, a2):
    for i in prange(a0.shape[0]):
        x = np.float32(g[i])
        a0[i] = a0[i] + x
        a1[i] = a1[i] + x
        a2[i] = a2[i] + x


def _floor4(g, a0, a1, a2, a3):
    for i in prange(a0.shape[0]):
        x = np.float32(g[i])
        a0[i] = a0[i] + x
        a1[i] = a1[i] + x
        a2[i] = a2[i] + x
        a3[i] = a3[i] + x


def _floor16_1(g, o, a0):
    for i in prange(a0.shape[0]):
        h = g[i]
        x = np.float32(h)
        a0[i] = a0[i] + x
        o[i] = h


def _floor16_2(g, o, a0, a1):
    for i in prange(a0.shape[0]):
        h = g[i]
        x = np.float32(h)
        a0[i] = a0[i] + x
        a1[i] = a1[i] + x
        o[i] = h


def _floor16_3(g, o, a0, a1, a2):
    for i in prange(a0.shape[0]):
        h = g[i]
        x = np.float32(h)
        a0[i] = a0[i] + x
        a1[i] = a1[i] + x
        a2[i] = a2[i] + x
        o[i] = h


def _floor16_4(g, o, a0, a1, a2, a3):
    for i in prange(a0.shape[0]):
        h = g[i]
        x = np.float32(h)
        a0[i] = a0[i] + x
        a1[i] = a1[i] + x
        a2[i] = a2[i] + x
        a3[i] = a3[i] + x
        o[i] = h


def _floor_read1(a, g):
    """A first pass (LARS's norms): weight and grad read (fastmath: a vectorised sum)."""
    s = np.float32(0)
    for i in prange(a.shape[0]):
        s += a[i] + np.float32(g[i])
    return s


def _floor_read2(a, g, c):
    """A first pass (LBSGD's 'lars' norms): weight, grad and accumulator read."""
    s = np.float32(0)
    for i in prange(a.shape[0]):
        s += a[i] + np.float32(g[i]) + c[i]
    return s


def _floor_read3(a, g, c, d):
    """A first pass (LAMB's direction): weight, grad and both moments read."""
    s = np.float32(0)
    for i in prange(a.shape[0]):
        s += a[i] + np.float32(g[i]) + c[i] + d[i]
    return s


def _floor_fill(s):
    """A scratch array written, not read (the direction a first pass writes)."""
    for i in prange(s.shape[0]):
        s[i] = 0


def _floor_read0(s):
    """A scratch array read (fastmath: a vectorised sum)."""
    t = np.float32(0)
    for i in prange(s.shape[0]):
        t += np.float32(s[i])
    return t


def _floor_side(a):
    """A side state read and written (Adafactor's row and column statistics)."""
    for i in prange(a.shape[0]):
        a[i] = a[i] + np.float32(1)


_FLOOR_SOURCES = {(1, False): _floor1, (2, False): _floor2, (3, False): _floor3,
                  (4, False): _floor4, (1, True): _floor16_1, (2, True): _floor16_2,
                  (3, True): _floor16_3, (4, True): _floor16_4, ("read", 1): _floor_read1,
                  ("read", 2): _floor_read2, ("read", 3): _floor_read3,
                  ("read", 0): _floor_read0, ("fill",): _floor_fill, ("side",): _floor_side}
_floor_kernels: dict = {}


def floor_kernel(key, parallel):
    """The compiled floor ``key`` (rw count and float16 flag, or "read"); the serial variant is a
    copy under another name, so that numba's on-disk cache keeps the two apart."""
    k = (key, bool(parallel))
    if k not in _floor_kernels:
        fn = _FLOOR_SOURCES[key]
        if not parallel:
            fn = pytypes.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial",
                                      fn.__defaults__, fn.__closure__)
            fn.__qualname__ = fn.__name__
        _floor_kernels[k] = numba.njit(parallel=bool(parallel), error_model="numpy",
                                       fastmath=(key[0] == "read"), cache=True, nogil=True)(fn)
    return _floor_kernels[k]


def cpu_floor(n, tr, half, g):
    """The CPU floor's step for ``n`` elements of a setting of traffic ``tr`` (its own arrays;
    ``g`` the shared grad): its first pass, its scratch array written and read, its main
    kernel, its side state read and written, in that order."""
    from ...backends.jit import PARALLEL_THRESHOLD
    if tr.rw > 4:
        raise ValueError(f"no floor kernel for {tr.rw} read-write arrays")
    if tr.first_reads > 3:
        raise ValueError(f"no floor kernel for a first pass reading {tr.first_reads} arrays "
                         "besides the gradient")
    parallel = n >= PARALLEL_THRESHOLD
    arrays = [np.zeros(n, np.float32) for _ in range(tr.rw)]
    gv = g.view(np.uint16) if half else g
    kernel = floor_kernel((tr.rw, half), parallel)
    if half:
        o = np.zeros(n, np.uint16)
        args = (gv, o, *arrays)
    else:
        args = (gv, *arrays)
    passes = []
    if tr.norm_pass:
        passes.append((floor_kernel(("read", tr.first_reads), parallel),
                       (arrays[0], gv) + tuple(arrays[1:tr.first_reads])))
    if tr.scratch:
        s = np.zeros(n, np.float32)  # (float32 whatever the grad: Adafactor's u, Muon's X)
        passes.append((floor_kernel(("fill",), parallel), (s,)))
        passes += [(floor_kernel(("read", 0), parallel), (s,))] * (tr.scratch - 1)
    passes.append((kernel, args))
    if tr.side:
        side = np.zeros(tr.side, np.float32)
        passes.append((floor_kernel(("side",), tr.side >= PARALLEL_THRESHOLD), (side,)))
    if len(passes) == 1:
        return lambda: kernel(*args)

    def step():
        for fn, a in passes:
            fn(*a)
    return step


def cuda_floor(nbytes):
    """The CUDA floor's step for a step that moves ``nbytes`` bytes: a device-to-device copy of
    half of them (a copy reads and writes each byte)."""
    from numba import cuda
    half = max(1, nbytes // 2)
    src = cuda.device_array(half, np.uint8)
    dst = cuda.device_array(half, np.uint8)
    return lambda: dst.copy_to_device(src)


#: Adam's float32 step, per element: the grad read; weight, mean and variance read and written
ADAM_TRAFFIC = Traffic(3, 0, 28)


def adam_floor(device, n, rng):
    """The floor of float32 Adam's traffic (:data:`ADAM_TRAFFIC`) over ``n`` elements on
    ``device``, as the whole-model cases compare with; ``rng`` draws the CPU floor's gradient."""
    if device == "cuda":
        return cuda_floor(ADAM_TRAFFIC.bytes * n)
    return cpu_floor(n, ADAM_TRAFFIC, False, rng.standard_normal(n, dtype=np.float32))

