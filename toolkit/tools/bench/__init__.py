"""``mxopt bench``: the benchmark suite, every optimizer against its memory-traffic floor, unfused
numpy and PyTorch, in one run (``benchmarks/suite.py`` runs it too).

An optimizer step is memory-bound: its floor is the time a trivial kernel takes to move the same
bytes, measured in the same run. Each setting a spec declares (its ``bench`` rows) is timed for
float32 and float16 with ``multi_precision`` over a range of sizes, against the floor, the
float64 numpy baseline and torch's fused/foreach optimizers; many-tensor cases step ResNet-50's
shapes. ``benchmarks/results/README.md`` describes the method and the recorded results.

    python -m toolkit bench [--quick | --full] [--device cpu|cuda] [--out DIR | PATH.json]

Parts: :mod:`~toolkit.bench.settings` (settings and traffic model), :mod:`~toolkit.bench.floor`,
:mod:`~toolkit.bench.peers` (numpy and torch), :mod:`~toolkit.bench.cases`,
:mod:`~toolkit.bench.timing`, :mod:`~toolkit.bench.resnet`, :mod:`~toolkit.bench.torch_case`,
:mod:`~toolkit.bench.suite` (the run and its targets), :mod:`~toolkit.bench.report`,
:mod:`~toolkit.bench.cli`.
"""
from __future__ import annotations

from . import (cases, floor, peers, report, resnet, settings, suite, timing,  # noqa: F401
               torch_case)
from .cases import base_arrays, cpu_case, cuda_case  # noqa: F401
from .cli import build_parser, main  # noqa: F401
from .floor import cpu_floor, floor_kernel  # noqa: F401
from .peers import NUMPY_BASELINE, import_torch, numpy_baseline, torch_step  # noqa: F401
from .report import headline_size, markdown_summary, print_report, write_plots  # noqa: F401
from .resnet import make_torch, make_trainer, resnet50_shapes, trainer_case  # noqa: F401
from .settings import (CHEAP, DEFAULT_SIZES, DTYPES, FULL_SIZES, HEADLINE, IMPLS,  # noqa: F401
                       QUICK_SIZES, ROW_COLS, SIDE_BYTES, Setting, Traffic, all_settings,
                       make_optimizer, select_settings, traffic, weight_shape)
from .suite import (TARGETS, TORCH_TARGET, default_out, evaluate_targets,  # noqa: F401
                    machine_info, run_suite)
from .timing import device_sync, interleaved, measure, paired, timed  # noqa: F401

__all__ = ["main", "run_suite", "SETTINGS", "all_settings", "resnet50_shapes", "make_trainer",
           "make_torch", "interleaved", "timed", "trainer_case", "TARGETS", "markdown_summary",
           "measure", "NUMPY_BASELINE"]


def __getattr__(name):
    # SETTINGS is read from the registry when asked: an optimizer registered after this module
    # was imported (a plug-in) has its rows too
    if name == "SETTINGS":
        return all_settings()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
