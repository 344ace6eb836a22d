"""The CUDA backend's array contract and its other promises, under the simulator or on a GPU.

Every error path of the array contract for device arrays (each leaves weight, state and counts
exactly as they were), backend selection, state of the weight's own kind, SGLD noise equal across
backends, a custom element-wise rule on CUDA, float16 with and without multi_precision, and the
stream an update is enqueued on.
"""
from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import optim_db
import toolkit.backends as backends
from conftest import SIMULATOR
from reference import noise
from toolkit import optimizer
from toolkit.backends import arrays
from toolkit.backends import cuda as cuda_backend

RNG = np.random.default_rng(0)


class Foreign:
    """A minimal foreign CUDA array: memory owned elsewhere, exported through
    ``__cuda_array_interface__`` only (as CuPy and PyTorch do), with its own read-only flag,
    strides and stream entry."""

    def __init__(self, device_array, readonly=False, strides=None, shape=None, stream=None):
        self.base = device_array
        d = arrays.describe(device_array)
        self.__cuda_array_interface__ = {
            "shape": tuple(shape or d.shape), "typestr": d.dtype.str, "data": (d.ptr, readonly),
            "strides": strides, "version": 3, "stream": stream}


def dev(a):
    return cuda.to_device(np.ascontiguousarray(a))


def host(a):
    return arrays.to_host(a)


def setup(name="adam", n=12, dtype=np.float32, **kw):
    opt = optimizer.create(name, learning_rate=0.01, **kw)
    w = dev(RNG.standard_normal(n).astype(dtype))
    g = dev(RNG.standard_normal(n).astype(dtype))
    state = opt.create_state(0, w)
    opt.update(0, w, g, state)  # counts non-zero
    return opt, w, g, state


def snapshot(opt, *arrs):
    flat = []

    def walk(a):
        if isinstance(a, tuple):
            for x in a:
                walk(x)
        elif a is not None:
            flat.append(host(a).tobytes())
    walk(arrs)
    return flat, dict(opt._index_update_count), opt.num_update


def fails_unchanged(opt, arrs, call, exc, match):
    before = snapshot(opt, *arrs)
    with pytest.raises(exc, match=match):
        call()
    assert snapshot(opt, *arrs) == before


# --------------------------------------------------------------------------------------------
# backend selection
# --------------------------------------------------------------------------------------------
def test_auto_sends_device_arrays_to_cuda_and_numpy_to_cpu(monkeypatch):
    opt = optimizer.Adam(learning_rate=0.01)
    w, g = RNG.standard_normal(8).astype(np.float32), RNG.standard_normal(8).astype(np.float32)
    wd, gd = dev(w), dev(g)
    sd = opt.create_state(0, wd)
    assert all(arrays.describe(s).kind == arrays.DEVICE for s in sd)
    launched = []
    real = cuda_backend.Launcher.run_rule
    monkeypatch.setattr(cuda_backend.Launcher, "run_rule",
                        lambda self, *a: (launched.append(1), real(self, *a)))
    opt.update(0, wd, gd, sd)
    assert launched
    s = opt.create_state(1, w)
    opt.update(1, w, g, s)
    assert len(launched) == 1  # the numpy update did not go through the CUDA launcher
    assert np.allclose(host(wd), w, rtol=1e-6, atol=1e-6)


def test_host_array_to_cuda_backend_is_refused():
    opt = optimizer.Adam(backend="cuda")
    w, g = np.ones(4, np.float32), np.ones(4, np.float32)
    s = opt.create_state(0, w)
    fails_unchanged(opt, (w, g, s), lambda: opt.update(0, w, g, s), TypeError, "numpy.ndarray")


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_device_array_to_host_backend_is_refused(backend):
    opt = optimizer.Adam(backend=backend)
    w, g = dev(np.ones(4, np.float32)), dev(np.ones(4, np.float32))
    s = opt.create_state(0, w)
    fails_unchanged(opt, (w, g, s), lambda: opt.update(0, w, g, s), TypeError,
                    f"backend='{backend}' runs on numpy arrays")


def test_missing_gpu_or_driver_is_a_clear_error(monkeypatch):
    opt, w, g, s = setup()
    monkeypatch.setattr(backends, "_cached", (False, "no CUDA GPU or driver was found (test)"))
    fails_unchanged(opt, (w, g, s), lambda: opt.update(0, w, g, s), RuntimeError,
                    "no CUDA GPU or driver was found")


def test_missing_numba_cuda_is_a_clear_error(monkeypatch):
    import importlib.util
    opt, w, g, s = setup()
    real = importlib.util.find_spec
    monkeypatch.setattr(backends, "_cached", None)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "numba_cuda" else real(name, *a))
    ok, why = backends.cuda_available()
    assert not ok and "numba-cuda" in why and '.[cuda]' in why
    fails_unchanged(opt, (w, g, s), lambda: opt.update(0, w, g, s), RuntimeError, "numba-cuda")


# --------------------------------------------------------------------------------------------
# the array contract on device arrays
# --------------------------------------------------------------------------------------------
def test_mixed_host_and_device_arrays_are_refused():
    opt, w, g, s = setup()
    fails_unchanged(opt, (w, g, s), lambda: opt.update(0, w, host(g), s), TypeError,
                    "grad is a numpy.ndarray but the weight is a CUDA array")
    bad = (host(s[0]), s[1])
    fails_unchanged(opt, (w, g, s), lambda: opt.update(0, w, g, bad), TypeError,
                    r"state\['mean'\] is a numpy.ndarray")


def test_arrays_on_two_devices_are_refused(monkeypatch):
    opt, w, g, s = setup()
    gptr = arrays.describe(g).ptr
    monkeypatch.setattr(cuda_backend, "device_of", lambda d: 1 if d.ptr == gptr else 0)
    fails_unchanged(opt, (w, g, s), lambda: opt.update(0, w, g, s), ValueError,
                    "grad is on CUDA device 1 but the weight is on device 0")


def test_device_shape_and_dtype_mismatches_are_refused():
    opt, w, g, s = setup()
    cases = [
        (dev(np.ones(11, np.float32)), s, ValueError, "grad shape"),
        (dev(np.ones(12, np.float64)), s, TypeError, "grad dtype"),
        (g, (dev(np.zeros(11, np.float32)), s[1]), ValueError, r"state\['mean'\] has shape"),
        (g, (s[0], dev(np.zeros(12, np.float64))), TypeError, r"state\['var'\] has dtype"),
        (g, s[0], TypeError, "state must be a tuple"),
        (g, None, TypeError, "state must be a tuple"),
    ]
    for grad, state, exc, match in cases:
        fails_unchanged(opt, (w, g, s), lambda: opt.update(0, w, grad, state), exc, match)


def test_read_only_device_arrays_are_refused():
    opt, w, g, s = setup()
    fails_unchanged(opt, (w, g, s), lambda: opt.update(0, Foreign(w, readonly=True), g, s),
                    ValueError, "weight is read-only")
    bad = (Foreign(s[0], readonly=True), s[1])
    fails_unchanged(opt, (w, g, s), lambda: opt.update(0, w, g, bad), ValueError,
                    r"state\['mean'\] is read-only")


def test_strided_device_arrays_are_refused():
    opt = optimizer.Adam(learning_rate=0.01)
    base = dev(RNG.standard_normal(24).astype(np.float32))
    w = Foreign(base, shape=(12,), strides=(8,))  # every other element: a strided view
    g = dev(RNG.standard_normal(12).astype(np.float32))
    s = opt.create_state(0, g)
    fails_unchanged(opt, (base, g, s), lambda: opt.update(0, w, g, s), ValueError,
                    "weight is not contiguous")
    wc = dev(np.ones(12, np.float32))
    gs = Foreign(base, shape=(12,), strides=(8,))
    fails_unchanged(opt, (wc, base, s), lambda: opt.update(0, wc, gs, s), ValueError,
                    "grad is not contiguous")
    fails_unchanged(opt, (wc, base, s), lambda: opt.create_state(0, w), ValueError,
                    "weight is not contiguous")


def test_layout_from_strides_c_and_f_orders():
    opt = optimizer.Adam(learning_rate=0.01)
    a = np.asfortranarray(RNG.standard_normal((3, 4)).astype(np.float32))
    gd = np.asfortranarray(RNG.standard_normal((3, 4)).astype(np.float32))
    w = cuda.to_device(a)
    assert arrays.describe(w).order == "F"
    s = opt.create_state(0, w)
    assert all(arrays.describe(x).order == "F" for x in s)
    wc = a.copy(order="F")
    cpu = optimizer.Adam(learning_rate=0.01)
    sc = cpu.create_state(0, wc)
    cpu.update(0, wc, gd, sc)
    opt.update(0, w, cuda.to_device(gd), s)
    out = host(w)
    assert out.flags.f_contiguous
    assert np.allclose(out, wc, rtol=1e-6, atol=1e-7)
    # state in the other memory order is refused
    bad = (dev(np.zeros((3, 4), np.float32)), s[1])
    fails_unchanged(opt, (w, s), lambda: opt.update(0, w, cuda.to_device(gd), bad), ValueError,
                    "not contiguous in the weight's memory order")


def test_aliasing_between_weight_grad_and_state_is_refused():
    opt, w, g, s = setup()
    fails_unchanged(opt, (w, g, s), lambda: opt.update(0, w, Foreign(w), s), ValueError,
                    "grad shares memory with the weight")
    fails_unchanged(opt, (w, g, s), lambda: opt.update(0, w, g, (Foreign(w), s[1])), ValueError,
                    r"state\['mean'\] shares memory with the weight")
    fails_unchanged(opt, (w, g, s), lambda: opt.update(0, w, g, (s[0], Foreign(s[0]))),
                    ValueError, "shares memory with another state array")
    fails_unchanged(opt, (w, g, s), lambda: opt.update(0, w, Foreign(s[1]), s), ValueError,
                    r"state\['var'\] shares memory with the grad")


def test_multi_precision_device_state_is_checked():
    opt = optimizer.Adam(learning_rate=0.01, multi_precision=True)
    w = dev(RNG.standard_normal(10).astype(np.float16))
    g = dev(RNG.standard_normal(10).astype(np.float16))
    s = opt.create_state_multi_precision(0, w)
    assert arrays.describe(s[0]).dtype == np.float32
    bad = (dev(np.zeros(10, np.float16)), s[1])
    fails_unchanged(opt, (w, g, s), lambda: opt.update_multi_precision(0, w, g, bad), TypeError,
                    "master copy")
    fails_unchanged(opt, (w, g, s), lambda: opt.update_multi_precision(0, w, g, (s[0], None)),
                    TypeError, "state must be a tuple")


# --------------------------------------------------------------------------------------------
# state of the weight's kind; float16; SGLD; custom rules; streams
# --------------------------------------------------------------------------------------------
#: states of one, two and three arrays (DCASGD's w_prev a copy of the weight), of MXNet's
#: kernels and Python ops
STATES = [  # checked against the registry by test_samples_cover_their_kinds_of_step
    ("sgd", {"momentum": 0.9}), ("nag", {"momentum": 0.9}), ("dcasgd", {"momentum": 0.9}),
    ("rmsprop", {}), ("adam", {}), ("ftml", {})]
#: float16 weights: states of none to two arrays, a noise rule, MXNet's kernels and Python ops
FLOAT16 = [  # checked against the registry by test_samples_cover_their_kinds_of_step
    ("sgd", {"momentum": 0.9}), ("adam", {}), ("rmsprop", {}), ("ftrl", {}),
    ("lbsgd", {"momentum": 0.9}), ("sgld", {})]


def test_samples_cover_their_kinds_of_step():
    """Each sample names built-in optimizers and covers the kinds of step it is for, as their
    specs and classes show them (tests/optim_db.py's step_kinds)."""
    for sample in (STATES, FLOAT16):
        assert all(optim_db.is_builtin(name) for name, _ in sample)
    assert optim_db.kinds_of(STATES) >= {"1 states", "2 states", "3 states", "kernel",
                                         "python op"}
    assert optim_db.kinds_of(FLOAT16) >= {"0 states", "1 states", "2 states", "noise", "kernel",
                                          "python op"}


@pytest.mark.parametrize("name,kw", STATES, ids=[name for name, _ in STATES])
def test_create_state_returns_device_arrays_of_the_weights_device(name, kw):
    opt = optimizer.create(name, **kw)
    w = dev(RNG.standard_normal(6).astype(np.float32))
    state = opt.create_state(0, w)
    flat = state if isinstance(state, tuple) else (state,)
    for a in flat:
        if a is not None:
            d = arrays.describe(a)
            assert d.kind == arrays.DEVICE and d.shape == (6,) and d.dtype == np.float32
    if name == "dcasgd":
        assert np.array_equal(host(state[1]), host(w))  # w_prev starts as a copy of the weight


@pytest.mark.parametrize("name,kw", FLOAT16, ids=[name for name, _ in FLOAT16])
@pytest.mark.parametrize("mp", [False, True])
def test_float16_on_cuda_matches_cpu(name, kw, mp):
    """float16 weights: with multi_precision through the float32 master (one kernel writes both),
    without it in float32 arithmetic rounded to float16 on store, as on the CPU."""
    w = RNG.standard_normal(20).astype(np.float16)
    grads = [RNG.standard_normal(20).astype(np.float16) for _ in range(3)]
    outs = []
    for make in (lambda a: a.copy(), dev):
        opt = optimizer.create(name, learning_rate=0.05, multi_precision=mp, **kw)
        wx = make(w)
        s = opt.create_state_multi_precision(0, wx)
        for g in grads:
            opt.update_multi_precision(0, wx, make(g), s)
        outs.append((host(wx), host(s)))
    (w_cpu, s_cpu), (w_gpu, s_gpu) = outs
    assert w_gpu.dtype == np.float16
    if mp:
        master_gpu = s_gpu[1] if name == "sgd" else s_gpu[0]
        assert master_gpu.dtype == np.float32
        assert np.array_equal(w_gpu, master_gpu.astype(np.float16))  # the weight is the master, rounded
    # the same float32 arithmetic up to FMA contraction (GPU) or Python's float64 math.sqrt
    # (simulator), then one rounding to float16: within one float16 spacing of the CPU result
    assert np.all(np.abs(w_gpu.astype(float) - w_cpu.astype(float))
                  <= np.spacing(np.abs(w_cpu)).astype(float))


def test_sgld_noise_is_the_same_on_cuda_as_on_cpu_and_in_the_specification():
    seed = 1234567
    n = 50
    z = noise.normal(seed, 3, 1, n)
    out = []
    for make in (lambda a: a.copy(), dev):
        w = make(np.zeros(n))
        optimizer.SGLD(learning_rate=1.0, seed=seed).update(3, w, make(np.zeros(n)), None)
        out.append(host(w))
    cpu, gpu = out
    # the kernels' own float64 log and cos (toolkit/backends/noise.py) are within 1 ulp of the
    # specification's math.log and math.cos (tests/test_noise_math.py); through sqrt and the
    # product that is at most 4 ulp of z, on the CPU and on a GPU (which may also contract FMAs)
    assert np.all(np.abs(cpu - z) <= 4 * np.spacing(np.abs(z)))
    assert np.all(np.abs(gpu - z) <= 4 * np.spacing(np.abs(z)))
    if SIMULATOR:
        # the same device functions, run as Python: the CPU's numbers bit for bit
        assert np.array_equal(gpu, cpu)
    w32 = dev(np.zeros(n, np.float32))
    optimizer.SGLD(learning_rate=1.0, seed=seed).update(3, w32, dev(np.zeros(n, np.float32)), None)
    assert np.array_equal(host(w32), z.astype(np.float32))


class HeavyBall(optimizer.ElementwiseOptimizer):
    """A custom rule: ``v = mu*v - lr*g; w = w + v``."""

    state_names = ("v",)

    def __init__(self, momentum=0.9, **kw):
        self.momentum = momentum
        super().__init__(**kw)

    def hyperparameters(self, index, t, lr, wd):
        return (lr, self.momentum)

    @staticmethod
    def rule(w, g, v, hp):
        lr, mu = hp
        v = mu * v - lr * g
        return w + v, v


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_custom_elementwise_rule_runs_on_cuda(dtype):
    w0 = RNG.standard_normal(30).astype(dtype)
    grads = [RNG.standard_normal(30).astype(dtype) for _ in range(3)]
    opt = HeavyBall(learning_rate=0.1)
    w = dev(w0)
    v = opt.create_state(0, w)
    assert arrays.describe(v).kind == arrays.DEVICE
    wr, vr = w0.astype(np.float64), np.zeros(30)
    u = np.finfo(dtype).eps / 2
    lr, mu = float(dtype(0.1)), float(dtype(0.9))
    for g in grads:
        wi, vi = host(w).astype(np.float64), host(v).astype(np.float64)
        opt.update(0, w, dev(g), v)
        vr = mu * vi - lr * g.astype(np.float64)
        wr = wi + vr
        # one rounding per operation (or one per FMA): |err| <= 2u*(|mu v| + |lr g|) for v,
        # plus u*(|w| + |v|) for w
        bound_v = 2 * u * (np.abs(mu * vi) + np.abs(lr * g)) * 1.01
        bound_w = bound_v + u * (np.abs(wi) + np.abs(vr)) * 1.01
        assert np.all(np.abs(host(v) - vr) <= bound_v)
        assert np.all(np.abs(host(w) - wr) <= bound_w)


def test_empty_arrays_are_a_no_op():
    opt = optimizer.Adam()
    w = dev(np.zeros(0, np.float32))
    s = opt.create_state(0, w)
    opt.update(0, w, dev(np.zeros(0, np.float32)), s)
    assert opt.num_update == 1


@pytest.mark.skipif(SIMULATOR, reason="the simulator has no streams (it runs every launch "
                                      "synchronously)")
def test_update_is_enqueued_on_the_given_or_exported_stream(monkeypatch):
    opt, w, g, s = setup()
    used = []
    real = cuda_backend.run

    def spy(*a, **kw):
        used.append(kw["stream"])
        return real(*a, **kw)
    monkeypatch.setattr(cuda_backend, "run", spy)
    def handle(s):
        h = s.handle
        return int(h.value) if hasattr(h, "value") else int(h)
    st = cuda.stream()
    opt.update(0, w, g, s, stream=st)
    assert handle(used[-1]) == handle(st)
    ext = cuda.stream()
    opt.update(0, Foreign(w, stream=handle(ext)), g, s)   # the stream the array exports
    assert handle(used[-1]) == handle(ext)
    opt.update(0, w, g, s, stream=handle(st))             # an integer handle
    assert handle(used[-1]) == handle(st)
    cuda.synchronize()
