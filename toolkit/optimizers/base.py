"""The ``Optimizer`` base class: MXNet 1.9.1's optimizer interface and its dispatch.

Subclasses declare their hyperparameters and a per-element rule; this class does everything
shared. What it holds itself: the checked hyperparameters (``domains``, ``settings``, the
assignment checks and ``repr``), state creation, ``update`` and the dispatch of a step to a
backend ("reference", "cpu", "cuda", "auto"), ``next_step`` (the oracle's door) and the Trainer's
seams (``plan_step``, ``launch_step``, ``restored_on_error``), and the float32 rounding helpers
of the rules. The rest is in mixins of their own, one responsibility each, that ``Optimizer``
derives from:

* :class:`~toolkit.optimizers.bookkeeping.Bookkeeping`: MXNet's learning rate, schedule,
  multipliers and counts (``bookkeeping.py``);
* :class:`~toolkit.optimizers.checks.ArrayChecks`: the array contract, checked before anything
  is written, and the memo of arrays that passed (``checks.py``);
* :class:`~toolkit.optimizers.precision.MultiPrecision`: float16 weights with a float32 master
  copy (``precision.py``);
* :class:`~toolkit.optimizers.nonfinite.NonFiniteGuard`: ``skip_nonfinite`` (``nonfinite.py``);
* :class:`~toolkit.optimizers.reference_step.ReferenceStep`: the reference backend's hooks
  (``reference_step.py``);
* :class:`~toolkit.optimizers.launching.LaunchContext`: the launcher and row-sparse mode of the
  step in progress (``launching.py``);
* :class:`~toolkit.optimizers.row_sparse.RowSparseSteps`: ``update`` with a ``RowSparse``
  gradient (``row_sparse.py``).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import operator
import warnings
from typing import NamedTuple

import numpy as np

from ..backends import arrays, cpu
from . import aliases as _aliases
from .bookkeeping import Bookkeeping, StepScalars
from .checks import ArrayChecks, Slot
from .counts import Counts
from .launching import LaunchContext
from .nonfinite import NonFiniteGuard
from .precision import MultiPrecision
from .reference_step import ReferenceStep
from .row_sparse import RowSparseSteps
from .spec import CONVENTIONS, DEFAULT_CONVENTIONS
from ..sparse import RowSparse
from .validation import (AliasAttribute, Domain, alias_attribute, callable_or_none,
                         check_choice, check_int, check_nonneg, check_positive, check_unit,
                         checked_attribute, choice, flag, integer, nonneg)

__all__ = ["Optimizer", "StepInputs", "StepScalars", "Slot", "row_step", "scalar_only",
           "BACKENDS", "CONVENTIONS"]

BACKENDS = ("auto", "reference", "cpu", "cuda")

_FLOAT16 = np.dtype(np.float16)


#: ``_kernel_step`` functions marked with :func:`scalar_only`
_SCALAR_ONLY_STEPS: set = set()


@functools.lru_cache(maxsize=4096)
def _round_f32_memo(x):
    return float(np.float32(x))


def _round_f32(x):
    """``x`` rounded to float32, as a Python float (memoised: a step rounds the same few
    hyperparameters for every parameter; not the zeros, which the memo cannot tell apart:
    -0.0 keeps its sign)."""
    if x == 0:
        return float(np.float32(x))
    return _round_f32_memo(x)


def _as_is(x):
    return x


def scalar_only(kernel_step):
    """Mark a ``_kernel_step`` whose launch (rule and hyperparameters) is a function of
    ``(t, lr, wd)`` and the optimizer's attributes only: it reads neither the index nor any
    per-index bookkeeping, and writes nothing on the optimizer. A Trainer then plans such a step
    once per distinct ``(t, lr, wd)`` of a group and gives every parameter with the same three
    the same hyperparameter row. A subclass that overrides ``_kernel_step`` is unmarked unless
    it marks its own."""
    _SCALAR_ONLY_STEPS.add(kernel_step)
    return kernel_step


@scalar_only
def row_step(self, index, weight, grad, state, t, lr, wd):
    """The ``_kernel_step`` of an optimizer whose launch is its :meth:`Optimizer.kernel_row`:
    that rule over ``(weight, grad, *state arrays)`` with that row."""
    factory, row = self.kernel_row(t, lr, wd)
    self._run_rule(factory, weight, grad, self.state_arrays(state), row)


class StepInputs(NamedTuple):
    """What the next update of an index reads (:meth:`Optimizer.next_step`)."""
    t: int                   #: the per-index count after this step (1 on the first)
    lr: float                #: learning rate with schedule and ``lr_mult``
    wd: float                #: weight decay with ``wd_mult``
    reference_state: dict    #: bookkeeping the oracle keeps in its state dict
    reference_kwargs: dict   #: extra keyword arguments of ``reference.<name>.step``


def _jsonable(value):
    """A hyperparameter's value as JSON holds it: a learning-rate scheduler as its type and
    configuration (``config()`` where it has one, else its repr)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if callable(value):
        kind = type(value).__module__ + "." + type(value).__qualname__
        text = repr(value)
        if hasattr(value, "config"):
            return {"type": kind, "config": value.config(), "repr": text}
        code = getattr(value, "__code__", None)
        if code is not None:   # a plain function: its name and what its code computes
            body = repr((code.co_code, code.co_consts, code.co_names)).encode()
            return {"type": kind, "name": getattr(value, "__qualname__", "?"),
                    "code": hashlib.sha256(body).hexdigest()[:16]}
        if " at 0x" not in text:
            return {"type": kind, "config": text}
        # a repr that holds an address differs in every process: the attributes instead
        return {"type": kind, "config": {k: _jsonable(v) for k, v in
                                         sorted(getattr(value, "__dict__", {}).items())}}
    text = repr(value)
    return text if " at 0x" not in text else f"<{type(value).__module__}.{type(value).__qualname__}>"


def _install_checked_attributes(cls):
    """Turn each name in ``cls.domains`` (the class's own declaration) into a checked
    attribute of ``cls``, and each of its other names (the keyword, the aliases) into an
    :class:`AliasAttribute` of it, unless the class chain defines that name otherwise (the
    ``learning_rate`` property, a hyperparameter of that name)."""
    own = cls.__dict__.get("domains", {})
    for attr, domain in own.items():
        if not isinstance(domain, Domain):
            raise TypeError(f"{cls.__name__}.domains[{attr!r}] must be a Domain, got {domain!r}")
        setattr(cls, attr, checked_attribute(attr, domain, Optimizer._after_hyperparameter_set))
    for attr, domain in own.items():
        for name in domain.other_names(attr):
            if name in own or not isinstance(getattr(cls, name, AliasAttribute()), AliasAttribute):
                continue
            setattr(cls, name, alias_attribute(name, attr))


class Optimizer(ArrayChecks, MultiPrecision, NonFiniteGuard, ReferenceStep, LaunchContext,
                RowSparseSteps, Bookkeeping):
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
    convention : {"mxnet", "guide", "pytorch"}, default "mxnet"
        MXNet 1.9.1's numerics, the guide's equations, or torch.optim's update (the optimizers
        torch ships: those whose spec lists "pytorch"; ``docs/conventions.md``).
    """

    #: this optimizer's :class:`~toolkit.optimizers.spec.Spec`, declared beside the class
    #: (None: registered with a bare one)
    spec = None
    #: whether the update divides by the learning rate (FTRL, FTML): then lr must be > 0
    requires_positive_lr = False
    #: MXNet's ``aggregate_num``: how many indices its Updater hands to one aggregated
    #: ``update`` (0: none; MXNet 1.9.1 python/mxnet/optimizer/optimizer.py:127, 581). Kept for
    #: code that reads it; it changes no number here.
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
    }

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "elementwise_step" in cls.__dict__:
            raise TypeError(f"{cls.__name__} sets elementwise_step, which is now "
                            "state_like_weight (False: a state not shaped like the weight)")
        _install_checked_attributes(cls)

    @classmethod
    def hyperparameter_domains(cls):
        """Every checked hyperparameter of this class, attribute name -> :class:`Domain`:
        the base class's first, then each subclass's in order."""
        merged = {}
        for klass in reversed(cls.__mro__):
            merged.update(klass.__dict__.get("domains", {}))
        return merged

    @classmethod
    def hyperparameter_aliases(cls):
        """Every other name a hyperparameter of this class goes by that is an attribute of it,
        alias -> attribute (AdaGrad's ``eps`` -> ``float_stable_eps``, RMSProp's ``rho`` ->
        ``gamma1``): reading the alias gives the attribute's value, assigning it runs the
        attribute's check (``Domain.keyword`` and ``Domain.aliases``)."""
        out = {}
        for attr, domain in cls.hyperparameter_domains().items():
            for name in domain.other_names(attr):
                if isinstance(getattr(cls, name, None), AliasAttribute):
                    out[name] = attr
        return out

    def settings(self):
        """Every setting that changes the numbers, by constructor keyword (``learning_rate``,
        ``rescale_grad``, ``wd``, ``clip_gradient``, ``lr_scheduler``, ``begin_num_update``,
        ``multi_precision``, ``convention`` and the optimizer's own), as JSON-able values: the
        learning-rate scheduler as its type and configuration. Two optimizers of the same class
        with equal ``settings()`` compute the same numbers from the same state."""
        out = {}
        for attr, domain in self.hyperparameter_domains().items():
            if domain.numeric:
                out[domain.keyword or attr] = _jsonable(getattr(self, attr))
        return out

    def reference_hyper(self):
        """This optimizer's own hyperparameters as ``reference.<name>.step`` takes them, derived
        from the declared ``domains``: every one a subclass declares (the base class's are the
        step's own arguments: ``lr``, ``wd``, ...), by constructor keyword, in declaration
        order, but those whose domain says ``reference=False``. A class whose oracle names them
        otherwise overrides this."""
        return {domain.keyword or attr: getattr(self, attr)
                for attr, domain in self.hyperparameter_domains().items()
                if attr not in Optimizer.domains and domain.reference}

    def check_relations(self):
        """Checks that tie two hyperparameters together (LAMB's bounds): run when construction
        ends and after every later assignment of a hyperparameter, which is undone when this
        raises. Subclasses override it; the base class has none."""

    def _after_hyperparameter_set(self, attr, old):
        """Refuse an assignment after construction that breaks :meth:`check_relations` or that
        changes the layout of state already made (SGD's momentum turned on once its state is
        ``None``): the value is then put back."""
        d = self.__dict__
        if not d.get("_constructed"):
            return
        made = d.get("_state_layout")
        if made is not None and self._state_layout_key() != made:
            domain = self.hyperparameter_domains()[attr]
            name = domain.keyword or attr
            raise ValueError(
                f"{name} cannot change from {old!r} to {getattr(self, attr)!r}: that changes the "
                f"state {type(self).__name__} keeps (slots {made[0][0]} -> {self.state_slots()}, "
                f"multi_precision {made[1]} -> {self.multi_precision}), "
                "and this optimizer has already made state in the old layout. Create a new "
                f"optimizer with {name}={getattr(self, attr)!r}, or set it before the first "
                "create_state (a Trainer makes its states at construction)")
        if attr == "begin_num_update":
            self._follow_begin_num_update(old)
        self.check_relations()
        self._check_convention()

    def _check_convention(self):
        """Refuse a convention this optimizer's kernels do not implement (its spec's
        ``conventions``; "mxnet" and "guide" for an optimizer without a spec)."""
        spec = type(self).spec
        implemented = DEFAULT_CONVENTIONS if spec is None else spec.conventions
        if self.convention not in implemented:
            extra = (" (torch.optim has no such optimizer, or the toolkit does not implement "
                     "its update)" if self.convention == "pytorch" else "")
            raise ValueError(f"convention={self.convention!r} is not available for "
                             f"{type(self).__name__}{extra}; it implements {implemented}")

    def _follow_begin_num_update(self, old):
        """``begin_num_update`` is where the counts start: before any step it moves
        ``num_update`` with it; after one, it may not exceed a count already taken (a states
        file holds counts >= it)."""
        new = self.begin_num_update
        if not self._index_update_count and self.num_update == old:
            self.num_update = new
        elif new > min([self.num_update, *self._index_update_count.values()]):
            raise ValueError(f"begin_num_update {new} exceeds the update counts already taken "
                             f"(num_update {self.num_update}); set it before the first step")

    def _state_layout_key(self):
        """What the layout of state made now depends on: the template's key and whether a
        float16 weight keeps a float32 master copy."""
        return self._template_key(), self.multi_precision

    def __new__(cls, *args, **kwargs):
        # another framework's keyword (lr, weight_decay, betas, eps, ...): a TypeError that names
        # MXNet's, before anything is built (the one table: toolkit/optimizers/aliases.py)
        _aliases.check_keywords(cls, kwargs)
        self = super().__new__(cls)
        self._given = dict(kwargs)  # the keywords given: repr shows them
        return self

    def __init__(self, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None,
                 learning_rate=None, lr_scheduler=None, sym=None, begin_num_update=0,
                 multi_precision=False, param_dict=None, backend="auto", convention="mxnet"):
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
        self.backend = backend
        self.convention = convention
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
        self._constructed = True

    # ---------------------------------------------------------------------------------------
    # state
    # ---------------------------------------------------------------------------------------
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
        new = tuple(self._init_slot(name, weight) for name in slots)
        return new[0] if len(new) == 1 and not self._tuple_state() else new

    def state_made(self):
        """Record that state exists in the current layout (:meth:`create_state` calls it; a
        subclass that makes its state otherwise calls it too): from then on an assignment
        that would change the layout is refused."""
        if self.__dict__.get("_state_layout") is None:
            self._state_layout = self._state_layout_key()

    def _tuple_state(self):
        """Whether a single-slot state is returned as a 1-tuple (RMSProp's ``(n,)``)."""
        return False

    def _init_slot(self, name, weight):
        return arrays.zeros_like(weight)


    # ---------------------------------------------------------------------------------------
    # update
    # ---------------------------------------------------------------------------------------
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
        self._remember_checked(weight, grad, state, template)
        self._apply(index, weight, grad, state, backend, w, stream=stream,
                    known=[w, g] + known)


    def next_step(self, index, weight=None):
        """What the next update of ``index`` will read, computed without changing anything
        (:class:`StepInputs`): the count ``t``, the learning rate (schedule and multiplier) and
        weight decay (multiplier), checked as ``update`` checks them, and what the oracle needs
        beside the state arrays: ``reference_state`` (bookkeeping kept on the optimizer, such as
        Nadam's momentum schedule or LBSGD's accumulator, which needs ``weight`` for its shape)
        and ``reference_kwargs`` (extra keyword arguments of ``reference.<name>.step``, such as
        SGLD's seed and stream). The reference backend, ``toolkit.verify`` and the Trainer all
        read a step through it, so a new optimizer plugs into all three by defining
        ``_reference_extra`` and ``_reference_call_kwargs`` once."""
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
        """Whether this optimizer's step is :func:`scalar_only` (the Trainer's shortcut)."""
        return type(self)._kernel_step in _SCALAR_ONLY_STEPS

    @contextlib.contextmanager
    def restored_on_error(self):
        """While the block runs, the optimizer's attributes (the bookkeeping a step changes:
        counts, ``num_update``, Nadam's schedule, LBSGD's phases...) are kept; if it raises,
        they are put back as they were (a shallow copy, its dicts copied; a
        ``toolkit.lr_scheduler`` schedule's ``state_dict``), so a step that plans every index
        before writing any array leaves nothing half-committed."""
        saved = {k: (dict(v) if isinstance(v, dict) else v.copy() if isinstance(v, Counts) else v)
                 for k, v in self.__dict__.items()}
        # the schedule's state too (Factor's decays), where it can be saved: the toolkit's
        from ..lr_scheduler import LRScheduler
        sched = self.lr_scheduler
        sched_state = sched.state_dict() if isinstance(sched, LRScheduler) else None
        try:
            yield self
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(saved)
            if sched_state is not None:
                sched.load_state_dict(sched_state)
            raise

    @property
    def takes_norms(self):
        """Whether this optimizer's steps may ask for per-tensor norms first
        (:meth:`norm_inputs` is its own)."""
        return type(self).norm_inputs is not Optimizer.norm_inputs

    def launch_step(self, index, weight, grad, state, t, lr, wd, launcher):
        """The kernel step of ``index`` with the scalars ``(t, lr, wd)`` (from
        :meth:`step_scalars`) through ``launcher`` (a backend launcher, or the Trainer's
        recorder), on arrays the caller has validated; nothing is committed (the caller commits
        the counts of the whole step with :meth:`commit_counts`)."""
        with self._launching(launcher):
            self._kernel_step(index, weight, grad, state, t, lr, wd)

    def plan_step(self, index, weight, grad, state, launcher):
        """One kernel step of ``index`` through ``launcher`` (the Trainer's recorder, or a real
        launcher), on arrays the caller has validated; the count is committed after it. For a
        step whose host code reads per-index state (Nadam's schedule, LBSGD's phase): the
        Trainer plans those index by index, in index order."""
        t, lr, wd = self._step_scalars(index)
        with self._launching(launcher):
            self._kernel_step(index, weight, grad, state, t, lr, wd)
        self._commit_count(index, t)

    # --- the Trainer's hooks (LBSGD uses them) ---------------------------------------------
    def host_buffers(self):
        """Names of per-index arrays shaped like the weight that the optimizer keeps outside
        ``state``; the Trainer binds views of its flat buffers to them."""
        return ()

    def bind_host_buffer(self, name, index, array):  # pragma: no cover - no buffers by default
        """Keep ``array`` (a view of the Trainer's flat buffer) as the ``name`` buffer of
        ``index`` (one of ``host_buffers()``)."""
        raise KeyError(name)

    def norm_inputs(self, index):
        """None, or what the next step of ``index`` takes per-tensor norms of (LBSGD's 'lars'):
        the Trainer computes them for a whole group in one reduction first."""
        return None

    def _apply(self, index, weight, grad, state, backend, w, stream=None, mirror=None,
               known=(), rows=None):
        """Validated arrays in (``known``: their descriptions); one step applied; counts
        committed last. ``rows`` (CUDA only): a lazy row-sparse step, ``grad`` the values of
        those rows."""
        t, lr, wd = self._step_scalars(index)
        if backend == "cuda":
            from ..backends import cuda
            with self._launching(cuda.Launcher(w, stream=stream, mirror=mirror, known=known,
                                               rows=rows)):
                self._step(backend, index, weight, grad, state, t, lr, wd)
        elif w.dtype == _FLOAT16:
            # float16 storage without a master copy: float32 arithmetic, rounded back after the step
            w32 = cpu.to_single(weight)
            states32 = self._map_state(state, cpu.to_single)
            self._step(backend, index, w32, cpu.to_single(grad), states32, t, lr, wd)
            cpu.to_half_into(weight, w32)
            self._zip_state(state, states32, cpu.to_half_into)
        else:
            self._step(backend, index, weight, grad, state, t, lr, wd)
        self._commit_count(index, t)

    # --- row-sparse gradients (toolkit/optimizers/row_sparse.py) ------------------------------
    def row_sparse_mode(self, index):
        """How a ``toolkit.RowSparse`` gradient for ``index`` is applied, as MXNet 1.9.1 does:
        ``"lazy"`` (only the rows present are updated, weight and state), ``"standard"`` (every
        row, the absent ones with gradient 0) or ``"dense"`` (the gradient made dense, then
        the dense update: MXNet's storage fallback, the default). May raise where MXNet
        refuses (AdaGrad with weight decay) or where the toolkit does not follow it."""
        return "dense"


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

    def _step(self, backend, index, weight, grad, state, t, lr, wd):
        """One step on validated arrays. Subclasses implement ``_kernel_step`` and
        ``_reference_step`` (the latter is generic for optimizers with a reference module)."""
        if backend == "reference":
            self._reference_step(index, weight, grad, state, t, lr, wd)
        else:
            self._kernel_step(index, weight, grad, state, t, lr, wd)

    def kernel_row(self, t, lr, wd):
        """``(factory, row)``: the rule and the hyperparameter row of a step at count ``t``
        with learning rate ``lr`` and weight decay ``wd``, for an optimizer whose
        ``_kernel_step`` is :func:`row_step` (the rule then runs over the weight, the gradient
        and the state arrays in ``state_slots()`` order). A function of the three and the
        optimizer's attributes only: ``toolkit.torch`` and the Trainer plan a group's step
        from it, one row per distinct ``(t, lr, wd)``."""
        raise NotImplementedError(f"{type(self).__name__} has no kernel_row: its step is not "
                                  "one rule call planned from (t, lr, wd) alone")

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        raise NotImplementedError(f"{type(self).__name__} has no kernel: override `update`, or "
                                  "derive it from ElementwiseOptimizer and give it a `rule` "
                                  "(docs/custom-optimizer.md)")

    # --- host-side state (saved by the Trainer's states file) --------------------------------
    def host_state(self):
        """``(json_dict, arrays)``: optimizer state kept outside ``state`` (e.g. Nadam's momentum
        schedule), for saving. Most optimizers keep none."""
        return {}, {}

    def check_host_state(self, data, host_arrays):
        """Check what ``host_state`` saved and return a function that restores it (called only
        once every other check of a load has passed)."""
        if data or host_arrays:
            raise ValueError(f"{type(self).__name__} keeps no host-side state, the file has "
                             f"{sorted(data) + sorted(host_arrays)}")
        return lambda: None


    # --- backend choice ----------------------------------------------------------------------
    def _resolve_backend(self, w):
        """The backend for a step on the described weight ``w``; an error, before anything is
        written, when the arrays and the requested backend do not fit together."""
        device = w.kind == arrays.DEVICE
        if self.backend == "auto":
            backend = "cuda" if device else "cpu"
        else:
            backend = self.backend
        if backend == "cuda":
            from ..backends import cuda_available
            ok, why = cuda_available()
            if not ok:
                raise RuntimeError(f"backend='cuda' cannot run: {why}" + (
                    "" if device else "; use backend='cpu' for numpy arrays"))
            if not device:
                raise TypeError("backend='cuda' updates CUDA arrays in place, but the weight is a "
                                "numpy.ndarray (host memory); pass device arrays (numba, CuPy "
                                "or PyTorch CUDA) or use backend='cpu'")
        elif device:
            raise TypeError(f"backend={self.backend!r} runs on numpy arrays, but the weight is "
                            f"{arrays.kind_name(w)}; use backend='cuda' or 'auto' for device "
                            "arrays")
        return backend


    # ---------------------------------------------------------------------------------------
    # helpers for subclasses
    # ---------------------------------------------------------------------------------------

    #: True for MXNet's kernel optimizers, whose hyperparameters MXNet rounds to float32
    #: (docs/mxnet-facts.md, 3); Python-op optimizers round only the clip bound.
    mxnet_kernel = True

    def _r(self, x):
        """A kernel hyperparameter as the convention uses it: rounded to float32 under
        convention "mxnet" for MXNet's kernel optimizers (float64 weights included)."""
        if self.convention == "mxnet" and self.mxnet_kernel and x is not None:
            return _round_f32(x)
        return x

    def _constants(self, slot, key, build):
        """``build()``, remembered in the attribute ``slot`` while ``key`` (a tuple of every
        object ``build`` reads: the hyperparameter attributes, ``convention``,
        ``mxnet_kernel``) holds the very same objects: an attribute set again, even to an
        equal value, builds again (identity, not ``==``, which would take ``-0.0`` for
        ``0.0``), so the value is always what ``build()`` returns now. For the rounded
        constants of a step; what changes per step (``t``, ``lr``, ``wd``) stays outside."""
        held = self.__dict__.get(slot)
        if held is not None and len(held[0]) == len(key) and all(map(operator.is_, held[0],
                                                                          key)):
            return held[1]
        value = build()
        self.__dict__[slot] = (key, value)
        return value

    def _float_rounder(self):
        """:meth:`_r` as a plain function of a float (never None): ``_round_f32`` where
        ``_r`` rounds, else the identity; for a value rounded every step beside
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

    def __repr__(self):
        """``SGD(learning_rate=0.1, wd=0.0, momentum=0.9, convention='mxnet', backend='auto')``:
        the learning rate, weight decay, convention and backend, and every other hyperparameter
        (the checked attributes, by constructor keyword) that was given or now differs from its
        constructor's default."""
        given = self.__dict__.get("_given", {})
        defaults = dict(_aliases.constructor_parameters(type(self)))
        shown = {"learning_rate": self.lr, "wd": self.wd}
        own_first = {}      # the class's own hyperparameters first, then its bases'
        for klass in type(self).__mro__:
            for attr, domain in klass.__dict__.get("domains", {}).items():
                own_first.setdefault(attr, domain)
        for attr, domain in own_first.items():
            name = domain.keyword or attr
            if name in shown or name in ("convention", "backend"):
                continue
            value = getattr(self, attr)
            default = defaults.get(name, inspect.Parameter.empty)
            if name in given or _differs(value, default):
                shown[name] = value
        shown.update(convention=self.convention, backend=self.backend)
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


def _differs(value, default):
    try:
        return bool(value != default)
    except (TypeError, ValueError):  # an array: shown
        return True


_install_checked_attributes(Optimizer)
