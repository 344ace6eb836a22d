"""The CUDA kernel of held states (toolkit/backends/cuda_lowbit.py): codes, block maxima,
bfloat16 bits and weights equal the CPU's ``cpu_lowbit.run_held`` bit for bit and code for
code, and ``optimizer.update`` with ``state_dtype`` runs it on device arrays.

Each case is 600 elements (blocks of 256, 256 and a short 88; the simulator's grid of two
thread blocks makes the third a second turn of the block-stride loop), with a NaN in one
block, a block of zeros and values on the code midpoints. The rule's arithmetic is the CUDA
backend's: under the simulator it is the CPU's, so the whole step equals ``run_held``; on a
GPU numba-cuda contracts ``a*b + c`` into FMAs (``toolkit/backends/cuda.py``), so there the
step is held to the same composition made with the GPU's own float kernel (the states widened
exactly, ``cuda.run``, then rounded or quantized on the host), which is exact on both.
"""
from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from toolkit import optimizer
from toolkit.backends import arrays, cpu_lowbit, cuda_lowbit, lowbit
from toolkit.backends import cuda as cuda_backend
from toolkit.backends.cuda_device import SIMULATOR
from toolkit.optimizers import adam, rmsprop, sgd
from toolkit.optimizers.held import INT8_MIN_SIZE

N = 600
ADAM = (0.001, 0.01, 1.0, -1.0, 0.9, 0.1, 0.999, 0.001, 1e-8)          # adam.MxnetRow
SGD_MOM = tuple(sgd.MxnetMomentumRow(lr=0.1, lrwd=0.001, rescale=1.0, clip_bound=-1.0, mu=0.9,
                                     lrrs=0.1))
CENTERED = tuple(rmsprop.CenteredRow(lr=0.01, wd=0.0, rescale=1.0, clip_bound=-1.0, g1=0.95,
                                     omg1=0.05, eps=1e-8, cw=-1.0, wd_first=1.0, g2=0.9))
#: (factory, row, each slot's sign: True a first moment)
RULES = {"adam": (adam.mxnet_rule, ADAM, (True, False)),
         "sgd-momentum": (sgd.mxnet_momentum_rule, SGD_MOM, (True,)),
         "rmsprop-centered": (rmsprop.centered_rule, CENTERED, (False, True, True))}
KEY = 0x1234_5678_9ABC_DEF0


def _bits(a):
    a = np.asarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _same(a, b):
    """Bit for bit (NaNs included)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(_bits(a), _bits(b))


def _inputs(seed, dtype, kinds, signs):
    """Weight, gradient (a NaN in block 1, zeros over the short block 2) and host slots
    (moments of plausible sizes, zero over block 2, so that block's new maxima are 0)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(N) * 10.0 ** rng.uniform(-3, 3, N)).astype(dtype)
    g = (rng.standard_normal(N) * 10.0 ** rng.uniform(-6, 2, N)).astype(dtype)
    g[::11] = 0.0
    g[300] = np.nan
    w[512:] = g[512:] = 0.0      # weight decay adds nothing there either
    slots = []
    for kind, signed in zip(kinds, signs):
        x = (rng.standard_normal(N) * 10.0 ** rng.uniform(-6, 0, N)).astype(np.float32)
        x = x if signed else x * x
        x[::7] = 0.0
        x[512:] = 0.0
        if kind == "int8":
            slots.append(lowbit.quantize(x, lowbit.SIGNED if signed else lowbit.UNSIGNED))
        elif kind == "bfloat16":
            slots.append(lowbit.to_bfloat16(x))
        else:
            slots.append(x.astype(dtype if kind == "plain" else np.float32))
    return w, g, slots


def _to_device(slot):
    if isinstance(slot, lowbit.Quantized):
        return slot.replace(codes=cuda.to_device(slot.codes), absmax=cuda.to_device(slot.absmax))
    if slot.dtype == lowbit.BFLOAT16:
        return cuda.to_device(slot.view(np.uint16))
    return cuda.to_device(slot)


def _to_host(slot):
    if isinstance(slot, lowbit.Quantized):
        return slot.replace(codes=slot.codes.copy_to_host(), absmax=slot.absmax.copy_to_host())
    return slot.copy_to_host()


def _composition_on_device(factory, w, g, held, hyper, key):
    """The GPU's own float kernel between exact conversions: each slot widened to the
    weight's dtype, ``cuda.run``, each new value rounded or quantized on the host."""
    dtype = w.dtype
    values = [(lowbit.dequantize(h) if isinstance(h, lowbit.Quantized) else
               h.astype(np.float32) if h.dtype == lowbit.BFLOAT16 else h).astype(dtype)
              for h in held]
    wd, gd = cuda.to_device(w), cuda.to_device(g)
    vd = [cuda.to_device(v) for v in values]
    d = arrays.describe
    cuda_backend.run(factory, d(wd), d(gd), [d(v) for v in vd], hyper)
    new = []
    for j, (h, v) in enumerate(zip(held, vd)):
        v = v.copy_to_host()
        if isinstance(h, lowbit.Quantized):
            new.append(lowbit.quantize(v.astype(np.float32), h.qmap))
        elif h.dtype == lowbit.BFLOAT16:
            bits = lowbit.to_bfloat16(v).view(np.uint16) if key is None else \
                lowbit.bfloat16_stochastic(v, key, j)
            new.append(bits.view(lowbit.BFLOAT16))
        else:
            new.append(v.astype(h.dtype))
    return wd.copy_to_host(), new


def _check(factory, hyper, w, g, held, key=None):
    """``cuda_lowbit.run_held`` against ``cpu_lowbit.run_held`` (the simulator) or the
    composition with the GPU's float kernel (a GPU), every array bit for bit."""
    dev = [_to_device(h) for h in held]
    wd, gd = cuda.to_device(w), cuda.to_device(g)
    cuda_lowbit.run_held(factory, wd, gd, tuple(dev), hyper, key=key)
    if SIMULATOR:
        want_w = w.copy()
        want = [h.copy() if not isinstance(h, lowbit.Quantized) else
                h.replace(codes=h.codes.copy(), absmax=h.absmax.copy()) for h in held]
        cpu_lowbit.run_held(factory, want_w, g, tuple(want), hyper, key=key)
    else:
        want_w, want = _composition_on_device(factory, w, g, held, hyper, key)
    assert _same(wd.copy_to_host(), want_w)
    for j, (d, e) in enumerate(zip(dev, want)):
        if isinstance(e, lowbit.Quantized):
            got = _to_host(d)
            assert _same(got.codes, e.codes), (j, np.flatnonzero(got.codes != e.codes))
            assert _same(got.absmax, e.absmax), (j, got.absmax, e.absmax)
        else:
            assert _same(d.copy_to_host(), np.asarray(e).view(d.dtype)), j
    return dev


#: (rule, slot kinds, weight dtype, stochastic rounding)
CASES = [("adam", ("int8", "int8"), np.float32, False),
         ("adam", ("bfloat16", "bfloat16"), np.float32, False),
         ("adam", ("bfloat16", "bfloat16"), np.float32, True),
         ("sgd-momentum", ("int8",), np.float32, False),
         ("rmsprop-centered", ("int8", "int8", "int8"), np.float32, False),
         ("adam", ("int8", "int8"), np.float64, False),
         ("rmsprop-centered", ("plain", "bfloat16", "int8"), np.float64, True)]


@pytest.mark.parametrize("rule, kinds, dtype, stochastic", CASES,
                         ids=[f"{r}-{'-'.join(k)}-{np.dtype(d).name}{'-sr' * s}"
                              for r, k, d, s in CASES])
def test_held_step_equals_the_cpus(rule, kinds, dtype, stochastic):
    factory, hyper, signs = RULES[rule]
    w, g, held = _inputs(len(kinds), dtype, kinds, signs)
    dev = _check(factory, hyper, w, g, held, KEY if stochastic else None)
    for d, kind in zip(dev, kinds):
        if kind == "int8":   # the NaN's block is NaN and all 255; the zero block's maximum 0
            got = _to_host(d)
            assert np.isnan(got.absmax[1]) and np.all(got.codes[256:512] == 255)
            assert got.absmax[2] == 0


def _copy_rule(f):
    """A rule that holds the gradient in the first slot and the weight in the second, both
    unchanged: the encoder meets the values it is given."""
    def rule(w, grad, m, v, hp):
        return w, grad, w
    return rule


def test_codes_at_the_midpoints_and_their_neighbours():
    """Ties on purpose: block 0 holds every midpoint of the map with a maximum of 1 (so
    ``s`` is the midpoint itself: the lower code), block 1 their float32 neighbours scaled
    by a power of two (so ``s`` is the neighbour) and a NaN in the first slot, block 2 zeros
    and a negative zero."""
    mid_s, mid_u = lowbit.midpoints(lowbit.SIGNED), lowbit.midpoints(lowbit.UNSIGNED)
    g = np.zeros(N, np.float32)
    w = np.zeros(N, np.float32)
    g[0], g[1:256] = -1.0, mid_s
    w[0], w[1:256] = 1.0, mid_u
    scale = np.float32(0.125)
    g[256], w[256] = scale, scale
    g[257:385] = np.nextafter(mid_s[::2], np.float32(2)) * scale
    g[385:512] = np.nextafter(mid_s[1::2], np.float32(-2)) * scale
    w[257:385] = np.nextafter(mid_u[::2], np.float32(-2)) * scale
    w[385:512] = np.nextafter(mid_u[1::2], np.float32(2)) * scale
    g[400] = np.nan
    g[520], w[521] = -0.0, -0.0
    m = lowbit.quantize(np.ones(N, np.float32), lowbit.SIGNED)
    v = lowbit.quantize(np.ones(N, np.float32), lowbit.UNSIGNED)
    dev = _check(_copy_rule, (0.0,), w, g, [m, v])
    for d, x in zip(dev, (g, w)):   # and the numpy quantizer's codes (the definition)
        want = lowbit.quantize(x, d.qmap)
        got = _to_host(d)
        assert _same(got.codes, want.codes) and _same(got.absmax, want.absmax)
    codes = _to_host(dev[0]).codes
    assert np.array_equal(codes[1:256], np.arange(255))   # a tie takes the lower code


def test_refusals_write_nothing():
    factory, hyper, signs = RULES["adam"]
    w, g, held = _inputs(0, np.float32, ("int8", "int8"), signs)
    wd, gd = cuda.to_device(w), cuda.to_device(g)
    m, v = (_to_device(h) for h in held)
    bad = [((wd, gd, (m.replace(qmap=lowbit.SIGNED.copy()), v)), "SIGNED or UNSIGNED"),
           ((wd, gd, (m, cuda.to_device(np.zeros(N, np.float64)))), "state slot"),
           ((wd, gd, (m, np.zeros(N, np.float32))), "state slot"),
           ((w, gd, (m, v)), "weight must be a CUDA array"),
           ((wd, gd, (m.replace(codes=cuda.to_device(held[0].codes[:-1])), v)), "codes"),
           ((wd, gd, (m.replace(absmax=cuda.to_device(held[0].absmax[:-1])), v)), "absmax"),
           ((wd, gd, (m, m)), "share memory"),
           ((wd, gd, ()), "1 to 3")]
    for args, match in bad:
        with pytest.raises(ValueError, match=match):
            cuda_lowbit.run_held(factory, *args, hyper)
    with pytest.raises(ValueError, match="key"):
        cuda_lowbit.run_held(factory, wd, gd, (m, v), hyper, key=-1)
    assert _same(wd.copy_to_host(), w)
    for d, h in zip((m, v), held):
        got = _to_host(d)
        assert _same(got.codes, h.codes) and _same(got.absmax, h.absmax)


def _update_both(state_dtype, shape, steps, **kwargs):
    """``optimizer.update`` on numpy arrays and on numba device arrays from the same start:
    the device states as made (on the device), the host and device states after ``steps``."""
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal(shape).astype(np.float32)
    grads = [rng.standard_normal(shape).astype(np.float32) for _ in range(steps)]
    grads[-1][3, 5] = np.nan
    host, dev = (optimizer.create("adam", learning_rate=0.01, state_dtype=state_dtype,
                                  **kwargs) for _ in range(2))
    w, wd = w0.copy(), cuda.to_device(w0)
    s, sd = host.create_state(3, w), dev.create_state(3, wd)
    made = [_to_host(b) for b in sd]
    for a, b in zip(s, made):   # made on the device as on the host
        if state_dtype == "int8":
            assert b.codes.shape == shape and b.absmax.shape == (lowbit.blocks_of(w0.size),)
            assert _same(b.codes, a.codes) and _same(b.absmax, a.absmax)
        else:
            assert b.dtype == np.uint16 and _same(b, a.view(np.uint16))
    for grad in grads:
        host.update(3, w, grad, s)
        dev.update(3, wd, cuda.to_device(grad), sd)
    return (w, s), (wd.copy_to_host(), [_to_host(b) for b in sd])


def test_update_with_int8_states_on_device_arrays():
    """``optimizer.update`` with ``state_dtype="int8"`` on numba device arrays of 4096
    elements (int8's smallest, 16 blocks): states made on the device (codes and block maxima
    device arrays), and two steps (the second with a NaN) as the CPU's under the simulator."""
    (w, s), (wd, sd) = _update_both("int8", (64, INT8_MIN_SIZE // 64), 2)
    if SIMULATOR:   # on a GPU the rule's FMAs: the kernel tests above hold its step exactly
        assert _same(wd, w)
        for a, b in zip(s, sd):
            assert _same(b.codes, a.codes) and _same(b.absmax, a.absmax)


def test_update_with_stochastic_bfloat16_states_on_device_arrays():
    """bfloat16 states (any size) rounded stochastically through ``update``: the rounding
    key of ``state_seed`` and the step reaches the CUDA kernel as the CPU's."""
    (w, s), (wd, sd) = _update_both("bfloat16", (20, 30), 2, state_rounding="stochastic",
                                    state_seed=7)
    if SIMULATOR:
        assert _same(wd, w)
        for a, b in zip(s, sd):
            assert _same(b, a.view(np.uint16))


def test_small_device_weights_keep_default_states_and_float16_is_refused():
    """A weight below int8's smallest keeps its default (device) state; float16 device
    weights are refused before anything is made."""
    opt = optimizer.create("adam", state_dtype="int8")
    small = cuda.to_device(np.ones(300, np.float32))
    m, v = opt.create_state(0, small)
    assert m.dtype == np.float32 and arrays.is_device_array(m)
    with pytest.raises(TypeError, match="float32 and float64"):
        optimizer.create("adam", state_dtype="bfloat16").create_state(
            0, cuda.to_device(np.ones(300, np.float16)))


def test_float32_states_of_a_float64_device_weight():
    """``state_dtype="float32"`` on CUDA: float32 device arrays, stepped by the plain kernel
    (stored rounded to float32) as the CPU's held step."""
    w0 = np.linspace(-1, 1, 600).reshape(20, 30)
    g = np.full(w0.shape, 0.3)
    host, dev = (optimizer.create("adam", learning_rate=1e-3, state_dtype="float32")
                 for _ in range(2))
    w, wd = w0.copy(), cuda.to_device(w0)
    s, sd = host.create_state(0, w), dev.create_state(0, wd)
    assert all(arrays.is_device_array(b) and b.dtype == np.float32 for b in sd)
    host.update(0, w, g, s)
    dev.update(0, wd, cuda.to_device(g), sd)
    if SIMULATOR:
        assert _same(wd.copy_to_host(), w)
        assert all(_same(b.copy_to_host(), a) for a, b in zip(s, sd))
