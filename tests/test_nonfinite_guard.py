"""The non-finite guard (issue 19, item 11; docs/trainer.md,
"Skipping non-finite gradients"): ``skip_nonfinite=True`` skips every parameter whose gradient
holds a NaN or an infinity, leaves its weight, state and counts exactly as they were, reports
it, and steps the others bit for bit as if the skipped ones had not been there. The default
stays MXNet's: the values propagate."""
from __future__ import annotations

import zipfile

import numpy as np
import pytest

import optim_db
from toolkit import Parameter, RowSparse, Trainer, optimizer
from toolkit.backends import finite, jit, order

BAD = (np.nan, np.inf, -np.inf)


# --------------------------------------------------------------------------------------------
# the pre-pass kernels
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 100, jit.PARALLEL_THRESHOLD + 3])
def test_all_finite_finds_every_nan_and_infinity(dtype, n):
    a = np.linspace(-1, 1, n).astype(dtype)
    info = np.finfo(dtype)
    a[0] = info.max
    a[-1] = -info.tiny / 2   # a subnormal is finite
    assert finite.all_finite(a)
    for pos in sorted({0, n // 2, n - 1}):
        for bad in BAD:
            b = a.copy()
            b[pos] = bad
            assert not finite.all_finite(b), (pos, bad)
    assert finite.all_finite(a[::-1].copy())
    assert finite.all_finite(np.zeros(0, dtype))


def test_all_finite_other_layouts_and_kinds():
    a = np.ones((6, 5), np.float32)
    a[4, 3] = np.nan
    assert not finite.all_finite(a[:, 1::2].copy(order="F"))  # F order
    assert not finite.all_finite(a[::2, 1:])                  # neither C nor F: numpy's test
    assert finite.all_finite(a[:, :3])
    assert not finite.all_finite(np.asfortranarray(a))
    g = RowSparse([1, 4], np.array([[1.0, np.inf, 0, 0, 0], [0] * 5], np.float32), (6, 5))
    assert not finite.all_finite(g)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_finite_segments_one_flag_per_segment(dtype):
    sizes = [3, order.CHUNK * 2 + 5, 1, 7, order.CHUNK]     # segments over several chunks
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    flat = np.ones(int(offsets[-1]), dtype)
    chunks = order.chunk_table(offsets)
    assert finite.finite_segments(flat, offsets, chunks).tolist() == [True] * 5
    flat[int(offsets[1]) + order.CHUNK + 2] = np.inf       # segment 1, its second chunk
    flat[int(offsets[4]) - 1] = np.nan                   # the last element of segment 3
    flat[int(offsets[5]) - 1] = -np.inf                  # the last element of the buffer
    assert finite.finite_segments(flat, offsets, chunks).tolist() == [
        True, False, True, False, False]
    # the parallel and the serial kernel agree
    small = np.ones(40, dtype)
    small[17] = np.nan
    off = np.array([0, 10, 20, 40])
    assert finite.finite_segments(small, off, order.chunk_table(off, 4)).tolist() == [
        True, False, True]


# --------------------------------------------------------------------------------------------
# Optimizer.update
# --------------------------------------------------------------------------------------------
#: a sample of configurations that covers every kind of step (optim_db.step_kinds)
GUARDED = [  # checked against the registry by test_samples_cover_every_kind_of_step
    ("sgd", {"momentum": 0.9}), ("adam", {}), ("nadam", {}), ("ftml", {}),
    ("lbsgd", {"momentum": 0.9, "warmup_strategy": "lars"}), ("sgld", {}), ("lamb", {}),
    ("ftrl", {}), ("groupadagrad", {}), ("adafactor", {}), ("muon", {}),
    ("nadam", {"convention": "pytorch"})]   # its products per index (a dict on the optimizer)


def _leaves(state):
    if state is None:
        return []
    if isinstance(state, tuple):
        return [x for s in state for x in _leaves(s)]
    return [state]


def _plain(x):
    """``x`` as comparable data: arrays by their bytes, containers item by item, other objects
    (compiled kernels, caches) by their type."""
    if isinstance(x, np.ndarray):
        return ("array", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, dict):
        return tuple(sorted((repr(k), _plain(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_plain(v) for v in x)
    if isinstance(x, (int, float, str, bool, type(None), np.generic)):
        return x
    return type(x).__name__


def _snapshot(opt, w, state):
    """The weight, the state and everything the optimizer keeps (counts, Nadam's schedule,
    LBSGD's accumulators), but the memo of checked arrays."""
    return (w.tobytes(), [s.tobytes() for s in _leaves(state)], opt.num_update,
            _plain({k: v for k, v in vars(opt).items() if k not in ("_checked", "_templates")}))


@pytest.mark.parametrize("name,kw", GUARDED, ids=[g[0] for g in GUARDED])
def test_update_skips_a_nonfinite_gradient_and_changes_nothing(name, kw):
    shape = (6, 4)
    rng = np.random.default_rng(1)
    opt = optimizer.create(name, learning_rate=0.05, **kw)
    plain = optimizer.create(name, learning_rate=0.05, **kw)
    w = rng.standard_normal(shape).astype(np.float32)
    w2 = w.copy()
    s, s2 = opt.create_state(0, w), plain.create_state(0, w2)
    for step in range(4):
        g = rng.standard_normal(shape).astype(np.float32)
        assert opt.update(0, w, g, s, skip_nonfinite=True) is True
        assert plain.update(0, w2, g, s2) is None
        assert w.tobytes() == w2.tobytes()
        if step in (1, 2):   # a non-finite gradient between the steps: nothing moves
            for bad in BAD:
                b = g.copy()
                b[step, 3] = bad
                before = _snapshot(opt, w, s)
                assert opt.update(0, w, b, s, skip_nonfinite=True) is False
                assert _snapshot(opt, w, s) == before
    assert [x.tobytes() for x in _leaves(s)] == [x.tobytes() for x in _leaves(s2)]
    assert opt.num_update == plain.num_update == 4


def test_default_propagates_as_mxnet():
    opt = optimizer.create("sgd", learning_rate=0.1)
    w = np.ones(4, np.float32)
    g = np.array([0, np.nan, np.inf, 1], np.float32)
    assert opt.update(0, w, g, None) is None
    assert np.isnan(w[1]) and np.isinf(w[2]) and opt.num_update == 1


def test_update_multi_precision_skips_a_float16_infinity():
    opt = optimizer.create("adam", multi_precision=True, learning_rate=0.01)
    w = np.linspace(-1, 1, 10).astype(np.float16)
    s = opt.create_state_multi_precision(0, w)
    g = np.full(10, 0.5, np.float16)
    assert opt.update_multi_precision(0, w, g, s, skip_nonfinite=True) is True
    before = _snapshot(opt, w, s)
    g[9] = np.inf
    assert opt.update_multi_precision(0, w, g, s, skip_nonfinite=True) is False
    assert _snapshot(opt, w, s) == before


def test_row_sparse_values_are_checked():
    opt = optimizer.create("adam", lazy_update=True, learning_rate=0.01)
    w = np.ones((6, 3), np.float32)
    s = opt.create_state(0, w)
    vals = np.ones((2, 3), np.float32)
    vals[1, 2] = np.nan
    before = _snapshot(opt, w, s)
    assert opt.update(0, w, RowSparse([1, 4], vals, w.shape), s, skip_nonfinite=True) is False
    assert _snapshot(opt, w, s) == before
    vals[1, 2] = 0.5
    assert opt.update(0, w, RowSparse([1, 4], vals, w.shape), s, skip_nonfinite=True) is True
    assert opt.num_update == 1


def test_a_skipped_call_is_checked_as_the_update_would_be():
    """A bad call raises the update's own error whether or not its gradient is finite, and
    leaves everything as it was."""
    opt = optimizer.create("adam")
    w = np.ones(5, np.float32)
    s = opt.create_state(0, w)
    with pytest.raises(ValueError, match="shape"):
        opt.update(0, w, np.full(6, np.nan, np.float32), s, skip_nonfinite=True)
    with pytest.raises(TypeError):
        opt.update(0, w, np.full(5, np.nan, np.float32), None, skip_nonfinite=True)
    with pytest.raises(ValueError, match="row"):
        opt.update(0, np.ones((4, 2), np.float32),
                   RowSparse([7], np.full((1, 2), np.nan, np.float32), (4, 2)),
                   opt.create_state(0, np.ones((4, 2), np.float32)), skip_nonfinite=True)
    with pytest.raises(TypeError, match="skip_nonfinite"):
        opt.update(0, w, np.ones(5, np.float32), s, skip_nonfinite=1)
    assert w.tolist() == [1.0] * 5 and opt.num_update == 0


# --------------------------------------------------------------------------------------------
# Trainer.step
# --------------------------------------------------------------------------------------------
SHAPES = [(3, 4), (order.CHUNK + 9, 2), (5, 1), (2, 7), (40, 3)]   # one spans several chunks
TRAINER = [  # checked against the registry by test_samples_cover_every_kind_of_step
    ("sgd", {"momentum": 0.9}), ("adam", {}), ("nadam", {}), ("sgld", {}),
    ("lbsgd", {"momentum": 0.9, "warmup_strategy": "lars"}), ("lamb", {}),
    ("groupadagrad", {"eps": 1e-3}), ("ftrl", {}), ("ftml", {}), ("adafactor", {}),
    ("muon", {})]


def test_samples_cover_every_kind_of_step():
    """Each sample names built-in optimizers and covers every kind of step their specs and
    classes show (states 0 to 3, noise, a first pass, a row rule, MXNet's kernels and Python
    ops): an optimizer of a new kind needs a case."""
    for sample in (GUARDED, TRAINER):
        assert all(optim_db.is_builtin(name) for name, _ in sample)
        assert optim_db.kinds_of(sample) >= optim_db.all_step_kinds()


def _trainer(name, kw, dtype, mp):
    rng = np.random.default_rng(7)
    params = [Parameter(f"p{i}", init=rng.standard_normal(s).astype(dtype), dtype=dtype)
              for i, s in enumerate(SHAPES)]
    wd = 0.0 if name == "groupadagrad" else 0.01
    return Trainer(params, name, dict(learning_rate=0.05, wd=wd, multi_precision=mp, **kw)), \
        params


def _members(path):
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


# (step, parameter, position, value): the skipped ones
POISON = {1: [(1, -1, np.nan), (3, 0, np.inf)], 2: [(0, 5, -np.inf)], 3: [(4, 0, np.nan)]}


@pytest.mark.parametrize("name,kw", TRAINER, ids=[t[0] for t in TRAINER])
@pytest.mark.parametrize("dtype,mp", [(np.float32, False), (np.float16, True),
                                      (np.float64, False)], ids=["f32", "f16mp", "f64"])
def test_trainer_skips_and_steps_the_others_bit_for_bit(name, kw, dtype, mp, tmp_path):
    """The guarded Trainer against a twin that never receives the poisoned gradients (those
    parameters stale, ``ignore_stale_grad=True``): weights, states and counts equal bit for
    bit after every step."""
    guarded, gp = _trainer(name, kw, dtype, mp)
    twin, tp = _trainer(name, kw, dtype, mp)
    rng = np.random.default_rng(3)
    for step in range(5):
        poison = {k: (pos, v) for k, pos, v in POISON.get(step, [])}
        for k, (p, q) in enumerate(zip(gp, tp)):
            g = rng.standard_normal(p.shape).astype(dtype)
            if k in poison:
                pos, v = poison[k]
                bad = g.copy().reshape(-1)
                bad[pos] = v
                p.set_grad(bad.reshape(p.shape))
            else:
                p.set_grad(g)
                q.set_grad(g)
        skipped = guarded.step(4, skip_nonfinite=True)
        assert skipped == guarded.skipped == tuple(f"p{k}" for k in sorted(poison))
        twin.step(4, ignore_stale_grad=bool(poison))
        assert guarded.optimizer.num_update == twin.optimizer.num_update
        for p, q in zip(gp, tp):
            assert p.data().tobytes() == q.data().tobytes(), (step, p.name)
        guarded.save_states(tmp_path / "a")
        twin.save_states(tmp_path / "b")
        assert _members(tmp_path / "a") == _members(tmp_path / "b"), step


def test_trainer_skipped_is_kept_until_the_next_step_and_default_propagates():
    t, ps = _trainer("adam", {}, np.float32, False)
    for p in ps:
        p.set_grad(np.ones(p.shape, np.float32))
    ps[2].grad()[0, 0] = np.nan
    assert t.step(1, skip_nonfinite=True) == ("p2",)
    assert t.skipped == ("p2",)
    assert np.isfinite(ps[2].data()).all()
    for p in ps:
        p.set_grad(np.ones(p.shape, np.float32))
    assert t.step(1, skip_nonfinite=True) == () and t.skipped == ()
    for p in ps:
        p.set_grad(np.ones(p.shape, np.float32))
    ps[0].grad()[1, 1] = np.inf
    assert t.step(1) is None and t.skipped == ()
    assert not np.isfinite(ps[0].data()).all()       # MXNet's default: the values propagate
    with pytest.raises(TypeError, match="skip_nonfinite"):
        t.step(1, skip_nonfinite="yes")


def test_trainer_update_after_allreduce_and_all_skipped():
    t, ps = _trainer("sgd", {"momentum": 0.9}, np.float32, False)
    before = [p.data().copy() for p in ps]
    for p in ps:
        p.set_grad(np.full(p.shape, np.nan, np.float32))
    t.allreduce_grads()
    assert t.update(1, skip_nonfinite=True) == tuple(p.name for p in ps)
    assert t.optimizer.num_update == 0 and t.last_step_launches == 0
    assert all(p.data().tobytes() == b.tobytes() for p, b in zip(ps, before))
    # the skipped gradients were used by that step: a step without new ones finds them stale
    with pytest.raises(RuntimeError, match="not been written"):
        t.step(1, skip_nonfinite=True)


def test_trainer_row_sparse_parameter():
    def make():
        ps = [Parameter("emb", shape=(8, 3), init=1.0, grad_stype="row_sparse"),
              Parameter("dense", shape=(4,), init=1.0)]
        return Trainer(ps, "adam", {"learning_rate": 0.1, "lazy_update": True}), ps
    t, ps = make()
    vals = np.ones((2, 3), np.float32)
    vals[0, 1] = np.inf
    ps[0].set_grad(RowSparse([2, 5], vals, (8, 3)))
    ps[1].set_grad(np.ones(4, np.float32))
    assert t.step(1, skip_nonfinite=True) == ("emb",)
    assert (ps[0].data() == 1).all() and (ps[1].data() != 1).all()


def test_a_step_that_raises_leaves_the_skipped_gradients_fresh():
    """Nothing of a step that fails is kept: the non-finite gradients are not marked used and
    ``skipped`` is not set, so the same step can be retried."""
    t, ps = _trainer("ftml", {}, np.float32, False)
    for p in ps:
        p.set_grad(np.ones(p.shape, np.float32))
    ps[1].grad()[0, 0] = np.nan
    t.set_learning_rate(0.0)      # FTML divides by the learning rate: its step refuses 0
    before = [p.data().copy() for p in ps]
    with pytest.raises(ValueError, match="learning rate"):
        t.step(1, skip_nonfinite=True)
    assert t.skipped == () and t.optimizer.num_update == 0
    assert all(p.data().tobytes() == b.tobytes() for p, b in zip(ps, before))
    t.set_learning_rate(0.05)
    assert t.step(1, skip_nonfinite=True) == ("p1",)      # the gradients are still fresh
    assert t.optimizer.num_update == 1


def test_bench_reports_the_guarded_step():
    """``mxopt bench``'s Trainer case times the guarded step beside the plain one."""
    from toolkit.tools import bench
    row = bench.trainer_case("cpu", [(8, 3), (40,)], 1, None)
    assert row["guarded_ms"] > 0 and row["guarded_of_floor"] > 0 and row["guard_cost"] > 0


def test_reference_backend_trainer_skips_bit_for_bit():
    """The per-parameter path (backend "reference") against its twin without the poisoned
    gradient (stale, ``ignore_stale_grad=True``)."""
    def run(guard):
        ps = [Parameter(n, init=np.linspace(-1, 1, 6).astype(np.float32)) for n in "abc"]
        t = Trainer(ps, "nadam", {"learning_rate": 0.1}, backend="reference")
        out = []
        for step in range(3):
            for k, p in enumerate(ps):
                g = np.linspace(-0.5, 0.5, 6).astype(np.float32) * (step + k + 1)
                if step == 1 and k == 1:
                    if not guard:
                        continue
                    g[2] = np.inf
                p.set_grad(g)
            out.append(t.step(2, skip_nonfinite=True) if guard else
                       t.step(2, ignore_stale_grad=step == 1))
        return out, [p.data().tobytes() for p in ps], t.optimizer.m_schedule
    skipped, got, schedule = run(True)
    assert skipped == [(), ("b",), ()]
    _, want, want_schedule = run(False)
    assert got == want and schedule == want_schedule
