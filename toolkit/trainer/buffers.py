"""Flat buffers: the Trainer keeps the weights, gradients and optimizer states of one
(dtype, device) group in contiguous 1-D arrays, and each Parameter's arrays are views into them.

A step records what each parameter's optimizer step would launch (the optimizer's own host code
computes every per-parameter scalar: learning rate with multiplier and schedule, weight decay,
the count ``t`` and what derives from it) and then runs the whole group in **one** segmented
call: the rule once over the flat buffers, with one row of hyperparameters per parameter. The
rows are exactly the tuples the per-parameter calls would have passed, so the result is the same,
bit for bit.
"""
from __future__ import annotations

import numpy as np

from ..backends import arrays, cpu

__all__ = ["Group", "Recorder", "map_state"]


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


class Recorder:
    """A launcher that records the rules a step would run instead of running them."""

    backend = "record"

    def __init__(self, real):
        self.real = real
        self.calls = []
        self.norms = {}
        self.directions = {}

    def compute_dtype(self, a):
        return self.real.compute_dtype(a)

    def zeros_like(self, a, dtype=None):
        return self.real.zeros_like(a, dtype)

    def run_rule(self, factory, weight, grad, states, hyper):
        self.calls.append(("rule", factory, weight, grad, tuple(states), tuple(hyper)))

    def run_noise_rule(self, factory, weight, grad, hyper, key, aux):
        self.calls.append(("noise", factory, weight, grad, (), tuple(hyper), key, tuple(aux)))

    def lars_norms(self, weight, grad, cum, batch_scale):
        """The norms the Trainer computed for the whole group before planning."""
        try:
            return self.norms[id(weight)]
        except KeyError:  # pragma: no cover - norm_inputs and the optimizer disagree
            raise RuntimeError("the optimizer asked for norms the Trainer did not compute "
                               "(its norm_inputs() and its step disagree)") from None

    def direction_norms(self, first, weight, grad, states):
        """The sums the Trainer's first pass (``rules.DirectionPass``) gave this member, for the
        optimizer's planning of the second pass to read."""
        ran, sums = self.directions.get(id(weight), (None, None))
        if ran != first:  # pragma: no cover - norm_inputs and the optimizer disagree
            raise RuntimeError("the optimizer asked for a first pass the Trainer did not run "
                               "(its norm_inputs() and its step disagree)")
        return sums


class Group:
    """The parameters of one (dtype, device) group, their flat buffers and state."""

    def __init__(self, key, members, optimizer):
        self.dtype, self.device = key
        self.members = members                      # [(index, Parameter)] in index order
        sizes = [int(np.prod(p.shape, dtype=np.int64)) for _, p in members]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.size = int(self.offsets[-1])
        host_data = np.concatenate([np.asarray(arrays.to_host(p._data), self.dtype).reshape(-1)
                                    for _, p in members]) if members else np.zeros(0, self.dtype)
        self.data = self._alloc(host_data)
        self.grad = self._alloc(np.concatenate(
            [np.asarray(arrays.to_host(p._grad), self.dtype).reshape(-1) for _, p in members]))
        #: whether the states live in flat buffers too (an element-wise optimizer); else each
        #: member keeps the state its optimizer creates for its own weight view, and the Trainer
        #: steps the members one by one (``Optimizer.elementwise_step``: GroupAdaGrad)
        self.flat = bool(optimizer.elementwise_step)
        self.state = optimizer.create_state_multi_precision(0, self.data) if self.flat else None
        for a in state_leaves(self.state):
            if arrays.describe(a).shape != (self.size,):
                raise ValueError(f"{type(optimizer).__name__}'s state arrays are not shaped like "
                                 "the weight; the Trainer's flat buffers need that (an optimizer "
                                 "whose step is not element-wise sets elementwise_step = False)")
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
            p._data, p._grad = self.view(k, self.data), self.view(k, self.grad)
            p._fresh = False  # arrays handed out before are detached: write into the new views
            if self.flat:
                self.views.append(map_state(self.state, lambda a, k=k: self.view(k, a)))
            else:
                self.views.append(optimizer.create_state_multi_precision(index, p._data))
        if not self.flat:
            self.state = tuple(self.views)  # every member's state, for whoever walks them all
        for name, flat in self.host_flats.items():
            for k, (index, _) in enumerate(members):
                optimizer.bind_host_buffer(name, index, self.view(k, flat))
        if self.device == "cuda":
            from ..backends import cuda
            self.chunks = cuda.cuda.to_device(cuda.chunk_table(self.offsets))
            self.offsets_device = cuda.cuda.to_device(self.offsets)
            self.uploads = [cuda.TableUpload((len(members), 1), np.float32) for _ in range(3)]
        else:
            self.chunks = cpu.chunk_table(self.offsets)

    # --- helpers ---------------------------------------------------------------------------
    def _alloc(self, host):
        if self.device == "cuda":
            from numba import cuda
            return cuda.to_device(np.ascontiguousarray(host))
        return np.ascontiguousarray(host)

    def _slicer(self, k, shape):
        a, b = int(self.offsets[k]), int(self.offsets[k + 1])
        return lambda arr: arr[a:b].reshape(shape)

    def view(self, k, arr):
        """Member ``k``'s view of the flat array ``arr``; views of the group's own buffers are
        made once (slicing a device array costs tens of microseconds), views of per-step
        copies each time."""
        if id(arr) not in self._persistent:
            return self._slicer(k, self.members[k][1].shape)(arr)
        key = (k, id(arr))
        v = self._views.get(key)
        if v is None:
            v = self._views[key] = self._slicer(k, self.members[k][1].shape)(arr)
        return v

    def split_state(self, optimizer, state):
        """``(master, inner)`` of a multi-precision state structure, else ``(None, state)``."""
        if self.mp:
            return optimizer.split_master(state)
        return None, state

    def member_state(self, k):
        """Parameter ``k``'s state as ``create_state_multi_precision`` would return it."""
        return self.views[k]
