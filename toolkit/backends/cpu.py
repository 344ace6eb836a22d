"""The Numba CPU backend: one compile policy, and loops built around per-element update rules.

An optimizer supplies a *rule factory*: ``factory(ftype) -> rule``, where ``ftype`` is the numpy
scalar type of the arithmetic (``np.float32`` or ``np.float64``) and ``rule`` is a plain Python
function of scalars using ``math`` only::

    rule(w, g, s0, ..., s{k-1}, hp) -> (w_new, s0_new, ..., s{k-1}_new)

``hp`` is a tuple of per-step hyperparameters that the host computed in float64 and cast to
``ftype`` once, so float32 arithmetic stays float32 (a Python float literal inside the rule would
promote the loop to float64: constants the rule needs are made by the factory as ``ftype(1)``).

The rule is compiled with ``numba.njit(inline="always")`` into a loop over the flattened arrays,
serial below :data:`PARALLEL_THRESHOLD` elements and ``prange`` above, lazily, once per (rule,
dtype, serial/parallel), under :mod:`toolkit.backends.jit`'s compile policy and cache. This module
holds the row loop, the segmented call (:func:`run_segmented`: the addressed loop of
:mod:`toolkit.backends.addressed` over flat buffers) and the launchers, the CPU's executor
(:class:`Launcher`, :class:`RowsLauncher`, :class:`MirrorLauncher`); it re-exports the
public names of the other CPU kernel families (``cpu_elementwise``, ``cpu_norms``, ``cpu_noise``,
``cpu_precision``, ``rows``).
"""
from __future__ import annotations


import numpy as np
from numba import prange, types
from numba.np.unsafe.ndarray import to_fixed_tuple

from . import rows as row_kernels
from . import jit
from .cpu_noise import (NOISE_PARALLEL_THRESHOLD, noise_kernel, noise_mp_kernel,  # noqa: F401
                        noise_segmented_kernel, run_noise, run_noise_mp, run_noise_segmented)
from .cpu_norms import (direction_kernel, direction_norms, lars_norms, norms_kernel,  # noqa: F401
                        run_direction, run_norms, tensor_direction_kernel, tensor_norms_kernel)
from .addressed import addressed_kernel, addressed_mp_kernel, flat_buffers, starts
from .cpu_elementwise import PreparedStep, elementwise_kernel, run_elementwise  # noqa: F401
from .cpu_factored import run_factored, run_segmented as run_factored_segmented
from .cpu_matrix import run_matrix
from .cpu_precision import to_half_into, to_single  # noqa: F401
from .jit import KERNELS, NUMBA_TYPES, cached, call_readonly, compile_kernel, inlined
from .order import CHUNK, single_chunks

__all__ = ["elementwise_kernel", "run_elementwise", "PreparedStep", "lars_norms", "run_norms", "direction_norms",
           "run_direction", "Launcher", "LAUNCHER", "RowsLauncher", "rows_kernel"]


def _rows_loop(rule, n_state, n_hyper):
    """The loop of a rule over the rows of a lazy row-sparse step: gradient row ``k`` (``g``:
    ``(nnz, ncols)`` flattened) updates row ``rows[k]`` of the weight and the states (C order);
    rows in parallel (``prange``), a row's columns as a vectorisable loop over slices from 0."""
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
        sig = types.void(arr, jit.read_only(arr), *([arr] * n_state), types.int64[::1],
                         types.int64, arr)
        return compile_kernel(sig, parallel)(_rows_loop(inlined(factory(dtype.type)), n_state,
                                                  n_hyper))
    return cached(key, build)


class Launcher:
    """Runs one optimizer step's rules on the CPU backend (numpy arrays, any memory order)."""

    backend = "cpu"

    @staticmethod
    def check_kind(kind):
        """Raise where this launcher does not run launches of ``kind``: the CPU runs every
        kind."""

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

    def run_rule(self, factory, weight, grad, states, hyper, key=None):
        """Run a per-element rule over ``weight``, ``grad`` and ``states`` in place; states
        held in another precision (``state_dtype``: bfloat16 arrays, int8 ``Quantized``
        slots) through ``toolkit.backends.cpu_lowbit``, bfloat16 ones rounded stochastically
        with ``key`` where one is given."""
        dtype = weight.dtype
        for s in states:
            if type(s) is not np.ndarray or s.dtype != dtype:
                from . import cpu_lowbit
                cpu_lowbit.run_held_many(factory, [self._held_step(weight, grad, states, hyper,
                                                                   key)])
                return
        if weight.ndim == 1 and grad.flags.c_contiguous:  # flat already: _flat's own shortcut
            run_elementwise(factory, weight, grad, tuple(states), hyper)
            return
        run_elementwise(factory, *self._flat(weight, grad, states), hyper)

    def _held_step(self, weight, grad, states, hyper, key):
        """A step of ``cpu_lowbit.run_held_many``: the arrays as 1-D views in the weight's
        memory order (an int8 slot's codes likewise)."""
        w, g, flat = self._flat(weight, grad, [
            s if type(s) is np.ndarray else s.codes for s in states])
        held = tuple(f if type(s) is np.ndarray else type(s)(f, s.absmax, s.qmap)
                     for f, s in zip(flat, states))
        return w, g, held, hyper, key

    def prepare_rules(self, calls, names=None):
        """``run()`` of "rule" launches (``launches.Launch``), one per parameter of distinct
        parameters, their order free (``launches.prepare_many``), which returns the kernel
        calls it made. When some hold states low (``state_dtype``), those with 1 to 3 state
        slots over float32 or float64 weights, held low or not, are checked here, before
        anything runs, and run in one call of ``cpu_lowbit.run_held_many`` per rule (one
        parallel loop over every block of theirs, each element's numbers those of its own
        call); the others, or all when none holds states low, run one by one. ``names``: a
        string naming each call's parameter in a refusal."""
        if not any(type(s) is not np.ndarray or s.dtype != c.weight.dtype
                   for c in calls for s in c.states):
            return lambda: self._run_each(calls)
        together, rest = {}, []
        for i, c in enumerate(calls):
            if 1 <= len(c.states) <= 3 and c.weight.dtype in jit.DTYPES:
                steps, labels = together.setdefault(c.factory, ([], []))
                steps.append(self._held_step(c.weight, c.grad, c.states, c.hyper, c.key))
                labels.append(f"launch {i}" if names is None else names[i])
            else:
                rest.append(c)
        from . import cpu_lowbit
        held = [cpu_lowbit.prepare_held_many(factory, steps, labels)
                for factory, (steps, labels) in together.items()]
        return lambda: self._run_each(rest) + sum(h.run() for h in held)

    def _run_each(self, calls):
        for c in calls:
            self.run_rule(c.factory, c.weight, c.grad, c.states, c.hyper, c.key)
        return len(calls)

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
    def run_factored(factory, weight, grad, states, hyper):
        """A factored step (:mod:`toolkit.backends.cpu_factored`) in place, in C order: a
        weight or state array in another memory order is stepped in a C-ordered copy, copied
        back; a gradient of another dtype or order, or a read-only one (its passes take
        writable arrays), is converted first."""
        g = grad if grad.dtype == weight.dtype and grad.flags.c_contiguous and \
            grad.flags.writeable else np.array(grad, dtype=weight.dtype, order="C")
        given = (weight, *states)
        work = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in given]
        run_factored(factory, work[0], g, tuple(work[1:]), hyper)
        for a, b in zip(given, work):
            if a is not b:
                a[...] = b

    @staticmethod
    def run_matrix(factory, weight, grad, states, hyper):
        """A matrix step (:mod:`toolkit.backends.cpu_matrix`) in place, in C order: a weight or
        state array in another memory order is stepped in a C-ordered copy, copied back; a
        gradient of another dtype or order is converted first."""
        g = grad if grad.dtype == weight.dtype and grad.flags.c_contiguous else \
            np.ascontiguousarray(grad, dtype=weight.dtype)
        given = (weight, *states)
        work = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in given]
        run_matrix(factory, work[0], g, work[1], hyper)
        for a, b in zip(given, work):
            if a is not b:
                a[...] = b

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

    # --- a Trainer group's flat buffers, one segment per member --------------------------------
    # ``group``: its layout (``toolkit.trainer.buffers.Group``: ``offsets``, ``chunks``,
    # ``rows_layout()``, ``direction_chunks()``); ``table``: one ``(active, *hp)`` row per member

    @staticmethod
    def run_table(kind, factory, flats, table, group, keys=None, aux=None, chunks=None):
        """One segmented call of a launch's ``kind`` over the flat ``(weight, grad, *states)``;
        ``keys``, ``aux``: a noise rule's per-member stream keys and scalars; ``chunks``: a
        chunk table other than the members' (one segment over the whole buffers)."""
        w, grad, states = flats[0], flats[1], tuple(flats[2:])
        if kind == "rows":
            row_kernels.run_cpu_segmented(factory, w, grad, states[0], table, group.rows_layout())
        elif kind == "noise":
            run_noise_segmented(factory, w, grad, table, keys, aux, group.offsets, group.chunks)
        elif kind == "factored":
            run_factored_segmented(factory, w, grad, states, table, group.factored_layout())
        else:
            run_segmented(factory, w, grad, states, table,
                          group.chunks if chunks is None else chunks)

    @staticmethod
    def group_norms(w, grad, cum, rows, group):
        """Every active member's float64 ``(sum w^2, sum g'^2)`` (``rows``: ``(active,
        batch_scale)`` per member; ``cum`` the accumulators or None), one reduction."""
        out = np.zeros((rows.shape[0], 2))
        run_norms(w, grad, w if cum is None else cum, rows, group.chunks, out, cum is not None)
        return out

    @staticmethod
    def group_directions(direction, w, grad, states, table, group):
        """Every active member's first pass (``(sum w^2, sum u^2)``), one call writing nothing."""
        out = np.zeros((table.shape[0], 2))
        run_direction(direction, w, grad, tuple(states), table, group.direction_chunks(), out)
        return out

    # --- tensors by address (``toolkit.torch``), one table row per tensor ---------------------

    @staticmethod
    def run_addressed(factory, dtype, ptrs, sizes, table, planned=None):
        """Row ``k`` of ``table`` over the ``sizes[k]`` elements of ``dtype`` at the addresses
        ``ptrs[k]`` (``(weight, grad, *states)``; :mod:`toolkit.backends.addressed`); returns
        the call's ``Planned`` (None: no row active). ``planned``: what an earlier call
        returned for the same factory, shapes, sizes and active rows, every address unchanged
        but those the caller checked: it runs without being planned again."""
        if planned is None:
            from .addressed import plan_rule_addressed
            planned = plan_rule_addressed(factory, dtype, ptrs, sizes, table)
        return _run_planned(planned, ptrs, table)

    @staticmethod
    def run_addressed_mp(factory, ptrs, sizes, table, weight, planned=None):
        """:meth:`run_addressed` for ``(float32 master, grad, *float32 states, weight)`` with
        the gradient and the weight of type ``weight`` ("bfloat16" or "float16"): the master
        updated, the weight rounded from it in the same pass."""
        if planned is None:
            from .addressed import plan_rule_addressed_mp
            planned = plan_rule_addressed_mp(factory, ptrs, sizes, table, weight)
        return _run_planned(planned, ptrs, table)


def _run_planned(planned, ptrs, table):
    """An addressed call's ``Planned`` run (None: no row active, nothing to run)."""
    if planned is not None:
        planned.run(ptrs, table)
    return planned


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

    def run_rows(self, factory, weight, grad, history, rows, hyper):
        """A row rule over this step's rows (``rows`` None) or the rows given."""
        super().run_rows(factory, weight, grad, history, self.rows if rows is None else rows,
                         hyper)

    def run_noise_rule(self, factory, weight, grad, hyper, key, aux):
        raise NotImplementedError("a noise rule has no lazy row-sparse form")

    def lars_norms(self, weight, grad, cum, batch_scale):
        raise NotImplementedError("LARS norms have no lazy row-sparse form")

    def direction_norms(self, first, weight, grad, states):
        raise NotImplementedError("a direction pass (LAMB) has no lazy row-sparse form")

    def run_factored(self, factory, weight, grad, states, hyper):
        raise NotImplementedError("a factored step (Adafactor) has no lazy row-sparse form")


class MirrorLauncher(Launcher):
    """The CPU launcher of a multi-precision step (float16 weight, float32 master): the rule
    that updates the master reads the float16 gradient, widening each element exactly, and
    writes the float16 weight, rounded to nearest even from the new master, in the same pass.
    The first passes (LARS norms, LAMB's direction) widen it on load too; anything else runs
    on a float32 copy of the gradient, and the caller rounds the master into the weight unless
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
        w16 = self._flat(self.weight16, self.weight16, ())[0]
        arrays = (w, g, *states, w16)
        flat_buffers(arrays, [np.float32, np.float16] + [np.float32] * len(states)
                     + [np.float16], "a multi-precision step")
        table = np.empty((1, 1 + len(hyper)), np.float32)
        table[0, 0] = 1
        table[0, 1:] = hyper
        chunks = single_chunks(w.shape[0], CHUNK)
        parallel = w.shape[0] >= jit.PARALLEL_THRESHOLD and chunks.shape[0] > 1
        # the addressed loop of one tensor: the same kernel as toolkit.torch's float16 step
        addressed_mp_kernel(factory, len(states), len(hyper), parallel)(starts(arrays), table,
                                                                         chunks)
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

    def run_factored(self, factory, weight, grad, states, hyper):
        """A factored step on the widened gradient (the caller rounds the weight after)."""
        return super().run_factored(factory, weight, self._widened(grad), states, hyper)

    def lars_norms(self, weight, grad, cum, batch_scale):
        """LARS norms of the master and the float16 gradient (widened on load, no copy)."""
        return lars_norms(weight, grad, cum, batch_scale)


# --- segmented calls: many tensors in one call (the Trainer's flat buffers) -----------------
def run_segmented(factory, weight, grad, states, table, chunks):
    """One call of ``factory``'s rule over 1-D C-contiguous flat buffers of one dtype holding
    many tensors: ``table`` the per-segment ``(active, *hp)`` rows in that dtype, ``chunks``
    :func:`toolkit.backends.order.chunk_table` rows. It runs the addressed loop
    (:mod:`toolkit.backends.addressed`) with every segment's addresses the buffers' starts, the
    chunk rows' offsets being the buffers' own: one compiled loop per rule for many tensors,
    whether they lie in flat buffers (the Trainer) or anywhere (``toolkit.torch``)."""
    arrays = (weight, grad, *states)
    flat_buffers(arrays, [weight.dtype] * len(arrays), "run_segmented", chunks=chunks)
    parallel = weight.shape[0] >= jit.PARALLEL_THRESHOLD and chunks.shape[0] > 1
    n_hyper = table.shape[1] - 1
    kernel = KERNELS.get(("addressed", factory, len(states), n_hyper, weight.dtype, parallel))
    if kernel is None:
        kernel = addressed_kernel(factory, len(states), n_hyper, weight.dtype, parallel)
    kernel(starts(arrays, table.shape[0]), table, chunks)
