"""Row-sparse gradients (``toolkit.RowSparse``): MXNet 1.9.1's lazy and standard updates, its
dense fallback, and the checks (docs/sparse.md).

* parity with updates recorded from MXNet 1.9.1 (tests/data/mxnet/sparse.json): bit for bit on
  the CPU kernels except FTRL (whose dense update the toolkit evaluates stably, see
  docs/optimizers/ftrl.md: close, not equal); rows absent from a lazy update keep weight and
  state bit for bit;
* a lazy update equals the dense update of the rows present, on every backend (the reference
  included, whose dense update the dense parity tests hold to MXNet's), layout and dtype;
* every check, with nothing written when it fails.
"""
import numpy as np
import pytest

import mxnet_data
import optim_db
from toolkit import RowSparse, optimizer

SPARSE = mxnet_data._decode(mxnet_data._read("sparse"))
CASES = [c for c in SPARSE["cases"] if c["optimizer"] in optimizer.registry()]


def _run_recorded(case, backend):
    """Each call from MXNet's previous result; yields (call, ours: [weight, *states])."""
    opt = optimizer.create(case["optimizer"], backend=backend, **case["kwargs"])
    w = case["init"].copy()
    state = opt.create_state(0, w)
    for call in case["calls"]:
        g = RowSparse(np.array(call["indices"], np.int64), call["values"], tuple(case["shape"]))
        before = [w.copy()] + [a.copy() for a in opt.state_arrays(state)]
        opt.update(0, w, g, state)
        yield call, before, [w] + list(opt.state_arrays(state))
        w[...] = call["weight"]
        for a, b in zip(opt.state_arrays(state), call["states"]):
            a[...] = b


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_cpu_kernels_reproduce_mxnet(case):
    # FTRL: the toolkit's stable form of MXNet's difference of roots; Nadam: MXNet's Python
    # arithmetic, which the dense parity tests bound rather than match; GroupAdaGrad: MXNet's
    # operator sums a row in a plain float32 running sum, the toolkit in float64 (rows where
    # the two sums agree are bit-identical: tests/test_mxnet_parity_groupadagrad.py)
    exact = case["optimizer"] not in ("ftrl", "nadam", "groupadagrad")
    lazy = not case["id"].endswith(("std-f32", "std-f64")) and "fallback" not in case["id"]
    for call, before, ours in _run_recorded(case, "cpu"):
        theirs = [call["weight"]] + list(call["states"])
        assert len(ours) == len(theirs)
        absent = np.setdiff1d(np.arange(case["shape"][0]), call["indices"])
        for k, (a, b, prev) in enumerate(zip(ours, theirs, before)):
            if lazy:  # MXNet and the toolkit both leave the other rows alone, bit for bit
                assert np.array_equal(b[absent], prev[absent])
                assert np.array_equal(a[absent], prev[absent])
            if exact:
                assert np.array_equal(a, b), f"array {k} differs from MXNet's"
            else:
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


#: configurations stepped lazily (``row_sparse_mode``: only the rows present)
LAZY = [  # checked against the registry by test_samples_cover_every_row_sparse_mode
    ("sgd", {}), ("sgd", dict(momentum=0.9)), ("adam", {}), ("adam", dict(clip_gradient=0.5)),
    ("adagrad", dict(wd=0.0)), ("ftrl", {}), ("nag", {}), ("groupadagrad", dict(wd=0.0)),
    ("sparseadam", dict(wd=0.0))]
#: configurations that update every row: the standard update and MXNet's dense fallback
EVERY_ROW = [  # checked against the registry by test_samples_cover_every_row_sparse_mode
    ("sgd", dict(lazy_update=False)), ("adam", dict(lazy_update=False)), ("rmsprop", {}),
    ("signum", {}), ("nadam", {}), ("nag", dict(momentum=0.9)), ("sgld", {}), ("ftml", {}),
    ("adamax", {}), ("adadelta", {}), ("dcasgd", {}), ("adamw", {}), ("lamb", {}), ("lion", {}),
    ("adopt", {}), ("radam", {}), ("adabelief", {}), ("rprop", {}), ("asgd", {}),
    ("adamwschedulefree", {}), ("sgdschedulefree", {}), ("adafactor", {}), ("muon", {})]


def _mode(name, kw=None):
    """``row_sparse_mode`` of ``create(name, **kw)``, or ``"refused"`` (a ValueError)."""
    try:
        return optimizer.create(name, **(kw or {})).row_sparse_mode(0)
    except ValueError:
        return "refused"


def test_samples_cover_every_row_sparse_mode():
    """Every built-in optimizer whose default steps lazily is in LAZY; every one that updates
    every row by default is in EVERY_ROW, with the non-lazy configurations of the lazy ones that
    have one; the others refuse a row-sparse gradient (LARS and LBSGD: not implemented)."""
    builtins = [name for name in optimizer.registry() if optim_db.is_builtin(name)]
    assert {name for name, kw in LAZY} == {n for n in builtins if _mode(n) == "lazy"}
    assert all(_mode(name, kw) == "lazy" for name, kw in LAZY)
    assert {name for name, kw in EVERY_ROW} >= {n for n in builtins if _mode(n) == "dense"}
    assert all(_mode(name, kw) in ("standard", "dense") for name, kw in EVERY_ROW)
    assert all(_mode(n) in ("lazy", "dense", "refused") for n in builtins)


def _problem(dtype, order="C", shape=(37, 3, 2)):
    rng = np.random.default_rng(7)
    w = np.asarray(rng.standard_normal(shape), dtype=dtype, order=order)
    rows = np.array([0, 4, 5, 20, 36], np.int64)
    values = rng.standard_normal((len(rows),) + shape[1:]).astype(dtype)
    return w, rows, values


def _lazy_runs():
    """``(name, kw, convention)`` of every LAZY sample under MXNet's two conventions, or under
    its own where it has neither (SparseAdam: "pytorch")."""
    out = []
    for name, kw in LAZY:
        own = optimizer.spec_of(name).conventions
        for convention in [c for c in own if c in ("mxnet", "guide")] or own:
            out.append(pytest.param(name, kw, convention, id=f"{name}"
                                    f"{'-' + next(iter(kw)) if kw else ''}-{convention}"))
    return out


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("dtype,order", [(np.float32, "C"), (np.float64, "C"),
                                         (np.float32, "F"), (np.float16, "C")])
@pytest.mark.parametrize("name,kw,convention", _lazy_runs())
def test_lazy_update_is_dense_update_of_present_rows(name, kw, dtype, order, backend, convention):
    """Rows present: the dense update of those rows (same optimizer, same count, and the
    arithmetic of MXNet's sparse kernels where it differs from its dense ones: SGD without
    momentum, Adam when clipping); rows absent: untouched."""
    kw = dict(kw, wd=kw.get("wd", 0.03), rescale_grad=0.7, learning_rate=0.1)
    w, rows, values = _problem(dtype, order, (37, 6) if name == "groupadagrad" else (37, 3, 2))
    a = optimizer.create(name, backend=backend, convention=convention, **kw)
    b = optimizer.create(name, backend=backend, convention=convention, **kw)
    sa = a.create_state(0, w)
    sub = np.ascontiguousarray(w[rows])
    sb = b.create_state(0, sub)
    w0 = w.copy()
    for step in range(3):
        a.update(0, w, RowSparse(rows, values * (step + 1), w.shape), sa)
        with b._row_sparse_step("lazy"):  # MXNet's sparse kernels round a few things their way
            b.update(0, sub, values * (step + 1), sb)
    absent = np.setdiff1d(np.arange(w.shape[0]), rows)
    assert np.array_equal(w[absent], w0[absent])
    for x in a.state_arrays(sa):
        assert not np.any(x[absent])   # states start at 0 and absent rows stay there
    assert np.array_equal(w[rows], sub)
    for x, y in zip(a.state_arrays(sa), b.state_arrays(sb)):
        assert np.array_equal(x[rows], y)


@pytest.mark.parametrize("name,kw", EVERY_ROW)
def test_standard_and_fallback_update_every_row(name, kw):
    """Not lazy: every row is updated as by the dense gradient (equal to the dense update under
    "guide", whose arithmetic has no sparse variant, and for the fallbacks)."""
    w, rows, values = _problem(np.float64)
    if optimizer.spec_of(name).matrix:  # Muon's weights are matrices: the rows flattened
        w, values = w.reshape(w.shape[0], -1), values.reshape(values.shape[0], -1)
    g = RowSparse(rows, values, w.shape)
    conventions = optimizer.spec_of(name).conventions  # Nadam has no guide step, Lion "paper"
    convention = "guide" if "guide" in conventions else conventions[0]
    wd = optimizer.spec_of(name).fixed.get("wd", 0.05)  # Rprop has no weight decay
    a = optimizer.create(name, convention=convention, wd=wd, **kw)
    b = optimizer.create(name, convention=convention, wd=wd, **kw)
    w2 = w.copy()
    sa, sb = a.create_state(0, w), b.create_state(0, w2)
    a.update(0, w, g, sa)
    b.update(0, w2, g.to_dense(), sb)
    assert np.array_equal(w, w2)
    assert a.row_sparse_mode(0) in ("standard", "dense")


def test_multi_precision_lazy():
    """float16 weights with a float32 master: the lazy update of the rows present, the float16
    weight rounded from the master, other rows untouched (master included)."""
    w, rows, values = _problem(np.float16)
    opt = optimizer.create("adam", multi_precision=True, learning_rate=0.1)
    st = opt.create_state_multi_precision(0, w)
    w0, m0 = w.copy(), st[0].copy()
    opt.update_multi_precision(0, w, RowSparse(rows, values, w.shape), st)
    absent = np.setdiff1d(np.arange(w.shape[0]), rows)
    assert np.array_equal(w[absent], w0[absent]) and np.array_equal(st[0][absent], m0[absent])
    assert np.array_equal(w, st[0].astype(np.float16))
    ref = optimizer.create("adam", multi_precision=True, learning_rate=0.1)
    sub = np.ascontiguousarray(w0[rows])
    sref = ref.create_state_multi_precision(0, sub)
    ref.update_multi_precision(0, sub, values, sref)
    assert np.array_equal(w[rows], sub) and np.array_equal(st[0][rows], sref[0])


def test_from_rows_sorts_and_adds_repeats():
    g = RowSparse.from_rows([5, 1, 5, 3], np.array([[1.0], [2.0], [3.0], [4.0]]), (6, 1))
    assert g.indices.tolist() == [1, 3, 5]
    assert g.values[:, 0].tolist() == [2.0, 4.0, 4.0]
    dense = g.to_dense()
    assert dense[:, 0].tolist() == [0, 2, 0, 4, 0, 4]
    assert g.nnz == 3 and "nnz=3" in repr(g)


def test_empty_gradient_counts_the_step():
    """No rows: nothing changes, but the step is counted (MXNet counts it too)."""
    w, _, _ = _problem(np.float32)
    opt = optimizer.create("adam")
    st = opt.create_state(0, w)
    w0 = w.copy()
    opt.update(0, w, RowSparse(np.zeros(0, np.int64), np.zeros((0, 3, 2), np.float32), w.shape),
               st)
    assert np.array_equal(w, w0) and opt.num_update == 1


BAD = [
    (dict(indices=[4, 1]), ValueError, "strictly increasing"),
    (dict(indices=[1, 1]), ValueError, "repeated"),
    (dict(indices=[1, 37]), ValueError, "outside"),
    (dict(indices=[-1, 2]), ValueError, "outside"),
    (dict(values_shape=(2, 3, 3)), ValueError, "expected (2, 3, 2)"),
    (dict(values_shape=(3, 3, 2)), ValueError, "expected (2, 3, 2)"),
    (dict(values_dtype=np.float64), TypeError, "dtype"),
    (dict(shape=(36, 3, 2)), ValueError, "shape"),
    (dict(indices=[[1, 2]]), ValueError, "1-D"),
]


@pytest.mark.parametrize("bad,exc,match", BAD, ids=[m for _, _, m in BAD])
def test_checks_before_writing(bad, exc, match):
    w, _, _ = _problem(np.float32)
    indices = np.array(bad.get("indices", [1, 2]))
    vshape = bad.get("values_shape", (indices.reshape(-1).shape[0],) + w.shape[1:])
    values = np.ones(vshape, bad.get("values_dtype", np.float32))
    opt = optimizer.create("adam")
    st = opt.create_state(0, w)
    w0 = w.copy()
    with pytest.raises(exc, match=match.replace("(", r"\(").replace(")", r"\)")):
        opt.update(0, w, RowSparse(indices, values, bad.get("shape", w.shape)), st)
    assert np.array_equal(w, w0) and not np.any(st[0]) and opt.num_update == 0


def test_bad_index_types():
    with pytest.raises(TypeError, match="integers"):
        RowSparse([0.5, 1.5], np.ones((2, 2)), (4, 2))
    with pytest.raises(ValueError, match="shape"):
        RowSparse([0], np.ones((1, 2)), ())


@pytest.mark.parametrize("name,kw,match", [
    ("adagrad", dict(wd=0.1), "no weight decay"),
    ("lars", {}, "LARS does not take"),
    ("lbsgd", {}, "LBSGD does not take"),
])
def test_refused_with_reason(name, kw, match):
    w, rows, values = _problem(np.float32)
    opt = optimizer.create(name, **kw)
    st = opt.create_state(0, w)
    w0 = w.copy()
    with pytest.raises(ValueError, match=match):
        opt.update(0, w, RowSparse(rows, values, w.shape), st)
    assert np.array_equal(w, w0)


def test_values_aliasing_state_refused():
    w, rows, _ = _problem(np.float32)
    opt = optimizer.create("sgd", momentum=0.9)
    st = opt.create_state(0, w)
    with pytest.raises(ValueError, match="shares memory"):
        opt.update(0, w, RowSparse(rows, st[0:5], w.shape), st)


# --- the Trainer: Parameter(..., grad_stype="row_sparse") ------------------------------------
def test_trainer_row_sparse_parameter_equals_optimizer_updates():
    """A Trainer with an embedding (row-sparse) and a dense layer: each step equals the
    optimizer's own updates with the same gradients (rescale_grad = 1/batch_size), the
    embedding's absent rows untouched."""
    from toolkit import Parameter, Trainer
    rng = np.random.default_rng(5)
    emb0 = rng.standard_normal((50, 4)).astype(np.float32)
    fc0 = rng.standard_normal((4, 3)).astype(np.float32)
    emb = Parameter("emb_weight", init=emb0, grad_stype="row_sparse")
    fc = Parameter("fc_weight", init=fc0)
    trainer = Trainer([emb, fc], "adam", {"learning_rate": 0.1, "wd": 0.01})
    opt = optimizer.create("adam", learning_rate=0.1, wd=0.01, rescale_grad=1 / 8)
    w_emb, w_fc = emb0.copy(), fc0.copy()
    s_emb, s_fc = opt.create_state(0, w_emb), opt.create_state(1, w_fc)
    for step in range(3):
        rows = np.sort(rng.choice(50, 6, replace=False))
        g_emb = RowSparse(rows, rng.standard_normal((6, 4)).astype(np.float32), (50, 4))
        g_fc = rng.standard_normal((4, 3)).astype(np.float32)
        emb.set_grad(g_emb)
        fc.set_grad(g_fc)
        trainer.step(8)
        opt.update(0, w_emb, g_emb, s_emb)
        opt.update(1, w_fc, g_fc, s_fc)
        assert np.array_equal(emb.data(), w_emb) and np.array_equal(fc.data(), w_fc)
    assert emb.grad() is g_emb


def test_trainer_row_sparse_checks_before_any_update():
    from toolkit import Parameter, Trainer
    emb = Parameter("emb_weight", shape=(10, 2), init=1.0, grad_stype="row_sparse")
    fc = Parameter("fc_weight", shape=(3,), init=1.0)
    trainer = Trainer([fc, emb], "adagrad", {"learning_rate": 0.1, "wd": 0.1})
    fc.set_grad(np.ones(3, np.float32))
    emb.set_grad(RowSparse([1], np.ones((1, 2), np.float32), (10, 2)))
    with pytest.raises(ValueError, match="no weight decay"):
        trainer.step(1)
    assert np.all(fc.data() == 1.0) and np.all(emb.data() == 1.0)
    with pytest.raises(TypeError, match="RowSparse"):
        emb.set_grad(np.ones((10, 2), np.float32))
    with pytest.raises(ValueError, match="outside"):
        emb.set_grad(RowSparse([10], np.ones((1, 2), np.float32), (10, 2)))
    with pytest.raises(ValueError, match="grad_stype"):
        Parameter("x", shape=(2,), grad_stype="csr")
    with pytest.raises(ValueError, match="grad_req"):
        Parameter("x", shape=(2,), grad_stype="row_sparse", grad_req="add")


def test_trainer_row_sparse_refused_with_dist_kvstore():
    from toolkit import Parameter, Trainer
    emb = Parameter("emb_weight", shape=(10, 2), grad_stype="row_sparse")
    with pytest.raises(ValueError, match="row-sparse gradients"):
        Trainer([emb], "sgd", kvstore="dist_sync")
    assert emb.trainer is None
