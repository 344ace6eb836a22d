"""The Trainer (Gluon's): the guide's check, freshness, multipliers, one kernel call per group,
bit-for-bit equality with per-parameter updates, views, kvstore options, and the states file."""
from __future__ import annotations

import json
import os
import pickle
import zipfile

import numpy as np
import pytest

from toolkit import Parameter, StaleGradientError, Trainer, lr_scheduler, optimizer
from toolkit.backends import cpu
from trainer_util import (CASES, SHAPES, config_id, expected_calls, host_leaves,
                          shapes_for, twin_run)




def _ids(case):
    cfg, conv = case
    return f"{config_id(cfg)}-{conv}"


# --------------------------------------------------------------------------------------------
# the guide's check and MXNet's rules
# --------------------------------------------------------------------------------------------
def test_guide_check_sgd_learning_rate_one():
    """trainer-guide: with SGD and learning rate 1, ``step(b)`` gives ``w - grad / b``."""
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    g = rng.standard_normal((4, 3)).astype(np.float32)
    p = Parameter("w", init=w0)
    trainer = Trainer([p], "sgd", {"learning_rate": 1.0})
    p.grad()[...] = g
    trainer.step(8)
    assert np.array_equal(p.data(), w0 - g / np.float32(8))


def test_rescale_grad_is_scale_over_batch_size():
    p = Parameter("w", shape=(2,))
    trainer = Trainer([p], "sgd", {"rescale_grad": 0.5})
    p.grad()
    trainer.step(4)
    assert trainer.optimizer.rescale_grad == 0.125


def test_allreduce_then_update_equals_step():
    a, b = Parameter("a", init=np.ones(3, np.float32)), Parameter("b", init=np.ones(3, np.float32))
    ta, tb = Trainer([a], "adam"), Trainer([b], "adam")
    for _ in range(3):
        a.set_grad(np.arange(3.0)); b.set_grad(np.arange(3.0))
        ta.step(2)
        tb.allreduce_grads()
        tb.update(2)
    assert np.array_equal(a.data(), b.data())


def test_dict_params_are_sorted_by_name_and_list_keeps_order():
    a, b = Parameter("a", shape=(1,)), Parameter("b", shape=(1,))
    t = Trainer({"z": a, "y": b}, "sgd")
    assert t.optimizer.param_dict == {0: b, 1: a}
    a2, b2 = Parameter("a", shape=(1,)), Parameter("b", shape=(1,))
    assert Trainer([a2, b2], "sgd").optimizer.param_dict == {0: a2, 1: b2}


def test_learning_rate_and_scheduler_rules():
    p = Parameter("w", shape=(2,))
    t = Trainer([p], "sgd", {"learning_rate": 0.3})
    assert t.learning_rate == 0.3
    t.set_learning_rate(0.1)
    assert t.learning_rate == 0.1 and t.optimizer.lr == 0.1
    q = Parameter("w", shape=(2,))
    sched = lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=1.0)
    ts = Trainer([q], "sgd", {"lr_scheduler": sched})
    with pytest.raises(UserWarning, match="LRScheduler"):
        ts.set_learning_rate(0.1)


@pytest.mark.parametrize("bad, exc, match", [
    (lambda p: Trainer(p[0], "sgd"), TypeError, "single Parameter"),
    (lambda p: Trainer([p[0], "x"], "sgd"), TypeError, "Parameters only"),
    (lambda p: Trainer(p, optimizer.SGD(), {"learning_rate": 1}), ValueError, "optimizer_params"),
    (lambda p: Trainer(p, 3), TypeError, "registry name"),
    (lambda p: Trainer(p, "nosuch"), ValueError, "unknown optimizer"),
    (lambda p: Trainer(p, "sgd", kvstore="dist_async"), ValueError, "distributed"),
    (lambda p: Trainer(p, "sgd", kvstore="dist_device_async"), ValueError, "distributed"),
    (lambda p: Trainer(p, "sgd", kvstore="nonsense"), ValueError, "kvstore"),
    (lambda p: Trainer(p, "sgd", compression_params={"type": "2bit"}), ValueError,
     "compression"),
    (lambda p: Trainer(p, "sgd", update_on_kvstore="yes"), TypeError, "update_on_kvstore"),
    (lambda p: Trainer(p, "sgd", backend="gpu"), ValueError, "backend"),
])
def test_construction_errors(bad, exc, match):
    params = [Parameter("a", shape=(2,)), Parameter("b", shape=(2,))]
    with pytest.raises(exc, match=match):
        bad(params)


@pytest.mark.parametrize("kvstore", ["device", "local", None])
@pytest.mark.parametrize("update_on_kvstore", [None, True, False])
def test_one_process_kvstores_train_the_same(kvstore, update_on_kvstore):
    p = Parameter("w", init=np.ones(3, np.float32))
    t = Trainer([p], "nag", {"learning_rate": 0.5, "momentum": 0.9}, kvstore=kvstore,
                update_on_kvstore=update_on_kvstore)
    for _ in range(2):
        p.set_grad(np.ones(3))
        t.step(1)
    # NAG (mxnet): mom = mu*mom + g; w -= lr*(g + mu*mom)
    assert np.allclose(p.data(), 1 - 0.5 * (1 + 0.9) - 0.5 * (1 + 0.9 * 1.9))


def test_update_on_kvstore_true_trains_even_for_aggregated_sgd():
    """MXNet 1.9.1's Trainer accepts update_on_kvstore=True for SGD (aggregate_num 4) and then
    crashes at the first step on one device (verified); here it trains."""
    assert optimizer.SGD.aggregate_num == 4 and optimizer.Adam.aggregate_num == 0
    p = Parameter("w", init=np.ones(3, np.float32))
    t = Trainer([p], "sgd", {"learning_rate": 0.5}, update_on_kvstore=True)
    p.set_grad(np.ones(3))
    t.step(1)
    assert np.array_equal(p.data(), np.full(3, 0.5, np.float32))


def test_params_errors_are_mxnets_value_errors_and_type_errors():
    p = Parameter("w", shape=(2,))
    for bad in (p, "w", [p, 3]):
        with pytest.raises(ValueError, match="params"):
            Trainer(bad, "sgd")
        with pytest.raises(TypeError, match="params"):
            Trainer(bad, "sgd")


def test_null_grad_req_is_never_updated():
    a = Parameter("a", init=np.ones(2, np.float32))
    frozen = Parameter("frozen", init=np.ones(2, np.float32), grad_req="null")
    t = Trainer([a, frozen], "sgd", {"learning_rate": 1.0})
    a.set_grad(np.ones(2))
    t.step(1)
    assert np.array_equal(frozen.data(), np.ones(2, np.float32))
    assert np.array_equal(a.data(), np.zeros(2, np.float32))
    with pytest.raises(RuntimeError, match="null"):
        frozen.grad()


# --------------------------------------------------------------------------------------------
# freshness
# --------------------------------------------------------------------------------------------
def test_stale_gradient_raises_naming_the_parameters_and_changes_nothing():
    a, b, c = (Parameter(n, init=np.ones(2, np.float32)) for n in "abc")
    t = Trainer([a, b, c], "adam")
    b.grad()[...] = 1.0
    before = [x.data().copy() for x in (a, b, c)]
    with pytest.raises(StaleGradientError) as info:
        t.step(1)
    assert "'a'" in str(info.value) and "'c'" in str(info.value) and "'b'" not in str(info.value)
    assert isinstance(info.value, UserWarning)  # MXNet raises a UserWarning here
    assert all(np.array_equal(x.data(), y) for x, y in zip((a, b, c), before))
    assert t.optimizer._index_update_count == {} and t.optimizer.num_update == 0
    # b's gradient is still fresh: skipping the stale ones updates b only, counts b only
    t.step(1, ignore_stale_grad=True)
    assert not np.array_equal(b.data(), before[1])
    assert np.array_equal(a.data(), before[0]) and np.array_equal(c.data(), before[2])
    assert t.optimizer._index_update_count == {1: 1}
    # after a step every gradient is stale again
    with pytest.raises(StaleGradientError):
        t.step(1)


def test_freshness_rule_grad_handout_set_grad_and_zero_grad():
    p = Parameter("p", init=np.ones(2, np.float32))
    t = Trainer([p], "sgd")
    p.zero_grad()                      # zeroing alone is not a written gradient
    with pytest.raises(StaleGradientError):
        t.step(1)
    g = p.grad()                       # handing out the buffer counts as written
    g[...] = 2.0
    t.step(1)
    p.set_grad(np.ones(2))             # so does copying one in
    t.step(1)


# --------------------------------------------------------------------------------------------
# one kernel call per group, bit for bit equal to per-parameter updates
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=_ids)
@pytest.mark.parametrize("dtype,mp", [("float32", False), ("float16", True), ("float64", False),
                                      ("float16", False)])
def test_trainer_step_equals_per_parameter_updates_bit_for_bit(case, dtype, mp, monkeypatch):
    (name, kw), conv = case
    from toolkit.backends import rows
    calls = []
    real = (cpu.run_segmented, cpu.run_noise_segmented, rows.run_cpu_segmented,
            cpu.run_factored_segmented)
    monkeypatch.setattr(cpu, "run_segmented", lambda *a: (calls.append(1), real[0](*a)))
    monkeypatch.setattr(cpu, "run_noise_segmented", lambda *a: (calls.append(1), real[1](*a)))
    monkeypatch.setattr(rows, "run_cpu_segmented", lambda *a: (calls.append(1), real[2](*a)))
    monkeypatch.setattr(cpu, "run_factored_segmented",
                        lambda *a: (calls.append(1), real[3](*a)))
    trainer, params, twin, _ = twin_run(name, kw, conv, dtype, mp)
    for p, (w, s) in zip(params, twin):
        assert np.array_equal(p.data(), w), p.name
    for k, (_, s) in enumerate(twin):
        g, kk = trainer._where[k]
        for a, b in zip(host_leaves(g.views[kk]), host_leaves(s)):
            assert np.array_equal(a, b, equal_nan=True), (params[k].name, a, b)
    assert (len(calls), trainer.last_step_launches) == expected_calls(name, kw, conv)


def test_one_kernel_call_per_dtype_group(monkeypatch):
    calls = []
    real = cpu.run_segmented
    monkeypatch.setattr(cpu, "run_segmented", lambda *a: (calls.append(a[1].dtype), real(*a)))
    params = [Parameter(f"p{i}", shape=(4,), dtype=d) for i, d in
              enumerate(["float32", "float64", "float32", "float64", "float32"])]
    t = Trainer(params, "adam")
    for p in params:
        p.grad()[...] = 1.0
    t.step(1)
    assert sorted(str(c) for c in calls) == ["float32", "float64"]
    assert t.last_step_launches == 2


def test_views_stay_valid_across_set_data_and_steps():
    p = Parameter("w", init=np.zeros((2, 3), np.float32))
    q = Parameter("v", init=np.zeros(4, np.float32))
    t = Trainer([p, q], "sgd", {"learning_rate": 1.0})
    view, gview = p.data(), p.grad()
    assert view.base is not None  # a view into the trainer's flat buffer
    p.set_data(np.full((2, 3), 5.0))
    assert np.array_equal(view, np.full((2, 3), 5.0, np.float32)) and p.data() is view
    gview[...] = 1.0
    q.grad()[...] = 0.0
    t.step(1)
    assert np.array_equal(view, np.full((2, 3), 4.0, np.float32))
    with pytest.raises(ValueError, match="shape"):
        p.set_data(np.zeros(3))


def test_set_data_of_a_multi_precision_parameter_moves_its_master():
    p = Parameter("w", init=np.zeros(3, np.float16), dtype="float16")
    t = Trainer([p], "sgd", {"learning_rate": 1.0, "multi_precision": True})
    p.set_data(np.full(3, 2.0))
    p.set_grad(np.ones(3))
    t.step(1)
    assert np.array_equal(p.data(), np.full(3, 1.0, np.float16))


# --------------------------------------------------------------------------------------------
# states file
# --------------------------------------------------------------------------------------------
#: the scheduled Adam of the file tests below
ADAM_SCHEDULED = lambda: {"learning_rate": 0.1,  # noqa: E731
                          "lr_scheduler": lr_scheduler.FactorScheduler(step=2, factor=0.5,
                                                                       base_lr=0.1)}
#: save and load over every optimizer with every state slot and branch on (``Spec.record``)
SAVE_CONFIGS = [(name, lambda kw=dict(spec.record): dict(kw))
                for name, spec in optimizer.specs(oracle=True).items()]
#: and over what a file keeps besides the optimizer's state: the schedulers' positions, the
#: float32 master copies, LBSGD's accumulation buffers (mid-batch, with its LARS norms)
SAVE_FEATURES = [
    ("adam", ADAM_SCHEDULED, "factor-scheduler"),
    ("adam", lambda: {"lr_scheduler": lr_scheduler.CosineScheduler(max_update=40, base_lr=0.01)},
     "cosine-scheduler"),
    ("sgd", lambda: {"momentum": 0.9, "multi_precision": True}, "multi-precision"),
    ("lbsgd", lambda: {"batch_scale": 3, "momentum": 0.9, "warmup_strategy": "lars"},
     "accumulating-lars"),
]


def _trained(name, kw, dtype, init, grads):
    params = [Parameter(f"p{i}", init=a, dtype=dtype, lr_mult=1.0 + i) for i, a in enumerate(init)]
    t = Trainer(params, name, kw())
    for gs in grads:
        for p, g in zip(params, gs):
            p.set_grad(g)
        t.step(2)
    return t, params


def _data(rng, dtype, steps, shapes=SHAPES[:3]):
    init = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(steps)]
    return init, grads


@pytest.mark.parametrize("name,kw", [c[:2] for c in SAVE_CONFIGS + SAVE_FEATURES],
                         ids=[c[0] if len(c) == 2 else f"{c[0]}-{c[2]}"
                              for c in SAVE_CONFIGS + SAVE_FEATURES])
def test_save_load_continues_bit_identically(name, kw, tmp_path):
    dtype = "float16" if kw().get("multi_precision") else "float32"
    init, grads = _data(np.random.default_rng(3), dtype, 8, shapes_for(name)[:3])
    ta, tb = _resumed(name, kw, dtype, init, grads, 4, tmp_path)
    assert ta.learning_rate == tb.learning_rate


def test_save_load_of_per_index_host_state_continues_bit_identically(tmp_path):
    """Nadam under convention "pytorch" keeps torch's running product per parameter index: the
    file holds each index's, and a loaded trainer continues bit for bit."""
    name = "nadam"
    kw = lambda: {**optimizer.spec_of(name).record, "convention": "pytorch"}  # noqa: E731
    init, grads = _data(np.random.default_rng(3), "float32", 8, shapes_for(name)[:3])
    ta, tb = _resumed(name, kw, "float32", init, grads, 4, tmp_path)
    products = ta.optimizer.mu_product
    assert len(products) == 3 and tb.optimizer.mu_product == products


def _resumed(name, kw, dtype, init, grads, split, tmp_path):
    """A trainer run on every step of ``grads`` and one saved after ``split`` steps, loaded
    into a new trainer and run on the rest: their weights equal bit for bit (and the file is
    written atomically). Returns both trainers."""
    ta, pa = _trained(name, kw, dtype, init, grads[:split])
    path = tmp_path / "trainer.states"
    ta.save_states(path)
    assert os.listdir(tmp_path) == ["trainer.states"]  # atomic: no temporary left behind
    tb, pb = _trained(name, kw, dtype, [p.data().copy() for p in pa], [])
    tb.load_states(path)
    for gs in grads[split:]:
        for t, ps in ((ta, pa), (tb, pb)):
            for p, g in zip(ps, gs):
                p.set_grad(g)
            t.step(2)
    for a, b in zip(pa, pb):
        assert np.array_equal(a.data(), b.data())
    return ta, tb


def _trainer_fingerprint(t):
    leaves = []
    for g in t._groups:
        leaves.extend(x.tobytes() for x in host_leaves(g.state))
    opt = t.optimizer
    sched = opt.lr_scheduler.state_dict() if opt.lr_scheduler is not None else None
    return (leaves, dict(opt._index_update_count), opt.num_update, opt.lr, sched,
            opt.host_state()[0])


class _Boom:
    ran = False

    def __reduce__(self):
        return (_Boom._mark, ())

    @staticmethod
    def _mark():
        _Boom.ran = True
        return "executed"


def _sealed(raw: bytes) -> bytes:
    """A file re-sealed as save_states seals it (zip comment = SHA-256 of all bytes before it):
    a deliberate edit with a valid whole-file checksum, to reach the checks behind it."""
    import hashlib
    import io
    buf = io.BytesIO(raw)
    with zipfile.ZipFile(buf, "a") as zf:
        zf.comment = b"0" * 64
    out = buf.getvalue()
    return out[:-64] + hashlib.sha256(out[:-64]).hexdigest().encode()


def _damaged_files(good: bytes, tmp_path):
    """(label, bytes) of damaged, foreign and mismatched files."""
    out = [("empty", b""), ("truncated half", good[: len(good) // 2]),
           ("truncated tail", good[:-10])]
    for pos in (60, len(good) // 2, len(good) - 30):
        flipped = bytearray(good)
        flipped[pos] ^= 0x10
        out.append((f"bit flip at {pos}", bytes(flipped)))
    out.append(("pickle", pickle.dumps(({0: None}, _Boom()))))
    out.append(("text", b"hello, not a states file\n"))
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, x=np.zeros(3))
    out.append(("foreign npz", foreign.read_bytes()))
    # a well-formed zip whose array was changed and whose CRCs were recomputed: the checksum
    # in the metadata catches it
    src = tmp_path / "src.npz"
    src.write_bytes(good)
    with np.load(src, allow_pickle=False) as z:
        content = {n: z[n] for n in z.files}
    key = next(n for n in content if n.startswith("state/"))
    content[key] = content[key] + 1
    edited = tmp_path / "edited.npz"
    np.savez(edited, **content)
    out.append(("edited array, valid zip", edited.read_bytes()))
    out.append(("edited array, valid zip and seal", _sealed(edited.read_bytes())))
    meta = json.loads(content["meta"].tobytes())
    meta["version"] = 99
    content["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(edited, **content)
    out.append(("future version", _sealed(edited.read_bytes())))
    return out


def test_damaged_foreign_and_pickle_files_are_refused_and_nothing_changes(tmp_path):
    init, grads = _data(np.random.default_rng(4), "float32", 3)
    kw = ADAM_SCHEDULED
    t, _ = _trained("adam", kw, "float32", init, grads)
    path = tmp_path / "good.states"
    t.save_states(path)
    good = path.read_bytes()
    t2, p2 = _trained("adam", kw, "float32", init, grads[:1])
    before = _trainer_fingerprint(t2)
    for label, data in _damaged_files(good, tmp_path):
        bad = tmp_path / "bad.states"
        bad.write_bytes(data)
        with pytest.raises(ValueError, match="cannot load trainer states") as info:
            t2.load_states(bad)
        assert _trainer_fingerprint(t2) == before, label
        if label == "edited array, valid zip and seal":
            assert "checksum does not match its contents" in str(info.value)
        if label == "future version":
            assert "version 99" in str(info.value)
    assert not _Boom.ran  # no pickle was ever executed
    assert zipfile.is_zipfile(path)


@pytest.mark.parametrize("change, match", [
    (lambda: ("sgd", ADAM_SCHEDULED, SHAPES[:3]), "optimizer"),
    (lambda: ("adam", lambda: {"learning_rate": 0.1, "beta1": 0.8,
                               "lr_scheduler": lr_scheduler.FactorScheduler(step=2, factor=0.5)}),
     "beta1"),
    (lambda: ("adam", lambda: {"learning_rate": 0.1}, SHAPES[:3]), "scheduler"),
    (lambda: ("adam", ADAM_SCHEDULED, [(3, 4), (6,), (2, 2, 3)]), "parameter 1"),
    (lambda: ("adam", ADAM_SCHEDULED, SHAPES[:2]), "does not have"),
])
def test_mismatched_files_are_refused(change, match, tmp_path):
    init, grads = _data(np.random.default_rng(5), "float32", 2)
    t, _ = _trained("adam", ADAM_SCHEDULED, "float32", init, grads)
    path = tmp_path / "s.states"
    t.save_states(path)
    spec = change()
    name, kw = spec[0], spec[1]
    shapes = spec[2] if len(spec) > 2 else SHAPES[:3]
    other_init = [np.zeros(s, np.float32) for s in shapes]
    t2, _ = _trained(name, kw, "float32", other_init, [])
    before = _trainer_fingerprint(t2)
    with pytest.raises(ValueError, match=match):
        t2.load_states(path)
    assert _trainer_fingerprint(t2) == before


@pytest.mark.parametrize("name", ["ftrl", "ftml"])
def test_an_invalid_step_is_refused_before_anything_is_written(name):
    """FTRL and FTML divide by the learning rate: a parameter with lr_mult 0 stops the whole
    step with a clear error; no weight, state or count moves (planning is rolled back)."""
    params = [Parameter("a", init=np.ones(3, np.float32)),
              Parameter("b", init=np.ones(3, np.float32), lr_mult=0.0),
              Parameter("c", init=np.ones(3, np.float32))]
    t = Trainer(params, name, {"learning_rate": 0.1})
    for p in params:
        p.set_grad(np.ones(3))
    before = _trainer_fingerprint(t), [p.data().copy() for p in params]
    with pytest.raises(ValueError, match="divides by the learning rate"):
        t.step(1)
    assert (_trainer_fingerprint(t), [p.data().copy() for p in params])[0] == before[0]
    assert all(np.array_equal(p.data(), b) for p, b in zip(params, before[1]))


# --------------------------------------------------------------------------------------------
# edge cases found in review
# --------------------------------------------------------------------------------------------
def test_a_parameter_given_twice_is_stepped_once():
    p = Parameter("w", init=np.ones(2, np.float32))
    t = Trainer([p, p], "sgd", {"learning_rate": 1.0})
    p.set_grad(np.ones(2))
    t.step(1)
    assert np.array_equal(p.data(), np.zeros(2, np.float32))


def test_adoption_detaches_earlier_arrays_and_resets_freshness():
    p = Parameter("w", init=np.ones(3, np.float32))
    old_grad = p.grad()            # fresh, but its buffer is replaced by the Trainer's view
    t = Trainer([p], "adam")
    old_grad[...] = 5.0
    with pytest.raises(StaleGradientError):
        t.step(1)
    assert t.optimizer._index_update_count == {}


def test_refused_set_grad_leaves_the_gradient_stale():
    p = Parameter("w", init=np.ones(3, np.float32))
    t = Trainer([p], "sgd")
    with pytest.raises(ValueError, match="shape"):
        p.set_grad(np.ones(4))
    with pytest.raises(StaleGradientError):
        t.step(1)


def test_the_last_trainer_built_with_a_parameter_steps_it():
    p = Parameter("w", init=np.ones(2, np.float32))
    t1 = Trainer([p], "sgd", {"learning_rate": 1.0})
    p.set_grad(np.ones(2))
    t1.step(1)
    t2 = Trainer([p], "adam", {"learning_rate": 0.5})   # switching optimizer mid-training
    assert np.array_equal(p.data(), np.zeros(2, np.float32))  # the values carried over
    p.set_grad(np.ones(2))
    with pytest.raises(RuntimeError, match="newer Trainer"):
        t1.step(1)
    t2.step(1)
    assert np.allclose(p.data(), -0.5)


def test_grad_req_is_fixed_while_a_trainer_holds_the_parameter():
    a = Parameter("a", shape=(2,), grad_req="null")
    b = Parameter("b", shape=(2,))
    Trainer([a, b], "sgd")
    with pytest.raises(ValueError, match="grad_req"):
        a.grad_req = "write"
    with pytest.raises(ValueError, match="grad_req"):
        b.grad_req = "null"
    c = Parameter("c", shape=(2,), grad_req="null")
    c.grad_req = "write"                                # free parameters may change
    assert c.grad().shape == (2,)


def test_a_skipped_multi_precision_parameter_keeps_its_weight():
    a = Parameter("a", init=np.ones(3, np.float16), dtype="float16")
    b = Parameter("b", init=np.ones(3, np.float16), dtype="float16")
    t = Trainer([a, b], "sgd", {"learning_rate": 1.0, "multi_precision": True})
    a.data()[...] = 5.0                                  # written in place, then skipped
    b.set_grad(np.ones(3))
    t.step(1, ignore_stale_grad=True)
    assert np.array_equal(a.data(), np.full(3, 5.0, np.float16))
    assert np.array_equal(b.data(), np.zeros(3, np.float16))


def test_a_refused_trainer_leaves_the_optimizer_as_it_was():
    opt = optimizer.SGD()
    opt.param_dict = {0: "previous"}
    with pytest.raises(ValueError):
        Trainer([Parameter("x", shape=(2,))], opt, backend="cuda")
    assert opt.param_dict == {0: "previous"}


def test_a_batch_size_that_overflows_rescale_grad_is_refused():
    p = Parameter("w", init=np.ones(2, np.float32))
    t = Trainer([p], "sgd", {"rescale_grad": 1e10})
    p.set_grad(np.ones(2))
    with pytest.raises(ValueError, match="not finite"):
        t.step(1e-310)
    assert np.array_equal(p.data(), np.ones(2, np.float32))


def test_states_with_a_misshapen_lbsgd_accumulator_are_refused(tmp_path):
    kw = lambda: {"batch_scale": 3, "momentum": 0.9}  # noqa: E731
    init, grads = _data(np.random.default_rng(6), "float32", 2)
    t, _ = _trained("lbsgd", kw, "float32", init, grads)
    path = tmp_path / "lbsgd.states"
    t.save_states(path)
    with np.load(path, allow_pickle=False) as z:
        content = {n: z[n] for n in z.files}
    meta = json.loads(content["meta"].tobytes())
    content["host/cum0"] = np.zeros(5)                   # wrong shape and dtype
    meta.pop("checksum")
    from toolkit.trainer.states import _checksum
    arrays_only = {k: v for k, v in content.items() if k != "meta"}
    meta["checksum"] = {"algorithm": "sha256", "value": _checksum(arrays_only, meta)}
    content["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), np.uint8)
    edited = tmp_path / "edited.npz"
    np.savez(edited, **content)
    bad = tmp_path / "bad.states"
    bad.write_bytes(_sealed(edited.read_bytes()))
    t2, _ = _trained("lbsgd", kw, "float32", init, grads[:1])
    before = _trainer_fingerprint(t2)
    with pytest.raises(ValueError, match="accumulator"):
        t2.load_states(bad)
    assert _trainer_fingerprint(t2) == before


def test_a_step_in_another_thread_never_receives_this_threads_rule_calls():
    """A kernel step's launches are its own value: while a Trainer plans in one thread, an
    ``update`` of the same optimizer in another thread runs at once, on its own arrays."""
    import threading
    planning, release = threading.Event(), threading.Event()

    class SlowSGD(optimizer.SGD):
        def _kernel_step(self, index, weight, grad, state, t, lr, wd):
            if threading.current_thread() is not threading.main_thread():
                planning.set()
                release.wait(5)
            return super()._kernel_step(index, weight, grad, state, t, lr, wd)

    opt = SlowSGD(learning_rate=1.0)
    p = Parameter("w", init=np.zeros(3, np.float32))
    t = Trainer([p], opt)
    p.set_grad(np.ones(3))
    worker = threading.Thread(target=t.step, args=(1,))
    worker.start()
    assert planning.wait(5)
    w = np.zeros(3, np.float32)
    opt.update(7, w, np.ones(3, np.float32), None)       # meanwhile, in this thread
    assert np.array_equal(w, -np.ones(3, np.float32))    # applied now, not recorded elsewhere
    release.set()
    worker.join(5)
    assert t.last_step_launches == 1
    assert np.array_equal(p.data(), -np.ones(3, np.float32))


class _HeavyBall(optimizer.ElementwiseOptimizer):
    """A custom element-wise rule: ``v = mu*v - lr*(g + wd*w); w = w + v``."""

    state_names = ("v",)

    def __init__(self, momentum=0.9, **kw):
        self.momentum = momentum
        super().__init__(**kw)

    def hyperparameters(self, index, t, lr, wd):
        return (lr, wd, self.momentum)

    @staticmethod
    def rule(w, g, v, hp):
        lr, wd, mu = hp
        v = mu * v - lr * (g + wd * w)
        return w + v, v


def test_a_custom_elementwise_rule_runs_in_one_call_bit_for_bit():
    rng = np.random.default_rng(8)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    params = [Parameter(f"p{i}", init=a, lr_mult=1 + i) for i, a in enumerate(init)]
    trainer = Trainer(params, _HeavyBall(learning_rate=0.1, wd=0.01))
    twin = _HeavyBall(learning_rate=0.1, wd=0.01)
    twin.param_dict = {i: p for i, p in enumerate(params)}
    ws = [a.copy() for a in init]
    ss = [twin.create_state(i, w) for i, w in enumerate(ws)]
    for _ in range(3):
        grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
        for p, g in zip(params, grads):
            p.set_grad(g)
        trainer.step(2)
        twin.rescale_grad = 0.5
        for i, g in enumerate(grads):
            twin.update(i, ws[i], g, ss[i])
        assert trainer.last_step_launches == 1
    for p, w in zip(params, ws):
        assert np.array_equal(p.data(), w)


# --------------------------------------------------------------------------------------------
# scalar-only steps are planned once per distinct (t, lr, wd)
# --------------------------------------------------------------------------------------------
def test_a_scalar_only_step_is_planned_once_per_distinct_count_and_rates():
    params = [Parameter(f"p{i}", init=np.full(4, 1.0 + i, np.float32),
                        lr_mult=1.0 if i < 6 else 2.0) for i in range(8)]
    trainer = Trainer(params, "adam", {"learning_rate": 0.1})
    opt = trainer.optimizer
    assert opt.plans_by_scalars
    planned = []
    real = opt.kernel_row
    # an instance spy: the (t, lr) of each row planned
    opt.kernel_row = lambda t, lr, wd: (planned.append((t, lr)), real(t, lr, wd))[1]
    for p in params:
        p.grad()[...] = 0.5
    trainer.step(1)
    assert planned == [(1, 0.1), (1, 0.2)]  # two distinct learning rates, the same t
    planned.clear()
    for p in params[1:]:                # p0 is skipped: its t falls behind
        p.grad()[...] = 0.5
    trainer.step(1, ignore_stale_grad=True)
    assert planned == [(2, 0.1), (2, 0.2)]
    planned.clear()
    for p in params:
        p.grad()[...] = 0.5
    trainer.step(1)
    # p0 at t=2, p1..p5 at t=3, p6 and p7 at t=3 with twice the lr
    assert planned == [(2, 0.1), (3, 0.1), (3, 0.2)]
    assert trainer.last_step_launches == 1


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_adafactor_steps_a_group_from_its_rows_alone_as_each_weight_alone(dtype):
    """Adafactor's step is planned from ``(t, lr, wd)`` alone (``scalar_launch`` "factored":
    epsilon1's default, the compute dtype's eps, and each weight's ``numel**0.5`` are the
    kernel's and the layout's, not the row's), once per distinct triple, in one factored call
    per group; every weight ends as its own steps leave it, bit for bit."""
    shapes = [(3, 4), (5,), (2, 3, 3), (1, 1), (4, 1, 3, 3), ()]
    rng = np.random.default_rng(5)
    inits = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(3)]
    params = [Parameter(f"p{i}", init=a.copy(), dtype=dtype, lr_mult=2.0 if i == 2 else 1.0)
              for i, a in enumerate(inits)]
    kw = {"learning_rate": 0.05, "multi_precision": dtype == "float16"}
    trainer = Trainer(params, "adafactor", kw)
    opt = trainer.optimizer
    assert opt.scalar_launch == "factored" and not opt.plans_by_scalars
    planned = []
    real = opt.kernel_row
    opt.kernel_row = lambda t, lr, wd: (planned.append((t, lr)), real(t, lr, wd))[1]
    alone = optimizer.create("adafactor", **kw)
    alone.set_lr_mult({2: 2.0})
    weights = [a.copy() for a in inits]
    states = [alone.create_state_multi_precision(i, w) for i, w in enumerate(weights)]
    for step in grads:
        planned.clear()
        for p, g in zip(params, step):
            p.grad()[...] = g
        trainer.step(1)
        assert planned == [(planned[0][0], 0.05), (planned[0][0], 0.1)]
        assert trainer.last_step_launches == 1
        for i, (w, g, s) in enumerate(zip(weights, step, states)):
            alone.update_multi_precision(i, w, g, s)
    for p, w in zip(params, weights):
        assert p.data().tobytes() == w.tobytes(), p.name


def test_an_adafactor_subclass_with_its_own_epsilon1_default_steps_with_it():
    """A subclass whose ``epsilon1_for`` gives a default of its own (it reads the weights'
    dtype, which ``kernel_row`` does not know) is planned index by index, and its kernel steps
    take that value: the kernel, the reference and the Trainer agree."""
    from toolkit.optimizers.adafactor import Adafactor

    class MyEps(Adafactor):
        def epsilon1_for(self, dtype):
            return 1e-3 if self.epsilon1 is None else super().epsilon1_for(dtype)
    assert MyEps().scalar_launch is None and Adafactor().scalar_launch == "factored"
    w0 = np.full((4, 5), 0.5, np.float32)
    g = np.zeros((4, 5), np.float32)
    g[0, 0] = 1e-4  # where epsilon1 = 1e-3 clamps the statistics and the machine's eps does not
    out = {}
    for backend in ("cpu", "reference"):
        opt = MyEps(learning_rate=0.05, backend=backend)
        w = w0.copy()
        opt.update(0, w, g, opt.create_state(0, w))
        out[backend] = w
    plain = w0.copy()
    opt = Adafactor(learning_rate=0.05)
    opt.update(0, plain, g, opt.create_state(0, plain))
    assert not np.allclose(out["cpu"], plain)
    np.testing.assert_allclose(out["cpu"], out["reference"], rtol=1e-6)
    p = Parameter("p", init=w0.copy())
    trainer = Trainer([p], MyEps(learning_rate=0.05))
    p.grad()[...] = g
    trainer.step(1)
    assert p.data().tobytes() == out["cpu"].tobytes()


def test_only_unchanged_built_in_steps_count_as_scalar_only():
    class Plain(optimizer.SGD):
        pass

    class OwnStep(optimizer.SGD):
        def _kernel_step(self, index, weight, grad, state, t, lr, wd):
            return super()._kernel_step(index, weight, grad, state, t, lr * (1 + index), wd)

    assert Plain().plans_by_scalars and not OwnStep().plans_by_scalars
    for name in ("nadam", "lbsgd", "sgld"):  # per-index bookkeeping or a per-index noise key
        assert not optimizer.create(name).plans_by_scalars
    # an overridden step that reads the index gets its own row: each parameter moves by its own
    params = [Parameter(f"p{i}", init=np.zeros(2, np.float32)) for i in range(3)]
    trainer = Trainer(params, OwnStep(learning_rate=1.0))
    for p in params:
        p.grad()[...] = 1.0
    trainer.step(1)
    assert [float(p.data()[0]) for p in params] == [-1.0, -2.0, -3.0]


# --------------------------------------------------------------------------------------------
# GroupAdaGrad: one history value per row, laid out per row in a flat buffer of its own; the
# group steps in one segmented row call
# --------------------------------------------------------------------------------------------
def test_groupadagrad_lays_out_a_history_per_row_and_steps_the_group_in_one_call(monkeypatch):
    from toolkit.backends import rows
    calls = []
    real = rows.run_cpu_segmented
    monkeypatch.setattr(rows, "run_cpu_segmented", lambda *a: (calls.append(1), real(*a)))
    monkeypatch.setattr(rows, "run_cpu", lambda *a: pytest.fail("a per-tensor row call"))
    shapes = [(3, 4), (6, 1), (2, 5)]
    params = [Parameter(f"e{i}", shape=s, init=1.0) for i, s in enumerate(shapes)]
    trainer = Trainer(params, "groupadagrad", {"learning_rate": 0.1})
    histories = [trainer._where[i][0].member_state(trainer._where[i][1]) for i in range(3)]
    assert [h.shape for h in histories] == [(3, 1), (6, 1), (2, 1)]
    flat = trainer._groups[0].state
    assert flat.shape == (11,) and all(np.shares_memory(h, flat) for h in histories)
    for p in params:
        p.grad()[...] = 2.0
    params[2].grad()[1] = 4.0
    trainer.step(1)
    assert calls == [1] and trainer.last_step_launches == 1
    # h = mean(g^2) = 4 on every row but the last (16); w = 1 - 0.1*g/sqrt(h + 1e-5)
    assert [h.ravel().tolist() for h in histories] == [[4.0] * 3, [4.0] * 6, [4.0, 16.0]]
    f = np.float32
    expect = f(1) - f(0.1) * f(2) / np.sqrt(f(4 + 1e-5))
    assert all(np.all(p.data() == expect) for p in params[:2])
    assert np.all(params[2].data()[1] == f(1) - f(0.1) * f(4) / np.sqrt(f(16 + 1e-5)))


def test_groupadagrad_weight_decay_stops_the_step_before_anything_is_written():
    params = [Parameter("a_weight", shape=(2, 3), init=1.0, wd_mult=0.0),
              Parameter("b_weight", shape=(3, 2), init=1.0),      # wd 0.01 * 1: refused
              Parameter("c_weight", shape=(1, 4), init=1.0, wd_mult=0.0)]
    t = Trainer(params, "groupadagrad", {"learning_rate": 0.1, "wd": 0.01})
    for p in params:
        p.set_grad(np.ones(p.shape))
    before = _trainer_fingerprint(t), [p.data().copy() for p in params]
    with pytest.raises(ValueError, match="weight decay.*index 1"):
        t.step(1)
    assert _trainer_fingerprint(t) == before[0]
    assert all(np.array_equal(p.data(), b) for p, b in zip(params, before[1]))
    params[1].wd_mult = 0.0           # Gluon's multiplier, read at every step
    t.step(1)
    assert t.optimizer.num_update == 1


@pytest.mark.parametrize("dtype,mp", [("float32", False), ("float16", True)])
def test_groupadagrad_save_load_continues_bit_identically(dtype, mp, tmp_path):
    rng = np.random.default_rng(4)
    shapes = [(3, 4), (5, 1), (2, 6)]
    init = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(6)]
    kw = lambda: {"learning_rate": 0.05, "clip_gradient": 1.0, "multi_precision": mp}  # noqa: E731
    ta, tb = _resumed("groupadagrad", kw, dtype, init, grads, 3, tmp_path)
    for ga, gb in zip(ta._groups, tb._groups):
        for x, y in zip(host_leaves(ga.state), host_leaves(gb.state)):
            assert np.array_equal(x, y)


def test_a_state_laid_out_per_member_steps_like_the_flat_one():
    """An element-wise optimizer that declares ``state_like_weight = False`` gets each member's
    state laid out end to end (``Group._flatten_states``): the same offsets as the weight's, so
    one segmented call still runs, with the numbers of the usual layout."""
    class PerMember(optimizer.SGD):
        state_like_weight = False

    shapes = [(3, 4), (5,), (2, 2, 3)]
    rng = np.random.default_rng(3)
    init = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(3)]
    out = []
    for klass in (optimizer.SGD, PerMember):
        params = [Parameter(f"p{i}", init=a.copy()) for i, a in enumerate(init)]
        t = Trainer(params, klass(learning_rate=0.1, momentum=0.9))
        for step in grads:
            for p, gr in zip(params, step):
                p.set_grad(gr)
            t.step(1)
            assert t.last_step_launches == 1
        out.append(([p.data().copy() for p in params], t._groups[0]))
    (w_flat, g_flat), (w_member, g_member) = out
    assert g_member.layout(g_member.state) is not None and g_flat.layout(g_flat.state) is None
    assert all(np.array_equal(a, b) for a, b in zip(w_flat, w_member))
    assert np.array_equal(g_flat.state, g_member.state)


def test_the_old_name_of_state_like_weight_is_refused():
    with pytest.raises(TypeError, match="state_like_weight"):
        class Old(optimizer.SGD):  # noqa: F841 - the class statement is the test
            elementwise_step = False


def test_states_and_dist_use_the_trainers_public_seams_step_lock_and_skipping_nonfinite():
    """``step_lock`` and ``skipping_nonfinite`` are the documented seams that save_states,
    load_states and the distributed step read; no module but the Trainer's own touches the
    private attributes behind them."""
    import pathlib
    import re
    import threading
    p = Parameter("w", init=np.zeros(3, np.float32))
    t = Trainer([p], "sgd", {"learning_rate": 1.0})
    assert isinstance(t.step_lock, type(threading.Lock())) and t.step_lock is t.step_lock
    with pytest.raises(AttributeError):
        t.step_lock = threading.Lock()
    with pytest.raises(AttributeError):
        t.skipping_nonfinite = True
    seen = []

    class Spy(optimizer.SGD):
        def _kernel_step(self, index, weight, grad, state, t_, lr, wd):
            seen.append((t.step_lock.locked(), t.skipping_nonfinite))
            return super()._kernel_step(index, weight, grad, state, t_, lr, wd)

    t = Trainer([p], Spy(learning_rate=1.0))
    for guard in (False, True):
        p.set_grad(np.ones(3))
        t.step(1, skip_nonfinite=guard)
    assert seen == [(True, False), (True, True)]
    assert not t.step_lock.locked() and t.skipping_nonfinite is False
    # a step in another thread waits while the lock is held
    p.set_grad(np.ones(3))
    with t.step_lock:
        worker = threading.Thread(target=t.step, args=(1,))
        worker.start()
        worker.join(0.3)
        assert worker.is_alive() and np.array_equal(p.data(), -2 * np.ones(3, np.float32))
    worker.join(10)
    assert np.array_equal(p.data(), -3 * np.ones(3, np.float32))
    root = pathlib.Path(__file__).resolve().parents[1] / "toolkit"
    for path in sorted(root.rglob("*.py")):
        if path.name == "trainer.py" and path.parent.name == "trainer":
            continue
        found = re.findall(r"\._guard_on\b|\b\w*trainer\w*\._lock\b", path.read_text())
        assert not found, f"{path} reaches into the Trainer's private {found}"


def test_a_step_sets_rescale_grad_to_the_bits_of_scale_over_batch_size():
    """The step keeps the optimizer's rescale_grad object when it holds the very value
    (its step constants stay remembered), told by its bits: -0.0 is not 0.0."""
    import math
    params = [Parameter("w", init=np.ones(3, np.float32))]
    opt = optimizer.create("sgd", learning_rate=0.1, rescale_grad=-0.0)
    trainer = Trainer(params, opt)
    opt.rescale_grad = 0.0
    params[0].grad()[...] = 1.0
    trainer.step(1)
    assert math.copysign(1.0, opt.rescale_grad) == -1.0  # -0.0 / 1


def test_a_vectorised_group_hands_the_rule_the_state_arrays_of_state_arrays():
    """The Trainer's plan from ``kernel_row`` gives the rule the state buffers in
    ``state_arrays`` order (a subclass may store its state in another order), as ``update``
    does: the two agree bit for bit."""
    class Swapped(optimizer.Adam):
        def create_state(self, index, weight):
            m, v = super().create_state(index, weight)
            v[...] = 0.5
            return (v, m)  # stored (var, mean)

        def state_arrays(self, state):
            return (state[1], state[0])  # the rule's (mean, var)

    rng = np.random.default_rng(0)
    shapes = [(5, 4), (7,), (3,)]
    init = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    params = [Parameter(f"p{i}", init=a, lr_mult=1.0 + i) for i, a in enumerate(init)]
    trainer = Trainer(params, Swapped(learning_rate=0.1))
    assert trainer.optimizer.plans_by_scalars
    twin = Swapped(learning_rate=0.1)
    twin.param_dict = dict(enumerate(params))
    ws = [a.copy() for a in init]
    states = [twin.create_state(i, w) for i, w in enumerate(ws)]
    for _ in range(3):
        grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        for p, g in zip(params, grads):
            p.set_grad(g)
        trainer.step(1)
        for i, g in enumerate(grads):
            twin.update(i, ws[i], g, states[i])
        assert trainer.last_step_launches == 1
    for p, w in zip(params, ws):
        assert p.data().tobytes() == w.tobytes()


def test_a_kernel_step_of_the_old_signature_is_refused_where_the_class_is_made():
    """``_kernel_step`` returns its launches (it runs nothing): an override that still takes a
    launcher fails at class creation, saying so, not at its first step."""
    with pytest.raises(TypeError, match="returns what to run"):
        class Old(optimizer.SGD):
            def _kernel_step(self, index, weight, grad, state, t, lr, wd, launcher):
                pass


@pytest.mark.parametrize("returned", [None, 3, [1.0]])
def test_a_kernel_step_that_returns_no_launch_is_an_error_and_writes_nothing(returned):
    """An override that calls ``super()._kernel_step(...)`` but drops what it returns would
    update nothing: ``update`` and the Trainer say so, and the weight and the count stay."""
    class Forgot(optimizer.SGD):
        def _kernel_step(self, index, weight, grad, state, t, lr, wd):
            super()._kernel_step(index, weight, grad, state, t, lr, wd)
            return returned

    opt = Forgot(learning_rate=1.0)
    w = np.zeros(3, np.float32)
    with pytest.raises(TypeError, match="returns what to run"):
        opt.update(0, w, np.ones(3, np.float32), None)
    assert not w.any() and opt.num_update == 0
    p = Parameter("w", init=np.zeros(3, np.float32))
    t = Trainer([p], Forgot(learning_rate=1.0))
    p.set_grad(np.ones(3))
    with pytest.raises(TypeError, match="returns what to run"):
        t.step(1)
    assert not p.data().any() and t.optimizer.num_update == 0
