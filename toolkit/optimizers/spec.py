"""The one entry per optimizer: :class:`Spec`, everything the toolkit knows about it, as data.

An optimizer's module declares its spec beside its class (``SPEC = Spec(...)``, ``spec = SPEC``
in the class body); every table of the toolkit (oracle, tools, generic tests, docs tables) reads
it through :func:`toolkit.optimizers.registry.specs`. A third party's optimizer declares one the
same way (docs/custom-optimizer.md); one without gets :meth:`Spec.bare` and the tools that need
an oracle skip it.

What can be derived is not declared: defaults, state slots and domains come from the class,
``bench``'s numpy baseline from the reference module. A spec *names* its reference module
(``"reference.adam"``) so that the reference never imports the toolkit.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from .spec_spaces import Space

__all__ = ["Spec", "BenchSetting", "TorchPeer", "CONVENTIONS", "DEFAULT_CONVENTIONS", "PRECISION_VARIANTS",
           "default_convention"]

#: every convention a toolkit optimizer can take (each implements those of ``Spec.conventions``).
#: ``reference._util.KNOWN_CONVENTIONS`` repeats the names rather than importing them, since the
#: toolkit must not import the reference at import time (a user's ``reference.py`` first on
#: ``sys.path`` must not break ``import toolkit``, tests/test_oracle_isolation.py);
#: tests/test_reference_pytorch.py checks they agree
CONVENTIONS = ("mxnet", "guide", "pytorch", "paper")
#: the conventions of a spec that lists none: MXNet's numerics and the guide's equations
#: ("pytorch", torch.optim's update, only where a spec lists it: the optimizers torch ships;
#: "paper", the published algorithm, only for the optimizers MXNet never had)
DEFAULT_CONVENTIONS = ("mxnet", "guide")
#: the variants every spec declares unless it lists its own: the hyperparameters rounded to
#: float32 as MXNet's kernels take them, or kept in double precision where MXNet rounds them
#: (toolkit.oracle.variants; every reference module takes both)
PRECISION_VARIANTS = ("hyper_f32", "hyper_f64")
#: how a torch.optim class keeps a parameter's ``step`` (``Spec.torch_step``)
TORCH_STEPS = ("tensor", "int")


def default_convention(klass):
    """The convention an optimizer class takes when given none: its spec's first, "mxnet" for a
    class without a spec."""
    spec = getattr(klass, "spec", None)
    return DEFAULT_CONVENTIONS[0] if spec is None else spec.default_convention


def _frozen(mapping):
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class BenchSetting:
    """One row of ``mxopt bench``: hyperparameters that change the traffic, the torch.optim
    update that moves the same bytes (``(class name, kwargs)``, or None), and whether the row is
    in ``--quick``. ``label`` defaults to the registry name."""
    label: str
    kwargs: Mapping = field(default_factory=dict)
    torch: tuple | None = None
    quick: bool = False

    def __post_init__(self):
        object.__setattr__(self, "kwargs", _frozen(self.kwargs))


@dataclass(frozen=True)
class TorchPeer:
    """The most used PyTorch implementation of an optimizer torch.optim does not ship, whose
    keywords ``toolkit.torch`` takes: ``name`` (its class, ``"Lion"``), ``source`` (where it
    lives, with the version read: ``"lion_pytorch.Lion, lion-pytorch 0.2.5"``) and
    ``signature``, its keywords after ``params`` with their defaults, in order (``lr`` first;
    those before any keyword-only one are positional, as there); ``form``, the toolkit keywords
    whose values make the toolkit's update that implementation's where its signature has no
    such keyword (Schedule-Free AdamW's ``lr_bias_correction=False``: the authors'
    ``AdamWScheduleFree`` keeps the bias correction inside the root), its defaults too."""
    name: str
    source: str
    signature: tuple = ()
    form: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "signature", tuple((k, v) for k, v in self.signature))
        object.__setattr__(self, "form", tuple((k, v) for k, v in self.form))


@dataclass(frozen=True)
class Spec:
    """Everything the toolkit knows about one optimizer, declared once.

    Identity and oracle
        ``name``: the registry name (the class's lower-case name, MXNet's rule).
        ``reference``: the module of its float64 oracle (``"reference.adam"``), or None.
        ``conventions``: the conventions its kernels implement (Nadam: ``("mxnet", "pytorch")``; by
        default :data:`DEFAULT_CONVENTIONS`). ``"pytorch"`` is listed for the optimizers whose
        kernels have torch.optim's update (its own rule, in torch's order of operations:
        docs/conventions.md, "pytorch"); ``"paper"`` (the published algorithm) for those MXNet
        never had. The first is the optimizer's default (:attr:`default_convention`): "mxnet"
        for MXNet's family, "pytorch" where torch ships a newer one, else "paper".
        ``pytorch``: the PyTorch decision of its reference (``reference.<name>.PYTORCH``:
        ``"pytorch"``, the convention PyTorch's update equals, or None); a test checks the two
        agree. The oracle's ``convention="pytorch"`` runs that convention of the reference, so
        the kernels' "pytorch" is checked against it. ``pytorch_form``: the form of the
        reference's equations (its ``FORMS``) that the kernels' "pytorch" rule computes, which
        the toolkit's reference backend and ``toolkit.error_bounds`` then evaluate (``"lerp"``:
        torch's ``lerp_`` of a first moment, whose rounded weight ``1 - beta1`` drops a
        ``beta1`` below float64's resolution, as torch does), or None.
        ``torch``: the ``torch.optim`` class of the same update family, or None.
        ``torch_peer``: where torch.optim has none, the most used PyTorch implementation
        (:class:`TorchPeer`), whose class name, keywords and positional order
        ``toolkit.torch`` takes (Lion: lion-pytorch's), or None.
        ``torch_requires``: ``{PyTorch keyword: flag}``, a keyword of ``toolkit.torch`` that
        has its counterpart only with that constructor flag on (RMSProp: ``momentum`` is
        ``gamma2`` of the centered variant; plain RMSProp keeps no momentum buffer).
        ``torch_flags``: ``{torch keyword: value}`` that make the ``torch`` class this update
        (NAG: ``{"nesterov": True}``); ``toolkit.torch`` takes those values only.
        ``torch_slots``: ``{state slot: torch's name}`` for the slots that hold the same
        quantity as the ``torch`` class's state of that name (Adam: ``mean`` is
        ``exp_avg``); ``toolkit.torch`` shows and saves them under torch's name.
        ``torch_derived``: ``{torch state entry: f(group options, step) -> float}``, the
        per-parameter scalars the ``torch`` class keeps that are functions of the step count
        and the hyperparameters (ASGD's ``eta`` and ``mu``): a ``toolkit.torch`` state_dict
        writes them (float32 tensors, as torch keeps them) so that torch loads it.
        ``torch_step``: how the ``torch`` class keeps a parameter's ``step``: ``"tensor"``
        (a 0-d float32 tensor, torch's usual) or ``"int"`` (a Python int: SparseAdam, whose
        bias corrections ``beta**step`` would be float32 tensors from a tensor step);
        ``opt.state[p]`` and a ``toolkit.torch`` state_dict show it so.
        ``torch_sparse``: the ``torch`` class takes sparse gradients only (SparseAdam); the
        audit and the tests hand it a dense gradient as a sparse one holding every row
        (``toolkit.oracle.frameworks.torch.gradient_for``). ``toolkit.torch`` takes both.
    What the oracle draws
        ``space``: its own hyperparameters (MXNet's constructor names) as :class:`Space` s,
        aimed at branch points. ``fixed``: common hyperparameters it does not take freely, with
        ``fixed_reason`` (GroupAdaGrad: wd 0). ``matrix``: its weights are 2-D (one accumulator
        per row). ``tensor``: its update depends on the weight's rank (Adafactor factors
        the last two dimensions of a weight of rank 2 or more): its weights are drawn as
        vectors, matrices and stacks of matrices. ``dependent``: ``hyper -> hyper``, fixes values that only make sense together.
        ``uses_lr``: whether the learning rate enters the update (AdaDelta: no).
        ``half_state_lr``: the least learning rate a float16 *state* (no master copy) needs to
        stay in range, with ``half_state_reason`` (FTRL/FTML: the state grows like w/lr).
        ``noise``: its update adds random noise (SGLD: the counter-based draws of
        ``reference.noise``, keyed by a seed and the parameter index); ``toolkit.error_bounds`` and
        ``check`` compare it through those draws, the oracle's ``verify``/``identify`` (which
        run a user's implementation with its own draws) refuse it.
        ``flags``: ``{constructor keyword: its off value}``, switches added to an optimizer after
        its oracle's cases were fixed (Adam's ``amsgrad``): not drawn, held off (a case does
        not hold them, so a user's ``make_step`` is not handed them and the cases of every seed
        stay what they were) unless ``fixed`` sets them.
        ``case_steps``: the most steps a drawn case takes where a branch begins late (RAdam: 8,
        its rectified step begins at t = 5 or 6); 0: the oracle's usual count.
        ``case_size``: the most elements a drawn weight takes where the oracle's usual few do
        not show the update (Muon: 36, matrices of up to 6 rows: its Gram matrix reaches 6 x 6
        and tall matrices of many ratios are drawn); 0: the usual size.
        ``usual``: the ranges people train with, for some of ``space``'s hyperparameters (Adam:
        beta1 in [0.5, 0.99]); the oracle's usual domain draws those from here and every other
        one from ``space`` and the common space (their whole range is usual), and its full
        domain is ``space``. ``variants``: the names of the known variants of its equations
        (``toolkit.oracle.variants.VARIANTS``: a lerp, epsilon elsewhere, constants in the
        weight's precision, ...) under which the oracle re-runs a failed case to explain it;
        by default :data:`PRECISION_VARIANTS`, which every reference module takes (the oracle
        makes them around the reference), and a spec whose reference writes more lists them.
    Fixed configurations (constructor keywords besides the common ones)
        ``record``: switches on every state slot and branch (golden files, ``regress``,
        start-up and interop tests); ``record_ulps``: the last-bit allowance of its float64
        trajectory (1 where a step uses ``pow``/``exp``/``log``/``cos``, whose last bit may
        differ between libm builds). ``layouts``: one per state layout (validation tests).
        ``trainer``: the Trainer tests' configurations. ``demo``: ``mxopt demo``'s settings, and
        ``full_data_gradient`` (SGLD: its noise is calibrated to the whole data set's gradient).
        ``bench``: the rows of ``mxopt bench``.
    State
        ``moments``: slot name -> "signed" (a first moment, either sign) or "unsigned" (a second
        moment, never negative), for the element-wise moments ``state_dtype`` may hold in
        bfloat16 or 8-bit codes (:mod:`toolkit.optimizers.held`; the sign picks the code map).
        Empty: ``state_dtype`` is refused.
    Backends
        ``cuda``: its kernels have a CUDA form (False: Adafactor's factored step runs on the CPU
        only, and a CUDA array is refused with NotImplementedError before anything is written;
        the CUDA tests and benchmarks leave it out).
    Traffic model (``mxopt bench``'s floor)
        ``first_pass``: arrays besides the gradient a first pass reads per element (per-tensor
        norms, LAMB's direction), an int or ``f(optimizer, buffers) -> int``.
        ``gradient_passes``: whole passes over an array of the gradient's size besides those
        (a scratch array written once, then read by the others: Muon's, 3); the floor moves
        them in passes of their own.
        ``side_state``: ``f(optimizer, shape) -> int``, the elements of state not shaped like
        the weight that one step on a weight of ``shape`` reads and writes once (Adafactor's
        row and column statistics); None: none counted.
        ``traffic_buffers``: how many of the optimizer's ``host_buffers()`` (arrays shaped like
        the weight kept outside ``state``) one step reads and writes per element, an int or
        ``f(optimizer) -> int``; None: all of them (LBSGD: none with ``batch_scale`` 1, where
        the accumulator stays zero and the step never touches it).
    Docs
        ``docs``: its page, ``docs/optimizers/<name>.md`` by default.
    """
    name: str
    reference: str | None = None
    conventions: tuple = DEFAULT_CONVENTIONS
    pytorch: str | None = None
    pytorch_form: str | None = None
    torch: str | None = None
    torch_peer: TorchPeer | None = None
    torch_requires: Mapping[str, str] = field(default_factory=dict)
    torch_flags: Mapping[str, Any] = field(default_factory=dict)
    torch_slots: Mapping[str, str] = field(default_factory=dict)
    torch_derived: Mapping[str, Callable] = field(default_factory=dict)
    torch_step: str = "tensor"
    torch_sparse: bool = False
    space: Mapping[str, Space] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    fixed_reason: str = ""
    matrix: bool = False
    tensor: bool = False
    dependent: Callable[[dict], dict] | None = None
    uses_lr: bool = True
    half_state_lr: float | None = None
    half_state_reason: str = ""
    noise: bool = False
    flags: Mapping[str, Any] = field(default_factory=dict)
    usual: Mapping[str, Space] = field(default_factory=dict)
    case_steps: int = 0
    case_size: int = 0
    variants: tuple = None
    record: Mapping = field(default_factory=dict)
    record_ulps: int = 0
    layouts: tuple = ({},)
    trainer: tuple = ({},)
    demo: Mapping = field(default_factory=dict)
    full_data_gradient: bool = False
    bench: tuple = ()
    moments: Mapping[str, str] = field(default_factory=dict)
    cuda: bool = True
    first_pass: int | Callable = 0
    gradient_passes: int = 0
    side_state: Callable | None = None
    traffic_buffers: int | Callable | None = None
    docs: str | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or self.name != self.name.lower():
            raise ValueError(f"Spec name must be a non-empty lower-case string, got {self.name!r}")
        bad = [c for c in self.conventions if c not in CONVENTIONS]
        if bad or not self.conventions:
            raise ValueError(f"Spec {self.name!r}: conventions must be a non-empty subset of "
                             f"{CONVENTIONS}, got {self.conventions!r}")
        unknown = sorted(set(self.usual) - set(self.space))
        if unknown:
            raise ValueError(f"Spec {self.name!r}: usual names {unknown}, which are not in its "
                             f"space {sorted(self.space)}")
        if self.variants is None:
            object.__setattr__(self, "variants", PRECISION_VARIANTS)
        if isinstance(self.variants, str) or not all(isinstance(v, str) for v in self.variants):
            raise TypeError(f"Spec {self.name!r}: variants must be a tuple of variant names "
                            f"(toolkit.oracle.variants.VARIANTS), got {self.variants!r}")
        object.__setattr__(self, "variants", tuple(self.variants))
        if self.torch_step not in TORCH_STEPS:
            raise ValueError(f"Spec {self.name!r}: torch_step must be one of {TORCH_STEPS}, "
                             f"got {self.torch_step!r}")
        for key in ("space", "fixed", "flags", "usual", "record", "demo", "torch_requires",
                    "torch_flags", "torch_slots", "torch_derived", "moments"):
            object.__setattr__(self, key, _frozen(getattr(self, key)))
        for key in ("layouts", "trainer"):
            object.__setattr__(self, key, tuple(_frozen(c) for c in getattr(self, key)))
        object.__setattr__(self, "bench", tuple(self.bench))
        bad = {k: v for k, v in self.moments.items() if v not in ("signed", "unsigned")}
        if bad:
            raise ValueError(f"Spec {self.name!r}: moments maps a slot to 'signed' or "
                             f"'unsigned', got {bad}")
        if self.docs is None and self.reference is not None:
            object.__setattr__(self, "docs", f"docs/optimizers/{self.name}.md")

    @classmethod
    def bare(cls, name):
        """The spec of an optimizer registered without one: a name and nothing to compare
        it with (no reference, no space)."""
        return cls(name=name)

    @property
    def default_convention(self):
        """The convention an optimizer takes when given none: the first of ``conventions``."""
        return self.conventions[0]

    @property
    def has_oracle(self):
        """Whether a reference module is named: ``check``, ``accuracy``, ``regress`` and the
        oracle's ``verify``/``identify`` then know this optimizer."""
        return self.reference is not None

    def reference_module(self):
        """The reference module, imported (None when the spec names none)."""
        return None if self.reference is None else importlib.import_module(self.reference)

    def first_pass_reads(self, opt, buffers=0):
        """Arrays besides the gradient that a first pass over the elements reads, for the
        optimizer ``opt`` built from this spec (0: one pass only)."""
        fp = self.first_pass
        return int(fp(opt, buffers) if callable(fp) else fp)

    def buffers_moved(self, opt):
        """How many host buffers (``opt.host_buffers()``) one step of ``opt``, built from this
        spec, reads and writes per element (``traffic_buffers``; all of them by default)."""
        tb = self.traffic_buffers
        if tb is None:
            return len(opt.host_buffers())
        return int(tb(opt) if callable(tb) else tb)

    def bench_settings(self):
        """This optimizer's ``mxopt bench`` rows; one plain row (no torch peer, not quick)
        when the spec declares none."""
        return self.bench or (BenchSetting(self.name),)
