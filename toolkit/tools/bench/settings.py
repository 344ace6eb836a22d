"""What ``mxopt bench`` runs: the settings (read from every optimizer's spec), the sizes and
dtypes, and the traffic model that sizes each setting's floor.

A setting is one row of a spec's ``bench`` (:class:`toolkit.optimizers.spec.BenchSetting`).
Every registered optimizer has at least one, a plug-in's included, so the list is read from the
registry when asked (:func:`all_settings`).
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["Setting", "all_settings", "select_settings", "make_optimizer", "spec_of_setting",
           "Traffic", "SIDE_BYTES", "traffic", "weight_shape", "ROW_COLS", "DTYPES", "DEFAULT_SIZES",
           "FULL_SIZES", "QUICK_SIZES", "HEADLINE", "CHEAP", "IMPLS"]

#: Columns of a matrix weight (a spec with ``matrix=True``, GroupAdaGrad: an embedding table of
#: this width, one history value per row): ``n`` elements make ``n // ROW_COLS`` rows.
ROW_COLS = 256

DTYPES = ("float32", "float16")   # float16: with multi_precision (a float32 master copy)
DEFAULT_SIZES = {"cpu": (12, 16, 20, 24), "cuda": (12, 16, 20, 24, 28)}
FULL_SIZES = {"cpu": tuple(range(12, 27, 2)), "cuda": tuple(range(12, 29, 2))}
QUICK_SIZES = (12, 20)
HEADLINE = 24          # the size of the ratio targets and the bar chart
CHEAP = 12             # the size of the "cheap call" number

IMPLS = ("floor", "toolkit", "numpy", "torch fused", "torch foreach")


class Setting(NamedTuple):
    label: str            #: "sgd mom", "rmsprop centered", ...
    name: str             #: the registry name (its spec's name)
    kwargs: dict          #: hyperparameters that change the traffic
    torch: tuple | None   #: (torch.optim class name, kwargs) of the same traffic, or None
    quick: bool = False   #: in ``--quick``


def all_settings():
    """Every registered optimizer's settings, from its spec's ``bench_settings()``, optimizers
    in registry-name order and each spec's rows in the order it declares them."""
    from ...optimizers.registry import specs
    return tuple(Setting(b.label, spec.name, dict(b.kwargs),
                         None if b.torch is None else (b.torch[0], dict(b.torch[1])), b.quick)
                 for spec in specs().values() for b in spec.bench_settings())


def select_settings(names=None, quick=False):
    """The settings to run: those whose label or optimizer name is in ``names`` (all when None),
    and only the ``--quick`` ones when ``quick``."""
    every = all_settings()
    out = [s for s in every if not quick or s.quick]
    if names:
        wanted = {n.strip().lower() for n in names if n.strip()}
        unknown = wanted - {s.label for s in every} - {s.name for s in every}
        if unknown:
            raise ValueError(f"unknown optimizer or setting {sorted(unknown)}; known: "
                             f"{', '.join(s.label for s in every)}")
        out = [s for s in every if s.label in wanted or s.name in wanted]
    return out


def make_optimizer(setting, backend, multi_precision=False):
    """The setting's optimizer on ``backend`` ("cpu", "cuda" or "reference")."""
    from ... import optimizer
    return optimizer.create(setting.name, backend=backend, multi_precision=multi_precision,
                            **setting.kwargs)


def spec_of_setting(setting):
    """The spec of the setting's optimizer."""
    from ...optimizers.registry import spec_of
    return spec_of(setting.name)


#: bytes per element of a state not shaped like the weight (``Traffic.side``): float32, read
#: and written once a step
SIDE_BYTES = 8


class Traffic(NamedTuple):
    """What one step of a setting moves: per element of the weight, and the side state's."""
    rw: int              #: arrays read and written in the arithmetic dtype (weight or master,
    #: state slots shaped like the weight, the host buffers a step touches: the spec's
    #: ``buffers_moved``)
    first_reads: int     #: a first pass reading the grad and this many of the rw arrays (0: no
    #: first pass): the spec's ``first_pass_reads`` (per-tensor norms, LAMB's direction)
    bytes: int           #: bytes per element: grad read, rw arrays, float16 weight written, the
    #: first pass and the spec's ``gradient_passes``
    scratch: int = 0     #: the spec's ``gradient_passes``: a float32 scratch array of the
    #: gradient's size written once and read ``scratch - 1`` times (in ``bytes``)
    side: int = 0        #: elements of state not shaped like the weight (the spec's
    #: ``side_state``: Adafactor's statistics) read and written once, over the shapes asked for

    @property
    def norm_pass(self):
        return self.first_reads > 0

    def total(self, n):
        """The bytes one step over ``n`` elements moves: ``bytes`` per element and
        :data:`SIDE_BYTES` per element of the side state."""
        return self.bytes * n + SIDE_BYTES * self.side


def traffic(setting, half, shapes=()):
    """The bytes one step really moves per element (float32 arithmetic; ``half``: float16
    weight and grad with a float32 master copy, the float16 weight written only), from the
    optimizer's state slots and its spec's traffic model (``buffers_moved``,
    ``first_pass_reads``, ``gradient_passes``), and the elements of its side state
    (``side_state``: Adafactor's statistics) for weights of ``shapes``. A state not shaped like
    the weight that the spec does not declare (GroupAdaGrad's one history value per row of
    :data:`ROW_COLS` columns) is not counted."""
    spec = spec_of_setting(setting)
    opt = make_optimizer(setting, "cpu")
    slots = len(opt.state_slots()) if opt.state_like_weight else 0
    buffers = spec.buffers_moved(opt)
    rw = 1 + slots + buffers
    first = spec.first_pass_reads(opt, buffers)
    gsize = 2 if half else 4
    # (a scratch array, Adafactor's direction or Muon's matrix, is float32 whatever the grad)
    nbytes = gsize + 8 * rw + (2 if half else 0) + ((4 * first + gsize) if first else 0) + \
        4 * spec.gradient_passes
    side = sum(int(spec.side_state(opt, tuple(s))) for s in shapes) if spec.side_state else 0
    return Traffic(rw=rw, first_reads=first, bytes=nbytes, scratch=spec.gradient_passes,
                   side=side)


def weight_shape(setting, n):
    """The weight's shape for ``n`` elements: a matrix of :data:`ROW_COLS` columns where the
    spec says its weights are matrices (one accumulator per row) or its update depends on the
    rank (``Spec.tensor``), else flat."""
    spec = spec_of_setting(setting)
    # (a spec whose update depends on the rank, Adafactor's, steps the matrix: its factored path)
    return (n // ROW_COLS, ROW_COLS) if spec.matrix or spec.tensor else (n,)
