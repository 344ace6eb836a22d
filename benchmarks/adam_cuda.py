"""Benchmark: one Adam step on the CUDA backend against the copy floor and torch's Adam (GPU).

An Adam step is memory-bound: float32 reads weight, grad, mean, var (16 B/element) and writes
weight, mean, var (12 B/element), 28 B/element in all. The floor is a device-to-device copy
that moves the same 28*n bytes (14*n read, 14*n written), measured in the same run. Every
row is timed with CUDA events on the current stream around batches of steps after warm-up, and
reported as the median over batches: ms per step, GB/s (28*n bytes / time), ratio to the floor
(floor_time / time, 1.0 = at the floor; target >= 0.8) and ratio vs
``torch.optim.Adam(fused=True)`` (torch_time / time; target >= 1.0). Rows: floor, the toolkit
on PyTorch tensors and on CuPy arrays, torch fused, torch foreach. Each row is timed twice: steps
back to back (what a training loop sees, the host's per-call overhead included where it exceeds
the kernel), and "kernel" (each batch enqueued behind a ``torch.cuda._sleep`` longer than the host
needs to enqueue it, so the events time the kernels alone).

Before timing, one toolkit step is checked against one torch fused step from the same weight
and gradient (torch's epsilon set to MXNet's at step 1, so the two are the same update), so a
broken kernel is never timed. After timing, a "no hidden sync" check: the host time of one
``opt.update`` call against the GPU time of the step, and the host time of an update enqueued
behind a long GPU sleep (an update that synchronises would take at least the sleep).

Needs an NVIDIA GPU, PyTorch with CUDA, numba-cuda; CuPy and matplotlib are optional (their
row / the plot are skipped). Writes JSON and a PNG bar chart next to it::

    python benchmarks/adam_cuda.py [--log2n 26] [--repeats 50] [--out PATH.json]
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8


def fail(parser, msg):
    parser.exit(2, f"{parser.prog}: {msg}\n")


def versions():
    names = ["torch", "cupy", "numba", "numba-cuda", "numpy", "matplotlib"]
    names += sorted({d.metadata["Name"] for d in md.distributions()
                     if (d.metadata["Name"] or "").lower().startswith("cupy-")})
    out = {}
    for name in names:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


def driver_info(torch, cp):
    info = {"torch_cuda_runtime": torch.version.cuda}
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                            f"-i={torch.cuda.current_device()}"],
                           capture_output=True, text=True, timeout=20)
        info["driver_version"] = r.stdout.strip() if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        info["driver_version"] = None
    try:
        from numba import cuda
        info["cuda_driver_api"] = ".".join(map(str, cuda.cudadrv.driver.driver.get_version()))
    except Exception:
        pass
    if cp is not None:
        try:
            info["cupy_cuda_runtime"] = cp.cuda.runtime.runtimeGetVersion()
            info["cupy_cuda_driver"] = cp.cuda.runtime.driverGetVersion()
        except Exception:
            pass
    return info


def torch_clock(torch):
    stream = torch.cuda.current_stream()

    def event():
        return torch.cuda.Event(enable_timing=True)
    return event, lambda e: e.record(stream), lambda a, b: a.elapsed_time(b)


def cupy_clock(cp):
    return (cp.cuda.Event, lambda e: e.record(cp.cuda.get_current_stream()),
            cp.cuda.get_elapsed_time)


def time_steps(step, clock, batches, per_batch, sleep=None, warmup=3):
    """Median ms per step over ``batches`` event-timed batches of ``per_batch`` steps.

    With ``sleep`` (``torch.cuda._sleep``), each batch is enqueued behind a GPU sleep longer
    than the host needs to enqueue it, so the events time the kernels back to back with the
    host's per-call overhead hidden (None if the host did not finish inside the sleep)."""
    event, record, elapsed = clock
    for _ in range(warmup):
        step()
    e = event()
    record(e)
    e.synchronize()
    times = []
    for _ in range(batches):
        s, a, b = event(), event(), event()
        if sleep is not None:
            record(s)
            sleep(20_000_000 * (per_batch + 4))  # about 10 ms per step at 2 GHz
        record(a)
        t0 = time.perf_counter()
        for _ in range(per_batch):
            step()
        host_ms = (time.perf_counter() - t0) * 1e3
        record(b)
        b.synchronize()
        if sleep is not None and host_ms >= elapsed(s, a):
            return None, []
        times.append(elapsed(a, b) / per_batch)
    return statistics.median(times), times


def host_times(update, sync, calls=50):
    """Host seconds of single update calls: synchronised before each call, never inside it."""
    out = []
    for _ in range(calls):
        sync()
        t0 = time.perf_counter()
        update()
        out.append(time.perf_counter() - t0)
    sync()
    return statistics.median(out)


def behind_sleep(torch, update):
    """(host ms of ``update`` enqueued behind a long GPU op, GPU ms of that op, kind of op)."""
    stream = torch.cuda.current_stream()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    big = None if hasattr(torch.cuda, "_sleep") else torch.randn(8192, 8192, device="cuda")
    torch.cuda.synchronize()
    e0.record(stream)
    if big is None:
        torch.cuda._sleep(100_000_000)
    else:
        for _ in range(4):
            big @ big
    e1.record(stream)
    t0 = time.perf_counter()
    update()
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    return host * 1e3, e0.elapsed_time(e1), "torch.cuda._sleep" if big is None else "matmul"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--log2n", type=int, default=26, help="n = 2**log2n float32 elements")
    p.add_argument("--repeats", type=int, default=50, help="timed steps per row (in 10 batches)")
    p.add_argument("--out", default=None,
                   help="JSON path (default benchmarks/results/adam_cuda_<device>.json)")
    a = p.parse_args()
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        fail(p, "NUMBA_ENABLE_CUDASIM is set; the simulator cannot be benchmarked")
    try:
        import torch
    except ImportError:
        fail(p, "needs PyTorch with CUDA (torch is not installed) and an NVIDIA GPU")
    if not torch.cuda.is_available():
        fail(p, "no CUDA GPU visible to PyTorch (torch.cuda.is_available() is False)")
    try:
        from toolkit import optimizer
    except ImportError:  # run from a checkout that is not installed
        sys.path.insert(0, os.path.dirname(HERE))
        from toolkit import optimizer
    from toolkit.backends import cuda_available
    ok, why = cuda_available()
    if not ok:
        fail(p, f"the toolkit's CUDA backend cannot run: {why}")
    try:
        import cupy as cp
    except ImportError:
        cp = None
        print("CuPy is not installed: the toolkit(cupy) row is skipped")

    n = 1 << a.log2n
    batches = max(1, min(10, a.repeats))
    per_batch = max(1, a.repeats // batches)
    nbytes = 28 * n
    dev = torch.cuda.get_device_properties(torch.cuda.current_device())
    slug = re.sub(r"[^a-z0-9]+", "-", dev.name.lower()).strip("-")
    out = a.out or os.path.join(HERE, "results", f"adam_cuda_{slug}.json")
    tclock = torch_clock(torch)
    gen = torch.Generator(device="cuda").manual_seed(0)
    w0 = torch.randn(n, device="cuda", dtype=torch.float32, generator=gen)
    g = torch.randn(n, device="cuda", dtype=torch.float32, generator=gen)
    print(f"Adam float32, n = 2^{a.log2n}, {dev.name}, {a.repeats} steps per row "
          f"({batches} batches of {per_batch})")

    # -- sanity: one toolkit step == one torch fused step (torch eps = MXNet eps/sqrt(1-beta2))
    wt = w0.clone()
    chk = optimizer.Adam(learning_rate=LR, backend="cuda")
    st = chk.create_state(0, wt)
    chk.update(0, wt, g, st)
    pr = torch.nn.Parameter(w0.clone())
    pr.grad = g.clone()
    ref = torch.optim.Adam([pr], lr=LR, betas=(BETA1, BETA2), eps=EPS / math.sqrt(1 - BETA2),
                           fused=True)
    ref.step()
    torch.cuda.synchronize()
    rs = ref.state[pr]
    with torch.no_grad():
        # |w| < 8 here, where one float32 ulp is 4.8e-7 = 4.8e-4 * lr: rounding alone stays < 1e-3
        err_w = ((wt - pr).abs().max() / LR).item()
        err_m = ((st[0] - rs["exp_avg"]).abs().max() / rs["exp_avg"].abs().max()).item()
        err_v = ((st[1] - rs["exp_avg_sq"]).abs().max() / rs["exp_avg_sq"].abs().max()).item()
    check = {"max_abs_dw_over_lr": err_w, "mean_rel_err": err_m, "var_rel_err": err_v}
    print(f"sanity vs torch fused, step 1: max|w diff|/lr = {err_w:.2e}, "
          f"mean rel err = {err_m:.2e}, var rel err = {err_v:.2e}")
    if not max(err_w, err_m, err_v) < 1e-3:
        sys.exit(f"{p.prog}: the toolkit's CUDA Adam disagrees with torch (> 1e-3); not timing it")
    del wt, st, pr, ref, rs

    res = {}
    sleep = getattr(torch.cuda, "_sleep", None)

    def measure(step, clock):  # (back to back, kernels only with the host hidden behind a sleep)
        return (time_steps(step, clock, batches, per_batch),
                time_steps(step, clock, batches, per_batch, sleep=sleep) if sleep else (None, []))

    # -- floor: a device-to-device copy of 14*n bytes (14n read + 14n written = 28n bytes)
    src = torch.ones(14 * n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    res["floor"] = measure(lambda: dst.copy_(src), tclock)
    del src, dst
    torch.cuda.empty_cache()

    # -- toolkit on torch tensors (the kernel goes on the stream the tensors export)
    w = w0.clone()
    opt = optimizer.Adam(learning_rate=LR, backend="cuda")
    state = opt.create_state(0, w)

    def tk_torch():
        opt.update(0, w, g, state)
    res["toolkit(torch)"] = measure(tk_torch, tclock)
    gpu_ms = res["toolkit(torch)"][1][0] or res["toolkit(torch)"][0][0]
    host_ms = host_times(tk_torch, torch.cuda.synchronize) * 1e3
    sleep_host, sleep_gpu, sleep_kind = behind_sleep(torch, tk_torch)
    sync = {"update_host_ms_median": host_ms, "update_gpu_ms": gpu_ms,
            "update_returns_before_kernel_finishes": host_ms < gpu_ms,
            "behind": sleep_kind, "behind_gpu_ms": sleep_gpu, "behind_update_host_ms": sleep_host,
            "no_sync_behind_long_op": sleep_host < 0.5 * sleep_gpu}

    # -- toolkit on CuPy arrays
    if cp is not None:
        cp.random.seed(0)
        cw = cp.random.standard_normal(n, dtype=cp.float32)
        cg = cp.random.standard_normal(n, dtype=cp.float32)
        copt = optimizer.Adam(learning_rate=LR, backend="cuda")
        cstate = copt.create_state(0, cw)

        def tk_cupy():
            copt.update(0, cw, cg, cstate)
        res["toolkit(cupy)"] = measure(tk_cupy, cupy_clock(cp))
        sync["cupy_behind_update_host_ms"], sync["cupy_behind_gpu_ms"], _ = behind_sleep(torch, tk_cupy)
        del cw, cg, cstate, copt
        cp.get_default_memory_pool().free_all_blocks()
    del w, state, opt
    torch.cuda.empty_cache()

    # -- torch.optim.Adam, fused and foreach
    for name, kw in (("torch fused", {"fused": True}), ("torch foreach", {"foreach": True})):
        tp = torch.nn.Parameter(w0.clone())
        tp.grad = g.clone()
        try:
            topt = torch.optim.Adam([tp], lr=LR, **kw)
            topt.step()
        except Exception as exc:  # an older torch without this implementation
            print(f"{name} skipped: {exc}")
            continue
        res[name] = measure(topt.step, tclock)
        del tp, topt
        torch.cuda.empty_cache()

    def gbps(ms):
        return nbytes / (ms * 1e-3) / 1e9 if ms else None

    def ratio(num, ms):
        return num / ms if num and ms else None

    def fmt(x, w=8, d=2):
        return f"{x:{w}.{d}f}" if x is not None else f"{'-':>{w}s}"
    (floor, _), (kfloor, _) = res["floor"]
    fused, kfused = (r[0] for r in res["torch fused"]) if "torch fused" in res else (None, None)
    rows = {}
    print(f"{'variant':16s} {'ms/step':>9s} {'GB/s':>8s} {'floor/t':>8s} {'fused/t':>8s}"
          f" | {'kernel ms':>9s} {'GB/s':>8s} {'floor/t':>8s} {'fused/t':>8s}")
    for name, ((ms, batch_ms), (kms, kbatch_ms)) in res.items():
        rows[name] = r = {
            "ms": ms, "batch_ms": batch_ms, "gbps": gbps(ms), "ratio_to_floor": ratio(floor, ms),
            "ratio_vs_torch_fused": ratio(fused, ms),
            "kernel_ms": kms, "kernel_batch_ms": kbatch_ms, "kernel_gbps": gbps(kms),
            "kernel_ratio_to_floor": ratio(kfloor, kms), "kernel_ratio_vs_torch_fused": ratio(kfused, kms)}
        print(f"{name:16s} {ms:9.3f} {fmt(r['gbps'], 8, 1)} {fmt(r['ratio_to_floor'])} "
              f"{fmt(r['ratio_vs_torch_fused'])} | {fmt(kms, 9, 3)} {fmt(r['kernel_gbps'], 8, 1)} "
              f"{fmt(r['kernel_ratio_to_floor'])} {fmt(r['kernel_ratio_vs_torch_fused'])}")
    print("ms/step: steps back to back (host overhead included); kernel ms: each batch enqueued "
          "behind a GPU sleep, host overhead hidden" + ("" if sleep else " (no torch.cuda._sleep: -)"))
    targets = {}
    for name in ("toolkit(torch)", "toolkit(cupy)"):
        if name in rows:
            r = rows[name]
            t = targets[name] = {
                k + "floor_ge_0.8": None if r[k + "ratio_to_floor"] is None
                else r[k + "ratio_to_floor"] >= 0.8 for k in ("", "kernel_")}
            t.update({k + "vs_fused_ge_1.0": None if r[k + "ratio_vs_torch_fused"] is None
                      else r[k + "ratio_vs_torch_fused"] >= 1.0 for k in ("", "kernel_")})
            print(f"{name}: ratio to floor >= 0.8: {t['floor_ge_0.8']} (kernel "
                  f"{t['kernel_floor_ge_0.8']}), vs torch fused >= 1.0: {t['vs_fused_ge_1.0']} "
                  f"(kernel {t['kernel_vs_fused_ge_1.0']})")
    print(f"no hidden sync: update host {host_ms:.3f} ms vs kernel {gpu_ms:.3f} ms per step -> "
          f"returns before the kernel finishes: {sync['update_returns_before_kernel_finishes']}; "
          f"behind a {sleep_gpu:.1f} ms {sleep_kind}: update host {sleep_host:.3f} ms -> "
          f"no sync: {sync['no_sync_behind_long_op']}")
    if sync["no_sync_behind_long_op"] and not sync["update_returns_before_kernel_finishes"]:
        print("  (the update's host overhead exceeds the kernel's time: the step is host-bound, "
              "not synchronising)")

    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as fh:
        json.dump({"n": n, "log2n": a.log2n, "repeats": a.repeats, "batches": batches,
                   "steps_per_batch": per_batch, "bytes_per_step": nbytes,
                   "device": dev.name, "sm_count": dev.multi_processor_count,
                   "capability": f"{dev.major}.{dev.minor}", "total_memory": dev.total_memory,
                   **driver_info(torch, cp), "versions": versions(), "sanity": check,
                   "results": rows, "targets": targets, "sync_check": sync,
                   "date": time.strftime("%Y-%m-%d")}, fh, indent=1)
    print(f"wrote {out}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    names = list(rows)
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [rows[k]["gbps"] for k in names], 0.4, color="tab:blue",
           label="steps back to back")
    ax.bar([i + 0.2 for i in x], [rows[k]["kernel_gbps"] or 0 for k in names], 0.4,
           color="tab:cyan", label="kernel only (host hidden)")
    ax.set_xticks(list(x), names)
    ax.axhline(rows["floor"]["gbps"], color="tab:red", label="copy floor")
    ax.axhline(0.8 * rows["floor"]["gbps"], color="tab:red", ls="--", label="0.8 x floor")
    ax.set_ylabel("GB/s (28 B/element)")
    ax.set_title(f"Adam float32 step, n = 2^{a.log2n}, {dev.name}")
    ax.legend()
    plt.setp(ax.get_xticklabels(), rotation=15)
    fig.tight_layout()
    png = os.path.splitext(out)[0] + ".png"
    fig.savefig(png, dpi=120)
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
