"""The CPU kernels of noise rules (SGLD): ``rule(w, g, z, hp, aux) -> w`` with ``z`` the
element's normal draw (:mod:`toolkit.backends.noise`'s counter-based generator): one tensor
(:func:`run_noise`), many tensors in one call (:func:`run_noise_segmented`), and a float32
master with its float16 gradient and weight copy (:func:`run_noise_mp`).
"""
from __future__ import annotations

import numpy as np
from numba import prange, types
from numba.np.unsafe.ndarray import to_fixed_tuple

from .jit import NUMBA_TYPES, by_value, cached, call_readonly, compile_kernel, inlined, \
    read_only

__all__ = ["NOISE_PARALLEL_THRESHOLD", "noise_kernel", "noise_segmented_kernel", "run_noise",
           "run_noise_segmented", "noise_mp_kernel", "run_noise_mp"]


def _normal():
    from . import noise
    return noise.generator(inlined, "cpu")


#: A noise rule's loop is compute-bound (about 4 ns per draw and core: two SplitMix64 hashes, a
#: log, a cos, a division and a square root per element), so its parallel loop pays off from
#: fewer elements than a memory-bound rule's: on the 2-core machine from about 2**11 (2**13: 36 us
#: serial, 20 us parallel). 2**13 keeps small calls serial, as PARALLEL_THRESHOLD does for serial
#: times below about 40 us: on a busy machine a parallel region can wait a scheduler tick (8 ms).
NOISE_PARALLEL_THRESHOLD = 1 << 13


def noise_kernel(factory, n_hyper, n_aux, dtype, parallel):
    """The compiled loop of a noise rule (cached): ``loop(w, g, hp, key, aux)``, draw ``i`` of
    stream ``key`` for element ``i``."""
    dtype = np.dtype(dtype)
    key_ = ("noise", factory, n_hyper, n_aux, dtype, bool(parallel))

    def build():
        rule = inlined(factory(dtype.type))
        normal = _normal()

        def loop(w, g, hp, key, aux):
            for i in prange(w.shape[0]):
                w[i] = rule(w[i], g[i], normal(key, np.uint64(i)), hp, aux)
        nb = NUMBA_TYPES[dtype]
        sig = types.void(nb[::1], read_only(nb[::1]), types.UniTuple(nb, n_hyper),
                         types.uint64,
                         types.UniTuple(types.float64, n_aux))
        kernel = compile_kernel(sig, parallel)(loop)
        return kernel
    return cached(key_, build)


def noise_segmented_kernel(factory, n_hyper, n_aux, dtype, parallel):
    """The segmented loop of a noise rule: segment ``s`` draws from stream ``keys[s]`` with the
    element's index inside its tensor, and reads ``aux[s]``."""
    dtype = np.dtype(dtype)
    key_ = ("noise-segmented", factory, n_hyper, n_aux, dtype, bool(parallel))

    def build():
        rule = inlined(factory(dtype.type))
        normal = _normal()

        def loop(w, g, table, keys, aux, offsets, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    a = to_fixed_tuple(aux[s], n_aux)
                    first = chunks[c, 0] - offsets[s]  # index of the chunk in its tensor
                    wc, gc = w[chunks[c, 0]:chunks[c, 1]], g[chunks[c, 0]:chunks[c, 1]]
                    for i in range(wc.shape[0]):
                        z = normal(keys[s], np.uint64(first + i))
                        wc[i] = rule(wc[i], gc[i], z, hp, a)
        nb = NUMBA_TYPES[dtype]
        sig = types.void(nb[::1], read_only(nb[::1]), nb[:, ::1], types.uint64[::1],
                         types.float64[:, ::1], types.int64[::1], types.int64[:, ::1])
        kernel = compile_kernel(sig, parallel)(loop)
        return kernel
    return cached(key_, build)


def run_noise(factory, weight, grad, hyper, key, aux):
    """Run a noise rule over one flat tensor in place (element ``i`` draws ``normal(key, i)``)."""
    dtype = weight.dtype
    hp = tuple(dtype.type(h) for h in hyper)
    kernel = noise_kernel(factory, len(hp), len(aux), dtype,
                          weight.shape[0] >= NOISE_PARALLEL_THRESHOLD)
    args = (weight, grad, hp, np.uint64(key), tuple(float(a) for a in aux))
    try:
        kernel(*args)
    except TypeError:
        call_readonly(kernel, *args)


def run_noise_segmented(factory, weight, grad, table, keys, aux, offsets, chunks):
    """One call of a noise rule over flat buffers holding many tensors."""
    parallel = weight.shape[0] >= NOISE_PARALLEL_THRESHOLD and chunks.shape[0] > 1
    kernel = noise_segmented_kernel(factory, table.shape[1] - 1, aux.shape[1], weight.dtype,
                                    parallel)
    try:
        kernel(weight, grad, table, keys, aux, offsets, chunks)
    except TypeError:
        call_readonly(kernel, weight, grad, table, keys, aux, offsets, chunks)


def noise_mp_kernel(factory, n_hyper, n_aux, parallel):
    """The multi-precision loop of a noise rule (cached): ``loop(w, g16, hp, key, aux, w16)``
    over a float32 master ``w``, the float16 gradient widened on load and the float16 weight
    rounded from the new master on store (both as their uint16 bits, as
    ``addressed.addressed_mp_kernel``)."""
    key_ = ("noise-mp", factory, n_hyper, n_aux, bool(parallel))

    def build():
        from . import half
        rule = inlined(factory(np.float32))
        normal = _normal()
        widen = inlined(by_value(half.half_to_single))
        narrow = inlined(by_value(half.single_to_half))

        def loop(w, g16, hp, key, aux, w16):
            for i in prange(w.shape[0]):
                x = rule(w[i], widen(g16[i]), normal(key, np.uint64(i)), hp, aux)
                w[i] = x
                w16[i] = narrow(x)
        f32, u16 = types.float32, types.uint16[::1]
        sig = types.void(f32[::1], read_only(u16), types.UniTuple(f32, n_hyper),
                         types.uint64,
                         types.UniTuple(types.float64, n_aux), u16)
        return compile_kernel(sig, parallel)(loop)
    return cached(key_, build)


def run_noise_mp(factory, weight, grad16, weight16, hyper, key, aux):
    """A noise rule over a flat float32 master with a flat float16 gradient and weight copy (all
    C-contiguous), the weight copy written in the same pass."""
    hp = tuple(np.float32(h) for h in hyper)
    kernel = noise_mp_kernel(factory, len(hp), len(aux),
                             weight.shape[0] >= NOISE_PARALLEL_THRESHOLD)
    args = (weight, grad16.view(np.uint16), hp, np.uint64(key), tuple(float(a) for a in aux),
            weight16.view(np.uint16))
    try:
        kernel(*args)
    except TypeError:
        call_readonly(kernel, *args)
