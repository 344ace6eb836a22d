"""One group's step as the Trainer plans and runs it (:class:`StepWork`): the group's work arrays,
the launches each member's kernel step returns (``toolkit.backends.launches``), the vectorised plan
of an optimizer whose step reads only ``(t, lr, wd)``, the per-group first-pass reductions
(LARS's norms, LAMB's directions), and the execution: one segmented call when every member
returned the same launch on its slices of the same flat buffers; the members' launches together
(``launches.prepare_many``) when each member holds a state of its own (``state_dtype``); else the
launches one by one.

It shares a :class:`~toolkit.trainer.buffers.Group`'s private caches, which only the group and
its steps' work read and write.
"""
from __future__ import annotations

import numpy as np

from ..backends import arrays, cpu, launches
from ..backends.rules import DirectionPass
from ..optimizers.batched import StepScalars
from .buffers import Group, map_state, planned_rows, state_leaves

__all__ = ["StepWork"]


class StepWork:
    """One group's arrays for one step, the launches of its members, and their execution."""

    def __init__(self, g: Group, opt):
        self.g, self.opt = g, opt
        master, inner = g.split_state(opt, g.state)
        inner_layouts = [g.layout(a) for a in state_leaves(inner)]
        self.after = None
        self.mirror = None
        if g.device == "cuda":
            self.w, self.grad, self.s = (master if g.mp else g.data), g.grad, inner
            self.mirror = g.data if g.mp else None
        elif g.mp:
            self.w, self.grad, self.s = master, cpu.to_single(g.grad), inner

            def back():  # the float16 weights of the updated members, from their masters
                if len(self.members) == len(g.members):  # all of them: one conversion
                    cpu.to_half_into(g.data, master)
                    return
                for k in self.members:
                    a, b = int(g.offsets[k]), int(g.offsets[k + 1])
                    cpu.to_half_into(g.data[a:b], master[a:b])
            self.after = back
        elif g.dtype == np.float16:
            # float16 storage without a master copy: float32 arithmetic, rounded back after
            self.w, self.grad = cpu.to_single(g.data), cpu.to_single(g.grad)
            self.s = map_state(inner, cpu.to_single)

            def back():  # the updated members only, rounded back to float16
                if len(self.members) == len(g.members) and \
                        all(lay is None for lay in inner_layouts):  # all: one conversion each
                    cpu.to_half_into(g.data, self.w)
                    for dst, src in zip(state_leaves(inner), state_leaves(self.s)):
                        cpu.to_half_into(dst, src)
                    return
                for k in self.members:
                    a, b = int(g.offsets[k]), int(g.offsets[k + 1])
                    cpu.to_half_into(g.data[a:b], self.w[a:b])
                    for dst, src, lay in zip(state_leaves(inner), state_leaves(self.s),
                                             inner_layouts):
                        sa, sb = (a, b) if lay is None else (int(lay[0][k]), int(lay[0][k + 1]))
                        cpu.to_half_into(dst[sa:sb], src[sa:sb])
            self.after = back
        else:
            self.w, self.grad, self.s = g.data, g.grad, inner
        self.launcher = self._launcher_for(self.w, self.mirror)
        #: the launches the members' kernel steps returned, in member order
        self.calls: list = []
        #: id(member's weight view) -> the first passes' results the steps' requests read
        self.norms: dict = {}
        self.directions: dict = {}
        self.flats = [self.w, self.grad] + state_leaves(self.s) + list(g.host_flats.values())
        #: the layout of each work array (``Group.layout``; a per-step copy takes its source's)
        self.layouts = [None, None] + inner_layouts + [None] * len(g.host_flats)
        # id(view) -> (position in self.flats, member), and member -> its views (kept across
        # steps when every work array is one of the group's own buffers)
        self.owner, self._member_views = g.plan_maps(self.flats)
        self.members = {}
        self.calls_from = {}
        #: a vectorised plan (``plan_scalars``): (factory, positions in self.flats, members,
        #: their float64 rows), or None
        self.vector = None
        #: a held group's launches made ready to run together (:meth:`prepare`), or None
        self.prepared = None

    def _launcher_for(self, w, mirror):
        if self.g.device == "cuda":
            from ..backends import cuda
            return cuda.Launcher(arrays.describe(w), mirror=None if mirror is None
                                 else arrays.describe(mirror))
        return cpu.LAUNCHER

    def _views_of(self, k):
        """Member ``k``'s views ``(all, weight, grad, state)`` of the work arrays, registered so
        that launches can be mapped back to the flat buffers they slice."""
        views = self._member_views.get(k)
        if views is None:
            flat_views = []
            for j, flat in enumerate(self.flats):
                v = self.g.view(k, flat, self.layouts[j])
                self.owner[id(v)] = (j, k)
                flat_views.append(v)
            leaves = iter(flat_views[2:2 + len(state_leaves(self.s))])
            sv = map_state(self.s, lambda _: next(leaves))
            views = self._member_views[k] = (flat_views, flat_views[0], flat_views[1], sv)
        return views

    def member(self, k):
        """``(weight, grad, state)`` views of member ``k`` for the optimizer's planning."""
        _, wv, gv, sv = self._views_of(k)
        if self.g.held:  # its own state (``toolkit.trainer.held``), not a view of flat buffers
            sv = self.g.member_state(k)
        self.members[k] = (wv, gv, sv)
        self.calls_from[k] = len(self.calls)
        return wv, gv, sv

    def take(self, step):
        """Keep the launches of the kernel step ``step`` of the member last asked for
        (:meth:`member`), to run in :meth:`execute`; its requests are answered from the
        group's first passes (:meth:`precompute_norms`)."""
        launches.drive(step, self.calls.append, self._answer)

    def _answer(self, request):
        if type(request) is launches.Norms:
            try:
                return self.norms[id(request.weight)]
            except KeyError:  # pragma: no cover - norm_inputs and the optimizer disagree
                raise RuntimeError("the optimizer asked for norms the Trainer did not compute "
                                   "(its norm_inputs() and its step disagree)") from None
        ran, sums = self.directions.get(id(request.weight), (None, None))
        if ran != request.first:  # pragma: no cover - norm_inputs and the optimizer disagree
            raise RuntimeError("the optimizer asked for a first pass the Trainer did not run "
                               "(its norm_inputs() and its step disagree)")
        return sums

    def plan_scalars(self, ks, indices, scalars: StepScalars):
        """Plan members ``ks`` (increasing positions; their optimizer indices ``indices``) of
        an optimizer whose launch is a function of ``(t, lr, wd)`` alone, with those
        ``scalars`` (one entry per member): ``opt.kernel_row`` once per distinct ``(t, lr,
        wd)``, told apart by their bits. When they are one rule over the group's flat weight,
        gradient and state buffers, every member takes the row of its ``(t, lr, wd)`` and
        :meth:`execute` runs one segmented call from that table (made with numpy, no Python
        work per member); in a held group (each member's state its own) every member's launch
        takes its triple's row over its own arrays; else every member is planned on its
        own."""
        opt = self.opt
        kind = opt.scalar_launch
        t, lr, wd = scalars
        first, inverse = scalars.distinct()
        planned = [opt.kernel_row(int(t[j]), float(lr[j]), float(wd[j]), **scalars.row_kwargs(j))
                   for j in first]
        factory, row0 = planned[0]
        # the rule's arrays: the weight, the gradient and opt.state_arrays of the state, at
        # their positions among the work arrays
        position = {id(a): 2 + j for j, a in enumerate(state_leaves(self.s))}
        states = [position.get(id(a)) for a in opt.state_arrays(self.s)]
        layout = None if None in states or self.g.held else (0, 1, *states)
        if layout is not None and self._fits(kind, layout) and all(
                f is factory and len(row) == len(row0) for f, row in planned):
            rows, inverse = planned_rows([tuple(row) for _, row in planned], inverse)
            self.vector = (kind, factory, layout, ks, rows if inverse is None else rows[inverse])
            if self.after is not None:  # it rounds back the members updated
                self.members = dict.fromkeys(ks.tolist())
            return
        if kind == "rule" and self.g.held and self.g.device != "cuda" and all(
                f is factory and len(row) == len(row0) for f, row in planned):
            # states of their own per member: each member's launch as its kernel step makes
            # it (the rule over its own state arrays, with the row of its (t, lr, wd), planned
            # once per distinct triple above, and its rounding key), no Python step per member
            for j, k in enumerate(ks.tolist()):
                wv, gv, sv = self.member(k)
                row = planned[0 if inverse is None else int(inverse[j])][1]
                self.calls.append(launches.Launch(
                    "rule", factory, wv, gv, tuple(opt.state_arrays(sv)), row,
                    opt.rounding_key(int(indices[j]), int(t[j]))))
            return
        # not one rule over the flat buffers: every member planned on its own
        for j, k in enumerate(ks.tolist()):
            wv, gv, sv = self.member(k)
            self.take(opt.step_launches(int(indices[j]), wv, gv, sv, int(t[j]), float(lr[j]),
                                        float(wd[j])))

    def prepare(self):
        """Once every member is planned and before any count is committed: a held group's
        launches (states of their own per member, ``toolkit.trainer.held``), one per member,
        checked and made ready to run together (``launches.prepare_many``: one parallel call
        over all their blocks); a refusal raises here, with nothing committed or written, a
        kind of launch the group's launcher does not run among them (Adafactor's on CUDA)."""
        g = self.g
        for kind in {self.vector[0]} if self.vector is not None else \
                {c.kind for c in self.calls}:
            self.launcher.check_kind(kind)
        if g.held and g.device != "cuda" and self.vector is None and self.calls and \
                len(self.calls) == len(self.calls_from):
            self.prepared = launches.prepare_many(
                self.calls, cpu.LAUNCHER,
                [f"parameter {g.members[k][1].name!r}"
                 for k in sorted(self.calls_from, key=self.calls_from.get)])

    def precompute_norms(self, norms):
        """LARS norms of every member that needs them, in one reduction over the flat buffers,
        kept for the members' steps to read. Returns the calls made."""
        if any(isinstance(v, DirectionPass) for v in norms.values()):
            return self.precompute_directions(norms)
        g = self.g
        rows = np.zeros((len(g.members), 2))
        for k, (i, _) in enumerate(g.members):
            bs = norms.get(i)
            if bs is not None:
                rows[k] = (1.0, float(bs))
        if not rows[:, 0].any():
            return 0
        cum = g.host_flats.get("cum") if rows[:, 1].max() > 0 else None
        out = self.launcher.group_norms(self.w, self.grad, cum, rows, g)
        for k in range(len(g.members)):
            if rows[k, 0]:
                self.norms[id(self._views_of(k)[1])] = (float(out[k, 0]),
                                                                 float(out[k, 1]))
        return 1

    def precompute_directions(self, passes):
        """The first pass of a two-pass step (LAMB: ``rules.DirectionPass``) for every member
        that has one, in one segmented call over the flat buffers that writes nothing: each
        member's ``(sum w^2, sum u^2)`` kept for the planning of the second pass (one
        segmented call too). The chunks and the order of every addition are a single
        tensor's (``order.DIRECTION_CHUNK``), so the sums equal the per-tensor ones, bit for bit.
        Returns the calls made."""
        g = self.g
        members = [(k, passes[i]) for k, (i, _) in enumerate(g.members)
                   if isinstance(passes.get(i), DirectionPass)]
        if not members:
            return 0
        first = members[0][1]
        if any((p.direction, len(p.hyper)) != (first.direction, len(first.hyper))
               for _, p in members):
            raise RuntimeError("the members of a group asked for different first passes")
        compute = np.dtype(np.float32) if g.dtype == np.float16 else np.dtype(g.dtype)
        table = np.zeros((len(g.members), 1 + len(first.hyper)), compute)
        for k, p in members:
            table[k, 0] = 1
            table[k, 1:] = np.array(p.hyper, np.float64)  # rounded as a single call rounds
        out = self.launcher.group_directions(first.direction, self.w, self.grad,
                                             state_leaves(self.s), table, g)
        for k, p in members:
            self.directions[id(self._views_of(k)[1])] = (
                p, (float(out[k, 0]), float(out[k, 1])))
        return 1

    def execute(self):
        """Run the members' launches: one segmented call when every member returned the same
        one launch on slices of the same flat buffers; a held group's as :meth:`prepare` made
        them ready; else the launches one by one. Returns the number of kernel calls."""
        ran = 0
        calls = self.calls
        if self.vector is not None:
            kind, factory, layout, ks, rows = self.vector
            flats = [self.flats[j] for j in layout]
            # a factored step's rows are float64 (each value rounded where its rule rounds it)
            dtype = np.float64 if kind == "factored" else self._compute_dtype()
            if kind == "rule" and rows.shape[0] == 1 and len(ks) == len(self.g.members) and \
                    self.g.device != "cuda":
                # every member updated with the same row: one segment over the whole flat
                # buffers (an element-wise rule gives each element what its member's segment
                # would, bit for bit), no work per member in the kernel
                table = np.empty((1, 1 + rows.shape[1]), self._compute_dtype())
                table[0, 0] = 1
                table[0, 1:] = rows[0]  # each float64 rounded to the dtype, as a single call does
                self._launch_table("rule", factory, flats, table, chunks=self.g.whole_chunks())
                ran = 1
            else:
                table = np.zeros((len(self.g.members), 1 + rows.shape[1]), dtype)
                table[ks, 0] = 1
                table[ks, 1:] = rows  # each float64 rounded to the dtype, as a single call does
                self._launch_table(kind, factory, flats, table)
                ran = 1
        elif calls:
            plan = None if self.prepared is not None else self._segmented_plan()
            if self.prepared is not None:  # a held group's launches, checked together
                ran = self.prepared()
            elif plan is not None:
                self._run_segmented(*plan)
                ran = 1
            else:
                for k in sorted(self.calls_from):
                    end = self._next_start(k)
                    real = self._real_launcher(k)
                    for call in calls[self.calls_from[k]:end]:
                        launches.run_launch(call, real)
                        ran += 1
        if self.after is not None:
            self.after()
        return ran

    def _real_launcher(self, k):
        wv = self._views_of(k)[1]
        mirror = None if self.mirror is None else self.g.view(k, self.mirror)
        return self._launcher_for(wv, mirror) if self.g.device == "cuda" else cpu.LAUNCHER

    def _next_start(self, k):
        later = [v for kk, v in self.calls_from.items() if kk > k]
        return min(later) if later else len(self.calls)

    def _segmented_plan(self):
        """``(kind, factory, flats, calls)`` (``calls``: member -> its ``launches.Launch``)
        when the members' launches fit one segmented call: one launch per member, the same
        rule, on member ``k``'s slices of the same flat buffers."""
        calls = self.calls
        if len(calls) != len(self.members) or len({c.kind for c in calls}) != 1:
            return None
        kind, factory = calls[0].kind, calls[0].factory
        if kind not in launches.SEGMENTED:  # a matrix step: one launch per weight
            return None
        layout = None
        rows = {}
        for k in sorted(self.members):
            call = calls[self.calls_from[k]]
            if call.factory is not factory:
                return None
            owners = [self.owner.get(id(a)) for a in (call.weight, call.grad) + tuple(call.states)]
            if any(o is None or o[1] != k for o in owners):
                return None
            pos = tuple(o[0] for o in owners)
            if layout is None:
                layout = pos
            elif pos != layout:
                return None
            if kind == "rows" and call.rows is not None:
                return None  # a lazy row-sparse step: rows of its own
            rows[k] = call
        if len({len(c.hyper) for c in rows.values()}) != 1 or (
                kind == "noise" and len({len(c.aux) for c in rows.values()}) != 1):
            return None
        if not self._fits(kind, layout):
            return None
        return kind, factory, [self.flats[j] for j in layout], rows

    def _fits(self, kind, positions):
        """Whether the work arrays at ``positions`` (weight, grad, states) are laid out as the
        segmented kernel of ``kind`` reads them: every array like the weight, except a row
        rule's history, one value per row of each member."""
        g = self.g
        like_weight = [self.layouts[j] for j in positions]
        if kind == "rows":
            history = like_weight.pop(2) if len(like_weight) == 3 else None
            if history is None or not np.array_equal(history[0], g.rows_layout().row_offsets):
                return False
        if kind == "factored":  # the row, column and vector statistics, laid out per member
            if len(like_weight) != 5:
                return False
            fl = g.factored_layout()
            for lay, col in zip(like_weight[2:], (4, 5, 6)):
                size = (fl.r_size, fl.c_size, fl.v_size)[col - 4]
                offsets = np.append(fl.seg[:, col], size)
                if lay is None or not np.array_equal(lay[0], offsets):
                    return False
            like_weight = like_weight[:2]
        return all(lay is None or np.array_equal(lay[0], g.offsets) for lay in like_weight)

    def _compute_dtype(self):
        return np.dtype(np.float32) if self.g.dtype == np.float16 else np.dtype(self.g.dtype)

    def _run_segmented(self, kind, factory, flats, rows):
        n = len(self.g.members)
        first = next(iter(rows.values()))
        # a factored step's rows are float64 (each value rounded where its rule rounds it)
        table = np.zeros((n, 1 + len(first.hyper)),
                         np.float64 if kind == "factored" else self._compute_dtype())
        ks = list(rows)
        table[ks, 0] = 1
        # one conversion of all rows: each float64 rounded to the dtype, as a single call does
        table[ks, 1:] = np.array([rows[k].hyper for k in ks], np.float64)
        keys = aux = None
        if kind == "noise":
            keys = np.zeros(n, np.uint64)
            aux = np.zeros((n, len(first.aux)), np.float64)
            for k, row in rows.items():
                keys[k] = np.uint64(row.key)
                aux[k] = row.aux
        self._launch_table(kind, factory, flats, table, keys, aux)

    def _launch_table(self, kind, factory, flats, table, keys=None, aux=None, chunks=None):
        """One segmented call of ``kind`` over the flat buffers ``flats`` (weight, grad,
        states) with one ``(active, *hp)`` row of ``table`` per member, by the group's
        launcher; ``chunks``: a CPU rule's chunk table other than the members'
        (``Group.whole_chunks``: one segment, one row)."""
        self.launcher.run_table(kind, factory, flats, table, self.g, keys, aux, chunks)
