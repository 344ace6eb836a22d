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
above it. Compile policy (docs/backends.md, "How the CPU kernels are compiled"), in one place:
explicit signatures, ``error_model="numpy"`` (the python error model blocks vectorisation), no
fastmath, on-disk cache.
Kernels are compiled lazily, once per (rule, dtype, serial/parallel).
"""
from __future__ import annotations

import threading
import types as pytypes

import numba
import numpy as np
from numba import prange, types
from numba.extending import register_jitable
from numba.np.unsafe.ndarray import to_fixed_tuple

__all__ = ["COMPILE_OPTIONS", "PARALLEL_THRESHOLD", "elementwise_kernel", "run_elementwise",
           "lars_norms", "run_norms", "direction_norms", "run_direction", "DTYPES", "Launcher",
           "LAUNCHER", "RowsLauncher", "rows_kernel"]

#: The compile options of every CPU kernel.
COMPILE_OPTIONS = dict(error_model="numpy", fastmath=False, cache=True, nogil=True,
                       boundscheck=False)

#: Below this many elements a parallel loop costs more than it saves (docs/backends.md, "How the
#: CPU kernels are compiled": the break-even measured on a 2-core machine lies between 2**15 and
#: 2**16).
PARALLEL_THRESHOLD = 1 << 15

#: Arithmetic dtypes with compiled kernels.
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

_NUMBA_TYPES = {np.dtype(np.float32): types.float32, np.dtype(np.float64): types.float64}


def _cached(key, build):
    """The kernel under ``key``, built by ``build()`` the first time (once, under the lock)."""
    kernel = _kernels.get(key)
    if kernel is None:
        with _lock:
            kernel = _kernels.get(key)
            if kernel is None:
                kernel = _kernels[key] = build()
    return kernel


def _compile(sig, parallel):
    """The decorator that compiles a kernel with :data:`COMPILE_OPTIONS`. The serial and the
    parallel variant of a loop are one Python function, and numba's on-disk cache keys a kernel
    by its code and closure but not by ``parallel``: each variant gets its own qualified name,
    hence its own cache index, so neither is ever loaded for the other."""
    def wrap(fn):
        fn.__qualname__ = f"{fn.__qualname__}.{'parallel' if parallel else 'serial'}"
        return numba.njit([sig], parallel=bool(parallel), **COMPILE_OPTIONS)(fn)
    return wrap


def _by_value(fn):
    """A copy of module-level function ``fn`` that is not the object its module exports, so
    that a kernel closing over it is cached under its code (pickled by value) rather than its
    name: a changed ``fn`` then changes the cache key instead of loading a stale kernel."""
    return pytypes.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                                fn.__closure__)


def _inlined(fn):
    """``fn`` made callable from compiled code and inlined there, as ``njit(inline="always")``
    does, but kept a plain Python function: a kernel closes over it, and numba's on-disk cache
    keys a closure by the pickled bytes of what it closes over. A plain function pickles to the
    same bytes in every process (its code and constants); a jitted dispatcher does not (it
    carries a per-process id), which made every process recompile every kernel and add files
    to the cache. The key also changes when a rule's code changes, so a stale kernel is never
    loaded."""
    return register_jitable(inline="always")(fn)
_lock = threading.Lock()
_kernels: dict = {}


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
        nb = _NUMBA_TYPES[dtype]
        arr = nb[::1]
        sig = types.void(arr, arr, *([arr] * n_state), arr)
        rule = _inlined(factory(dtype.type))
        kernel = _compile(sig, parallel)(
            _loop(rule, n_state, n_hyper))
        return kernel
    return _cached(key, build)


def run_elementwise(factory, weight, grad, states, hyper):
    """Run ``factory``'s rule over flat contiguous arrays of one dtype, in place.

    ``weight``, ``grad`` and every array of ``states`` are 1-D C-contiguous views of the same
    length and dtype; ``hyper`` is a sequence of Python floats (each rounded to the dtype here,
    once: ``numpy.array(hyper, dtype)`` rounds as ``dtype.type(h)`` does).
    """
    dtype = weight.dtype
    hpa = np.array(hyper, dtype)
    parallel = weight.shape[0] >= PARALLEL_THRESHOLD
    kernel = elementwise_kernel(factory, len(states), hpa.shape[0], dtype, parallel)
    kernel(weight, grad, *states, hpa)


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
        arr = _NUMBA_TYPES[dtype][::1]
        sig = types.void(arr, arr, *([arr] * n_state), types.int64[::1], types.int64, arr)
        return _compile(sig, parallel)(_rows_loop(_inlined(factory(dtype.type)), n_state,
                                                  n_hyper))
    return _cached(key, build)


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
        run_elementwise(factory, *self._flat(weight, grad, states), hyper)

    @staticmethod
    def run_noise_rule(factory, weight, grad, hyper, key, aux):
        """A noise rule over ``weight`` (C order: element ``i`` draws ``normal(key, i)``)."""
        run_noise(factory, weight.reshape(-1), np.ascontiguousarray(grad).reshape(-1), hyper,
                  key, aux)

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
        parallel = self.rows.shape[0] * ncols >= PARALLEL_THRESHOLD and self.rows.shape[0] > 1
        kernel = rows_kernel(factory, len(states), hpa.shape[0], dtype, parallel)
        kernel(weight.reshape(-1), np.ascontiguousarray(grad).reshape(-1),
               *(s.reshape(-1) for s in states), self.rows, ncols, hpa)

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


def mp_kernel(factory, n_state: int, n_hyper: int, parallel: bool):
    """The compiled multi-precision loop of ``factory``'s float32 rule (cached per process)."""
    key = ("mp", factory, n_state, n_hyper, bool(parallel))

    def build():
        from . import half
        f32, u16 = types.float32[::1], types.uint16[::1]
        sig = types.void(f32, u16, *([f32] * n_state), u16, f32)
        rule = _inlined(factory(np.float32))
        kernel = _compile(sig, parallel)(
            _mp_loop(rule, n_state, n_hyper, _inlined(_by_value(half.half_to_single)),
                     _inlined(_by_value(half.single_to_half))))
        return kernel
    return _cached(key, build)


class MirrorLauncher(Launcher):
    """The CPU launcher of a multi-precision step (float16 weight, float32 master): the rule
    that updates the master reads the float16 gradient, widening each element exactly, and
    writes the float16 weight, rounded to nearest even from the new master, in the same pass.
    Anything else (an accumulator update, a noise rule, LARS norms) runs on a float32 copy of
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
            self._g32 = (grad, grad.astype(np.float32))
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
                           w.shape[0] >= PARALLEL_THRESHOLD)
        kernel(w, g.view(np.uint16), *states, w16.view(np.uint16), hpa)
        self.mirrored = True

    def run_noise_rule(self, factory, weight, grad, hyper, key, aux):
        """A noise rule on the widened gradient (the caller rounds the weight after)."""
        return super().run_noise_rule(factory, weight, self._widened(grad), hyper, key, aux)

    def lars_norms(self, weight, grad, cum, batch_scale):
        """LARS norms of the master and the widened gradient."""
        return lars_norms(weight, self._widened(grad), cum, batch_scale)

    def direction_norms(self, first, weight, grad, states):
        """The first pass of a two-pass step on the master and the widened gradient."""
        return super().direction_norms(first, weight, self._widened(grad), states)


# --------------------------------------------------------------------------------------------
# segmented kernels: many tensors in one call (the Trainer's flat buffers)
# --------------------------------------------------------------------------------------------
#: Elements per chunk of a segmented loop: a chunk lies inside one segment, and the parallel loop
#: hands out chunks.
CHUNK = 1 << 14


def chunk_table(offsets, chunk=CHUNK):
    """``(n_chunks, 3)`` int64 rows ``(start, end, segment)`` covering ``[offsets[s],
    offsets[s+1])`` for every segment ``s`` in pieces of at most ``chunk`` elements."""
    rows = []
    for s in range(len(offsets) - 1):
        a, b = int(offsets[s]), int(offsets[s + 1])
        for start in range(a, b, chunk):
            rows.append((start, min(start + chunk, b), s))
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


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
        nb = _NUMBA_TYPES[dtype]
        arr = nb[::1]
        sig = types.void(arr, arr, *([arr] * n_state), nb[:, ::1], types.int64[:, ::1])
        rule = _inlined(factory(dtype.type))
        kernel = _compile(sig, parallel)(
            _segmented_loop(rule, n_state, n_hyper))
        return kernel
    return _cached(key, build)


def run_segmented(factory, weight, grad, states, table, chunks):
    """One call of ``factory``'s rule over flat buffers holding many tensors.

    ``weight``, ``grad``, ``states``: 1-D C-contiguous arrays of one dtype; ``table``: the
    per-segment ``(active, *hp)`` rows in that dtype; ``chunks``: :func:`chunk_table` rows.
    """
    parallel = weight.shape[0] >= PARALLEL_THRESHOLD and chunks.shape[0] > 1
    kernel = segmented_kernel(factory, len(states), table.shape[1] - 1, weight.dtype, parallel)
    kernel(weight, grad, *states, table, chunks)


# --------------------------------------------------------------------------------------------
# noise rules (SGLD): ``rule(w, g, z, hp, aux) -> w`` with z the element's normal draw
# --------------------------------------------------------------------------------------------
def _normal():
    from . import noise
    return noise.generator(_inlined, "cpu")


def noise_kernel(factory, n_hyper, n_aux, dtype, parallel):
    """The compiled loop of a noise rule (cached): ``loop(w, g, hp, key, aux)``, draw ``i`` of
    stream ``key`` for element ``i``."""
    dtype = np.dtype(dtype)
    key_ = ("noise", factory, n_hyper, n_aux, dtype, bool(parallel))

    def build():
        rule = _inlined(factory(dtype.type))
        normal = _normal()

        def loop(w, g, hp, key, aux):
            for i in prange(w.shape[0]):
                w[i] = rule(w[i], g[i], normal(key, np.uint64(i)), hp, aux)
        nb = _NUMBA_TYPES[dtype]
        sig = types.void(nb[::1], nb[::1], types.UniTuple(nb, n_hyper), types.uint64,
                         types.UniTuple(types.float64, n_aux))
        kernel = _compile(sig, parallel)(loop)
        return kernel
    return _cached(key_, build)


def noise_segmented_kernel(factory, n_hyper, n_aux, dtype, parallel):
    """The segmented loop of a noise rule: segment ``s`` draws from stream ``keys[s]`` with the
    element's index inside its tensor, and reads ``aux[s]``."""
    dtype = np.dtype(dtype)
    key_ = ("noise-segmented", factory, n_hyper, n_aux, dtype, bool(parallel))

    def build():
        rule = _inlined(factory(dtype.type))
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
        nb = _NUMBA_TYPES[dtype]
        sig = types.void(nb[::1], nb[::1], nb[:, ::1], types.uint64[::1],
                         types.float64[:, ::1], types.int64[::1], types.int64[:, ::1])
        kernel = _compile(sig, parallel)(loop)
        return kernel
    return _cached(key_, build)


def run_noise(factory, weight, grad, hyper, key, aux):
    """Run a noise rule over one flat tensor in place (element ``i`` draws ``normal(key, i)``)."""
    dtype = weight.dtype
    hp = tuple(dtype.type(h) for h in hyper)
    kernel = noise_kernel(factory, len(hp), len(aux), dtype,
                          weight.shape[0] >= PARALLEL_THRESHOLD)
    kernel(weight, grad, hp, np.uint64(key), tuple(float(a) for a in aux))


def run_noise_segmented(factory, weight, grad, table, keys, aux, offsets, chunks):
    """One call of a noise rule over flat buffers holding many tensors."""
    parallel = weight.shape[0] >= PARALLEL_THRESHOLD and chunks.shape[0] > 1
    kernel = noise_segmented_kernel(factory, table.shape[1] - 1, aux.shape[1], weight.dtype,
                                    parallel)
    kernel(weight, grad, table, keys, aux, offsets, chunks)


# --------------------------------------------------------------------------------------------
# LARS norms (LBSGD): |w|^2 and |g|^2 per tensor, float64 accumulation in index order
# --------------------------------------------------------------------------------------------
def norms_kernel(dtype, with_cum, parallel):
    """``loop(w, g, cum, table, chunks, partial)``: for each chunk ``c`` (rows of
    :func:`chunk_table`: ``start, end, segment``) of a segment ``s`` with ``table[s, 0]`` set,
    ``partial[c] = (sum w^2, sum gm^2)`` over its elements, accumulated in float64 in four
    running sums (element ``i`` of the chunk into sum ``i % 4``, the tail into sum 0) added as
    ``(s0 + s1) + (s2 + s3)``,
    where ``gm = (cum + g)/table[s, 1]`` in the arithmetic dtype when ``with_cum``, else ``g``.
    The chunks run in parallel; :func:`run_norms` then adds each segment's partial sums in chunk
    order. The order of every addition is fixed by the chunk table alone, and a single tensor is
    one segment with the same chunks, so a Trainer's norms equal the per-tensor ones bit for
    bit."""
    dtype = np.dtype(dtype)
    key = ("norms", dtype, bool(with_cum), bool(parallel))

    def build():
        f = dtype.type

        def loop(w, g, cum, table, chunks, partial):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    a, b = chunks[c, 0], chunks[c, 1]
                    wc, gc, cc = w[a:b], g[a:b], cum[a:b] if with_cum else cum[0:0]
                    bs = f(table[s, 1])
                    # four running sums (element i into sum i % 4), added in a fixed
                    # order at the end: independent chains instead of one long one
                    w0 = w1 = w2 = w3 = 0.0
                    g0 = g1 = g2 = g3 = 0.0
                    m = wc.shape[0]
                    for j in range(m // 4):
                        i = 4 * j
                        x0, x1 = np.float64(wc[i]), np.float64(wc[i + 1])
                        x2, x3 = np.float64(wc[i + 2]), np.float64(wc[i + 3])
                        w0 += x0 * x0
                        w1 += x1 * x1
                        w2 += x2 * x2
                        w3 += x3 * x3
                        if with_cum:
                            y0 = np.float64((cc[i] + gc[i]) / bs)
                            y1 = np.float64((cc[i + 1] + gc[i + 1]) / bs)
                            y2 = np.float64((cc[i + 2] + gc[i + 2]) / bs)
                            y3 = np.float64((cc[i + 3] + gc[i + 3]) / bs)
                        else:
                            y0, y1 = np.float64(gc[i]), np.float64(gc[i + 1])
                            y2, y3 = np.float64(gc[i + 2]), np.float64(gc[i + 3])
                        g0 += y0 * y0
                        g1 += y1 * y1
                        g2 += y2 * y2
                        g3 += y3 * y3
                    for i in range(4 * (m // 4), m):  # the last 0 to 3 elements
                        x = np.float64(wc[i])
                        w0 += x * x
                        if with_cum:
                            y = np.float64((cc[i] + gc[i]) / bs)
                        else:
                            y = np.float64(gc[i])
                        g0 += y * y
                    partial[c, 0] = (w0 + w1) + (w2 + w3)
                    partial[c, 1] = (g0 + g1) + (g2 + g3)
        nb = _NUMBA_TYPES[dtype]
        sig = types.void(nb[::1], nb[::1], nb[::1], types.float64[:, ::1],
                         types.int64[:, ::1], types.float64[:, ::1])
        kernel = _compile(sig, parallel)(loop)
        return kernel
    return _cached(key, build)


@numba.njit(types.void(types.int64[:, ::1], types.float64[:, ::1], types.float64[:, ::1]),
            **COMPILE_OPTIONS)
def _sum_partials(chunks, partial, out):
    """``out[s] = sum of partial[c]`` over segment ``s``'s chunks, in chunk order."""
    out[:, :] = 0.0
    for c in range(chunks.shape[0]):
        s = chunks[c, 2]
        out[s, 0] += partial[c, 0]
        out[s, 1] += partial[c, 1]


def single_chunks(n, chunk=CHUNK):
    """The :func:`chunk_table` of one segment of ``n`` elements (vectorised)."""
    starts = np.arange(0, max(n, 1), chunk, dtype=np.int64)
    rows = np.empty((starts.shape[0], 3), np.int64)
    rows[:, 0] = starts
    rows[:, 1] = np.minimum(starts + chunk, n)
    rows[:, 2] = 0
    return rows

def lars_norms(weight, grad, cum, batch_scale):
    """``(sum w^2, sum gm^2)`` of one tensor (``gm = (cum + grad)/batch_scale`` when ``cum`` is
    given, else ``grad``), float64, in index order."""
    w = weight.reshape(-1, order="A")
    order = "F" if (weight.flags.f_contiguous and not weight.flags.c_contiguous) else "C"
    g = np.asarray(grad, order=order).reshape(-1, order=order)
    c = w if cum is None else cum.reshape(-1, order="A")
    out = np.zeros((1, 2))
    run_norms(w, g, c, np.array([[1.0, float(batch_scale)]]), single_chunks(w.shape[0]), out,
              cum is not None)
    return float(out[0, 0]), float(out[0, 1])


def run_norms(w, g, cum, table, chunks, out, with_cum):
    """The segmented norms of flat buffers into ``out`` (see :func:`norms_kernel`); ``chunks``
    is the buffers' :func:`chunk_table`."""
    partial = np.zeros((chunks.shape[0], 2))
    kernel = norms_kernel(w.dtype, with_cum, chunks.shape[0] > 1)
    kernel(w, g, cum, table, chunks, partial)
    _sum_partials(chunks, partial, out)


# --------------------------------------------------------------------------------------------
# two-pass steps (LAMB): pass 1 reduces |w|^2 and |u|^2 per tensor, writing nothing
# --------------------------------------------------------------------------------------------
#: Elements per chunk of the direction pass, and the running sums a chunk is split into. The
#: CUDA kernel reduces with the same numbers (one block of DIRECTION_LANES threads per chunk),
#: so the float64 sums are the same on both backends, bit for bit, and for a tensor alone or
#: inside a Trainer's group.
DIRECTION_CHUNK = 1 << 12
DIRECTION_LANES = 1 << 8


def direction_kernel(direction, n_hyper: int, dtype, parallel: bool):
    """``loop(w, g, s0, s1, table, chunks, partial)``: for each chunk ``c`` (rows
    ``(start, end, segment)`` of :func:`chunk_table` with :data:`DIRECTION_CHUNK`) of a segment
    ``s`` with ``table[s, 0]`` set, element ``i`` gets ``u`` from the ``direction`` rule, and
    ``partial[c] = (sum w^2, sum u^2)`` in float64: element ``j`` of the chunk adds into running
    sum ``j % DIRECTION_LANES`` (in element order), and the sums are then added pairwise,
    ``sum[l] += sum[l + h]`` for ``h = LANES/2, LANES/4, ..., 1``. :func:`run_direction` adds a
    segment's partials in chunk order. No array but ``partial`` is written."""
    dtype = np.dtype(dtype)
    key = ("direction", direction, n_hyper, dtype, bool(parallel))

    def build():
        lanes = DIRECTION_LANES
        toward = _inlined(direction(dtype.type))

        def loop(w, g, s0, s1, table, chunks, partial):
            for c in prange(chunks.shape[0]):
                s = chunks[c, 2]
                if table[s, 0] != 0:
                    hp = to_fixed_tuple(table[s, 1:], n_hyper)
                    a, b = chunks[c, 0], chunks[c, 1]
                    wc, gc, x0, x1 = w[a:b], g[a:b], s0[a:b], s1[a:b]
                    sw = np.zeros(lanes)
                    su = np.zeros(lanes)
                    m = wc.shape[0]
                    for j in range(0, m, lanes):
                        for lane in range(min(lanes, m - j)):
                            i = j + lane
                            wi = wc[i]
                            u, _, _ = toward(wi, gc[i], x0[i], x1[i], hp)
                            vw, vu = np.float64(wi), np.float64(u)
                            sw[lane] += vw * vw
                            su[lane] += vu * vu
                    h = lanes // 2
                    while h > 0:
                        for lane in range(h):
                            sw[lane] += sw[lane + h]
                            su[lane] += su[lane + h]
                        h //= 2
                    partial[c, 0] = sw[0]
                    partial[c, 1] = su[0]
        nb = _NUMBA_TYPES[dtype]
        arr = nb[::1]
        sig = types.void(arr, arr, arr, arr, nb[:, ::1], types.int64[:, ::1],
                         types.float64[:, ::1])
        return _compile(sig, parallel)(loop)
    return _cached(key, build)


def run_direction(direction, w, g, states, table, chunks, out):
    """Pass 1 of a two-pass step over flat buffers (:func:`direction_kernel`; ``states``: two
    arrays, read only): ``out[s] = (sum w^2, sum u^2)`` of every active segment.
    ``table``: the ``(active, *hp)`` rows in the arrays' dtype; ``chunks``: their
    :func:`chunk_table` with :data:`DIRECTION_CHUNK`."""
    if len(states) != 2:
        raise ValueError(f"a direction pass takes two state arrays, got {len(states)}")
    partial = np.zeros((chunks.shape[0], 2))
    parallel = w.shape[0] >= PARALLEL_THRESHOLD and chunks.shape[0] > 1
    kernel = direction_kernel(direction, table.shape[1] - 1, w.dtype, parallel)
    kernel(w, g, states[0], states[1], table, chunks, partial)
    _sum_partials(chunks, partial, out)


def direction_norms(direction, w, g, states, hyper):
    """:func:`run_direction` over one flat tensor: ``(sum w^2, sum u^2)``."""
    table = np.array([(1.0,) + tuple(hyper)], w.dtype)
    out = np.zeros((1, 2))
    run_direction(direction, w, g, tuple(states), table,
                  single_chunks(w.shape[0], DIRECTION_CHUNK), out)
    return float(out[0, 0]), float(out[0, 1])
