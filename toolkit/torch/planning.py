"""The checks of a ``toolkit.torch`` step, made before anything is written (:class:`StepPlans`, a
base class of :class:`toolkit.torch.optim.TorchOptimizer`): each group's members with a gradient
(every weight and gradient checked, with the state a new one gets) and the step's scalars, or a
steady group's gradients and rows (``toolkit.torch.steady``); and the rows of ``kernel_row`` per
distinct ``(t, lr, wd)`` that a table runs.
"""
from __future__ import annotations

import numpy as np
import torch

from ..trainer.buffers import planned_rows
from .maximize import negated_row
from .states import memory_order
from .steady import SteadyStep

__all__ = ["StepPlans"]

_DENSE_DTYPES = (torch.float32, torch.float64)
_STRIDED = torch.strided
_HALF = (torch.float16, torch.bfloat16)


def _check_rows(where, rows, n):
    """A ValueError, naming the row, unless the coalesced sparse gradient's ``rows`` lie in
    ``[0, n)`` and increase strictly."""
    if not rows.numel():
        return
    bad = rows[(rows < 0) | (rows >= n)]
    if bad.numel():
        raise ValueError(f"{where}: its sparse gradient holds row {int(bad[0])}, outside "
                         f"[0, {n})")
    if rows.numel() > 1 and not bool((rows[1:] > rows[:-1]).all()):
        raise ValueError(f"{where}: its sparse gradient's rows are not strictly increasing "
                         "although it is marked coalesced (is_coalesced=True); build it "
                         "without is_coalesced, or call .coalesce() on an uncoalesced one")


class _Member:
    """One parameter with a gradient in this step: its index, tensor, the arrays the update
    reads, and how it runs; ``new_state``: ``(toolkit state, named tensors, values)`` where
    this step binds a new state (``values``: the ``opt.state`` entry's tensors it takes, or
    None for a fresh state)."""
    __slots__ = ("index", "p", "grad", "perm", "sparse", "new_state", "route")

    def __init__(self, index, p, grad):
        self.index, self.p, self.grad = index, p, grad
        self.perm = self.new_state = None
        self.sparse = False
        self.route = "vector"


class StepPlans:
    """The checks of a step of :class:`toolkit.torch.optim.TorchOptimizer` (a base class of it):
    what :meth:`toolkit.torch.running.StepRuns.step` runs."""

    def _plan(self):
        """Every group's members with a gradient, checked, with the state each new one gets;
        the step's scalars checked (nothing is written)."""
        plans = []
        index = 0
        num_update = self._num_update
        for gi, group in enumerate(self.param_groups):
            inner = self._inners[gi]
            steady = self._steady.get(gi)
            if steady is not None and self._scheduler is None and \
                    self._tracked.generation == self._steady_generation:
                step = self._steady_step(steady, group["params"], inner, num_update,
                                         group.get("maximize", False))
                if step is not None:
                    num_update = max(num_update, step.top)
                    plans.append((gi, inner, step, step.scalars))
                    index += len(group["params"])
                    continue
            members = []
            for p in group["params"]:
                if p.grad is not None:
                    members.append(self._member(index, p, inner, group))
                index += 1
            if members:
                vector = inner.plans_by_scalars and all(m.route == "vector" for m in members)
                if not vector:
                    for m in members:
                        m.route = "each"
                scalars = None
                if self._scheduler is None:
                    # the step's scalars, and their errors, before anything is written. Not
                    # with a toolkit scheduler: MXNet's schedulers keep state (FactorScheduler
                    # decays its base_lr once asked for a later count), so they are read once,
                    # in MXNet's order, by the step itself
                    inner.num_update = num_update
                    scalars = inner.step_scalars([m.index for m in members])
                    num_update = max(num_update, int(scalars.t.max()))
                plans.append((gi, inner, members, scalars))
        return plans

    def _steady_step(self, steady, params, inner, num_update, maximize):
        """The checked :class:`SteadyStep` of a group on its steady path, or None (the general
        path then runs): its gradients, the step's scalars (checked as the general path checks
        them) and ``kernel_row``'s row per distinct ``(t, lr, wd)``, all of one rule. With
        ``maximize`` the rows are those of the negated gradients
        (:func:`toolkit.torch.maximize.negated_row`), or None where the rule has no such row; a
        group with a float32 master (bfloat16) steps on ``-grad`` itself, as its general path
        does, so that a NaN gradient's sign bit is that path's too."""
        negated = maximize and steady.weight is not None
        got = steady.gradients(params, negated)
        if got is None:
            return None
        grads, grad_ptrs = got
        inner.num_update = num_update
        scalars = inner.step_scalars(steady.kept)
        planned = self._planned_table(scalars, inner, maximize and not negated)
        if planned is None:
            return None
        return SteadyStep(steady, grads, grad_ptrs, scalars, *planned)

    @staticmethod
    def _planned_table(scalars, inner, maximize=False):
        """``(factory, rows, inverse, top)``: the row of ``inner.kernel_row`` for each distinct
        ``(t, lr, wd)`` of ``scalars``, where each position's row is (:func:`planned_rows`),
        and the largest count; with ``maximize`` the rows of the negated gradients
        (:func:`toolkit.torch.maximize.negated_row`). None unless every distinct triple has
        the same rule, with rows of one length (and, with ``maximize``, rows the rule can
        negate)."""
        t, lr, wd = scalars.t, scalars.lr, scalars.wd
        first, inverse = scalars.distinct()
        if inverse is None:  # one triple (the common case): its row as the table's one row
            top = int(t[0])
            factory, row = inner.kernel_row(top, float(lr[0]), float(wd[0]),
                                            **scalars.row_kwargs(0))
            if maximize:  # Python's negation: exact
                row = negated_row(factory, getattr(type(row), "_fields", None), tuple(row))
                if row is None:
                    return None
            return factory, np.array((row,), np.float64), None, top
        planned = []
        for j in first:
            j = int(j)
            factory, row = inner.kernel_row(int(t[j]), float(lr[j]), float(wd[j]),
                                            **scalars.row_kwargs(j))
            if planned and (factory is not planned[0][0] or len(row) != len(planned[0][1])):
                return None
            planned.append((factory, tuple(row), getattr(type(row), "_fields", None)))
        factory = planned[0][0]
        if maximize:  # Python's negation: exact
            rows = [negated_row(factory, names, row) for _, row, names in planned]
            if None in rows:
                return None
        else:
            rows = [row for _, row, _ in planned]
        rows, inverse = planned_rows(rows, inverse)
        # the largest count: each distinct triple's first position holds one of each count
        return factory, rows, inverse, max(int(t[j]) for j in first)

    def _member(self, index, p, inner, group):
        """The checked member ``index`` (``p`` with its gradient)."""
        grad = p.grad
        if grad.is_neg():  # its memory holds -grad (a conj().imag view): the values, copied
            grad = grad.resolve_neg()
        # a CPU parameter with state whose weight (address, dtype, shape, strides) and dense
        # gradient are as they were at its last full check: the facts of that check
        facts = self._facts.get(p)
        if facts is not None and p.data_ptr() == facts[0] and grad.layout is _STRIDED and \
                grad.is_cpu and grad.dtype is facts[1] and p.dtype is facts[1] and \
                grad.shape == facts[2] and p.shape == facts[2] and p.stride() == facts[3]:
            m = _Member(index, p, grad)
            m.route, m.perm = facts[4], facts[5]
            self._bind(m, inner, f"parameter {index}")
            return m
        where = f"parameter {index}"
        if p.layout != torch.strided:
            raise TypeError(f"{where} is a {p.layout} tensor; toolkit.torch updates dense "
                            "parameters")
        if p.device.type not in ("cpu", "cuda"):
            raise TypeError(f"{where} is on {p.device}; toolkit.torch updates CPU and CUDA "
                            "tensors")
        if grad.device != p.device:
            raise ValueError(f"{where}: its gradient is on {grad.device}, the parameter on "
                             f"{p.device}")
        if grad.dtype != p.dtype:
            raise TypeError(f"{where}: gradient dtype {grad.dtype} differs from the "
                            f"parameter's {p.dtype}")
        if p.dtype not in _DENSE_DTYPES + _HALF:
            raise TypeError(f"{where} has dtype {p.dtype}; toolkit.torch updates float16, "
                            "bfloat16 (with multi_precision=True), float32 and float64 tensors")
        if p.dtype == torch.bfloat16 and p.device.type != "cpu":
            raise TypeError(f"{where} is bfloat16 on {p.device}: toolkit.torch steps bfloat16 "
                            "parameters on the CPU only")
        if p.dtype == torch.bfloat16 and not inner.multi_precision:
            raise TypeError(f"{where} is bfloat16: the toolkit's kernels have no bfloat16 "
                            "arithmetic; pass multi_precision=True (a float32 master copy in "
                            "the state, the bfloat16 weight rounded from it each step)")
        m = _Member(index, p, grad)
        if grad.layout == torch.sparse_coo:
            if p.device.type != "cpu":
                raise TypeError(f"{where}: a sparse gradient on {p.device} is not supported "
                                "(CPU only)")
            if not p.is_contiguous():
                raise ValueError(f"{where}: a sparse gradient needs a contiguous parameter")
            if grad.sparse_dim() != 1 or tuple(grad.shape) != tuple(p.shape):
                raise ValueError(f"{where}: a sparse gradient must be sparse in its first "
                                 f"dimension only and shaped like the parameter {tuple(p.shape)}"
                                 f", got sparse_dim {grad.sparse_dim()}, shape "
                                 f"{tuple(grad.shape)}")
            mode = inner.row_sparse_mode(index)  # raises where the optimizer refuses one
            if mode == "dense":
                raise TypeError(
                    f"{where}: {type(inner).__name__} has no row-sparse update (it steps on "
                    "dense gradients only); use a dense gradient (nn.Embedding(sparse=False)) "
                    "or an optimizer with a lazy update (docs/sparse.md)")
            # its rows checked here, before any parameter of the step is written: duplicates
            # summed (torch's coalesce), then in range and strictly increasing (a tensor built
            # with is_coalesced=True is taken as it claims to be)
            m.grad = grad = grad.coalesce()
            _check_rows(where, grad.indices()[0], p.shape[0])
            m.sparse = True
            m.route = "each"
        elif grad.layout != torch.strided:
            raise TypeError(f"{where}: gradient layout {grad.layout} is not supported (dense "
                            "or sparse_coo)")
        elif tuple(grad.shape) != tuple(p.shape):
            raise ValueError(f"{where}: gradient shape {tuple(grad.shape)} differs from the "
                             f"parameter's {tuple(p.shape)}")
        if p.device.type == "cuda" or p.dtype == torch.float16 or (
                p.dtype == torch.bfloat16 and not p.is_contiguous()) or inner.holds_low(p):
            # (a contiguous bfloat16 CPU weight: the addressed bfloat16 kernel; moments held in
            # bfloat16 or int8: the inner optimizer's own update, which runs the held kernel)
            m.route = "each"
        if m.sparse and inner.holds_low(p):
            raise TypeError(f"{where}: a sparse gradient with state_dtype="
                            f"{inner.state_dtype!r}: held moments step dense gradients only; "
                            "use a dense gradient, or state_dtype=None for this group")
        if p.device.type == "cuda" and not p.is_contiguous():
            raise ValueError(f"{where} is not contiguous (strides {p.stride()}); on CUDA "
                             "toolkit.torch updates contiguous parameters only")
        if not p.is_contiguous() and not (inner.state_like_weight and not inner.takes_norms):
            raise ValueError(
                f"{where} is not contiguous (strides {p.stride()}); {type(inner).__name__} "
                "reads rows or whole-tensor norms in the tensor's logical order: pass "
                "p.contiguous() parameters (docs/torch.md, 'Memory order')")
        m.perm = memory_order(p)
        self._bind(m, inner, where)
        if p.device.type == "cpu" and not m.sparse:
            self._facts[p] = (p.data_ptr(), p.dtype, p.shape, p.stride(), m.route, m.perm)
        return m
