"""The optimizer's per-index counts (``toolkit.optimizers.bookkeeping.Counts``): a mapping that
reads and writes as the dict MXNet keeps (``_index_update_count``), whatever the keys and
values, with the integer indices' counts in an array that a step of many indices reads
(``gather``) and writes (``scatter``) at once."""
import copy

import numpy as np
import pytest
from hypothesis import given, strategies as st

from toolkit import optimizer
from toolkit.optimizers.bookkeeping import Counts

# keys: small and large ints, numpy ints, negative ints, bools, names; values: counts, huge
# ints beyond int64, and what a careless user might store
KEYS = (st.integers(0, 40) | st.integers(2 ** 31 - 2, 2 ** 31 + 2) | st.integers(-3, -1)
        | st.integers(0, 40).map(np.int64) | st.booleans() | st.sampled_from(["a", "b_weight"])
        | st.sampled_from([0.0, 3.0, 2.5, -1.0, 1 + 0j, np.bool_(True), np.float64(4.0)]))
VALUES = (st.integers(0, 10 ** 6) | st.integers(2 ** 63 - 2, 2 ** 64) | st.integers(-2, -1)
          | st.sampled_from([1.5, None]))
OPS = st.lists(st.tuples(st.sampled_from(["set", "del", "get", "in", "pop"]), KEYS, VALUES),
               max_size=40)


def _same(c, d):
    assert len(c) == len(d)
    assert dict(c) == d and c == d and d == c
    # the same keys (as a dict finds them: an index equal to an int may read back as the int)
    # and the same values, each of the same type
    assert {k: (type(v), v) for k, v in c.items()} == {k: (type(v), v) for k, v in d.items()}
    assert set(c) == set(d)


@given(OPS)
def test_counts_read_and_write_as_a_dict(ops):
    c, d = Counts(), {}
    for op, k, v in ops:
        if op == "set":
            c[k] = v
            d[k] = v
        elif op == "del":
            if k in d:
                del c[k]
                del d[k]
            else:
                with pytest.raises(KeyError):
                    del c[k]
        elif op == "get":
            assert c.get(k, "none") == d.get(k, "none")
            if k in d:
                assert c[k] == d[k] and type(c[k]) is type(d[k])
            else:
                with pytest.raises(KeyError):
                    c[k]
        elif op == "in":
            assert (k in c) == (k in d)
        else:
            assert c.pop(k, "none") == d.pop(k, "none")
        _same(c, d)
    copied = c.copy()
    deep = copy.deepcopy(c)
    c["z"] = 1
    c[0] = 12345
    _same(copied, {k: v for k, v in d.items()})
    _same(deep, {k: v for k, v in d.items()})


@given(st.dictionaries(st.integers(0, 50), st.integers(0, 1000)),
       st.sets(st.integers(0, 80), min_size=1), st.integers(0, 5), st.integers(-3, 10 ** 6))
def test_gather_and_scatter_are_the_dicts_reads_and_writes(start, indices, default, base):
    c, d = Counts(start), dict(start)
    idx = np.array(sorted(indices), np.int64)
    got = c.gather(idx, default)
    assert got.dtype == np.int64 and got.tolist() == [d.get(i, default) for i in idx.tolist()]
    t = np.arange(base, base + idx.size, dtype=np.int64)
    c.scatter(idx, t)
    d.update(zip(idx.tolist(), t.tolist()))
    _same(c, d)
    assert all(type(v) is int for v in c.values())


def test_gather_leaves_what_it_cannot_read_to_the_caller():
    c = Counts({0: 1})
    assert c.gather(np.array([0, 1], np.int64), 2 ** 63) is None  # a start beyond int64
    c["name"] = 3
    assert c.gather(np.array([0], np.int64), 0) is None  # a key of the dict beside
    big = Counts({2 ** 31 + 5: 4})  # an index too large for the array: in the dict
    assert big.gather(np.array([0], np.int64), 0) is None
    assert Counts().gather(np.array([2 ** 31], np.int64), 3).tolist() == [3]  # none there


def test_an_optimizers_counts_are_kept_in_the_array_and_survive_a_failed_step():
    opt = optimizer.create("adam")
    assert isinstance(opt._index_update_count, Counts)
    opt.commit_counts(np.array([0, 3], np.int64), np.array([1, 1], np.int64))
    assert opt._index_update_count == {0: 1, 3: 1} and opt.num_update == 1
    with pytest.raises(RuntimeError):
        with opt.restored_on_error():
            opt.commit_counts(np.array([0, 1], np.int64), np.array([2, 1], np.int64))
            raise RuntimeError("the step failed after planning")
    assert opt._index_update_count == {0: 1, 3: 1} and opt.num_update == 1
    opt.restore_counts({5: 7, "x": 2}, 7)
    assert isinstance(opt._index_update_count, Counts)
    assert opt.update_counts == {5: 7, "x": 2}


def test_a_count_at_the_end_of_int64_goes_through_the_loop():
    """``t = count + 1`` would wrap in int64: the per-index loop decides what happens (it
    refuses the count that does not fit), the same for the array path and the list path."""
    opt = optimizer.create("sgd", begin_num_update=0)
    opt.restore_counts({0: 2 ** 63 - 1}, 2 ** 63 - 1)
    errors = []
    for indices in (np.array([0], np.int64), [0]):
        with pytest.raises(Exception) as e:
            opt.step_scalars(indices)
        errors.append((type(e.value), str(e.value)))
    assert errors[0] == errors[1]


# --- found by the hostile review of the vectorised bookkeeping ------------------------------
def test_scatter_of_repeated_or_unordered_indices_is_the_dicts_writes():
    """``scatter`` with an index twice counted it twice (``len`` one too many), and ``gather``
    and ``scatter`` of an array not in increasing order read and wrote a negative index at the
    array's end (numpy's negative indexing): both now do what the dict does."""
    c, d = Counts(), {}
    c.scatter(np.array([5, 5], np.int64), np.array([1, 2], np.int64))
    d.update({5: 1})
    d.update({5: 2})
    _same(c, d)
    c, d = Counts({0: 1, 7: 9}), {0: 1, 7: 9}
    got = c.gather(np.array([3, -1], np.int64), 0)
    assert got is None or got.tolist() == [d.get(3, 0), d.get(-1, 0)]
    c.scatter(np.array([3, -1], np.int64), np.array([4, 4], np.int64))
    d.update({3: 4, -1: 4})
    _same(c, d)


def test_commit_counts_of_unordered_or_repeated_indices_is_the_loops():
    """``commit_counts`` commits as the per-index loop does (each index in turn, the last
    count of an index repeated wins), whatever the order of the int64 array it is given."""
    for indices, t in (([3, -1], [4, 4]), ([5, 5], [1, 2]), ([9, 2], [1, 3])):
        opt, ref = optimizer.create("adam"), optimizer.create("adam")
        opt.commit_counts(np.array([0, 7], np.int64), np.array([1, 9], np.int64))
        ref.commit_counts([0, 7], np.array([1, 9], np.int64))
        opt.commit_counts(np.array(indices, np.int64), np.array(t, np.int64))
        for i, ti in zip(indices, t):
            ref._commit_count(i, ti)
        _same(opt._index_update_count, dict(ref._index_update_count))
        assert opt.num_update == ref.num_update


def test_a_begin_num_update_beyond_what_a_states_file_holds_is_refused(tmp_path):
    """A Trainer built with ``begin_num_update=2**60`` stepped, saved its states, and then
    refused its own file (a states file holds counts up to 2**53; docs/trainer.md): the
    optimizer now refuses a ``begin_num_update`` above 2**52 (2**52 steps of room below 2**53)
    with an error that names it, and the largest it takes saves and loads."""
    from toolkit import Parameter, Trainer
    for bad in (2 ** 60, 2 ** 52 + 1, np.int64(2 ** 62)):
        with pytest.raises(ValueError, match=r"begin_num_update must be .*2\*\*52"):
            optimizer.create("adam", begin_num_update=bad)
        opt = optimizer.create("adam")
        with pytest.raises(ValueError, match="begin_num_update"):
            opt.begin_num_update = bad
        assert opt.begin_num_update == 0
    params = [Parameter("w", init=np.ones(3, np.float32))]
    trainer = Trainer(params, "adam", {"learning_rate": 0.1, "begin_num_update": 2 ** 52})
    for _ in range(2):
        params[0].grad()[...] = 0.5
        trainer.step(1)
    trainer.save_states(tmp_path / "s.states")
    trainer.load_states(tmp_path / "s.states")
    assert trainer.optimizer.update_counts == {0: 2 ** 52 + 2}


@pytest.mark.parametrize("as_array", [True, False])
def test_counts_assigned_as_a_dict_of_other_numbers(as_array):
    """Counts assigned directly (``opt._index_update_count = {...}``, as MXNet code does): an
    integral count of another type (numpy int, float, bool) steps as its int; a count that is
    not an integer (3.5) was truncated by ``step_scalars`` (t = 4) where ``update`` stepped
    with t = 4.5: both now refuse it, naming the index, and change nothing."""
    idx = np.array([0, 1, 2], np.int64) if as_array else [0, 1, 2]
    vec, ref = optimizer.create("adam"), optimizer.create("adam")
    for opt in (vec, ref):
        opt._index_update_count = {0: np.int64(3), 1: 2.0, 2: True}
        opt.num_update = 3
    got = vec.step_scalars(idx)
    want = []
    for i in range(3):
        step = ref.next_step(i)
        want.append(step.t)
        ref._commit_count(i, step.t)
    assert got.t.tolist() == want == [4, 3, 2] and all(type(t) is int for t in want)
    opt = optimizer.create("adam")
    opt._index_update_count = {0: 1, 1: 3.5}
    w = np.ones(3, np.float32)
    state = opt.create_state(1, w)
    with pytest.raises(ValueError, match=r"index 1 .*3\.5"):
        opt.step_scalars(idx)
    with pytest.raises(ValueError, match=r"index 1 .*3\.5"):
        opt.update(1, w, np.ones(3, np.float32), state)
    assert (w == 1).all() and opt._index_update_count == {0: 1, 1: 3.5}


def test_a_count_that_would_leave_int64_is_refused_by_update_and_trainer_alike():
    """Counts put back by ``restore_counts`` (or assigned) at the end of int64: the Trainer's
    plan (int64 counts) raised a bare OverflowError where ``update`` stepped on with
    t = 2**63; both now refuse with a ValueError naming the index, and change nothing."""
    from toolkit import Parameter, Trainer
    opt = optimizer.create("sgd", learning_rate=0.1)
    opt.restore_counts({0: 2 ** 63 - 1}, 2 ** 63 - 1)
    w = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="index 0"):
        opt.update(0, w, np.ones(3, np.float32), None)
    assert (w == 1).all() and opt.update_counts == {0: 2 ** 63 - 1}
    params = [Parameter("w", init=np.ones(3, np.float32))]
    trainer = Trainer(params, "sgd", {"learning_rate": 0.1})
    trainer.optimizer.restore_counts({0: 2 ** 63 - 1}, 2 ** 63 - 1)
    params[0].grad()[...] = 1.0
    with pytest.raises(ValueError, match="index 0"):
        trainer.step(1)
    assert (params[0].data() == 1).all()
    assert trainer.optimizer.update_counts == {0: 2 ** 63 - 1}


def test_a_key_equal_to_an_int_finds_it_as_a_dict_does():
    """Found by the thorough hypothesis profile: a key that a dict finds as an int (equal to
    it, hashing as it) but that is neither a number nor an index (``np.True_``), or a number
    that is not a numpy/Python one (``Decimal(1)``), was looked for in the dict beside the array
    only: ``np.True_ in Counts({1: 0})`` was False where the dict says True."""
    import decimal
    import fractions
    for key in (np.True_, np.bool_(False), decimal.Decimal(1), fractions.Fraction(4, 2)):
        c, d = Counts({0: 5, 1: 6, 2: 7}), {0: 5, 1: 6, 2: 7}
        assert (key in c) == (key in d) and c.get(key) == d.get(key) and c[key] == d[key]
        c[key] = 9
        d[key] = 9
        _same(c, d)
        assert c.pop(key) == d.pop(key)
        _same(c, d)


def _mutators():
    """Every way to write a Counts, each as a function of one (with index 3 counted)."""
    return {
        "set": lambda c: c.__setitem__(3, 9),
        "set a new index": lambda c: c.__setitem__(5, 1),
        "set in the dict": lambda c: c.__setitem__("a", 1),
        "del": lambda c: c.__delitem__(3),
        "pop": lambda c: c.pop(3),
        "popitem": lambda c: c.popitem(),
        "clear": lambda c: c.clear(),
        "update": lambda c: c.update({3: 4}),
        "setdefault": lambda c: c.setdefault(6, 2),
        "scatter": lambda c: c.scatter(np.array([3, 4], np.int64), np.array([7, 7], np.int64)),
        "scatter one by one": lambda c: c.scatter(np.array([4, 3], np.int64),
                                                  np.array([7, 7], np.int64)),
        "rewrite": lambda c: c.rewrite(slice(3, 4), np.array([8], np.int64)),
    }


@pytest.mark.parametrize("name", sorted(_mutators()))
def test_every_write_moves_changes(name):
    """``changes`` tells a reader that kept what it wrote (the optimizer's record of its last
    commit) whether anything was written since: every mutator moves it."""
    c = Counts({3: 2})
    before = c.changes
    _mutators()[name](c)
    assert c.changes > before


def test_reads_leave_changes_alone():
    c = Counts({3: 2, "a": 1})
    before = c.changes
    _ = (c[3], c.get(4), 3 in c, list(c), len(c), dict(c), c.gather(np.array([3], np.int64), 0),
         c.read(slice(3, 4)), repr(c), c == {3: 2, "a": 1})
    assert c.changes == before


def test_scatter_says_whether_every_count_is_in_the_array():
    c = Counts()
    assert c.scatter(np.array([1, 2], np.int64), np.array([3, 3], np.int64))
    assert not c.scatter(np.array([2, 1], np.int64), np.array([3, 3], np.int64))  # one by one
    assert not c.scatter(np.array([2 ** 31], np.int64), np.array([3], np.int64))  # the dict
    assert not c.scatter(np.array([], np.int64), np.array([], np.int64))


def test_a_negative_count_scattered_or_committed_is_kept_as_the_dict_keeps_it():
    """``scatter`` wrote a negative count into the array, where negative means "no count":
    the index vanished from the mapping while ``len`` still counted it. A negative count is
    a caller's mistake (``step_scalars`` gives counts from 1), yet it must not corrupt the
    counts: it now goes where ``self[i] = t`` puts it, as does a kept commit's."""
    from toolkit.optimizers.batched import Kept
    c, d = Counts(), {}
    c.scatter(np.array([0, 1, 2], np.int64), np.array([3, -2, 5], np.int64))
    d.update({0: 3, 1: -2, 2: 5})
    _same(c, d)
    c[1] = 4
    d[1] = 4
    _same(c, d)
    opt, ref = optimizer.create("adam"), optimizer.create("adam")
    kept = Kept([0, 1, 2])
    for t in ([1, 1, 1], [2, -7, 2], [3, 3, 3]):
        t = np.array(t, np.int64)
        opt.commit_counts(kept, t)
        for i, ti in zip(range(3), t.tolist()):
            ref._commit_count(i, ti)
        _same(opt._index_update_count, dict(ref._index_update_count))
        assert opt.num_update == ref.num_update
