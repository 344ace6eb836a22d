"""``mxopt bench``: the benchmark suite, every optimizer against its memory-traffic floor, unfused
numpy and PyTorch, in one run (``benchmarks/suite.py`` runs it too).

An optimizer step is memory-bound: its floor is the time a trivial kernel takes to move the same
bytes, measured in the same run. For every optimizer setting that
changes the traffic (momentum on/off for sgd, nag, signum, lbsgd, dcasgd; centered on/off for
rmsprop; LARS for lbsgd), for float32 and float16 with ``multi_precision``, and for a range of
sizes, one run times, on one flat tensor:

* ``toolkit``: ``opt.update(0, w, g, state)`` (``update_multi_precision`` for float16), backend
  "cpu" (numpy arrays) or "cuda" (numba device arrays);
* ``floor``: CPU, a parallel Numba kernel that reads and writes the same arrays as the optimizer
  (grad read; weight and every state slot read and written; the float16 weight written from the
  float32 master; LBSGD's accumulator; LARS's norm pass read), with trivial arithmetic. CUDA, a
  device-to-device copy of the same number of bytes;
* ``numpy``: the optimizer's equations written with numpy operations (the unfused baseline;
  rescale_grad 1, no weight decay, no clipping; CPU only);
* ``torch fused`` / ``torch foreach``: ``torch.optim.<X>(fused=True / foreach=True)`` where torch
  is installed and has the optimizer (Adam, SGD, Adagrad, RMSprop, Adadelta, Adamax, NAdam),
  float32 only (torch has no multi-precision: its float16 parameters keep float16 state); a
  variant torch cannot run is reported "n/a" with the reason.

Timing: every implementation of a case is timed once per repetition, in a shuffled order, so
what else the machine does meanwhile falls on all of them alike. A repetition times up to 3
sub-batches of calls (each about a third of ``--batch-ms``, at least one call; fewer
sub-batches where 3 would take over 60 ms) and keeps the fastest per call: a busy machine only
ever delays a call. Results are medians over repetitions. Ratios are medians of the per-repetition
ratios: "of the floor" = floor_time / toolkit_time (1.0 = at the floor), "vs numpy" =
numpy_time / toolkit_time, "vs torch" = torch_time / toolkit_time (above 1: the toolkit is
faster). A many-tensor case steps ResNet-50's 161 parameter shapes (25.6 M float32 values) with
one Trainer step (Adam) against torch's fused Adam over the same list of tensors, interleaved.

Output: a table of ratios, the per-call time at 2^12 (the "cheap call"), the targets met or not,
JSON (``suite_<device>.json`` in the working directory, or in ``--out DIR``) and two PNGs beside
it (achieved bandwidth against size per optimizer, ratios at 2^24). The repository's recorded
results (``benchmarks/results/``) are written only when asked: ``--out benchmarks/results``.
Benchmarks are never timed tests.

    python -m toolkit bench [--quick | --full] [--device cpu|cuda] [--out DIR | PATH.json]
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata as md
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time
from typing import NamedTuple

import numba
import numpy as np
from numba import prange

__all__ = ["main", "run_suite", "SETTINGS", "resnet50_shapes", "make_trainer", "make_torch",
           "interleaved", "timed", "trainer_case", "TARGETS", "markdown_summary", "measure"]

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def default_out(device, out=None):
    """Where a run writes its JSON (the PNGs go beside it): ``out`` itself where it ends in
    ``.json``, else ``suite_<device>.json`` in the directory ``out``, by default the working
    directory. Never the checkout's recorded ``benchmarks/results/`` unless ``out`` names it."""
    name = f"suite_{device}.json"
    if out is None:
        return os.path.join(os.getcwd(), name)
    return out if out.endswith(".json") else os.path.join(out, name)


# --------------------------------------------------------------------------------------------
# the optimizer settings
# --------------------------------------------------------------------------------------------
class Setting(NamedTuple):
    label: str            #: "sgd mom", "rmsprop centered", ...
    name: str             #: the registry name
    kwargs: dict          #: hyperparameters that change the traffic
    torch: tuple | None   #: (torch.optim class name, kwargs) of the same traffic, or None
    quick: bool = False   #: in ``--quick``


SETTINGS = (
    Setting("sgd", "sgd", {"momentum": 0.0}, ("SGD", {"momentum": 0.0})),
    Setting("sgd mom", "sgd", {"momentum": 0.9}, ("SGD", {"momentum": 0.9}), True),
    Setting("nag", "nag", {"momentum": 0.0}, ("SGD", {"momentum": 0.0})),
    Setting("nag mom", "nag", {"momentum": 0.9}, ("SGD", {"momentum": 0.9, "nesterov": True}),
            True),
    Setting("adagrad", "adagrad", {}, ("Adagrad", {}), True),
    Setting("rmsprop", "rmsprop", {}, ("RMSprop", {"alpha": 0.9}), True),
    Setting("rmsprop centered", "rmsprop", {"centered": True},
            ("RMSprop", {"alpha": 0.9, "centered": True, "momentum": 0.9})),
    Setting("adadelta", "adadelta", {}, ("Adadelta", {"rho": 0.9, "lr": 1.0}), True),
    Setting("adam", "adam", {}, ("Adam", {}), True),
    Setting("adamax", "adamax", {}, ("Adamax", {}), True),
    Setting("nadam", "nadam", {}, ("NAdam", {}), True),
    Setting("signum", "signum", {"momentum": 0.0}, None),
    Setting("signum mom", "signum", {"momentum": 0.9}, None, True),
    Setting("lbsgd", "lbsgd", {"momentum": 0.0}, None),
    Setting("lbsgd mom", "lbsgd", {"momentum": 0.9}, None, True),
    Setting("lbsgd lars mom", "lbsgd", {"momentum": 0.9, "warmup_strategy": "lars"}, None),
    Setting("dcasgd", "dcasgd", {"momentum": 0.0}, None),
    Setting("dcasgd mom", "dcasgd", {"momentum": 0.9}, None, True),
    Setting("ftrl", "ftrl", {}, None, True),
    Setting("ftml", "ftml", {}, None, True),
    Setting("sgld", "sgld", {}, None, True),
    Setting("adamw", "adamw", {}, ("AdamW", {"weight_decay": 0.0}), True),
    Setting("lars mom", "lars", {"momentum": 0.9}, None, True),
    Setting("lamb", "lamb", {}, None, True),
    Setting("groupadagrad", "groupadagrad", {}, None, True),
)

#: Columns of GroupAdaGrad's matrix weight (an embedding table of this width; one history value
#: per row): ``n`` elements make ``n // ROW_COLS`` rows.
ROW_COLS = 256

DTYPES = ("float32", "float16")   # float16: with multi_precision (a float32 master copy)
DEFAULT_SIZES = {"cpu": (12, 16, 20, 24), "cuda": (12, 16, 20, 24, 28)}
FULL_SIZES = {"cpu": tuple(range(12, 27, 2)), "cuda": tuple(range(12, 29, 2))}
QUICK_SIZES = (12, 20)
HEADLINE = 24          # the size of the ratio targets and the bar chart
CHEAP = 12             # the size of the "cheap call" number

IMPLS = ("floor", "toolkit", "numpy", "torch fused", "torch foreach")


def select_settings(names=None, quick=False):
    """The settings to run: those whose label or optimizer name is in ``names`` (all when None),
    and only the ``--quick`` ones when ``quick``."""
    out = [s for s in SETTINGS if not quick or s.quick]
    if names:
        wanted = {n.strip().lower() for n in names if n.strip()}
        unknown = wanted - {s.label for s in SETTINGS} - {s.name for s in SETTINGS}
        if unknown:
            raise ValueError(f"unknown optimizer or setting {sorted(unknown)}; known: "
                             f"{', '.join(s.label for s in SETTINGS)}")
        out = [s for s in SETTINGS if s.label in wanted or s.name in wanted]
    return out


def make_optimizer(setting, backend, multi_precision=False):
    from . import optimizer
    return optimizer.create(setting.name, backend=backend, multi_precision=multi_precision,
                            **setting.kwargs)


class Traffic(NamedTuple):
    """What one step of a setting moves, per element."""
    rw: int              #: arrays read and written in the arithmetic dtype (weight or master,
    #: state slots shaped like the weight, LBSGD's accumulator)
    first_reads: int     #: a first pass reading the grad and this many of the rw arrays (0: no
    #: first pass): the per-tensor norms of LBSGD's 'lars' (weight, accumulator) and LARS
    #: (weight), LAMB's direction pass (weight and both moments)
    bytes: int           #: bytes per element: grad read, rw arrays, float16 weight written, and
    #: the first pass

    @property
    def norm_pass(self):
        return self.first_reads > 0


def traffic(setting, half):
    """The bytes one step really moves per element (float32 arithmetic; ``half``: float16
    weight and grad with a float32 master copy, the float16 weight written only). GroupAdaGrad's
    history (one value per row of :data:`ROW_COLS` columns) is not counted."""
    opt = make_optimizer(setting, "cpu")
    slots = len(opt.state_slots()) if opt.state_like_weight else 0
    # LBSGD's accumulator with batch_scale 1 stays zero (every call steps): the step neither
    # reads nor writes it
    buffers = len(opt.host_buffers()) if getattr(opt, "batch_scale", 1) > 1 else 0
    rw = 1 + slots + buffers
    if getattr(opt, "warmup_strategy", None) == "lars":
        first = 1 + buffers
    elif setting.name == "lars":
        first = 1
    elif setting.name == "lamb":
        first = 3
    else:
        first = 0
    gsize = 2 if half else 4
    nbytes = gsize + 8 * rw + (2 if half else 0) + ((4 * first + gsize) if first else 0)
    return Traffic(rw, first, nbytes)


# --------------------------------------------------------------------------------------------
# the CPU floor: the same arrays read and written, trivial arithmetic
# --------------------------------------------------------------------------------------------
# ``g`` is the float32 grad, or a float16 grad viewed as uint16 (converted, not decoded: only the
# bytes matter); ``o`` the float16 weight viewed as uint16, written only.
def _floor1(g, a0):
    for i in prange(a0.shape[0]):
        x = np.float32(g[i])
        a0[i] = a0[i] + x


def _floor2(g, a0, a1):
    for i in prange(a0.shape[0]):
        x = np.float32(g[i])
        a0[i] = a0[i] + x
        a1[i] = a1[i] + x


def _floor3(g, a0, a1, a2):
    for i in prange(a0.shape[0]):
        x = np.float32(g[i])
        a0[i] = a0[i] + x
        a1[i] = a1[i] + x
        a2[i] = a2[i] + x


def _floor4(g, a0, a1, a2, a3):
    for i in prange(a0.shape[0]):
        x = np.float32(g[i])
        a0[i] = a0[i] + x
        a1[i] = a1[i] + x
        a2[i] = a2[i] + x
        a3[i] = a3[i] + x


def _floor16_1(g, o, a0):
    for i in prange(a0.shape[0]):
        h = g[i]
        x = np.float32(h)
        a0[i] = a0[i] + x
        o[i] = h


def _floor16_2(g, o, a0, a1):
    for i in prange(a0.shape[0]):
        h = g[i]
        x = np.float32(h)
        a0[i] = a0[i] + x
        a1[i] = a1[i] + x
        o[i] = h


def _floor16_3(g, o, a0, a1, a2):
    for i in prange(a0.shape[0]):
        h = g[i]
        x = np.float32(h)
        a0[i] = a0[i] + x
        a1[i] = a1[i] + x
        a2[i] = a2[i] + x
        o[i] = h


def _floor16_4(g, o, a0, a1, a2, a3):
    for i in prange(a0.shape[0]):
        h = g[i]
        x = np.float32(h)
        a0[i] = a0[i] + x
        a1[i] = a1[i] + x
        a2[i] = a2[i] + x
        a3[i] = a3[i] + x
        o[i] = h


def _floor_read1(a, g):
    """A first pass (LARS's norms): weight and grad read (fastmath: a vectorised sum)."""
    s = np.float32(0)
    for i in prange(a.shape[0]):
        s += a[i] + np.float32(g[i])
    return s


def _floor_read2(a, g, c):
    """A first pass (LBSGD's 'lars' norms): weight, grad and accumulator read."""
    s = np.float32(0)
    for i in prange(a.shape[0]):
        s += a[i] + np.float32(g[i]) + c[i]
    return s


def _floor_read3(a, g, c, d):
    """A first pass (LAMB's direction): weight, grad and both moments read."""
    s = np.float32(0)
    for i in prange(a.shape[0]):
        s += a[i] + np.float32(g[i]) + c[i] + d[i]
    return s


_FLOOR_SOURCES = {(1, False): _floor1, (2, False): _floor2, (3, False): _floor3,
                  (4, False): _floor4, (1, True): _floor16_1, (2, True): _floor16_2,
                  (3, True): _floor16_3, (4, True): _floor16_4, ("read", 1): _floor_read1,
                  ("read", 2): _floor_read2, ("read", 3): _floor_read3}
_floor_kernels: dict = {}


def floor_kernel(key, parallel):
    """The compiled floor ``key`` (rw count and float16 flag, or "read"); the serial variant is a
    copy under another name, so that numba's on-disk cache keeps the two apart."""
    k = (key, bool(parallel))
    if k not in _floor_kernels:
        import types as pytypes
        fn = _FLOOR_SOURCES[key]
        if not parallel:
            fn = pytypes.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial",
                                      fn.__defaults__, fn.__closure__)
            fn.__qualname__ = fn.__name__
        _floor_kernels[k] = numba.njit(parallel=bool(parallel), error_model="numpy",
                                       fastmath=(key[0] == "read"), cache=True, nogil=True)(fn)
    return _floor_kernels[k]


def cpu_floor(n, tr, half, g):
    """The CPU floor's step for ``n`` elements of a setting of traffic ``tr`` (its own arrays;
    ``g`` the shared grad)."""
    from .backends.cpu import PARALLEL_THRESHOLD
    if tr.rw > 4:
        raise ValueError(f"no floor kernel for {tr.rw} read-write arrays")
    parallel = n >= PARALLEL_THRESHOLD
    arrays = [np.zeros(n, np.float32) for _ in range(tr.rw)]
    gv = g.view(np.uint16) if half else g
    kernel = floor_kernel((tr.rw, half), parallel)
    if half:
        o = np.zeros(n, np.uint16)
        args = (gv, o, *arrays)
    else:
        args = (gv, *arrays)
    if not tr.norm_pass:
        return lambda: kernel(*args)
    read = floor_kernel(("read", tr.first_reads), parallel)
    first = (arrays[0], gv) + tuple(arrays[1:tr.first_reads])

    def step():
        read(*first)
        kernel(*args)
    return step


# --------------------------------------------------------------------------------------------
# unfused numpy: each optimizer's equations with numpy operations (rescale_grad 1, wd 0, no clip)
# --------------------------------------------------------------------------------------------
def numpy_step(setting, opt):
    """``(n_state, step(w, g, states))``: the setting's equations in numpy, float32 in place,
    with the hyperparameters of ``opt`` (counts and schedules kept in the closure)."""
    lr = float(opt.lr)
    f32 = np.float32
    count = [0]

    def tick():
        count[0] += 1
        return count[0]
    mu = float(getattr(opt, "momentum", 0.0) or 0.0)

    def moments(m, v, g, b1, b2):  # Adam's two moving averages, in place
        m *= f32(b1)
        m += f32(1 - b1) * g
        v *= f32(b2)
        v += f32(1 - b2) * g * g

    if setting.name == "sgd":
        if mu:
            def step(w, g, s):
                m = s[0]
                m *= f32(mu)
                m -= f32(lr) * g
                w += m
            return 1, step
        return 0, lambda w, g, s: np.subtract(w, f32(lr) * g, out=w)
    if setting.name == "nag":
        if mu:
            def step(w, g, s):          # w = w + mu*(mu*m - lr*g) - lr*g; m = mu*m - lr*g
                m = s[0]
                m *= f32(mu)
                d = f32(lr) * g
                w += f32(mu) * (m - d) - d
                m -= d
            return 1, step
        return 0, lambda w, g, s: np.subtract(w, f32(lr) * g, out=w)
    if setting.name == "adagrad":
        eps = opt.float_stable_eps

        def step(w, g, s):
            h = s[0]
            h += g * g
            w -= f32(lr) * g / np.sqrt(h + f32(eps))
        return 1, step
    if setting.name == "rmsprop":
        g1, g2, eps = opt.gamma1, opt.gamma2, opt.epsilon
        if opt.centered:
            def step(w, g, s):
                n, gb, d = s
                n *= f32(g1)
                n += f32(1 - g1) * g * g
                gb *= f32(g1)
                gb += f32(1 - g1) * g
                d *= f32(g2)
                d -= f32(lr) * g / np.sqrt(n - gb * gb + f32(eps))
                w += d
            return 3, step

        def step(w, g, s):
            n = s[0]
            n *= f32(g1)
            n += f32(1 - g1) * g * g
            w -= f32(lr) * g / np.sqrt(n + f32(eps))
        return 1, step
    if setting.name == "adadelta":
        rho, eps = opt.rho, opt.epsilon

        def step(w, g, s):
            ag, ad = s
            ag *= f32(rho)
            ag += f32(1 - rho) * g * g
            delta = np.sqrt(ad + f32(eps)) / np.sqrt(ag + f32(eps)) * g
            ad *= f32(rho)
            ad += f32(1 - rho) * delta * delta
            w -= delta
        return 2, step
    if setting.name == "adam":
        b1, b2, eps = opt.beta1, opt.beta2, opt.epsilon

        def step(w, g, s):
            m, v = s
            t = tick()
            moments(m, v, g, b1, b2)
            lr_t = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
            w -= f32(lr_t) * m / (np.sqrt(v) + f32(eps))
        return 2, step
    if setting.name == "adamax":
        b1, b2 = opt.beta1, opt.beta2

        def step(w, g, s):
            m, u = s
            t = tick()
            m *= f32(b1)
            m += f32(1 - b1) * g
            np.maximum(f32(b2) * u, np.abs(g), out=u)
            w -= f32(lr / (1 - b1 ** t)) * m / u
        return 2, step
    if setting.name == "nadam":
        b1, b2, eps, sd = opt.beta1, opt.beta2, opt.epsilon, opt.schedule_decay
        sched = [1.0]

        def step(w, g, s):
            m, v = s
            t = tick()
            mu_t = b1 * (1 - 0.5 * 0.96 ** (t * sd))
            mu_t1 = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * sd))
            sched[0] *= mu_t
            ms_next = sched[0] * mu_t1
            moments(m, v, g, b1, b2)
            m_bar = f32((1 - mu_t) / (1 - sched[0])) * g + f32(mu_t1 / (1 - ms_next)) * m
            w -= f32(lr) * m_bar / (np.sqrt(v / f32(1 - b2 ** t)) + f32(eps))
        return 2, step
    if setting.name == "signum":
        if mu:
            def step(w, g, s):
                m = s[0]
                m *= f32(mu)
                m -= f32(1 - mu) * g
                w += f32(lr) * np.sign(m)
            return 1, step
        return 0, lambda w, g, s: np.subtract(w, f32(lr) * np.sign(g), out=w)
    if setting.name == "lbsgd":
        bs = float(opt.batch_scale)
        lars = opt.warmup_strategy == "lars"
        accumulates = opt.batch_scale > 1  # with 1 the accumulator stays zero: gm = g

        def step(w, g, s):
            if accumulates:
                cum = s[0]
                cum += g
                gm = cum / f32(bs)
            else:
                gm = g
            scale = lr
            if lars:
                ww, gg = float(np.dot(w, w)), float(np.dot(gm, gm))
                scale = lr * min(max(math.sqrt(ww / (gg + 1e-18)), 0.01), 100.0)
            if mu:
                m = s[-1]
                m *= f32(mu)
                m -= f32(scale) * gm
                w += m
            else:
                w -= f32(scale) * gm
            if accumulates:
                cum[...] = 0
        return int(accumulates) + (1 if mu else 0), step
    if setting.name == "dcasgd":
        lam = opt.lamda

        def step(w, g, s):
            wp = s[-1]
            d = f32(-lr) * (g + f32(lam) * g * g * (w - wp))
            wp[...] = w
            if mu:
                m = s[0]
                m *= f32(mu)
                m += d
                w += m
            else:
                w += d
        return (2 if mu else 1), step
    if setting.name == "ftrl":
        l1, beta = opt.lamda1, opt.beta

        def step(w, g, s):
            z, n = s
            gg = g * g
            sigma = (np.sqrt(n + gg) - np.sqrt(n)) / f32(lr)
            z += g - sigma * w
            n += gg
            w[...] = (np.sign(z) * f32(l1) - z) / ((f32(beta) + np.sqrt(n)) / f32(lr)) * \
                (np.abs(z) > f32(l1))
        return 2, step
    if setting.name == "ftml":
        b1, b2, eps = opt.beta1, opt.beta2, opt.epsilon

        def step(w, g, s):
            d, v, z = s
            t = tick()
            v *= f32(b2)
            v += f32(1 - b2) * g * g
            d_t = f32((1 - b1 ** t) / lr) * (np.sqrt(v / f32(1 - b2 ** t)) + f32(eps))
            z *= f32(b1)
            z += f32(1 - b1) * g - (d_t - f32(b1) * d) * w
            d[...] = d_t
            np.divide(-z, d_t, out=w)
        return 3, step
    if setting.name == "sgld":
        rng = np.random.default_rng(0)

        def step(w, g, s):
            w -= f32(lr / 2) * g
            w += f32(math.sqrt(lr)) * rng.standard_normal(w.shape[0], dtype=np.float32)
        return 0, step
    if setting.name == "adamw":          # MXNet's adamw_update: no bias correction
        b1, b2, eps, eta, wd = opt.beta1, opt.beta2, opt.epsilon, opt.eta, opt.wd

        def step(w, g, s):
            m, v = s
            moments(m, v, g, b1, b2)
            w -= f32(eta) * (f32(lr) * m / (np.sqrt(v) + f32(eps)) + f32(wd) * w)
        return 2, step
    if setting.name == "lars":           # trust ratio eta*|w|/(|g| + eps), then momentum SGD
        eta, eps = opt.eta, opt.eps

        def step(w, g, s):
            wn, gn = math.sqrt(float(np.dot(w, w))), math.sqrt(float(np.dot(g, g)))
            rate = lr * (eta * wn / (gn + eps) if wn > 0 and gn > 0 else 1.0)
            if mu:
                m = s[0]
                m *= f32(mu)
                m -= f32(rate) * g
                w += m
            else:
                w -= f32(rate) * g
        return (1 if mu else 0), step
    if setting.name == "lamb":           # You et al.: Adam's direction, scaled by |w|/|u|
        b1, b2, eps = opt.beta1, opt.beta2, opt.epsilon

        def step(w, g, s):
            m, v = s
            t = tick()
            moments(m, v, g, b1, b2)
            u = (m / f32(1 - b1 ** t)) / (np.sqrt(v / f32(1 - b2 ** t)) + f32(eps))
            wn, un = math.sqrt(float(np.dot(w, w))), math.sqrt(float(np.dot(u, u)))
            ratio = wn / un if wn > 0 and un > 0 else 1.0
            w -= f32(lr * ratio) * u
        return 2, step
    if setting.name == "groupadagrad":   # one history value per row of ROW_COLS columns
        eps = opt.float_stable_eps
        hist = {}

        def step(w, g, s):
            w2, g2 = w.reshape(-1, ROW_COLS), g.reshape(-1, ROW_COLS)
            h = hist.setdefault(id(w), np.zeros((w2.shape[0], 1), np.float32))
            h += np.mean(g2 * g2, axis=1, keepdims=True)
            w2 -= f32(lr) * g2 / np.sqrt(h + f32(eps))
        return 0, step
    raise ValueError(f"no numpy form for {setting.label!r}")


# --------------------------------------------------------------------------------------------
# torch (optional)
# --------------------------------------------------------------------------------------------
def import_torch():
    """``(torch or None, why not)``."""
    if importlib.util.find_spec("torch") is None:
        return None, "torch is not installed (pip install torch, or the suggested 'bench' extra)"
    try:
        import torch
    except Exception as exc:  # pragma: no cover - a broken install
        return None, f"torch cannot be imported ({exc})"
    return torch, ""


def torch_step(torch, setting, kind, w0, g0, device="cpu"):
    """The ``torch.optim`` step of ``setting`` (``kind``: "fused" or "foreach") on its own copy
    of ``w0``/``g0``, or a string saying why not."""
    if setting.torch is None:
        return "n/a: torch has no such optimizer"
    cls_name, kw = setting.torch
    kw = dict(kw)
    kw.setdefault("lr", float(make_optimizer(setting, "cpu").lr))
    dev = "cuda" if device == "cuda" else "cpu"
    p = torch.tensor(w0, device=dev).requires_grad_()
    p.grad = torch.tensor(g0, device=dev)
    try:
        opt = getattr(torch.optim, cls_name)([p], **kw, **{kind: True})
        opt.step()
    except Exception as exc:
        return f"n/a: {type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
    return opt.step


# --------------------------------------------------------------------------------------------
# the cases: every implementation of one (setting, dtype, size), as zero-argument steps
# --------------------------------------------------------------------------------------------
def weight_shape(setting, n):
    """The weight's shape for ``n`` elements: a matrix of :data:`ROW_COLS` columns for
    GroupAdaGrad (a row rule), else flat."""
    return (n // ROW_COLS, ROW_COLS) if setting.name == "groupadagrad" else (n,)


def cpu_case(setting, half, base, torch):
    """``{impl: step or "n/a: why"}`` for one CPU case; ``base``: (w0, g0) float32 arrays and
    their float16 copies."""
    w0, g0, w16, g16 = base
    n = w0.shape[0]
    tr = traffic(setting, half)
    g = g16 if half else g0
    out = {"floor": cpu_floor(n, tr, half, g)}

    opt = make_optimizer(setting, "cpu", multi_precision=half)
    shape = weight_shape(setting, n)
    gt = g.reshape(shape)
    if half:
        w = w16.copy().reshape(shape)
        state = opt.create_state_multi_precision(0, w)
        out["toolkit"] = lambda: opt.update_multi_precision(0, w, gt, state)
    else:
        w = w0.copy().reshape(shape)
        state = opt.create_state(0, w)
        out["toolkit"] = lambda: opt.update(0, w, gt, state)

    n_state, step0 = numpy_step(setting, opt)

    def step(w_, g_, s_):           # MXNet's Adamax divides 0/0 where a gradient is exactly 0
        with np.errstate(all="ignore"):
            step0(w_, g_, s_)
    master = w0.copy()
    states = [np.zeros(n, np.float32) for _ in range(n_state)]
    if half:
        wn = w16.copy()

        def numpy_half():
            step(master, g.astype(np.float32), states)
            np.copyto(wn, master, casting="same_kind")
        out["numpy"] = numpy_half
    else:
        out["numpy"] = lambda: step(master, g, states)

    for kind in ("fused", "foreach"):
        if torch is None:
            continue
        if half:
            out[f"torch {kind}"] = "n/a: torch has no multi-precision (float16 state)"
        else:
            out[f"torch {kind}"] = torch_step(torch, setting, kind, w0, g0)
    return out


def cuda_case(setting, half, base, torch):
    """``{impl: step}`` for one CUDA case: numba device arrays, a device copy as the floor."""
    from numba import cuda
    w0, g0, w16, g16 = base
    n = w0.shape[0]
    tr = traffic(setting, half)
    nbytes = max(1, tr.bytes * n // 2)        # a copy reads and writes nbytes each
    src = cuda.device_array(nbytes, np.uint8)
    dst = cuda.device_array(nbytes, np.uint8)
    out = {"floor": lambda: dst.copy_to_device(src)}
    opt = make_optimizer(setting, "cuda", multi_precision=half)
    shape = weight_shape(setting, n)
    w = cuda.to_device((w16 if half else w0).reshape(shape))
    g = cuda.to_device((g16 if half else g0).reshape(shape))
    if half:
        state = opt.create_state_multi_precision(0, w)
        out["toolkit"] = lambda: opt.update_multi_precision(0, w, g, state)
    else:
        state = opt.create_state(0, w)
        out["toolkit"] = lambda: opt.update(0, w, g, state)
    out["numpy"] = "n/a: not on the GPU"
    for kind in ("fused", "foreach"):
        if torch is None:
            continue
        if half:
            out[f"torch {kind}"] = "n/a: torch has no multi-precision (float16 state)"
        elif not torch.cuda.is_available():
            out[f"torch {kind}"] = "n/a: torch has no CUDA here"
        else:
            out[f"torch {kind}"] = torch_step(torch, setting, kind, w0, g0, device="cuda")
    return out


def device_sync(device):
    """A function that waits for the device (every stream of the context), or nothing to do."""
    if device == "cuda":
        from numba import cuda
        return cuda.synchronize
    return lambda: None


# --------------------------------------------------------------------------------------------
# timing: interleaved repetitions, batches of calls
# --------------------------------------------------------------------------------------------
#: sub-batches per repetition: the fastest is kept
SUBBATCHES = 3
#: a repetition times fewer sub-batches of a step when 3 would take longer than this
LONG_BUDGET_S = 0.06
#: no untimed call before a step this long: a thread pool's spin (under a millisecond) is lost
#: in it
NO_PRECALL_S = 0.02


def measure(steps, repeats, batch_s, sync, seed=0, max_calls=20000,
            untimed_first_call_skip=("numpy",)):
    """Per-call seconds of every step, one list per step with one entry per repetition.

    Each step is called once (compilation, first touch), then timed to size its sub-batches:
    ``k`` calls, about ``batch_s``/3 of them (at least one call). Then ``repeats`` + 1
    repetitions (the first is a warm-up) each time every step, in a shuffled order, so that the
    machine's other work falls on all of them alike. A repetition times 3 sub-batches of a step
    (fewer where 3 would take over 60 ms: one for a call of 60 ms or more) and keeps the fastest
    sub-batch's time per call: what a busy machine adds to a call (a descheduled thread, a
    parallel region waiting for a timeslice) is only ever a delay. Before each step's
    sub-batches it is called once untimed (not the single-threaded numpy one, nor a step of
    20 ms or more): Numba's and torch's OpenMP thread pools spin for a while after a parallel region,
    and on a machine with few cores the pool that ran last slows the first call of the other;
    the untimed call also wakes a pool that went to sleep. Returns ``(times, calls)`` with
    ``calls[name] = (k, sub-batches)``."""
    rng = np.random.default_rng(seed)
    calls = {}
    skip = set(untimed_first_call_skip)
    for name, step in steps.items():
        step()
        sync()
        best = math.inf
        for _ in range(3):
            t0 = time.perf_counter()
            step()
            sync()
            best = min(best, time.perf_counter() - t0)
            if best > batch_s:
                break
        k = int(max(1, min(max_calls, (batch_s / SUBBATCHES) // max(best, 1e-7))))
        m = int(max(1, min(SUBBATCHES, LONG_BUDGET_S // (k * best))))
        calls[name] = (k, m)
        if best >= NO_PRECALL_S:
            skip.add(name)
    names = list(steps)
    times = {name: [] for name in names}
    for rep in range(repeats + 1):
        for j in rng.permutation(len(names)):
            name = names[j]
            step, (k, m) = steps[name], calls[name]
            if name not in skip:
                step()   # untimed: wakes this runtime's threads, lets the last one's spin out
            dt = math.inf
            for _ in range(m):
                sync()
                t0 = time.perf_counter()
                for _ in range(k):
                    step()
                sync()
                dt = min(dt, (time.perf_counter() - t0) / k)
            if rep:
                times[name].append(dt)
    return times, calls


def paired(num, den):
    """Median over repetitions of ``num[r]/den[r]``."""
    return statistics.median(a / b for a, b in zip(num, den))


# --------------------------------------------------------------------------------------------
# the many-tensor case: ResNet-50's 161 parameter shapes, one Trainer step against torch
# --------------------------------------------------------------------------------------------
def resnet50_shapes():
    """The 161 parameter shapes of ResNet-50, in torchvision's order."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            shapes += [(width, inplanes, 1, 1), (width,), (width,),
                       (width, width, 3, 3), (width,), (width,),
                       (width * 4, width, 1, 1), (width * 4,), (width * 4,)]
            if b == 0:
                shapes += [(width * 4, inplanes, 1, 1), (width * 4,), (width * 4,)]
            inplanes = width * 4
    shapes += [(1000, 2048), (1000,)]
    return shapes


def _sync(device):
    if device == "cuda":
        from numba import cuda
        cuda.synchronize()


def make_trainer(device, shapes, rng):
    """The Trainer (Adam) over ``shapes`` with gradients in place, and its step."""
    from . import Parameter, Trainer
    params = [Parameter(f"p{i:03d}", init=rng.standard_normal(s).astype(np.float32) * 0.01,
                        device=device) for i, s in enumerate(shapes)]
    trainer = Trainer(params, "adam", {"learning_rate": 1e-3})
    for p in params:
        p.set_grad(rng.standard_normal(p.shape).astype(np.float32))

    def step(skip_nonfinite=False):
        for p in params:
            p.grad()  # the gradients are written in place (marked fresh)
        trainer.step(1, skip_nonfinite=skip_nonfinite)
    return trainer, step


def make_torch(device, shapes, rng):
    """torch's Adam (fused, else foreach) over tensors of ``shapes``, and its step."""
    import torch
    dev = "cuda" if device == "cuda" else "cpu"
    ps = [torch.tensor(rng.standard_normal(s).astype(np.float32) * 0.01, device=dev,
                       requires_grad=True) for s in shapes]
    for p in ps:
        p.grad = torch.tensor(rng.standard_normal(p.shape).astype(np.float32), device=dev)
    try:
        opt = torch.optim.Adam(ps, lr=1e-3, fused=True)
        kind = "fused"
        opt.step()
    except (RuntimeError, TypeError):
        opt = torch.optim.Adam(ps, lr=1e-3, foreach=True)
        kind = "foreach"
    return opt.step, kind, torch.__version__


def timed(step, device):
    _sync(device)
    t0 = time.perf_counter()
    step()
    _sync(device)
    return time.perf_counter() - t0


def interleaved(steps, device, repeats, warmup=3):
    """Each repetition times every step once, in turn, so that what the machine does
    meanwhile falls on all of them alike; returns the list of times per step."""
    times = [[] for _ in steps]
    for k in range(repeats + warmup):
        for j, step in enumerate(steps):
            t = timed(step, device)
            if k >= warmup:
                times[j].append(t)
    return times


def trainer_case(device, shapes, repeats, torch):
    """One Trainer step (Adam) over ``shapes`` against torch's fused Adam over the same tensors
    and the floor of the same traffic (28 bytes per element), interleaved; a JSON-able dict."""
    rng = np.random.default_rng(0)
    n = int(sum(int(np.prod(s)) for s in shapes))
    trainer, tk_step = make_trainer(device, shapes, rng)
    tr = Traffic(3, False, 28)
    if device == "cuda":
        from numba import cuda
        src = cuda.device_array(14 * n, np.uint8)
        dst = cuda.device_array(14 * n, np.uint8)
        floor = lambda: dst.copy_to_device(src)  # noqa: E731
    else:
        floor = cpu_floor(n, tr, False, rng.standard_normal(n, dtype=np.float32))
    # the same step with the non-finite guard: its one pre-pass reads the gradients (4 bytes
    # per element more; on CUDA one device-to-host read of the flags)
    steps = {"toolkit": tk_step, "floor": floor,
             "guarded": lambda: tk_step(skip_nonfinite=True)}
    row = {"tensors": len(shapes), "elements": n, "bytes_per_element": 28,
           "repeats": repeats, "timing": "as the single-tensor cases (measure): interleaved, "
                                         "fastest of up to 3 steps per repetition, medians"}
    if torch is not None:
        torch_step_, kind, tv = make_torch(device, shapes, rng)
        steps["torch"] = torch_step_
        row.update(torch_kind=kind, torch_version=tv)
    times, _ = measure(steps, repeats, 0.005, device_sync(device), untimed_first_call_skip=())
    tk = times["toolkit"]
    t_tk, t_floor = statistics.median(tk), statistics.median(times["floor"])
    row.update(toolkit_ms=t_tk * 1e3, toolkit_launches_per_step=trainer.last_step_launches,
               toolkit_GBps=28 * n / t_tk / 1e9, floor_ms=t_floor * 1e3,
               floor_GBps=28 * n / t_floor / 1e9, of_floor=paired(times["floor"], tk))
    # skip_nonfinite=True: its time, its ratio to the floor of the unguarded traffic, and the
    # guarded over the unguarded time (the pre-pass's cost; 32/28 if it ran at the floor)
    row.update(guarded_ms=statistics.median(times["guarded"]) * 1e3,
               guarded_of_floor=paired(times["floor"], times["guarded"]),
               guard_cost=paired(times["guarded"], tk))
    if torch is not None:
        row.update(torch_ms=statistics.median(times["torch"]) * 1e3,
                   vs_torch=paired(times["torch"], tk))
    else:
        row["torch"] = "not installed"
    return row


# --------------------------------------------------------------------------------------------
# the machine
# --------------------------------------------------------------------------------------------
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
    from . import __version__
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


# --------------------------------------------------------------------------------------------
# targets
# --------------------------------------------------------------------------------------------
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
TORCH_TARGET = {"cpu": ("adam", "sgd", "sgd mom", "adagrad"), "cuda": ("adam",)}


def evaluate_targets(device, cases, resnet):
    out = []
    for key, what, kind, thr in TARGETS[device]:
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
        out.append(t)
    return out


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------
def base_arrays(n, seed=0):
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal(n, dtype=np.float32)
    g0 = rng.standard_normal(n, dtype=np.float32)
    return w0, g0, w0.astype(np.float16), g0.astype(np.float16)


def disable_kernel_cache():
    """Compile the toolkit's CPU kernels in this process instead of loading them from numba's
    on-disk cache (a diagnostic: it changes no kernel, only where it comes from). Returns
    whether it could."""
    from .backends import cpu
    opts = getattr(cpu, "COMPILE_OPTIONS", None)
    if not isinstance(opts, dict):
        return False
    opts["cache"] = False
    return True


def run_suite(device="cpu", settings=None, sizes=None, dtypes=DTYPES, repeats=5, batch_ms=5.0,
              resnet=True, resnet_shapes=None, resnet_repeats=20, use_torch=True,
              progress=True, console=None, kernel_cache=True):
    """Run the suite and return its results (a JSON-able dict); prints nothing but progress."""
    import warnings
    with warnings.catch_warnings():
        # float16 weights of long runs overflow to inf (the float32 master is what is stepped)
        warnings.simplefilter("ignore", RuntimeWarning)
        return _run_suite(device, settings, sizes, dtypes, repeats, batch_ms, resnet,
                          resnet_shapes, resnet_repeats, use_torch, progress, console,
                          kernel_cache)


def _run_suite(device, settings, sizes, dtypes, repeats, batch_ms, resnet, resnet_shapes,
               resnet_repeats, use_torch, progress, console, kernel_cache):
    t_start = time.perf_counter()
    if not kernel_cache and not disable_kernel_cache():
        raise RuntimeError("toolkit.backends.cpu.COMPILE_OPTIONS not found: cannot turn the "
                           "kernel cache off")
    settings = list(SETTINGS if settings is None else settings)
    sizes = list(DEFAULT_SIZES[device] if sizes is None else sizes)
    torch, why_no_torch = import_torch() if use_torch else (None, "not used (--no-torch)")
    load_before = loadavg()
    sync = device_sync(device)
    build = cuda_case if device == "cuda" else cpu_case
    cases = []
    jobs = [(n, d, s) for n in sizes for d in dtypes for s in settings]

    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)
    columns = (TextColumn("{task.description:36s}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, disable=not progress, transient=False) as bar:
        task = bar.add_task("bench", total=len(jobs) + (1 if resnet else 0))
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
            tr = traffic(setting, half)
            impls = build(setting, half, base, torch)
            steps = {k: v for k, v in impls.items() if callable(v)}
            times, calls = measure(steps, repeats, batch_ms / 1e3, sync)
            row = {"setting": setting.label, "optimizer": setting.name,
                   "kwargs": setting.kwargs, "dtype": label, "log2n": log2n, "n": n,
                   "bytes_per_element": tr.bytes, "impls": {}, "ratios": {}}
            for name, v in impls.items():
                if not callable(v):
                    row["impls"][name] = {"status": v}
                    continue
                med = statistics.median(times[name])
                row["impls"][name] = {"median_s": med, "GBps": tr.bytes * n / med / 1e9,
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
            "GBps": "bytes_per_element * n / time (the bytes the step really moves)",
            "floor": ("CPU: a parallel Numba kernel reading and writing the same arrays "
                      "(serial below the toolkit's PARALLEL_THRESHOLD, as the toolkit)"
                      if device == "cpu" else "CUDA: a device-to-device copy of the same bytes")},
        "torch": None if torch is None else torch.__version__,
        "torch_missing": why_no_torch or None,
        "cases": cases,
        "cheap_call_us": {c["setting"]: {k: v["median_s"] * 1e6 for k, v in c["impls"].items()
                                         if "median_s" in v}
                          for c in cases if c["log2n"] == CHEAP and c["dtype"] == "float32"},
        "resnet50": resnet_row,
    }
    result["targets"] = evaluate_targets(device, cases, resnet_row)
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


# --------------------------------------------------------------------------------------------
# report: tables and plots
# --------------------------------------------------------------------------------------------
def _fmt(x, spec=".2f", suffix=""):
    return "-" if x is None else f"{x:{spec}}{suffix}"


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
    for col in ("setting", "B/el f32", "floor GB/s", "of the floor f32", "of the floor f16-mp",
                "vs numpy", "vs torch fused", "vs torch foreach", f"us/call 2^{CHEAP}"):
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


def markdown_summary(result):
    """The headline of a run as Markdown: the machine, the ratio table at 2^24 (or the largest
    size run), the ResNet-50 case and the targets."""
    m = result["machine"]
    size = headline_size(result)
    by = {(c["setting"], c["dtype"], c["log2n"]): c for c in result["cases"]}

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
             f"vs numpy | vs torch fused | vs torch foreach | us/call 2^{CHEAP} |",
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
                 "'vs X' = X time / toolkit time (above 1: the toolkit is faster).")
    r = result.get("resnet50")
    if r:
        lines += ["", f"ResNet-50, {r['tensors']} tensors, {r['elements']:,} float32 values, "
                      f"one Trainer step (Adam): {r['toolkit_ms']:.2f} ms "
                      f"({r['toolkit_launches_per_step']} kernel call), {r['toolkit_GBps']:.1f} "
                      f"GB/s, {r['of_floor']:.2f} of the floor" + (
                          f"; torch {r['torch_kind']} Adam {r['torch_ms']:.2f} ms: "
                          f"{r['vs_torch']:.2f}x." if r.get("vs_torch") is not None else ".")]
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
        a2.bar(x + off, v, 0.27, label=key.replace("_", " "), color=color)
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


# --------------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------------
def _log2_list(text):
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated log2 sizes, got {text!r}")
    if not out or any(not 1 <= x <= 30 for x in out):
        raise argparse.ArgumentTypeError(f"log2 sizes must be in 1..30, got {text!r}")
    return out


def build_parser():
    ap = argparse.ArgumentParser(
        prog="mxopt bench",
        description="every optimizer against its memory-traffic floor, numpy and torch "
                    "(ratios measured interleaved in one run; table, JSON and plots)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true",
                      help=f"sizes 2^{QUICK_SIZES[0]} and 2^{QUICK_SIZES[1]}, one setting per "
                           "optimizer, 3 repeats")
    mode.add_argument("--full", action="store_true",
                      help="every even power of two from 2^12 to 2^26 (CUDA: 2^28)")
    ap.add_argument("--sizes", type=_log2_list, default=None,
                    help="comma-separated log2 sizes (overrides --quick/--full)")
    ap.add_argument("--optimizers", default=None,
                    help="comma-separated optimizer names or setting labels (default: all)")
    ap.add_argument("--dtypes", default="float32,float16",
                    help="float32 and/or float16 (float16 runs with multi_precision)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repetitions (default 5)")
    ap.add_argument("--batch-ms", type=float, default=5.0,
                    help="calls per timed batch: enough for about this many ms")
    ap.add_argument("--resnet-repeats", type=int, default=20)
    ap.add_argument("--no-resnet", action="store_true", help="skip the ResNet-50 Trainer case")
    ap.add_argument("--no-torch", action="store_true", help="do not compare against torch")
    ap.add_argument("--no-kernel-cache", action="store_true",
                    help="compile the toolkit's CPU kernels in this process instead of loading "
                         "numba's on-disk cache (a diagnostic; compiling adds a minute or two)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--markdown", default=None, metavar="PATH",
                    help="also write the headline (machine, ratio table, targets) as Markdown")
    ap.add_argument("--out", default=None, metavar="DIR",
                    help="directory for suite_<device>.json and its PNGs (default: the working "
                         "directory; the repository's recorded results only when asked: --out "
                         "benchmarks/results); a path ending in .json names the JSON itself")
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    from rich.console import Console
    console = Console()
    if not console.is_terminal:
        console = Console(width=150)
    if args.device == "cuda":
        from .backends import cuda_available
        ok, why = cuda_available()
        if ok and os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
            ok, why = False, "NUMBA_ENABLE_CUDASIM is set: the simulator cannot be benchmarked"
        if not ok:
            print(f"mxopt bench: --device cuda cannot run: {why}", file=sys.stderr)
            return 2
    try:
        settings = select_settings(args.optimizers.split(",") if args.optimizers else None,
                                   quick=args.quick and not args.optimizers)
    except ValueError as exc:
        print(f"mxopt bench: {exc}", file=sys.stderr)
        return 2
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if not dtypes or any(d not in DTYPES for d in dtypes):
        print(f"mxopt bench: --dtypes must be among {DTYPES}, got {args.dtypes!r}",
              file=sys.stderr)
        return 2
    if args.sizes:
        sizes = args.sizes
    elif args.quick:
        sizes = list(QUICK_SIZES)
    elif args.full:
        sizes = list(FULL_SIZES[args.device])
    else:
        sizes = list(DEFAULT_SIZES[args.device])
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 5)
    if repeats < 1:
        print("mxopt bench: --repeats must be >= 1", file=sys.stderr)
        return 2
    result = run_suite(device=args.device, settings=settings, sizes=sizes, dtypes=dtypes,
                       repeats=repeats, batch_ms=args.batch_ms, resnet=not args.no_resnet,
                       resnet_repeats=(5 if args.quick else args.resnet_repeats),
                       use_torch=not args.no_torch, progress=not args.no_progress,
                       console=Console(stderr=True), kernel_cache=not args.no_kernel_cache)
    print_report(result, console)
    out = default_out(args.device, args.out)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    console.print(f"wrote {out}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown_summary(result))
        console.print(f"wrote {args.markdown}")
    if not args.no_plot:
        paths = write_plots(result, out)
        for p in paths:
            console.print(f"wrote {p}")
        if not paths:
            console.print("matplotlib is not installed: no plots")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
