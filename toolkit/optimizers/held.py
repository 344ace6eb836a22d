"""Optimizer states held below the weight's precision (``state_dtype``, ``state_rounding``).

An optimizer whose spec names its element-wise moments (``Spec.moments``: each slot's sign,
"signed" for a first moment, "unsigned" for a second) may keep those slots in

* ``"float32"``: float32 arrays, whatever the weight's dtype;
* ``"bfloat16"``: arrays of ``ml_dtypes.bfloat16`` (``toolkit.backends.lowbit.BFLOAT16``),
  each new value rounded to float32, then to the nearest bfloat16 (ties to even);
* ``"int8"``: a :class:`~toolkit.backends.lowbit.Quantized` per slot: uint8 codes of the
  weight's shape and one float32 absolute maximum per block of 256 elements (C order), the
  code map bitsandbytes 0.50.2 uses (signed for a first moment, unsigned for a second). A
  weight of fewer than :data:`INT8_MIN_SIZE` elements keeps its default state (as
  bitsandbytes keeps small tensors in float32).

``None`` (the default) is the rule of every other state: the weight's dtype. Slots the spec
does not name (none today) stay as they are. Counts and every step constant stay on the host
in float64: nothing low-precision counts steps.

A held slot enters the step as the float32 value it stands for (exactly) and is held again from
the step's new value; ``reference.lowbit`` defines this, and the kernels
(``toolkit.backends.cpu_lowbit``) are checked against it code for code. The CPU backend and the
reference backend run it, the CUDA backend on numba device arrays (``cuda_lowbit``: a bfloat16
slot is a uint16 device array of its bits, an int8 one a ``Quantized`` of device arrays, made
on the weight's device), and the Trainer on the CPU (``toolkit.trainer.held``); other CUDA
arrays, row-sparse gradients and float16 weights refuse it (a clear error before anything is
written).

``Optimizer`` derives from :class:`HeldStates`.
"""
from __future__ import annotations

import numpy as np

from ..backends import arrays
from .checks import Slot

__all__ = ["HeldStates", "HeldSlot", "STATE_DTYPES", "STATE_ROUNDINGS", "INT8_MIN_SIZE"]

#: what ``state_dtype`` takes
STATE_DTYPES = (None, "float32", "bfloat16", "int8")
#: what ``state_rounding`` takes ("stochastic": bfloat16 only)
STATE_ROUNDINGS = ("nearest", "stochastic")
#: the fewest elements a weight has for its moments to be held in int8 (bitsandbytes'
#: ``min_8bit_size``, 4096, as of 0.50.2): below, the default state, whose bytes are few
INT8_MIN_SIZE = 4096

_WEIGHT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _side(weight):
    """Where ``weight`` (an array, or an ``ArrayDesc``) lives for a held state: "host" (numpy,
    or anything that is not a CUDA array), "cuda" (a numba device array) or the library of
    another CUDA array."""
    d = weight if isinstance(weight, arrays.ArrayDesc) else None
    if d is None and arrays.is_device_array(weight):
        d = arrays.describe(weight)
    if d is None or d.kind == arrays.HOST:
        return "host"
    return "cuda" if d.library == "numba" else d.library


def _check_weight_holds(kind, weight):
    """Refuse a weight whose moments ``state_dtype=kind`` cannot hold."""
    side = _side(weight)
    if side not in ("host", "cuda"):
        raise TypeError(f"state_dtype={kind!r} holds the states of numpy weights and of numba "
                        f"CUDA device arrays; the weight is a CUDA array of {side} (on CUDA, "
                        "held states step numba device arrays through toolkit.optimizer's "
                        "update; toolkit.torch and the Trainer hold them on the CPU only)")
    if np.dtype(weight.dtype) not in _WEIGHT_DTYPES:
        raise TypeError(f"state_dtype={kind!r} steps float32 and float64 weights; the weight "
                        f"is {np.dtype(weight.dtype)} (for float16 weights use "
                        "multi_precision=True without state_dtype)")
    return side


def _lowbit():
    from ..backends import lowbit
    return lowbit


class HeldSlot(Slot):
    """The template of an int8 slot: a ``Quantized`` of the weight's ``shape`` whose map is
    the ``signed`` one or the unsigned one."""

    __slots__ = ("signed",)

    def __init__(self, name, shape, signed):
        super().__init__(name, shape, np.uint8)
        self.signed = bool(signed)

    def __eq__(self, other):
        return isinstance(other, HeldSlot) and super().__eq__(other) and \
            self.signed == other.signed

    def __hash__(self):
        return hash((self.name, self.shape, self.signed, "int8"))

    def check(self, q, w):
        """``q`` against this template and the described weight ``w`` (numpy or a numba
        device array, C order); the descriptions of its two arrays."""
        lowbit = _lowbit()
        if type(q) is not lowbit.Quantized:
            raise TypeError(f"{self.label} must be a toolkit.backends.lowbit.Quantized (codes, "
                            f"absmax, qmap), as create_state makes with state_dtype='int8'; "
                            f"got {type(q).__name__}")
        want = lowbit.SIGNED if self.signed else lowbit.UNSIGNED
        if q.qmap is not want and not (isinstance(q.qmap, np.ndarray) and
                                       q.qmap.dtype == np.float32 and
                                       np.array_equal(q.qmap, want)):
            raise ValueError(f"{self.label}.qmap is not the "
                             f"{'signed' if self.signed else 'unsigned'} dynamic map "
                             "(toolkit.backends.lowbit."
                             f"{'SIGNED' if self.signed else 'UNSIGNED'})")
        if _side(w) not in ("host", "cuda") or not w.c_contiguous:
            raise ValueError(f"{self.label}: int8 states step numpy weights and numba CUDA "
                             "device arrays in C order (blocks are cut from the C-ordered "
                             "elements)")
        codes = arrays.describe(q.codes, f"{self.label}.codes")
        arrays.check_state_array(f"{self.label}.codes", codes, self.shape, np.uint8, w)
        scales = arrays.describe(q.absmax, f"{self.label}.absmax")
        arrays.check_same_kind(f"{self.label}.absmax", scales, w)
        n_blocks = lowbit.blocks_of(int(np.prod(self.shape, dtype=np.int64)))
        if scales.shape != (n_blocks,) or scales.dtype != np.float32:
            raise ValueError(f"{self.label}.absmax must be float32 of shape ({n_blocks},), one "
                             f"per block of {lowbit.BLOCK}; got {scales.dtype} {scales.shape}")
        if scales.readonly or not scales.c_contiguous:
            raise ValueError(f"{self.label}.absmax must be writeable and contiguous")
        return [codes, scales]


class HeldStates:
    """``state_dtype`` and ``state_rounding`` (methods of ``Optimizer``, whose ``domains``
    check the two)."""

    def moment_signs(self):
        """Slot name -> signed (True) for the moments this optimizer may hold low."""
        spec = type(self).spec
        moments = {} if spec is None else spec.moments
        return {name: sign == "signed" for name, sign in moments.items()}

    def check_state_dtype(self):
        """Refuse a ``state_dtype`` or ``state_rounding`` this optimizer cannot take (run with
        the other relations' checks)."""
        if self.state_dtype is not None and not self.moment_signs():
            raise ValueError(
                f"state_dtype={self.state_dtype!r}: {type(self).__name__} has no element-wise "
                "moments to hold in lower precision (the optimizers that do: "
                f"{', '.join(held_optimizers())})")
        if self.state_rounding == "stochastic" and self.state_dtype != "bfloat16":
            raise ValueError("state_rounding='stochastic' rounds bfloat16 states; "
                             f"state_dtype is {self.state_dtype!r}")

    def rounding_key(self, index, t):
        """The key of the stochastic rounding of step ``t`` of ``index``'s bfloat16 moments
        (``toolkit.backends.noise.stream_key(state_seed, stream_of(index), t)``, SGLD's
        generator), or None when they round to nearest."""
        if self.state_rounding != "stochastic":
            return None
        from ..backends.noise import stream_key, stream_of
        return stream_key(self.state_seed, stream_of(index), t)

    def keyed(self, index, t, step):
        """The kernel step ``step`` of ``index`` at count ``t`` with the rounding key on its
        element-wise launches (``Launch.key``) where the moments round stochastically; else
        ``step`` itself."""
        if self.state_rounding != "stochastic":
            return step
        from ..backends import launches
        return launches.keyed(step, self.rounding_key(index, t))

    def held_dtype(self, name, weight):
        """How slot ``name`` of ``weight`` (anything with ``shape``, ``size`` and ``dtype``) is
        held: None (the default rule), "float32", "bfloat16" or "int8"."""
        sd = self.state_dtype
        if sd is None or name not in self.moment_signs():
            return None
        if sd == "int8" and int(np.prod(weight.shape, dtype=np.int64)) < INT8_MIN_SIZE:
            return None
        return sd

    def holds_low(self, weight):
        """Whether any slot of ``weight``'s state is held otherwise than by the default rule."""
        return any(self.held_dtype(n, weight) is not None for n in self.state_slots())

    def _make_slot(self, name, weight):
        kind = self.held_dtype(name, weight)
        side = None if kind is None else _check_weight_holds(kind, weight)
        if kind == "int8":
            return HeldSlot(name, weight.shape, self.moment_signs()[name])
        if kind == "float32":
            return Slot(name, weight.shape, np.float32)
        if kind == "bfloat16":  # on CUDA, its bits in a uint16 array
            return Slot(name, weight.shape, np.uint16 if side == "cuda" else
                        _lowbit().BFLOAT16)
        return Slot(name, *self._slot_template(name, weight))

    def _held_slot(self, name, weight, plain):
        """The slot ``name`` made from its default-rule array ``plain`` (its initial values);
        on CUDA made on the host and copied to the weight's device."""
        kind = self.held_dtype(name, weight)
        if kind is None:
            return plain
        side = _check_weight_holds(kind, weight)
        lowbit = _lowbit()
        values = np.asarray(arrays.to_host(plain) if side == "cuda" else plain, np.float32)
        if kind == "int8":
            q = lowbit.quantize(values, lowbit.SIGNED if self.moment_signs()[name]
                                else lowbit.UNSIGNED)
            if side == "cuda":
                q = q.replace(codes=_on_device(q.codes, plain),
                              absmax=_on_device(q.absmax, weight))
            return q
        held = lowbit.to_bfloat16(values) if kind == "bfloat16" else values.copy()
        if side == "cuda":
            return _on_device(held.view(np.uint16) if kind == "bfloat16" else held, plain)
        out = np.empty_like(plain, dtype=held.dtype)  # in the weight's memory order, as plain
        out[...] = held
        return out

    def slot_values(self, state_array):
        """The float64 values a state array (held or not) stands for, exactly."""
        lowbit = _lowbit()
        if type(state_array) is lowbit.Quantized:
            return lowbit.dequantize(state_array).astype(np.float64)
        return np.asarray(state_array).astype(np.float64)

    def store_values(self, state_array, values, key=None, slot=0):
        """Write ``values`` (float64) into a state array as a kernel holds them: rounded to
        float32 first for a held one; a bfloat16 one stochastically with the rounding key
        ``key`` (:meth:`rounding_key`), ``slot`` its position among the step's state arrays."""
        lowbit = _lowbit()
        if type(state_array) is lowbit.Quantized:
            q = lowbit.quantize(np.asarray(values).astype(np.float32), state_array.qmap)
            state_array.codes[...] = q.codes
            state_array.absmax[...] = q.absmax
        elif state_array.dtype == lowbit.BFLOAT16:
            x = np.asarray(values).astype(np.float32)
            state_array[...] = lowbit.to_bfloat16(x) if key is None else \
                lowbit.bfloat16_stochastic(x, key, slot).view(lowbit.BFLOAT16).reshape(x.shape)
        else:  # float32 or the weight's dtype: one rounding, as numpy's assignment makes
            state_array[...] = values


def _on_device(host, like):
    """A copy of the numpy array ``host`` on ``like``'s device, in ``like``'s memory order
    where the shapes agree (a state slot), else C order."""
    shape = host.shape
    out = arrays.zeros_like(like, host.dtype) if tuple(like.shape) == shape else \
        arrays.zeros(shape, host.dtype, like)
    arrays.copy_from_host(out, host)
    return out


def held_optimizers():
    """The registry names whose spec names moments that ``state_dtype`` holds."""
    from .registry import specs
    return tuple(name for name, s in specs().items() if s.moments)
