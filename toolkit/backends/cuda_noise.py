"""CUDA noise rules (SGLD): ``rule(w, g, z, hp, aux) -> w`` with ``z`` the element's normal
draw from :mod:`toolkit.backends.noise`, over one tensor (``run_noise``) or over a Trainer's
flat buffers (``run_noise_segmented``, its tables sent through ``cuda_segmented.TableUpload``).

This module imports numba-cuda; :mod:`toolkit.backends.cuda` re-exports its entry points.
"""
from __future__ import annotations

import numpy as np
from numba import cuda, types

from .arrays import ArrayDesc
from .cuda_device import (COMPILE_OPTIONS, NUMBA_TYPES, SIMULATOR, THREADS, block_cap,
                          compute_dtype, flat, launch, launch_config, row_tuple)
from .cuda_elementwise import device_rule
from .jit import KernelCache

_KERNELS = KernelCache()  # the noise kernels of this process


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
    kernel = _KERNELS.get(key)
    if kernel is not None:
        return kernel

    def build():
        rule = device_rule(factory, compute)
        single, segmented = _noise_sources(rule, compute.type, bool(mirror), n_hyper, n_aux)
        if kind == "single":
            sig = types.void(NUMBA_TYPES[w][::1], NUMBA_TYPES[g][::1],
                             types.UniTuple(NUMBA_TYPES[compute], n_hyper), types.uint64,
                             types.UniTuple(types.float64, n_aux), NUMBA_TYPES[m][::1])
            src = single
        else:
            sig = types.void(NUMBA_TYPES[w][::1], NUMBA_TYPES[g][::1],
                             NUMBA_TYPES[compute][:, ::1], types.uint64[::1],
                             types.float64[:, ::1], types.int64[::1], types.int64[:, ::1],
                             NUMBA_TYPES[m][::1])
            src = segmented
        return cuda.jit(sig, **COMPILE_OPTIONS)(src)
    return _KERNELS.cached(key, build)


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
