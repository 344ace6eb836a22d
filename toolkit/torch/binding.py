"""What a ``toolkit.torch`` parameter's state is bound to, and the checks that keep every address
a kernel receives inside memory the toolkit owns or checked in this step.

A :class:`Binding` holds arrays the toolkit made, shown in ``opt.state[p]`` as tensor views.
Whatever a user changes around them (``p.data``, a state tensor, ``opt.state`` itself), each
step compares the parameter and its entry with the binding (:meth:`Binding.check`) and
continues, rebinds to the entry's values, starts afresh, or refuses naming the parameter; no
address outlives its memory. ``opt.state`` is a :class:`TrackedState` whose ``generation``
counts every change, so the steady path checks it in one comparison per group.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import ItemsView, KeysView, ValuesView

import torch

__all__ = ["Binding", "TrackedState", "TrackedEntry", "CountedEntry", "torch_step", "address", "KEEP", "REBIND", "FRESH"]

#: what :meth:`Binding.check` found: the binding holds; the entry's values are to be taken
#: into a fresh binding; the entry was emptied or deleted (a fresh state, as torch starts one)
KEEP, REBIND, FRESH = "keep", "rebind", "fresh"


def address(a):
    """The address of the first element of a tensor, a numpy array or a CUDA array."""
    if isinstance(a, torch.Tensor):
        return a.data_ptr()
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        return cai["data"][0]
    return a.ctypes.data


class _Counter:
    __slots__ = ("value",)

    def __init__(self):
        self.value = 0


class TrackedEntry(dict):
    """One parameter's ``opt.state[p]``: a dict whose every change is counted."""
    __slots__ = ("_counter",)

    def __init__(self, counter, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._counter = counter

    def _changed(self):
        self._counter.value += 1

    def rebound(self, counter):
        """This entry's keys in an entry that ``counter`` counts."""
        return TrackedEntry(counter, dict.items(self))

    def __setitem__(self, key, value):
        self._changed()
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self._changed()
        super().__delitem__(key)

    def __ior__(self, other):
        self._changed()
        return super().__ior__(other)

    def clear(self):
        self._changed()
        super().clear()

    def pop(self, *args):
        self._changed()
        return super().pop(*args)

    def popitem(self):
        self._changed()
        return super().popitem()

    def setdefault(self, key, default=None):
        self._changed()
        return super().setdefault(key, default)

    def update(self, *args, **kwargs):
        self._changed()
        super().update(*args, **kwargs)

    def __reduce__(self):  # a copy or a pickle is a plain dict (the optimizer wraps it again)
        return dict, (dict(self),)


def torch_step(t, form):
    """The count ``t`` as a ``torch.optim`` class keeps its ``step`` (``form``, its spec's
    ``torch_step``): a 0-d float32 tensor (``"tensor"``), or a Python int (``"int"``)."""
    return int(t) if form == "int" else torch.tensor(float(t), dtype=torch.float32)


class CountedEntry(TrackedEntry):
    """The ``opt.state[p]`` of a parameter with toolkit state: a :class:`TrackedEntry` that
    also shows ``"step"``, the parameter's count ``t`` as torch keeps it there (``form``, the
    spec's ``torch_step``: a 0-d float32 tensor, or SparseAdam's int; :func:`torch_step`), read from the optimizer at each read (``count()``; None where
    there is none). A ``"step"`` the user writes is a real key until the next step takes it
    (:meth:`written_step`); an emptied entry shows no step."""
    __slots__ = ("_count", "_form")

    def __init__(self, counter, values, count, form="tensor"):
        super().__init__(counter, values)
        self._count, self._form = count, form

    def _shown(self):
        """The count shown as ``"step"``, or None (a real one written, or nothing to show)."""
        if dict.__contains__(self, "step") or not dict.__len__(self):
            return None
        return self._count()

    def rebound(self, counter):
        return CountedEntry(counter, dict.items(self), self._count, self._form)

    def __delitem__(self, key):
        if key == "step" and not dict.__contains__(self, "step") and self._shown() is not None:
            raise KeyError("'step' is the parameter's count, which the optimizer keeps; "
                           "opt.state[p]['step'] = 0 starts it afresh")
        super().__delitem__(key)

    def pop(self, key, *default):
        if key == "step" and not dict.__contains__(self, "step") and self._shown() is not None:
            del self[key]  # the KeyError above
        return super().pop(key, *default)

    def written_step(self):
        """The ``"step"`` the user wrote into the entry, or None."""
        return dict.get(self, "step")

    def __getitem__(self, key):
        if key == "step":
            t = self._shown()
            if t is not None:
                return torch_step(t, self._form)
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key):
        return dict.__contains__(self, key) or (key == "step" and self._shown() is not None)

    def __iter__(self):
        yield from dict.__iter__(self)
        if self._shown() is not None:
            yield "step"

    def __len__(self):
        return dict.__len__(self) + (self._shown() is not None)

    def keys(self):
        return KeysView(self)

    def items(self):
        return ItemsView(self)

    def values(self):
        return ValuesView(self)

    def __repr__(self):
        return repr(dict(self.items()))

    def __reduce__(self):  # the state the optimizer holds, without the step it shows
        return dict, (dict(dict.items(self)),)


class TrackedState(defaultdict):
    """``opt.state``: torch's ``defaultdict(dict)`` whose entries are :class:`TrackedEntry`
    and whose every change (here or in an entry) adds one to :attr:`generation`."""

    def __init__(self, items=()):
        super().__init__(None)
        self._counter = _Counter()
        for key, value in dict(items).items():
            if isinstance(value, TrackedEntry):  # counted here from now on
                value = value.rebound(self._counter)
            super().__setitem__(key, self._entry(value))

    @property
    def generation(self):
        return self._counter.value

    def _entry(self, value):
        if isinstance(value, dict) and not isinstance(value, TrackedEntry):
            return TrackedEntry(self._counter, value)
        return value

    def counted(self, values, count, form="tensor"):
        """A :class:`CountedEntry` of ``values`` showing ``count()`` as its step (in
        ``form``: :func:`torch_step`)."""
        return CountedEntry(self._counter, values, count, form)

    def __missing__(self, key):
        entry = TrackedEntry(self._counter)
        self[key] = entry
        return entry

    def __setitem__(self, key, value):
        self._counter.value += 1
        super().__setitem__(key, self._entry(value))

    def __delitem__(self, key):
        self._counter.value += 1
        super().__delitem__(key)

    def __ior__(self, other):
        for key, value in dict(other).items():
            self[key] = value
        return self

    def clear(self):
        self._counter.value += 1
        super().clear()

    def pop(self, *args):
        self._counter.value += 1
        return super().pop(*args)

    def popitem(self):
        self._counter.value += 1
        return super().popitem()

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = {} if default is None else default
        return super().__getitem__(key)

    def update(self, *args, **kwargs):
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __reduce__(self):  # a copy or a pickle is torch's defaultdict(dict)
        return _plain_state, (dict(self),)


def _plain_state(items):
    out = defaultdict(dict)
    out.update(items)
    return out


class Binding:
    """A parameter's toolkit state and what it was made for.

    ``toolkit_state``: what the inner optimizer's update takes (arrays the toolkit owns);
    ``named``: the tensors shown in ``opt.state[p]`` (views of those arrays), by slot name;
    ``ptrs``: their addresses when bound; ``dtype``, ``shape``, ``device``, ``perm``: the
    weight's when bound (``perm``: its memory order, ``toolkit.torch.states.memory_order``);
    ``held``: the weight's address and the weight and state tensors in memory order, as the
    vectorised step last made them (:meth:`views`)."""
    __slots__ = ("toolkit_state", "named", "ptrs", "shapes", "dtype", "shape", "device", "perm",
                 "held")

    def __init__(self, toolkit_state, named, p, perm):
        self.toolkit_state = toolkit_state
        self.named = dict(named)
        self.ptrs = tuple(address(t) for t in self.named.values())
        self.shapes = tuple(t.shape for t in self.named.values())
        self.dtype, self.shape, self.device = p.dtype, p.shape, p.device
        self.perm = perm
        self.held = None

    def check(self, p, entry, perm, where):
        """KEEP, REBIND or FRESH for parameter ``p`` (its memory order ``perm``) whose
        ``opt.state`` entry is ``entry`` (None where it has none); a TypeError or ValueError
        naming ``where`` when the state cannot go on with this weight."""
        if not entry:
            return FRESH
        if p.dtype != self.dtype or p.device != self.device or p.shape != self.shape:
            raise (ValueError if p.shape != self.shape else TypeError)(
                f"{where} is now {_describe(p)}, but its optimizer state was made for "
                f"{_describe_facts(self.dtype, self.shape, self.device)}: the step cannot go on "
                "with that state (torch.optim's Adam family refuses it too; its Rprop and SparseAdam "
                "step on with the old dtype's state). Convert the state with "
                "opt.load_state_dict(opt.state_dict()), which casts it to the parameters' "
                "dtype and device, or delete opt.state[p] to start it afresh")
        named = self.named
        if all(entry.get(n) is t for n, t in named.items()) and all(
                address(t) == ptr and t.shape == shape
                for t, ptr, shape in zip(named.values(), self.ptrs, self.shapes)):
            return KEEP if perm == self.perm else REBIND
        return REBIND

    def views(self, p, ordered, names):
        """``(weight, *states)`` in memory order (``ordered(tensor)`` makes one), the states
        those this binding owns; kept while the weight's address is the same."""
        held = self.held
        ptr = p.data_ptr()
        if held is None or held[0] != ptr:
            held = self.held = (ptr, (ordered(p.detach()),) + tuple(
                ordered(self.named[n]) for n in names))
        return held[1]

    def held_views(self, p):
        """What :meth:`views` kept, or None where the weight moved since."""
        held = self.held
        if held is None or held[0] != p.data_ptr():
            return None
        return held[1]


def check_entry(entry, fresh, where):
    """Check the ``opt.state`` entry ``entry`` a user filled or changed against ``fresh``
    (slot name -> tensor, what a new state holds): every slot name of ``fresh``, each a tensor
    of the same shape, dtype and device (other keys, ``"step"`` and the user's own, are not
    the optimizer's: they stay in the entry and no step reads them). Returns the slots' tensors;
    raises a ValueError/TypeError naming ``where`` and the slot."""
    missing = [n for n in fresh if n not in entry]
    if missing:
        raise ValueError(f"{where}: opt.state[p] holds {sorted(n for n in entry if n != 'step')}"
                         f"; this optimizer keeps {sorted(fresh)} for it. Delete opt.state[p] to "
                         "start its state afresh")
    arrays = {n: entry[n] for n in fresh}
    for n, want in fresh.items():
        v = arrays[n]
        if not isinstance(v, torch.Tensor):
            raise TypeError(f"{where}: opt.state[p][{n!r}] must be a tensor, got "
                            f"{type(v).__name__}")
        if v.shape != want.shape or v.dtype != want.dtype or v.device != want.device:
            raise ValueError(f"{where}: opt.state[p][{n!r}] is {_describe(v)}; it must be "
                             f"{_describe(want)}")
    return arrays


def _describe(t):
    return _describe_facts(t.dtype, t.shape, t.device)


def _describe_facts(dtype, shape, device):
    return f"{tuple(shape)} {dtype} on {device}"
