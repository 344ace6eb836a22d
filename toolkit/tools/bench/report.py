"""``mxopt bench``'s report: the tables on the console, the Markdown headline and the two plots
(achieved bandwidth against size, ratios at the headline size), all read from a run's dict."""
from __future__ import annotations

import math
import os

import numpy as np

from .settings import CHEAP, HEADLINE

__all__ = ["print_report", "markdown_summary", "write_plots", "headline_size", "adapter_lines",
           "numpy_baseline_of", "HAND_WRITTEN_BASELINE"]


def _fmt(x, spec=".2f", suffix=""):
    return "-" if x is None else f"{x:{spec}}{suffix}"


#: what the "numpy" column of a JSON written before the baseline was derived measured
HAND_WRITTEN_BASELINE = {
    "kind": "hand-written-float32", "label": "numpy f32",
    "what": "each optimizer's equations written out by hand in numpy, float32 in place "
            "(rescale_grad 1, no weight decay, no clipping); the suite's baseline before it was "
            "derived from the reference modules"}


def numpy_baseline_of(result):
    """What the run's "numpy" column measured (``result["numpy_baseline"]``; a run recorded
    before that key existed used the hand-written float32 equations)."""
    return result.get("numpy_baseline") or HAND_WRITTEN_BASELINE


def headline_size(result):
    sizes = result["config"]["sizes_log2"]
    return HEADLINE if HEADLINE in sizes else max(sizes)


def print_report(result, console):
    from rich.table import Table
    cases = result["cases"]
    size = headline_size(result)
    by = {(c["setting"], c["dtype"], c["log2n"]): c for c in cases}
    settings = result["config"]["settings"]
    m = result["machine"]
    console.print(f"[bold]mxopt bench[/bold] ({result['device']}): {m['cpu']}, {m['cores']} "
                  f"cores, {m['numba_threads']} numba threads"
                  + (f", GPU {m['gpu']}" if m.get("gpu") else "")
                  + f"; numpy {m['versions'].get('numpy')}, numba {m['versions'].get('numba')}, "
                  f"torch {result['torch'] or '-'}, toolkit {m['versions'].get('toolkit')}; "
                  f"{m['date']}")
    if result.get("machine_busy"):
        console.print("[yellow]the machine was busy (1-minute load average above cores - 1): "
                      "other processes delayed parallel regions; read the ratios with care "
                      "and run again when it is idle[/yellow]")
    if result.get("torch_missing"):
        console.print(f"torch: {result['torch_missing']}; the torch columns are empty")
    console.print(f"load average before {result['load_average_before']}, after "
                  f"{result['load_average_after']}" + (
                      "" if result["config"].get("kernel_cache", True) else
                      "; toolkit kernels compiled in this run (--no-kernel-cache)"))
    t = Table(title=f"ratios at 2^{size} (medians of interleaved repetitions; 'of the floor' = "
                    f"floor time / toolkit time, 'vs X' = X time / toolkit time)")
    baseline = numpy_baseline_of(result)
    for col in ("setting", "B/el f32", "floor GB/s", "of the floor f32", "of the floor f16-mp",
                f"vs {baseline['label']}", "vs torch fused", "vs torch foreach",
                f"us/call 2^{CHEAP}"):
        t.add_column(col, justify="left" if col == "setting" else "right")
    for s in settings:
        a = by.get((s, "float32", size))
        h = by.get((s, "float16-mp", size))
        cheap = by.get((s, "float32", CHEAP))
        r = a["ratios"] if a else {}
        t.add_row(s, _fmt(a and a["bytes_per_element"], "d"),
                  _fmt(a and a["impls"]["floor"]["GBps"], ".1f"),
                  _fmt(r.get("of_floor")), _fmt(h and h["ratios"]["of_floor"]),
                  _fmt(r.get("vs_numpy"), ".1f", "x"), _fmt(r.get("vs_torch_fused"), ".2f", "x"),
                  _fmt(r.get("vs_torch_foreach"), ".2f", "x"),
                  _fmt(cheap and cheap["impls"]["toolkit"]["median_s"] * 1e6, ".1f"))
    console.print(t)
    console.print(f"{baseline['label']}: {baseline['what']}")

    sizes = result["config"]["sizes_log2"]
    t2 = Table(title="toolkit 'of the floor' by size (float32 / float16-mp)")
    t2.add_column("setting")
    for n in sizes:
        t2.add_column(f"2^{n}", justify="right")
    for s in settings:
        cells = []
        for n in sizes:
            a, h = by.get((s, "float32", n)), by.get((s, "float16-mp", n))
            cells.append(f"{_fmt(a and a['ratios']['of_floor'])} / "
                         f"{_fmt(h and h['ratios']['of_floor'])}")
        t2.add_row(s, *cells)
    console.print(t2)

    r = result.get("resnet50")
    if r:
        console.print(
            f"ResNet-50 ({r['tensors']} tensors, {r['elements']:,} float32) one Trainer step "
            f"(Adam): {r['toolkit_ms']:.2f} ms, {r['toolkit_launches_per_step']} kernel call(s), "
            f"{r['toolkit_GBps']:.1f} GB/s, {r['of_floor']:.2f} of the floor "
            f"({r['floor_ms']:.2f} ms)" + (
                f"; torch {r['torch_kind']} Adam {r['torch_ms']:.2f} ms -> "
                f"{r['vs_torch']:.2f}x" if r.get("vs_torch") is not None else
                "; torch not installed"))
        if r.get("guarded_ms") is not None:
            console.print(
                f"  with skip_nonfinite=True (one pre-pass over the gradients): "
                f"{r['guarded_ms']:.2f} ms, {r['guarded_of_floor']:.2f} of the floor, "
                f"{r['guard_cost']:.2f}x the unguarded step")

    for line in trainer_lines(result) + adapter_lines(result):
        console.print(line)

    t3 = Table(title="targets")
    for col in ("target", "measured", "result"):
        t3.add_column(col)
    for tg in result["targets"]:
        if tg["met"] is None:
            res = tg.get("why", "not measured")
        elif tg["met"]:
            res = "[green]met[/green]"
        else:
            res = "[red]NOT met[/red]" + (f": {', '.join(tg['failing'])}"
                                          if tg.get("failing") else "")
        t3.add_row(tg["target"], _fmt(tg["measured"]), res)
    console.print(t3)
    console.print(f"wall time {result['wall_s']:.0f} s")


def trainer_lines(result):
    """The many-tensor case in sentences (none when it did not run)."""
    r = result.get("many_tensors")
    if not r:
        return []
    out = [f"{r['tensors']} tensors of {r['elements'] // r['tensors']} float32, one Trainer step "
           f"(Adam): {r['step_ms']:.3f} ms without marking the gradients ({r['marking_ms']:.3f} ms), "
           f"{r['toolkit_launches_per_step']} kernel call(s), {r['step_of_floor']:.2f} of the "
           f"floor ({r['floor_ms']:.3f} ms at {r['floor_GBps']:.0f} GB/s); host time "
           f"{r['host_us']:.0f} us (budget {r['host_budget_us']:.0f} us)"]
    if r.get("step_vs_torch") is not None:
        out.append(f"  torch {r['torch_kind']} Adam {r['torch_ms']:.3f} ms: "
                   f"{r['step_vs_torch']:.2f}x")
    if r.get("step_vs_deepspeed") is not None:
        out.append(f"  DeepSpeedCPUAdam {r['deepspeed_ms']:.3f} ms: "
                   f"{r['step_vs_deepspeed']:.2f}x")
    elif r.get("deepspeed"):
        out.append(f"  DeepSpeed: {r['deepspeed']}")
    return out


def adapter_lines(result):
    """The ``toolkit.torch`` cases in sentences (none when they did not run)."""
    out = []
    for label, r in (result.get("toolkit_torch") or {}).items():
        out.append(f"toolkit.torch.Adam, {label} ({r['tensors']} tensors, {r['elements']} "
                   f"float32), fresh gradients before each step: {r['toolkit_torch_ms']:.3f} "
                   f"ms against torch {r['torch_kind']} Adam {r['torch_ms']:.3f} ms "
                   f"({r['vs_torch']:.2f}x), {r['of_floor']:.2f} of the floor "
                   f"({r['floor_ms']:.3f} ms at {r['floor_GBps']:.0f} GB/s; assigning the "
                   f"gradients {r['regrad_ms']:.3f} ms)")
    return out


def markdown_summary(result):
    """The headline of a run as Markdown: the machine, the ratio table at 2^24 (or the largest
    size run), the ResNet-50 case and the targets."""
    m = result["machine"]
    size = headline_size(result)
    by = {(c["setting"], c["dtype"], c["log2n"]): c for c in result["cases"]}

    baseline = numpy_baseline_of(result)

    def f(x, spec=".2f", suffix=""):
        return "-" if x is None else f"{x:{spec}}{suffix}"
    lines = [f"Machine: {m.get('gpu') or m['cpu']}, {m['cores']} cores, {m['numba_threads']} "
             f"numba threads" + (f", {m['torch_threads']} torch threads"
                                 if m.get("torch_threads") else "")
             + f"; numpy {m['versions'].get('numpy')}, numba {m['versions'].get('numba')}, "
             f"torch {result['torch'] or 'not installed'}, toolkit "
             f"{m['versions'].get('toolkit')}, Python {m['versions'].get('python')}; "
             f"{m['date']}. Load average (1, 5, 15 min) before "
             f"{[round(x, 2) for x in result['load_average_before'] or []]}, after "
             f"{[round(x, 2) for x in result['load_average_after'] or []]}. Wall time "
             f"{result['wall_s']:.0f} s" + ("" if result["config"].get("kernel_cache", True)
                                           else "; toolkit kernels compiled in the run "
                                                "(--no-kernel-cache)") + "."
             + (" The machine was busy: other processes delayed parallel regions."
                if result.get("machine_busy") else ""), "",
             f"| setting | B/elt f32 | floor GB/s | of the floor f32 | of the floor f16-mp | "
             f"vs {baseline['label']} | vs torch fused | vs torch foreach | us/call 2^{CHEAP} |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for s in result["config"]["settings"]:
        a, h, c = by.get((s, "float32", size)), by.get((s, "float16-mp", size)), \
            by.get((s, "float32", CHEAP))
        r = a["ratios"] if a else {}
        lines.append(
            f"| {s} | {f(a and a['bytes_per_element'], 'd')} | "
            f"{f(a and a['impls']['floor']['GBps'], '.1f')} | {f(r.get('of_floor'))} | "
            f"{f(h and h['ratios']['of_floor'])} | {f(r.get('vs_numpy'), '.1f', 'x')} | "
            f"{f(r.get('vs_torch_fused'), '.2f', 'x')} | "
            f"{f(r.get('vs_torch_foreach'), '.2f', 'x')} | "
            f"{f(c and c['impls']['toolkit']['median_s'] * 1e6, '.1f')} |")
    lines.append("")
    lines.append(f"Ratios at 2^{size} elements: 'of the floor' = floor time / toolkit time; "
                 "'vs X' = X time / toolkit time (above 1: the toolkit is faster). "
                 f"{baseline['label']}: {baseline['what']}.")
    r = result.get("resnet50")
    if r:
        lines += ["", f"ResNet-50, {r['tensors']} tensors, {r['elements']:,} float32 values, "
                      f"one Trainer step (Adam): {r['toolkit_ms']:.2f} ms "
                      f"({r['toolkit_launches_per_step']} kernel call), {r['toolkit_GBps']:.1f} "
                      f"GB/s, {r['of_floor']:.2f} of the floor" + (
                          f"; torch {r['torch_kind']} Adam {r['torch_ms']:.2f} ms: "
                          f"{r['vs_torch']:.2f}x." if r.get("vs_torch") is not None else ".")]
    lines += [""] + trainer_lines(result)
    if result.get("toolkit_torch"):
        lines += [""] + adapter_lines(result)
    lines += ["", "| target | measured | result |", "|---|--:|---|"]
    for t in result["targets"]:
        if t["met"] is None:
            res = t.get("why", "not measured")
        else:
            res = "met" if t["met"] else "NOT met" + (
                f" ({', '.join(t['failing'])})" if t.get("failing") else "")
        lines.append(f"| {t['target']} | {f(t['measured'])} | {res} |")
    return "\n".join(lines) + "\n"


_STYLE = {"floor": ("black", 2.0), "toolkit": ("tab:blue", 1.6), "numpy": ("tab:gray", 1.0),
          "torch fused": ("tab:red", 1.0), "torch foreach": ("tab:orange", 1.0)}


def write_plots(result, out_json):
    """The two PNGs beside ``out_json``; returns their paths ([] without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    stem = os.path.splitext(out_json)[0]
    cases = result["cases"]
    settings = result["config"]["settings"]
    dev = result["device"]
    paths = []

    # 1. achieved bandwidth against size, one panel per setting, the floor drawn
    ncol = min(5, len(settings))
    nrow = math.ceil(len(settings) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.2 * ncol, 2.6 * nrow), squeeze=False,
                             sharex=True)
    handles = {}
    for ax, s in zip(axes.flat, settings):
        for dtype, ls in (("float32", "-"), ("float16-mp", "--")):
            rows = sorted((c for c in cases if c["setting"] == s and c["dtype"] == dtype),
                          key=lambda c: c["log2n"])
            for impl, (color, lw) in _STYLE.items():
                pts = [(c["log2n"], c["impls"][impl]["GBps"]) for c in rows
                       if "GBps" in c["impls"].get(impl, {})]
                if pts:
                    (h,) = ax.plot(*zip(*pts), ls, color=color, lw=lw, marker=".")
                    handles.setdefault(f"{impl} ({dtype})", h)
        ax.set_title(s, fontsize=9)
        ax.set_yscale("log")
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(settings):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("log2 n", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("GB/s", fontsize=8)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=5, fontsize=7)
    m = result["machine"]
    fig.suptitle(f"achieved bandwidth (bytes the step moves / time), {dev}: "
                 f"{m.get('gpu') or m['cpu']}, {m['numba_threads']} threads", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    p = f"{stem}_bandwidth.png"
    fig.savefig(p, dpi=100)
    plt.close(fig)
    paths.append(p)

    # 2. ratios at the headline size
    size = headline_size(result)
    by = {(c["setting"], c["dtype"]): c for c in cases if c["log2n"] == size}
    x = np.arange(len(settings))
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(max(8, 0.55 * len(settings) + 2), 7))

    def vals(dtype, key):
        return [(by[(s, dtype)]["ratios"].get(key) if (s, dtype) in by else None) or 0
                for s in settings]
    a1.bar(x - 0.2, vals("float32", "of_floor"), 0.4, label="float32", color="tab:blue")
    a1.bar(x + 0.2, vals("float16-mp", "of_floor"), 0.4, label="float16-mp", color="tab:cyan")
    a1.axhline(1.0, color="black", lw=0.8)
    thr = {"floor_f32": 0.9, "floor_f16": 0.8} if dev == "cpu" else {"floor_f32": 0.8,
                                                                      "floor_f16": 0.8}
    a1.axhline(thr["floor_f32"], color="tab:blue", ls="--", lw=0.8,
               label=f"target float32 {thr['floor_f32']}")
    a1.axhline(thr["floor_f16"], color="tab:cyan", ls=":", lw=0.8,
               label=f"target float16-mp {thr['floor_f16']}")
    a1.set_ylabel("of the floor (floor/toolkit)")
    a1.set_xticks(x, settings, rotation=40, ha="right", fontsize=8)
    a1.legend(fontsize=7)
    a1.set_title(f"toolkit at 2^{size}: fraction of the floor", fontsize=10)
    for off, key, color in ((-0.27, "vs_numpy", "tab:gray"), (0.0, "vs_torch_fused", "tab:red"),
                            (0.27, "vs_torch_foreach", "tab:orange")):
        v = [x_ if x_ else np.nan for x_ in vals("float32", key)]
        label = (f"vs {numpy_baseline_of(result)['label']}" if key == "vs_numpy"
                 else key.replace("_", " "))
        a2.bar(x + off, v, 0.27, label=label, color=color)
    a2.set_yscale("log")
    a2.axhline(1.0, color="black", lw=0.8)
    a2.set_ylabel("speed-up (other time / toolkit time)")
    a2.set_xticks(x, settings, rotation=40, ha="right", fontsize=8)
    a2.legend(fontsize=7)
    a2.set_title(f"float32 at 2^{size}: toolkit against numpy and torch", fontsize=10)
    fig.tight_layout()
    p = f"{stem}_ratios.png"
    fig.savefig(p, dpi=100)
    plt.close(fig)
    paths.append(p)
    return paths
