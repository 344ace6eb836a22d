"""The addressed CPU kernels (toolkit.backends.addressed): one call over tensors at raw addresses,
and run_segmented over a flat buffer holding the same tensors (the same loop), equal the
element-wise loop of each tensor alone, bit for bit, for every
element-wise rule the registry's optimizers launch (found as the Trainer finds them: a step
planned through a recorder), float32 and float64, sizes 0 and 1, skipped members (the serial
kernel of every rule, the parallel one of a sample: ``PARALLEL``); the
multi-precision and noise variants likewise; bad inputs refused before anything is written;
numba's on-disk cache serves a second process."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from examples_budget import scaled
from one_process import one_process_at_a_time

from toolkit import optimizer
from toolkit.backends import addressed, cpu, jit, order
from toolkit.backends.cpu_precision import to_half_into, to_single
from toolkit.optimizers.spec import CONVENTIONS
from toolkit.backends import launches

ROWS_PER_RULE = 3


def _launched(kind, dtype, multi_precision=False):
    """``{(factory, n_states, n_hyper): [hyper rows]}`` of the calls of ``kind`` that the
    registry's optimizers launch for weights of ``dtype``, over every bench setting, convention,
    and with and without weight decay and clipping (but the spec's ``fixed``): each planned for
    a few steps."""
    found = {}
    for name in sorted(optimizer.registry()):
        spec = optimizer.spec_of(name)
        for setting in spec.bench_settings():
            # a setting that names its convention (NAdamW: "pytorch") is that convention's
            for convention in [setting.kwargs.get("convention")] if \
                    "convention" in setting.kwargs else spec.conventions:
                for extra in ({}, {"wd": 0.01, "clip_gradient": 0.5}):
                    kw = dict(setting.kwargs, convention=convention, **extra)
                    kw.update(spec.fixed)  # what it does not take freely (GroupAdaGrad: wd 0)
                    if multi_precision:
                        kw["multi_precision"] = True
                    opt = optimizer.create(name, **kw)
                    w = np.full((3, 4), 0.5, dtype)
                    g = np.full((3, 4), 0.25, np.float32 if multi_precision else dtype)
                    state = opt.create_state_multi_precision(0, w)
                    if multi_precision:  # the master's step, as the Trainer's CPU path plans it
                        w, state = opt.split_master(state)
                    for _ in range(ROWS_PER_RULE):
                        # the first passes (LARS norms, LAMB's direction) run for real, so
                        # every optimizer's planning reaches its rule
                        for c in launches.collect(opt.planned_step(0, w, g, state),
                                                  cpu.LAUNCHER):
                            if c.kind == kind:
                                key = (c.factory, len(c.states), len(c.hyper))
                                found.setdefault(key, []).append(c.hyper)
    return found


# planning runs the first passes, compiling their kernels (about 9 s of CPU in a fresh clone):
# one xdist worker compiles them, the other loads them from the cache
with one_process_at_a_time(__file__):
    RULES = {dt: _launched("rule", dt) for dt in (np.float32, np.float64)}
    NOISE = {dt: _launched("noise", dt) for dt in (np.float32, np.float64)}


def _cases(found):
    return [pytest.param(dt, key, id=f"{np.dtype(dt).name}-{key[0].__module__.split('.')[-1]}."
                         f"{key[0].__qualname__}-{key[1]}s")
            for dt, rules in found.items() for key in rules]


#: The rules whose parallel kernels the default ("ci") profile checks: the first of each number
#: of states (0 to 3) in each dtype. The parallel kernel is the serial one's loop under
#: ``prange``, the same template around the same inlined rule, and every rule's serial kernel
#: is checked; compiling every rule's parallel kernels, twice (addressed and segmented), took
#: about 2 s a rule, a third of this file's time. ``TOOLKIT_HYPOTHESIS_PROFILE=thorough``
#: checks every rule's.
EVERY_PARALLEL = os.environ.get("TOOLKIT_HYPOTHESIS_PROFILE") == "thorough"


def _parallel_sample(found):
    first = {}
    for key in sorted(found, key=lambda k: (k[1], k[0].__module__, k[0].__qualname__, k[2])):
        first.setdefault(key[1], key)
    return set(first.values())


PARALLEL = {dt: _parallel_sample(RULES[dt]) for dt in RULES}


def _sizes_for(key, sample, sizes):
    """``sizes`` as drawn where ``key``'s parallel kernel is checked; else kept under
    PARALLEL_THRESHOLD (the serial kernel): the first size above 33 becomes one that crosses a
    chunk boundary (CHUNK + 5), later ones 33."""
    if EVERY_PARALLEL or key in sample:
        return sizes
    out, big = [], False
    for n in sizes:
        if n > 33:
            n = 33 if big else order.CHUNK + 5
            big = True
        out.append(n)
    return out


def test_the_parallel_sample_covers_every_state_count():
    for dt in RULES:
        assert {key[1] for key in PARALLEL[dt]} == {0, 1, 2, 3}
    assert sum(_sizes_for(None, set(), [order.CHUNK * 3] * 5)) < jit.PARALLEL_THRESHOLD


def test_the_registry_launches_rules_of_every_state_count():
    """The derived set is not empty by accident: rules with 0 to 3 states, and SGLD's noise."""
    for dt in (np.float32, np.float64):
        assert {key[1] for key in RULES[dt]} == {0, 1, 2, 3}
        assert NOISE[dt]


#: sizes that hit the edges: empty, one element, a chunk exactly, a tensor of several chunks
#: (with it a call is over PARALLEL_THRESHOLD and runs the parallel kernel)
SIZES = st.sampled_from([0, 1, 2, 7, 33, order.CHUNK, 2 * order.CHUNK + 5])


@st.composite
def _members(draw):
    n = draw(st.integers(1, 5))
    sizes = [draw(SIZES) for _ in range(n)]
    active = [draw(st.booleans()) or i == 0 for i in range(n)]
    return sizes, active, draw(st.integers(0, 2 ** 32 - 1))


#: always tried: an empty tensor, one element, a skipped member and the parallel kernel
EDGES = ([0, 1, 7, 2 * order.CHUNK + 5], [True, True, False, True], 1)


def _arrays(rng, sizes, dtype, n_state):
    """Per tensor: weight, gradient and states (states non-negative: every accumulator's
    domain), some elements exactly zero."""
    out = []
    for n in sizes:
        arrs = []
        for j in range(2 + n_state):
            x = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3, n)
            x[rng.random(n) < 0.1] = 0.0
            arrs.append(np.abs(x).astype(dtype) if j >= 2 else x.astype(dtype))
        out.append(arrs)
    return out


def _table(rows, active, dtype):
    table = np.zeros((len(active), 1 + len(rows[0])), dtype)
    for s, on in enumerate(active):
        table[s, 0] = 1 if on else 0
        table[s, 1:] = np.array(rows[s % len(rows)], np.float64)
    return table


def _flat(per_tensor, k, dtype):
    parts = [arrs[k] for arrs in per_tensor]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def _ptrs(per_tensor):
    return np.array([[a.ctypes.data for a in arrs] for arrs in per_tensor], np.int64)


def _bits(a):
    return a.view(np.uint8).tobytes()


def _elementwise(factory, per_tensor, sizes, active, table, grads=None):
    """Copies of ``per_tensor`` stepped tensor by tensor by the element-wise loop of one tensor
    (``cpu.run_elementwise``, the loop ``update`` runs; a loop of its own), the active ones
    with their rows (``grads``: the gradients to read instead, one per tensor)."""
    out = [[a.copy() for a in arrs] for arrs in per_tensor]
    for s, on in enumerate(active):
        if on and sizes[s]:
            arrs = out[s]
            g = arrs[1] if grads is None else grads[s]
            cpu.run_elementwise(factory, arrs[0], g, tuple(arrs[2:]), table[s, 1:].tolist())
    return out


@pytest.mark.parametrize("dtype, key", _cases(RULES))
@settings(max_examples=scaled(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(members=_members())
@example(members=EDGES)
def test_addressed_and_flat_buffers_equal_the_elementwise_loop_bit_for_bit(dtype, key, members):
    """The addressed loop over tensors anywhere (``run_rule_addressed``) and over flat buffers
    holding them (``cpu.run_segmented``, the Trainer's call) equal the element-wise loop of
    each tensor alone, bit for bit."""
    factory, n_state, _ = key
    sizes, active, seed = members
    sizes = _sizes_for(key, PARALLEL[dtype], sizes)
    per_tensor = _arrays(np.random.default_rng(seed), sizes, dtype, n_state)
    table = _table(RULES[dtype][key], active, dtype)
    expected = _elementwise(factory, per_tensor, sizes, active, table)
    flats = [_flat(per_tensor, k, dtype) for k in range(2 + n_state)]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    cpu.run_segmented(factory, flats[0], flats[1], tuple(flats[2:]), table,
                      order.chunk_table(offsets))
    addressed.run_rule_addressed(factory, dtype, _ptrs(per_tensor), np.array(sizes, np.int64),
                                 table)
    for k in range(2 + n_state):
        want = _bits(_flat(expected, k, dtype))
        assert _bits(_flat(per_tensor, k, dtype)) == want, (k, sizes, active)
        assert _bits(flats[k]) == want, (k, sizes, active)


MP_RULES = _launched("rule", np.float16, multi_precision=True)
MP_PARALLEL = _parallel_sample(MP_RULES)


def test_the_multi_precision_rules_are_found():
    assert {key[1] for key in MP_RULES} == {0, 1, 2, 3}


@pytest.mark.parametrize("key", [c.values[1] for c in _cases({np.float32: MP_RULES})],
                         ids=[c.id for c in _cases({np.float32: MP_RULES})])
@settings(max_examples=scaled(8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(members=_members())
@example(members=EDGES)
def test_multi_precision_equals_the_trainers_float32_step_and_rounding(key, members):
    """Float16 weight and gradient, float32 master and states: the master and states are the
    element-wise loop's over the widened gradient, the weight is the new master rounded as the
    Trainer's CPU path rounds it (to_half_into), bit for bit; the one-tensor multi-precision
    step (``cpu.MirrorLauncher``, the same loop with one row) too."""
    factory, n_state, _ = key
    sizes, active, seed = members
    sizes = _sizes_for(key, MP_PARALLEL, sizes)
    rng = np.random.default_rng(seed)
    per_tensor = _arrays(rng, sizes, np.float32, n_state)   # master, grad, states
    grads16 = [arrs[1].astype(np.float16) for arrs in per_tensor]
    weights16 = [arrs[0].astype(np.float16) for arrs in per_tensor]
    table = _table(MP_RULES[key], active, np.float32)
    expected = _elementwise(factory, per_tensor, sizes, active, table,
                            grads=[to_single(g) for g in grads16])
    expected16 = [w.copy() for w in weights16]
    for s, on in enumerate(active):
        if on:
            to_half_into(expected16[s], expected[s][0])
    one = [[a.copy() for a in arrs] for arrs in per_tensor]   # cpu.MirrorLauncher, per tensor
    one16 = [w.copy() for w in weights16]
    for s, on in enumerate(active):
        if on and sizes[s]:
            launcher = cpu.MirrorLauncher(one[s][0], one16[s])
            launcher.run_rule(factory, one[s][0], grads16[s], tuple(one[s][2:]),
                              table[s, 1:].tolist())
            assert launcher.mirrored
    ptrs = np.array([[arrs[0].ctypes.data, g.ctypes.data]
                     + [x.ctypes.data for x in arrs[2:]] + [w.ctypes.data]
                     for arrs, g, w in zip(per_tensor, grads16, weights16)], np.int64)
    addressed.run_rule_addressed_mp(factory, ptrs.reshape(len(sizes), 3 + n_state),
                                    np.array(sizes, np.int64), table)
    for k in [0] + list(range(2, 2 + n_state)):
        want = _bits(_flat(expected, k, np.float32))
        assert _bits(_flat(per_tensor, k, np.float32)) == want, (k, sizes, active)
        assert _bits(_flat(one, k, np.float32)) == want, (k, sizes, active)
    want16 = _bits(np.concatenate(expected16) if expected16 else np.zeros(0, np.float16))
    for got in (weights16, one16):
        assert _bits(np.concatenate(got) if got else np.zeros(0, np.float16)) == want16


@pytest.mark.parametrize("dtype, key", _cases(NOISE))
@settings(max_examples=scaled(8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(members=_members())
@example(members=EDGES)
def test_noise_equals_segmented_bit_for_bit(dtype, key, members):
    factory, _, _ = key
    sizes, active, seed = members
    rng = np.random.default_rng(seed)
    per_tensor = _arrays(rng, sizes, dtype, 0)
    table = _table(NOISE[dtype][key], active, dtype)
    keys = rng.integers(0, 2 ** 63, len(sizes)).astype(np.uint64)
    aux = rng.random((len(sizes), 1))
    flats = [_flat(per_tensor, k, dtype) for k in range(2)]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    cpu.run_noise_segmented(factory, flats[0], flats[1], table, keys, aux, offsets,
                            order.chunk_table(offsets))
    addressed.run_noise_addressed(factory, dtype, _ptrs(per_tensor), np.array(sizes, np.int64),
                                  table, keys, aux)
    assert _bits(_flat(per_tensor, 0, dtype)) == _bits(flats[0])


def test_one_large_tensor_is_chunked_like_run_segmented():
    """The chunks of one big tensor are the flat buffer's (so the threads share it), and many
    small tensors are one chunk each (none waits for another's thread)."""
    n = 5 * order.CHUNK + 3
    ptrs = np.array([[64, 128]], np.int64)
    total, chunks = addressed.plan_chunks(ptrs, np.array([n], np.int64),
                                          np.ones((1, 2), np.float32), np.full(2, 4, np.int64))
    assert total == n
    np.testing.assert_array_equal(chunks, order.chunk_table(np.array([0, n])))
    sizes = np.full(300, 1024, np.int64)
    _, chunks = addressed.plan_chunks(np.full((300, 2), 64, np.int64), sizes,
                                      np.ones((300, 2), np.float32), np.full(2, 4, np.int64))
    np.testing.assert_array_equal(chunks[:, 2], np.arange(300))


# --- checks before anything is written ------------------------------------------------------
def _adam():
    key = next(k for k in RULES[np.float32] if k[0].__module__ == "toolkit.optimizers.adam")
    return key[0], RULES[np.float32][key][0]


def _one_tensor(n=4):
    arrs = [np.linspace(-1, 1, n).astype(np.float32) + j for j in range(4)]
    return arrs, _ptrs([arrs]), np.array([n], np.int64)


@pytest.mark.parametrize("change, error, words", [
    (lambda p, s, t: (p.astype(np.int32), s, t), TypeError, "ptrs must be a 2-D int64"),
    (lambda p, s, t: (p, s.astype(np.float64), t), TypeError, "sizes must be a 1-D int64"),
    (lambda p, s, t: (p, s, t.astype(np.float64)), TypeError, "table must be a 2-D float32"),
    (lambda p, s, t: (p, s, list(t)), TypeError, "table must be"),
    (lambda p, s, t: (p, np.array([4, 4], np.int64), t), ValueError, "one row per tensor"),
    (lambda p, s, t: (np.hstack([p, p, p]), s, t), ValueError, "ptrs has 12 columns"),
    (lambda p, s, t: (p, np.array([-4], np.int64), t), ValueError, "sizes[0] = -4"),
    (lambda p, s, t: (np.where(np.arange(4) == 1, 0, p), s, t), ValueError,
     "ptrs[0, 1] = 0x0: a null address"),
    (lambda p, s, t: (p + np.array([0, 0, 2, 0]), s, t), ValueError,
     "not a multiple of its element size"),
    (lambda p, s, t: (p[:, :3], s, t), ValueError, "gives it 4"),
    (lambda p, s, t: (p, s, t[:, :-1]), ValueError, "with 8 hyperparameter columns"),
])
def test_bad_inputs_are_refused_before_anything_is_written(change, error, words):
    factory, row = _adam()
    arrs, ptrs, sizes = _one_tensor()
    before = [a.copy() for a in arrs]
    table = _table([row], [True], np.float32)
    p, s, t = change(ptrs, sizes, table)
    with pytest.raises(error, match=None) as info:
        addressed.run_rule_addressed(factory, np.float32, p, s, t)
    assert words in str(info.value)
    for a, b in zip(arrs, before):
        assert _bits(a) == _bits(b)


def test_a_skipped_member_may_have_null_addresses():
    factory, row = _adam()
    arrs, ptrs, sizes = _one_tensor()
    ptrs = np.vstack([ptrs, np.zeros((1, 4), np.int64)])
    before = [a.copy() for a in arrs]
    addressed.run_rule_addressed(factory, np.float32, ptrs, np.array([4, 9], np.int64),
                                 _table([row], [True, False], np.float32))
    assert _bits(arrs[0]) != _bits(before[0])


def test_no_tensors_is_nothing_to_do():
    factory, row = _adam()
    addressed.run_rule_addressed(factory, np.float32, np.zeros((0, 4), np.int64),
                                 np.zeros(0, np.int64), np.zeros((0, 1 + len(row)), np.float32))


def test_dtype_must_have_kernels():
    factory, row = _adam()
    _, ptrs, sizes = _one_tensor()
    with pytest.raises(TypeError, match="float16 weight with a float32 master"):
        addressed.run_rule_addressed(factory, np.float16, ptrs, sizes,
                                     _table([row], [True], np.float32))


# --- numba's on-disk cache ------------------------------------------------------------------
_CACHE_SCRIPT = """
import numpy as np
from toolkit import optimizer
from toolkit.backends import addressed, cpu
from toolkit.backends import launches
for name, kw in (("adam", {}), ("sgld", {}), ("adam", {"multi_precision": True})):
    opt = optimizer.create(name, **kw)
    dt = np.float16 if kw else np.float32
    w = np.ones(4, dt); st = opt.create_state_multi_precision(0, w)
    if kw:
        w, st = opt.split_master(st)
    c = launches.collect(opt.planned_step(0, w, np.ones(4, np.float32), st), cpu.LAUNCHER)[0]
    for n in (64, 1 << 16):     # the serial and the parallel kernel
        arrs = [np.ones(n, np.float32) for _ in range(2 + len(c.states))]
        table = np.array([[1.0, *c.hyper]], np.float32)
        sizes = np.array([n], np.int64)
        if c.kind == "noise":
            ptrs = np.array([[a.ctypes.data for a in arrs]], np.int64)
            addressed.run_noise_addressed(c.factory, np.float32, ptrs, sizes, table,
                                          np.array([c.key], np.uint64), np.array([c.aux]))
        elif kw:
            h = [np.ones(n, np.float16), np.ones(n, np.float16)]
            ptrs = np.array([[arrs[0].ctypes.data, h[0].ctypes.data]
                             + [a.ctypes.data for a in arrs[2:]] + [h[1].ctypes.data]], np.int64)
            addressed.run_rule_addressed_mp(c.factory, ptrs, sizes, table)
        else:
            ptrs = np.array([[a.ctypes.data for a in arrs]], np.int64)
            addressed.run_rule_addressed(c.factory, np.float32, ptrs, sizes, table)
"""


def test_a_second_process_loads_the_addressed_kernels_from_the_cache(tmp_path):
    def run():
        env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), NUMBA_DEBUG_CACHE="1")
        env.pop("NUMBA_ENABLE_CUDASIM", None)
        out = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        return out.stdout + out.stderr
    first = run()
    assert "data saved" in first
    second = run()
    assert [line for line in second.splitlines() if "data saved" in line] == []
    names = [p.name for p in tmp_path.rglob("*.nbi")]
    for part in ("addressed", "_plan_loop"):
        assert any(part in n for n in names), names
    assert any("loop.serial" in n for n in names) and any("loop.parallel" in n for n in names)


def _halve(ftype):
    def rule(w, g, hp):
        return w - hp[0] * g
    return rule


def test_flat_buffers_are_checked_as_the_compiled_signatures_and_slices_checked_them():
    """The addressed loop reads raw addresses, so run_segmented checks what the old segmented
    loop's signature and slices did: a read-only weight is refused, a chunk row beyond the
    buffers too (nothing written), a read-only gradient is only read."""
    big = np.zeros(16, np.float32)
    w, g = big[:10], np.ones(10, np.float32)
    w[:] = 1
    table = np.array([[1, 0.5]], np.float32)
    with pytest.raises(ValueError, match="outside the buffers of 10"):
        cpu.run_segmented(_halve, w, g, (), table, np.array([[0, 12, 0]], np.int64))
    assert not big[10:].any() and (w == 1).all()
    w.flags.writeable = False
    with pytest.raises(TypeError, match="array 0 is read-only"):
        cpu.run_segmented(_halve, w, g, (), table, np.array([[0, 10, 0]], np.int64))
    w.flags.writeable = True
    g.flags.writeable = False
    cpu.run_segmented(_halve, w, g, (), table, np.array([[0, 10, 0]], np.int64))
    assert (w == 0.5).all() and not big[10:].any()


def test_a_multi_precision_step_takes_numpy_subclasses(tmp_path):
    """A float16 weight or gradient that is a numpy subclass (a memmap) steps as a plain array
    does (the one-tensor multi-precision step runs the addressed loop, which takes addresses)."""
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal(100).astype(np.float16)
    g0 = rng.standard_normal(100).astype(np.float16)
    out = []
    for sub in (False, True):
        w, g = w0.copy(), g0.copy()
        if sub:
            w = np.memmap(tmp_path / "w.bin", np.float16, "w+", shape=(100,))
            w[:] = w0
            g = np.memmap(tmp_path / "g.bin", np.float16, "w+", shape=(100,))
            g[:] = g0
        opt = optimizer.create("adam", multi_precision=True, learning_rate=0.1)
        state = opt.create_state_multi_precision(0, w)
        opt.update_multi_precision(0, w, g, state)
        out.append(np.array(w))
    assert _bits(out[1]) == _bits(out[0])
