"""The state of an optimizer and the array contract of a step: ``create_state`` and the state's
layout (``state_slots``, ``state_arrays``), and the checks ``Optimizer`` runs before anything is
written: the index, the weight, the gradient, the state against its template (``create_state_template``:
shapes, dtypes, layout, kind and device, no overlap; ``toolkit.backends.arrays``), and the memo
that lets a call on the very numpy arrays of an earlier call that passed (unchanged in everything
a check reads) skip the checks (``_remember_checked``, ``_checked_before``).

``Optimizer`` derives from :class:`ArrayChecks` (the methods read the optimizer's
``state_slots`` and ``_tuple_state``).
"""
from __future__ import annotations

import numbers
import weakref

import numpy as np

from ..backends import arrays

__all__ = ["ArrayChecks", "Slot"]

_ARRAY_SIGNATURE = arrays.NUMPY_SIGNATURE


class Slot:
    """Shape and dtype of one state array, by name."""

    __slots__ = ("name", "shape", "dtype", "label")

    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, tuple(shape), np.dtype(dtype)
        self.label = f"state[{name!r}]"  # how error messages name it

    def __eq__(self, other):
        return isinstance(other, Slot) and (self.name, self.shape, self.dtype) == \
            (other.name, other.shape, other.dtype)

    def __hash__(self):
        return hash((self.name, self.shape, self.dtype))


class ArrayChecks:
    """The array contract of ``update`` and its memo of arrays that passed (methods of
    ``Optimizer``)."""

    # --- cheap calls: arrays that passed every check once need not be checked again -----------
    @staticmethod
    def _numpy_leaves(state):
        """The state's arrays (None kept) if every one is a numpy array, else None."""
        if state is None:
            return ()
        if type(state) is np.ndarray:
            return (state,)
        if type(state) is tuple and all(a is None or type(a) is np.ndarray for a in state):
            return state
        return None

    @staticmethod
    def _signature(arrays_):
        """What a check of the array contract reads of numpy arrays that can change while the
        array object stays the same: shape, strides, dtype and the writeable flag (the memory
        an array object uses never moves, so overlaps cannot change); one entry per array,
        None skipped (where the Nones are is remembered by identity)."""
        return [_ARRAY_SIGNATURE(a) for a in arrays_ if a is not None]

    def _template_key(self):
        """What ``create_state_template`` is a function of beside the weight's shape and dtype
        (the base template's cache key): a remembered step compares it instead of building the
        template. A subclass that makes its template otherwise (``create_state_template`` or
        ``_slot_template``) overrides this in the same class, or the template is built and
        compared (:meth:`_template_key_applies`)."""
        return self.state_slots(), self._tuple_state(), self.state_dtype

    def _template_key_applies(self):
        """Whether :meth:`_template_key` speaks for this class's template: it is defined in
        the class that defines ``create_state_template`` and ``_slot_template``, or below it."""
        mro = type(self).__mro__

        def owner(name):
            return next(k for k in mro if name in k.__dict__)
        keyed = owner("_template_key")
        return all(issubclass(keyed, owner(name))
                   for name in ("create_state_template", "_slot_template"))

    def _remember_checked(self, weight, grad, state, template):
        """Remember numpy arrays that passed every check of ``update``, weakly (a dead array
        is forgotten, and an ``id`` reused by a new array never matches)."""
        leaves = self._numpy_leaves(state)
        if type(weight) is not np.ndarray or type(grad) is not np.ndarray or leaves is None:
            return
        memo = self.__dict__.setdefault("_checked", {})
        if len(memo) > 4096:
            memo.clear()
        every = (weight, grad) + tuple(leaves)
        refs = tuple(None if a is None else weakref.ref(a) for a in every)
        # the weight's description, for the steps that find it here: what it says is what the
        # signature re-reads (or follows from it), and it holds no reference to the array
        desc = arrays.ArrayDesc.of_numpy(weight)
        desc.ptr  # noqa: B018 - the extent read now, while the array is at hand
        desc.obj = None
        memo[id(weight)] = (refs, type(state), template, self._signature(every),
                            self._template_key() if self._template_key_applies() else None,
                            all(a is not None for a in leaves), desc)

    def _checked_before(self, weight, grad, state):
        """The weight's description when ``(weight, grad, state)`` are the very numpy arrays
        of an earlier ``update`` that passed every check, unchanged in everything a check
        reads, with the same state template; else None (then everything is checked). The
        description is the one remembered with the arrays (its ``obj`` is None: the memo holds
        arrays weakly; a step reads its kind and dtype)."""
        memo = self.__dict__.get("_checked")
        if memo is None:
            return None
        entry = memo.get(id(weight))
        if entry is None:
            return None
        refs, state_type, template, signature, template_key, no_none, desc = entry
        if type(state) is not state_type:
            return None
        # the same objects as remembered (then each is the numpy array it was, or None)
        if state is None:
            every = (weight, grad)
        elif state_type is tuple:
            every = (weight, grad, *state)
        else:
            every = (weight, grad, state)
        if len(every) != len(refs):
            return None
        for a, r in zip(every, refs):
            if (r() is not a) if r is not None else (a is not None):
                return None
        now = list(map(_ARRAY_SIGNATURE, every)) if no_none else self._signature(every)
        if now != signature:
            return None
        if template_key is not None:  # what the template is a function of, compared
            if self._template_key() != template_key:
                return None
            return desc
        template_now = self.create_state_template(desc)
        if template_now is not template and template_now != template:
            return None
        return desc

    # ---------------------------------------------------------------------------------------
    # validation: everything is checked before anything is written (toolkit.backends.arrays)
    # ---------------------------------------------------------------------------------------
    @staticmethod
    def _check_index(index):
        if type(index) is int or type(index) is str:  # the common case, without an ABC check
            return
        if isinstance(index, bool) or not isinstance(index, (numbers.Integral, str)):
            raise TypeError(f"index must be an int (or a str name), got {type(index).__name__}")

    def check_shape(self, shape):
        """Refuse a weight of ``shape`` this optimizer never steps (a ValueError naming it),
        before any state exists: ``toolkit.torch`` calls it as a parameter joins a group, as
        ``torch.optim.Muon`` refuses a parameter that is not 2-D there. Nothing by default."""

    def _check_weight(self, weight):
        """The described weight, after the weight checks of the array contract."""
        w = arrays.describe(weight, "weight")
        arrays.check_weight(w)
        return w

    @staticmethod
    def _check_grad(w, grad):
        if grad is None:
            raise TypeError("grad must be an array like the weight, got None")
        g = arrays.describe(grad, "grad")
        arrays.check_grad(w, g)
        return g

    def create_state_template(self, weight):
        """The structure of ``create_state``: None, a ``Slot``, or a tuple of ``Slot``/None.
        ``weight`` is anything with numpy ``shape`` and ``dtype`` (an ``ArrayDesc``)."""
        slots = self.state_slots()
        if not slots:
            return None
        tupled = self._tuple_state()
        # the template is a function of these alone unless a subclass changes how a slot is
        # shaped: then it is built every time
        cacheable = type(self)._slot_template is ArrayChecks._slot_template
        if cacheable:
            key = (weight.shape, weight.dtype, slots, tupled, self.state_dtype)
            cache = self.__dict__.setdefault("_templates", {})
            hit = cache.get(key)
            if hit is not None:
                return hit
        # a slot of the default rule, or one held low (``held.HeldStates._make_slot``)
        items = tuple(self._make_slot(name, weight) for name in slots)
        template = items[0] if len(items) == 1 and not tupled else items
        if cacheable:
            if len(cache) > 64:
                cache.clear()
            cache[key] = template
        return template

    def _slot_template(self, name, weight):
        return weight.shape, weight.dtype

    @staticmethod
    def _check_array(what, a, shape, dtype, w):
        """One state array against the described weight ``w``; returns its description."""
        d = arrays.describe(a, what)
        arrays.check_state_array(what, d, shape, dtype, w)
        return d

    def _check_state(self, state, w, template, others=()):
        """``state`` against ``template``: its structure, and each array by the contract
        (shape, dtype, writeable, layout, same kind and device, no overlap with the weight, the
        gradient or each other)."""
        if template is None:
            if state is not None:
                raise TypeError(f"{type(self).__name__} with these hyperparameters keeps no "
                                f"state; expected None, got {type(state).__name__}")
            return []
        if isinstance(template, Slot):
            ds = self._check_slot(template, state, w)
            self._check_no_alias([(template.label, d) for d in ds], others)
            return ds

        def names():
            return tuple(s.name if s is not None else "None" for s in template)
        if not isinstance(state, tuple) or len(state) != len(template):
            raise TypeError(f"state must be a tuple {names()}, as create_state returns; "
                            f"got {type(state).__name__}")
        seen = []
        for a, slot in zip(state, template):
            if slot is None:
                if a is not None:
                    raise TypeError(f"state must be a tuple {names()}: expected None, got an "
                                    f"array")
                continue
            for d in self._check_slot(slot, a, w):
                for _, b in seen:
                    if arrays.overlaps(d, b):
                        raise ValueError(f"{slot.label} shares memory with another state array")
                seen.append((slot.label, d))
        self._check_no_alias(seen, others)
        return [d for _, d in seen]

    def _check_slot(self, slot, a, w):
        """The descriptions of slot ``slot``'s arrays in ``a`` (one array, or an int8 slot's
        codes and block maxima: ``held.HeldSlot.check``), checked."""
        check = getattr(slot, "check", None)
        if check is not None:
            return check(a, w)
        return [self._check_array(slot.label, a, slot.shape, slot.dtype, w)]

    @staticmethod
    def _check_no_alias(state_descs, others):
        for name, a in others:
            if a is None:
                continue
            d = a if isinstance(a, arrays.ArrayDesc) else arrays.describe(a, name)
            for sname, s in state_descs:
                if arrays.overlaps(d, s):
                    raise ValueError(f"{sname} shares memory with the {name}")

    # --- the state itself -------------------------------------------------------------------
    def state_slots(self):
        """Names of the state arrays ``create_state`` returns, in order (subclasses override)."""
        return ()

    def create_state(self, index, weight):
        """Fresh state for ``weight``: None, an array, or a tuple (MXNet's shapes and order),
        of the weight's dtype, kind (numpy, CuPy, torch, numba device array) and device."""
        self._check_weight(weight)
        self.state_made()
        slots = self.state_slots()
        if not slots:
            return None
        new = tuple(self._held_slot(name, weight, self._init_slot(name, weight))
                    for name in slots)
        return new[0] if len(new) == 1 and not self._tuple_state() else new

    def state_made(self):
        """Record that state exists in the current layout (:meth:`create_state` calls it; a
        subclass that makes its state otherwise calls it too): from then on an assignment
        that would change the layout is refused."""
        if self.__dict__.get("_state_layout") is None:
            self._state_layout = self._state_layout_key()

    def _state_meaning(self):
        """What the state holds under the convention, where conventions differ (SGD's ``mom``:
        torch's buffer or MXNet's ``-lr*buf``); None where every convention's is the same."""
        return None

    def _tuple_state(self):
        """Whether a single-slot state is returned as a 1-tuple (RMSProp's ``(n,)``)."""
        return False

    def _init_slot(self, name, weight):
        return arrays.zeros_like(weight)

    @staticmethod
    def _map_state(state, f):
        if state is None:
            return None
        if isinstance(state, tuple):
            return tuple(None if s is None else f(s) for s in state)
        return f(state)

    @staticmethod
    def _zip_state(dst, src, f):
        if dst is None:
            return
        if isinstance(dst, tuple):
            for d, s in zip(dst, src):
                if d is not None:
                    f(d, s)
        else:
            f(dst, src)

    def state_arrays(self, state):
        """The arrays of a state from ``create_state``, as a tuple in ``state_slots()`` order."""
        if state is None:
            return ()
        if type(state) is tuple:  # the tuple itself when it holds no None (the common case)
            for s in state:
                if s is None:
                    return tuple(s for s in state if s is not None)
            return state
        if isinstance(state, tuple):
            return tuple(s for s in state if s is not None)
        return (state,)
