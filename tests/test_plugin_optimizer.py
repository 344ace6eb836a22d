"""A complete new optimizer in this one file, and nowhere else (issue 20, item 2).

Quasi-hyperbolic momentum (QHM; Ma and Yarats 2019, "Quasi-hyperbolic momentum and Adam for deep
learning", eq. 3), with weight decay and MXNet's gradient preprocessing::

    g = clip(rescale_grad*grad, c) + wd*w          (no clipping when clip_gradient is None)
    m = beta*m + (1 - beta)*g
    w = w - lr*((1 - nu)*g + nu*m)

The file holds its spec, its per-element rule (an ``ElementwiseOptimizer``) and its reference
(this module itself is the reference module its spec names: ``NAME``, ``STATE``, ...). The tests
show it, with no other file edited, in ``check``, the CPU kernels, the CUDA kernels under the
simulator (a subprocess: the simulator must be chosen before numba is imported), the Trainer's
one-call step, states save/load, the oracle's ``verify``/``identify``, ``accuracy``, ``regress``
and ``bench``. It is registered by a fixture for each test and unregistered after it, so the
other test files never see it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from typing import NamedTuple

import numpy as np
import pytest

from toolkit import Parameter, Trainer, optimizer
from toolkit.optimizers.spec_spaces import Decades, Interval, OneOf
from toolkit.optimizers.validation import unit

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------------------------------------
# the reference: this module (the interface of reference/__init__.py), float64, numpy only
# ---------------------------------------------------------------------------------------------
NAME = "qhmprobe"
STATE = ("mom",)
CONVENTIONS = ("mxnet",)
PYTORCH = None
HYPER = {"beta": 0.9, "nu": 0.7}


def state_slots(**hyper):
    return STATE


def init_state(weight, **hyper):
    return {"mom": np.zeros(np.shape(weight), dtype=np.float64)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, beta=0.9, nu=0.7):
    """One QHM step in float64 (the kernel takes its scalars in the weight's precision, so
    ``hyper_f32`` rounds nothing)."""
    if convention != "mxnet":
        raise ValueError(f"{NAME}: convention must be one of {CONVENTIONS}, got {convention!r}")
    w = weight if hasattr(weight, "err") else np.array(weight, dtype=np.float64)
    g = rescale_grad * (grad if hasattr(grad, "err") else np.array(grad, dtype=np.float64))
    if clip_gradient is not None:
        g = np.clip(g, -clip_gradient, clip_gradient)
    g = g + wd * w
    m = beta * state["mom"] + (1.0 - beta) * g
    return w - lr * ((1.0 - nu) * g + nu * m), {"mom": m}


# ---------------------------------------------------------------------------------------------
# the spec and the optimizer
# ---------------------------------------------------------------------------------------------
SPEC = optimizer.Spec(
    name=NAME, reference=__name__, conventions=("mxnet",),
    space={"beta": Interval(0.0, 0.99), "nu": OneOf(0.0, 1.0, Interval(0.0, 1.0))},
    record={"beta": 0.9, "nu": 0.7}, layouts=({}, {"nu": 1.0}), trainer=({}, {"beta": 0.5}),
    demo={"learning_rate": 0.05},
    bench=(optimizer.BenchSetting("qhmprobe", {}, quick=True),),
    docs="tests/test_plugin_optimizer.py",
)


class QHMRow(NamedTuple):
    """The scalars of :meth:`QHMProbe.rule`, named once: packed by name on the host, read by
    name in the rule."""
    lr: float
    wd: float
    rs: float     #: rescale_grad
    c: float      #: clip_gradient, negative for none
    beta: float
    omb: float    #: 1 - beta
    nu: float
    omnu: float   #: 1 - nu


class QHMProbe(optimizer.ElementwiseOptimizer):
    """Quasi-hyperbolic momentum (see the module docstring)."""

    spec = SPEC
    state_names = ("mom",)
    row = QHMRow
    domains = {"beta": unit(), "nu": unit(closed=True)}

    def __init__(self, beta=0.9, nu=0.7, **kwargs):
        self.beta, self.nu = beta, nu
        super().__init__(**kwargs)

    def reference_hyper(self):
        return {"beta": self.beta, "nu": self.nu}

    def hyperparameters(self, index, t, lr, wd):
        c = -1.0 if self.clip_gradient is None else self.clip_gradient
        return self.row(lr=lr, wd=wd, rs=self.rescale_grad, c=c, beta=self.beta,
                        omb=1.0 - self.beta, nu=self.nu, omnu=1.0 - self.nu)

    @staticmethod
    def rule(w, grad, m, hp):
        p = QHMRow(*hp)
        g = p.rs * grad
        if p.c >= 0:
            g = min(max(g, -p.c), p.c)
        g = g + p.wd * w
        m = p.beta * m + p.omb * g
        return w - p.lr * (p.omnu * g + p.nu * m), m


def register():
    optimizer.register(QHMProbe)


@pytest.fixture
def qhm():
    register()
    try:
        yield QHMProbe
    finally:
        optimizer.unregister(NAME)


# ---------------------------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------------------------
def test_it_is_registered_with_its_spec_only_inside_the_fixture(qhm):
    assert optimizer.spec_of(NAME) is SPEC and optimizer.registry()[NAME] is QHMProbe
    assert optimizer.create(NAME).reference_module() is sys.modules[__name__]


def test_check_runs_its_rows_against_its_oracle(qhm):
    from toolkit.tools import check
    rows = [r for r in check.backend_rows(with_cuda=False) if r[0] == NAME]
    assert {(c, b) for _, c, b, _ in rows} == {("mxnet", "cpu"), ("mxnet", "reference")}
    rng = np.random.default_rng(1)
    for name, conv, backend, dtype in rows:
        assert check.run_backend_row(rng, name, conv, backend, dtype, cases=3) <= 1.0


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16-mp"])
def test_the_cpu_kernels_match_the_oracle_step_by_step(qhm, dtype):
    from toolkit.error_bounds import step_errors
    rng = np.random.default_rng(2)
    for n in (7, 1 << 16):                      # the serial and the parallel kernel
        opt = optimizer.create(NAME, learning_rate=0.1, wd=1e-3, clip_gradient=0.5,
                               rescale_grad=2.0, beta=0.8, nu=0.6,
                               multi_precision=dtype == "float16-mp")
        dt = np.float16 if dtype == "float16-mp" else np.dtype(dtype)
        w = rng.standard_normal(n).astype(dt)
        state = opt.create_state_multi_precision(0, w)
        for _ in range(3):
            g = rng.standard_normal(n).astype(dt)
            errors = step_errors(opt, 0, w, g, state)
            assert max(e[0] for e in errors.values()) <= 1.0, errors


def test_a_wrong_rule_fails_the_check(qhm):
    """The check can fail: the same optimizer with nu and 1 - nu swapped in its rule."""
    from toolkit.error_bounds import step_errors

    class Swapped(QHMProbe):
        def hyperparameters(self, index, t, lr, wd):
            p = super().hyperparameters(index, t, lr, wd)
            return p._replace(nu=p.omnu, omnu=p.nu)
    opt = Swapped(learning_rate=0.1, nu=0.7)
    w = np.linspace(-1, 1, 9).astype(np.float32)
    s = opt.create_state(0, w)
    errors = step_errors(opt, 0, w, np.full(9, 0.5, np.float32), s)
    assert errors["weight"][0] > 1.0


class QHMPositional(QHMProbe):
    """The same optimizer in the old shape (docs before named rows): no ``row``, a plain tuple
    from ``hyperparameters()``, unpacked by position in the rule."""

    row = None

    def hyperparameters(self, index, t, lr, wd):
        c = -1.0 if self.clip_gradient is None else self.clip_gradient
        return (lr, wd, self.rescale_grad, c, self.beta, 1.0 - self.beta, self.nu, 1.0 - self.nu)

    @staticmethod
    def rule(w, grad, m, hp):
        lr, wd, rs, c, beta, omb, nu, omnu = hp
        g = rs * grad
        if c >= 0:
            g = min(max(g, -c), c)
        g = g + wd * w
        m = beta * m + omb * g
        return w - lr * (omnu * g + nu * m), m


def _deprecations(caught, cls):
    return [w for w in caught if issubclass(w.category, DeprecationWarning)
            and cls.__qualname__ in str(w.message)]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16-mp"])
def test_the_old_positional_shape_steps_bit_identically_and_warns_once_per_class(dtype):
    """A ``hyperparameters()`` returning a plain tuple and a rule unpacking ``hp`` by position
    still work (issue 20: what the docs showed keeps working): the same bits as the named row,
    in the serial and the parallel kernel, with one DeprecationWarning per class that names
    the fix."""
    kw = dict(learning_rate=0.1, wd=1e-3, clip_gradient=0.5, rescale_grad=2.0, beta=0.8,
              nu=0.6, multi_precision=dtype == "float16-mp")
    dt = np.float16 if dtype == "float16-mp" else np.dtype(dtype)

    class Old(QHMPositional):  # a fresh class per case: the warning is once per class
        pass
    rng = np.random.default_rng(6)
    for n in (7, 1 << 16):
        new, old = QHMProbe(**kw), Old(**kw)
        w0 = rng.standard_normal(n).astype(dt)
        w_new, w_old = w0.copy(), w0.copy()
        s_new = new.create_state_multi_precision(0, w_new)
        s_old = old.create_state_multi_precision(0, w_old)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                g = rng.standard_normal(n).astype(dt)
                new.update_multi_precision(0, w_new, g, s_new)
                old.update_multi_precision(0, w_old, g, s_old)
        np.testing.assert_array_equal(w_old, w_new)
        for a, b in zip(np.atleast_1d(old.state_arrays(s_old)),
                        np.atleast_1d(new.state_arrays(s_new))):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert not _deprecations(caught, QHMProbe)                 # the new shape is quiet
        messages = [str(w.message) for w in _deprecations(caught, Old)]
        assert len(messages) == (1 if n == 7 else 0), messages     # once per class
        if messages:
            assert "row" in messages[0] and "NamedTuple" in messages[0] and \
                "p = Row(*hp)" in messages[0], messages[0]


def test_the_old_shape_in_the_trainer_equals_the_named_row_bit_for_bit():
    params_new, params_old = _params(), _params()

    class Old(QHMPositional):
        pass
    trainers = [Trainer(params_new, QHMProbe(learning_rate=0.1, wd=1e-3, beta=0.5)),
                Trainer(params_old, Old(learning_rate=0.1, wd=1e-3, beta=0.5))]
    rng = np.random.default_rng(7)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            for p, q in zip(params_new, params_old):
                p.grad()[...] = q.grad()[...] = rng.standard_normal(p.shape)
            for trainer in trainers:
                trainer.step(1)
                assert trainer.last_step_launches == 1
    for p, q in zip(params_new, params_old):
        np.testing.assert_array_equal(p.data(), q.data())
    assert len(_deprecations(caught, Old)) == 1


def test_a_declared_row_is_enforced_before_anything_is_written():
    """A class whose ``row`` is declared must return an instance of it: anything else (here
    the plain tuple of the old shape) raises TypeError naming the row's fields, and leaves
    the weight, the state and the count as they were."""
    class Plain(QHMProbe):
        def hyperparameters(self, index, t, lr, wd):
            return tuple(super().hyperparameters(index, t, lr, wd))
    opt = Plain(learning_rate=0.1)
    w = np.linspace(-1, 1, 9).astype(np.float32)
    s = opt.create_state(0, w)
    s[...] = 0.25
    w0, s0 = w.copy(), s.copy()
    with pytest.raises(TypeError, match=r"QHMRow.*lr=\.\.\., wd=\.\.\..*got tuple"):
        opt.update(0, w, np.full(9, 0.5, np.float32), s)
    np.testing.assert_array_equal(w, w0)
    np.testing.assert_array_equal(s, s0)
    assert opt.next_step(0, w).t == 1


@pytest.mark.parametrize("row", [(("lr", float),), dict, "QHMRow"])
def test_a_row_that_is_not_a_named_tuple_class_is_refused_at_class_definition(row):
    with pytest.raises(TypeError, match="row must be a typing.NamedTuple class"):
        type("Bad", (QHMProbe,), {"row": row})


_CUDA_CHILD = r"""
import json, sys
import numpy as np
sys.path.insert(0, {here!r})
import test_plugin_optimizer as plug
from numba import cuda
from toolkit.error_bounds import step_errors
plug.register()
from toolkit import optimizer
out = {{}}
for dtype in ("float32", "float64"):
    opt = optimizer.create(plug.NAME, learning_rate=0.1, wd=1e-3, clip_gradient=0.5, beta=0.8,
                           nu=0.6)
    rng = np.random.default_rng(3)
    w = cuda.to_device(rng.standard_normal(33).astype(dtype))
    state = opt.create_state(0, w)
    worst = 0.0
    for _ in range(3):
        g = cuda.to_device(rng.standard_normal(33).astype(dtype))
        errors = step_errors(opt, 0, w, g, state)
        worst = max(worst, max(e[0] for e in errors.values()))
    out[dtype] = worst
print(json.dumps(out))
"""


def test_the_cuda_kernels_match_the_oracle_under_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _CUDA_CHILD.format(here=HERE)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    worst = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(worst) == {"float32", "float64"} and max(worst.values()) <= 1.0, worst


def _params():
    shapes = [(3, 4), (5,), (2, 2, 3), (1,), (7,)]
    return [Parameter(f"p{i}", shape=s, lr_mult=1.0 + 0.25 * (i % 2),
                      init=lambda shape, dtype, i=i: np.linspace(-1, 1, int(np.prod(shape)))
                      .reshape(shape).astype(dtype) * (i + 1)) for i, s in enumerate(shapes)]


@pytest.mark.parametrize("kw", SPEC.trainer, ids=lambda kw: json.dumps(dict(kw)))
def test_the_trainer_steps_it_in_one_kernel_call_and_equals_per_parameter_updates(qhm, kw):
    params = _params()
    trainer = Trainer(params, NAME, {"learning_rate": 0.1, "wd": 1e-3, **kw})
    twin = optimizer.create(NAME, learning_rate=0.1, wd=1e-3, **kw)
    weights = [p.data().copy() for p in params]
    states = [twin.create_state(i, w) for i, w in enumerate(weights)]
    twin.set_lr_mult({i: p.lr_mult for i, p in enumerate(params)})
    rng = np.random.default_rng(4)
    for _ in range(3):
        grads = [rng.standard_normal(p.shape).astype(np.float32) for p in params]
        for p, g in zip(params, grads):
            p.grad()[...] = g
        trainer.step(1)
        assert trainer.last_step_launches == 1                    # one call for the group
        for i, g in enumerate(grads):
            twin.update(i, weights[i], g, states[i])
    for p, w in zip(params, weights):
        np.testing.assert_array_equal(p.data(), w)               # bit for bit


def test_states_save_and_load(qhm, tmp_path):
    params = _params()
    trainer = Trainer(params, NAME, {"learning_rate": 0.1, "beta": 0.5})
    for p in params:
        p.grad()[...] = 1.0
    trainer.step(1)
    trainer.save_states(tmp_path / "qhm.states")
    after_one = [p.data().copy() for p in params]
    for p in params:
        p.grad()[...] = 0.5
    trainer.step(1)
    expected = [p.data().copy() for p in params]
    for p, w in zip(params, after_one):
        p.set_data(w)
    trainer.load_states(tmp_path / "qhm.states")
    for p in params:
        p.grad()[...] = 0.5
    trainer.step(1)
    for p, w in zip(params, expected):
        np.testing.assert_array_equal(p.data(), w)


def _make_step(w0, learning_rate, wd, rescale_grad, clip_gradient, beta, nu):
    w, m = np.array(w0, copy=True), np.zeros_like(w0)

    def one(grad):
        g = rescale_grad * grad
        if clip_gradient is not None:
            g = np.clip(g, -clip_gradient, clip_gradient)
        g = g + wd * w
        m[...] = beta * m + (1 - beta) * g
        w[...] = w - learning_rate * ((1 - nu) * g + nu * m)
        return w.copy()
    return one


def test_the_oracle_verifies_and_identifies_an_implementation_of_it(qhm):
    from toolkit import oracle
    report = oracle.verify(_make_step, NAME, dtype="float64", examples=20)
    assert report.passed, report.summary()
    found = oracle.identify(_make_step, NAME, dtype="float64", cases=8, screen=60)
    assert found.convention == "mxnet", found

    def wrong(w0, **hyper):
        return _make_step(w0, **{**hyper, "nu": 1 - hyper["nu"]})
    assert not oracle.verify(wrong, NAME, dtype="float64", examples=20).passed


def test_accuracy_and_regress_run_it_from_its_spec(qhm, tmp_path):
    from toolkit.tools import accuracy, regress
    res = accuracy.measure([NAME], backends=["cpu"], dtypes=["float32", "float64"], cases=5,
                           progress=False)
    assert res.ok and len(res.rows) == 2
    regress.record(tmp_path / "r", optimizers=[NAME], backends=["cpu"], dtypes=["float32"],
                   progress=False)
    doc, = regress.load(tmp_path / "r")
    assert [dict(e["hyper"]) for e in doc["entries"]] == [dict(SPEC.record)]
    assert regress.compare(tmp_path / "r", progress=False).ok


def test_bench_measures_it_from_its_spec(qhm, tmp_path):
    from toolkit.tools import bench
    settings = bench.select_settings([NAME])
    assert [s.label for s in settings] == [NAME]
    result = bench.run_suite("cpu", settings=settings, sizes=(10,), dtypes=("float32",),
                             repeats=1, batch_ms=0.5, resnet=False, use_torch=False,
                             progress=False)
    text = json.dumps(result)
    assert NAME in text
