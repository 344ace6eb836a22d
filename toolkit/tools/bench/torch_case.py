"""``mxopt bench``'s ``toolkit.torch`` cases: ``toolkit.torch.Adam`` against
``torch.optim.Adam(fused=True)`` (foreach where torch has no fused kernel on the device) over the
same tensors, and the floor of the same traffic (28 bytes per element), interleaved.

The lists of tensors: ResNet-50's 161 parameter shapes, 2000 tensors of 1024 values, one tensor
of 2^24 values; the digits MLP (64-32-10, 4 tensors), with ``maximize`` off and on, on one
thread (numba's floor too: the step's fixed cost is what is measured); bfloat16 parameters of
2^12, 2^16 and 2^22 values on one thread as well (on a shared 2-core machine a 2-thread parallel
region waited about 8 ms for its second thread, every step). The toolkit keeps a float32 master
and float32 states (28 bytes an element, the floor's); torch's fused bfloat16 Adam keeps bfloat16
states (``torch_bytes_per_element``).

Gradients are fresh each step in both, as under torch's ``zero_grad(set_to_none=True)``: two
sets alternate, assigned to ``.grad`` untimed (``timing.Prepared``). ``toolkit_torch_ms`` and
``torch_ms`` are the steps alone, ``vs_torch`` their ratio, ``of_floor`` the toolkit's against
the floor; ``regrad_ms`` is the assignment alone, for scale.
"""
from __future__ import annotations

import statistics

import numpy as np

from .floor import ADAM_TRAFFIC, adam_floor, cpu_floor, cuda_floor
from .resnet import many_tensor_shapes, resnet50_shapes, torch_adam, torch_leaves
from .timing import Prepared, device_sync, measure, paired

__all__ = ["TORCH_CASES", "TORCH_CASE_OPTIONS", "MLP_SHAPES", "torch_case"]

#: the digits MLP (64-32-10): its weights and biases
MLP_SHAPES = ((32, 64), (32,), (10, 32), (10,))

#: the lists of tensors the ``toolkit.torch`` cases step: (label, shapes)
TORCH_CASES = (("resnet50", resnet50_shapes), ("many_tensors", many_tensor_shapes),
               ("one_2^24", lambda: [(1 << 24,)]),
               ("mlp_64_32_10", lambda: list(MLP_SHAPES)),
               ("mlp_64_32_10_maximize", lambda: list(MLP_SHAPES)),
               ("bf16_2^12", lambda: [(1 << 12,)]), ("bf16_2^16", lambda: [(1 << 16,)]),
               ("bf16_2^22", lambda: [(1 << 22,)]))

#: the keywords of :func:`torch_case` a case takes beside its shapes: the small model's on one
#: thread, at least 200 interleaved pairs (``min_repeats``)
TORCH_CASE_OPTIONS = {
    "mlp_64_32_10": {"threads": 1, "min_repeats": 200},
    "mlp_64_32_10_maximize": {"threads": 1, "min_repeats": 200, "maximize": True},
    "bf16_2^12": {"dtype": "bfloat16", "threads": 1},
    "bf16_2^16": {"dtype": "bfloat16", "threads": 1},
    "bf16_2^22": {"dtype": "bfloat16", "threads": 1},
}

#: bytes an element of a bfloat16 Adam step moves: the toolkit's (bfloat16 grad read, float32
#: master, mean and var read and written, bfloat16 weight written) and torch's fused one
#: (bfloat16 weight, mean and var read and written, grad read)
BF16_TOOLKIT_BYTES, BF16_TORCH_BYTES = 28, 14


def _params(torch, dev, shapes, rng, dtype=None):
    """Parameters of ``shapes`` (of torch's ``dtype``, float32 if None) and two sets of
    gradients for them, and the function that assigns the next set to ``.grad`` (autograd's
    fresh gradients)."""
    ps = torch_leaves(torch, dev, shapes, rng)
    if dtype is not None:
        ps = [p.detach().to(dtype).requires_grad_() for p in ps]
    sets = [[torch.tensor(rng.standard_normal(s).astype(np.float32) * 0.01, device=dev,
                          dtype=dtype)
             for s in shapes] for _ in range(2)]
    turn = [0]

    def regrad():
        grads = sets[turn[0]]
        turn[0] = 1 - turn[0]
        for p, g in zip(ps, grads):
            p.grad = g
    regrad()
    return ps, regrad


def _floor(device, n, rng, bfloat16):
    """The floor of the case's traffic: float32 Adam's, or with a bfloat16 weight the toolkit's
    28 bytes an element (the float16 floor's kernel: a 2-byte gradient read, a 2-byte weight
    written, the float32 master and states read and written)."""
    if not bfloat16:
        return adam_floor(device, n, rng)
    if device == "cuda":
        return cuda_floor(BF16_TOOLKIT_BYTES * n)
    return cpu_floor(n, ADAM_TRAFFIC, True, rng.standard_normal(n).astype(np.float16))


class _threads:
    """torch's intra-op threads and numba's (the floor's kernel) set to ``n`` within the block
    (None: left as they are)."""

    def __init__(self, torch, n):
        self.torch, self.n, self.old = torch, n, None

    def __enter__(self):
        if self.n is not None:
            import numba
            # numba's pool first: launching it resets the OpenMP thread count
            numba_old = numba.get_num_threads()
            self.old = (self.torch.get_num_threads(), numba_old)
            self.torch.set_num_threads(self.n)
            numba.set_num_threads(min(self.n, numba.config.NUMBA_NUM_THREADS))

    def __exit__(self, *exc):
        if self.old is not None:
            import numba
            self.torch.set_num_threads(self.old[0])
            numba.set_num_threads(self.old[1])


def torch_case(device, shapes, repeats, torch, *, dtype=None, maximize=False, threads=None,
               min_repeats=None):
    """One ``toolkit.torch.Adam`` step over ``shapes`` against torch's fused Adam over tensors
    of the same shapes, both with fresh gradients, and the floor; a JSON-able dict.
    ``dtype``: "bfloat16" for bfloat16 parameters (the toolkit's with ``multi_precision``);
    ``maximize`` in both; ``threads``: torch's threads meanwhile (the toolkit's kernels follow
    them); ``min_repeats``: at least this many repetitions."""
    with _threads(torch, threads):
        return _torch_case(device, shapes, max(repeats, min_repeats or 0), torch, dtype,
                           maximize, threads)


def _torch_case(device, shapes, repeats, torch, dtype, maximize, threads):
    from ... import torch as tkt
    rng = np.random.default_rng(0)
    dev = "cuda" if device == "cuda" else "cpu"
    n = int(sum(int(np.prod(s)) for s in shapes))
    bf16 = dtype == "bfloat16"
    tdtype = torch.bfloat16 if bf16 else None
    ps, tk_regrad = _params(torch, dev, shapes, rng, tdtype)
    tk = tkt.Adam(ps, lr=1e-3, maximize=maximize, **({"multi_precision": True} if bf16 else {}))
    tk.step()
    qs, torch_regrad = _params(torch, dev, shapes, rng, tdtype)
    ref, kind = torch_adam(torch, qs, maximize=maximize)

    steps = {"toolkit.torch": Prepared(tk_regrad, tk.step),
             "torch": Prepared(torch_regrad, ref.step), "regrad": tk_regrad,
             "floor": _floor(device, n, rng, bf16)}
    times, _ = measure(steps, repeats, 0.005, device_sync(device), untimed_first_call_skip=())
    med = {k: statistics.median(v) for k, v in times.items()}
    b = BF16_TOOLKIT_BYTES if bf16 else ADAM_TRAFFIC.bytes
    return {"tensors": len(shapes), "elements": n, "bytes_per_element": b,
            "dtype": dtype or "float32", "maximize": maximize,
            "torch_threads": torch.get_num_threads(),
            **({"torch_bytes_per_element": BF16_TORCH_BYTES} if bf16 else {}),
            "repeats": repeats, "torch_kind": kind, "torch_version": torch.__version__,
            "timing": "as the single-tensor cases (measure): interleaved, fastest of up to 3 "
                      "steps per repetition, medians",
            "toolkit_torch_ms": med["toolkit.torch"] * 1e3, "torch_ms": med["torch"] * 1e3,
            "regrad_ms": med["regrad"] * 1e3, "floor_ms": med["floor"] * 1e3,
            "floor_GBps": b * n / med["floor"] / 1e9,
            "toolkit_torch_GBps": b * n / med["toolkit.torch"] / 1e9,
            "vs_torch": paired(times["torch"], times["toolkit.torch"]),
            "of_floor": paired(times["floor"], times["toolkit.torch"])}
