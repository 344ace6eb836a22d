"""Moments held below the weight's precision between steps (``state_dtype``): the oracle's
low-bit variants (:class:`Held`), the reference that runs them (:class:`HeldReference`) and the
cases that tell them apart (:func:`cases`).

An implementation "with bfloat16 states" or "with 8-bit blockwise states, block B" computes
each step as the optimizer's equations do, from the values its held moments stand for, and
holds the new moments again (``reference.lowbit``: bfloat16 to nearest; bitsandbytes' dynamic
maps over blocks of ``B`` elements in C order, a weight below 4096 elements keeping its
moments in its own precision). The weight's step takes the new moments before they are held,
as bitsandbytes, torchao and the toolkit take them. The reference trajectory runs the
optimizer's reference with each new moment replaced by its held value
(``reference.lowbit.held``), whose bound covers a holding on the other side of a rounding
boundary or a code's midpoint where the oracle finds one possible, and only there.

Held variants are not declared by the specs: they apply to every optimizer whose spec names
its moments (``Spec.moments``). ``verify(..., state_dtype=...)`` runs every case under one;
``identify`` finds which one an implementation follows (:data:`BLOCKS`); a failed plain
``verify`` is explained by one where it fits. Their cases (:func:`cases`) are the only ones of
at least :data:`~toolkit.optimizers.held.INT8_MIN_SIZE` elements; they are drawn at their own
seed (:data:`SEED`), so no existing case moves.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import cases as _cases
from . import space as _space

__all__ = ["Held", "HeldReference", "BLOCKS", "SEED", "CASES", "SHAPES", "STEPS", "SLACK",
           "check", "forms", "cases", "signs_of"]

#: the block sizes ``identify`` tries, in order (bitsandbytes' and the toolkit's first)
BLOCKS = (256, 64, 128, 2048, 4096)
#: the seed of the held cases (fixed: the same cases in every run)
SEED = 20250412
#: the shapes of the held cases: whole blocks of every size in :data:`BLOCKS`, and a last block
#: cut short for every size
SHAPES = ((64, 128), (67, 97))
CASES = len(SHAPES)
#: runs of this many elements of a held case's values share a scale over :data:`SPREAD` decades
CHUNK, SPREAD = 32, 2
#: steps per held case: a held moment first enters the weight at step 2
STEPS = 3
#: the relative error of the scaled value ``s`` an implementation's own int8 scaling may add
#: beyond the oracle's (a division or a product by the reciprocal, and its midpoint test: at
#: most three float32 roundings, taken as four)
SLACK = 4 * 2.0 ** -24


@dataclass(frozen=True)
class Held:
    """Moments held in ``state_dtype`` ("float32", "bfloat16", "int8") between steps; for int8,
    in blocks of ``block`` elements, and with ``whole`` only for a weight that is whole blocks
    (torchao's rule: another weight keeps float32 moments)."""
    state_dtype: str
    block: int | None = None
    whole: bool = False

    @property
    def name(self):
        """``bfloat16_states``, ``int8_states_256``, ``int8_states_256_whole``."""
        if self.state_dtype != "int8":
            return f"{self.state_dtype}_states"
        return f"int8_states_{self.block}" + ("_whole" if self.whole else "")

    @property
    def text(self):
        """How a verdict names it: "with bfloat16 states", "with 8-bit blockwise states, block
        256"."""
        if self.state_dtype != "int8":
            return f"with {self.state_dtype} states"
        return (f"with 8-bit blockwise states, block {self.block}" +
                (" (whole blocks only)" if self.whole else ""))

    @property
    def description(self):
        """One line, as a variant's (it reads after "variant <name>: ")."""
        if self.state_dtype != "int8":
            return (f"the moments held in {self.state_dtype} between steps (each new moment "
                    f"rounded to the nearest {self.state_dtype} after the weight's step)")
        return (f"the moments held in 8 bits between steps: bitsandbytes' dynamic maps over "
                f"blocks of {self.block} elements, one float32 maximum per block, for weights "
                f"of at least 4096 elements" +
                (f" whose size is a multiple of {self.block} (torchao's rule)" if self.whole
                 else ""))

    @property
    def keywords(self):
        """The ``verify`` keywords that ask for it."""
        kw = f"state_dtype={self.state_dtype!r}"
        return kw + (f", block={self.block}" if self.state_dtype == "int8" else "") + (
            ", whole_blocks=True" if self.whole else "")

    def holds(self, size):
        """Whether a weight of ``size`` elements has its moments held."""
        from ..optimizers.held import INT8_MIN_SIZE
        if self.state_dtype != "int8":
            return True
        return size >= INT8_MIN_SIZE and not (self.whole and size % self.block)

    def reference(self, ref):
        """``ref`` (a reference module) with its moments held this way."""
        return HeldReference(getattr(ref, "plain", ref), self)


def signs_of(name):
    """``{slot: signed}`` of optimizer ``name``'s moments (``Spec.moments``)."""
    from .trajectory import spec_of
    return {k: v == "signed" for k, v in spec_of(name).moments.items()}


class HeldReference:
    """A reference module whose step holds the moments it returns (:class:`Held`); every other
    name is the module's (``plain``)."""

    def __init__(self, ref, form):
        self.plain, self.form, self.signs = ref, form, signs_of(ref.NAME)

    def __getattr__(self, name):
        return getattr(self.plain, name)

    def _hold(self, state, size):
        from reference import lowbit
        if not self.form.holds(size):
            return state
        f = self.form
        return {k: (lowbit.held(v, f.state_dtype, self.signs[k], f.block or lowbit.BLOCK,
                                scale=_safety(), slack=SLACK)
                    if k in self.signs and isinstance(v, np.ndarray | _tracked()) else v)
                for k, v in state.items()}

    def init_state(self, weight, **hyper):
        """The module's initial state, its moments held."""
        return self._hold(self.plain.init_state(weight, **hyper), int(np.size(weight)))

    def step(self, weight, grad, state, **kwargs):
        """The module's step; the new moments held."""
        w, new = self.plain.step(weight, grad, state, **kwargs)
        return w, self._hold(dict(new), int(np.size(getattr(weight, "value", weight))))


def _tracked():
    from reference.error_bound import Tracked
    return Tracked


def _safety():
    from ..error_bounds import SAFETY
    return SAFETY


def check(name, state_dtype, block=None, whole_blocks=False):
    """The :class:`Held` ``verify`` is asked for (None for ``state_dtype=None``), checked: an
    optimizer with moments, a known state dtype, a block size only for int8 (256 by default:
    a positive int)."""
    from ..optimizers.held import STATE_DTYPES, held_optimizers
    if state_dtype is None:
        if block is not None or whole_blocks:
            raise ValueError("block and whole_blocks describe int8 states: pass "
                             "state_dtype='int8' with them")
        return None
    if state_dtype not in STATE_DTYPES[1:]:
        raise ValueError(f"state_dtype must be one of {STATE_DTYPES}, got {state_dtype!r}")
    if not signs_of(name):
        raise ValueError(f"state_dtype={state_dtype!r}: {name} has no element-wise moments to "
                         f"hold (the optimizers that do: {', '.join(held_optimizers())})")
    if state_dtype != "int8":
        if block is not None or whole_blocks:
            raise ValueError(f"block and whole_blocks describe int8 states, not "
                             f"{state_dtype!r} ones")
        return Held(state_dtype)
    block = 256 if block is None else block
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be an int >= 1 (elements per block), got {block!r}")
    return Held("int8", block, bool(whole_blocks))


def forms(name, dtype="float32"):
    """The held forms ``identify`` tries for optimizer ``name``, in order: bfloat16, then int8
    at each of :data:`BLOCKS`, then the same for whole blocks only (none without moments).
    Float64 weights add float32 states first."""
    if not signs_of(name):
        return []
    first = [Held("float32")] if np.dtype(dtype) == np.float64 else []
    return first + [Held("bfloat16")] + [Held("int8", b) for b in BLOCKS] + \
        [Held("int8", b, True) for b in BLOCKS]


def cases(name, dt, fixed=None):
    """The held cases of optimizer ``name`` in ``dt`` with ``fixed`` pinned: one per
    :data:`SHAPES`, :data:`STEPS` steps each, hyperparameters from the usual domain and values
    over the dtype's decades as :func:`toolkit.oracle.cases.draw` draws them, at :data:`SEED`
    (no other case of the oracle moves)."""
    klass = _cases.optimizer_class(name)
    hyper_space = _space.hyper_space(name, fixed, "usual")
    (wlo, whi), (glo, ghi) = _cases.RANGES[np.dtype(dt).name]
    out = []
    for k, shape in enumerate(SHAPES):
        for attempt in range(_cases.ATTEMPTS):
            rng = np.random.default_rng([SEED, k, attempt])
            hyper = _space.fix_dependent(name, {h: _cases.aimed(s, rng)
                                                for h, s in hyper_space.items()})
            if _cases.constructible(klass, hyper):
                break
        else:
            continue
        n = math.prod(shape)
        w = _values(rng, n, wlo, whi, dt).reshape(shape)
        grads = [_values(rng, n, glo, ghi, dt).reshape(shape) for _ in range(STEPS)]
        out.append(_cases.Case(hyper, w, grads))
    return out


def _values(rng, n, lo, hi, dt):
    """``n`` values over ``10**lo .. 10**hi`` (:func:`toolkit.oracle.space.array_over_decades`,
    exact zeros among them), each run of :data:`CHUNK` elements scaled by its own factor over
    :data:`SPREAD` decades so that every block size sees maxima of its own, rounded to
    ``dt``."""
    x = _space.array_over_decades(rng, n, lo + SPREAD, hi)
    x *= np.repeat(_space.powers_of_ten(rng.uniform(-SPREAD, 0, -(-n // CHUNK))), CHUNK)[:n]
    return x.astype(dt).astype(np.float64)
