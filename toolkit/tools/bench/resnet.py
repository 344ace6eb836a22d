"""``mxopt bench``'s Trainer cases: one Trainer step (Adam) over many tensors against torch's
fused Adam over the same tensors, DeepSpeed's CPU Adam where installed, and the floor of the same
traffic, interleaved; over ResNet-50's 161 parameter shapes and over 2000 tensors of 1024 values
(:func:`many_tensor_shapes`), where the host work per tensor shows.

``host_us``: the same step over as many one-value tensors (an upper bound of the host's work),
against a budget of 50 us + 0.2 us per parameter. ``toolkit_ms`` includes marking the gradients
with ``param.grad()``, as a training loop does; ``step_ms`` is the step alone after an untimed
marking (``timing.Prepared``: subtracting a marking timed apart would miss the step's effect on
the caches it reads), and ``step_of_floor`` and ``step_vs_torch`` use it, as torch's step does
not include writing ``.grad`` either."""
from __future__ import annotations

import statistics

import numpy as np

from .floor import ADAM_TRAFFIC, adam_floor
from .timing import Prepared, device_sync, measure, paired

__all__ = ["resnet50_shapes", "many_tensor_shapes", "make_trainer", "make_torch", "torch_leaves",
           "torch_adam",
           "make_deepspeed", "trainer_case", "host_time_us", "HOST_BUDGET_US"]

#: the host budget of one Trainer step: (fixed us, us per parameter)
HOST_BUDGET_US = (50.0, 0.2)


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


def many_tensor_shapes(count=2000, size=1024):
    """``count`` tensors of ``size`` values (2000 of 1024: 2 M float32)."""
    return [(size,)] * count


def make_trainer(device, shapes, rng, **options):
    """The Trainer (Adam) over ``shapes`` with gradients in place, and its step; ``options``:
    more of Adam's keywords (``state_dtype="int8"``)."""
    from ... import Parameter, Trainer
    params = [Parameter(f"p{i:03d}", init=rng.standard_normal(s).astype(np.float32) * 0.01,
                        device=device) for i, s in enumerate(shapes)]
    trainer = Trainer(params, "adam", {"learning_rate": 1e-3, **options})
    for p in params:
        p.set_grad(rng.standard_normal(p.shape).astype(np.float32))

    def step(skip_nonfinite=False):
        for p in params:
            p.grad()  # the gradients are written in place (marked fresh)
        trainer.step(1, skip_nonfinite=skip_nonfinite)
    return trainer, step


def _marking(trainer):
    """The marking half of a benchmark step: every gradient handed out (marked written)."""
    params = trainer.parameters

    def mark():
        for p in params:
            p.grad()
    return mark


def torch_leaves(torch, device, shapes, rng):
    """torch tensors of ``shapes`` on ``device`` that require a gradient (small values)."""
    dev = "cuda" if device == "cuda" else "cpu"
    return [torch.tensor(rng.standard_normal(s).astype(np.float32) * 0.01, device=dev,
                         requires_grad=True) for s in shapes]


def torch_adam(torch, params, maximize=False):
    """torch's Adam over ``params`` (their gradients set), fused where torch has the kernel on
    their device, else foreach, stepped once (a missing fused kernel shows on the first step):
    ``(optimizer, kind)``."""
    try:
        opt = torch.optim.Adam(params, lr=1e-3, fused=True, maximize=maximize)
        opt.step()
        return opt, "fused"
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=1e-3, foreach=True, maximize=maximize), "foreach"


def make_torch(device, shapes, rng):
    """torch's Adam (fused, else foreach) over tensors of ``shapes``, and its step."""
    import torch
    ps = torch_leaves(torch, device, shapes, rng)
    for p in ps:
        p.grad = torch.tensor(rng.standard_normal(p.shape).astype(np.float32), device=p.device)
    opt, kind = torch_adam(torch, ps)
    return opt.step, kind, torch.__version__


def make_deepspeed(shapes, rng):
    """DeepSpeed's ``DeepSpeedCPUAdam`` over tensors of ``shapes`` and its step, or a string
    saying why there is none (not installed, or its C++ op did not build: it builds on first use
    with ninja and a compiler)."""
    import importlib.util
    if importlib.util.find_spec("deepspeed") is None:
        return "deepspeed is not installed"
    try:
        import torch
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        ps = [torch.tensor(rng.standard_normal(s).astype(np.float32) * 0.01,
                           requires_grad=True) for s in shapes]
        for p in ps:
            p.grad = torch.tensor(rng.standard_normal(p.shape).astype(np.float32))
        opt = DeepSpeedCPUAdam(ps, lr=1e-3)
        opt.step()
    except Exception as e:  # noqa: BLE001 - a peer that does not build is reported, not fatal
        return f"DeepSpeedCPUAdam unavailable: {type(e).__name__}: {e}"[:300]
    import deepspeed
    return opt.step, deepspeed.__version__


def host_time_us(device, count, steps=200):
    """Median microseconds of one Trainer step (Adam) over ``count`` tensors of one value each,
    the marking done before each step and not timed: the host's work of a step over ``count``
    parameters, with a kernel of a few microseconds (an upper bound)."""
    import time
    rng = np.random.default_rng(0)
    trainer, _ = make_trainer(device, [(1,)] * count, rng)
    mark = _marking(trainer)
    sync = device_sync(device)
    times = []
    for k in range(steps + 5):
        mark()
        sync()
        t0 = time.perf_counter()
        trainer.step(1)
        sync()
        if k >= 5:  # the first steps lay out caches
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def trainer_case(device, shapes, repeats, torch):
    """One Trainer step (Adam) over ``shapes`` against torch's fused Adam over the same tensors
    and the floor of the same traffic (28 bytes per element), interleaved; a JSON-able dict."""
    rng = np.random.default_rng(0)
    n = int(sum(int(np.prod(s)) for s in shapes))
    trainer, tk_step = make_trainer(device, shapes, rng)
    floor = adam_floor(device, n, rng)
    # the same step with the non-finite guard: its one pre-pass reads the gradients (4 bytes
    # per element more; on CUDA one device-to-host read of the flags)
    mark = _marking(trainer)
    steps = {"toolkit": tk_step, "floor": floor, "marking": mark,
             "step": Prepared(mark, lambda: trainer.step(1)),
             "guarded": lambda: tk_step(skip_nonfinite=True)}
    b = ADAM_TRAFFIC.bytes
    row = {"tensors": len(shapes), "elements": n, "bytes_per_element": b,
           "repeats": repeats, "timing": "as the single-tensor cases (measure): interleaved, "
                                         "fastest of up to 3 steps per repetition, medians"}
    if torch is not None:
        torch_step_, kind, tv = make_torch(device, shapes, rng)
        steps["torch"] = torch_step_
        row.update(torch_kind=kind, torch_version=tv)
    if device == "cpu" and torch is not None:
        ds = make_deepspeed(shapes, rng)
        if isinstance(ds, str):
            row["deepspeed"] = ds
        else:
            steps["deepspeed"] = ds[0]
            row["deepspeed_version"] = ds[1]
    times, _ = measure(steps, repeats, 0.005, device_sync(device), untimed_first_call_skip=())
    tk = times["toolkit"]
    t_tk, t_floor = statistics.median(tk), statistics.median(times["floor"])
    row.update(toolkit_ms=t_tk * 1e3, toolkit_launches_per_step=trainer.last_step_launches,
               toolkit_GBps=b * n / t_tk / 1e9, floor_ms=t_floor * 1e3,
               floor_GBps=b * n / t_floor / 1e9, of_floor=paired(times["floor"], tk))
    step_times = times["step"]
    row.update(marking_ms=statistics.median(times["marking"]) * 1e3,
               step_ms=statistics.median(step_times) * 1e3,
               step_of_floor=paired(times["floor"], step_times),
               host_us=host_time_us(device, len(shapes)),
               host_budget_us=HOST_BUDGET_US[0] + HOST_BUDGET_US[1] * len(shapes))
    # skip_nonfinite=True: its time, its ratio to the floor of the unguarded traffic, and the
    # guarded over the unguarded time (the pre-pass's cost; 32/28 if it ran at the floor)
    row.update(guarded_ms=statistics.median(times["guarded"]) * 1e3,
               guarded_of_floor=paired(times["floor"], times["guarded"]),
               guard_cost=paired(times["guarded"], tk))
    if torch is not None:
        row.update(torch_ms=statistics.median(times["torch"]) * 1e3,
                   vs_torch=paired(times["torch"], tk),
                   step_vs_torch=paired(times["torch"], step_times))
        if "deepspeed" in times:
            row.update(deepspeed_ms=statistics.median(times["deepspeed"]) * 1e3,
                       step_vs_deepspeed=paired(times["deepspeed"], step_times))
    else:
        row["torch"] = "not installed"
    return row
