"""How a Trainer updates the parameters of one step whose gradients are fresh: the choice
between the per-parameter path (the reference backend, row-sparse gradients, an optimizer
without a kernel), the vectorised plan (an optimizer planned by ``(t, lr, wd)`` alone) and the
recorded kernel plan, and the non-finite check of the guard.

:class:`Updates` is a base class of ``Trainer``: its methods read the Trainer's parameters,
groups and index tables (``_params``, ``_groups``, ``_where``, ``_group_of``, ``_member_of``,
``_live``...) that ``Trainer.__init__`` builds.
"""
from __future__ import annotations

import numpy as np

from ..backends import arrays
from ..optimizers.batched import Kept
from .parameter import multipliers_version
from .plan import StepWork

__all__ = ["Updates"]


class Updates:
    """The update paths of a ``Trainer`` (a base class; see the module docstring)."""

    def _update_active(self, active):
        """Update the parameters of ``active`` (an int64 array of indices, increasing), their
        gradients then used."""
        opt = self._optimizer
        sparse = self._any_sparse and any(self._params[i].grad_stype == "row_sparse"
                                          for i in active.tolist())
        if self._backend == "reference" or sparse or not opt.has_kernel:
            # per-parameter steps write as they go: check them all first (an optimizer without
            # a kernel, one that overrides ``update`` only, steps this way too); the steps
            # read a schedule of the user's own at the counts the checks read it at, once
            with opt.schedule_read_once():
                self._dry_run(active.tolist(), scalars=opt.has_kernel)
                self._per_parameter_update(active.tolist())
        elif opt.scalar_launch is not None and not opt.takes_norms:
            self._vectorised_update(active)
        else:
            self._kernel_update(active.tolist())
        self._fresh_flags[self._live_flags if active is self._live else active] = False

    def _multipliers(self):
        """``(lr_mult, wd_mult)``: ``Kept`` float64 arrays by index of what the optimizer's
        ``param_dict`` gives each index (the parameters' ``lr_mult`` and ``wd_mult``), kept
        until a multiplier is set; None when the optimizer's ``param_dict`` is no longer the
        one this Trainer gave it (then the optimizer reads each index's)."""
        pd = self._optimizer.param_dict
        # the same dict, unchanged since this Trainer filled it (ParamDict counts its changes)
        if pd is not self._param_dict or pd.changes != self._param_dict_seen:
            return None
        version, mults = self._mults
        if version != multipliers_version():
            version = multipliers_version()
            # kept copies: the optimizer keeps what it made of them while they are these
            mults = (Kept([float(p.lr_mult) for p in self._params], np.float64),
                     Kept([float(p.wd_mult) for p in self._params], np.float64))
            self._mults = (version, mults)
        return mults

    def _vectorised_update(self, active):
        """The step of an optimizer whose launch is a function of ``(t, lr, wd)`` alone
        (``Optimizer.scalar_launch``): the scalars of every index as arrays
        (``Optimizer.step_scalars``), one planned launch per distinct ``(t, lr, wd)`` of a group,
        and a table of rows indexed by member: no Python work per parameter."""
        opt = self._optimizer
        every = active is self._live
        given = self._live_kept if every else active
        scalars = opt.step_scalars(given, multipliers=self._multipliers())
        works = []
        if len(self._groups) == 1:
            # every active index is a member of the one group: its own scalars
            ks = self._live_members if every else self._member_of[active]
            w = StepWork(self._groups[0], opt)
            w.plan_scalars(ks, active, scalars)
            works.append(w)
        else:
            groups = self._group_of[active]
            for n, g in enumerate(self._groups):
                # where the active members of g are in ``active`` (and ``scalars``), and in g
                at = np.flatnonzero(groups == n)
                if not at.size:
                    continue
                w = StepWork(g, opt)
                w.plan_scalars(self._member_of[active[at]], active[at],
                               scalars.subset(at))  # one triple stays one
                works.append(w)
        for w in works:  # a refusal here leaves nothing committed
            w.prepare()
        opt.commit_counts(given, scalars.t, scalars.host)
        for w in works:
            self.last_step_launches += w.execute()

    def _nonfinite(self, active):
        """The sorted indices of ``active`` (an int64 array, increasing) whose gradient holds a
        NaN or an infinity: one segmented pass per group over its flat gradient buffer (on
        CUDA, one device-to-host read of a flag per chunk), a row-sparse gradient's values on
        their own."""
        from ..backends import finite
        bad = []
        groups = self._group_of[active]
        for n, g in enumerate(self._groups):
            mine = active[groups == n]
            if not mine.size:
                continue
            stream = None
            if g.device == "cuda":
                from ..backends import cuda
                stream = cuda.resolve_stream(None, arrays.describe(g.data))
            ok = finite.finite_segments(g.grad, g.offsets, g.chunks, stream)
            ks = self._member_of[mine]
            if not self._any_sparse:
                bad.extend(mine[~ok[ks]].tolist())
                continue
            for i, k in zip(mine.tolist(), ks.tolist()):
                p = g.members[k][1]
                if p.grad_stype != "row_sparse":
                    if not ok[k]:
                        bad.append(i)
                elif not finite.all_finite(p.sparse_grad):
                    # checked as the update would check it: a bad gradient raises all the same
                    p.sparse_grad.check(arrays.describe(p.data(), "weight"))
                    bad.append(i)
        return sorted(bad)

    def _dry_run(self, active, scalars):
        """Every check the per-parameter steps of ``active`` (indices in order) would make
        before writing: their scalars (``Optimizer.step_scalars``, which commits nothing;
        not for an optimizer whose ``update`` is its own, ``scalars=False``: that reads what it
        reads, at the counts it chooses, as MXNet's Trainer leaves it to), and a row-sparse
        gradient's own checks and the optimizer's refusals of it."""
        opt = self._optimizer
        # reading the scalars reads the schedule: a refusal below puts its state back
        with opt.restored_on_error():
            if scalars:
                opt.step_scalars(active)
            for i in active:
                p = self._params[i]
                if p.grad_stype == "row_sparse":
                    p.sparse_grad.check(arrays.describe(p.data(), "weight"))
                    opt.row_sparse_mode(i)

    def _per_parameter_update(self, active):
        """One ``update_multi_precision`` per parameter, in index order: the reference backend,
        steps with a row-sparse gradient (each has rows of its own), and an optimizer without
        a kernel (its own ``update``)."""
        opt = self._optimizer
        backend = opt.backend
        # the Trainer picks the backend: the parameters' arrays say where they live
        opt.backend = "reference" if self._backend == "reference" else "auto"
        try:
            for i in active:
                g, k = self._where[i]
                p = self._params[i]
                grad = p.sparse_grad if p.grad_stype == "row_sparse" else p.grad_array
                opt.update_multi_precision(i, p.data(), grad, g.member_state(k))
                self.last_step_launches += 1
        finally:
            opt.backend = backend

    def _kernel_update(self, active):
        opt = self._optimizer
        work = {id(g): StepWork(g, opt) for g in self._groups}
        # planning writes no array: on an error, the optimizer's bookkeeping goes back too
        with opt.restored_on_error():
            norms = {i: opt.norm_inputs(i) for i in active}
            if any(v is not None for v in norms.values()):
                for w in work.values():  # LARS: every tensor's norms in one reduction per group
                    self.last_step_launches += w.precompute_norms(norms)
            for i in active:  # index order: shared optimizer state (num_update, Nadam's schedule)
                g, k = self._where[i]
                w = work[id(g)]
                wv, gv, sv = w.member(k)
                w.take(opt.planned_step(i, wv, gv, sv))
            for w in work.values():
                w.prepare()
        for g in self._groups:
            self.last_step_launches += work[id(g)].execute()
