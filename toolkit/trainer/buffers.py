"""Flat buffers: the weights, gradients and optimizer states of one (dtype, device) group in
contiguous 1-D arrays, each Parameter's arrays views into them. A step takes what each
parameter's optimizer step launches (its own host code computes every per-parameter scalar)
and runs the group in **one** segmented call with one row of hyperparameters per parameter
(``toolkit.trainer.plan``): the rows are the tuples the per-parameter calls would pass, so the
result is the same, bit for bit.
"""
from __future__ import annotations


import numpy as np

from ..backends import arrays, order
from .held import per_member

__all__ = ["Group", "map_state", "planned_rows", "state_leaves"]


def map_state(state, f):
    """Apply ``f`` to every array of a (nested) state structure, keeping None and tuples."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(map_state(s, f) for s in state)
    return f(state)


def state_leaves(state):
    """The arrays of a (nested) state structure, in order."""
    if state is None:
        return []
    if isinstance(state, tuple):
        out = []
        for s in state:
            out.extend(state_leaves(s))
        return out
    return [state]


def planned_rows(rows, inverse):
    """``(rows, inverse)`` of a plan (one float64 row per distinct ``(t, lr, wd)``, and each
    member's position among them, or None for one row) with rows that are all equal, bit for
    bit, made one (distinct scalars, the same row: a rule that does not read ``t``)."""
    rows = np.array(rows, np.float64)
    if inverse is not None and (rows.view(np.int64) == rows[:1].view(np.int64)).all():
        return rows[:1], None
    return rows, inverse


class Group:
    """The parameters of one (dtype, device) group, their flat buffers and state."""

    def __init__(self, key, members, optimizer):
        self.dtype, self.device = key
        self.members = members                      # [(index, Parameter)] in index order
        sizes = [int(np.prod(p.shape, dtype=np.int64)) for _, p in members]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.size = int(self.offsets[-1])
        host_data = np.concatenate([np.asarray(arrays.to_host(p.data()), self.dtype).reshape(-1)
                                    for _, p in members]) if members else np.zeros(0, self.dtype)
        self.data = self._alloc(host_data)
        self.grad = self._alloc(np.concatenate(
            [np.asarray(arrays.to_host(p.grad_array), self.dtype).reshape(-1) for _, p in members]))
        #: the layout of each state array of the whole-group state, by id: ``None`` for one
        #: shaped like the weight (``Optimizer.state_like_weight``: one ``create_state`` over the
        #: flat weight makes them), else ``(offsets, shapes)`` of the members' arrays laid end
        #: to end (GroupAdaGrad's ``(rows, 1)`` history: each member's state is made for its
        #: own weight and copied into one flat buffer per state array)
        self._layouts: dict = {}
        #: whether each member's state is its own (``toolkit.trainer.held``: moments held low,
        #: made per member so that no block straddles two parameters); then ``state`` is None
        #: and ``views[k]`` is member ``k``'s state
        self.held = per_member(optimizer, members)
        if self.held:
            self.state = None
        elif optimizer.state_like_weight:
            self.state = optimizer.create_state_multi_precision(0, self.data)
            for a in state_leaves(self.state):
                if arrays.describe(a).shape != (self.size,):
                    raise ValueError(
                        f"{type(optimizer).__name__}'s state arrays are not shaped like the "
                        "weight; the Trainer's flat buffers need that (an optimizer whose "
                        "state is shaped otherwise sets state_like_weight = False)")
        else:
            self.state = self._flatten_states(optimizer)
        self.mp = optimizer.uses_master(self.data)
        # per-index arrays the optimizer keeps outside its state (LBSGD's accumulator): flat
        # buffers in the arithmetic dtype, views bound to the optimizer
        compute = np.float32 if self.dtype == np.float16 else self.dtype
        self.host_flats = {name: self._alloc(np.zeros(self.size, compute))
                           for name in optimizer.host_buffers()}
        self._persistent = {id(a) for a in [self.data, self.grad] + state_leaves(self.state)
                            + list(self.host_flats.values())}
        self._views: dict = {}
        self._member_cache: dict = {}
        # the views each parameter sees; the weight and gradient views replace its own arrays
        self.views = []
        for k, (index, p) in enumerate(members):
            p.adopt(self.view(k, self.data), self.view(k, self.grad))
            self.views.append(optimizer.create_state_multi_precision(index, self.view(
                k, self.data)) if self.held else map_state(self.state,
                                                           lambda a, k=k: self.view(k, a)))
        for name, flat in self.host_flats.items():
            for k, (index, _) in enumerate(members):
                optimizer.bind_host_buffer(name, index, self.view(k, flat))
        if self.device == "cuda":
            from ..backends import cuda
            self.chunks = cuda.cuda.to_device(cuda.chunk_table(self.offsets))
            self.offsets_device = cuda.cuda.to_device(self.offsets)
            self.uploads = [cuda.TableUpload((len(members), 1), np.float32) for _ in range(3)]
        else:
            self.chunks = order.chunk_table(self.offsets)

    # --- helpers ---------------------------------------------------------------------------
    def _alloc(self, host):
        if self.device == "cuda":
            from numba import cuda
            return cuda.to_device(np.ascontiguousarray(host))
        return np.ascontiguousarray(host)

    def _flatten_states(self, optimizer):
        """The whole-group state of an optimizer whose state is not shaped like the weight:
        each member's ``create_state_multi_precision`` for its own weight, and every state
        array laid end to end with the same array of the other members, in one flat buffer
        (its layout in :attr:`_layouts`)."""
        if not self.members:
            return None
        skeleton, shapes, dtypes, hosts = None, [], None, []
        for k, (index, _) in enumerate(self.members):  # one member's state alive at a time
            st = optimizer.create_state_multi_precision(index, self._slicer(k, None)(self.data))
            leaves = [arrays.describe(a) for a in state_leaves(st)]
            if skeleton is None:
                skeleton, dtypes = map_state(st, lambda _: 0), [d.dtype for d in leaves]
            if [d.dtype for d in leaves] != dtypes:
                raise ValueError(f"{type(optimizer).__name__} made states of different "
                                 "structures for the members of one group; the Trainer cannot "
                                 "lay them out")
            shapes.append([tuple(d.shape) for d in leaves])
            hosts.append([np.asarray(arrays.to_host(a)).reshape(-1) for a in state_leaves(st)])
            del st
        flats = []
        for j in range(len(dtypes)):
            member_shapes = [row[j] for row in shapes]
            sizes = [int(np.prod(shape, dtype=np.int64)) for shape in member_shapes]
            offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            flat = self._alloc(np.concatenate([row[j] for row in hosts]))
            for row in hosts:
                row[j] = None  # the host copies go as their flat buffer is made
            self._layouts[id(flat)] = (offsets, member_shapes)
            flats.append(flat)
        it = iter(flats)
        return map_state(skeleton, lambda _: next(it))

    def layout(self, arr):
        """The layout of one of the group's flat buffers: None for the weight's (the weight,
        the gradient, every state array of an optimizer whose state is shaped like the weight),
        else ``(offsets, shapes)`` (:meth:`_flatten_states`; a multi-precision master laid out
        there has the weight's offsets)."""
        return self._layouts.get(id(arr))

    def _slicer(self, k, layout):
        if layout is None:
            offsets, shape = self.offsets, self.members[k][1].shape
        else:
            offsets, shape = layout[0], layout[1][k]
        a, b = int(offsets[k]), int(offsets[k + 1])
        return lambda arr: arr[a:b].reshape(shape)

    def view(self, k, arr, layout=None):
        """Member ``k``'s view of the flat array ``arr``; views of the group's own buffers are
        made once (slicing a device array costs tens of microseconds), views of per-step
        copies each time. A per-step copy of a buffer laid out otherwise than the weight is
        given that buffer's ``layout``."""
        if id(arr) not in self._persistent:
            return self._slicer(k, layout)(arr)
        key = (k, id(arr))
        v = self._views.get(key)
        if v is None:
            v = self._views[key] = self._slicer(k, self.layout(arr))(arr)
        return v

    def plan_maps(self, flats):
        """The ``(owner, member views)`` dicts of a step plan over the work arrays ``flats``:
        kept across steps (one pair per list of arrays) when every one of them is a buffer of
        this group, fresh ones when one is a per-step copy."""
        key = tuple(id(f) for f in flats)
        if all(k in self._persistent for k in key):
            return self._member_cache.setdefault(key, ({}, {}))
        return {}, {}

    def direction_chunks(self, device=False):
        """The chunk table of a first pass over this group (``order.chunk_table`` with
        ``order.DIRECTION_CHUNK``: the chunks of a single tensor's pass), made on first use;
        ``device=True``: its copy on the group's GPU."""
        host = self.__dict__.get("_direction_chunks")
        if host is None:
            host = self._direction_chunks = order.chunk_table(self.offsets, order.DIRECTION_CHUNK)
        if not device:
            return host
        dev = self.__dict__.get("_direction_chunks_device")
        if dev is None:
            from numba import cuda
            dev = self._direction_chunks_device = cuda.to_device(host)
        return dev

    def whole_chunks(self):
        """The chunk table of this group's flat buffers taken as one segment
        (``order.single_chunks``: pieces of ``order.CHUNK`` elements that cross the members'
        boundaries), made on first use: an element-wise step whose every member is updated
        with one row of hyperparameters runs over it (no work per member)."""
        wc = self.__dict__.get("_whole_chunks")
        if wc is None:
            wc = self._whole_chunks = order.single_chunks(self.size)
        return wc

    def rows_layout(self):
        """The row tables of this group's matrices (``rows.GroupRows``), made on first use."""
        rl = self.__dict__.get("_rows_layout")
        if rl is None:
            from ..backends.rows import GroupRows
            rl = self._rows_layout = GroupRows(self.offsets, [p.shape for _, p in self.members])
        return rl

    def factored_layout(self):
        """The segments and work tables of a factored step over this group
        (``factored_layout.FactoredLayout``), made on first use."""
        fl = self.__dict__.get("_factored_layout")
        if fl is None:
            from ..backends.factored_layout import FactoredLayout
            fl = self._factored_layout = FactoredLayout([p.shape for _, p in self.members])
        return fl

    def split_state(self, optimizer, state):
        """``(master, inner)`` of a multi-precision state structure, else ``(None, state)``."""
        if self.mp:
            return optimizer.split_master(state)
        return None, state

    def member_state(self, k):
        """Parameter ``k``'s state as ``create_state_multi_precision`` would return it."""
        return self.views[k]
