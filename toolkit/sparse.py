"""Row-sparse gradients: ``RowSparse(indices, values, shape)``, where ``values[k]`` is row
``indices[k]`` of a gradient of ``shape`` whose other rows are zero (MXNet's ``row_sparse``
storage; the gradient of an embedding lookup touches only the rows looked up).

``update`` takes one in place of a dense gradient. The optimizers MXNet 1.9.1 updates lazily
touch only the rows present (docs/sparse.md lists which, and what the others do)::

    >>> import numpy as np
    >>> from toolkit import optimizer, RowSparse
    >>> w = np.ones((4, 2), np.float32)
    >>> g = RowSparse([1, 3], np.full((2, 2), 0.5, np.float32), shape=(4, 2))
    >>> opt = optimizer.SGD(learning_rate=1.0)
    >>> opt.update(0, w, g, opt.create_state(0, w)); w
    array([[1. , 1. ],
           [0.5, 0.5],
           [1. , 1. ],
           [0.5, 0.5]], dtype=float32)

Indices must be sorted and unique (MXNet's own format check, ``check_format``, refuses anything
else and its update kernels misbehave on it); :meth:`RowSparse.from_rows` builds a valid one from
rows in any order, adding the values of repeated rows, as an embedding's backward pass does.
"""
from __future__ import annotations

import numbers

import numpy as np

from .backends import arrays

__all__ = ["RowSparse"]


def _shape(shape):
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be a tuple of ints, got {shape!r}") from None
    if not shape or not all(isinstance(n, numbers.Integral) and not isinstance(n, bool)
                            and n >= 0 for n in shape):
        raise ValueError(f"shape must be a non-empty tuple of ints >= 0, got {shape!r}")
    return tuple(int(n) for n in shape)


class RowSparse:
    """A gradient whose rows are zero except rows ``indices``: ``values[k]`` is row
    ``indices[k]`` of an array of ``shape``.

    Parameters
    ----------
    indices : 1-D array of ints
        The rows present, strictly increasing, each in ``[0, shape[0])``. A numpy array (or
        anything ``numpy.asarray`` takes); for a gradient on a CUDA device also a device array
        (it is copied to the host once to be checked).
    values : array
        ``values[k]`` is row ``indices[k]``: shape ``(len(indices),) + shape[1:]``, the weight's
        dtype, kind (numpy or CUDA) and device.
    shape : tuple of ints
        The shape of the dense gradient (the weight's shape).

    What the optimizer checks when it receives one (:meth:`check`): the index order and range,
    the values' shape, dtype and kind; nothing is written when a check fails.
    """

    __slots__ = ("indices", "values", "shape")

    def __init__(self, indices, values, shape):
        self.shape = _shape(shape)
        if not arrays.is_device_array(indices):
            indices = np.asarray(indices)
            if indices.dtype == object or (indices.size and indices.dtype.kind not in "iu"):
                raise TypeError(f"indices must be integers, got dtype {indices.dtype}")
            if indices.size == 0:
                indices = indices.astype(np.int64)
        self.indices = indices
        self.values = values

    @classmethod
    def from_rows(cls, rows, values, shape):
        """A valid ``RowSparse`` from rows in any order, with repeats: the values of a repeated
        row are added (in the order given), as the backward pass of an embedding lookup adds
        the gradients of a row looked up twice. numpy arrays only."""
        rows = np.asarray(rows)
        values = np.asarray(values)
        if rows.dtype == object or (rows.size and rows.dtype.kind not in "iu"):
            # as the constructor refuses them: a float row number would be truncated
            raise TypeError(f"rows must be integers, got dtype {rows.dtype}: pass whole row "
                            f"numbers as an integer array (np.int64)")
        if rows.ndim != 1:
            raise ValueError(f"rows must be 1-D, got shape {rows.shape}")
        if values.shape[:1] != rows.shape:
            raise ValueError(f"values must have one row per entry of rows: {rows.shape[0]} rows, "
                             f"values of shape {values.shape}")
        unique, inverse = np.unique(rows, return_inverse=True)
        summed = np.zeros((unique.shape[0],) + values.shape[1:], values.dtype)
        np.add.at(summed, inverse.reshape(-1), values)
        return cls(unique.astype(np.int64), summed, shape)

    @property
    def nnz(self):
        """The number of rows present."""
        return int(self.indices.shape[0])

    @property
    def dtype(self):
        """The values' dtype."""
        return np.dtype(self.values.dtype) if hasattr(self.values, "dtype") else None

    def host_indices(self):
        """The indices as a numpy int64 array (a device array is copied to the host)."""
        return np.asarray(arrays.to_host(self.indices)).astype(np.int64, copy=False)

    def to_dense(self):
        """The dense gradient: zeros except the rows present (numpy for numpy values, else an
        array of the values' kind on their device)."""
        rows = self.host_indices()
        if isinstance(self.values, np.ndarray):
            out = np.zeros(self.shape, self.values.dtype)
            out[rows] = self.values
            return out
        from .backends import cuda
        return cuda.dense_from_rows(self.values, rows, self.shape)

    def check(self, weight_desc, what="grad"):
        """Check this gradient against the described weight; returns ``(rows, values_desc)``
        (host int64 indices and the values' description). Raises a ValueError or TypeError
        that names what is wrong."""
        w = weight_desc
        if self.shape != tuple(w.shape):
            raise ValueError(f"{what} (RowSparse) has shape {self.shape}, the weight {w.shape}")
        if len(w.shape) == 0:
            raise ValueError("a RowSparse gradient needs a weight with at least one dimension")
        rows = self.host_indices()
        if rows.ndim != 1:
            raise ValueError(f"{what}.indices must be 1-D, got shape {rows.shape}")
        if rows.size:
            if rows.min() < 0 or rows.max() >= w.shape[0]:
                bad = rows[(rows < 0) | (rows >= w.shape[0])][0]
                raise ValueError(f"{what}.indices holds row {int(bad)}, outside [0, {w.shape[0]})")
            if rows.size > 1 and not bool(np.all(rows[1:] > rows[:-1])):
                k = int(np.argmax(rows[1:] <= rows[:-1]))
                kind = "repeated" if rows[k + 1] == rows[k] else "not sorted"
                raise ValueError(f"{what}.indices must be strictly increasing (sorted, no "
                                 f"repeats), as MXNet's row_sparse format requires; row "
                                 f"{int(rows[k + 1])} at position {k + 1} is {kind}. Use "
                                 "RowSparse.from_rows(rows, values, shape) to sort the rows "
                                 "and add repeated ones")
        if self.values is None:
            raise TypeError(f"{what}.values must be an array, got None")
        v = arrays.describe(self.values, f"{what}.values")
        expected = (rows.shape[0],) + tuple(w.shape[1:])
        arrays.check_same_kind(f"{what}.values", v, w)
        if tuple(v.shape) != expected:
            raise ValueError(f"{what}.values has shape {tuple(v.shape)}, expected {expected} "
                             f"(one row of the weight per index)")
        if v.dtype != w.dtype:
            raise TypeError(f"{what}.values dtype {v.dtype} does not match weight dtype "
                            f"{w.dtype}")
        if v.kind == arrays.DEVICE and v.size > 1 and not v.c_contiguous:
            raise ValueError(f"{what}.values on a CUDA device must be C-contiguous (the "
                             "kernel reads them in place)")
        if arrays.overlaps(v, w):
            raise ValueError(f"{what}.values shares memory with the weight")
        return rows, v

    def __repr__(self):
        kind = type(self.values).__module__.split(".")[0]
        return (f"RowSparse(nnz={self.nnz}, shape={self.shape}, dtype={self.dtype}, "
                f"values={kind})")
