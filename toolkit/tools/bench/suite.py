"""``mxopt bench``'s run: every (size, dtype, setting) case timed, the ResNet-50 Trainer case,
the machine and its load, and the targets; one JSON-able dict (:func:`run_suite`)."""
from __future__ import annotations

import datetime
import importlib.metadata as md
import os
import platform
import statistics
import time

import numba

from . import peers
from .cases import base_arrays, cpu_case, cuda_case
from .resnet import many_tensor_shapes, resnet50_shapes, trainer_case
from .torch_case import TORCH_CASE_OPTIONS, TORCH_CASES, torch_case
from .settings import (CHEAP, DEFAULT_SIZES, DTYPES, HEADLINE, SIDE_BYTES, all_settings,
                       spec_of_setting, traffic, weight_shape)
from .timing import device_sync, measure, paired

__all__ = ["run_suite", "default_out", "machine_info", "loadavg", "TARGETS", "TORCH_TARGET",
           "evaluate_targets", "disable_kernel_cache"]


def default_out(device, out=None):
    """Where a run writes its JSON (the PNGs go beside it): ``out`` itself where it ends in
    ``.json``, else ``suite_<device>.json`` in the directory ``out``, by default the working
    directory. Never the checkout's recorded ``benchmarks/results/`` unless ``out`` names it."""
    name = f"suite_{device}.json"
    if out is None:
        return os.path.join(os.getcwd(), name)
    return out if out.endswith(".json") else os.path.join(out, name)


def machine_info(device, torch):
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    vers = {}
    for name in ("numpy", "numba", "numba-cuda", "torch", "matplotlib", "rich"):
        try:
            vers[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    from ... import __version__
    vers["toolkit"] = __version__
    vers["python"] = platform.python_version()
    info = {"cpu": model, "cores": os.cpu_count(),
            "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count(),
            "numba_threads": numba.get_num_threads(), "platform": platform.platform(),
            "versions": vers, "date": datetime.datetime.now().isoformat(timespec="seconds")}
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
    if device == "cuda":
        from numba import cuda
        name = cuda.get_current_device().name
        info["gpu"] = name.decode() if isinstance(name, bytes) else name
    return info


def loadavg():
    try:
        return list(os.getloadavg())
    except OSError:  # pragma: no cover
        return None


#: per device: (key, what, kind, threshold); kind picks how it is measured
TARGETS = {
    "cpu": (("floor_f32", f"every optimizer, float32, 2^{HEADLINE}: >= 0.9 of its floor",
             "of_floor_min", 0.9),
            ("torch_fused", f"Adam, SGD, AdaGrad, float32, 2^{HEADLINE}: >= 1.0x torch fused",
             "vs_torch_min", 1.0),
            ("floor_f16", f"every optimizer, float16 multi-precision, 2^{HEADLINE}: >= 0.8 of "
                          "its floor", "of_floor_min", 0.8),
            ("cheap_call", f"one update at 2^{CHEAP} (float32, every optimizer): <= 8 us",
             "cheap_max", 8.0),
            ("resnet50", "ResNet-50 Trainer step (Adam): >= 1.0x torch fused Adam",
             "resnet", 1.0)),
    "cuda": (("floor_f32", f"every optimizer, float32, 2^{HEADLINE}: >= 0.8 of the copy floor",
              "of_floor_min", 0.8),
             ("torch_fused", f"Adam, float32, 2^{HEADLINE}: >= 1.0x torch fused", "vs_torch_min",
              1.0),
             ("floor_f16", f"every optimizer, float16 multi-precision, 2^{HEADLINE}: >= 0.8 of "
                           "the copy floor", "of_floor_min", 0.8),
             ("resnet50", "ResNet-50 Trainer step (Adam): >= 1.0x torch fused Adam", "resnet",
              1.0)),
}
#: the many-tensor case's targets (both devices): 2000 tensors of 1024 float32, one Trainer
#: step (Adam), marking excluded (``step_*``: see toolkit/tools/bench/resnet.py)
MANY_TARGETS = (
    ("many_floor", "2000 tensors of 1024, Trainer step (Adam): within 1.5x its floor",
     "many_floor", 1 / 1.5),
    ("many_torch", "2000 tensors of 1024, Trainer step (Adam): >= 5x torch fused Adam",
     "many_torch", 5.0),
    ("many_host", "2000 tensors: host time per step <= 50 us + 0.2 us per parameter (450 us)",
     "many_host", 450.0))
TORCH_TARGET = {"cpu": ("adam", "sgd", "sgd mom", "adagrad"), "cuda": ("adam",)}
#: the ``toolkit.torch`` cases' targets (both devices): toolkit.torch.Adam against torch's
#: fused Adam over the same tensors, fresh gradients each step in both
#: (toolkit/tools/bench/torch_case.py): (key, what, case, field, threshold)
ADAPTER_TARGETS = (
    ("torch_resnet50", "toolkit.torch, ResNet-50's shapes: >= 1.0x torch fused Adam",
     "resnet50", "vs_torch", 1.0),
    ("torch_resnet50_floor", "toolkit.torch, ResNet-50's shapes: >= 0.9 of the floor",
     "resnet50", "of_floor", 0.9),
    ("torch_many", "toolkit.torch, 2000 tensors of 1024: >= 3x torch fused Adam",
     "many_tensors", "vs_torch", 3.0),
    ("torch_one", "toolkit.torch, one tensor of 2^24: >= 0.9 of the floor", "one_2^24",
     "of_floor", 0.9),
    # the small model's fixed cost, maximize, bfloat16
    ("torch_mlp", "toolkit.torch, the digits MLP (4 tensors, one thread): >= 1.0x torch fused "
     "Adam", "mlp_64_32_10", "vs_torch", 1.0),
    ("torch_mlp_maximize", "toolkit.torch, the digits MLP with maximize=True: >= 1.0x torch "
     "fused Adam", "mlp_64_32_10_maximize", "vs_torch", 1.0),
    ("torch_bf16_4k", "toolkit.torch, bfloat16 2^12: <= 1.2x torch's fused bfloat16 step",
     "bf16_2^12", "vs_torch", 1 / 1.2),
    ("torch_bf16_64k", "toolkit.torch, bfloat16 2^16: <= 1.2x torch's fused bfloat16 step",
     "bf16_2^16", "vs_torch", 1 / 1.2),
    ("torch_bf16_4m", "toolkit.torch, bfloat16 2^22: >= 0.9 of its floor (28 bytes an element)",
     "bf16_2^22", "of_floor", 0.9))


def evaluate_targets(device, cases, resnet, many=None, adapter=None):
    out = []
    for key, what, case, field, thr in ADAPTER_TARGETS if adapter else ():
        row = adapter.get(case)
        t = {"key": key, "target": what, "threshold": thr, "measured": None, "met": None,
             "detail": {}}
        if row:
            t["measured"] = row[field]
            t["met"] = t["measured"] >= thr
        else:
            t["why"] = f"not measured in this run (the {case} case did not run)"
        out.append(t)
    for key, what, kind, thr in TARGETS[device] + (MANY_TARGETS if many else ()):
        t = {"key": key, "target": what, "threshold": thr, "measured": None, "met": None,
             "detail": {}}
        if kind in ("of_floor_min", "vs_torch_min"):
            dtype = "float16-mp" if key == "floor_f16" else "float32"
            rows = [c for c in cases if c["log2n"] == HEADLINE and c["dtype"] == dtype]
            if kind == "vs_torch_min":
                rows = [c for c in rows if c["setting"] in TORCH_TARGET[device]]
                field = "vs_torch_fused"
            else:
                field = "of_floor"
            vals = {c["setting"]: c["ratios"].get(field) for c in rows}
            vals = {k: v for k, v in vals.items() if v is not None}
            if vals:
                t["detail"] = vals
                t["measured"] = min(vals.values())
                t["met"] = t["measured"] >= thr
                t["failing"] = sorted(k for k, v in vals.items() if v < thr)
            else:
                t["why"] = f"not measured in this run (needs 2^{HEADLINE}" + (
                    " and torch fused" if kind == "vs_torch_min" else "") + ")"
        elif kind == "cheap_max":
            rows = [c for c in cases if c["log2n"] == CHEAP and c["dtype"] == "float32"]
            vals = {c["setting"]: c["impls"]["toolkit"]["median_s"] * 1e6 for c in rows}
            if vals:
                t["detail"] = vals
                t["measured"] = max(vals.values())
                t["met"] = t["measured"] <= thr
                t["failing"] = sorted(k for k, v in vals.items() if v > thr)
            else:
                t["why"] = f"not measured in this run (needs 2^{CHEAP})"
        elif kind == "resnet":
            if resnet and resnet.get("vs_torch") is not None:
                t["measured"] = resnet["vs_torch"]
                t["met"] = t["measured"] >= thr
            else:
                t["why"] = "not measured in this run (needs the ResNet-50 case and torch)"
        elif kind == "many_floor":
            t["measured"] = many["step_of_floor"]
            t["met"] = t["measured"] >= thr
        elif kind == "many_torch":
            if many.get("step_vs_torch") is not None:
                t["measured"] = many["step_vs_torch"]
                t["met"] = t["measured"] >= thr
            else:
                t["why"] = "not measured in this run (needs torch)"
        elif kind == "many_host":
            t["measured"] = many["host_us"]
            t["met"] = t["measured"] <= many["host_budget_us"]
        out.append(t)
    return out


def disable_kernel_cache():
    """Compile the toolkit's CPU kernels in this process instead of loading them from numba's
    on-disk cache (a diagnostic: it changes no kernel, only where it comes from). Returns
    whether it could."""
    from ...backends import jit
    opts = getattr(jit, "COMPILE_OPTIONS", None)
    if not isinstance(opts, dict):
        return False
    opts["cache"] = False
    return True


def run_suite(device="cpu", settings=None, sizes=None, dtypes=DTYPES, repeats=5, batch_ms=5.0,
              resnet=True, resnet_shapes=None, resnet_repeats=20, use_torch=True, many=True,
              progress=True, console=None, kernel_cache=True, adapter_cases=None):
    """Run the suite and return its results (a JSON-able dict); prints nothing but progress."""
    import warnings
    with warnings.catch_warnings():
        # float16 weights of long runs overflow to inf (the float32 master is what is stepped)
        warnings.simplefilter("ignore", RuntimeWarning)
        return _run_suite(device, settings, sizes, dtypes, repeats, batch_ms, resnet,
                          resnet_shapes, resnet_repeats, use_torch, many, progress, console,
                          kernel_cache, adapter_cases)


def _run_suite(device, settings, sizes, dtypes, repeats, batch_ms, resnet, resnet_shapes,
               resnet_repeats, use_torch, many, progress, console, kernel_cache,
               adapter_cases):
    t_start = time.perf_counter()
    if not kernel_cache and not disable_kernel_cache():
        raise RuntimeError("toolkit.backends.jit.COMPILE_OPTIONS not found: cannot turn the "
                           "kernel cache off")
    settings = list(all_settings() if settings is None else settings)
    if device == "cuda":  # an optimizer whose kernels are the CPU's only (Adafactor) is left out
        cpu_only = [s for s in settings if not spec_of_setting(s).cuda]
        if cpu_only:
            console.print(f"[yellow]left out on cuda (CPU kernels only): "
                          f"{', '.join(s.label for s in cpu_only)}[/yellow]")
        settings = [s for s in settings if spec_of_setting(s).cuda]
    sizes = list(DEFAULT_SIZES[device] if sizes is None else sizes)
    torch, why_no_torch = (peers.import_torch() if use_torch
                           else (None, "not used (--no-torch)"))
    load_before = loadavg()
    sync = device_sync(device)
    build = cuda_case if device == "cuda" else cpu_case
    cases = []
    # the toolkit.torch cases (labels of TORCH_CASES) that run: all of them by default, none
    # without torch
    adapter_jobs = [(label, shapes) for label, shapes in TORCH_CASES
                    if torch is not None and (adapter_cases is None or label in adapter_cases)]
    jobs = [(n, d, s) for n in sizes for d in dtypes for s in settings]

    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)
    columns = (TextColumn("{task.description:36s}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, disable=not progress, transient=False) as bar:
        task = bar.add_task("bench", total=len(jobs) + (1 if resnet else 0) + (1 if many else 0)
                            + len(adapter_jobs))
        base_key, base = None, None
        for log2n, dtype, setting in jobs:
            half = dtype == "float16"
            label = "float16-mp" if half else "float32"
            bar.update(task, description=f"2^{log2n} {label} {setting.label}")
            if base_key != log2n:
                base = None
                base = base_arrays(1 << log2n)
                base_key = log2n
            n = 1 << log2n
            tr = traffic(setting, half, [weight_shape(setting, n)])
            impls = build(setting, half, base, torch)
            steps = {k: v for k, v in impls.items() if callable(v)}
            times, calls = measure(steps, repeats, batch_ms / 1e3, sync)
            row = {"setting": setting.label, "optimizer": setting.name,
                   "kwargs": dict(setting.kwargs), "dtype": label, "log2n": log2n, "n": n,
                   "bytes_per_element": tr.bytes, "side_bytes": SIDE_BYTES * tr.side,
                   "impls": {}, "ratios": {}}
            for name, v in impls.items():
                if not callable(v):
                    row["impls"][name] = {"status": v}
                    continue
                med = statistics.median(times[name])
                row["impls"][name] = {"median_s": med, "GBps": tr.total(n) / med / 1e9,
                                      "calls_per_subbatch": calls[name][0],
                                      "subbatches": calls[name][1], "times_s": times[name]}
            tk = times["toolkit"]
            row["ratios"]["of_floor"] = paired(times["floor"], tk)
            for name, key in (("numpy", "vs_numpy"), ("torch fused", "vs_torch_fused"),
                              ("torch foreach", "vs_torch_foreach")):
                row["ratios"][key] = paired(times[name], tk) if name in times else None
            cases.append(row)
            del impls, steps
            if device == "cuda":
                _free_gpu(torch)
            bar.advance(task)
        base = None
        resnet_row = None
        if resnet:
            bar.update(task, description="ResNet-50 Trainer step")
            shapes = resnet50_shapes() if resnet_shapes is None else resnet_shapes
            resnet_row = trainer_case(device, shapes, resnet_repeats, torch)
            bar.advance(task)
        many_row = None
        if many:
            bar.update(task, description="2000 tensors Trainer step")
            many_row = trainer_case(device, many_tensor_shapes(), resnet_repeats, torch)
            bar.advance(task)
        adapter = {}
        for label, shapes in adapter_jobs:
            bar.update(task, description=f"toolkit.torch {label}")
            adapter[label] = torch_case(device, shapes(), resnet_repeats, torch,
                                        **TORCH_CASE_OPTIONS.get(label, {}))
            bar.advance(task)
    result = {
        "suite": "mxopt bench", "device": device,
        "machine": machine_info(device, torch),
        "load_average_before": load_before, "load_average_after": loadavg(),
        "config": {"sizes_log2": sizes, "dtypes": ["float16-mp" if d == "float16" else d
                                                    for d in dtypes],
                   "settings": [s.label for s in settings], "repeats": repeats,
                   "batch_ms": batch_ms, "resnet_repeats": resnet_repeats if resnet else None,
                   "kernel_cache": kernel_cache,
                   "timing": "interleaved per repetition (shuffled order); a repetition "
                             "keeps the fastest of up to 3 sub-batches (k calls, about "
                             "batch_ms/3; fewer sub-batches where 3 take over 60 ms), per call; "
                             "medians over repetitions; ratios are medians of per-repetition "
                             "ratios"},
        "definitions": {
            "of_floor": "floor_time / toolkit_time (1.0: at the floor)",
            "vs_numpy": "numpy_time / toolkit_time", "vs_torch_fused": "torch_time / toolkit_time",
            "numpy": peers.NUMPY_BASELINE["what"],
            "GBps": "(bytes_per_element * n + side_bytes) / time (the bytes the step really "
                    "moves; side_bytes: a state not shaped like the weight, Adafactor's "
                    "statistics, read and written)",
            "floor": ("CPU: a parallel Numba kernel reading and writing the same arrays "
                      "(serial below the toolkit's PARALLEL_THRESHOLD, as the toolkit), and "
                      "passes of their own for a scratch array written and read and for the "
                      "side state"
                      if device == "cpu" else "CUDA: a device-to-device copy of the same bytes")},
        "numpy_baseline": dict(peers.NUMPY_BASELINE),
        "torch": None if torch is None else torch.__version__,
        "torch_missing": why_no_torch or None,
        "cases": cases,
        "cheap_call_us": {c["setting"]: {k: v["median_s"] * 1e6 for k, v in c["impls"].items()
                                         if "median_s" in v}
                          for c in cases if c["log2n"] == CHEAP and c["dtype"] == "float32"},
        "resnet50": resnet_row,
        "many_tensors": many_row,
        "toolkit_torch": adapter or None,
    }
    result["targets"] = evaluate_targets(device, cases, resnet_row, many_row, adapter)
    result["wall_s"] = time.perf_counter() - t_start
    cores = result["machine"]["cores_usable"] or 1
    loads = [x[0] for x in (load_before, result["load_average_after"]) if x]
    result["machine_busy"] = bool(loads) and max(loads) > max(0.5, cores - 1.0)
    return result


def _free_gpu(torch):
    try:
        from numba import cuda
        cuda.current_context().deallocations.clear()
    except Exception:  # pragma: no cover
        pass
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()
