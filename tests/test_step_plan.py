"""The vectorised step plan (issue 20, item 5; docs/trainer.md, "vectorised plan").

* ``Optimizer.step_scalars(indices)`` gives, as arrays, the ``(t, lr, wd)`` that the per-index
  loop (``next_step`` of each index, its count committed before the next) gives, bit for bit:
  every optimizer and convention, schedules (with warmup), ``begin_num_update``, indices
  stepped before (so that ``t`` and ``num_update`` differ along the list), multipliers from
  tables (by index and by name) and from ``param_dict``; it commits nothing, and
  ``commit_counts`` commits what the loop commits. Where the loop raises, it raises the same.
* A Trainer step through that plan equals the per-parameter updates bit for bit, with a
  schedule, multipliers, a stale parameter skipped and a parameter skipped by the non-finite
  guard (the plain case is test_trainer.py's twin test).
* The Trainer's step of a scalar-only optimizer does no Python work per parameter: the Python
  calls a step makes do not grow with the number of parameters (counted, not timed).
"""
from __future__ import annotations

import gc
import sys

import numpy as np
import pytest
from hypothesis import given, strategies as st

from toolkit import Parameter, Trainer, lr_scheduler, optimizer
from toolkit.optimizer import specs
from toolkit.optimizers.batched import Kept, StepScalars
from toolkit.optimizers.bookkeeping import Counts

NAMES = sorted(specs(oracle=True))


def _schedule(kind, warmup):
    if kind is None:
        return None
    if kind == "factor":
        return lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1, warmup_steps=warmup)
    if kind == "multifactor":
        return lr_scheduler.MultiFactorScheduler(step=[2, 5], factor=0.5, base_lr=0.1,
                                                 warmup_steps=warmup)
    if kind == "poly":
        return lr_scheduler.PolyScheduler(max_update=9, base_lr=0.1, pwr=2,
                                          warmup_steps=warmup)
    return lr_scheduler.CosineScheduler(max_update=9, base_lr=0.1, warmup_steps=warmup)


SCHEDULES = [None, "factor", "multifactor", "poly", "cosine"]


class _Holder:
    """A ``param_dict`` entry: what gluon's Parameter gives ``_get_lr``."""

    def __init__(self, lr_mult, wd_mult):
        self.lr_mult, self.wd_mult = lr_mult, wd_mult


def _bits(a):
    return np.asarray(a, np.float64).view(np.int64)


def _loop(opt, idx):
    """The definition: ``next_step`` index by index, each count committed before the next."""
    out = []
    for i in idx:
        t, lr, wd = opt.next_step(i)[:3]
        out.append((t, lr, wd))
        opt._commit_count(i, t)
    return out


@st.composite
def plans(draw):
    name = draw(st.sampled_from(NAMES))
    conv = draw(st.sampled_from(specs()[name].conventions))
    n = draw(st.integers(1, 12))
    kw = dict(convention=conv, wd=draw(st.sampled_from([0.0, 0.01, 1e-3])),
              begin_num_update=draw(st.integers(0, 3)))
    if name == "groupadagrad":
        kw["wd"] = 0.0
    sched = draw(st.sampled_from(SCHEDULES))
    if sched is not None:
        kw["lr_scheduler"] = _schedule(sched, draw(st.integers(0, 3)))
    else:
        kw["learning_rate"] = draw(st.sampled_from([0.1, 0.05, 1e-3]))
    names = {i: f"p{i}_{draw(st.sampled_from(['weight', 'bias']))}" for i in range(n)}
    mults = draw(st.sampled_from(["none", "tables", "param_dict"]))
    prior = draw(st.lists(st.integers(0, n - 1), max_size=3 * n))  # indices stepped before
    subset = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1)))
    lr_vals = st.sampled_from([0.5, 1.0, 1.25, 2.0])
    wd_vals = st.sampled_from([0.0, 0.5, 1.0])
    tables = (draw(st.dictionaries(st.integers(0, n - 1) | st.sampled_from(list(names.values())),
                                   lr_vals, max_size=n)),
              draw(st.dictionaries(st.integers(0, n - 1) | st.sampled_from(list(names.values())),
                                   wd_vals, max_size=n)))
    holders = [_Holder(draw(lr_vals), draw(wd_vals)) for _ in range(n)]
    return name, kw, names, mults, prior, subset, tables, holders


def _make(name, kw, names, mults, tables, holders):
    kw = dict(kw)
    if "lr_scheduler" in kw:  # a fresh schedule per optimizer: they keep state
        s = kw["lr_scheduler"]
        kw["lr_scheduler"] = type(s).__new__(type(s))
        kw["lr_scheduler"].__dict__.update({k: (list(v) if isinstance(v, list) else v)
                                            for k, v in s.__dict__.items()})
    opt = optimizer.create(name, param_idx2name=names, **kw)
    if mults == "tables":
        opt.set_lr_mult(tables[0])
        opt.set_wd_mult(tables[1])
    elif mults == "param_dict":
        opt.param_dict = dict(enumerate(holders))
    return opt


@given(plans(), st.booleans())
def test_step_scalars_are_the_per_index_loops_bit_for_bit(plan, as_array):
    name, kw, names, mults, prior, subset, tables, holders = plan
    vec = _make(name, kw, names, mults, tables, holders)
    ref = _make(name, kw, names, mults, tables, holders)
    for i in prior:  # the same history on both: counts differ along the list
        for opt in (vec, ref):
            try:
                opt._commit_count(i, opt.next_step(i).t)
            except ValueError:  # a schedule decayed to 0 (FTRL, FTML refuse it): the end
                return
    counts = (dict(vec._index_update_count), vec.num_update)
    try:
        want = _loop(ref, subset)
    except ValueError as e:  # the loop refuses: step_scalars raises its error, commits nothing
        with pytest.raises(ValueError) as got:
            vec.step_scalars(np.array(subset, np.int64) if as_array else subset)
        assert str(got.value) == str(e)
        assert (dict(vec._index_update_count), vec.num_update) == counts
        return
    got = vec.step_scalars(np.array(subset, np.int64))
    assert (dict(vec._index_update_count), vec.num_update) == counts  # nothing committed
    assert got.t.dtype == np.int64 and got.t.tolist() == [w[0] for w in want]
    assert np.array_equal(_bits(got.lr), _bits([w[1] for w in want]))
    assert np.array_equal(_bits(got.wd), _bits([w[2] for w in want]))
    # committed as the Trainer commits them (an int64 array: the counts' array path) or a list
    vec.commit_counts(np.array(subset, np.int64) if as_array else subset, got.t)
    assert (vec._index_update_count, vec.num_update) == (ref._index_update_count,
                                                         ref.num_update)


def test_the_vectorised_path_is_taken_where_it_applies():
    """Not the per-index fallback in the common cases (else the test above proves nothing about
    the vectorised code): with the toolkit's schedules and multipliers of every kind."""
    for sched in SCHEDULES:
        opt = optimizer.create("adam", lr_scheduler=_schedule(sched, 2),
                               **({} if sched else {"learning_rate": 0.1}))
        opt.set_lr_mult({0: 2.0})
        opt._scalars_per_index = None  # calling it fails
        opt.step_scalars([0, 1, 2])


@pytest.mark.parametrize("name", ["ftrl", "adam"])
def test_refusals_are_the_per_index_loops(name):
    """A value the loop refuses (FTRL divides by the learning rate; a NaN multiplier) raises the
    loop's error, naming the first index it would, and commits nothing."""
    opt = optimizer.create(name, learning_rate=0.1)
    opt.param_dict = {0: _Holder(1.0, 1.0), 1: _Holder(0.0 if name == "ftrl" else float("nan"),
                                                        1.0), 2: _Holder(1.0, 1.0)}
    with pytest.raises(ValueError) as vec:
        opt.step_scalars([0, 1, 2])
    with pytest.raises(ValueError) as loop:
        _loop(opt, [0, 1, 2])
    assert str(vec.value) == str(loop.value) and "index 1" in str(vec.value)


class _CountingSchedule:
    """A schedule of the user's own that counts how often it is read: MXNet reads it once per
    index, and so does the plan."""

    def __init__(self):
        self.base_lr, self.calls = 0.1, 0

    def __call__(self, num_update):
        self.calls += 1
        return 0.1 / num_update


def test_a_schedule_of_the_users_own_is_read_once_per_index():
    opt = optimizer.create("sgd", lr_scheduler=_CountingSchedule())
    got = opt.step_scalars(range(5))
    assert opt.lr_scheduler.calls == 5
    assert got.lr.tolist() == [0.1] * 5


# --------------------------------------------------------------------------------------------
# the Trainer
# --------------------------------------------------------------------------------------------
SHAPES = [(3, 4), (5,), (2, 3), (1,), (7,), (4,)]
MATRIX = [(3, 4), (5, 1), (2, 3), (1, 3), (7, 2), (4, 1)]
LR_MULT = (1.0, 1.25, 1.0, 1.25, 1.5, 1.0)
WD_MULT = (0.0, 0.5, 0.0, 0.5, 1.0, 0.0)
STALE = {1: (2,)}       # step 1: parameter 2 has no new gradient (ignore_stale_grad)
NONFINITE = {2: (3,)}   # step 2: parameter 3's gradient holds a NaN (skip_nonfinite)


@pytest.mark.parametrize("name", NAMES)
def test_the_planned_step_equals_per_parameter_updates_with_schedule_and_skips(name):
    for conv in specs()[name].conventions:
        rng = np.random.default_rng(1)
        shapes = MATRIX if specs()[name].matrix else SHAPES
        init = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        wd = specs()[name].fixed.get("wd", 0.01)
        common = dict(wd=wd, rescale_grad=1.0, clip_gradient=3.0, convention=conv)
        params = [Parameter(f"p{i}_weight", init=a, lr_mult=LR_MULT[i], wd_mult=WD_MULT[i])
                  for i, a in enumerate(init)]
        trainer = Trainer(params, name, dict(common, lr_scheduler=_schedule("factor", 2)))
        twin = optimizer.create(name, lr_scheduler=_schedule("factor", 2), **common)
        twin.param_dict = dict(enumerate(params))
        ws = [a.copy() for a in init]
        ss = [twin.create_state(i, w) for i, w in enumerate(ws)]
        for step in range(6):
            grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
            for i in NONFINITE.get(step, ()):
                grads[i].flat[0] = np.nan
            for i, (p, g) in enumerate(zip(params, grads)):
                if i not in STALE.get(step, ()):
                    p.set_grad(g)
            skipped = trainer.step(1, ignore_stale_grad=True, skip_nonfinite=True)
            assert skipped == tuple(params[i].name for i in NONFINITE.get(step, ()))
            for i, g in enumerate(grads):
                if i not in STALE.get(step, ()) and i not in NONFINITE.get(step, ()):
                    twin.update(i, ws[i], g, ss[i])
            for i, p in enumerate(params):
                assert np.array_equal(p.data(), ws[i]), (conv, step, p.name)
        assert trainer.optimizer._index_update_count == twin._index_update_count
        assert trainer.optimizer.num_update == twin.num_update


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype, mp", [(np.float32, False), (np.float16, True),
                                       (np.float16, False)])
def test_a_step_whose_members_share_one_row_runs_over_the_whole_buffers(name, dtype, mp,
                                                                         monkeypatch):
    """Every member updated with the same ``(t, lr, wd)`` (no multipliers, no stale
    parameter): an element-wise optimizer's one call runs over the group's flat buffers as one
    segment (``Group.whole_chunks``: chunks that cross the members' boundaries), and its
    weights and states are the per-parameter updates', bit for bit (float16 rounded back from
    the master, or from the float32 arithmetic, in one conversion). A step that leaves a
    member out (stale) runs over the members' own chunks, and equals them too."""
    from toolkit.backends import cpu
    whole = []
    real = cpu.run_segmented

    def spy(factory, weight, grad, states, table, chunks):
        whole.append(table.shape[0] == 1)
        return real(factory, weight, grad, states, table, chunks)
    monkeypatch.setattr(cpu, "run_segmented", spy)
    spec = specs()[name]
    shapes = MATRIX if spec.matrix else SHAPES
    rng = np.random.default_rng(7)
    init = [(rng.standard_normal(s) * 0.5).astype(dtype) for s in shapes]
    common = dict(learning_rate=0.05, wd=spec.fixed.get("wd", 0.01), rescale_grad=1.0,
                  clip_gradient=3.0, multi_precision=mp)
    params = [Parameter(f"p{i}_weight", init=a, dtype=dtype) for i, a in enumerate(init)]
    trainer = Trainer(params, name, dict(common))
    twin = optimizer.create(name, **common)
    ws = [a.copy() for a in init]
    ss = [twin.create_state_multi_precision(i, w) for i, w in enumerate(ws)]
    vectorised = trainer.optimizer.plans_by_scalars and not trainer.optimizer.takes_norms
    for step in range(4):
        stale = (1,) if step == 2 else ()
        grads = [(rng.standard_normal(s) * 0.5).astype(dtype) for s in shapes]
        for i, (p, g) in enumerate(zip(params, grads)):
            if i not in stale:
                p.set_grad(g)
        del whole[:]
        trainer.step(1, ignore_stale_grad=True)
        for i, g in enumerate(grads):
            if i not in stale:
                twin.update_multi_precision(i, ws[i], g, ss[i])
        for i, p in enumerate(params):
            assert np.array_equal(_as_bits(p.data()), _as_bits(ws[i])), (step, p.name)
        if vectorised and whole and step < 3:  # one call: over the whole buffers unless
            # stale (after the skip, parameter 1's count lags: whole again only where the
            # rows do not depend on the count)
            assert whole == [not stale], (step, whole)
    if vectorised and spec.name not in ("sgld",):
        assert trainer.last_step_launches == 1


def _as_bits(a):
    a = np.asarray(a)
    return a.view(np.uint16) if a.dtype == np.float16 else a.view(np.uint32)


def _python_calls(fn):
    """How many Python functions run while ``fn()`` does (the garbage collector held off:
    when it runs, and the finalisers it calls, is not the step's work)."""
    count = [0]

    def prof(frame, event, arg):
        if event == "call":
            count[0] += 1
    # no gc.collect() first: with the collector off nothing it would free is freed meanwhile
    # (a full collection of a process that imported torch took seconds, each call)
    gc.disable()
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
        gc.enable()
    return count[0]


@pytest.mark.parametrize("name", [n for n in NAMES if optimizer.create(n).plans_by_scalars])
def test_a_step_does_no_python_work_per_parameter(name):
    """The Python calls of a step (second and later: the first lays out caches) are the same for
    10 and 300 parameters, with multipliers set, once a multiplier changed (read once), on a
    step that skips a stale parameter and on a step with the non-finite guard."""
    def run(n):
        shape = (2, 3) if specs()[name].matrix else (6,)
        params = [Parameter(f"p{i}", init=np.full(shape, 0.5, np.float32),
                            lr_mult=1.0 + (i % 3)) for i in range(n)]
        trainer = Trainer(params, name, {"learning_rate": 0.1, "wd": 0.0})
        counts = []
        for step in range(5):
            if step == 2:
                params[1].lr_mult = 3.0
            for p in params[1:] if step == 3 else params:
                p.grad()[...] = 0.25
            guard = step == 4  # the non-finite guard's pass, nothing to skip
            counts.append(_python_calls(lambda: trainer.step(1, ignore_stale_grad=True,
                                                             skip_nonfinite=guard)))
            assert trainer.last_step_launches == 1
        return counts[1:]
    run(5)  # the same values once before: memoised roundings then cost the same in both runs
    small, large = run(10), run(300)
    assert small[0] == large[0] and small[2] == large[2] and small[3] == large[3], (small, large)
    # a changed multiplier reads the parameters' multipliers once: one property read each
    assert large[1] - small[1] == 2 * (300 - 10)


def test_setting_a_hyperparameter_keeps_nadams_momentum_schedule():
    """Found by the planned-step test above: Nadam's running product ``m_schedule`` was reset to
    1 by every later hyperparameter assignment (its reset sat in ``check_relations``), so a
    Trainer, which sets ``rescale_grad`` each step, restarted it every step. MXNet sets it once,
    in ``__init__``."""
    opt = optimizer.create("nadam", learning_rate=0.1)
    w, g = np.ones(3, np.float32), np.full(3, 0.5, np.float32)
    state = opt.create_state(0, w)
    opt.update(0, w, g, state)
    after_one = opt.m_schedule
    assert after_one < 1.0
    opt.rescale_grad = 0.5
    opt.wd = 0.01
    assert opt.m_schedule == after_one


# --------------------------------------------------------------------------------------------
# found by the hostile review of the vectorised bookkeeping
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("indices", [[0, 0], [2, 0, 2], [3, -1], [7, 3, 0], [1, True]])
@pytest.mark.parametrize("as_array", [True, False])
def test_repeated_and_unordered_indices_are_the_loops(indices, as_array):
    """An index given twice was read twice from the counts as they were (``t`` the same
    twice, where the loop commits the first before reading the second), and an unordered array
    with a negative index read another index's count: both are the loop's now."""
    def make():
        opt = optimizer.create("adam", learning_rate=0.1,
                               lr_scheduler=lr_scheduler.FactorScheduler(step=1, factor=0.5,
                                                                         base_lr=0.1))
        for i, t in ((0, 2), (7, 5), (1, 1)):
            opt._commit_count(i, t)
        return opt
    vec, ref = make(), make()
    got = vec.step_scalars(np.array(indices, np.int64) if as_array else indices)
    want = _loop(ref, indices)
    assert got.t.tolist() == [w[0] for w in want]
    assert np.array_equal(_bits(got.lr), _bits([w[1] for w in want]))
    assert np.array_equal(_bits(got.wd), _bits([w[2] for w in want]))


@pytest.mark.parametrize("mult", [np.float32(0.1), np.float16(0.3), np.float64(0.7), 3])
def test_numpy_multipliers_assigned_to_the_tables_are_the_loops(mult):
    """Multipliers assigned to ``lr_mult``/``wd_mult`` directly (as MXNet code does, bypassing
    ``set_lr_mult``'s float conversion) as numpy float32 made the per-index loop's product a
    float32 one (NumPy 2's promotion of a Python float with a numpy float32), where
    ``step_scalars`` (and MXNet, on the NumPy 1 of its time) multiply in float64."""
    vec = optimizer.create("adam", learning_rate=0.1, wd=0.01)
    ref = optimizer.create("adam", learning_rate=0.1, wd=0.01)
    for opt in (vec, ref):
        opt.lr_mult = {0: mult}
        opt.wd_mult = {0: mult}
    got = vec.step_scalars(np.array([0, 1], np.int64))
    want = _loop(ref, [0, 1])
    assert np.array_equal(_bits(got.lr), _bits([w[1] for w in want]))
    assert np.array_equal(_bits(got.wd), _bits([w[2] for w in want]))
    assert [type(w[1]) for w in want] == [float, float]
    assert want[0][1] == 0.1 * float(mult) and want[0][2] == 0.01 * float(mult)


def _factor():
    return lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=1.0)


def test_a_refused_step_leaves_the_schedule_as_it_was():
    """``step_scalars`` read the toolkit's (stateful) schedule at every count of the step
    before it found the value the loop refuses, so a refused step left the schedule decayed to
    a count no step took: the next step of an index behind the others read that decayed rate.
    Now the schedule is as it was, and the next step reads what it reads without the refused
    one."""
    def make():
        opt = optimizer.create("ftrl", lr_scheduler=_factor())
        opt._commit_count(1, 5)  # index 0 behind: its step does not move num_update
        return opt
    opt, fresh = make(), make()
    before = opt.lr_scheduler.state_dict()
    opt.lr_mult = {0: 0.0}  # FTRL refuses a learning rate of 0 (index 0, read first)
    with pytest.raises(ValueError, match="index 0"):
        opt.step_scalars(np.array([0, 1], np.int64))
    assert opt.lr_scheduler.state_dict() == before
    opt.lr_mult = {}
    got, want = opt.step_scalars(np.array([0], np.int64)), fresh.step_scalars([0])
    assert np.array_equal(_bits(got.lr), _bits(want.lr))


@pytest.mark.parametrize("name", ["adam", "nadam"])
def test_a_failed_trainer_step_leaves_the_schedule_as_it_was(name):
    """A Trainer step refused at its second parameter (a NaN multiplier) leaves the optimizer
    as it was, its schedule's state included (the vectorised plan, and the per-index plan of
    ``restored_on_error``). A Parameter refuses a NaN ``lr_mult``; a ``param_dict`` entry of
    the user's own (MXNet's optimizers read any object with the two attributes) still holds
    one."""
    params = [Parameter(f"p{i}", init=np.ones(3, np.float32)) for i in range(2)]
    trainer = Trainer(params, optimizer.create(name, lr_scheduler=_factor()))
    for p in params:
        p.grad()[...] = 0.5
    trainer.step(1)
    before = (trainer.optimizer.lr_scheduler.state_dict(), trainer.optimizer.update_counts)
    trainer.optimizer.param_dict[1] = _Holder(float("nan"), 1.0)
    for p in params:
        p.grad()[...] = 0.5
    with pytest.raises(ValueError, match="index 1"):
        trainer.step(1)
    assert (trainer.optimizer.lr_scheduler.state_dict(), trainer.optimizer.update_counts) == \
        before


class _Halving:
    """A schedule of the user's own that keeps state per call (it halves at every read): its
    numbers tell how often it was read. MXNet reads it once per index and update."""

    def __init__(self):
        self.base_lr = self.lr = 0.1

    def __call__(self, num_update):
        self.lr *= 0.5
        return self.lr


class _Constant:
    """A schedule of the user's own that counts its reads (a constant rate)."""

    def __init__(self):
        self.base_lr, self.calls = 0.01, 0

    def __call__(self, num_update):
        self.calls += 1
        return 0.01


@pytest.mark.parametrize("name", NAMES)
def test_the_reference_backend_reads_a_users_schedule_as_often_as_the_kernels(name):
    """The shared reference step read the schedule a second time in every update
    (``next_step``, for the oracle's extra state), so a schedule of the user's own that keeps
    state gave the reference backend other learning rates than the CPU kernels. LARS, whose
    reference step is its own, read it three times to the kernels' two; both now read it
    once per update, as MXNet's ``_get_lrs`` does (the test below)."""
    reads = []
    for backend in ("cpu", "reference"):
        opt = optimizer.create(name, backend=backend)
        opt.lr_scheduler = _Constant()
        shape = (2, 3) if specs()[name].matrix else (6,)
        w = np.full(shape, 0.5, np.float32)
        state = opt.create_state(0, w)
        for _ in range(2):
            opt.update(0, w, np.full(shape, 0.25, np.float32), state)
        reads.append(opt.lr_scheduler.calls)
    assert reads[0] == reads[1], reads


@pytest.mark.parametrize("name, backend", [(n, b) for b in ("cpu", "reference") for n in NAMES])
def test_a_trainer_step_reads_a_users_schedule_as_the_updates_do(name, backend):
    """LAMB's first pass (``norm_inputs``) read the schedule before the step's planning read it
    again, so a Trainer step of LAMB with a schedule that keeps state per call took other
    learning rates than the per-parameter updates it stands for. On the reference backend
    (and every per-parameter path: row-sparse gradients, an optimizer without a kernel) the
    checks before the first write read the schedule, and each update read it again: the rates
    were halved twice as often. The updates now get the rates the checks read. (LARS's own
reads of the schedule, for its momentum correction, came after the checks' and failed on the
reference backend too, until LARS read it once per update.)"""
    shapes = MATRIX if specs()[name].matrix else SHAPES
    rng = np.random.default_rng(3)
    init = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    params = [Parameter(f"p{i}_weight", init=a) for i, a in enumerate(init)]
    trainer = Trainer(params, name, {"learning_rate": 0.1}, backend=backend)
    trainer.optimizer.lr_scheduler = _Halving()
    twin = optimizer.create(name, learning_rate=0.1, backend=backend)
    twin.lr_scheduler = _Halving()
    twin.param_dict = dict(enumerate(params))
    ws = [a.copy() for a in init]
    ss = [twin.create_state(i, w) for i, w in enumerate(ws)]
    for step in range(3):
        grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        for p, g in zip(params, grads):
            p.set_grad(g)
        trainer.step(1)
        for i, g in enumerate(grads):
            twin.update(i, ws[i], g, ss[i])
        for i, p in enumerate(params):
            assert np.array_equal(p.data(), ws[i]), (step, p.name)


def _steps_beside_the_loop(change, name="sgd", steps=2, mults=True):
    """Steps of a Trainer over three parameters with multipliers (``mults``; else all 1) and
    of a twin optimizer updating them one by one, ``change(trainer's optimizer, twin)`` made
    before the second; the weights must agree after each."""
    params = [Parameter(f"p{i}_weight", init=np.ones(3, np.float32),
                        lr_mult=1.0 + i if mults else 1.0, wd_mult=0.5 * i if mults else 1.0)
              for i in range(3)]
    trainer = Trainer(params, name, {"learning_rate": 0.1, "wd": 0.01})
    twin = optimizer.create(name, learning_rate=0.1, wd=0.01)
    twin.param_dict = dict(enumerate(params))
    ws = [np.ones(3, np.float32) for _ in params]
    ss = [twin.create_state(i, w) for i, w in enumerate(ws)]
    for step in range(steps):
        if step == 1:
            change(trainer.optimizer, twin)
        for i, p in enumerate(params):
            p.grad()[...] = 0.5
            twin.update(i, ws[i], np.full(3, 0.5, np.float32), ss[i])
        trainer.step(1)
        for i, p in enumerate(params):
            assert np.array_equal(p.data(), ws[i]), (step, p.name)


def test_a_param_dict_whose_keys_changed_is_read_index_by_index():
    """The Trainer kept its parameters' multipliers while the optimizer's ``param_dict`` held
    the same parameters in the same order; a ``param_dict`` whose keys changed (index 2's
    parameter moved to key 99: index 2 then takes the tables' multipliers, 1.0) kept them too,
    so the step used parameter 2's multipliers where the per-parameter update did not."""
    def move(mine, twin):
        for opt in (mine, twin):
            opt.param_dict[99] = opt.param_dict.pop(2)
    _steps_beside_the_loop(move)


def _swap_setitem(pd, holder):
    pd[1] = holder


def _swap_update(pd, holder):
    pd.update({1: holder})


def _swap_ior(pd, holder):
    pd |= {1: holder}


def _swap_pop(pd, holder):
    pd.pop(1)
    dict.__setitem__(pd, 1, holder)  # the pop alone is what must be seen


def _swap_del(pd, holder):
    del pd[1]
    dict.__setitem__(pd, 1, holder)


def _swap_clear(pd, holder):
    items = dict(pd, **{})
    pd.clear()
    for k, v in items.items():
        dict.__setitem__(pd, k, holder if k == 1 else v)


def _swap_setdefault(pd, holder):
    pd.pop(1)
    pd.setdefault(1, holder)


def _swap_popitem(pd, holder):
    k, v = pd.popitem()
    dict.__setitem__(pd, k, v)
    dict.__setitem__(pd, 1, holder)


@pytest.mark.parametrize("swap", [_swap_setitem, _swap_update, _swap_ior, _swap_pop, _swap_del,
                                  _swap_clear, _swap_setdefault, _swap_popitem])
def test_every_change_of_the_trainers_param_dict_is_read(swap):
    """The Trainer keeps its parameters' multipliers while the optimizer's ``param_dict`` (a
    ``ParamDict`` that counts its changes) is unchanged; a change through any of the dict's
    methods (here index 1's entry replaced by a holder of other multipliers) is read at the
    next step, as the per-parameter update reads it."""
    def change(mine, twin):
        holder = _Holder(4.0, 3.0)
        swap(mine.param_dict, holder)
        twin.param_dict[1] = holder
    _steps_beside_the_loop(change)


def test_a_param_dict_that_is_a_mapping_but_not_a_dict_is_read():
    """MXNet reads ``param_dict`` with ``in`` and ``[]``, so any mapping works there; a
    ``param_dict`` that was a mapping but not a dict (a ``collections.UserDict``, a
    ``types.MappingProxyType``) was ignored: its multipliers were never applied, by ``update``
    and ``step_scalars`` alike."""
    import collections
    import types
    for wrap in (collections.UserDict, types.MappingProxyType):
        opt = optimizer.create("sgd", learning_rate=0.1, wd=0.01)
        opt.param_dict = wrap({0: _Holder(0.5, 2.0)})
        want = _loop(optimizer.create("sgd", learning_rate=0.1, wd=0.01), [0])
        got = opt.step_scalars([0, 1])
        assert got.lr.tolist() == [0.1 * 0.5, 0.1] and got.wd.tolist() == [0.01 * 2.0, 0.01]
        assert opt.next_step(0)[1:3] == (0.1 * 0.5, 0.01 * 2.0) != want[0][1:]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_a_weight_decay_the_loop_cannot_take_is_refused_before_anything_is_written(bad):
    """A weight-decay multiplier set after construction (a ``param_dict`` entry of the user's
    own, or a table assigned directly) went unchecked: the step wrote NaN weights, where the
    learning rate of the same multiplier is refused. Now the weight decay is checked as the
    learning rate is (finite, >= 0), by ``update`` and the Trainer alike, before anything is
    written, naming the index. (A Parameter's own setter refuses it when set.)"""
    params = [Parameter(f"p{i}_weight", init=np.ones(3, np.float32)) for i in range(2)]
    trainer = Trainer(params, "sgd", {"learning_rate": 0.1, "wd": 0.01})
    with pytest.raises(ValueError, match="wd_mult must be a finite number >= 0"):
        params[1].wd_mult = bad
    trainer.optimizer.param_dict[1] = _Holder(1.0, bad)
    for p in params:
        p.grad()[...] = 0.5
    with pytest.raises(ValueError, match="weight decay for index 1"):
        trainer.step(1)
    assert all((p.data() == 1).all() for p in params)
    assert trainer.optimizer.update_counts == {}
    opt = optimizer.create("sgd", learning_rate=0.1, wd=0.01)
    opt.wd_mult = {0: bad}
    w = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="weight decay for index 0"):
        opt.update(0, w, np.ones(3, np.float32), None)
    with pytest.raises(ValueError, match="weight decay for index 0"):
        opt.step_scalars(np.array([0], np.int64))
    assert (w == 1).all() and opt.update_counts == {}


def test_a_refused_index_before_a_schedule_that_raises_is_the_loops_error():
    """The loop reads index by index: a refused multiplier of the first index raises before
    the schedule is read at the count of a later index. The plan read the schedule at every
    count first, so a schedule that raises there (the toolkit's base ``LRScheduler`` past its
    warmup) raised its own error instead of the loop's."""
    def make():
        sched = lr_scheduler.LRScheduler(base_lr=0.1, warmup_steps=6)
        opt = optimizer.create("ftrl", lr_scheduler=sched)
        opt._commit_count(1, 5)  # num_update 5: index 1's step reads the schedule at 6
        opt.lr_mult = {0: 0.0}   # FTRL refuses index 0's learning rate of 0
        return opt
    with pytest.raises(ValueError, match="index 0") as vec:
        make().step_scalars(np.array([0, 1], np.int64))
    with pytest.raises(ValueError, match="index 0") as loop:
        _loop(make(), [0, 1])
    assert str(vec.value) == str(loop.value)


def test_a_skipped_update_leaves_the_schedule_as_it_was():
    """``update(..., skip_nonfinite=True)`` checks a skipped call's scalars as the update
    would, and that read the toolkit's (stateful) schedule at the skipped index's count: an
    index ahead of the others decayed FactorScheduler with no step taken, so the next update
    of an index behind read a decayed rate that the Trainer's step (which reads nothing for a
    skipped parameter) did not."""
    shape = (3,)
    params = [Parameter(f"p{i}", init=np.ones(shape, np.float32)) for i in range(2)]
    trainer = Trainer(params, optimizer.create("sgd", lr_scheduler=_factor()))
    twin = optimizer.create("sgd", lr_scheduler=_factor())
    ws = [np.ones(shape, np.float32) for _ in params]
    good, bad = np.full(shape, 0.5, np.float32), np.full(shape, np.nan, np.float32)
    # index 1 steps 3 times alone (index 0 stale), then index 1's gradient is non-finite
    for step, grads in enumerate([(None, good)] * 3 + [(good, bad), (good, good)]):
        for i, g in enumerate(grads):
            if g is not None:
                params[i].set_grad(g)
                twin.update(i, ws[i], g, None, skip_nonfinite=True)
        trainer.step(1, ignore_stale_grad=True, skip_nonfinite=True)
        for i, p in enumerate(params):
            assert np.array_equal(p.data(), ws[i]), (step, p.name)
    assert twin.lr_scheduler.state_dict() == trainer.optimizer.lr_scheduler.state_dict()


def test_a_step_refused_after_its_scalars_leaves_the_schedule_as_it_was():
    """A Trainer step planned parameter by parameter (a row-sparse gradient) checks every
    parameter first: the scalars of all (the schedule read at their counts), then each
    row-sparse gradient's refusals (AdaGrad refuses one with weight decay). A refusal there
    left the toolkit's schedule decayed to the counts of a step that was not taken."""
    from toolkit import RowSparse
    params = [Parameter("a", init=np.ones((4, 2), np.float32)),
              Parameter("b", init=np.ones((4, 2), np.float32), grad_stype="row_sparse")]
    opt = optimizer.create("adagrad", wd=0.01, begin_num_update=3, lr_scheduler=_factor())
    trainer = Trainer(params, opt)
    before = opt.lr_scheduler.state_dict()
    params[0].grad()[...] = 0.5
    params[1].set_grad(RowSparse(np.array([1]), np.full((1, 2), 0.5, np.float32), (4, 2)))
    with pytest.raises(ValueError, match="(?i)adagrad"):
        trainer.step(1)
    assert opt.lr_scheduler.state_dict() == before and opt.update_counts == {}
    assert all((p.data() == 1).all() for p in params)


# --- what a step keeps for the next one ----------------------------------------------------
# A step of a Kept index array (the Trainer's, every parameter fresh) keeps what it committed
# and the rates it made, so that the next step of the same one reads them back without a
# check. Whatever happens in between, the next step must still be the loop's.


EVENT_NAMES = ["set a count", "delete a count", "restore the counts", "replace the counts",
               "replace the counts, one a float", "counts as a dict", "step another kept",
               "set lr", "set lr again", "set wd", "new multipliers", "schedule", "no schedule",
               "a count assigned as a float", "step a subset"]
EVENTS = st.sampled_from(["step"] * 4 + EVENT_NAMES)


@given(st.sampled_from(NAMES), st.integers(1, 6), st.booleans(), st.lists(EVENTS, max_size=14),
       st.randoms(use_true_random=False))
def test_what_a_step_keeps_for_the_next_is_the_loops_whatever_happens_between(
        name, n, with_mults, events, rnd):
    _history(name, n, with_mults, events, rnd)


@pytest.mark.parametrize("event", EVENT_NAMES)
@pytest.mark.parametrize("name", ["adam", "sgd", "ftml"])
def test_each_change_between_two_kept_steps_is_read(event, name):
    """Each change after two steps of the kept path (the history test draws them at random;
    here each one surely, twice over)."""
    import random
    _history(name, 4, True, ["step", event, "step", event], random.Random(7), contiguous=True)


def _history(name, n, with_mults, events, rnd, contiguous=None):
    """Steps of a read-only index array through ``step_scalars`` and ``commit_counts`` beside
    the per-index loop, ``events`` between them; after each, the same counts."""
    conv = specs()[name].conventions[0]
    kw = dict(convention=conv, learning_rate=0.1, wd=0.0 if name == "groupadagrad" else 0.01)
    vec, ref = (optimizer.create(name, **kw) for _ in range(2))
    if contiguous is None:
        contiguous = rnd.random() < 0.7
    idx = np.arange(n) if contiguous else np.arange(1, 2 * n, 2)
    kept = Kept(idx)
    holders = [_Holder(1.0, 1.0) for _ in idx.tolist()]
    mults = None

    def set_mults():
        nonlocal mults
        for h in holders:
            h.lr_mult, h.wd_mult = rnd.choice([1.0, 0.5, 2.0]), rnd.choice([1.0, 0.0, 0.5])
        size = int(idx[-1]) + 1
        lr_m, wd_m = np.ones(size), np.ones(size)
        for i, h in zip(idx.tolist(), holders):
            lr_m[i], wd_m[i] = h.lr_mult, h.wd_mult
        mults = (Kept(lr_m, np.float64), Kept(wd_m, np.float64))
        # what the arrays hold, as the Trainer's param_dict gives it (the per-index path reads it)
        vec.param_dict = dict(zip(idx.tolist(), holders))
        ref.param_dict = dict(zip(idx.tolist(), holders))

    if with_mults:
        set_mults()
    for event in ["step"] + events + ["step", "step"]:
        if event == "step":
            try:
                want = _loop(ref, idx.tolist())
            except ValueError as e:
                with pytest.raises(ValueError) as got:
                    vec.step_scalars(kept, multipliers=mults)
                assert str(got.value) == str(e)
                return
            got = vec.step_scalars(kept, multipliers=mults)
            assert got.t.tolist() == [w[0] for w in want]
            assert np.array_equal(_bits(got.lr), _bits([w[1] for w in want]))
            assert np.array_equal(_bits(got.wd), _bits([w[2] for w in want]))
            first, inverse = got.distinct()
            key = [(w[0], *_bits(w[1:3]).tolist()) for w in want]
            assert len(first) == len(set(key))  # one planned row per distinct (t, lr, wd)
            if inverse is not None:
                assert [key[first[k]] for k in inverse.tolist()] == key
            vec.commit_counts(kept, got.t)
        elif event == "step another kept":
            other = Kept(idx[1:] if len(idx) > 1 else idx)
            want = _loop(ref, other.values().tolist())
            got = vec.step_scalars(other)
            assert got.t.tolist() == [w[0] for w in want]
            vec.commit_counts(other, got.t)
        elif event == "counts as a dict":
            for opt in (vec, ref):
                opt._index_update_count = dict(opt._index_update_count)
        elif event == "step a subset":
            sub = idx.tolist()[::2]
            for opt in (vec, ref):
                opt.commit_counts(sub, np.array([opt.next_step(i).t for i in sub], np.int64))
        elif event in ("set a count", "a count assigned as a float"):
            i = rnd.choice(idx.tolist())
            v = rnd.randrange(0, 9)
            for opt in (vec, ref):
                opt._index_update_count[i] = float(v) if event.startswith("a count") else v
        elif event == "delete a count":
            i = rnd.choice(idx.tolist())
            for opt in (vec, ref):
                opt._index_update_count.pop(i, None)
        elif event == "restore the counts":
            for opt in (vec, ref):
                opt.restore_counts({i: 4 for i in idx.tolist()}, 4)
        elif event in ("replace the counts", "replace the counts, one a float"):
            # another Counts (whose write numbers are never the old one's): without the last
            # index's count, or with it as a float (in its dict)
            for opt in (vec, ref):
                new = Counts()
                new.scatter(idx[:-1], np.full(len(idx) - 1, 6, np.int64))
                if event.endswith("float"):
                    new[int(idx[-1])] = 5.0
                opt._index_update_count = new
        elif event in ("set lr", "set lr again"):
            lr = float(repr(vec.lr)) if event == "set lr again" else rnd.choice([0.05, 0.2])
            for opt in (vec, ref):
                if opt.lr_scheduler is None:
                    opt.set_learning_rate(lr)
        elif event == "set wd" and name != "groupadagrad":
            wd = rnd.choice([0.0, 0.02, 0.5])
            for opt in (vec, ref):
                opt.wd = wd
        elif event == "new multipliers" and with_mults:
            set_mults()
        elif event == "schedule":
            for opt in (vec, ref):
                opt.lr_scheduler = lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1)
        elif event == "no schedule":
            for opt in (vec, ref):
                opt.lr_scheduler = None
        mine, theirs = vec._index_update_count, ref._index_update_count
        assert (list(mine.items()), len(mine), vec.num_update) == (
            list(theirs.items()), len(theirs), ref.num_update), event


def test_a_count_deleted_between_the_scalars_and_their_commit_is_committed_again():
    """Counts written between ``step_scalars`` and ``commit_counts`` of the kept path: the
    commit writes every index's count as the loop's would, and the mapping counts them all."""
    opt = optimizer.create("adam", learning_rate=0.1)
    idx = Kept(range(5))
    for _ in range(2):
        opt.commit_counts(idx, opt.step_scalars(idx).t)
    got = opt.step_scalars(idx)
    del opt._index_update_count[0]
    opt._index_update_count[9] = 1
    opt.commit_counts(idx, got.t)
    assert dict(opt._index_update_count) == {**{i: 3 for i in range(5)}, 9: 3 - 2}
    assert len(opt._index_update_count) == 6


def test_a_step_of_the_same_kept_indices_reads_back_what_it_kept():
    """The second step of a Kept index array takes the kept path: its scalars are one triple
    without a table of keys; what it returns cannot be made writeable (a caller cannot change
    what is kept); an equal plain array is never kept."""
    opt = optimizer.create("adam", learning_rate=0.1)
    idx = Kept(range(5))
    for _ in range(2):
        got = opt.step_scalars(idx)
        opt.commit_counts(idx, got.t)
    got = opt.step_scalars(idx)
    assert type(got).distinct is not type(opt.step_scalars(list(range(5)))).distinct
    assert got.t.tolist() == [3] * 5
    for a in got:
        with pytest.raises(ValueError):
            a.setflags(write=True)
    plain = np.arange(5)
    plain.setflags(write=False)
    opt.commit_counts(plain, opt.step_scalars(plain).t)
    assert "_committed" in opt.__dict__ and opt.__dict__["_committed"].kept is idx
    assert type(got._replace(lr=np.array([0.1, 0.2, 0.1, 0.1, 0.1]))).distinct is \
        StepScalars.distinct  # other values: no longer known to be one triple


def test_kept_holds_its_own_copy():
    values = np.arange(4)
    kept = Kept(values)
    values[0] = 9
    assert kept.values().tolist() == [0, 1, 2, 3] and len(kept) == 4
    kept.values()[1] = 7
    assert kept.values().tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="1-D"):
        Kept([[1, 2]])


def _set_count(opt, twin):
    for o in (opt, twin):
        o._index_update_count[1] = 7


def _restore_counts(opt, twin):
    for o in (opt, twin):
        o.restore_counts({0: 3, 1: 1, 2: 5}, 5)


def _set_lr(opt, twin):
    for o in (opt, twin):
        o.set_learning_rate(0.25)


def _set_wd(opt, twin):
    for o in (opt, twin):
        o.wd = 0.5


def _set_a_multiplier(opt, twin):
    opt.param_dict[2].lr_mult = 4.0  # the twin reads the same parameter


@pytest.mark.parametrize("change", [_set_count, _restore_counts, _set_lr, _set_wd,
                                    _set_a_multiplier])
def test_a_trainer_step_after_a_change_to_what_the_last_step_kept_is_the_loops(change):
    """The Trainer's second step reads back what its first kept (every parameter fresh: the
    same read-only index array); a change in between is read, as the per-parameter loop
    reads it."""
    # Adam's rows read t; every multiplier 1: one row, until the change
    _steps_beside_the_loop(change, "adam", steps=4, mults=False)


def test_schedule_read_once_answers_a_repeated_index_and_count_from_the_first_read():
    """``Optimizer.schedule_read_once``: within it a user's schedule is read once per (index,
    count), later reads of the same get the first one's rate, other indices and counts are
    read; a toolkit schedule (a function of the count) is read as usual; after the block,
    even one that raised, every read reaches the schedule again."""
    opt = optimizer.create("sgd", learning_rate=0.1)
    opt.lr_scheduler = sched = _Halving()
    with opt.schedule_read_once():
        first = opt._get_lr(0, 1)
        assert opt._get_lr(0, 1) == first == 0.05 and sched.lr == 0.05  # read once
        assert opt._get_lr(1, 1) == 0.025 and opt._get_lr(0, 2) == 0.0125  # read again
        with opt.schedule_read_once():  # nested: the same record
            assert opt._get_lr(0, 1) == first
    assert opt._get_lr(0, 1) == 0.00625
    with pytest.raises(RuntimeError):
        with opt.schedule_read_once():
            opt._get_lr(0, 1)
            raise RuntimeError("a step that failed")
    before = sched.lr
    opt._get_lr(0, 1)
    assert sched.lr == before / 2
    from toolkit import lr_scheduler
    opt.lr_scheduler = factor = lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=0.1)
    with opt.schedule_read_once():
        assert "_read_once" not in opt.__dict__ and opt._get_lr(0, 3) == factor(3)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_lars_reads_a_users_schedule_once_per_update_as_mxnet(backend):
    """MXNet's LARS reads its schedule once per update (``_get_lrs``, optimizer.py:841-874)
    and takes that rate both as the learning rate and as ``cur_lr`` of its momentum
    correction. LARS here read it again for the correction (twice per update on the kernels,
    three times on the reference backend), so a schedule that keeps state gave another
    ``cur_lr/last_lr`` than MXNet's. Now once, on both; the correction takes the rate the
    learning rate read (a halving schedule: the ratio is 1/2 from the second update)."""
    opt = optimizer.create("lars", learning_rate=0.1, momentum=0.9, backend=backend)
    opt.lr_scheduler = sched = _Constant()
    halving = _Halving()
    w = np.full(6, 0.5, np.float32)
    state = opt.create_state(0, w)
    for _ in range(3):
        opt.update(0, w, np.full(6, 0.25, np.float32), state)
    assert sched.calls == 3
    opt = optimizer.create("lars", learning_rate=0.1, momentum=0.9, backend=backend)
    opt.lr_scheduler = halving
    state = opt.create_state(0, w)
    for step in range(3):
        opt.update(0, w, np.full(6, 0.25, np.float32), state)
        assert opt.cur_lr == halving.lr  # the rate this update read, not a read of its own
        if step:
            assert opt.cur_lr / opt.last_lr == 0.5


def test_lars_launched_from_step_scalars_reads_as_its_updates_and_pickles():
    """Review of the once-per-update read: the rate was kept for one index only, so
    ``step_scalars`` then ``launch_step`` of several indices (the documented protocol) gave an
    index another's rate as ``cur_lr`` and read the schedule again for the rest; and the kept
    entry held the schedule itself, so an optimizer that had read a lambda schedule could not
    be pickled once it was swapped. The rate is now kept per index, as a number."""
    import pickle

    from toolkit.backends import cpu

    def run(protocol):
        opt = optimizer.create("lars", learning_rate=0.1, momentum=0.9)
        opt.lr_scheduler = sched = _Halving()
        ws = [np.full(4, 0.5, np.float32) for _ in range(3)]
        ss = [opt.create_state(i, w) for i, w in enumerate(ws)]
        g = np.full(4, 0.25, np.float32)
        ratios = []
        for _ in range(3):
            if protocol:
                sc = opt.step_scalars([0, 1, 2])
                for i in range(3):
                    opt.launch_step(i, ws[i], g, ss[i], int(sc.t[i]), float(sc.lr[i]),
                                    float(sc.wd[i]), cpu.LAUNCHER)
                    ratios.append(opt.cur_lr / opt.last_lr)
                opt.commit_counts([0, 1, 2], sc.t)
            else:
                for i in range(3):
                    opt.update(i, ws[i], g, ss[i])
                    ratios.append(opt.cur_lr / opt.last_lr)
        return sched.lr, ratios, ws
    alone, launched = run(False), run(True)
    assert launched[0] == alone[0] == 0.1 * 0.5 ** 9  # nine reads for nine updates
    assert launched[1] == alone[1]
    for a, b in zip(alone[2], launched[2]):
        np.testing.assert_array_equal(a, b)
    opt = optimizer.create("lars", learning_rate=0.1, momentum=0.9)
    opt.lr_scheduler = lambda n: 0.1
    opt.next_step(0, np.ones(3, np.float32))
    opt.lr_scheduler = None
    pickle.loads(pickle.dumps(opt))
