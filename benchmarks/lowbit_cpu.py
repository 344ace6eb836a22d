"""Benchmark: Adam's step (MXNet's rule) on the CPU with its two moments held in float32,
bfloat16 and 8 bits (``toolkit.backends.cpu_lowbit.run_held``), each against its own memory
floor, in one run.

At 2**24 float32 weights, timed interleaved (``toolkit.tools.bench.timing.measure``: shuffled
repetitions, the fastest of a few calls each, medians):

* ``float32``: ``cpu_elementwise.run_elementwise`` (today's kernel), 28 bytes an element
  (grad read; weight and two moments read and written);
* ``bfloat16``: ``run_held`` with two bfloat16 slots, 20 bytes an element;
* ``int8``: ``run_held`` with a SIGNED and an UNSIGNED ``Quantized`` slot, 16 bytes an element
  plus the blocks' scales (2 * 8 bytes per 256 elements);
* each one's floor: a trivial parallel kernel reading and writing the same arrays (the
  bandwidth of the float32 floor is the machine's, recorded);
* bitsandbytes' ``Adam8bit`` and torchao's ``AdamW8bit`` on CPU tensors, where importable.

``--encoder`` also times the 8-bit encoder alone (in cache, per element); ``--in-cache`` each
step at 2**14 elements (serial, in cache, per element).

    python benchmarks/lowbit_cpu.py [--size 24] [--repeats 7] [--encoder] [--in-cache]
                                    [--out PATH]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import toolkit  # noqa: F401 (installed, else the checkout's)
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(HERE))

import numba  # noqa: E402
from numba import prange  # noqa: E402

from toolkit.backends import cpu_elementwise, cpu_lowbit, lowbit  # noqa: E402
from toolkit.optimizers import adam  # noqa: E402
from toolkit.tools.bench.timing import measure, paired  # noqa: E402

#: MXNet's Adam row (lr_t, wd, rescale, clip, b1, 1-b1, b2, 1-b2, eps)
HYPER = (0.001, 0.0, 1.0, -1.0, 0.9, 0.1, 0.999, 0.001, 1e-8)
#: bytes per element each step moves
BYTES = {"float32": 28, "bfloat16": 20, "int8": 16 + 2 * 8 / lowbit.BLOCK}


@numba.njit(parallel=True, error_model="numpy", cache=True)
def _floor_float32(g, w, a, b):
    for i in prange(w.shape[0]):
        x = g[i]
        w[i] += x
        a[i] += x
        b[i] += x


@numba.njit(parallel=True, error_model="numpy", cache=True)
def _floor_bfloat16(g, w, a, b):
    for i in prange(w.shape[0]):
        x = g[i]
        w[i] += x
        a[i] += np.uint16(i)
        b[i] += np.uint16(i)


@numba.njit(parallel=True, error_model="numpy", cache=True)
def _floor_int8(g, w, a, b, sa, sb):
    """The int8 step's bytes in chunks of 64 blocks, as the held kernel walks them: each
    block's slices indexed from 0 (vectorised), its two scales read and written."""
    n, nb = w.shape[0], sa.shape[0]
    for c in prange((nb + 63) // 64):
        for blk in range(c * 64, min(c * 64 + 64, nb)):
            lo = blk * 256
            hi = min(lo + 256, n)
            gb, wb, ab, bb = g[lo:hi], w[lo:hi], a[lo:hi], b[lo:hi]
            for j in range(hi - lo):
                wb[j] += gb[j]
                ab[j] += np.uint8(1)
                bb[j] += np.uint8(1)
            sa[blk] += np.float32(1)
            sb[blk] += np.float32(1)


def cases(n, rng, with_peers=True):
    """The steps timed: name -> callable."""
    w = rng.standard_normal(n, dtype=np.float32)
    g = rng.standard_normal(n, dtype=np.float32)
    m = rng.standard_normal(n, dtype=np.float32) * np.float32(0.01)
    v = np.abs(rng.standard_normal(n, dtype=np.float32)) * np.float32(1e-4)
    f32 = (w.copy(), m.copy(), v.copy())
    b16 = (w.copy(), m.astype(lowbit.BFLOAT16), v.astype(lowbit.BFLOAT16))
    q8 = (w.copy(), lowbit.quantize(m, lowbit.SIGNED), lowbit.quantize(v, lowbit.UNSIGNED))
    steps = {
        "float32": lambda: cpu_elementwise.run_elementwise(adam.mxnet_rule, f32[0], g,
                                                           f32[1:], HYPER),
        "bfloat16": lambda: cpu_lowbit.run_held(adam.mxnet_rule, b16[0], g, b16[1:], HYPER),
        "int8": lambda: cpu_lowbit.run_held(adam.mxnet_rule, q8[0], g, q8[1:], HYPER)}
    fl = [np.zeros(n, np.float32) for _ in range(3)]
    fb = [np.zeros(n, np.float32), np.zeros(n, np.uint16), np.zeros(n, np.uint16)]
    fq = [np.zeros(n, np.float32), np.zeros(n, np.uint8), np.zeros(n, np.uint8),
          np.zeros(lowbit.blocks_of(n), np.float32), np.zeros(lowbit.blocks_of(n), np.float32)]
    steps["floor float32"] = lambda: _floor_float32(g, *fl)
    steps["floor bfloat16"] = lambda: _floor_bfloat16(g, *fb)
    steps["floor int8"] = lambda: _floor_int8(g, *fq)
    if with_peers:
        steps.update(peers(w, g))
    return steps


def peers(w, g):
    """bitsandbytes' Adam8bit and torchao's AdamW8bit on CPU tensors, where they import."""
    out = {}
    try:
        import torch
        torch.set_num_threads(numba.get_num_threads())
    except ImportError:
        return out
    for name, make in (("bitsandbytes Adam8bit", _bnb), ("torchao AdamW8bit", _torchao)):
        try:
            p = torch.nn.Parameter(torch.from_numpy(w.copy()))
            p.grad = torch.from_numpy(g.copy())
            opt = make(p)
            opt.step()
            out[name] = opt.step
        except Exception as e:  # not installed, or no CPU kernel: reported, not timed
            print(f"{name}: not timed ({type(e).__name__}: {str(e)[:120]})")
    return out


def _bnb(p):
    import bitsandbytes as bnb
    return bnb.optim.Adam8bit([p], lr=1e-3, min_8bit_size=0)


def _torchao(p):
    from torchao.optim import AdamW8bit
    return AdamW8bit([p], lr=1e-3, weight_decay=0.0)


def encoder_cycles(ghz):
    """ns and cycles (at ``ghz``) per element of the compiled encoder alone, in cache, for the
    default cell size, plus numpy's searchsorted for comparison."""
    rng = np.random.default_rng(1)
    n = 1 << 14
    s = np.clip(rng.standard_normal(n).astype(np.float32)
                * np.float32(10.0) ** rng.uniform(-9, 0, n).astype(np.float32), -1, 1)
    codes = np.empty(n, np.uint8)
    out = {}
    for name, qmap in (("signed", lowbit.SIGNED), ("unsigned", lowbit.UNSIGNED)):
        k = cpu_lowbit.encode_kernel(qmap)
        k(s, codes)
        best = min(_time(lambda: k(s, codes)) for _ in range(300))
        mid = lowbit.midpoints(qmap)
        ss = min(_time(lambda: np.searchsorted(mid, s)) for _ in range(30))
        out[name] = {"ns": best / n * 1e9, "cycles": best / n * ghz * 1e9,
                     "searchsorted_ns": ss / n * 1e9}
        print(f"encoder {name}: {best / n * 1e9:.2f} ns/element ({best / n * ghz * 1e9:.1f} "
              f"cycles at {ghz} GHz); numpy searchsorted {ss / n * 1e9:.2f} ns")
    return out


def in_cache(ghz):
    """ns (and cycles at ``ghz``) per element of one step at 2**14 elements (serial kernels,
    in cache): the float32 kernel, run_held with plain, bfloat16 and int8 slots, interleaved,
    the fastest of 200 calls in each of 5 rounds."""
    rng = np.random.default_rng(2)
    n = 1 << 14
    steps = cases(n, rng, with_peers=False)
    steps = {k: steps[k] for k in ("float32", "bfloat16", "int8")}
    w, g = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    mv = (np.zeros(n, np.float32), np.zeros(n, np.float32))
    steps["plain (run_held)"] = lambda: cpu_lowbit.run_held(adam.mxnet_rule, w, g, mv, HYPER)
    best = {k: math.inf for k in steps}
    for _ in range(5):
        for k, fn in steps.items():
            fn()
            best[k] = min(best[k], min(_time(fn) for _ in range(200)))
    out = {k: {"ns": t / n * 1e9, "cycles": t / n * ghz * 1e9} for k, t in best.items()}
    for k, v in out.items():
        print(f"in cache {k}: {v['ns']:.3f} ns/element ({v['cycles']:.2f} cycles at {ghz} GHz)")
    return out


def _time(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=24, help="log2 of the element count")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--ghz", type=float, default=2.6, help="clock for the cycle counts")
    ap.add_argument("--encoder", action="store_true")
    ap.add_argument("--in-cache", action="store_true", help="ns per element at 2**14, serial")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "lowbit_cpu.json"))
    args = ap.parse_args(argv)
    n = 1 << args.size
    steps = cases(n, np.random.default_rng(0))
    times, _ = measure(steps, args.repeats, 0.3, lambda: None)
    med = {k: statistics.median(v) for k, v in times.items()}
    bandwidth = n * BYTES["float32"] / med["floor float32"]
    rows = []
    print(f"2**{args.size} float32 weights, {numba.get_num_threads()} threads; float32 floor "
          f"{bandwidth / 1e9:.1f} GB/s")
    print(f"{'states':<22}{'ms':>8}{'floor ms':>10}{'/floor':>8}{'speed-up':>10}")
    for name in times:
        if name.startswith("floor"):
            continue
        row = {"states": name, "ms": med[name] * 1e3,
               "speedup_over_float32": paired(times["float32"], times[name])}
        if name in BYTES:
            row.update(bytes_per_element=BYTES[name], floor_ms=med["floor " + name] * 1e3,
                       over_floor=paired(times[name], times["floor " + name]),
                       floor_GBps=n * BYTES[name] / med["floor " + name] / 1e9)
        rows.append(row)
        print(f"{name:<22}{row['ms']:8.2f}{row.get('floor_ms', float('nan')):10.2f}"
              f"{row.get('over_floor', float('nan')):8.2f}{row['speedup_over_float32']:10.2f}")
    out = {"benchmark": "lowbit_cpu", "rule": "adam.mxnet_rule", "elements": n,
           "threads": numba.get_num_threads(), "machine": platform.machine(),
           "processor": platform.processor(), "numpy": np.__version__,
           "numba": numba.__version__, "floor_float32_GBps": bandwidth / 1e9, "rows": rows}
    if args.encoder:
        out["encoder"] = encoder_cycles(args.ghz)
    if args.in_cache:
        out["in_cache"] = in_cache(args.ghz)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(out, fh, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
