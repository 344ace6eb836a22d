"""``mxopt bench``'s timing: interleaved repetitions of batches of calls, so that what else the
machine does meanwhile falls on every implementation alike (:func:`measure`), and the
ratios' medians over repetitions (:func:`paired`)."""
from __future__ import annotations

import math
import statistics
import time
from typing import Callable, NamedTuple

import numpy as np

__all__ = ["measure", "paired", "device_sync", "sync_device", "timed", "interleaved", "SUBBATCHES",
           "LONG_BUDGET_S", "NO_PRECALL_S", "Prepared"]


class Prepared(NamedTuple):
    """A step of :func:`measure` whose ``prepare()`` runs untimed before each timed ``run()``:
    what a training loop does between two optimizer steps and the step does not include (the
    Trainer case's marking of the gradients, the ``toolkit.torch`` case's fresh ``.grad``).
    Each ``run()`` is timed on its own (the device synchronised around it)."""
    prepare: Callable
    run: Callable

    def __call__(self):
        self.prepare()
        self.run()


def _elapsed(step, k, sync):
    """Seconds of ``k`` calls of ``step`` (of its timed parts: :class:`Prepared`)."""
    if isinstance(step, Prepared):
        total = 0.0
        for _ in range(k):
            step.prepare()
            sync()
            t0 = time.perf_counter()
            step.run()
            sync()
            total += time.perf_counter() - t0
        return total
    sync()
    t0 = time.perf_counter()
    for _ in range(k):
        step()
    sync()
    return time.perf_counter() - t0


def device_sync(device):
    """A function that waits for the device (every stream of the context), or nothing to do."""
    if device == "cuda":
        from numba import cuda
        return cuda.synchronize
    return lambda: None


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

    Each step is called once (compilation, first touch), then timed to size its sub-batches of
    ``k`` calls (about ``batch_s``/3, at least one call). Then ``repeats`` + 1 repetitions (the
    first a warm-up) each time every step in a shuffled order, so that the machine's other work
    falls on all alike. A repetition times up to 3 sub-batches of a step (fewer where 3 would
    take over 60 ms) and keeps the fastest per call: a busy machine only ever delays a call.
    Before its sub-batches a step is called once untimed (not the single-threaded numpy one, nor
    a step of 20 ms or more): an OpenMP pool spinning after another's parallel region slows the
    first call, and a sleeping pool needs waking. A :class:`Prepared` step is timed without its
    ``prepare()``. Returns ``(times, calls)`` with ``calls[name] = (k, sub-batches)``."""
    rng = np.random.default_rng(seed)
    calls = {}
    skip = set(untimed_first_call_skip)
    for name, step in steps.items():
        step()
        sync()
        best = math.inf
        for _ in range(3):
            best = min(best, _elapsed(step, 1, sync))
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
                dt = min(dt, _elapsed(step, k, sync) / k)
            if rep:
                times[name].append(dt)
    return times, calls


def paired(num, den):
    """Median over repetitions of ``num[r]/den[r]``."""
    return statistics.median(a / b for a, b in zip(num, den))


def sync_device(device):
    """Wait for the device (every stream of the context); nothing to do on the CPU."""
    if device == "cuda":
        from numba import cuda
        cuda.synchronize()


def timed(step, device):
    """Seconds one call of ``step`` takes, the device synchronised before and after."""
    sync_device(device)
    t0 = time.perf_counter()
    step()
    sync_device(device)
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
