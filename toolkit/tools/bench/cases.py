"""``mxopt bench``'s cases: every implementation of one (setting, dtype, size) as a
zero-argument step (or a string saying why it cannot run), on the CPU or on CUDA."""
from __future__ import annotations

import numpy as np

from .floor import cpu_floor, cuda_floor
from .peers import numpy_baseline, torch_step
from .settings import make_optimizer, traffic, weight_shape

__all__ = ["base_arrays", "cpu_case", "cuda_case"]


def base_arrays(n, seed=0):
    """``(w0, g0, w16, g16)``: a float32 weight and gradient of ``n`` elements and their float16
    copies, shared by every setting of one size."""
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal(n, dtype=np.float32)
    g0 = rng.standard_normal(n, dtype=np.float32)
    return w0, g0, w0.astype(np.float16), g0.astype(np.float16)


def cpu_case(setting, half, base, torch):
    """``{impl: step or "n/a: why"}`` for one CPU case; ``base``: (w0, g0) float32 arrays and
    their float16 copies."""
    w0, g0, w16, g16 = base
    n = w0.shape[0]
    tr = traffic(setting, half, [weight_shape(setting, n)])
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

    w_np = (w16 if half else w0).copy().reshape(shape)
    out["numpy"] = numpy_baseline(setting, half, w_np, gt)

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
    tr = traffic(setting, half, [weight_shape(setting, n)])
    out = {"floor": cuda_floor(tr.total(n))}
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
