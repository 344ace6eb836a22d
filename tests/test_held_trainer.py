"""``state_dtype`` in the Trainer (issue 37, parts 1 and 5): a step equals per-parameter
``optimizer.update`` calls bit for bit and code for code (no int8 block straddles two
parameters, small parameters keep their default state), and the states file carries held
states (version 3), validated field by field, fuzzed, and converted on request
(``convert_states=True``); a trainer without ``state_dtype`` writes exactly the file it wrote
before (version 2)."""
from __future__ import annotations

import hashlib
import io
import json
import os
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, strategies as st

from toolkit import Parameter, Trainer, lr_scheduler, optimizer
from toolkit.backends import cpu, lowbit
from toolkit.optimizers.held import INT8_MIN_SIZE
from toolkit.trainer import states
from toolkit.trainer.held import state_arrays
from test_states_file import _bounded, _content, _npy, _pack, _seal, _zip

#: above and below INT8_MIN_SIZE: 5200 elements (21 blocks, the last one short), 4160 (17),
#: and three small ones (their default state, even with int8)
SHAPES = [(40, 130), (7,), (64, 65), (3, 4), (33,)]
LR_MULT = (1.0, 1.25, 1.0, 1.5, 1.25)
WD_MULT = (0.0, 0.5, 1.0, 0.5, 0.0)
#: optimizer x settings: the vectorised plan (Adam, AdamW, SGD, RMSProp) and the per-member
#: kernel plan (Nadam, whose step reads its schedule)
OPTIMIZERS = [  # checked against the registry by test_the_sample_takes_both_plans
    ("adam", {}), ("adamw", {}), ("sgd", {"momentum": 0.9}),
              ("rmsprop", {"centered": True, "momentum": 0.9}), ("nadam", {})]
#: (float64 weights take the same path; tests/test_held_states.py steps them against the oracle)
CASES = [(name, kw, sd, "float32") for name, kw in OPTIMIZERS[:4]
         for sd in ("int8", "bfloat16")] + [("nadam", {}, "int8", "float32")] + [
    # stochastic rounding: the key of each member's index and step, as its own update's
    ("adam", {"state_rounding": "stochastic", "state_seed": 7}, "bfloat16", "float32"),
    ("nadam", {"state_rounding": "stochastic"}, "bfloat16", "float32")]


def _leaves_equal(a, b):
    xs, ys = state_arrays(a), state_arrays(b)
    return len(xs) == len(ys) and all(
        x.dtype == y.dtype and np.array_equal(np.asarray(x).view(np.uint8),
                                              np.asarray(y).view(np.uint8))
        for x, y in zip(xs, ys))


@pytest.mark.parametrize("name,kw,state_dtype,dtype", CASES,
                         ids=[f"{c[0]}-{c[2]}-{c[3]}-{len(c[1])}" for c in CASES])
def test_a_step_equals_per_parameter_updates_bit_for_bit_and_code_for_code(name, kw,
                                                                           state_dtype, dtype):
    """Four steps: all fresh; p2 stale (ignore_stale_grad); p1's gradient NaN
    (skip_nonfinite); allreduce_grads then update. The twin steps each parameter with
    ``update_multi_precision`` on its own arrays; weights and states equal bit for bit (codes,
    block maxima, bfloat16 bits)."""
    rng = np.random.default_rng(0)
    init = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    common = dict(learning_rate=0.01, wd=0.01, rescale_grad=2.0, clip_gradient=3.0,
                  state_dtype=state_dtype, **kw)
    params = [Parameter(f"p{i}", init=a, dtype=dtype, lr_mult=LR_MULT[i], wd_mult=WD_MULT[i])
              for i, a in enumerate(init)]
    trainer = Trainer(params, name, dict(common))
    twin = optimizer.create(name, **common)
    twin.param_dict = dict(enumerate(params))
    ws = [a.copy() for a in init]
    ss = [twin.create_state_multi_precision(i, w) for i, w in enumerate(ws)]
    for step in range(4):
        grads = [(rng.standard_normal(s) * 10.0 ** rng.uniform(-4, 1, s)).astype(dtype)
                 for s in SHAPES]
        skip = (2,) if step == 1 else ()
        if step == 2:
            grads[1][3] = np.nan
            skip = (1,)
        for i, (p, g) in enumerate(zip(params, grads)):
            if step != 1 or i != 2:
                p.set_grad(g)
        if step == 3:
            trainer.allreduce_grads()
            trainer.update(4)
        else:
            out = trainer.step(4, ignore_stale_grad=step == 1, skip_nonfinite=step == 2)
            assert out == (("p1",) if step == 2 else None)
        twin.rescale_grad = 2.0 / 4
        for i, g in enumerate(grads):
            if i not in skip:
                twin.update_multi_precision(i, ws[i], g, ss[i])
        # the members together: one call over the held ones' blocks, one over the small
        # ones (their default state: int8 only)
        assert trainer.last_step_launches == (2 if state_dtype == "int8" else 1)
    g = trainer.groups[0]
    assert g.held and g.state is None
    for k, (p, w, s) in enumerate(zip(params, ws, ss)):
        assert np.array_equal(p.data(), w), p.name
        assert _leaves_equal(g.member_state(k), s), p.name
        held = g.member_state(k)
        first = held[0] if isinstance(held, tuple) else held
        small = int(np.prod(p.shape)) < INT8_MIN_SIZE and state_dtype == "int8"
        assert (type(first) is np.ndarray and first.dtype == dtype) if small else \
            (type(first) is lowbit.Quantized if state_dtype == "int8"
             else first.dtype == lowbit.BFLOAT16)
        if type(first) is lowbit.Quantized:  # the parameter's own blocks
            assert first.absmax.shape == (lowbit.blocks_of(p.data().size),)


def test_a_step_of_several_launches_keeps_their_order():
    """An optimizer whose kernel step yields two launches per parameter (its rule, then a
    stateless rule scaling the new weight): the group's launches are not run together then,
    but each parameter's in order, equal to its own update."""
    from toolkit.backends import launches
    from toolkit.optimizers.adam import Adam

    def halve(ftype):
        def rule(w, g, hp):
            return w * hp[0]
        return rule

    class HalvedAdam(Adam):
        def _kernel_step(self, index, weight, grad, state, t, lr, wd):
            yield from launches.steps_of(super()._kernel_step(index, weight, grad, state, t,
                                                              lr, wd))
            yield launches.Launch("rule", halve, weight, grad, (), (0.5,))

    rng = np.random.default_rng(5)
    init = [rng.standard_normal(s).astype(np.float32) for s in ((5000,), (6000,), (7,))]
    grads = [rng.standard_normal(a.shape).astype(np.float32) for a in init]
    params = [Parameter(f"p{i}", init=a) for i, a in enumerate(init)]
    trainer = Trainer(params, HalvedAdam(learning_rate=0.1, state_dtype="int8"))
    twin = HalvedAdam(learning_rate=0.1, state_dtype="int8")
    ws = [a.copy() for a in init]
    ss = [twin.create_state(i, w) for i, w in enumerate(ws)]
    for _ in range(2):
        for p, g in zip(params, grads):
            p.set_grad(g)
        trainer.step(1)
        for i, (w, g) in enumerate(zip(ws, grads)):
            twin.update(i, w, g, ss[i])
    for p, w in zip(params, ws):
        assert np.array_equal(p.data(), w), p.name


def test_a_group_of_small_parameters_keeps_the_flat_state_and_one_call(monkeypatch):
    """int8 holds nothing below INT8_MIN_SIZE: such a group is the usual one (flat state
    buffers, one segmented call), with the numbers of a Trainer without state_dtype."""
    calls = []
    real = cpu.run_segmented
    monkeypatch.setattr(cpu, "run_segmented", lambda *a: (calls.append(1), real(*a)))
    out = []
    for sd in ("int8", None):
        params = [Parameter(f"p{i}", shape=s, init=1.0)
                  for i, s in enumerate([(7,), (3, 4), (33,)])]
        t = Trainer(params, "adam", {"state_dtype": sd})
        for p in params:
            p.set_grad(np.full(p.shape, 0.5, np.float32))
        t.step(1)
        assert not t.groups[0].held and t.last_step_launches == 1
        out.append([p.data().copy() for p in params] + [t.groups[0].state])
    assert len(calls) == 2
    assert all(np.array_equal(a, b) for a, b in zip(out[0][:-1], out[1][:-1]))


def test_set_data_before_the_first_step_makes_held_states_again():
    p = Parameter("w", shape=(64, 64), init=1.0)
    t = Trainer([p], "adam", {"state_dtype": "int8"})
    p.set_data(np.full((64, 64), 2.0))
    p.set_grad(np.ones((64, 64), np.float32))
    t.step(1)
    assert np.all(p.data() < 2.0)


def test_gpu_parameters_are_refused_before_anything_is_made():
    from types import SimpleNamespace
    from toolkit.trainer import held
    gpu = SimpleNamespace(name="g", grad_req="write", device="cuda", dtype=np.float32,
                          grad_stype="default")
    with pytest.raises(NotImplementedError, match="parameter 'g' lives on the GPU"):
        held.refuse_unsupported(optimizer.create("adam", state_dtype="int8"), [gpu], False)


# ------------------------------------------------------------------------------------------
# the states file
# ------------------------------------------------------------------------------------------
def _build(sd, name="adam", kw=None, shapes=((40, 130), (7,), (3, 4)), seed=0):
    rng = np.random.default_rng(seed)
    params = [Parameter(f"p{i}", init=rng.standard_normal(s).astype(np.float32))
              for i, s in enumerate(shapes)]
    return Trainer(params, name, {"learning_rate": 0.01, "state_dtype": sd, **(kw or {})}), \
        params


def _steps(t, params, n, seed=1):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        for p in params:
            p.set_grad(rng.standard_normal(p.shape).astype(np.float32))
        t.step(2)


def _raw(t):
    buf = io.BytesIO()
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.states")
        t.save_states(path)
        with open(path, "rb") as f:
            buf.write(f.read())
    return buf.getvalue()


def _fingerprint(t):
    out = [p.data().tobytes() for p in t.parameters]
    for g in t.groups:
        for k in range(len(g.members)):
            out.extend(np.asarray(a).tobytes() for a in state_arrays(g.member_state(k)))
    opt = t.optimizer
    out.append(repr((sorted(opt.update_counts.items()), opt.num_update, opt.lr)))
    return out


def _outcome(t, raw, memory_limit=None, convert=False):
    before = _fingerprint(t)
    tracemalloc.start()
    try:
        with _bounded(20):
            t.load_states(io.BytesIO(raw), convert_states=convert)
        outcome = "loaded"
    except ValueError as exc:
        assert "cannot load trainer states" in str(exc), exc
        outcome = "refused"
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    if memory_limit is not None:
        assert peak <= memory_limit, (peak, memory_limit)
    if outcome == "refused":
        assert _fingerprint(t) == before
    return outcome


def _golden_trainer(name, kw, dtype="float32"):
    shapes = [(3, 4), (), (5,)]
    params = [Parameter(f"p{i}", init=np.linspace(-1, 1, int(np.prod(s)), dtype=dtype)
                        .reshape(s), dtype=dtype) for i, s in enumerate(shapes)]
    t = Trainer(params, name, kw)
    rng = np.random.default_rng(0)
    for _ in range(3):
        for p in params:
            p.set_grad(rng.standard_normal(p.shape).astype(p.dtype))
        t.step(2)
    return t


#: SHA-256 of the files the writer of 2f42bdd (before held states) wrote for these trainers
GOLDEN = [  # checked against the registry by test_the_golden_trainers_write_every_member_kind
    ("adam", lambda: {"learning_rate": 0.1, "lr_scheduler": lr_scheduler.FactorScheduler(
        step=2, factor=0.5, base_lr=0.1)}, "float32",
     "a916836c1f8d37dcee08ee764341b65e12ef7e1db18045997c5cdcb5f5a70231"),
    # SGD's since its torch keywords: 2f42bdd's file with "dampening": 0.0 and "nesterov":
    # false in its hyperparameters, every array and other field the same (that file still loads:
    # a flag a file lacks is held off, Spec.flags)
    ("sgd", lambda: {"momentum": 0.9, "multi_precision": True}, "float16",
     "de50e2d689bb2600637cc42a8622d4493afd4f7222e0bf3dfc781061fabfc985"),
    ("lbsgd", lambda: {"batch_scale": 3, "momentum": 0.9}, "float32",
     "d80c85a8db3b6ab2b6fa1f1bdd554853bfafa49c71a5c204ccfeae09f84f131f"),
    ("nadam", dict, "float32",
     "bc7dea6d9bc2b6ad80f8aba5b287fbc289d19acf9ecb633f63a9025dcc42b7a0"),
]


@pytest.mark.parametrize("name,kw,dtype,digest", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_a_trainer_without_state_dtype_writes_the_same_bytes_as_before(name, kw, dtype,
                                                                      digest):
    raw = _raw(_golden_trainer(name, kw(), dtype))
    assert hashlib.sha256(raw).hexdigest() == digest
    assert _content(raw)[1]["version"] == 2


@pytest.mark.parametrize("sd", ["int8", "bfloat16"])
def test_held_states_are_written_as_held_and_training_continues_bit_identically(sd):
    ta, pa = _build(sd)
    _steps(ta, pa, 2)
    raw = _raw(ta)
    arrs, meta = _content(raw)
    assert meta["version"] == 3 and meta["state_dtype"] == sd
    if sd == "int8":
        assert meta["params"][0]["state"] == [
            {"shape": [40, 130], "dtype": "int8", "map": "signed"},
            {"shape": [40, 130], "dtype": "int8", "map": "unsigned"}]
        assert arrs["state/0/0"].dtype == np.uint8 and arrs["state/0/0/absmax"].shape == (21,)
        assert arrs["state/0/1/absmax"].dtype == np.float32
        assert meta["params"][1]["state"][0] == {"shape": [7], "dtype": "float32"}
    else:
        assert meta["params"][1]["state"][0] == {"shape": [7], "dtype": "bfloat16"}
        assert arrs["state/1/0"].dtype == np.uint16
    tb, pb = _build(sd, seed=5)
    for a, b in zip(pa, pb):
        b.set_data(a.data())
    tb.load_states(io.BytesIO(raw))
    _steps(ta, pa, 2, seed=9)
    _steps(tb, pb, 2, seed=9)
    assert _fingerprint(ta) == _fingerprint(tb)


_HELD = {}


def _held_good():
    """``(raw, trainer, own bytes)``: the int8 file of the fuzz and the trainer that loads it."""
    if not _HELD:
        t, params = _build("int8")
        _steps(t, params, 2)
        _HELD["raw"] = _raw(t)
        _HELD["t"] = t
        _HELD["own"] = sum(np.asarray(x).nbytes for x in _fingerprint(t)) * 2
    return _HELD["raw"], _HELD["t"], _HELD["own"]


def _edited(edit):
    raw, _, _ = _held_good()
    arrs, meta = _content(raw)
    edit(arrs, meta)
    return _pack(arrs, meta)


def _set(arrs, name, value):
    a = arrs[name].copy()
    a.reshape(-1)[0] = value
    arrs[name] = a


REFUSALS = [
    ("a swapped map", lambda a, m: m["params"][0]["state"][0].update(map="unsigned"),
     "does not match"),
    ("a foreign map", lambda a, m: m["params"][0]["state"][1].update(map="dynamic"),
     "does not match"),
    ("no map", lambda a, m: m["params"][0]["state"][1].pop("map"), "does not match"),
    ("a NaN scale", lambda a, m: _set(a, "state/0/0/absmax", np.nan), "block maximum 0"),
    ("an infinite scale", lambda a, m: _set(a, "state/0/1/absmax", np.inf), "block maximum 0"),
    ("a negative scale", lambda a, m: _set(a, "state/0/0/absmax", -1.0), "block maximum 0"),
    ("codes of the wrong length",
     lambda a, m: (a.update({"state/0/0": a["state/0/0"][:-1]}),
                   m["params"][0]["state"][0].update(shape=[39, 130])), "does not match"),
    ("too few block maxima",
     lambda a, m: a.update({"state/0/0/absmax": a["state/0/0/absmax"][:-1]}),
     "does not match"),
    ("no block maxima", lambda a, m: a.pop("state/0/1/absmax"), "does not match"),
    ("block maxima of a small parameter",
     lambda a, m: a.update({"state/1/0/absmax": np.zeros(1, np.float32)}), "no use for"),
    ("codes as float32",
     lambda a, m: a.update({"state/0/0": a["state/0/0"].astype(np.float32)}),
     "expects at most"),
    ("another state_dtype", lambda a, m: m.update(state_dtype="bfloat16"), "convert_states"),
    ("a float state_dtype", lambda a, m: m.update(state_dtype=None), "state_dtype is"),
    ("no state_dtype", lambda a, m: m.pop("state_dtype"), "lacks"),
    ("version 2 with held slots", lambda a, m: (m.update(version=2), m.pop("state_dtype")),
     "state_dtype=None"),
]


@pytest.mark.parametrize("edit,match", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_held_fields_are_checked_with_the_checksums_recomputed(edit, match):
    _, t, _ = _held_good()
    raw = _edited(edit)
    before = _fingerprint(t)
    with pytest.raises(ValueError, match=match):
        t.load_states(io.BytesIO(raw))
    assert _fingerprint(t) == before


def test_a_file_of_another_state_dtype_is_refused_with_the_way_to_convert_it():
    t, _ = _build(None)
    raw, _, _ = _held_good()
    before = _fingerprint(t)
    with pytest.raises(ValueError, match=r"state_dtype='int8'.*convert_states=True"):
        t.load_states(io.BytesIO(raw))
    assert _fingerprint(t) == before
    with pytest.raises(TypeError, match="convert_states must be True or False"):
        t.load_states(io.BytesIO(raw), convert_states=1)


@pytest.mark.parametrize("theirs,mine", [(None, "int8"), ("int8", None), ("int8", "bfloat16"),
                                         ("bfloat16", "float32")])
def test_convert_states_holds_the_files_moments_as_this_optimizer_holds_them(theirs, mine):
    """A moment converted is the file's values (exact: dequantized, bfloat16 widened) held
    as this optimizer holds a value it steps: ``quantize`` of the float32 values, bfloat16
    to nearest, a plain array rounded once; a small parameter's default state unchanged."""
    ta, pa = _build(theirs)
    _steps(ta, pa, 2)
    raw = _raw(ta)
    tb, pb = _build(mine, seed=5)
    tb.load_states(io.BytesIO(raw), convert_states=True)
    opt_a, opt_b = ta.optimizer, tb.optimizer
    for ga, gb in zip(ta.groups, tb.groups):
        for k in range(len(ga.members)):
            sa, sb = ga.member_state(k), gb.member_state(k)
            for a, b in zip(sa, sb):
                want = b if type(b) is np.ndarray else None
                expect = opt_a.slot_values(a)
                if type(b) is lowbit.Quantized:
                    q = lowbit.quantize(expect.astype(np.float32), b.qmap)
                    assert np.array_equal(b.codes, q.codes)
                    assert np.array_equal(b.absmax, q.absmax)
                elif want is not None and want.dtype == lowbit.BFLOAT16:
                    assert np.array_equal(want.view(np.uint16), lowbit.to_bfloat16(
                        expect.astype(np.float32)).view(np.uint16))
                else:
                    assert np.array_equal(want, expect.astype(want.dtype))
    assert tb.optimizer.update_counts == ta.optimizer.update_counts
    _steps(tb, pb, 1)  # training goes on from it


# ------------------------------------------------------------------------------------------
# the fuzz of the held fields: byte edits, truncations, metadata edits, member sizes
# ------------------------------------------------------------------------------------------
def _check(raw):
    good, t, own = _held_good()
    outcome = _outcome(t, raw, memory_limit=own + 2 ** 21)
    if outcome == "loaded":
        for p in t.parameters:
            p.set_grad(np.ones(p.shape, p.dtype))
        t.step(1)
        t.load_states(io.BytesIO(good))
    return outcome


@given(edits=st.lists(st.tuples(st.integers(0, 2 ** 20), st.integers(0, 255)), max_size=4),
       cut=st.one_of(st.none(), st.integers(0, 2 ** 20)), reseal=st.booleans())
def test_fuzz_byte_edits_and_truncations_of_a_held_file(edits, cut, reseal):
    raw, _, _ = _held_good()
    data = bytearray(raw)
    for where, byte in edits:
        data[where % len(data)] = byte
    if cut is not None:
        data = data[:cut % len(data)]
    _check(_seal(bytes(data)) if reseal else bytes(data))


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 5000),
                    st.sampled_from(["signed", "unsigned", "int8", "bfloat16", "float32",
                                     "uint8", ""]),
                    st.lists(st.integers(0, 200), max_size=3))


@given(data=st.data())
def test_fuzz_the_held_metadata_with_the_checksums_recomputed(data):
    raw, _, _ = _held_good()
    arrs, meta = _content(raw)
    which = data.draw(st.sampled_from(["state_dtype", "version", "slot"]), label="field")
    if which == "slot":
        e = meta["params"][data.draw(st.integers(0, 2), label="param")]
        s = e["state"][data.draw(st.integers(0, 1), label="slot")]
        key = data.draw(st.sampled_from(["shape", "dtype", "map", "other"]), label="key")
        if data.draw(st.booleans(), label="delete"):
            s.pop(key, None)
        else:
            s[key] = data.draw(_VALUES, label="value")
    else:
        meta[which] = data.draw(_VALUES, label="value")
    _check(_pack(arrs, meta))


_DTYPES = ["<f4", "<f8", "|u1", "<u2", "<i1", ">f4"]


@given(data=st.data())
def test_fuzz_held_member_sizes_and_values(data):
    raw, _, _ = _held_good()
    arrs, meta = _content(raw)
    names = sorted(arrs) + ["state/1/0/absmax", "state/0/2/absmax"]
    for _ in range(data.draw(st.integers(1, 2), label="members")):
        name = data.draw(st.sampled_from(names), label="member")
        if name in arrs and arrs[name].size and data.draw(st.booleans(), label="same shape"):
            a = arrs[name].copy()
            values = [0, 7, 255] if a.dtype.kind == "u" else \
                [np.nan, -np.inf, np.inf, -1.0, -0.0, 0.0, 1e38]
            a.reshape(-1)[data.draw(st.integers(0, a.size - 1), label="at")] = data.draw(
                st.sampled_from(values), label="to")
            arrs[name] = a
            continue
        shape = tuple(data.draw(st.lists(st.integers(0, 25), max_size=2), label="shape"))
        arrs[name] = np.ones(shape, data.draw(st.sampled_from(_DTYPES), label="dtype"))
    _check(_pack(arrs, meta))


def test_the_fuzz_reaches_loads_of_held_files():
    """The fuzz's edits do load where they are valid: a code or a scale changed within its
    domain is a valid file."""
    raw, _, _ = _held_good()
    arrs, meta = _content(raw)
    for name, value in (("state/0/0", 7), ("state/0/1/absmax", 0.0)):
        a = arrs[name].copy()
        a.reshape(-1)[0] = value
        arrs[name] = a
    assert _check(_pack(arrs, meta)) == "loaded"
    assert json.loads(json.dumps(meta))["version"] == 3
    assert states.HELD_VERSION == 3 and states.VERSION == 2


def test_the_sample_takes_both_plans():
    """OPTIMIZERS: optimizers whose moments are held, taking both of the Trainer's plans (the
    vectorised one of a step from (t, lr, wd) alone, and the per-member kernel one)."""
    made = [optimizer.create(name, **kw) for name, kw in OPTIMIZERS]
    assert all(optimizer.spec_of(o).moments for o in made)
    assert {o.plans_by_scalars for o in made} == {True, False}


def test_the_golden_trainers_write_every_member_kind():
    """GOLDEN: files with a scheduler, a float32 master copy, host buffers (LBSGD's
    accumulator) and host state (Nadam's schedule): every kind of member a version 2 file
    holds."""
    made = [(optimizer.create(name, **kw()), dtype) for name, kw, dtype, _ in GOLDEN]
    assert any(o.lr_scheduler is not None for o, _ in made)
    assert any(o.multi_precision and dtype == "float16" for o, dtype in made)
    assert any(o.host_buffers() for o, _ in made)
    assert any(o.host_state() for o, _ in made)
