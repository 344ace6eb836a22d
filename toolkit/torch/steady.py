"""The steady state of a ``toolkit.torch`` step (:class:`SteadyGroup`): what a param group's step
costs in Python once its parameters have state and nothing about them changes.

A group qualifies after a general-path step when every parameter is a dense, contiguous CPU
tensor of one dtype (float32, float64, or bfloat16 with a float32 master) with state, its
optimizer's step reads only ``(t, lr, wd)``, and no toolkit ``lr_scheduler`` drives it. It then
keeps its weights' and states' addresses in the table of the addressed kernel
(:func:`toolkit.backends.addressed.run_rule_addressed`, or
:func:`~toolkit.backends.addressed.run_rule_addressed_mp` for bfloat16); a step checks each
``.grad`` and each address and shape, and fills the gradient column. Anything else sends the
step to the general path, which checks everything again: the steady path is a shortcut to the
same kernel call with the same rows, never other numbers (``tests/test_torch_steady.py``,
``tests/test_torch_bfloat16.py``). About half a microsecond of Python per parameter is left.
"""
from __future__ import annotations

import operator
from typing import NamedTuple

import numpy as np
import torch

from ..backends import jit
from ..optimizers.batched import Kept
from . import rule_table

__all__ = ["SteadyGroup", "SteadyStep"]

_STRIDED = torch.strided
_data_ptr = torch.Tensor.data_ptr
_numel = torch.Tensor.numel
#: a weight's dtype -> the dtype of its kernel's arithmetic and table (bfloat16: its float32
#: master's)
_DTYPES = {torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64),
           torch.bfloat16: np.dtype(np.float32)}
#: the weight types with a float32 master (``launch_addressed_mp``'s ``weight``)
_MASTERED = {torch.bfloat16: "bfloat16"}


class SteadyStep(NamedTuple):
    """One group's checked step on the steady path: its gradients (kept alive for the kernel),
    their addresses, the step's scalars, the rule's rows (``kernel_row``'s, one per distinct
    ``(t, lr, wd)``, ``inverse`` mapping each parameter to its row, or None when there is one
    row) and the largest count."""
    steady: "SteadyGroup"
    grads: list
    grad_ptrs: list
    scalars: object
    factory: object
    rows: np.ndarray
    inverse: object
    top: int  #: the largest count ``t`` of the step


class SteadyGroup:
    """A param group's parameters, their weights' and states' addresses and sizes, as the
    last general step left them (:meth:`build`), and the checks of a step against them."""
    __slots__ = ("params", "indices", "kept", "dtype", "np_dtype", "weight", "shapes",
                 "weight_ptrs", "ptrs", "sizes", "tensors", "states", "state_ptrs", "state_sizes",
                 "table", "hyper", "grad_column", "grad_mask", "planned", "serial")

    def __init__(self, params, indices, dtype, shapes, weight_ptrs, ptrs, sizes, tensors):
        self.params, self.indices, self.dtype = params, indices, dtype
        # the indices as the optimizer's bookkeeping keeps what it made of them, step to step
        self.kept = Kept(indices)
        self.np_dtype = _DTYPES[dtype]
        #: None, or the weight type of a group with a float32 master ("bfloat16")
        self.weight = _MASTERED.get(dtype)
        self.shapes, self.weight_ptrs = shapes, weight_ptrs  # weight_ptrs: a list of ints
        self.ptrs, self.sizes = ptrs, sizes
        self.tensors = tensors  # the weights and states in the table, kept alive
        # the state tensors opt.state shows (a bfloat16 weight's float32 master first;
        # contiguous: the very ones in the table) and their addresses: a storage swapped under
        # one (set_, .data =) is a change
        self.states = [a for arrays in tensors for a in arrays[1:]]
        self.state_ptrs = list(map(_data_ptr, self.states))
        # and their sizes: a state resized in place (resize_) keeps its address
        self.state_sizes = list(map(_numel, self.states))
        #: the table of the last run (column 0, the active flags, all 1), made again only when
        #: the row's length changes, and its rows' columns (a view)
        self.table = self.hyper = None
        #: the gradients' column of ``ptrs`` (a view), and what a gradient's address must not
        #: have of it (a multiple of the item size)
        self.grad_column = ptrs[:, 1]
        self.grad_mask = dtype.itemsize - 1
        #: ``(factory, Planned)`` of the last launch: the next one of the same factory and
        #: table runs it again (the weights' and states' addresses checked unchanged, the
        #: gradients' checked by :meth:`gradients`)
        self.planned = None
        #: whether the group's kernel runs serially (fewer elements than a parallel call pays
        #: for): the step then has no thread count to set
        self.serial = int(sizes.sum()) < jit.PARALLEL_THRESHOLD

    @classmethod
    def build(cls, params, first_index, inner, state_tensors):
        """The steady state of a group's ``params`` (MXNet indices from ``first_index``) whose
        weights and state tensors (contiguous) ``state_tensors(p)`` gives as ``(weight,
        *states)`` in the rule's order (bfloat16: ``(weight, master, *states)``), or None when
        the group does not qualify."""
        if not params or not inner.plans_by_scalars:
            return None
        dtype = params[0].dtype
        mastered = dtype in _MASTERED
        if dtype not in _DTYPES or (mastered and not inner.multi_precision):
            return None
        state_dtype = torch.float32 if mastered else dtype
        rows, sizes, kept = [], [], []
        for p in params:
            if p.dtype is not dtype or p.layout is not _STRIDED or not p.is_cpu or \
                    not p.is_contiguous():
                return None
            arrays = state_tensors(p)
            if arrays is None or arrays[0].data_ptr() != p.data_ptr() or \
                    arrays[0].dtype is not dtype or \
                    any(a.dtype is not state_dtype for a in arrays[1:]) or \
                    any(not a.is_contiguous() or a.numel() != p.numel() for a in arrays):
                return None
            ptrs = [a.data_ptr() for a in arrays]
            # the kernel's row: the gradient's column (1) empty until the step
            rows.append(ptrs[1:2] + [0] + ptrs[2:] + ptrs[:1] if mastered else
                        ptrs[:1] + [0] + ptrs[1:])
            sizes.append(p.numel())
            kept.append(arrays)
        if len({len(r) for r in rows}) != 1 or (mastered and len(rows[0]) < 3):
            return None
        ptrs = np.array(rows, np.int64)
        return cls(list(params), first_index + np.arange(len(params), dtype=np.int64), dtype,
                   [p.shape for p in params], ptrs[:, -1 if mastered else 0].tolist(), ptrs,
                   np.array(sizes, np.int64), kept)

    def gradients(self, params, negated=False):
        """``(grads, their addresses)`` when ``params`` (the group's list now) are the same
        parameters, at the same addresses and shapes, each with a gradient this path takes;
        else None (the general path then runs). ``negated``: the gradients are ``-grad``, new
        tensors."""
        mine = self.params
        if len(params) != len(mine) or not all(map(operator.is_, params, mine)):
            return None
        grads = [p.grad for p in mine]
        dtype = self.dtype
        for g, p, shape in zip(grads, mine, self.shapes):
            if g is None or g.layout is not _STRIDED or g.dtype is not dtype or \
                    not g.is_cpu or g.shape != shape or p.shape != shape or \
                    p.dtype is not dtype or not g.is_contiguous() or not p.is_contiguous() or \
                    g.is_neg():  # memory holding -grad (a conj().imag view): the general path
                return None
        states = self.states
        if list(map(_data_ptr, mine)) != self.weight_ptrs or \
                list(map(_data_ptr, states)) != self.state_ptrs or \
                list(map(_numel, states)) != self.state_sizes:
            return None
        if negated:
            grads = list(map(operator.neg, grads))
        ptrs = list(map(_data_ptr, grads))
        mask = self.grad_mask
        for ptr in ptrs:
            if ptr & mask:  # a misaligned gradient: the general path says so
                return None
        return grads, ptrs

    def run(self, step: SteadyStep):
        """The kernel call of a checked step (its counts committed by the caller first)."""
        table = self.table
        if table is None or table.shape[1] != 1 + step.rows.shape[1]:
            table = self.table = np.ones((len(self.params), 1 + step.rows.shape[1]),
                                         self.np_dtype)
            self.hyper = table[:, 1:]
            self.planned = None
        # each float64 rounded to the dtype, as a single call rounds it
        self.hyper[...] = step.rows if step.inverse is None else step.rows[step.inverse]
        factory = step.factory
        planned = self.planned
        planned = planned[1] if planned is not None and planned[0] is factory else None
        column = self.grad_column
        column[:] = step.grad_ptrs
        try:
            if self.weight is None:
                planned = rule_table.launch_addressed(factory, self.np_dtype, self.ptrs, self.sizes,
                                                      table, planned)
            else:
                planned = rule_table.launch_addressed_mp(factory, self.ptrs, self.sizes, table,
                                                         self.weight, planned)
        finally:
            column[:] = 0  # no gradient's address outlives its step
        self.planned = (factory, planned) if planned is not None else None
