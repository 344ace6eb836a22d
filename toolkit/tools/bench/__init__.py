"""``mxopt bench``: the benchmark suite, every optimizer against its memory-traffic floor, unfused
numpy and PyTorch, in one run (``benchmarks/suite.py`` runs it too).

An optimizer step is memory-bound: its floor is the time a trivial kernel takes to move the same
bytes, measured in the same run. For every setting an optimizer's spec declares (its ``bench``
rows: the hyperparameters that change the traffic, momentum on and off, centered or not, ...;
one plain row where it declares none), for float32 and float16 with ``multi_precision``, and for
a range of sizes, one run times, on one tensor (flat; a matrix of :data:`ROW_COLS` columns where
the spec says ``matrix``):

* ``toolkit``: ``opt.update(0, w, g, state)`` (``update_multi_precision`` for float16), backend
  "cpu" (numpy arrays) or "cuda" (numba device arrays);
* ``floor``: CPU, a parallel Numba kernel that reads and writes the same arrays as the optimizer
  (grad read; weight and every state slot read and written; the float16 weight written from the
  float32 master; the host buffers a step touches and a first pass's reads, from the spec's
  traffic model), with trivial arithmetic. CUDA, a device-to-device copy of the same number of
  bytes;
* ``numpy``: the unfused-numpy baseline, derived from the optimizer's reference module (its
  float64 numpy step through ``backend="reference"``; a **float64** baseline, labelled so in the
  JSON and the reports; CPU only; see :mod:`toolkit.bench.peers`);
* ``torch fused`` / ``torch foreach``: ``torch.optim.<X>(fused=True / foreach=True)`` where torch
  is installed and the setting names a ``torch.optim`` update of the same traffic, float32 only
  (torch has no multi-precision: its float16 parameters keep float16 state); a variant torch
  cannot run is reported "n/a" with the reason.

Timing: every implementation of a case is timed once per repetition, in a shuffled order, so
what else the machine does meanwhile falls on all of them alike. A repetition times up to 3
sub-batches of calls (each about a third of ``--batch-ms``, at least one call; fewer
sub-batches where 3 would take over 60 ms) and keeps the fastest per call: a busy machine only
ever delays a call. Results are medians over repetitions. Ratios are medians of the per-repetition
ratios: "of the floor" = floor_time / toolkit_time (1.0 = at the floor), "vs numpy" =
numpy_time / toolkit_time, "vs torch" = torch_time / toolkit_time (above 1: the toolkit is
faster). A many-tensor case steps ResNet-50's 161 parameter shapes (25.6 M float32 values) with
one Trainer step (Adam) against torch's fused Adam over the same list of tensors, interleaved,
and so do 2000 tensors of 1024 values. Where torch is installed, ``toolkit.torch.Adam`` steps
ResNet-50's shapes, 2000 tensors of 1024 and one tensor of 2^24 against torch's fused Adam over
the same tensors, fresh gradients each step in both (``--torch-cases``; ``--quick`` runs the
2000 tensors only).

Output: a table of ratios, the per-call time at 2^12 (the "cheap call"), the targets met or not,
JSON (``suite_<device>.json`` in the working directory, or in ``--out DIR``) and two PNGs beside
it (achieved bandwidth against size per optimizer, ratios at 2^24). The repository's recorded
results (``benchmarks/results/``) are written only when asked: ``--out benchmarks/results``.
Benchmarks are never timed tests.

    python -m toolkit bench [--quick | --full] [--device cpu|cuda] [--out DIR | PATH.json]

The parts, by responsibility: :mod:`~toolkit.bench.settings` (the settings, read from the specs,
and the traffic model), :mod:`~toolkit.bench.floor` (the CPU floor kernels),
:mod:`~toolkit.bench.peers` (numpy and torch), :mod:`~toolkit.bench.cases` (one case's
implementations), :mod:`~toolkit.bench.timing`, :mod:`~toolkit.bench.resnet` (the many-tensor
Trainer cases), :mod:`~toolkit.bench.torch_case` (the ``toolkit.torch`` cases), :mod:`~toolkit.bench.suite` (the run and its targets),
:mod:`~toolkit.bench.report` (tables and plots) and :mod:`~toolkit.bench.cli`.
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
                       QUICK_SIZES, ROW_COLS, Setting, Traffic, all_settings, make_optimizer,
                       select_settings, traffic, weight_shape)
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
