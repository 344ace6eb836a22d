"""The Numba CPU backend: one compile policy, and loops built around per-element update rules.

An optimizer supplies a *rule factory*: ``factory(ftype) -> rule``, where ``ftype`` is the numpy
scalar type of the arithmetic (``np.float32`` or ``np.float64``) and ``rule`` is a plain Python
function of scalars using ``math`` only::

    rule(w, g, s0, ..., s{k-1}, hp) -> (w_new, s0_new, ..., s{k-1}_new)

``hp`` is a tuple of per-step hyperparameters that the host computed in float64 and cast to
``ftype`` once, so float32 arithmetic stays float32 (a Python float literal inside the rule would
promote the loop to float64: constants the rule needs are made by the factory as ``ftype(1)``).

The same rule source is compiled here with ``numba.njit(inline="always")`` into a loop over the
flattened arrays: a serial loop below :data:`PARALLEL_THRESHOLD` elements and a ``prange`` loop
above it. The compile policy and the kernel cache are :mod:`toolkit.backends.jit`'s (explicit
signatures, ``error_model="numpy"``, no fastmath, on-disk cache); the chunking and the reduction
order of the segmented loops and the float64 sums are :mod:`toolkit.backends.order`'s, shared
with the CUDA backend. Kernels are compiled lazily, once per (rule, dtype, serial/parallel).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic, register_jitable
from numba.np.unsafe.ndarray import to_fixed_tuple

from . import rows as row_kernels
from . import jit
from .jit import (KERNELS, NUMBA_TYPES, by_value, cached, call_readonly, compile_kernel,
                  inlined)
from .order import CHUNK, DIRECTION_CHUNK, DIRECTION_LANES, sum_partials

__all__ = ["elementwise_kernel", "run_elementwise", "lars_norms", "run_norms", "direction_norms",
           "run_direction", "Launcher", "LAUNCHER", "RowsLauncher", "rows_kernel"]


def _loop(rule, n_state, n_hyper):
    """The loop of a rule with ``n_state`` state arrays (``prange`` is ``range`` when serial).
    The hyperparameters arrive as a small array (cheaper to pass than a tuple of numpy scalars)
    and become a tuple once, so the loop keeps them in registers."""
    if n_state == 0:
        def loop(w, g, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                w[i] = rule(w[i], g[i], hp)
    elif n_state == 1:
        def loop(w, g, s0, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                w[i], s0[i] = rule(w[i], g[i], s0[i], hp)
    elif n_state == 2:
        def loop(w, g, s0, s1, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                w[i], s0[i], s1[i] = rule(w[i], g[i], s0[i], s1[i], hp)
    elif n_state == 3:
        def loop(w, g, s0, s1, s2, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                w[i], s0[i], s1[i], s2[i] = rule(w[i], g[i], s0[i], s1[i], s2[i], hp)
    else:
        raise ValueError(f"rules with {n_state} state arrays are not supported (0 to 3)")
    return loop


def elementwise_kernel(factory, n_state: int, n_hyper: int, dtype, parallel: bool):
    """The compiled loop of ``factory``'s rule for ``dtype`` (cached per process)."""
    dtype = np.dtype(dtype)
    key = (factory, n_state, n_hyper, dtype, bool(parallel))

    def build():
        nb = NUMBA_TYPES[dtype]
        arr = nb[::1]
        sig = types.void(arr, arr, *([arr] * n_state), arr)
        rule = inlined(factory(dtype.type))
        kernel = compile_kernel(sig, parallel)(
            _loop(rule, n_state, n_hyper))
        return kernel
    return cached(key, build)


def run_elementwise(factory, weight, grad, states, hyper):
    """Run ``factory``'s rule over flat contiguous arrays of one dtype, in place.

    ``weight``, ``grad`` and every array of ``states`` are 1-D C-contiguous views of the same
    length and dtype; ``hyper`` is a sequence of Python floats (each rounded to the dtype here,
    once: ``numpy.array(hyper, dtype)`` rounds as ``dtype.type(h)`` does).
    """
    dtype = weight.dtype
    hpa = np.array(hyper, dtype)
    parallel = weight.shape[0] >= jit.PARALLEL_THRESHOLD
    # elementwise_kernel's own key, looked up first: a compiled kernel without the call
    kernel = KERNELS.get((factory, len(states), hpa.shape[0], dtype, parallel))
    if kernel is None:
        kernel = elementwise_kernel(factory, len(states), hpa.shape[0], dtype, parallel)
    try:
        kernel(weight, grad, *states, hpa)
    except TypeError:
        call_readonly(kernel, weight, grad, *states, hpa)


def _rows_loop(rule, n_state, n_hyper):
    """The loop of a rule over the rows of a lazy row-sparse step: gradient row ``k`` (``g`` is
    ``(nnz, ncols)`` flattened) applies to row ``rows[k]`` of the weight and the states (each
    ``(n_rows, ncols)`` flattened, C order); other rows are not touched. Rows run in parallel
    (``prange``), the columns of a row as a vectorisable inner loop over slices from 0."""
    if n_state == 0:
        def loop(w, g, rows, ncols, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for k in prange(rows.shape[0]):
                a = rows[k] * ncols
                wr, gr = w[a:a + ncols], g[k * ncols:(k + 1) * ncols]
                for j in range(ncols):
                    wr[j] = rule(wr[j], gr[j], hp)
    elif n_state == 1:
        def loop(w, g, s0, rows, ncols, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for k in prange(rows.shape[0]):
                a = rows[k] * ncols
                wr, gr, x0 = w[a:a + ncols], g[k * ncols:(k + 1) * ncols], s0[a:a + ncols]
                for j in range(ncols):
                    wr[j], x0[j] = rule(wr[j], gr[j], x0[j], hp)
    elif n_state == 2:
        def loop(w, g, s0, s1, rows, ncols, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for k in prange(rows.shape[0]):
                a = rows[k] * ncols
                wr, gr = w[a:a + ncols], g[k * ncols:(k + 1) * ncols]
                x0, x1 = s0[a:a + ncols], s1[a:a + ncols]
                for j in range(ncols):
                    wr[j], x0[j], x1[j] = rule(wr[j], gr[j], x0[j], x1[j], hp)
    elif n_state == 3:
        def loop(w, g, s0, s1, s2, rows, ncols, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for k in prange(rows.shape[0]):
                a = rows[k] * ncols
                wr, gr = w[a:a + ncols], g[k * ncols:(k + 1) * ncols]
                x0, x1, x2 = s0[a:a + ncols], s1[a:a + ncols], s2[a:a + ncols]
                for j in range(ncols):
                    wr[j], x0[j], x1[j], x2[j] = rule(wr[j], gr[j], x0[j], x1[j], x2[j], hp)
    else:
        raise ValueError(f"rules with {n_state} state arrays are not supported (0 to 3)")
    return loop


def rows_kernel(factory, n_state: int, n_hyper: int, dtype, parallel: bool):
    """The compiled row loop of ``factory``'s rule for ``dtype`` (cached per process)."""
    dtype = np.dtype(dtype)
    key = ("rows", factory, n_state, n_hyper, dtype, bool(parallel))

    def build():
        arr = NUMBA_TYPES[dtype][::1]
        sig = types.void(arr, arr, *([arr] * n_state), types.int64[::1], types.int64, arr)
        return compile_kernel(sig, parallel)(_rows_loop(inlined(factory(dtype.type)), n_state,
                                                  n_hyper))
    return cached(key, build)


class Launcher:
    """Runs one optimizer step's rules on the CPU backend (numpy arrays, any memory order)."""

    backend = "cpu"

    def compute_dtype(self, a):
        return a.dtype

    @staticmethod
    def _flat(weight, grad, states):
        """1-D views of a step's arrays in the weight's memory order (the gradient copied into
        that order only if it is not in it already)."""
        if weight.ndim == 1:  # flat already (then C- and F-contiguous alike): no views needed
            g = grad if grad.flags.c_contiguous else np.ascontiguousarray(grad)
            return weight, g, tuple(states)
        flags = weight.flags
        order = "F" if (flags.f_contiguous and not flags.c_contiguous) else "C"
        gf = grad.flags
        g = grad if (gf.f_contiguous if order == "F" else gf.c_contiguous) else \
            np.asarray(grad, order=order)
        return (weight.reshape(-1, order=order), g.reshape(-1, order=order),
                tuple(s.reshape(-1, order=order) for s in states))

    def run_rule(self, factory, weight, grad, states, hyper):
        """Run a per-element rule over ``weight``, ``grad`` and ``states`` in place."""
        if weight.ndim == 1 and grad.flags.c_contiguous:  # flat already: _flat's own shortcut
            run_elementwise(factory, weight, grad, tuple(states), hyper)
            return
        run_elementwise(factory, *self._flat(weight, grad, states), hyper)

    @staticmethod
    def run_noise_rule(factory, weight, grad, hyper, key, aux):
        """A noise rule over ``weight`` (C order: element ``i`` draws ``normal(key, i)``)."""
        run_noise(factory, weight.reshape(-1), np.ascontiguousarray(grad).reshape(-1), hyper,
                  key, aux)

    @staticmethod
    def run_rows(factory, weight, grad, history, rows, hyper):
        """A row rule (:mod:`toolkit.backends.rows`) in place: gradient row ``k`` updates weight
        and history row ``rows[k]`` (row ``k`` when ``rows`` is None); a gradient of another
        dtype (float16 for a float32 master) is converted first."""
        g = grad if grad.dtype == weight.dtype else grad.astype(weight.dtype)
        row_kernels.run_cpu(factory, weight, g, history, rows, hyper)

    @staticmethod
    def zeros_like(a, dtype=None):
        return np.zeros_like(a, dtype=dtype)

    @staticmethod
    def lars_norms(weight, grad, cum, batch_scale):
        return lars_norms(weight, grad, cum, batch_scale)

    def direction_norms(self, first, weight, grad, states):
        """Run the first pass of a two-pass step (``rules.DirectionPass``) over one tensor:
        ``(sum w^2, sum u^2)``; nothing is written."""
        w, g, st = self._flat(weight, grad, states)
        return direction_norms(first.direction, w, g, st, first.hyper)


#: The launcher of every CPU step (it holds nothing per step).
LAUNCHER = Launcher()


class RowsLauncher(Launcher):
    """The CPU launcher of a lazy row-sparse step: a rule's ``grad`` is the gradient's values
    (one row per index of ``rows``) and only those rows of the weight and the states are read
    and written, in place. For C-contiguous float32/float64 weights (the caller checks)."""

    def __init__(self, rows):
        self.rows = np.ascontiguousarray(rows, np.int64)

    def run_rule(self, factory, weight, grad, states, hyper):
        n_rows = weight.shape[0]
        ncols = weight.size // n_rows if n_rows else 0
        if self.rows.shape[0] == 0 or ncols == 0:
            return
        dtype = weight.dtype
        hpa = np.array(hyper, dtype)
        parallel = self.rows.shape[0] * ncols >= jit.PARALLEL_THRESHOLD and self.rows.shape[0] > 1
        kernel = rows_kernel(factory, len(states), hpa.shape[0], dtype, parallel)
        args = (weight.reshape(-1), np.ascontiguousarray(grad).reshape(-1),
                *(s.reshape(-1) for s in states), self.rows, ncols, hpa)
        try:
            kernel(*args)
        except TypeError:
            call_readonly(kernel, *args)

    def run_noise_rule(self, factory, weight, grad, hyper, key, aux):
        raise NotImplementedError("a noise rule has no lazy row-sparse form")

    def lars_norms(self, weight, grad, cum, batch_scale):
        raise NotImplementedError("LARS norms have no lazy row-sparse form")

    def direction_norms(self, first, weight, grad, states):
        raise NotImplementedError("a direction pass (LAMB) has no lazy row-sparse form")


# --------------------------------------------------------------------------------------------
# multi-precision in one pass: float16 gradient widened on load, float16 weight from the master
# --------------------------------------------------------------------------------------------
def _mp_loop(rule, n_state, n_hyper, widen, narrow):
    """The loop of a rule over a float32 master ``w`` with a float16 gradient and a float16
    weight copy (both as their uint16 bits): ``widen``/``narrow`` are the exact float16 ->
    float32 conversion and the round-to-nearest-even float32 -> float16 one (``half.py``),
    closed over so that a change in them changes the cache key."""
    if n_state == 0:
        def loop(w, g16, w16, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                x = rule(w[i], widen(g16[i]), hp)
                w[i] = x
                w16[i] = narrow(x)
    elif n_state == 1:
        def loop(w, g16, s0, w16, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                x, s0[i] = rule(w[i], widen(g16[i]), s0[i], hp)
                w[i] = x
                w16[i] = narrow(x)
    elif n_state == 2:
        def loop(w, g16, s0, s1, w16, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                x, s0[i], s1[i] = rule(w[i], widen(g16[i]), s0[i], s1[i], hp)
                w[i] = x
                w16[i] = narrow(x)
    elif n_state == 3:
        def loop(w, g16, s0, s1, s2, w16, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            for i in prange(w.shape[0]):
                x, s0[i], s1[i], s2[i] = rule(w[i], widen(g16[i]), s0[i], s1[i], s2[i], hp)
                w[i] = x
                w16[i] = narrow(x)
    else:
        raise ValueError(f"rules with {n_state} state arrays are not supported (0 to 3)")
    return loop


def _convert_kernel(to_half: bool, parallel: bool):
    """The compiled loop ``loop(src, out)`` converting float16 bits (uint16) to float32 exactly,
    or (``to_half``) float32 to float16 bits rounded to nearest even (cached per process)."""
    key = ("to-half" if to_half else "to-single", bool(parallel))

    def build():
        from . import half
        convert = inlined(by_value(half.single_to_half if to_half else half.half_to_single))

        def loop(src, out):
            for i in prange(src.shape[0]):
                out[i] = convert(src[i])
        f32, u16 = types.float32[::1], types.uint16[::1]
        sig = types.void(f32, u16) if to_half else types.void(u16, f32)
        return compile_kernel(sig, parallel)(loop)
    return cached(key, build)


def _same_flat_order(a, b):
    """The memory order in which ``a`` and ``b`` are both contiguous, or None."""
    if a.flags.c_contiguous and b.flags.c_contiguous:
        return "C"
    if a.flags.f_contiguous and b.flags.f_contiguous:
        return "F"
    return None


def to_single(a16, out=None):
    """``a16`` (float16) as float32, exactly (``a16.astype(np.float32)``, or written into
    ``out``), by a vectorised kernel where both arrays are contiguous in one order: numpy's
    conversion takes about 2.5 ns per element on the development machine, the kernel about
    what copying the bytes takes."""
    if out is None:
        out = np.empty(a16.shape, np.float32, order="F" if (
            a16.flags.f_contiguous and not a16.flags.c_contiguous) else "C")
    order = _same_flat_order(a16, out)
    if order is None or a16.dtype != np.float16 or out.dtype != np.float32:
        out[...] = a16
    elif a16.size:
        kernel = _convert_kernel(False, a16.size >= jit.PARALLEL_THRESHOLD)
        args = (a16.reshape(-1, order=order).view(np.uint16), out.reshape(-1, order=order))
        try:
            kernel(*args)
        except TypeError:
            call_readonly(kernel, *args)
    return out


def to_half_into(out16, a32):
    """``out16[...] = a32`` rounded to float16, to nearest with ties to even (numpy's
    ``copyto(..., casting="same_kind")``), by a vectorised kernel where both arrays are
    contiguous in one order."""
    order = _same_flat_order(a32, out16)
    if order is None or a32.dtype != np.float32 or out16.dtype != np.float16:
        np.copyto(out16, a32, casting="same_kind")
    elif a32.size:
        _convert_kernel(True, a32.size >= jit.PARALLEL_THRESHOLD)(
            a32.reshape(-1, order=order), out16.reshape(-1, order=order).view(np.uint16))


def mp_kernel(factory, n_state: int, n_hyper: int, parallel: bool):
    """The compiled multi-precision loop of ``factory``'s float32 rule (cached per process)."""
    key = ("mp", factory, n_state, n_hyper, bool(parallel))

    def build():
        from . import half
        f32, u16 = types.float32[::1], types.uint16[::1]
        sig = types.void(f32, u16, *([f32] * n_state), u16, f32)
        rule = inlined(factory(np.float32))
        kernel = compile_kernel(sig, parallel)(
            _mp_loop(rule, n_state, n_hyper, inlined(by_value(half.half_to_single)),
                     inlined(by_value(half.single_to_half))))
        return kernel
    return cached(key, build)


class MirrorLauncher(Launcher):
    """The CPU launcher of a multi-precision step (float16 weight, float32 master): the rule
    that updates the master reads the float16 gradient, widening each element exactly, and
    writes the float16 weight, rounded to nearest even from the new master, in the same pass.
    The first passes (LARS norms, LAMB's direction) widen the float16 gradient on load too.
    Anything else (an accumulator update, a rule over another array) runs on a float32 copy of
    the gradient, and the caller rounds the master into the weight afterwards unless
    :attr:`mirrored` says the kernel did."""

    def __init__(self, master, weight16):
        self.master, self.weight16 = master, weight16
        self.mirrored = False
        self._g32 = None

    def _widened(self, grad):
        if grad.dtype != np.float16:
            return grad
        if self._g32 is None or self._g32[0] is not grad:
            self._g32 = (grad, to_single(grad))
        return self._g32[1]

    def run_rule(self, factory, weight, grad, states, hyper):
        """The rule over the master with the float16 weight written in the same pass (or, for
        another array, on the widened gradient)."""
        if weight is not self.master or grad.dtype != np.float16:
            return super().run_rule(factory, weight, self._widened(grad), states, hyper)
        w, g, states = self._flat(weight, grad, states)
        # the float16 weight has the master's shape and memory order
        w16 = self._flat(self.weight16, self.weight16, ())[0]
        hpa = np.array(hyper, np.float32)
        kernel = mp_kernel(factory, len(states), hpa.shape[0],
                           w.shape[0] >= jit.PARALLEL_THRESHOLD)
        try:
            kernel(w, g.view(np.uint16), *states, w16.view(np.uint16), hpa)
        except TypeError:
            call_readonly(kernel, w, g.view(np.uint16), *states, w16.view(np.uint16), hpa)
        self.mirrored = True

    def run_rows(self, factory, weight, grad, history, rows, hyper):
        """A row rule over the master with the float16 gradient widened on load and the
        float16 weight written in the same pass (else on the widened gradient, and the caller
        rounds the weight after)."""
        w16 = self.weight16
        same_order = (weight.flags.c_contiguous and w16.flags.c_contiguous) or \
            (weight.flags.f_contiguous and w16.flags.f_contiguous)
        if weight is not self.master or grad.dtype != np.float16 or not same_order:
            return super().run_rows(factory, weight, self._widened(grad), history, rows, hyper)
        row_kernels.run_cpu(factory, weight, grad, history, rows, hyper, mirror=w16)
        self.mirrored = True

    def run_noise_rule(self, factory, weight, grad, hyper, key, aux):
        """A noise rule over the master with the float16 weight written in the same pass and
        the float16 gradient widened on load (else on the widened gradient, and the caller
        rounds the weight after)."""
        w16 = self.weight16
        if (weight is not self.master or grad.dtype != np.float16
                or not (weight.flags.c_contiguous and w16.flags.c_contiguous)):
            return super().run_noise_rule(factory, weight, self._widened(grad), hyper, key, aux)
        run_noise_mp(factory, weight.reshape(-1), np.ascontiguousarray(grad).reshape(-1),
                     w16.reshape(-1), hyper, key, aux)
        self.mirrored = True

    def lars_norms(self, weight, grad, cum, batch_scale):
        """LARS norms of the master and the float16 gradient (widened on load, no copy)."""
        return lars_norms(weight, grad, cum, batch_scale)


# --------------------------------------------------------------------------------------------
# segmented kernels: many tensors in one call (the Trainer's flat buffers)
# --------------------------------------------------------------------------------------------
def _segmented_loop(rule, n_state, n_hyper):
    """The loop of a rule over chunks; segment ``s`` reads its hyperparameters from row ``s`` of
    ``table`` (column 0: 1 to update the segment, 0 to skip it; the rest: the rule's ``hp``),
    made a tuple once per chunk so the inner loop keeps them in registers. The inner loop runs
    over slices from 0, so its index is provably non-negative and it vectorises like the flat
    loop (an index loaded from memory would keep numba's negative-index wraparound in it)."""
    if n_state == 0:
        def loop(w, g, table, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    a, b = chunks[c, 0], chunks[c, 1]
                    wc, gc = w[a:b], g[a:b]
                    for i in range(wc.shape[0]):
                        wc[i] = rule(wc[i], gc[i], hp)
    elif n_state == 1:
        def loop(w, g, s0, table, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    a, b = chunks[c, 0], chunks[c, 1]
                    wc, gc, x0 = w[a:b], g[a:b], s0[a:b]
                    for i in range(wc.shape[0]):
                        wc[i], x0[i] = rule(wc[i], gc[i], x0[i], hp)
    elif n_state == 2:
        def loop(w, g, s0, s1, table, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    a, b = chunks[c, 0], chunks[c, 1]
                    wc, gc, x0, x1 = w[a:b], g[a:b], s0[a:b], s1[a:b]
                    for i in range(wc.shape[0]):
                        wc[i], x0[i], x1[i] = rule(wc[i], gc[i], x0[i], x1[i], hp)
    elif n_state == 3:
        def loop(w, g, s0, s1, s2, table, chunks):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    a, b = chunks[c, 0], chunks[c, 1]
                    wc, gc, x0, x1, x2 = w[a:b], g[a:b], s0[a:b], s1[a:b], s2[a:b]
                    for i in range(wc.shape[0]):
                        wc[i], x0[i], x1[i], x2[i] = rule(wc[i], gc[i], x0[i], x1[i], x2[i], hp)
    else:
        raise ValueError(f"rules with {n_state} state arrays are not supported (0 to 3)")
    return loop


def segmented_kernel(factory, n_state: int, n_hyper: int, dtype, parallel: bool):
    """The compiled segmented loop of ``factory``'s rule for ``dtype`` (cached per process)."""
    dtype = np.dtype(dtype)
    key = ("segmented", factory, n_state, n_hyper, dtype, bool(parallel))

    def build():
        nb = NUMBA_TYPES[dtype]
        arr = nb[::1]
        sig = types.void(arr, arr, *([arr] * n_state), nb[:, ::1], types.int64[:, ::1])
        rule = inlined(factory(dtype.type))
        kernel = compile_kernel(sig, parallel)(
            _segmented_loop(rule, n_state, n_hyper))
        return kernel
    return cached(key, build)


def run_segmented(factory, weight, grad, states, table, chunks):
    """One call of ``factory``'s rule over flat buffers holding many tensors.

    ``weight``, ``grad``, ``states``: 1-D C-contiguous arrays of one dtype; ``table``: the
    per-segment ``(active, *hp)`` rows in that dtype; ``chunks``: :func:`toolkit.backends.order.chunk_table` rows.
    """
    parallel = weight.shape[0] >= jit.PARALLEL_THRESHOLD and chunks.shape[0] > 1
    kernel = segmented_kernel(factory, len(states), table.shape[1] - 1, weight.dtype, parallel)
    try:
        kernel(weight, grad, *states, table, chunks)
    except TypeError:
        call_readonly(kernel, weight, grad, *states, table, chunks)


# --------------------------------------------------------------------------------------------
# noise rules (SGLD): ``rule(w, g, z, hp, aux) -> w`` with z the element's normal draw
# --------------------------------------------------------------------------------------------
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
        sig = types.void(nb[::1], nb[::1], types.UniTuple(nb, n_hyper), types.uint64,
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
        sig = types.void(nb[::1], nb[::1], nb[:, ::1], types.uint64[::1],
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
    rounded from the new master on store (both as their uint16 bits, as :func:`mp_kernel`)."""
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
        sig = types.void(f32[::1], u16, types.UniTuple(f32, n_hyper), types.uint64,
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


# --------------------------------------------------------------------------------------------
# LARS norms (LBSGD): |w|^2 and |g|^2 per tensor, float64 accumulation in index order
# --------------------------------------------------------------------------------------------
def _widen_half(builder, bits):
    """The float32 values (``<n x float>``) of float16 given as ``<n x i16>`` bits, exactly:
    :func:`toolkit.backends.half.half_to_single`'s steps on vector registers."""
    width = bits.type.count
    v4i = ir.VectorType(ir.IntType(32), width)

    def k(x):
        return ir.Constant(v4i, [ir.IntType(32)(x)] * width)
    x = builder.zext(bits, v4i)
    sign = builder.shl(builder.and_(x, k(0x8000)), k(16))
    em = builder.and_(x, k(0x7FFF))
    moved = builder.add(builder.shl(em, k(13)), k(112 << 23))
    moved = builder.add(moved, builder.select(builder.icmp_unsigned(">=", em, k(0x7C00)),
                                              k(112 << 23), k(0)))
    f4 = ir.VectorType(ir.FloatType(), width)
    unit = ir.Constant(f4, [ir.FloatType()(2.0 ** -24)] * width)
    sub = builder.bitcast(builder.fmul(builder.uitofp(em, f4), unit), v4i)
    out = builder.or_(builder.select(builder.icmp_unsigned("<", em, k(0x400)), sub, moved), sign)
    return builder.bitcast(out, f4)


#: Groups of 4 elements that :func:`_norm_lanes` loads, converts and divides at once (16
#: elements: a 512-bit register of float32), before it squares and adds them group by group.
_NORM_GROUPS = 4


@intrinsic
def _norm_lanes(typingctx, acc, w, g, cum, bs, a, n4):
    """``acc`` (8 float64) plus, for ``j`` in ``range(n4)`` in order and ``i = a + 4j + l``
    (``l`` = 0..3): ``float64(w[i])**2`` into ``acc[l]`` and ``float64(gm)**2`` into ``acc[4 +
    l]``, where ``gm = (cum[i] + g[i])/bs`` in ``w``'s dtype (``g[i]`` when ``cum`` is None);
    ``g`` of ``w``'s dtype, or uint16 (float16 bits, widened exactly, for a float32 ``w``).
    Each array's four running sums are one 4-wide float64 vector, so every sum's additions
    stay in element order and the loop runs on vector instructions: written as four scalar
    sums in numba it stays scalar (numba turns LLVM's SLP vectoriser off, and the loop
    vectoriser may not reorder float additions), 3x slower than memory."""
    fl = (types.float32, types.float64)
    if not (isinstance(acc, types.UniTuple) and acc.count == 8 and acc.dtype == types.float64
            and all(isinstance(x, types.Array) and x.ndim == 1 and x.layout == "C"
                    for x in (w, g) + (() if cum is types.none else (cum,)))
            and w.dtype in fl and (g.dtype == w.dtype or (g.dtype == types.uint16
                                                          and w.dtype == types.float32))
            and (cum is types.none or cum.dtype == w.dtype)):
        return None
    sig = acc(acc, w, g, cum, bs, a, n4)

    def codegen(context, builder, sig, args):
        accv, wv, gv, cv, bsv, av, n4v = args
        f64, i32 = ir.DoubleType(), ir.IntType(32)
        v4 = ir.VectorType(f64, 4)
        intp = context.get_value_type(types.intp)
        ftype = sig.args[1].dtype
        fty = context.get_value_type(ftype)
        start = context.cast(builder, av, sig.args[5], types.intp)

        def base(arr, aty):
            return (builder.gep(context.make_array(aty)(context, builder, arr).data, [start]),
                    context.get_value_type(aty.dtype))
        streams = [base(wv, sig.args[1]), base(gv, sig.args[2])]
        with_cum = sig.args[3] is not types.none
        if with_cum:
            streams.append(base(cv, sig.args[3]))
            b = context.cast(builder, bsv, sig.args[4], ftype)
        sums = []
        for k in range(2):
            v = ir.Constant(v4, None)
            for lane in range(4):
                v = builder.insert_element(v, builder.extract_value(accv, 4 * k + lane),
                                           i32(lane))
            sums.append(cgutils.alloca_once_value(builder, v))

        def step(first, width):
            """Elements ``first .. first + width - 1`` (``width`` a multiple of 4): loaded,
            converted and divided ``width`` at a time, squared and added 4 at a time, in
            order."""
            loads = []
            for ptr, elt in streams:
                p = builder.bitcast(builder.gep(ptr, [first]),
                                    ir.VectorType(elt, width).as_pointer())
                loads.append(builder.load(p, align=elt.get_abi_size(context.target_data)))
            x, y = loads[0], loads[1]
            if sig.args[2].dtype == types.uint16:
                y = _widen_half(builder, y)
            if with_cum:
                fw = ir.VectorType(fty, width)
                divisor = builder.insert_element(ir.Constant(fw, None), b, i32(0))
                divisor = builder.shuffle_vector(
                    divisor, ir.Constant(fw, None),
                    ir.Constant(ir.VectorType(i32, width), [i32(0)] * width))
                y = builder.fdiv(builder.fadd(loads[2], y), divisor)
            for q in range(width // 4):
                for s, v in zip(sums, (x, y)):
                    if width > 4:
                        v = builder.shuffle_vector(
                            v, v, ir.Constant(ir.VectorType(i32, 4),
                                              [i32(4 * q + lane) for lane in range(4)]))
                    if ftype != types.float64:
                        v = builder.fpext(v, v4)
                    builder.store(builder.fadd(builder.load(s), builder.fmul(v, v)), s)

        count = context.cast(builder, n4v, sig.args[6], types.intp)
        wide = 4 * _NORM_GROUPS
        with cgutils.for_range(builder, builder.sdiv(count, intp(_NORM_GROUPS)),
                               intp=intp) as loop:
            step(builder.mul(loop.index, intp(wide)), wide)
        done = builder.mul(builder.sdiv(count, intp(_NORM_GROUPS)), intp(_NORM_GROUPS))
        with cgutils.for_range(builder, builder.sub(count, done), intp=intp) as loop:
            step(builder.mul(builder.add(done, loop.index), intp(4)), 4)
        out = ir.Constant(context.get_value_type(sig.return_type), None)
        for k, s in enumerate(sums):
            v = builder.load(s)
            for lane in range(4):
                out = builder.insert_value(out, builder.extract_element(v, i32(lane)),
                                           4 * k + lane)
        return out
    return sig, codegen


@register_jitable(inline="always")
def _norm_squares4(acc, w, g, cum, bs, a, n4):
    """:func:`_norm_lanes` as a module-level function: a kernel's closure refers to it by
    name, so it pickles to the same bytes in every process (the intrinsic object itself does
    not, which would defeat the on-disk cache)."""
    return _norm_lanes(acc, w, g, cum, bs, a, n4)


def _as_is(x):
    return x


def _norms_sums(dtype, with_cum, g16):
    """``sums(w, g, cum, a, b, bs) -> (sum w^2, sum gm^2)`` over elements ``a:b`` (one chunk)
    in float64: element ``a + i`` into running sum ``i % 4`` (the last ``(b - a) % 4`` elements
    into sum 0, after the others), the sums added as ``(s0 + s1) + (s2 + s3)``; ``gm = (cum +
    g)/bs`` in the arithmetic dtype when ``with_cum`` and ``bs`` is not 0, else ``g``; ``g``
    float16 (as uint16 bits, widened exactly) when ``g16``. :func:`_norm_lanes` does all but
    the last elements."""
    from .half import half_to_single
    f = dtype.type
    widen = inlined(by_value(half_to_single) if g16 else by_value(_as_is))

    def sums(w, g, cum, a, b, bs):
        m = b - a
        z = 0.0
        acc = (z, z, z, z, z, z, z, z)
        use_cum = with_cum and bs != 0  # 0: a member that takes the norms of its gradient
        if use_cum:
            acc = _norm_squares4(acc, w, g, cum, bs, a, m // 4)
        else:
            acc = _norm_squares4(acc, w, g, None, bs, a, m // 4)
        w0, w1, w2, w3, g0, g1, g2, g3 = acc
        for i in range(a + m // 4 * 4, b):  # the last 0 to 3 elements
            x = np.float64(w[i])
            w0 += x * x
            y = f(widen(g[i]))
            if use_cum:
                y = (cum[i] + y) / bs
            v = np.float64(y)
            g0 += v * v
        return (w0 + w1) + (w2 + w3), (g0 + g1) + (g2 + g3)
    return inlined(sums)


def _norms_types(dtype, g16):
    nb = NUMBA_TYPES[dtype]
    return nb[::1], (types.uint16[::1] if g16 else nb[::1])


def norms_kernel(dtype, with_cum, parallel, g16=False):
    """``loop(w, g, cum, table, chunks, partial)``: for each chunk ``c`` (rows of
    :func:`toolkit.backends.order.chunk_table`: ``start, end, segment``) of a segment ``s`` with ``table[s, 0]`` set,
    ``partial[c] = (sum w^2, sum gm^2)`` over its elements, accumulated in float64 in four
    running sums (element ``i`` of the chunk into sum ``i % 4``, the tail into sum 0) added as
    ``(s0 + s1) + (s2 + s3)`` (:func:`_norms_sums`),
    where ``gm = (cum + g)/table[s, 1]`` in the arithmetic dtype when ``with_cum`` (and
    ``table[s, 1]`` is not 0), else ``g`` (``g16``: a float16 gradient as its uint16 bits,
    widened exactly).
    The chunks run in parallel; :func:`run_norms` then adds each segment's partial sums in chunk
    order. The order of every addition is fixed by the chunk table alone, and a single tensor is
    one segment with the same chunks, so a Trainer's norms equal the per-tensor ones
    (:func:`lars_norms`) bit for bit."""
    dtype = np.dtype(dtype)
    key = ("norms", dtype, bool(with_cum), bool(parallel), bool(g16))

    def build():
        f = dtype.type
        sums = _norms_sums(dtype, bool(with_cum), bool(g16))

        def loop(w, g, cum, table, chunks, partial):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    partial[c, 0], partial[c, 1] = sums(w, g, cum, chunks[c, 0], chunks[c, 1],
                                                        f(table[s, 1]))
        arr, garr = _norms_types(dtype, g16)
        sig = types.void(arr, garr, arr, types.float64[:, ::1], types.int64[:, ::1],
                         types.float64[:, ::1])
        return compile_kernel(sig, parallel)(loop)
    return cached(key, build)


def tensor_norms_kernel(dtype, with_cum, parallel, g16=False):
    """``loop(w, g, cum, bs) -> (sum w^2, sum gm^2)`` of one tensor in one call: the sums of
    :func:`norms_kernel` over the chunks of :func:`toolkit.backends.order.single_chunks` (in parallel), added in chunk
    order from 0.0 as :func:`run_norms` adds them, so the same numbers, bit for bit, without
    the tables and the second call."""
    dtype = np.dtype(dtype)
    key = ("tensor-norms", dtype, bool(with_cum), bool(parallel), bool(g16))

    def build():
        f = dtype.type
        sums = _norms_sums(dtype, bool(with_cum), bool(g16))
        chunk = CHUNK

        def loop(w, g, cum, bs):
            n = w.shape[0]
            nc = (n + chunk - 1) // chunk
            partial = np.empty((nc, 2))
            b = f(bs)
            for c in prange(nc):
                a = c * chunk
                partial[c, 0], partial[c, 1] = sums(w, g, cum, a, min(a + chunk, n), b)
            return _chunk_totals(partial)
        arr, garr = _norms_types(dtype, g16)
        sig = types.UniTuple(types.float64, 2)(arr, garr, arr, types.float64)
        return compile_kernel(sig, parallel)(loop)
    return cached(key, build)


@register_jitable(inline="always")
def _chunk_totals(partial):
    """``(sum of partial[:, 0], sum of partial[:, 1])`` added in chunk order from 0.0: one
    tensor's chunks, as :func:`toolkit.backends.order.sum_partials` adds a segment's."""
    s0 = 0.0
    s1 = 0.0
    for c in range(partial.shape[0]):
        s0 += partial[c, 0]
        s1 += partial[c, 1]
    return s0, s1



def lars_norms(weight, grad, cum, batch_scale):
    """``(sum w^2, sum gm^2)`` of one tensor (``gm = (cum + grad)/batch_scale`` when ``cum`` is
    given, else ``grad``; ``grad`` may be float16 for a float32 weight), float64, in index
    order (:func:`tensor_norms_kernel`: one call, parallel from :data:`PARALLEL_THRESHOLD`)."""
    if weight.ndim == 1 and weight.flags.c_contiguous and grad.flags.c_contiguous:
        w, g, c = weight, grad, cum  # flat already: no views needed
    else:
        w = weight.reshape(-1, order="A")
        order = "F" if (weight.flags.f_contiguous and not weight.flags.c_contiguous) else "C"
        g = np.asarray(grad, order=order).reshape(-1, order=order)
        c = None if cum is None else cum.reshape(-1, order="A")
    g16 = g.dtype.char == "e" and w.dtype.char != "e"
    key = (w.dtype.char, c is not None, w.shape[0] >= jit.PARALLEL_THRESHOLD, g16)
    kernel = _tensor_norms.get(key)  # a cheap key: this runs on every LARS step
    if kernel is None:
        kernel = _tensor_norms[key] = tensor_norms_kernel(w.dtype, *key[1:])
    args = (w, g.view(np.uint16) if g16 else g, w if c is None else c, float(batch_scale))
    try:
        return kernel(*args)
    except TypeError:
        return call_readonly(kernel, *args)


_tensor_norms: dict = {}


def run_norms(w, g, cum, table, chunks, out, with_cum):
    """The segmented norms of flat buffers into ``out`` (see :func:`norms_kernel`); ``chunks``
    is the buffers' :func:`toolkit.backends.order.chunk_table`; ``g`` may be float16 for float32 ``w``."""
    partial = np.zeros((chunks.shape[0], 2))
    g16 = g.dtype == np.float16 and w.dtype != np.float16
    kernel = norms_kernel(w.dtype, with_cum,
                          w.shape[0] >= jit.PARALLEL_THRESHOLD and chunks.shape[0] > 1, g16)
    args = (w, g.view(np.uint16) if g16 else g, cum, table, chunks, partial)
    try:
        kernel(*args)
    except TypeError:
        call_readonly(kernel, *args)
    sum_partials(chunks, partial, out)


# --------------------------------------------------------------------------------------------
# two-pass steps (LAMB): pass 1 reduces |w|^2 and |u|^2 per tensor, writing nothing
# --------------------------------------------------------------------------------------------
def _direction_sums(direction, dtype, g16):
    """``sums(w, g, s0, s1, a, b, hp) -> (sum w^2, sum u^2)`` over elements ``a:b`` (one chunk)
    in float64, ``u`` from the ``direction`` rule: element ``j`` of the chunk adds into running
    sum ``j % DIRECTION_LANES`` (in element order), and the sums are then added pairwise,
    ``sum[l] += sum[l + h]`` for ``h = LANES/2, LANES/4, ..., 1``. ``g16``: ``g`` holds a
    float16 gradient as its uint16 bits, widened exactly on load (a float32 master's step)."""
    from .half import half_to_single
    lanes = DIRECTION_LANES
    toward = inlined(direction(dtype.type))
    widen = inlined(by_value(half_to_single) if g16 else by_value(_as_is))

    def sums(w, g, s0, s1, a, b, hp):
        wc, gc, x0, x1 = w[a:b], g[a:b], s0[a:b], s1[a:b]
        sw = np.zeros(lanes)
        su = np.zeros(lanes)
        m = wc.shape[0]
        for j in range(0, m, lanes):
            for lane in range(min(lanes, m - j)):
                i = j + lane
                wi = wc[i]
                u, _, _ = toward(wi, widen(gc[i]), x0[i], x1[i], hp)
                vw, vu = np.float64(wi), np.float64(u)
                sw[lane] += vw * vw
                su[lane] += vu * vu
        h = lanes // 2
        while h > 0:
            for lane in range(h):
                sw[lane] += sw[lane + h]
                su[lane] += su[lane + h]
            h //= 2
        return sw[0], su[0]
    return inlined(sums)


def direction_kernel(direction, n_hyper: int, dtype, parallel: bool):
    """``loop(w, g, s0, s1, table, chunks, partial)``: for each chunk ``c`` (rows
    ``(start, end, segment)`` of :func:`toolkit.backends.order.chunk_table` with :data:`DIRECTION_CHUNK`) of a segment
    ``s`` with ``table[s, 0]`` set, ``partial[c] = (sum w^2, sum u^2)`` in float64, in the
    order of :func:`_direction_sums`. :func:`run_direction` adds a segment's partials in chunk
    order. No array but ``partial`` is written."""
    dtype = np.dtype(dtype)
    key = ("direction", direction, n_hyper, dtype, bool(parallel))

    def build():
        sums = _direction_sums(direction, dtype, False)

        def loop(w, g, s0, s1, table, chunks, partial):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    partial[c, 0], partial[c, 1] = sums(w, g, s0, s1, chunks[c, 0],
                                                        chunks[c, 1], hp)
        nb = NUMBA_TYPES[dtype]
        arr = nb[::1]
        sig = types.void(arr, arr, arr, arr, nb[:, ::1], types.int64[:, ::1],
                         types.float64[:, ::1])
        return compile_kernel(sig, parallel)(loop)
    return cached(key, build)


def tensor_direction_kernel(direction, n_hyper: int, dtype, parallel: bool, g16=False):
    """``loop(w, g, s0, s1, hpa) -> (sum w^2, sum u^2)`` of one tensor in one call: the sums of
    :func:`direction_kernel` over chunks of :data:`DIRECTION_CHUNK` elements (in parallel),
    added in chunk order from 0.0 as :func:`run_direction` adds them, so the same numbers, bit
    for bit, without the tables and the second call. ``g16``: a float16 gradient (as uint16
    bits) of a float32 master, widened on load instead of copied."""
    dtype = np.dtype(dtype)
    key = ("tensor-direction", direction, n_hyper, dtype, bool(parallel), bool(g16))

    def build():
        sums = _direction_sums(direction, dtype, bool(g16))
        chunk = DIRECTION_CHUNK

        def loop(w, g, s0, s1, hpa):
            hp = to_fixed_tuple(hpa, n_hyper)
            n = w.shape[0]
            nc = (n + chunk - 1) // chunk
            partial = np.empty((nc, 2))
            for c in prange(nc):
                a = c * chunk
                partial[c, 0], partial[c, 1] = sums(w, g, s0, s1, a, min(a + chunk, n), hp)
            return _chunk_totals(partial)
        nb = NUMBA_TYPES[dtype]
        arr = nb[::1]
        sig = types.UniTuple(types.float64, 2)(arr, types.uint16[::1] if g16 else arr, arr,
                                               arr, arr)
        return compile_kernel(sig, parallel)(loop)
    return cached(key, build)


def run_direction(direction, w, g, states, table, chunks, out):
    """Pass 1 of a two-pass step over flat buffers (:func:`direction_kernel`; ``states``: two
    arrays, read only): ``out[s] = (sum w^2, sum u^2)`` of every active segment.
    ``table``: the ``(active, *hp)`` rows in the arrays' dtype; ``chunks``: their
    :func:`toolkit.backends.order.chunk_table` with :data:`DIRECTION_CHUNK`."""
    if len(states) != 2:
        raise ValueError(f"a direction pass takes two state arrays, got {len(states)}")
    partial = np.zeros((chunks.shape[0], 2))
    parallel = w.shape[0] >= jit.PARALLEL_THRESHOLD and chunks.shape[0] > 1
    # direction_kernel's own key, looked up first: a compiled kernel without the call
    kernel = KERNELS.get(("direction", direction, table.shape[1] - 1, w.dtype, parallel))
    if kernel is None:
        kernel = direction_kernel(direction, table.shape[1] - 1, w.dtype, parallel)
    try:
        kernel(w, g, states[0], states[1], table, chunks, partial)
    except TypeError:
        call_readonly(kernel, w, g, states[0], states[1], table, chunks, partial)
    sum_partials(chunks, partial, out)


def direction_norms(direction, w, g, states, hyper):
    """Pass 1 of a two-pass step over one flat tensor (:func:`tensor_direction_kernel`; one
    call, parallel from :data:`PARALLEL_THRESHOLD`): ``(sum w^2, sum u^2)``, the numbers
    :func:`run_direction` gives for the tensor as one segment. ``g`` may be float16 for a
    float32 ``w`` (widened on load)."""
    if len(states) != 2:
        raise ValueError(f"a direction pass takes two state arrays, got {len(states)}")
    dtype = w.dtype
    hpa = np.array(hyper, dtype)
    g16 = g.dtype.char == "e" and dtype.char != "e"
    key = (direction, hpa.shape[0], dtype, w.shape[0] >= jit.PARALLEL_THRESHOLD, g16)
    kernel = _tensor_directions.get(key)  # a cheap key: this runs on every LAMB step
    if kernel is None:
        kernel = _tensor_directions[key] = tensor_direction_kernel(*key)
    args = (w, g.view(np.uint16) if g16 else g, states[0], states[1], hpa)
    try:
        return kernel(*args)
    except TypeError:
        return call_readonly(kernel, *args)


_tensor_directions: dict = {}
