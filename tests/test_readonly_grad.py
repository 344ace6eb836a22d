"""A gradient is only read: a read-only gradient (or read-only row-sparse values) steps exactly
as the same gradient writable does (issue 19, item 10). The kernels declare their gradient
read-only (``jit.read_only``), so one compiled kernel takes both; a kernel that does not is
called through a read-only variant compiled when first seen (``jit.readonly_variant``). ``RowSparse.from_rows`` refuses float row numbers as the
constructor does."""
from __future__ import annotations

import numpy as np
import pytest

import optim_db
from toolkit import RowSparse, optimizer
from toolkit.backends import cpu, jit


def _arrays(shape, dtype):
    n = int(np.prod(shape))
    w = (np.arange(n) % 7 * 0.1 + 0.5).astype(dtype).reshape(shape)
    g = (np.arange(n) % 5 * 0.1 - 0.2).astype(dtype).reshape(shape)
    return w, g


def _steps(name, shape, dtype, readonly, *, mp=False, sparse_rows=None, steps=3, **kw):
    opt = optimizer.create(name, multi_precision=mp, **kw)
    w, g = _arrays(shape, dtype)
    if sparse_rows is not None:
        g = np.ascontiguousarray(g[sparse_rows])
    if readonly:
        g.flags.writeable = False
    grad = RowSparse(sparse_rows, g, shape) if sparse_rows is not None else g
    state = opt.create_state_multi_precision(0, w)
    for _ in range(steps):
        opt.update_multi_precision(0, w, grad, state)
    leaves = state if isinstance(state, tuple) else (state,)
    flat = []
    for s in leaves:
        flat.extend(s if isinstance(s, tuple) else (s,))
    return w, [np.array(s) for s in flat if s is not None]


def _same(a, b):
    (wa, sa), (wb, sb) = a, b
    assert wa.dtype == wb.dtype and wa.tobytes() == wb.tobytes()
    assert len(sa) == len(sb)
    for x, y in zip(sa, sb):
        assert x.tobytes() == y.tobytes()


#: one tensor: a rule with 0, 1, 2 and 3 states, a noise rule, a first pass (LAMB's direction),
#: MXNet's kernels and Python ops, a factored and a matrix step (Adafactor's, Muon's: 16
#: columns): every kind of dense step (optim_db.step_kinds)
DENSE = [  # checked against the registry by test_samples_cover_their_kinds_of_step
    ("sgd", {"momentum": 0.9}), ("adam", {}), ("ftrl", {}), ("sgld", {}), ("lbsgd", {}),
    ("lamb", {}), ("ftml", {}), ("adafactor", {}), ("muon", {})]
#: float16 gradients widened on load: an element-wise rule, a noise rule, LARS's norms and
#: LAMB's direction pass
MULTI_PRECISION = [  # checked against the registry by test_samples_cover_their_kinds_of_step
    ("adam", {}), ("sgld", {}), ("lars", {}), ("lamb", {})]
#: row-sparse gradients stepped lazily: MXNet's kernels and Python ops, and a row rule
ROWS = [  # checked against the registry by test_samples_cover_their_kinds_of_step
    ("adam", {"lazy_update": True}), ("sgd", {"lazy_update": True, "momentum": 0.9}),
    ("groupadagrad", {}), ("adagrad", {})]


def test_samples_cover_their_kinds_of_step():
    """Each sample names built-in optimizers and covers the kinds of step it is for, as their
    specs and classes show them: a new kind needs a case."""
    for sample in (DENSE, MULTI_PRECISION, ROWS):
        assert all(optim_db.is_builtin(name) for name, _ in sample)
    assert optim_db.kinds_of(DENSE) >= optim_db.all_step_kinds() - {"row rule"}
    assert optim_db.kinds_of(MULTI_PRECISION) >= {"noise", "first pass", "kernel", "python op"}
    assert optim_db.kinds_of(ROWS) >= {"row rule", "kernel", "python op"}
    assert all(optimizer.create(name, **kw).row_sparse_mode(0) == "lazy" for name, kw in ROWS)


# serial (64) and parallel (2^16) kernels
@pytest.mark.parametrize("n", [64, 1 << 16])
@pytest.mark.parametrize("name,kw", DENSE, ids=[name for name, _ in DENSE])
def test_dense_readonly_gradient_steps_as_writable(name, kw, n):
    shape = (n // 16, 16) if optimizer.spec_of(name).matrix else (n,)
    for dtype in (np.float32, np.float64):
        _same(_steps(name, shape, dtype, False, **kw), _steps(name, shape, dtype, True, **kw))


@pytest.mark.parametrize("name,kw", MULTI_PRECISION, ids=[name for name, _ in MULTI_PRECISION])
def test_multi_precision_readonly_float16_gradient_steps_as_writable(name, kw):
    """The float16 gradient is widened on load by the multi-precision kernel."""
    for n in (64, 1 << 16):
        _same(_steps(name, (n,), np.float16, False, mp=True, **kw),
              _steps(name, (n,), np.float16, True, mp=True, **kw))


def test_float16_without_master_readonly_gradient():
    """float16 storage without a master: the gradient is converted to float32 first."""
    _same(_steps("adam", (64,), np.float16, False), _steps("adam", (64,), np.float16, True))


@pytest.mark.parametrize("name,kw", ROWS)
@pytest.mark.parametrize("mp", [False, True])
def test_row_sparse_readonly_values_step_as_writable(name, kw, mp):
    dtype = np.float16 if mp else np.float32
    for shape in ((8, 4), (1 << 13, 8)):
        rows = np.array([1, 3, 6])
        _same(_steps(name, shape, dtype, False, mp=mp, sparse_rows=rows, **kw),
              _steps(name, shape, dtype, True, mp=mp, sparse_rows=rows, **kw))


def test_dense_row_kernel_readonly_gradient():
    """GroupAdaGrad's dense step runs the row kernel."""
    _same(_steps("groupadagrad", (16, 8), np.float32, False),
          _steps("groupadagrad", (16, 8), np.float32, True))


def test_no_readonly_variant_without_a_readonly_argument():
    """Writable arguments never ask for a read-only variant (nothing is compiled for them)."""
    kernel = cpu.elementwise_kernel(_sgd_factory, 0, 1, np.float32, False)
    args = (np.ones(4, np.float32), np.ones(4, np.float32), np.ones(1, np.float32))
    assert jit.readonly_variant(kernel, args) is None


def _sgd_factory(ftype):
    def rule(w, g, hp):
        return w - hp[0] * g
    return rule


def test_readonly_weight_is_still_refused_clearly():
    opt = optimizer.create("adam")
    w, g = _arrays((8,), np.float32)
    state = opt.create_state(0, w)
    w.flags.writeable = False
    with pytest.raises((ValueError, TypeError), match="weight"):
        opt.update(0, w, g, state)


def test_from_rows_refuses_float_row_numbers():
    values = np.ones((2, 3), np.float32)
    with pytest.raises(TypeError, match="rows must be integers"):
        RowSparse.from_rows([1.5, 2], values, (4, 3))
    with pytest.raises(TypeError, match="rows must be integers"):
        RowSparse.from_rows(np.array([1.0, 2.0]), values, (4, 3))
    with pytest.raises(TypeError, match="indices must be integers"):   # as the constructor
        RowSparse([1.5, 2], values, (4, 3))
    g = RowSparse.from_rows(np.array([2, 1], np.int32), values, (4, 3))
    assert g.indices.tolist() == [1, 2]
    empty = RowSparse.from_rows([], np.ones((0, 3), np.float32), (4, 3))
    assert empty.nnz == 0


def test_trainer_with_readonly_gradients_steps_as_writable():
    """``set_grad`` of a read-only array, and of a row-sparse gradient with read-only values
    (the per-parameter lazy step), through the Trainer."""
    from toolkit import Parameter, Trainer

    def run(readonly):
        ps = [Parameter("emb", init=np.linspace(-1, 1, 24).reshape(8, 3).astype(np.float32),
                        grad_stype="row_sparse"),
              Parameter("w", init=np.linspace(1, 2, 5).astype(np.float32))]
        t = Trainer(ps, "adam", {"learning_rate": 0.1, "lazy_update": True})
        for step in range(3):
            vals = np.full((2, 3), 0.25 * (step + 1), np.float32)
            dense = np.linspace(-0.5, 0.5, 5).astype(np.float32) * (step + 1)
            if readonly:
                vals.flags.writeable = False
                dense.flags.writeable = False
            ps[0].set_grad(RowSparse([1, 6], vals, (8, 3)))
            ps[1].set_grad(dense)
            t.step(2)
        return [p.data().tobytes() for p in ps]
    assert run(True) == run(False)


_CACHE_SCRIPT = """
import sys
import numpy as np
from toolkit import optimizer
opt = optimizer.create("adam")
w = np.ones(64, np.float32)
g = np.ones(64, np.float32)
g.flags.writeable = sys.argv[1] == "writable"
opt.update(0, w, g, opt.create_state(0, w))
"""


def test_a_readonly_gradient_is_stepped_by_the_writable_gradients_kernel(tmp_path):
    """The kernels declare the gradient read-only (``jit.read_only``): a process stepping a
    read-only gradient loads the kernel a process with a writable one compiled, and compiles
    and saves nothing (no read-only variant)."""
    import os
    import subprocess
    import sys

    def run(kind):
        env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), NUMBA_DEBUG_CACHE="1")
        env.pop("NUMBA_ENABLE_CUDASIM", None)
        out = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT, kind], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout + out.stderr
    assert "data saved" in run("writable")
    second = run("readonly")
    assert [line for line in second.splitlines() if "data saved" in line] == []
    names = [p.name for p in tmp_path.rglob("*.nbi")]
    assert names and not any(".readonly" in n for n in names), names
