"""Benchmark: one Adam step on the CPU backend against the memory-traffic floor, numpy, and torch.

An Adam step is memory-bound: float32 reads weight, grad, mean, var (16 B/element) and writes
weight, mean, var (12 B/element). The floor is a trivial Numba kernel that moves exactly those
bytes (same parallel loop, no arithmetic), measured in the same run. Reported as ratios measured in
one run (absolute times on shared machines vary): toolkit/floor, numpy/toolkit, torch/toolkit
(``torch.optim.Adam(fused=True)`` where available, else foreach).

    python benchmarks/adam_cpu.py [--log2n 24] [--repeat 7]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numba
import numpy as np
from numba import prange

from toolkit import optimizer


@numba.njit(parallel=True, error_model="numpy", cache=True)
def traffic_floor(w, g, m, v):
    for i in prange(w.shape[0]):
        a, b, c, d = w[i], g[i], m[i], v[i]
        w[i] = a + b
        m[i] = c + b
        v[i] = d + b


def numpy_adam(w, g, m, v, lr, b1, b2, eps, t):
    m *= b1
    m += (1 - b1) * g
    v *= b2
    v += (1 - b2) * g * g
    lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    w -= lr_t * m / (np.sqrt(v) + eps)


def best(f, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--log2n", type=int, default=24)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    a = p.parse_args()
    n = 1 << a.log2n
    rng = np.random.default_rng(0)
    w = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal(n).astype(np.float32)
    m, v = np.zeros_like(w), np.zeros_like(w)
    opt = optimizer.Adam(learning_rate=1e-3, backend="cpu")
    state = opt.create_state(0, w)
    opt.update(0, w, g, state)                 # compile / load the kernel
    traffic_floor(w.copy(), g, m.copy(), v.copy())
    nm, nv = np.zeros_like(w), np.zeros_like(w)
    res = {"n": n, "floor": best(lambda: traffic_floor(w, g, m, v), a.repeat),
           "toolkit": best(lambda: opt.update(0, w, g, state), a.repeat),
           "numpy": best(lambda: numpy_adam(w, g, nm, nv, 1e-3, 0.9, 0.999, 1e-8, 3), a.repeat)}
    try:
        import torch
        tw = torch.from_numpy(w.copy()).requires_grad_()
        tw.grad = torch.from_numpy(g.copy())
        try:
            topt = torch.optim.Adam([tw], lr=1e-3, fused=True)
            kind = "fused"
            topt.step()
        except Exception:
            topt = torch.optim.Adam([tw], lr=1e-3, foreach=True)
            kind = "foreach"
            topt.step()
        res["torch"] = best(topt.step, a.repeat)
        res["torch_kind"] = kind
    except ImportError:
        res["torch"] = None
    gb = 28 * n / 1e9
    print(f"Adam float32, n = 2^{a.log2n}, {numba.get_num_threads()} threads, {platform.processor() or platform.machine()}")
    print(f"{'variant':12s} {'time ms':>9s} {'GB/s':>7s} {'ratio to floor':>15s}")
    for k in ("floor", "toolkit", "numpy", "torch"):
        if res.get(k) is None:
            continue
        print(f"{k:12s} {res[k] * 1e3:9.2f} {gb / res[k]:7.1f} {res[k] / res['floor']:15.2f}")
    print(f"numpy/toolkit = {res['numpy'] / res['toolkit']:.1f}x"
          + (f", torch({res['torch_kind']})/toolkit = {res['torch'] / res['toolkit']:.2f}x"
             if res.get("torch") else ", torch not installed"))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"adam_cpu_2^{a.log2n}.json"), "w") as fh:
        json.dump({**res, "machine": platform.machine(), "threads": numba.get_num_threads(),
                   "date": time.strftime("%Y-%m-%d")}, fh, indent=1)


if __name__ == "__main__":
    main()
