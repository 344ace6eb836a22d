"""``step()`` of a ``toolkit.torch`` optimizer and the runs of its checked plan (:class:`StepRuns`,
a base class of :class:`toolkit.torch.optim.TorchOptimizer`): a steady group in one kernel call
(``toolkit.torch.steady``), a vectorised group as tables of rows over the tensors of each dtype
(:func:`toolkit.torch.rule_table.run_rule_table`), any other index by index through the inner
optimizer's own kernel steps, their launches run together (moments held low: one parallel call)
or, for a sparse gradient or a CUDA parameter, its own update; :class:`torch_threads` gives
numba's kernels torch's thread count.
"""
from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import torch

from ..backends import cpu, launches
from ..sparse import RowSparse
from .rule_table import run_rule_table, run_rule_table_mp
from .states import ordered
from .steady import SteadyGroup, SteadyStep

__all__ = ["StepRuns", "torch_threads"]

_NUMBA_MAX = numba.config.NUMBA_NUM_THREADS


#: whether numba's thread pool was launched by :func:`_launch_numba_pool` (once a process)
_POOL = [False]


def _launch_numba_pool():
    """Launch numba's thread pool (its first ``get_num_threads`` does), keeping torch's
    thread count: numba's OpenMP layer, launched, sets the OpenMP runtime it shares with torch
    to ``NUMBA_NUM_THREADS`` threads, which ``torch.get_num_threads()`` then reports (a
    ``torch.set_num_threads(1)`` made before a process's first step was lost)."""
    threads = torch.get_num_threads()
    numba.get_num_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    _POOL[0] = True


class torch_threads:
    """Within the block numba's parallel kernels use ``torch.get_num_threads()`` threads (at
    most ``NUMBA_NUM_THREADS``), as torch's own CPU kernels would; numba's setting (per
    thread) is put back after. torch's own setting is left as it was (:func:`_launch_numba_pool`)."""
    __slots__ = ("old",)

    def __enter__(self):
        if not _POOL[0]:
            _launch_numba_pool()
        want = min(torch.get_num_threads(), _NUMBA_MAX)
        old = numba.get_num_threads()
        self.old = old if old != want else None
        if self.old is not None:
            numba.set_num_threads(want)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            numba.set_num_threads(self.old)


class _TableRun(NamedTuple):
    """One table of rows run over the tensors of one dtype (:func:`run_rule_table`)."""
    factory: object
    dtype: np.dtype
    tensors: list
    table: np.ndarray


class _SingleRun(NamedTuple):
    """A member whose step is not one rule call on its own arrays: launched on its own."""
    member: object
    arrays: tuple
    t: int
    lr: float
    wd: float


class StepRuns:
    """``step()`` of :class:`toolkit.torch.optim.TorchOptimizer` (a base class of it): the
    checks (:class:`toolkit.torch.planning.StepPlans`), then the runs."""

    @torch.compiler.disable  # under torch.compile: a graph break, the step runs eagerly
    def step(self, closure=None):
        """One update of every parameter whose ``.grad`` is not None (the closure, if given,
        runs first under ``torch.enable_grad()`` and its value is returned). The CPU kernels
        run on ``torch.get_num_threads()`` threads (at most numba's ``NUMBA_NUM_THREADS``)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._follow_groups()
        self._follow_positions()
        self._take_state_changes()
        undo, synced = self._sync_options()
        try:
            plans = self._plan()
        except BaseException:
            undo()
            raise
        for gi in synced:  # the options are the inner ones now
            self._synced[gi] = self._snapshot(self.param_groups[gi])
        if all(type(members) is SteadyStep and members.steady.serial
               for _, _, members, _ in plans):
            self._run(plans)  # serial kernels only: no thread count to follow
        else:
            with torch_threads():
                self._run(plans)
        return loss

    def _run(self, plans):
        for gi, inner, members, scalars in plans:
            group = self.param_groups[gi]
            if isinstance(members, SteadyStep):
                inner.num_update = self._num_update
                inner.commit_counts(members.steady.kept, scalars.t, scalars.host)
                members.steady.run(members)
                self._num_update = inner.num_update
                continue
            maximize = group.get("maximize", False)
            for m in members:
                if m.new_state is not None:
                    self._install(m.p, *m.new_state)
            inner.num_update = self._num_update
            if members[0].route == "vector":
                self._run_vector(inner, members, scalars, maximize)
            else:
                self._run_each(inner, members, maximize, scalars)
            self._num_update = inner.num_update
            self._steady.pop(gi, None)
            if members[0].route == "vector" and len(members) == len(group["params"]) and \
                    self._scheduler is None:  # the next step may take the steady path
                steady = SteadyGroup.build(group["params"], members[0].index, inner,
                                           self._held_views)
                if steady is not None:
                    self._steady[gi] = steady
        # the steady groups hold for the state as this step leaves it
        self._steady_generation = self._seen_generation = self._tracked.generation
        if self._scheduler is not None:  # every group shows the rate at num_update
            for gi, (group, inner) in enumerate(zip(self.param_groups, self._inners)):
                inner.num_update = self._num_update
                group["lr"] = self._synced[gi]["lr"] = inner.learning_rate

    def _run_each(self, inner, members, maximize, scalars):
        """Index by index through the inner optimizer's own update (each commits its count);
        with moments held low (``state_dtype``) and every member a dense float32, float64 or
        bfloat16 CPU tensor, :meth:`_run_held`."""
        if inner.state_dtype is not None and not any(
                m.sparse or m.p.device.type == "cuda" or m.p.dtype == torch.float16
                for m in members):
            self._run_held(inner, members, maximize, scalars)
            return
        for m in members:
            self._update_one(inner, m, -m.grad if maximize else m.grad)

    def _run_held(self, inner, members, maximize, scalars):
        """A group whose optimizer holds moments low, of dense float32, float64 or bfloat16
        CPU tensors: each member's launch planned, all checked together before any count is
        committed (``launches.prepare_many``: a refusal leaves nothing changed), then run in one
        parallel call over every block of theirs, then each bfloat16 weight rounded from its
        master. With the step's ``scalars`` (no toolkit
        schedule) of an optimizer that plans by them, each member's launch is its rule over its
        own arrays with the row of its ``(t, lr, wd)`` (``kernel_row`` once per distinct
        triple) and its rounding key, the counts committed at once; else each member's kernel
        step in index order (``planned_step``: each commits its count; an error puts every
        count back)."""
        arrays, masters = [], []
        for m in members:  # (weight, grad, state) of each: its float32 master's for bfloat16
            grad = -m.grad if maximize else m.grad
            state = self._bindings[m.p].toolkit_state
            if m.p.dtype == torch.bfloat16:
                _, w, state = state
                masters.append((m, w))
                arrays.append((w, ordered(grad, m.perm).float().numpy(), state))
            else:
                arrays.append((ordered(m.p.detach(), m.perm).numpy(),
                               ordered(grad, m.perm).numpy(), state))
        names = [f"parameter {m.index}" for m in members]
        planned = self._planned_table(scalars, inner) if scalars is not None and \
            inner.plans_by_scalars else None
        kept = []
        if planned is not None:
            factory, rows, inverse, _ = planned
            for j, (m, (w, g, state)) in enumerate(zip(members, arrays)):
                kept.append(launches.Launch(
                    "rule", factory, w, g, tuple(inner.state_arrays(state)),
                    rows[0 if inverse is None else inverse[j]],
                    inner.rounding_key(m.index, int(scalars.t[j]))))
            run = launches.prepare_many(kept, cpu.LAUNCHER, names)  # checked: it may refuse
            inner.commit_counts([m.index for m in members], scalars.t, scalars.host)
        else:
            with inner.restored_on_error():
                each = [launches.drive(inner.planned_step(m.index, w, g, state), kept.append,
                                       lambda request: launches.answer(request, cpu.LAUNCHER))
                        for m, (w, g, state) in zip(members, arrays)]
                # together when each member's step is one launch; else in order, one by one
                run = launches.prepare_many(kept, cpu.LAUNCHER, names) \
                    if each.count(1) == len(each) else launches.in_order(kept, cpu.LAUNCHER)
        run()
        with torch.no_grad():  # rounded to nearest even
            for m, master in masters:
                ordered(m.p.detach(), m.perm).copy_(torch.from_numpy(master))

    def _update_one(self, inner, m, grad):
        """Member ``m`` through the inner optimizer's own update (it commits the count)."""
        state = self._bindings[m.p].toolkit_state
        if m.sparse:
            grad = grad.coalesce()  # duplicate rows summed
            rows = grad.indices()[0].numpy().astype(np.int64)
            values = grad.values()
            if m.p.dtype == torch.bfloat16:
                values = values.float()
            g = RowSparse(rows, values.numpy(), tuple(m.p.shape))
        elif m.p.device.type == "cuda":
            g = grad
        elif m.p.dtype == torch.bfloat16:
            g = ordered(grad, m.perm).float().numpy()
        else:
            g = ordered(grad, m.perm).numpy()
        if m.p.device.type == "cuda":
            stream = torch.cuda.current_stream(m.p.device)
            inner.update_multi_precision(m.index, m.p.detach(), g, state, stream=stream)
        elif m.p.dtype == torch.bfloat16:
            _, master, inner_state = state
            if m.sparse:
                g = RowSparse(g.indices, g.values, master.shape)
            inner.update(m.index, master, g, inner_state)
            with torch.no_grad():  # rounded to nearest even
                ordered(m.p.detach(), m.perm).copy_(torch.from_numpy(master))
        else:
            inner.update_multi_precision(m.index, ordered(m.p.detach(), m.perm).numpy(), g,
                                         state)

    def _run_vector(self, inner, members, scalars, maximize):
        """One planned launch per distinct ``(t, lr, wd)``, its rows run as a table over the
        tensors of each dtype (:func:`run_rule_table`); the counts committed once."""
        if scalars is None:
            scalars = inner.step_scalars([m.index for m in members])
        t, lr, wd = scalars.t, scalars.lr, scalars.wd
        bindings = self._bindings
        names = None  # one layout a group
        tensors = []
        for m in members:
            grad = -m.grad if maximize else m.grad
            if m.p.dtype == torch.bfloat16:  # contiguous: (master, grad, *states, weight)
                binding = bindings[m.p]
                # (weight, master, *states), kept as the float dtypes' below
                held = binding.views(m.p, lambda t, perm=m.perm: ordered(t, perm), (
                    "weight32", *(n for n in binding.named if n != "weight32")))
                tensors.append((held[1], grad.contiguous(), *held[2:], held[0]))
                continue
            if names is None:
                names = self._names(inner, bindings[m.p].toolkit_state)
            # the weight and the bound state in memory order, kept while the weight's storage
            # is the same (an assignment to p.data makes them again)
            w_and_states = bindings[m.p].views(m.p, lambda t, perm=m.perm: ordered(t, perm),
                                               names)
            tensors.append((w_and_states[0], ordered(grad, m.perm)) + w_and_states[1:])
        by_dtype = {}
        for j, m in enumerate(members):
            by_dtype.setdefault(m.p.dtype, []).append(j)
        work = []  # in order: a _TableRun per dtype, or a _SingleRun per member on its own
        for dtype, js in by_dtype.items():
            js = np.array(js)
            planned = self._planned_table(scalars.subset(js), inner)
            if planned is not None:
                factory, rows, inverse, _ = planned
                # bfloat16: a float32 table (the float32 master's rule)
                np_dtype = np.dtype(np.float32) if dtype == torch.bfloat16 else \
                    np.dtype(str(dtype).replace("torch.", ""))
                table = np.ones((len(js), 1 + rows.shape[1]), np_dtype)
                # each rounded to the dtype, as a single call rounds
                table[:, 1:] = rows if inverse is None else rows[inverse]
                work.append(_TableRun(factory, "bfloat16" if dtype == torch.bfloat16 else
                                      np_dtype, [tensors[j] for j in js.tolist()], table))
            else:  # not one rule call on the member's own arrays: each member on its own
                if scalars.host is not None:  # pragma: no cover - one rule, one row length
                    raise RuntimeError(f"{type(inner).__name__} keeps host scalars, committed "
                                       "with the counts, but its rows are not one table")
                for j in js.tolist():
                    work.append(_SingleRun(members[j], tensors[j], int(t[j]), float(lr[j]),
                                           float(wd[j])))
        inner.commit_counts([m.index for m in members], t, scalars.host)
        for run in work:
            if isinstance(run, _TableRun):
                if run.dtype == "bfloat16":
                    run_rule_table_mp(run.factory, run.tensors, run.table, "bfloat16")
                else:
                    run_rule_table(run.factory, run.dtype, run.tensors, run.table)
            elif run.member.p.dtype == torch.bfloat16:  # the float32 step, rounded after
                m, arrays = run.member, run.arrays
                _, master, inner_state = self._bindings[m.p].toolkit_state
                inner.launch_step(m.index, master, arrays[1].float().numpy(), inner_state,
                                  run.t, run.lr, run.wd, cpu.LAUNCHER)
                with torch.no_grad():  # rounded to nearest even
                    m.p.detach().copy_(torch.from_numpy(master))
            else:
                m, arrays = run.member, run.arrays
                inner.launch_step(m.index, arrays[0].numpy(), arrays[1].numpy(),
                                  self._bindings[m.p].toolkit_state, run.t, run.lr, run.wd,
                                  cpu.LAUNCHER)
