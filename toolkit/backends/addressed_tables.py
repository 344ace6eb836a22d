"""The tables of an addressed call (:mod:`toolkit.backends.addressed`): the checks of its
``ptrs``, ``sizes`` and ``table`` arguments, the alignment each column's addresses must have,
and the chunk table, built by a compiled serial pass (:func:`_plan`) that checks every address
before the kernel runs, so that nothing is written when a check fails.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types

from . import jit
from .jit import COMPILE_OPTIONS, NUMBA_TYPES
from .order import CHUNK

__all__ = ["plan_chunks", "checked_tables", "alignment"]


# --------------------------------------------------------------------------------------------
# the chunk table: one compiled serial pass before the kernel
# --------------------------------------------------------------------------------------------
#: What :func:`_plan` found wrong (its status), as the error says it.
_PROBLEMS = {1: "a negative size", 2: "a null address for a tensor of size > 0",
             3: "an address that is not a multiple of its element size"}


def _plan_loop(ptrs, sizes, table, align, chunk):
    """``(status, row, column, total, chunks)``: the ``(start, end, tensor)`` rows covering
    every active tensor (``table[s, 0] != 0``) in pieces of at most ``chunk`` elements (offsets
    inside the tensor), and
    ``status`` 0, or the first problem found (:data:`_PROBLEMS`) at ``(row, column)`` (the chunk
    table then empty)."""
    n, m = ptrs.shape[0], ptrs.shape[1]
    count = 0
    total = 0
    for s in range(n):
        size = sizes[s]
        if size < 0:
            return 1, s, -1, 0, np.zeros((0, 3), np.int64)
        if table[s, 0] == 0 or size == 0:
            continue
        for j in range(m):
            p = ptrs[s, j]
            if p == 0:
                return 2, s, j, 0, np.zeros((0, 3), np.int64)
            if p % align[j] != 0:
                return 3, s, j, 0, np.zeros((0, 3), np.int64)
        count += (size + chunk - 1) // chunk
        total += size
    out = np.empty((count, 3), np.int64)
    c = 0
    for s in range(n):
        size = sizes[s]
        if table[s, 0] == 0 or size == 0:
            continue
        for a in range(0, size, chunk):
            out[c, 0] = a
            out[c, 1] = min(a + chunk, size)
            out[c, 2] = s
            c += 1
    return 0, 0, 0, total, out


def _plan():
    """The compiled :func:`_plan_loop` (float32 and float64 tables), compiled or loaded on first
    use rather than on import: ``cpu`` imports this module, and a start-up that never plans an
    addressed call loads nothing for it."""
    return jit.cached("addressed-plan", lambda: numba.njit(
        [types.Tuple((types.int64, types.int64, types.int64, types.int64, types.int64[:, ::1]))(
            types.int64[:, ::1], types.int64[::1], NUMBA_TYPES[dt][:, ::1], types.int64[::1],
            types.int64) for dt in jit.DTYPES],
        **COMPILE_OPTIONS)(_plan_loop))


def plan_chunks(ptrs, sizes, table, align, chunk=CHUNK):
    """The chunk table of an addressed call: ``(total, chunks)``, ``chunks`` the ``(start, end,
    tensor)`` int64 rows (offsets inside each tensor) covering every active tensor (column 0 of
    its ``table`` row not 0) in pieces of at most ``chunk`` elements, as
    :func:`toolkit.backends.order.chunk_table` covers a flat buffer's segments. Raises
    ValueError, naming the row and the column, for a negative size, a null address of an
    active tensor of size > 0, or an address not a multiple of ``align[column]`` bytes."""
    status, row, col, total, chunks = _plan()(ptrs, sizes, table, align, chunk)
    if status:
        where = f"sizes[{row}] = {sizes[row]}" if status == 1 else \
            f"ptrs[{row}, {col}] = {hex(int(ptrs[row, col]))}"
        raise ValueError(f"{where}: {_PROBLEMS[status]}; pass each tensor's data_ptr() and "
                         "numel() (a tensor the step skips: its table row's column 0 set to 0)")
    return total, chunks


# --------------------------------------------------------------------------------------------
# the arguments
# --------------------------------------------------------------------------------------------
def _int64_table(name, a, ndim):
    if not isinstance(a, np.ndarray) or a.dtype != np.int64 or a.ndim != ndim:
        got = (f"{type(a).__name__}" if not isinstance(a, np.ndarray)
               else f"a {a.ndim}-D {a.dtype} array")
        raise TypeError(f"{name} must be a {ndim}-D int64 numpy array, got {got}; build it "
                        f"with numpy.array(..., dtype=numpy.int64)")
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def checked_tables(ptrs, sizes, table, dtype, n_fixed, what):
    """The validated ``(ptrs, sizes, table)`` of a call (C-contiguous) and its number of state
    arrays (the columns of ``ptrs`` past ``n_fixed``), or a TypeError or a ValueError naming the
    argument, its value and the fix."""
    ptrs = _int64_table("ptrs", ptrs, 2)
    sizes = _int64_table("sizes", sizes, 1)
    if not isinstance(table, np.ndarray) or table.ndim != 2 or table.dtype != dtype:
        got = (type(table).__name__ if not isinstance(table, np.ndarray)
               else f"a {table.ndim}-D {table.dtype} array")
        raise TypeError(f"table must be a 2-D {dtype} numpy array (the compute dtype of {what}),"
                        f" got {got}; build it as run_segmented's table: numpy.zeros((n, 1 + "
                        f"len(hp)), {dtype})")
    n = ptrs.shape[0]
    if sizes.shape[0] != n or table.shape[0] != n:
        raise ValueError(f"ptrs, sizes and table must have one row per tensor: got "
                         f"{ptrs.shape[0]}, {sizes.shape[0]} and {table.shape[0]} rows")
    n_state = ptrs.shape[1] - n_fixed
    if not 0 <= n_state <= 3:
        raise ValueError(f"ptrs has {ptrs.shape[1]} columns; {what} takes {n_fixed} to "
                         f"{n_fixed + 3} (0 to 3 state arrays)")
    if table.shape[1] < 1:
        raise ValueError("table has no column; column 0 is each tensor's active flag (1 to "
                         "update it, 0 to skip it), then the rule's row")
    if not table.flags.c_contiguous:
        table = np.ascontiguousarray(table)
    return ptrs, sizes, table, n_state


_ALIGNS: dict = {}


def alignment(n_cols, itemsize, half_cols=()):
    """The alignment in bytes of each column's addresses: ``itemsize``, 2 for the columns of
    ``half_cols`` (16-bit arrays); kept, one array per kind of call."""
    key = (n_cols, itemsize, half_cols)
    a = _ALIGNS.get(key)
    if a is None:
        a = np.full(n_cols, itemsize, np.int64)
        a[list(half_cols)] = 2
        a = _ALIGNS.setdefault(key, a)
    return a
