"""``mxopt bench``'s many-tensor case: ResNet-50's 161 parameter shapes (25.6 M float32 values),
one Trainer step (Adam) against torch's fused Adam over the same list of tensors and the floor of
the same traffic, interleaved."""
from __future__ import annotations

import statistics

import numpy as np

from .floor import cpu_floor
from .settings import Traffic
from .timing import device_sync, measure, paired

__all__ = ["resnet50_shapes", "make_trainer", "make_torch", "trainer_case"]


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


def make_trainer(device, shapes, rng):
    """The Trainer (Adam) over ``shapes`` with gradients in place, and its step."""
    from .. import Parameter, Trainer
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
