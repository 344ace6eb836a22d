"""The ``Optimizer`` base class: MXNet 1.9.1's optimizer interface, ``update`` and the dispatch
of a step to a backend ("reference", "cpu", "cuda", "auto"), the warm step of the same arrays
(:class:`~toolkit.backends.cpu_elementwise.PreparedStep`), ``next_step`` (the oracle's door)
and the float32 rounding helpers of the rules. The rest is in mixins, one responsibility each:

* :class:`~toolkit.optimizers.hyperparameters.Hyperparameters`: checked attributes, settings, repr;
* :class:`~toolkit.optimizers.checks.ArrayChecks`: the state and the array contract;
* :class:`~toolkit.optimizers.batched.BatchedBookkeeping`: learning rate, schedule, multipliers
  and counts, per index (``bookkeeping.py``) and for many indices (``batched.py``);
* :class:`~toolkit.optimizers.precision.MultiPrecision`: float16 weights with a float32 master;
* :class:`~toolkit.optimizers.nonfinite.NonFiniteGuard`: ``skip_nonfinite``;
* :class:`~toolkit.optimizers.reference_step.ReferenceStep`: the reference backend's hooks;
* :class:`~toolkit.optimizers.row_sparse.RowSparseSteps`: ``RowSparse`` gradients;
* :class:`~toolkit.optimizers.trainer_hooks.TrainerHooks`: the Trainer's seams;
* :class:`~toolkit.optimizers.held.HeldStates`: moments held below float32 (``state_dtype``);
* :class:`~toolkit.optimizers.backend_choice.BackendChoice`: the backend of a step.
"""
from __future__ import annotations

import inspect
import struct
import warnings
from typing import NamedTuple

import numpy as np

from ..backends import cpu, launches
from ..backends.cpu_elementwise import PreparedStep
from ..backends.launches import Launch
from . import aliases as _aliases
from .backend_choice import BackendChoice
from .batched import BatchedBookkeeping, StepScalars
from .bookkeeping import Counts
from .checks import ArrayChecks, Slot
from .hyperparameters import Hyperparameters, install_checked_attributes
from .nonfinite import NonFiniteGuard
from .held import STATE_DTYPES, STATE_ROUNDINGS, HeldStates
from .precision import MultiPrecision
from .reference_step import ReferenceStep
from .row_sparse import RUNNING as SPARSE_STEPS_RUNNING
from .row_sparse import RowSparseSteps
from .trainer_hooks import TrainerHooks
from .spec import CONVENTIONS, default_convention
from ..sparse import RowSparse
from .validation import callable_or_none, check_nonneg, choice, flag, integer, nonneg

__all__ = ["Optimizer", "StepInputs", "StepScalars", "Slot", "row_step", "scalar_only",
           "BACKENDS", "CONVENTIONS"]

BACKENDS = ("auto", "reference", "cpu", "cuda")

_FLOAT16 = np.dtype(np.float16)
_KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: what the layout of a class's state comes from: defined by the toolkit, it is a function of
#: the checked hyperparameters (``Optimizer._keep_warm``)
_LAYOUT_METHODS = ("state_slots", "_tuple_state", "create_state_template", "_slot_template",
                   "_template_key")
#: what the prepared step does not call (it is what they would do): the class's must be these
#: very functions of ``Optimizer``
_BYPASSED = ("update", "_apply", "_step", "_check_index", "_check_weight", "_check_grad",
             "_check_state", "state_arrays")
#: class -> whether ``Optimizer._keep_warm`` may keep its steps
_KEEPS_WARM: dict = {}
#: ``_kernel_step`` functions marked with :func:`scalar_only` -> the kind of their launch
_SCALAR_ONLY_STEPS: dict = {}

_F32 = struct.Struct("=f")  # standard size: OverflowError beyond float32's range


def _round_f32(x):
    """``x`` rounded to float32, as a Python float: the C conversion numpy's ``float32(x)``
    makes (-0.0 keeps its sign), through ``struct`` (a third of numpy's time), which refuses
    what lies beyond float32's range where numpy gives an infinity. Here, beside ``update``:
    a warm step calls it, and enters few files (tests/test_call_count.py)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return float(np.float32(x))


def _as_is(x):
    return x


def scalar_only(kernel_step=None, *, kind="rule"):
    """Mark a ``_kernel_step`` whose launch (rule and hyperparameters) is a function of
    ``(t, lr, wd)`` and the optimizer's attributes only (and an index's ``host_scalars``, handed
    to ``kernel_row``): it reads no other per-index bookkeeping, writes nothing. A Trainer plans
    it once per distinct ``(t, lr, wd)`` of a group, one row for each. ``kind``: its launch's
    (``"rule"``, or Adafactor's ``"factored"``). A subclass that overrides ``_kernel_step`` is
    unmarked unless it marks its own."""
    def mark(step):
        _SCALAR_ONLY_STEPS[step] = kind
        return step
    return mark if kernel_step is None else mark(kernel_step)


@scalar_only
def row_step(self, index, weight, grad, state, t, lr, wd):
    """The ``_kernel_step`` of an optimizer whose launch is its :meth:`Optimizer.kernel_row`:
    that rule over ``(weight, grad, *state arrays)`` with that row."""
    sparse = self._row_sparse_numerics
    factory, row = (self.kernel_row(t, lr, wd) if sparse is None else
                    self.kernel_row(t, lr, wd, sparse=sparse))
    return Launch("rule", factory, weight, grad, self.state_arrays(state), row)


class StepInputs(NamedTuple):
    """What the next update of an index reads (:meth:`Optimizer.next_step`)."""
    t: int                   #: the per-index count after this step (1 on the first)
    lr: float                #: learning rate with schedule and ``lr_mult``
    wd: float                #: weight decay with ``wd_mult``
    reference_state: dict    #: bookkeeping the oracle keeps in its state dict
    reference_kwargs: dict   #: extra keyword arguments of ``reference.<name>.step``


class Optimizer(Hyperparameters, HeldStates, ArrayChecks, MultiPrecision, NonFiniteGuard,
                ReferenceStep, RowSparseSteps, TrainerHooks, BatchedBookkeeping, BackendChoice):
    """Base class of all optimizers (MXNet 1.9.1's ``mxnet.optimizer.Optimizer``).

    Parameters
    ----------
    rescale_grad : float, default 1.0
        Multiplies the gradient before anything else, clipping included (docs/mxnet-facts.md,
        2.2).
    param_idx2name : dict of int to str, optional
        Index to parameter name; with it, ``set_wd_mult`` gives weight decay multiplier 0 to names
        that end neither in ``_weight`` nor in ``_gamma`` (MXNet's Module convention).
    wd : float, default 0.0
        Weight decay; where it enters differs per optimizer (``docs/conventions.md``).
    clip_gradient : float or None, default None
        Clip the rescaled gradient to ``[-c, c]``. ``0.0`` is "off" for MXNet's kernel
        optimizers and "clip to zero" for its Python-op optimizers (convention "mxnet").
    learning_rate : float, optional
        Defaults to the optimizer's own default, else 0.01 (MXNet).
    lr_scheduler : toolkit.lr_scheduler.LRScheduler, optional
        Called with ``num_update``; a given ``learning_rate`` overwrites its ``base_lr``.
    begin_num_update : int, default 0
        The count every index starts from: the first step has ``t = begin_num_update + 1``.
        At most 2**52 (a states file holds counts up to 2**53).
    multi_precision : bool, default False
        For float16 weights keep a float32 master copy and float32 state.
    param_dict : dict of int to Parameter-like, optional
        Gluon's per-index parameters; their ``lr_mult``/``wd_mult`` take precedence.
    backend : {"auto", "reference", "cpu", "cuda"}, default "auto"
        "reference" runs the float64 oracle (slow, for checks); "cpu" the Numba kernels;
        "cuda" the numba-cuda kernels on CUDA arrays (numba, CuPy, PyTorch; the ``cuda``
        extra); "auto" picks by the array type (device arrays to CUDA, numpy arrays to CPU).
    convention : {"mxnet", "guide", "pytorch", "paper"}, default None
        MXNet 1.9.1's numerics, the guide's equations, torch.optim's update (the optimizers
        torch ships: those whose spec lists "pytorch"), or the published algorithm of an
        optimizer MXNet never had (``docs/conventions.md``). None: the optimizer's default, its
        spec's first convention ("mxnet" for MXNet's family and for an optimizer without a
        spec).
    state_dtype : {None, "float32", "bfloat16", "int8"}, default None
        How the element-wise moments (``spec.moments``) are held: None, the weight's dtype;
        else float32, bfloat16 or 8-bit blockwise codes (:mod:`~toolkit.optimizers.held`).
    state_rounding : {"nearest", "stochastic"}, default "nearest"
        How a new moment is rounded into a bfloat16 slot; ``state_seed`` (default 0) seeds the
        stochastic rounding (reproducible per index and step, as SGLD's noise).
    """

    #: this optimizer's :class:`~toolkit.optimizers.spec.Spec`, declared beside the class
    #: (None: registered with a bare one)
    spec = None
    #: whether the update divides by the learning rate (FTRL, FTML): then lr must be > 0
    requires_positive_lr = False
    #: MXNet's ``aggregate_num`` (MXNet 1.9.1 python/mxnet/optimizer/optimizer.py:127, 581):
    #: kept for code that reads it; it changes no number here.
    aggregate_num = 0
    #: whether every state array is shaped like the weight (element ``i`` belonging to weight
    #: element ``i``): then a ``Trainer`` makes a group's state with one ``create_state`` over
    #: the group's flat weight. False (GroupAdaGrad: state ``(rows, 1)``, a row rule): the
    #: Trainer makes each parameter's state for its own weight and lays each state array out in
    #: a flat buffer of its own; either way a group steps in one call.
    state_like_weight = True

    #: the hyperparameters this class adds, attribute name -> :class:`Domain`
    #: (``toolkit.optimizers.validation``): each becomes a checked attribute, so the
    #: constructor's ``self.beta1 = beta1`` and every later ``opt.beta1 = x`` run the same check
    #: (:meth:`hyperparameter_domains` merges a class's with its bases').
    domains = {
        "lr": nonneg(keyword="learning_rate"),
        "rescale_grad": nonneg(),
        "wd": nonneg(),
        "clip_gradient": nonneg(none="use None to disable clipping"),
        "lr_scheduler": callable_or_none(),
        # a states file holds counts up to 2**53 (exact in float64): 2**52 steps of room
        "begin_num_update": integer(0, maximum=2 ** 52),
        "multi_precision": flag(),
        "convention": choice(CONVENTIONS),
        "backend": choice(BACKENDS, numeric=False),
        "state_dtype": choice(STATE_DTYPES),          # toolkit.optimizers.held
        "state_rounding": choice(STATE_ROUNDINGS),
        "state_seed": integer(0, maximum=2 ** 64 - 1),
    }

    def _state_layout_key(self):
        """What the layout and meaning of state made now depend on: the template's key, the
        float32 master copy, :meth:`_state_meaning` (SGD's momentum: -lr*buf or torch's)."""
        return self._template_key(), self.multi_precision, self._state_meaning()

    def __new__(cls, *args, **kwargs):
        # another framework's keyword (lr, weight_decay, betas, eps, ...): a TypeError that names
        # MXNet's, before anything is built (the one table: toolkit/optimizers/aliases.py)
        _aliases.check_keywords(cls, kwargs)
        self = super().__new__(cls)
        self._given = dict(kwargs)  # the keywords given: repr shows them
        return self

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        step = getattr(cls, "_kernel_step", None)  # its own or a mixin's
        if inspect.isfunction(step) and "launcher" in inspect.signature(step).parameters:
            raise TypeError(
                f"{cls.__qualname__}._kernel_step(self, index, weight, grad, state, t, lr, wd) "
                "returns what to run instead of running it through a launcher: return "
                "toolkit.backends.launches.rule(factory, weight, grad, states, row) where it "
                "called launcher.run_rule(...), or yield each launch (docs/trainer.md)")

    def __init__(self, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None,
                 learning_rate=None, lr_scheduler=None, sym=None, begin_num_update=0,
                 multi_precision=False, param_dict=None, backend="auto", convention=None,
                 state_dtype=None, state_rounding="nearest", state_seed=0):
        self.rescale_grad = rescale_grad    # each a checked attribute (``domains``)
        self.wd = wd
        self.clip_gradient = clip_gradient
        if learning_rate is not None:
            learning_rate = check_nonneg("learning_rate", learning_rate)
        self.lr_scheduler = lr_scheduler
        if sym is not None:
            raise ValueError("sym (symbolic graphs) is not supported; pass param_idx2name instead")
        self.begin_num_update = begin_num_update
        self.multi_precision = multi_precision
        self.state_dtype, self.state_rounding = state_dtype, state_rounding
        self.state_seed = state_seed
        self.backend = backend
        self.convention = default_convention(type(self)) if convention is None else convention
        if param_idx2name is None:
            param_idx2name = {}
        if not isinstance(param_idx2name, dict):
            raise TypeError("param_idx2name must be a dict of index to name")
        self.idx2name = dict(param_idx2name)
        self.param_dict = param_dict if param_dict is not None else {}

        # MXNet optimizer.py:109-116: lr 0.01 when neither is given; a given learning_rate
        # overwrites the scheduler's base_lr.
        if learning_rate is None and lr_scheduler is None:
            learning_rate = 0.01
        if lr_scheduler is not None and learning_rate is not None:
            if getattr(lr_scheduler, "base_lr", learning_rate) != learning_rate:
                warnings.warn(f"learning_rate {learning_rate} overwrites the lr_scheduler's "
                              f"base_lr {lr_scheduler.base_lr} (as in MXNet)", UserWarning,
                              stacklevel=3)
            lr_scheduler.base_lr = learning_rate
        self.lr = learning_rate if learning_rate is not None else getattr(lr_scheduler, "base_lr", 0.01)

        self.num_update = self.begin_num_update
        self._index_update_count = Counts()
        self.lr_mult: dict = {}
        self.wd_mult: dict = {}
        self.set_lr_mult({})
        self.set_wd_mult({})
        self.check_relations()
        self._check_convention()
        self.check_state_dtype()
        self._constructed = True

    # --- update ----------------------------------------------------------------------------
    def update(self, index, weight, grad, state, *, stream=None, skip_nonfinite=False):
        """Update ``weight`` and ``state`` in place from ``grad`` (the weight's dtype and kind).

        On the CUDA backend the step is enqueued on ``stream`` (a numba, CuPy or PyTorch stream,
        or a handle), else on the weight's own stream (the one CuPy exports; PyTorch's current
        stream for a tensor), and this returns without waiting.

        ``grad`` may be a ``toolkit.RowSparse`` (see :meth:`row_sparse_mode`); it is only read,
        and may be a read-only array.

        ``skip_nonfinite`` (default False: MXNet's behaviour, NaN and infinity propagate): when
        True, ``grad`` is read once first, and if it holds a NaN or an infinity nothing is
        updated (weight, state, this index's count and ``num_update`` stay as they were) and
        this returns False; otherwise the update is made and this returns True. On CUDA the
        check reads one small flag array back (the step's one synchronisation). Without it
        this returns None, as MXNet's ``update`` does (docs/trainer.md, "Skipping non-finite
        gradients").
        """
        warm = self.__dict__.get("_warm")
        if warm is not None and skip_nonfinite is False and not SPARSE_STEPS_RUNNING[0]:
            prepared = warm.get(id(weight))
            # the very arrays of an earlier step that passed, unchanged: the step as kernel_row
            # gives it, run by the step prepared for them (_keep_warm says when). Without a
            # schedule reading the scalars changes nothing, so a step the kernel refuses, or
            # whose scalars raise, is taken again below, every array checked first.
            retry = self.lr_scheduler is None
            if prepared is not None and (type(index) is int or type(index) is str) and \
                    prepared.holds(weight, grad, state, retry):
                try:
                    t, lr, wd = self._step_scalars(index)
                    rule, row = self.kernel_row(t, lr, wd)
                except Exception:
                    if not retry:
                        raise
                else:
                    if prepared.run(rule, row, weight, grad, state):  # row_step's: no
                        self._commit_count(index, t)                 # host scalars
                        return None
                warm.pop(id(weight), None)
        if skip_nonfinite is not False:
            return self._guarded(False, index, weight, grad, state, stream, skip_nonfinite)
        if type(grad) is RowSparse:
            return self._row_sparse_update(index, weight, grad, state, multi_precision=False,
                                           stream=stream)
        self._check_index(index)
        w = self._checked_before(weight, grad, state)
        if w is not None:  # the same numpy arrays as a step that passed, unchanged
            self._apply(index, weight, grad, state, self._resolve_backend(w), w)
            return
        w = self._check_weight(weight)
        backend = self._resolve_backend(w)
        g = self._check_grad(w, grad)
        template = self.create_state_template(w)
        known = self._check_state(state, w, template, others=(("grad", g),))
        if not self._keep_warm(weight, grad, state, backend):
            self._remember_checked(weight, grad, state, template)
        self._apply(index, weight, grad, state, backend, w, stream=stream,
                    known=[w, g] + known)

    def _keep_warm(self, weight, grad, state, backend):
        """Keep a :class:`~toolkit.backends.cpu_elementwise.PreparedStep` for arrays that passed
        every check, for a step that is its ``kernel_row`` (:func:`row_step`) on the CPU over
        C-contiguous, writeable float32/float64 numpy arrays, outside a row-sparse step, of a
        class whose state layout the toolkit makes from its checked hyperparameters (an
        assignment drops the prepared steps) and that keeps what the step bypasses."""
        cls = type(self)
        fits = _KEEPS_WARM.get(cls)
        if fits is None:
            fits = _KEEPS_WARM[cls] = cls._kernel_step is row_step and all(
                getattr(cls, m).__module__.startswith("toolkit.") for m in _LAYOUT_METHODS) \
                and all(getattr(cls, m) is getattr(Optimizer, m) for m in _BYPASSED)
        leaves = self._numpy_leaves(state)
        if not fits or backend != "cpu" or type(weight) is not np.ndarray or \
                self.state_dtype is not None or \
                any(m in self.__dict__ for m in _BYPASSED + ("_kernel_step",)) or \
                type(grad) is not np.ndarray or weight.dtype not in _KERNEL_DTYPES or \
                leaves is None or any(a is None for a in leaves) or \
                not grad.flags.writeable or \
                not all(a.flags.c_contiguous for a in (weight, grad, *leaves)) or \
                self._row_sparse_numerics is not None:
            return False
        warm = self.__dict__.setdefault("_warm", {})
        if len(warm) > 4096:
            warm.clear()
        warm[id(weight)] = PreparedStep(weight, grad, state)
        return True

    def __getstate__(self):
        """The optimizer without what it keeps of arrays it stepped (weak references)."""
        d = dict(self.__dict__)
        for memo in ("_warm", "_checked"):
            d.pop(memo, None)
        return d

    def __setstate__(self, state):
        """A pickled optimizer (an older version's too): its remembered constants made anew."""
        self.__dict__.update(state)
        self.__dict__["_hyper_version"] = object()

    def next_step(self, index, weight=None):
        """What the next update of ``index`` will read, computed without changing anything
        (:class:`StepInputs`): the count ``t``, the learning rate and weight decay, checked as
        ``update`` checks them, and what the oracle needs beside the state arrays:
        ``reference_state`` (bookkeeping kept on the optimizer: Nadam's schedule, LBSGD's
        accumulator, which needs ``weight`` for its shape) and ``reference_kwargs`` (extra
        keyword arguments of ``reference.<name>.step``: SGLD's seed and stream). The reference
        backend, ``toolkit.error_bounds`` and the Trainer read a step through it."""
        t, lr, wd = self._step_scalars(index)
        return StepInputs(t, lr, wd, dict(self._reference_extra(index, weight)),
                          dict(self._reference_call_kwargs(index, t)))

    @property
    def has_kernel(self):
        """Whether this optimizer's step runs as a kernel (a built-in optimizer, or one with an
        element-wise ``rule``): the Trainer then plans a whole group's step as one kernel call.
        An optimizer that only overrides ``update`` (any Python code) has none: the Trainer
        calls its ``update`` once per parameter (docs/custom-optimizer.md)."""
        return type(self)._kernel_step is not Optimizer._kernel_step

    @property
    def plans_by_scalars(self):
        """Whether this optimizer's step is :func:`scalar_only` with a rule (``toolkit.torch``'s
        shortcut)."""
        return self.scalar_launch == "rule"

    @property
    def scalar_launch(self):
        """The launch kind of a :func:`scalar_only` step, else None (the Trainer's shortcut)."""
        return _SCALAR_ONLY_STEPS.get(type(self)._kernel_step)

    def _apply(self, index, weight, grad, state, backend, w, stream=None, mirror=None,
               known=(), rows=None, launcher=None):
        """Validated arrays in (``known``: their descriptions); one step applied through
        ``launcher`` (None: the CPU's, or on CUDA one made here); counts committed last.
        ``rows`` (CUDA only): a lazy row-sparse step, ``grad`` the values of those rows."""
        t, lr, wd = self._step_scalars(index)
        if backend == "cuda":
            from ..backends import cuda
            self._step(backend, index, weight, grad, state, t, lr, wd,
                       cuda.Launcher(w, stream=stream, mirror=mirror, known=known, rows=rows))
        elif w.dtype == _FLOAT16:
            # float16 storage without a master copy: float32 arithmetic, rounded back after the step
            w32 = cpu.to_single(weight)
            states32 = self._map_state(state, cpu.to_single)
            self._step(backend, index, w32, cpu.to_single(grad), states32, t, lr, wd,
                       launcher or cpu.LAUNCHER)
            cpu.to_half_into(weight, w32)
            self._zip_state(state, states32, cpu.to_half_into)
        else:
            self._step(backend, index, weight, grad, state, t, lr, wd, launcher or cpu.LAUNCHER)
        self._commit_step(index, t, lr)

    # --- row-sparse gradients (toolkit/optimizers/row_sparse.py) ------------------------------
    def row_sparse_mode(self, index):
        """How a ``toolkit.RowSparse`` gradient for ``index`` is applied, as MXNet 1.9.1 does:
        ``"lazy"`` (only the rows present are updated, weight and state), ``"standard"`` (every
        row, the absent ones with gradient 0) or ``"dense"`` (the gradient made dense, then
        the dense update: MXNet's storage fallback, the default). May raise where MXNet
        refuses (AdaGrad with weight decay) or where the toolkit does not follow it."""
        return "dense"

    def _step(self, backend, index, weight, grad, state, t, lr, wd, launcher):
        """One step on validated arrays. Subclasses implement ``_kernel_step`` (it returns what
        to run, ``toolkit.backends.launches``; ``launcher`` runs it) and ``_reference_step`` (generic for optimizers with a reference
        module)."""
        if backend == "reference":
            self._reference_step(index, weight, grad, state, t, lr, wd)
        else:
            launches.run(self.keyed(index, t, self._kernel_step(index, weight, grad, state, t,
                                                                lr, wd)), launcher)

    def kernel_row(self, t, lr, wd, sparse=None):
        """``(factory, row)``: the rule and the hyperparameter row of a step at count ``t``
        with learning rate ``lr`` and weight decay ``wd``, for an optimizer whose
        ``_kernel_step`` is :func:`row_step` (the rule then runs over the weight, the gradient
        and the state arrays in ``state_slots()`` order). A function of the three and the
        optimizer's attributes only: ``toolkit.torch`` and the Trainer plan a group's step
        from it, one row per distinct ``(t, lr, wd)``. ``sparse``: None for a dense step, else
        the row-sparse mode of the step ("lazy" or "standard"; ``row_sparse_mode``), for the
        optimizers whose MXNet row-sparse kernel rounds differently (Adam, SGD)."""
        raise NotImplementedError(f"{type(self).__name__} has no kernel_row: its step is not "
                                  "one rule call planned from (t, lr, wd) alone")

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        raise NotImplementedError(f"{type(self).__name__} has no kernel: override `update`, or "
                                  "derive it from ElementwiseOptimizer and give it a `rule` "
                                  "(docs/custom-optimizer.md)")

    # --- helpers for subclasses ----------------------------------------------------------------

    #: True for MXNet's kernel optimizers, whose hyperparameters MXNet rounds to float32
    #: (docs/mxnet-facts.md, 3); Python-op optimizers round only the clip bound.
    mxnet_kernel = True

    def _rounded(self, x):
        """A kernel hyperparameter as the convention uses it: rounded to float32 under
        convention "mxnet" for MXNet's kernel optimizers (float64 weights included)."""
        if self.convention == "mxnet" and self.mxnet_kernel and x is not None:
            return _round_f32(x)
        return x

    def _constants(self, slot, build):
        """``build()`` (a step's rounded constants, made from the hyperparameters, the convention
        and ``mxnet_kernel``), remembered in the attribute ``slot`` until a hyperparameter is
        assigned (any assignment gives ``_hyper_version`` a new object) or ``mxnet_kernel``
        changes: always what ``build()`` returns now."""
        d = self.__dict__
        held = d.get(slot)
        version, kernel = d.get("_hyper_version"), self.mxnet_kernel
        if held is not None and held[0] is version and held[1] is kernel:
            return held[2]
        value = build()
        d[slot] = (version, kernel, value)
        return value

    def _float_rounder(self):
        """:meth:`_rounded` as a plain function of a float (never None): ``_round_f32`` where
        ``_rounded`` rounds, else the identity; for a value rounded every step beside
        :meth:`_constants`."""
        return _round_f32 if (self.convention == "mxnet" and self.mxnet_kernel) else _as_is

    def _clip_bound(self):
        """The clip bound for a rule, -1 meaning off, with each convention's gating."""
        c = self.clip_gradient
        if self.convention == "mxnet":
            if self.mxnet_kernel:
                return float(np.float32(c)) if c else -1.0
            return -1.0 if c is None else float(np.float32(c))
        return -1.0 if c is None else c

install_checked_attributes(Optimizer)
