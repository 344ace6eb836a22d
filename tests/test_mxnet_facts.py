"""Table-driven MXNet 1.9.1 facts: each test states one fact of MXNet's optimizer interface and
checks the toolkit against it, with the value measured from MXNet (``facts.json``) where the
data holds it and the value stated in ``docs/mxnet-facts.md`` (with its MXNet 1.9.1 source line)
otherwise.

Hyperparameters in the numeric checks are chosen exactly representable in float32 (0.5, 0.125,
...), so MXNet's rounding of kernel hyperparameters to float32 (docs/mxnet-facts.md, 3) is the
identity and a
float64 numpy formula must agree to rounding.
"""
import ast
import math
import re
import warnings

import numpy as np
import pytest

import mxnet_data
from toolkit import lr_scheduler, optimizer

FACTS = mxnet_data.load_facts()

#: the optimizers MXNet 1.9.1 ran through generate.py (its data files) whose update adds no noise
#: (``Spec.noise``: SGLD's facts have tests of their own): what the tables below cover
RECORDED = frozenset(n for n in mxnet_data.OPTIMIZERS if not optimizer.spec_of(n).noise)


def fact(key):
    return FACTS[key]["value"]


def r32(x):
    return float(np.float32(x))


def one_step(opt, w, g, index=0):
    w = np.array(w, dtype=np.float64)
    g = np.array(g, dtype=np.float64)
    state = opt.create_state(index, w)
    opt.update(index, w, g, state)
    return w, state


def quiet(factory, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return factory(*args, **kwargs)


# ------------------------------------------------------------------------------------------
# 1.4 clipping: order and gating
# ------------------------------------------------------------------------------------------
CLIP_GRADS = [2.0, 1.0, 0.8, 1.3, -3.0, 0.4, -1.1, 0.0]

#: the configurations whose first step from w = 0 is w = -lr*g, where the clipping order shows
SGD_LIKE = [  # checked against the registry by test_sgd_like_are_those_stepping_minus_lr_g
    ("sgd", {}), ("sgd", {"momentum": 0.5}), ("nag", {}), ("lbsgd", {}), ("dcasgd", {})]


def _first_step_is_minus_lr_g(name, kw):
    g = np.array(CLIP_GRADS)
    w, _ = one_step(optimizer.create(name, learning_rate=1.0, **kw), np.zeros_like(g), g)
    return np.array_equal(w, -g)


def test_sgd_like_are_those_stepping_minus_lr_g():
    """SGD_LIKE holds every recorded optimizer whose plain first step is ``-lr*g``, and only
    those (a configuration that stops being one fails here, not silently in the test below)."""
    assert all(_first_step_is_minus_lr_g(name, kw) for name, kw in SGD_LIKE)
    assert ({name for name, _ in SGD_LIKE}
            == {name for name in RECORDED if _first_step_is_minus_lr_g(name, {})})


@pytest.mark.parametrize("name,kw", SGD_LIKE)
def test_clip_applies_to_rescaled_grad(name, kw):
    """clip(rs*grad, c), never rs*clip(grad, c): rs=0.5, c=0.6, lr=1 from w=0 gives -clip(0.5*g)."""
    opt = optimizer.create(name, learning_rate=1.0, rescale_grad=0.5, clip_gradient=0.6, **kw)
    g = np.array(CLIP_GRADS)
    w, _ = one_step(opt, np.zeros_like(g), g)
    c = r32(0.6)  # kernel parameter / nd.clip bound: float32 (fact nd_clip_bound_float64)
    expected = -np.clip(0.5 * g, -c, c)
    assert np.array_equal(w, expected)
    wrong = -0.5 * np.clip(g, -c, c)
    assert np.max(np.abs(w - wrong)) >= 0.1  # the docstrings' order differs visibly


def test_nd_clip_bound_is_float32():
    got = [float.fromhex(h) for h in fact("nd_clip_bound_float64")]
    # DCASGD's first step (w_prev = w, wd = 0) is w = -lr*clip(rs*g, c)
    opt = optimizer.DCASGD(learning_rate=1.0, clip_gradient=0.6)
    w, _ = one_step(opt, np.zeros(3), [0.7, -0.7, 0.3])
    assert list(-w) == got


KERNEL_OPTS = [  # checked against the registry by test_clip_tables_split_by_mxnet_kernel
    ("sgd", {}), ("sgd", {"momentum": 0.5}), ("nag", {"momentum": 0.5}), ("rmsprop", {}),
    ("rmsprop", {"centered": True}), ("adam", {}), ("signum", {}), ("ftml", {}), ("ftrl", {}),
    ("lbsgd", {"momentum": 0.5})]
PYOP_OPTS = [  # checked against the registry by test_clip_tables_split_by_mxnet_kernel
    ("adagrad", {}), ("adadelta", {}), ("adamax", {}), ("nadam", {}), ("dcasgd", {}),
    ("dcasgd", {"momentum": 0.5})]


def test_clip_tables_split_by_mxnet_kernel():
    """MXNet's kernel optimizers (``Optimizer.mxnet_kernel``) gate clipping on a truthy bound,
    its Python-op ones on ``is not None``: the two tables are exactly the recorded optimizers
    of each kind."""
    kinds = {name: optimizer.registry()[name].mxnet_kernel for name in RECORDED}
    assert {name for name, _ in KERNEL_OPTS} == {n for n, kernel in kinds.items() if kernel}
    assert {name for name, _ in PYOP_OPTS} == {n for n, kernel in kinds.items() if not kernel}


@pytest.mark.parametrize("name,kw", KERNEL_OPTS)
def test_clip_zero_is_off_for_kernel_optimizers(name, kw):
    g = [3.0, -2.0, 0.25, 1e-3]
    w0 = [0.5, -1.0, 2.0, 0.0]
    a, _ = one_step(optimizer.create(name, clip_gradient=0.0, **kw), w0, g)
    b, _ = one_step(optimizer.create(name, clip_gradient=None, **kw), w0, g)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, np.array(w0))


@pytest.mark.parametrize("name,kw", PYOP_OPTS)
def test_clip_zero_clips_to_zero_for_python_op_optimizers(name, kw):
    g = [3.0, -2.0, 0.25, 1e-3]
    w0 = [0.5, -1.0, 2.0, 0.0]
    a, _ = one_step(optimizer.create(name, clip_gradient=0.0, **kw), w0, g)
    # every gradient becomes 0 and wd is 0: nothing moves (Adamax: MXNet gives NaN from 0/0,
    # the toolkit leaves the element unchanged, a documented difference)
    assert np.array_equal(a, np.array(w0))
    b, _ = one_step(optimizer.create(name, clip_gradient=None, **kw), w0, g)
    assert not np.array_equal(b, np.array(w0))


def test_sgld_clip_zero_equals_zero_gradient():
    w0 = np.linspace(-1, 1, 9)
    a, _ = one_step(optimizer.SGLD(clip_gradient=0.0, seed=3), w0, np.linspace(2, 5, 9))
    b, _ = one_step(optimizer.SGLD(seed=3), w0, np.zeros(9))
    assert np.array_equal(a, b)


def test_adagrad_clip_zero_mxnet_vs_guide():
    w0, g = [1.0, 2.0], [1.0, -1.0]
    a, _ = one_step(optimizer.AdaGrad(clip_gradient=0.0), w0, g)
    assert np.array_equal(a, w0)
    # guide convention: clip whenever not None too
    b, _ = one_step(optimizer.AdaGrad(clip_gradient=0.0, convention="guide"), w0, g)
    assert np.array_equal(b, w0)
    # SGD guide convention clips to 0 as well, while mxnet does not
    c, _ = one_step(optimizer.SGD(clip_gradient=0.0, convention="guide"), w0, g)
    assert np.array_equal(c, w0)


# ------------------------------------------------------------------------------------------
# 1.4 weight-decay placement
# ------------------------------------------------------------------------------------------
W_EXACT = np.array([1.0, 2.0, -4.0, 0.5, -0.25])

WD_INSIDE = [  # checked against the registry by test_wd_tables_split_the_recorded_optimizers
    ("adam", {}), ("rmsprop", {}), ("rmsprop", {"centered": True}), ("ftml", {}), ("adamax", {}),
    ("nadam", {})]
WD_OUTSIDE = [  # checked against the registry by test_wd_tables_split_the_recorded_optimizers
    ("sgd", {}), ("sgd", {"momentum": 0.5}), ("nag", {"momentum": 0.5}), ("lbsgd", {}),
    ("dcasgd", {}), ("adagrad", {}), ("adadelta", {}), ("signum", {}), ("ftrl", {})]


def test_wd_tables_split_the_recorded_optimizers():
    """Each recorded optimizer puts its weight decay inside the gradient or not: the two tables
    hold every one of them, each in one table only."""
    inside = {name for name, _ in WD_INSIDE}
    outside = {name for name, _ in WD_OUTSIDE}
    assert not inside & outside and inside | outside == RECORDED


@pytest.mark.parametrize("name,kw", WD_INSIDE)
def test_wd_inside_gradient_before_clipping(name, kw):
    """g = clip(rs*grad + wd*w, c): wd=0.5 with grad -4*w is exactly wd=0 with grad -3.5*w
    (and wd=0.5 with grad 0 is wd=0 with grad 0.5*w)."""
    for clip in (None, 0.25):
        for ga, gb in ((-4.0, -3.5), (0.0, 0.5)):
            a, sa = one_step(optimizer.create(name, wd=0.5, clip_gradient=clip, **kw), W_EXACT,
                             ga * W_EXACT)
            b, sb = one_step(optimizer.create(name, wd=0.0, clip_gradient=clip, **kw), W_EXACT,
                             gb * W_EXACT)
            assert np.array_equal(a, b)
            for x, y in zip(arrays_of(sa), arrays_of(sb)):
                assert np.array_equal(x, y)


@pytest.mark.parametrize("name,kw", WD_OUTSIDE)
def test_wd_not_inside_gradient(name, kw):
    a, _ = one_step(optimizer.create(name, wd=0.5, clip_gradient=0.25, **kw), W_EXACT,
                    -4.0 * W_EXACT)
    b, _ = one_step(optimizer.create(name, wd=0.0, clip_gradient=0.25, **kw), W_EXACT,
                    -3.5 * W_EXACT)
    assert not np.array_equal(a, b)


def test_wd_sgd_after_clip_times_lr():
    # w = (w - (lr*wd)*w) - lr*clip(rs*g, c)
    lr, wd, c = 0.125, 0.5, 0.25
    g = np.array([1.0, -1.0, 0.1, 0.0, 3.0])
    w, _ = one_step(optimizer.SGD(learning_rate=lr, wd=wd, clip_gradient=c), W_EXACT, g)
    assert np.allclose(w, (W_EXACT - (lr * wd) * W_EXACT) - lr * np.clip(g, -c, c),
                       rtol=1e-15, atol=0)


@pytest.mark.parametrize("lr", [123.0, 0.5, 0.0])
def test_adadelta_wd_not_scaled_by_lr(lr):
    """AdaDelta: w -= delta + wd*w, the learning rate is never read (lr=123 is ignored)."""
    rho, eps, wd = 0.5, 2.0 ** -10, 0.125
    g = np.array([1.0, -2.0, 0.5, 0.0, 4.0])
    w, _ = one_step(optimizer.AdaDelta(learning_rate=lr, rho=rho, epsilon=eps, wd=wd), W_EXACT, g)
    acc_g = (1 - rho) * g * g
    delta = np.sqrt(0 + eps) / np.sqrt(acc_g + eps) * g
    assert np.allclose(w, W_EXACT - (delta + wd * W_EXACT), rtol=1e-14, atol=1e-15)
    # grad 0: only the decay, with no lr
    w0, _ = one_step(optimizer.AdaDelta(learning_rate=lr, wd=wd), W_EXACT, np.zeros(5))
    assert np.array_equal(w0, W_EXACT - wd * W_EXACT)


def test_adagrad_wd_outside_adaptive_scaling():
    lr, wd, eps = 0.125, 0.5, 2.0 ** -20
    g = np.array([1.0, -2.0, 0.5, 0.0, 4.0])
    w, _ = one_step(optimizer.AdaGrad(learning_rate=lr, wd=wd, eps=eps), W_EXACT, g)
    h = g * g
    assert np.allclose(w, W_EXACT + (g / np.sqrt(h + eps) + W_EXACT * wd) * (-lr),
                       rtol=1e-14, atol=1e-15)


def test_signsgd_wd_decoupled_times_lr():
    lr, wd = 0.125, 0.5
    g = np.array([1.0, -2.0, 0.5, 0.0, 4.0])
    w, _ = one_step(optimizer.Signum(learning_rate=lr, momentum=0.0, wd=wd), W_EXACT, g)
    assert np.array_equal(w, (1 - lr * wd) * W_EXACT - lr * np.sign(g))


def test_ftrl_wd_in_denominator():
    lr, wd, l1, beta = 0.5, 0.25, 0.125, 1.0
    g = np.array([1.0, -2.0, 0.5, 0.0, 4.0])
    w, _ = one_step(optimizer.Ftrl(learning_rate=lr, wd=wd, lamda1=l1, beta=beta), W_EXACT, g)
    z = g - (np.sqrt(g * g) - 0.0) * W_EXACT / lr
    n = g * g
    expected = (np.sign(z) * l1 - z) / ((beta + np.sqrt(n)) / lr + wd) * (np.abs(z) > l1)
    assert np.allclose(w, expected, rtol=1e-14, atol=1e-15)


# ------------------------------------------------------------------------------------------
# 1.3 update counts and t
# ------------------------------------------------------------------------------------------
ADAM_KW = dict(learning_rate=0.125, beta1=0.5, beta2=0.75, epsilon=2.0 ** -20)


def adam_numpy(w, g, t, lr=0.125, b1=0.5, b2=0.75, eps=2.0 ** -20):
    lr_t = r32(lr * math.sqrt(1.0 - b2 ** t) / (1.0 - b1 ** t))
    m = (1 - b1) * g
    v = (1 - b2) * g * g
    return w - lr_t * m / (np.sqrt(v) + eps)


def test_adam_t_is_per_index_and_num_update_is_max():
    rng = np.random.default_rng(0)
    opt = optimizer.Adam(**ADAM_KW)
    w0 = rng.standard_normal(6)
    s0 = opt.create_state(0, w0)
    for _ in range(3):
        opt.update(0, w0, rng.standard_normal(6), s0)
    assert opt.num_update == 3
    w1 = rng.standard_normal(6)
    g1 = rng.standard_normal(6)
    start = w1.copy()
    s1 = opt.create_state(1, w1)
    opt.update(1, w1, g1, s1)
    assert opt._index_update_count == {0: 3, 1: 1}
    assert opt.num_update == 3
    assert np.allclose(w1, adam_numpy(start, g1, t=1), rtol=1e-14, atol=0)
    fresh, _ = one_step(optimizer.Adam(**ADAM_KW), start, g1, index=1)
    assert np.array_equal(w1, fresh)
    assert not np.allclose(w1, adam_numpy(start, g1, t=4), rtol=1e-6)


def test_begin_num_update_10_gives_t_11():
    want = fact("begin_num_update_10")
    opt = optimizer.Adam(begin_num_update=10, **ADAM_KW)
    w = np.array([0.5, -1.0, 2.0])
    g = np.array([0.25, 1.0, -3.0])
    start = w.copy()
    s = opt.create_state(0, w)
    opt.update(0, w, g, s)
    assert opt._index_update_count[0] == want["t_index0_first"]
    assert np.allclose(w, adam_numpy(start, g, t=11), rtol=1e-14, atol=0)
    assert not np.allclose(w, adam_numpy(start, g, t=1), rtol=1e-6)
    w1 = start.copy()
    s1 = opt.create_state(1, w1)
    opt.update(1, w1, g, s1)
    assert opt._index_update_count[1] == want["t_index1_first"]
    assert opt.num_update == want["num_update"]
    assert np.array_equal(w1, w)


@pytest.mark.parametrize("name,key", [("sgd", "lr_timing_sgd"), ("lbsgd", "lr_timing_lbsgd")])
def test_lr_timing_through_weights(name, key):
    """SGD reads the scheduler after incrementing the count, LBSGD before:
    FactorScheduler(step=1, factor=0.5): SGD .1, .05, .025...; LBSGD .1, .1, .05..."""
    data = FACTS[key]
    sched = lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=0.1)
    opt = optimizer.create(name, learning_rate=0.1, lr_scheduler=sched)
    w = np.zeros(1)
    g = np.ones(1)
    s = opt.create_state(0, w)
    decreases = []
    for _ in range(len(data["value"])):
        before = w[0]
        opt.update(0, w, g, s)
        decreases.append(before - w[0])
    assert decreases == data["weight_decrease"]
    assert decreases == [r32(v) for v in data["value"]]


def test_lbsgd_lr_lag_stated_values():
    # docs/mxnet-facts.md, 1.3: LBSGD .1, .1, .05 where SGD uses .1, .05, .025
    assert fact("lr_timing_lbsgd")[:3] == [0.1, 0.1, 0.05]
    assert fact("lr_timing_sgd")[:3] == [0.1, 0.05, 0.025]


# ------------------------------------------------------------------------------------------
# 4. FactorScheduler: ceil semantics
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["scheduler_factor", "scheduler_factor_step1",
                                 "scheduler_factor_warmup_linear",
                                 "scheduler_factor_warmup_constant"])
def test_factor_scheduler_values(key):
    d = FACTS[key]
    sched = lr_scheduler.FactorScheduler(**d["kwargs"])
    got = [sched(n) for n in d["n"]]
    assert got == d["value"]


def test_factor_scheduler_ceil_not_floor():
    d = FACTS["scheduler_factor"]
    kw = d["kwargs"]
    step, factor, base, stop = kw["step"], kw["factor"], kw["base_lr"], kw["stop_factor_lr"]
    for n, v in zip(d["n"], d["value"]):
        closed = max(base * factor ** max(0, math.ceil(n / step) - 1), stop)
        assert v == pytest.approx(closed, rel=1e-15)
    sched = lr_scheduler.FactorScheduler(step=3, factor=0.5, base_lr=1.0)
    assert [sched(n) for n in (1, 2, 3, 4, 6, 7)] == [1.0, 1.0, 1.0, 0.5, 0.5, 0.25]


def test_factor_scheduler_nonmonotone():
    d = FACTS["scheduler_factor_nonmonotone"]
    sched = lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=1.0)
    assert [sched(n) for n in d["n"]] == d["value"]


# ------------------------------------------------------------------------------------------
# 2.9 SignSGD ignores rescale_grad and clip_gradient
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rs,clip", [(0.0, None), (1e-6, 1e-9), (3.0, 0.0), (1.0, 0.5)])
def test_signsgd_ignores_rescale_and_clip(rs, clip):
    g = np.array([0.5, -2.0, 0.0, 1e-3, -1e-3])
    a, _ = one_step(optimizer.Signum(learning_rate=0.125, momentum=0.0, rescale_grad=rs,
                                     clip_gradient=clip), W_EXACT, g)
    b, _ = one_step(optimizer.Signum(learning_rate=0.125, momentum=0.0), W_EXACT, g)
    assert np.array_equal(a, b)
    assert np.array_equal(a, W_EXACT - 0.125 * np.sign(g))


def test_signum_uses_rescale_and_clip():
    g = np.array([0.5, -2.0, 0.25, 1e-3, -1e-3])
    a, _ = one_step(optimizer.Signum(learning_rate=0.125, momentum=0.5, rescale_grad=0.0), W_EXACT, g)
    assert np.array_equal(a, W_EXACT)  # sign(mom) = sign(0) = 0


# ------------------------------------------------------------------------------------------
# 1.2 multipliers
# ------------------------------------------------------------------------------------------
IDX2NAME = {0: "fc_weight", 1: "fc_bias", 2: "bn_gamma", 3: "bn_beta"}


@pytest.mark.parametrize("name,key", [("sgd", "get_wds_idx2name_sgd"),
                                      ("adam", "get_wds_idx2name_adam")])
def test_wd_mult_from_idx2name(name, key):
    want = fact(key)
    assert want == [0.1, 0.0, 0.1, 0.0]
    opt = optimizer.create(name, wd=0.1, param_idx2name=IDX2NAME)
    assert [opt._get_wd(i) for i in range(4)] == want
    assert opt.wd_mult == fact("wd_mult_dict_after_idx2name")


def test_wd_mult_from_idx2name_through_weights():
    opt = optimizer.SGD(learning_rate=0.5, wd=0.5, param_idx2name=IDX2NAME)
    out = []
    for i in range(4):
        w = np.ones(2)
        opt.update(i, w, np.zeros(2), None)
        out.append(w[0])
    assert out == [0.75, 1.0, 0.75, 1.0]


def test_lr_and_wd_mult_by_name_and_index():
    want = fact("lr_wd_mult_by_name_and_index")
    opt = optimizer.SGD(learning_rate=0.2, wd=0.1, param_idx2name=IDX2NAME)
    opt.set_lr_mult({"fc_weight": 0.5, 2: 3.0})
    opt.set_wd_mult({"fc_bias": 2.0, 3: 4.0})
    assert [opt._get_lr(i) for i in range(4)] == want["lrs"]
    assert [opt._get_wd(i) for i in range(4)] == want["wds"]
    wd_mult = {int(k) if k.isdigit() else k: v for k, v in want["wd_mult"].items()}
    assert opt.wd_mult == wd_mult


def test_lr_mult_index_beats_name():
    opt = optimizer.SGD(learning_rate=0.5, param_idx2name={0: "a_weight"})
    opt.set_lr_mult({0: 0.5, "a_weight": 0.25})
    assert opt._get_lr(0) == 0.25
    w = np.zeros(1)
    opt.update(0, w, np.ones(1), None)
    assert w[0] == -0.25


class Param:
    def __init__(self, lr_mult=1.0, wd_mult=1.0):
        self.lr_mult, self.wd_mult = lr_mult, wd_mult


def test_param_dict_multipliers_and_precedence():
    want = fact("gluon_param_dict_multipliers")
    pd = {0: Param(), 1: Param(0.5, 2.0)}  # index 0 = bias, 1 = weight (sorted names)
    opt = optimizer.SGD(learning_rate=0.1, wd=0.1, param_dict=pd)
    assert [opt._get_lr(i) for i in range(2)] == want["before"]["lrs"]
    assert [opt._get_wd(i) for i in range(2)] == want["before"]["wds"]
    assert want["bias_wd_mult"] == 1.0  # gluon biases are decayed
    pd[1].lr_mult = 0.25  # a reference, not a copy
    assert [opt._get_lr(i) for i in range(2)] == want["after_lr_mult_change"]["lrs"]
    # param_dict first, then lr_mult[index], then lr_mult[name]
    opt2 = optimizer.SGD(learning_rate=0.1, wd=0.1, param_dict={1: Param(0.5, 2.0)},
                         param_idx2name={0: "x_bias", 1: "x_bias"})
    opt2.set_lr_mult({1: 7.0, "x_bias": 9.0, 0: 3.0})
    opt2.set_wd_mult({1: 7.0})
    assert opt2._get_lr(1) == 0.05 and opt2._get_wd(1) == 0.2
    assert opt2._get_lr(0) == pytest.approx(0.3) and opt2._get_wd(0) == 0.0
    w = np.zeros(1)
    opt2.update(1, w, np.ones(1), None)
    assert w[0] == -r32(0.05)


# ------------------------------------------------------------------------------------------
# 1.1 / 4: learning_rate overwriting the scheduler's base_lr
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key,make_sched", [
    ("adam_default_lr_with_CosineScheduler",
     lambda: lr_scheduler.CosineScheduler(max_update=10, base_lr=1.0)),
    ("adam_default_lr_with_PolyScheduler",
     lambda: lr_scheduler.PolyScheduler(max_update=10, base_lr=1.0, pwr=2)),
    ("adam_default_lr_with_FactorScheduler",
     lambda: lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=1.0)),
])
def test_adam_default_lr_overwrites_base_lr(key, make_sched):
    want = fact(key)
    sched = make_sched()
    with pytest.warns(UserWarning, match="overwrites"):
        opt = optimizer.Adam(lr_scheduler=sched)
    assert sched.base_lr == want["base_lr_after"]
    assert opt._get_lr(0, 1) == want["lr_1"]
    assert opt._get_lr(0, 2) == want["lr_2"]


def test_adam_cosine_lr_used_in_updates():
    want = fact("adam_cosine_lr_used")
    assert want[0] == 0.9755282581475768
    opt = quiet(optimizer.Adam, lr_scheduler=lr_scheduler.CosineScheduler(max_update=10,
                                                                           base_lr=1.0))
    w = np.zeros(2)
    s = opt.create_state(0, w)
    used = []
    for _ in range(3):
        opt.update(0, w, np.ones(2), s)
        used.append(opt._get_lr(0))
    assert used == want


def test_sgd_learning_rate_overwrites_factor_base_lr():
    want = fact("lr_and_scheduler_mismatch_message")
    sched = lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=0.1)
    opt = quiet(optimizer.SGD, learning_rate=0.2, lr_scheduler=sched)
    assert sched.base_lr == want["base_lr_after"]


def test_sgd_scheduler_without_learning_rate_keeps_base_lr():
    want = fact("sgd_scheduler_no_lr")
    sched = lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt = optimizer.SGD(lr_scheduler=sched)
    assert sched.base_lr == want["base_lr_after"]
    assert opt._get_lr(0, 1) == 0.3


def test_ftrl_learning_rate_does_not_overwrite_base_lr():
    want = fact("ftrl_scheduler_base_lr")
    sched = lr_scheduler.CosineScheduler(max_update=10, base_lr=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # MXNet prints nothing: no overwrite happens
        opt = optimizer.Ftrl(lr_scheduler=sched)
    assert sched.base_lr == want["base_lr_after"]
    assert opt.lr == want["opt_lr"]
    assert opt._get_lr(0) == want["get_lr_0"]
    sched2 = lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=1.0)
    opt2 = optimizer.Ftrl(learning_rate=0.3, lr_scheduler=sched2)
    assert sched2.base_lr == 1.0 and opt2._get_lr(0, 1) == 1.0


def test_set_learning_rate_fact():
    want = fact("set_learning_rate_with_scheduler")
    assert want["raised"] == "UserWarning"
    opt = optimizer.SGD(learning_rate=0.1,
                        lr_scheduler=lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=0.1))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with pytest.raises(UserWarning):
            opt.set_learning_rate(0.5)
    assert len(rec) == want["warnings_emitted"]
    assert opt.lr == want["opt_lr_after"]
    assert opt.learning_rate == want["learning_rate_property"]
    want2 = fact("set_learning_rate_without_scheduler")
    opt2 = optimizer.SGD(learning_rate=0.1)
    opt2.set_learning_rate(0.5)
    assert opt2.lr == want2["opt_lr"] and opt2.learning_rate == want2["learning_rate"]


# ------------------------------------------------------------------------------------------
# 2.8 Nadam: m_schedule shared across indices
# ------------------------------------------------------------------------------------------
def nadam_numpy(w, g, t, m_schedule, lr=0.125, b1=0.5, b2=0.75, eps=2.0 ** -20, sd=0.004):
    mu_t = b1 * (1 - 0.5 * 0.96 ** (t * sd))
    mu_t1 = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * sd))
    m_schedule = m_schedule * mu_t
    ms_next = m_schedule * mu_t1
    m = (1 - b1) * g
    v = (1 - b2) * g * g
    g_hat = g / (1 - m_schedule)
    m_hat = m / (1 - ms_next)
    v_hat = v / (1 - b2 ** t)
    m_bar = (1 - mu_t) * g_hat + mu_t1 * m_hat
    return w - lr * m_bar / (np.sqrt(v_hat) + eps), m_schedule


def test_nadam_m_schedule_shared_across_indices():
    kw = dict(learning_rate=0.125, beta1=0.5, beta2=0.75, epsilon=2.0 ** -20)
    opt = optimizer.Nadam(**kw)
    w0, g0 = np.array([0.5, -1.0, 2.0]), np.array([1.0, 0.25, -3.0])
    w1, g1 = np.array([1.5, 0.0, -2.0]), np.array([-1.0, 2.0, 0.5])
    e0, ms = nadam_numpy(w0, g0, 1, 1.0)
    e1, ms = nadam_numpy(w1, g1, 1, ms)  # index 1 also has t = 1, but continues m_schedule
    s0 = opt.create_state(0, w0)
    opt.update(0, w0, g0, s0)
    s1 = opt.create_state(1, w1)
    start1 = w1.copy()
    opt.update(1, w1, g1, s1)
    assert np.allclose(w0, e0, rtol=1e-14, atol=0)
    assert np.allclose(w1, e1, rtol=1e-14, atol=0)
    assert opt.m_schedule == pytest.approx(ms, rel=1e-15)
    mu1 = 0.5 * (1 - 0.5 * 0.96 ** 0.004)
    assert opt.m_schedule == pytest.approx(mu1 * mu1, rel=1e-15)
    fresh, _ = one_step(optimizer.Nadam(**kw), start1, g1, index=1)
    assert not np.array_equal(w1, fresh)  # a per-index schedule would give `fresh`


# ------------------------------------------------------------------------------------------
# 1.7 state dtype = weight dtype (MXNet's float32-only state is a bug we fix)
# ------------------------------------------------------------------------------------------
#: configurations with a state (SGD and NAG with momentum)
ALL_CONFIGS = [  # checked against the registry by test_state_configs_cover_the_recorded_optimizers
    ("sgd", {"momentum": 0.5}), ("nag", {"momentum": 0.5}), ("adagrad", {}), ("rmsprop", {}),
    ("rmsprop", {"centered": True}), ("adadelta", {}), ("adam", {}), ("adamax", {}), ("nadam", {}),
    ("signum", {}), ("lbsgd", {"momentum": 0.5}), ("dcasgd", {}), ("dcasgd", {"momentum": 0.5}),
    ("ftrl", {}), ("ftml", {})]


def test_state_configs_cover_the_recorded_optimizers():
    assert {name for name, _ in ALL_CONFIGS} == RECORDED


def arrays_of(state):
    if state is None:
        return []
    if isinstance(state, np.ndarray):
        return [state]
    return [a for s in state for a in arrays_of(s)]


@pytest.mark.parametrize("name,kw", ALL_CONFIGS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_state_dtype_is_weight_dtype(name, kw, dtype):
    opt = optimizer.create(name, **kw)
    w = np.linspace(-1, 1, 7).astype(dtype)
    s = opt.create_state(0, w)
    arrs = arrays_of(s)
    assert arrs and all(a.dtype == dtype and a.shape == w.shape for a in arrs)
    opt.update(0, w, np.linspace(0.5, -0.5, 7).astype(dtype), s)
    assert w.dtype == dtype and np.all(np.isfinite(w))
    assert all(a.dtype == dtype for a in arrays_of(s))


def test_mxnet_float32_only_state_was_an_error_there():
    """MXNet refused a float64 weight for the optimizers its data records as ``<name>_float64``
    errors; each of them is one the state-dtype test above runs in float64."""
    errs = fact("errors")
    float64 = {key[:-len("_float64")] for key in errs if key.endswith("_float64")}
    assert len(float64) == 4
    for name in float64:
        assert errs[f"{name}_float64"]["type"] == "MXNetError"
    assert float64 <= {name for name, _ in ALL_CONFIGS}


# ------------------------------------------------------------------------------------------
# 1.8 multi-precision state layouts
# ------------------------------------------------------------------------------------------
def describe(state, w16):
    w32 = w16.astype(np.float32)
    if state is None:
        return "None"
    if isinstance(state, np.ndarray):
        if np.array_equal(state, w32) and np.any(state):
            kind = "w32"
        elif not np.any(state):
            kind = "zeros"
        else:
            kind = "?"
        return f"{kind}:{state.dtype}"
    return "(" + ", ".join(describe(s, w16) for s in state) + ")"


def _config(key):
    """A facts key as a configuration: ``"rmsprop(centered=True)"`` -> ``("rmsprop",
    {"centered": True})``."""
    name, _, args = key.partition("(")
    kw = {}
    for item in filter(None, args.rstrip(")").split(",")):
        k, v = item.split("=")
        kw[k.strip()] = ast.literal_eval(v.strip())
    return name, kw


def _master_slot(layout):
    """Where a layout (``"(None, w32:float32)"``) keeps the float32 master weight at its top
    level: SGD, NAG and LARS second, after the momentum; the others first."""
    depth, top = 0, [""]
    for ch in layout[1:-1]:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            top.append("")
        else:
            top[-1] += ch
    return [item.strip() for item in top].index("w32:float32")


#: every configuration whose create_state_multi_precision layout MXNet 1.9.1 recorded, read from
#: facts.json (its key ``lbsgd(momentum=0.9).create_state`` is LBSGD's create_state instead)
MP_CASES = [(key, *_config(key)) for key in fact("multi_precision_state_layout")
            if re.fullmatch(r"\w+(\([^()]*\))?", key)]


@pytest.mark.parametrize("key,name,kw", MP_CASES)
def test_multi_precision_state_layout(key, name, kw):
    want = fact("multi_precision_state_layout")[key]
    opt = optimizer.create(name, multi_precision=True, **kw)
    w16 = np.linspace(-1, 1, 5).astype(np.float16)
    state = opt.create_state_multi_precision(0, w16)
    assert describe(state, w16) == want
    # SGD, NAG and LARS: (mom32 | None, w32); the others: (w32, inner)
    master = state[_master_slot(want)]
    assert master.dtype == np.float32 and np.array_equal(master, w16.astype(np.float32))


@pytest.mark.parametrize("key,name,kw", [c for c in MP_CASES
                                         if not optimizer.spec_of(c[1]).noise])
def test_multi_precision_update_matches_float32(key, name, kw):
    rng = np.random.default_rng(4)
    w16 = rng.standard_normal(9).astype(np.float16)
    opt = optimizer.create(name, multi_precision=True, **kw)
    ref = optimizer.create(name, **kw)
    state = opt.create_state_multi_precision(0, w16)
    w32 = w16.astype(np.float32)
    s32 = ref.create_state(0, w32)
    for _ in range(3):
        g16 = rng.standard_normal(9).astype(np.float16)
        opt.update_multi_precision(0, w16, g16, state)
        ref.update(0, w32, g16.astype(np.float32), s32)
        assert np.array_equal(w16, w32.astype(np.float16))
    master = state[_master_slot(fact("multi_precision_state_layout")[key])]
    assert np.array_equal(master, w32)


# ------------------------------------------------------------------------------------------
# 2.11 DCASGD with momentum (MXNet 1.9.1 crashes on it)
# ------------------------------------------------------------------------------------------
def test_dcasgd_momentum_works():
    errs = fact("errors")
    assert errs["dcasgd_momentum_n3"]["type"] == "ValueError"  # MXNet's crash
    lr, mu, lam, wd = 0.125, 0.5, 0.25, 0.0625
    rng = np.random.default_rng(6)
    w = rng.standard_normal(8)
    opt = optimizer.DCASGD(learning_rate=lr, momentum=mu, lamda=lam, wd=wd)
    state = opt.create_state(0, w)
    ew, mom, w_prev = w.copy(), np.zeros(8), w.copy()
    for _ in range(4):
        g = rng.standard_normal(8)
        opt.update(0, w, g, state)
        step = -lr * (g + wd * ew + lam * g * g * (ew - w_prev))
        mom = mu * mom + step
        w_prev = ew.copy()
        ew = ew + mom
        assert np.allclose(w, ew, rtol=1e-14, atol=1e-15)
        assert np.allclose(state[0], mom, rtol=1e-14, atol=1e-15)
        assert np.array_equal(state[1], w_prev)


# ------------------------------------------------------------------------------------------
# registry and custom optimizers
# ------------------------------------------------------------------------------------------
def test_registry_names_cover_mxnet_guide_optimizers():
    mx = set(fact("registry_names"))
    ours = set(optimizer.registry())
    assert len(mxnet_data.OPTIMIZERS) == 14
    assert set(mxnet_data.OPTIMIZERS) <= ours & mx  # those MXNet ran through generate.py
    # MXNet: "Cannot find optimizer adamw" (only the operator mx.nd.contrib.adamw_update); the
    # toolkit's adamw is built on that operator (docs/optimizers/adamw.md)
    assert "adamw" not in mx and "adamw" in ours
    assert "lars" in mx and "lars" in ours
    # mxnet.optimizer.contrib.GroupAdaGrad registers under its lower-cased class name
    assert "groupadagrad" in mx and "groupadagrad" in ours
    assert "lamb" in mx and "lamb" in ours


@pytest.fixture
def registry_cleanup():
    before = optimizer.registry()
    yield
    for name in set(optimizer.registry()) - set(before):
        optimizer.unregister(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re-registering a replaced built-in warns, as MXNet does
        for klass in before.values():
            if optimizer.registry()[klass.__name__.lower()] is not klass:
                optimizer.register(klass)


def test_guide_style_custom_optimizer(registry_cleanup):
    @optimizer.register
    class GuideMomentum(optimizer.Optimizer):
        """The guide's recipe (MXNet's NAG source as the example): override create_state and
        update, use _update_count, _get_lr and _get_wd."""

        def __init__(self, momentum=0.5, **kwargs):
            super().__init__(**kwargs)
            self.momentum = momentum

        def create_state(self, index, weight):
            return np.zeros_like(weight)

        def update(self, index, weight, grad, state):
            self._update_count(index)
            lr = self._get_lr(index)
            wd = self._get_wd(index)
            g = grad * self.rescale_grad
            if self.clip_gradient is not None:
                g = np.clip(g, -self.clip_gradient, self.clip_gradient)
            state[:] = self.momentum * state - lr * (g + wd * weight)
            weight += state

    assert "guidemomentum" in optimizer.registry()
    sched = lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=0.5)
    opt = optimizer.create("GuideMomentum", learning_rate=0.5, lr_scheduler=sched, wd=0.25,
                           param_idx2name={0: "a_weight", 1: "a_bias"})
    assert isinstance(opt, GuideMomentum)
    w = np.array([1.0, -2.0])
    s = opt.create_state(0, w)
    g = np.array([0.5, 1.0])
    opt.update(0, w, g, s)  # num_update 1: lr 0.5
    assert opt.num_update == 1 and opt._index_update_count == {0: 1}
    mom = -0.5 * (g + 0.25 * np.array([1.0, -2.0]))
    assert np.array_equal(w, np.array([1.0, -2.0]) + mom)
    w_before = w.copy()
    opt.update(0, w, g, s)  # num_update 2: lr 0.25
    mom = 0.5 * mom - 0.25 * (g + 0.25 * w_before)
    assert np.array_equal(w, w_before + mom)
    b = np.array([1.0])
    sb = opt.create_state(1, b)
    opt.update(1, b, np.zeros(1), sb)  # bias: wd_mult 0, num_update stays 2
    assert b[0] == 1.0 and opt.num_update == 2 and opt._index_update_count[1] == 1
    # registering the same name again replaces it with a warning, as MXNet
    with pytest.warns(UserWarning):
        @optimizer.register
        class guidemomentum(optimizer.Optimizer):  # noqa: N801
            pass
    assert optimizer.registry()["guidemomentum"] is guidemomentum


def test_update_count_with_a_list_of_indices():
    opt = optimizer.SGD(begin_num_update=2)
    opt._update_count([0, 1])
    opt._update_count(0)
    assert opt._index_update_count == {0: 4, 1: 3} and opt.num_update == 4


class EwMomentum(optimizer.ElementwiseOptimizer):
    state_names = ("mom",)

    def __init__(self, momentum=0.75, **kwargs):
        self.momentum = momentum
        super().__init__(**kwargs)

    def hyperparameters(self, index, t, lr, wd):
        return (lr, wd, self.rescale_grad, self.momentum)

    @staticmethod
    def rule(w, g, m, hp):
        lr, wd, rs, mu = hp
        m = mu * m - lr * (rs * g + wd * w)
        return w + m, m


def ew_momentum_numpy(w, g, m, lr, wd, rs, mu):
    d = w.dtype.type
    lr, wd, rs, mu = d(lr), d(wd), d(rs), d(mu)
    m = mu * m - lr * (rs * g + wd * w)
    return w + m, m


class EwAdam(optimizer.ElementwiseOptimizer):
    state_names = ("m", "v")

    def hyperparameters(self, index, t, lr, wd):
        b1, b2 = 0.875, 0.9375
        lr_t = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        return (lr_t, b1, 1 - b1, b2, 1 - b2, 2.0 ** -20)

    @staticmethod
    def rule(w, g, m, v, hp):
        lr_t, b1, omb1, b2, omb2, eps = hp
        m = b1 * m + omb1 * g
        v = b2 * v + omb2 * g * g
        return w - lr_t * m / (math.sqrt(v) + eps), m, v


def ew_adam_numpy(w, g, m, v, t, lr):
    d = w.dtype.type
    b1, b2 = 0.875, 0.9375
    lr_t = d(lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t))
    b1, omb1, b2, omb2, eps = d(b1), d(1 - b1), d(b2), d(1 - b2), d(2.0 ** -20)
    m = b1 * m + omb1 * g
    v = b2 * v + omb2 * g * g
    return w - lr_t * m / (np.sqrt(v) + eps), m, v


class EwPlain(optimizer.ElementwiseOptimizer):
    def hyperparameters(self, index, t, lr, wd):
        return (lr, wd)

    @staticmethod
    def rule(w, g, hp):
        lr, wd = hp
        return w - lr * (g + wd * w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1000, 2 ** 15 + 7])
def test_elementwise_optimizer_matches_numpy(dtype, n):
    rng = np.random.default_rng(7)
    w0 = rng.standard_normal(n).astype(dtype)
    grads = [rng.standard_normal(n).astype(dtype) for _ in range(3)]
    lr, wd, rs = 0.1, 0.01, 0.7  # not float32-exact on purpose: cast to the dtype once

    # one state
    opt = EwMomentum(learning_rate=lr, wd=wd, rescale_grad=rs)
    w, s = w0.copy(), None
    s = opt.create_state(0, w)
    assert s.dtype == dtype and not isinstance(s, tuple)
    ew, em = w0.copy(), np.zeros_like(w0)
    for g in grads:
        opt.update(0, w, g, s)
        ew, em = ew_momentum_numpy(ew, g, em, lr, wd, rs, 0.75)
        assert ew.dtype == dtype
        assert np.array_equal(w, ew) and np.array_equal(s, em)

    # two states, t-dependent host hyperparameters, math.sqrt
    opt = EwAdam(learning_rate=lr)
    w = w0.copy()
    s = opt.create_state(0, w)
    assert isinstance(s, tuple) and len(s) == 2
    ew, em, ev = w0.copy(), np.zeros_like(w0), np.zeros_like(w0)
    for t, g in enumerate(grads, start=1):
        opt.update(0, w, g, s)
        ew, em, ev = ew_adam_numpy(ew, g, em, ev, t, lr)
        assert np.array_equal(w, ew)
        assert np.array_equal(s[0], em) and np.array_equal(s[1], ev)

    # no state
    opt = EwPlain(learning_rate=lr, wd=wd)
    w = w0.copy()
    assert opt.create_state(0, w) is None
    ew = w0.copy()
    d = np.dtype(dtype).type
    for g in grads:
        opt.update(0, w, g, None)
        ew = ew - d(lr) * (g + d(wd) * ew)
        assert np.array_equal(w, ew)


def test_elementwise_optimizer_registration_and_shared_machinery(registry_cleanup):
    optimizer.register(EwMomentum)
    opt = optimizer.create("ewmomentum", learning_rate=0.5, momentum=0.5,
                           param_idx2name={0: "x_weight", 1: "x_bias"}, wd=0.5)
    assert isinstance(opt, EwMomentum)
    w = np.ones(3)
    s = opt.create_state(0, w)
    opt.update(0, w, np.zeros(3), s)
    assert np.array_equal(w, np.full(3, 0.75))
    b = np.ones(3)
    sb = opt.create_state(1, b)
    opt.update(1, b, np.zeros(3), sb)  # wd_mult 0 for the bias
    assert np.array_equal(b, np.ones(3))
    # validation comes for free
    with pytest.raises(ValueError):
        opt.update(0, w, np.zeros(4), s)
    assert opt._index_update_count == {0: 1, 1: 1}
    # multi-precision comes for free
    mp = EwMomentum(learning_rate=0.5, multi_precision=True)
    w16 = np.ones(4, np.float16)
    st = mp.create_state_multi_precision(0, w16)
    mp.update_multi_precision(0, w16, np.ones(4, np.float16), st)
    assert np.array_equal(w16, np.full(4, 0.5, np.float16))
    assert st[0].dtype == np.float32


# ------------------------------------------------------------------------------------------
# LAMB (docs/optimizers/lamb.md)
# ------------------------------------------------------------------------------------------
def test_lamb_defaults_and_aggregation_match_mxnet():
    """MXNet 1.9.1's recorded LAMB attributes (python/mxnet/optimizer/optimizer.py:1253-1262):
    the toolkit's defaults are the same, and so is ``aggregate_num`` (45: MXNet's Updater always
    hands LAMB lists, hence its aggregated kernel is the "mxnet" convention)."""
    mx = fact("optimizer_defaults")["lamb"]
    opt = optimizer.create("lamb")
    assert (opt.lr, opt.beta1, opt.beta2, opt.epsilon, opt.lower_bound, opt.upper_bound,
            opt.bias_correction) == (mx["lr"], mx["beta1"], mx["beta2"], mx["epsilon"],
                                     mx["lower_bound"], mx["upper_bound"], mx["bias_correction"])
    assert opt.aggregate_num == mx["aggregate_num"] == fact("aggregate_num")["lamb"] == 45
