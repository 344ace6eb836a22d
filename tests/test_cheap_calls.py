"""Cheap calls keep every check: ``update`` remembers (weakly) the numpy arrays of a step that
passed and skips re-checking them only while nothing a check reads has changed; every change
below is refused with the same error as on a first call, and nothing is written."""
from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

from toolkit import optimizer


def _passed(name="adam", *, state_from_twin=False, **kw):
    """An optimizer after two steps, the second remembered. ``state_from_twin``: the state is
    made by a twin optimizer, so that this one has made none and may still change the layout
    of its state (an optimizer refuses that once it has made state: test_hyperparameters.py)."""
    opt = optimizer.create(name, **kw)
    w = np.ones(8, np.float32)
    g = np.full(8, 0.5, np.float32)
    s = (optimizer.create(name, **kw) if state_from_twin else opt).create_state(0, w)
    opt.update(0, w, g, s)
    opt.update(0, w, g, s)        # the second call takes the remembered path
    return opt, w, g, s


def _unchanged(opt, w, s, call):
    before = (w.copy(), tuple(a.copy() for a in opt.state_arrays(s)), opt.num_update)
    call()
    assert np.array_equal(w, before[0]) and opt.num_update == before[2]
    assert all(np.array_equal(a, b) for a, b in zip(opt.state_arrays(s), before[1]))


def test_a_weight_made_read_only_after_a_passing_step_is_refused():
    opt, w, g, s = _passed()
    w.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        opt.update(0, w, g, s)


def test_a_state_reshaped_in_place_is_refused():
    opt, w, g, s = _passed()
    s[1].shape = (2, 4)
    with pytest.raises(ValueError, match=r"state\['var'\] has shape \(2, 4\)"):
        _unchanged(opt, w, s, lambda: opt.update(0, w, g, s))


def test_a_new_gradient_that_overlaps_the_weight_is_refused():
    opt, w, g, s = _passed()
    with pytest.raises(ValueError, match="grad shares memory with the weight"):
        _unchanged(opt, w, s, lambda: opt.update(0, w, w[::-1], s))


def test_a_state_swapped_for_the_weight_itself_is_refused():
    opt, w, g, s = _passed()
    with pytest.raises(ValueError, match="shares memory"):
        _unchanged(opt, w, s, lambda: opt.update(0, w, g, (s[0], w)))


def test_hyperparameters_that_change_the_state_layout_are_seen():
    opt, w, g, s = _passed("sgd", state_from_twin=True, momentum=0.9)
    opt.momentum = 0.0            # now the optimizer keeps no state: the old one is refused
    with pytest.raises(TypeError, match="keeps no state"):
        opt.update(0, w, g, s)


def test_a_dead_array_is_forgotten_and_a_new_one_is_checked():
    opt, w, g, s = _passed()
    del g
    g2 = np.full(8, 0.5, np.float64)      # a new array, wrong dtype: checked afresh
    with pytest.raises(TypeError, match="grad dtype float64"):
        _unchanged(opt, w, s, lambda: opt.update(0, w, g2, s))


def test_remembered_steps_compute_the_same_numbers():
    a, wa, ga, sa = _passed()
    b = optimizer.create("adam")
    wb = np.ones(8, np.float32)
    sb = b.create_state(0, wb)
    for _ in range(2):
        b.update(0, wb, np.full(8, 0.5, np.float32), sb)   # new arrays: full checks each time
    assert np.array_equal(wa, wb)


def test_a_state_layout_changed_by_a_subclass_template_is_seen():
    opt, w, g, s = _passed("dcasgd", state_from_twin=True, momentum=0.9)
    opt.momentum = 0.0            # DCASGD's own template: now (None, w_prev)
    with pytest.raises(TypeError, match="expected None, got an array"):
        _unchanged(opt, w, s, lambda: opt.update(0, w, g, s))


#: hyperparameters set between two steps of an optimizer whose step keeps constants made from them
SET_BETWEEN = [  # checked against the registry by test_every_optimizer_keeping_constants_has_cases
    ("adam", "beta1", 0.5), ("adam", "epsilon", 1e-3), ("adam", "clip_gradient", 1e-4),
    ("adam", "rescale_grad", 3.0), ("adamw", "convention", "guide"), ("adamw", "eta", 0.5),
    ("adamw", "beta2", 0.9), ("ftrl", "lamda1", 1e-4), ("ftrl", "beta", 3.0),
    ("signum", "wd_lh", 0.1), ("ftml", "beta1", 0.5), ("sgd", "rescale_grad", 3.0),
    ("sgd", "clip_gradient", 1e-4), ("adopt", "beta1", 0.5), ("adopt", "epsilon", 1.0),
    ("radam", "beta1", 0.5), ("adabelief", "beta1", 0.5), ("sparseadam", "beta1", 0.5)]

#: optimizers keeping constants that no case above can show: the step of ``_passed`` (a uniform
#: weight and gradient) does not depend on the kept constants
INVISIBLE = {"lamb": "the trust ratio scales a uniform direction to the weight's norm",
             "lion": "the weight moves by lr*sign(c): a uniform positive gradient gives the "
                     "same sign whatever beta1 or the clip bound "
                     "(test_lion_constants_follow_beta1_and_the_clip_bound)"}


def _keeps_constants(klass):
    """Whether the class's step keeps constants made from its hyperparameters (it builds them
    through ``Optimizer._constants``, which remembers them between steps)."""
    return "self._constants(" in inspect.getsource(klass)


def test_every_optimizer_keeping_constants_has_cases():
    """Every registered optimizer whose step keeps constants has a case below or a reason why
    not, each case with one of its checked hyperparameters (a renamed one fails here, not as an
    AttributeError there)."""
    registered = optimizer.registry()
    assert not INVISIBLE.keys() & {name for name, _, _ in SET_BETWEEN}
    assert ({name for name, _, _ in SET_BETWEEN} | INVISIBLE.keys()
            == {name for name, klass in registered.items()
                if klass.__module__.startswith("toolkit.optimizers.") and _keeps_constants(klass)})
    for name, attr, _ in SET_BETWEEN:
        assert attr in registered[name].hyperparameter_domains(), (name, attr)


@pytest.mark.parametrize("name, attr, value", SET_BETWEEN)
def test_a_hyperparameter_set_between_steps_is_used_by_the_next_one(name, attr, value):
    """The constants a step keeps (rounded hyperparameters) follow every attribute they are
    made from: the next step equals that of a fresh optimizer with the new value."""
    opt, w, g, s = _passed(name)
    setattr(opt, attr, value)
    fresh = optimizer.create(name, begin_num_update=opt.num_update)  # the same t
    setattr(fresh, attr, value)
    w2 = w.copy()
    s2 = tuple(a.copy() for a in s) if isinstance(s, tuple) else None if s is None else s.copy()
    opt.update(0, w, g, s)
    fresh.update(0, w2, g, s2)
    assert np.array_equal(w, w2)
    assert all(np.array_equal(a, b) for a, b in zip(opt.state_arrays(s), fresh.state_arrays(s2)))
    unchanged, w3, g3, s3 = _passed(name)
    unchanged.update(0, w3, g3, s3)
    assert not np.array_equal(w, w3)  # the new value changes the step


@pytest.mark.parametrize("attr, value", [("beta1", 0.999), ("clip_gradient", 0.01)])
def test_lion_constants_follow_beta1_and_the_clip_bound(attr, value):
    """Lion's kept constants follow beta1 and the clip bound: after two steps of +0.5 the
    momentum is 0.00995, and with a gradient of -0.5 ``c = 0.9*m - 0.1*0.5`` is negative, but
    positive with beta1 0.999 (``0.999*m - 0.001*0.5``) or the gradient clipped to 0.01
    (``0.9*m - 0.1*0.01``): the weight moves the other way."""
    opt, w, g, s = _passed("lion")
    setattr(opt, attr, value)
    fresh = optimizer.create("lion", **{attr: value})
    w2, s2 = w.copy(), s.copy()
    neg = np.full(8, -0.5, np.float32)
    opt.update(0, w, neg, s)
    fresh.update(0, w2, neg, s2)
    assert np.array_equal(w, w2) and np.array_equal(s, s2)
    unchanged, w3, g3, s3 = _passed("lion")
    unchanged.update(0, w3, neg, s3)
    assert not np.array_equal(w, w3)  # the new value changes the step


def test_float32_rounding_keeps_the_sign_of_zero_whatever_was_rounded_before():
    from toolkit.optimizers.base import _round_f32
    assert math.copysign(1.0, _round_f32(0.0)) == 1.0
    assert math.copysign(1.0, _round_f32(-0.0)) == -1.0
    assert math.copysign(1.0, _round_f32(0.0)) == 1.0


# --- the prepared step (Optimizer.update's warm path: cpu_elementwise.PreparedStep) ---------
def _row_step_optimizers():
    from toolkit.optimizers.base import row_step
    return sorted(name for name, klass in optimizer.registry().items()
                  if klass._kernel_step is row_step)


@pytest.mark.parametrize("name, convention", [(n, c) for n in _row_step_optimizers()
                                               for c in optimizer.spec_of(n).conventions])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(33,), (5, 7)])
def test_prepared_steps_equal_fully_checked_ones_bit_for_bit(name, dtype, convention, shape):
    """The same weight and state stepped again (the prepared step), with the same gradient or a
    new one, against new arrays each step (every check, the launcher's path): the same bits,
    under every convention of the optimizer."""
    spec = optimizer.spec_of(name)
    kw = dict(spec.record, convention=convention, wd=spec.fixed.get("wd", 0.01))
    rng = np.random.default_rng(3)
    a, b = optimizer.create(name, **kw), optimizer.create(name, **kw)
    w = rng.standard_normal(shape).astype(dtype)
    wb = w.copy()
    g = np.empty(shape, dtype)
    sa, sb = a.create_state(0, w), b.create_state(0, wb)
    for step in range(6):
        g[...] = rng.standard_normal(shape)
        a.update(0, w, g if step % 2 else g.copy(), sa)   # the same gradient, or a new one
        # b: new weight and state arrays every step, so every step of b checks everything
        wb = wb.copy()
        sb = tuple(x.copy() for x in sb) if isinstance(sb, tuple) else \
            None if sb is None else sb.copy()
        b.update(0, wb, g.copy(), sb)
        assert np.array_equal(w, wb, equal_nan=True), step
        for x, y in zip(a.state_arrays(sa), b.state_arrays(sb)):
            assert np.array_equal(x, y, equal_nan=True), step
    assert id(w) in a.__dict__.get("_warm", {})  # the prepared path was taken
    assert a.update_counts == b.update_counts and a.num_update == b.num_update


def test_a_gradient_made_read_only_after_prepared_steps_still_steps():
    opt, w, g, s = _passed()
    twin, wt, gt, st = _passed()
    g.flags.writeable = False
    gt2 = gt.copy()
    gt2.flags.writeable = False
    opt.update(0, w, g, s)
    twin.update(0, wt, gt2, st)       # a new read-only gradient: every check
    assert np.array_equal(w, wt) and opt.num_update == twin.num_update == 3


def test_a_state_made_read_only_after_prepared_steps_is_refused_and_nothing_is_written():
    opt, w, g, s = _passed()
    s[1].flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        _unchanged(opt, w, s, lambda: opt.update(0, w, g, s))
    assert opt.update_counts == {0: 2}


def test_a_gradient_of_another_dtype_in_place_is_refused_as_on_a_first_call():
    opt, w, g, s = _passed()
    g.dtype = np.int32                # the same bytes, read as int32
    with pytest.raises(TypeError, match="grad dtype int32"):
        _unchanged(opt, w, s, lambda: opt.update(0, w, g, s))


def test_any_hyperparameter_assignment_drops_the_prepared_steps():
    opt, w, g, s = _passed()
    assert opt.__dict__.get("_warm")
    opt.wd = 0.0
    assert not opt.__dict__.get("_warm")


def test_a_prepared_step_with_a_schedule_reads_it_once_per_step():
    reads = []

    def schedule(n):
        reads.append(n)
        return 0.01
    opt, w, g, s = _passed(lr_scheduler=schedule)
    del reads[:]
    opt.update(0, w, g, s)
    assert reads == [3]


def test_a_new_gradient_that_is_the_memory_of_the_state_is_refused():
    """A new gradient is taken without the overlap checks only when it owns its memory and is
    not the array the weight or a state array is a view of."""
    opt = optimizer.create("adam")
    w = np.ones(8, np.float32)
    buf = np.zeros((2, 8), np.float32)
    s = (buf[0], buf[1])                      # the state: views of one buffer
    for _ in range(3):
        opt.update(0, w, np.full(8, 0.5, np.float32), s)
    with pytest.raises(ValueError, match="shares memory"):
        _unchanged(opt, w, s, lambda: opt.update(0, w, buf.reshape(-1)[:8], s))
    with pytest.raises(ValueError, match="shares memory"):
        _unchanged(opt, w, s, lambda: opt.update(0, w, s[1], s))


def test_a_new_gradient_of_another_dtype_or_order_is_checked():
    opt, w, g, s = _passed()
    with pytest.raises(TypeError, match="grad dtype float64"):
        _unchanged(opt, w, s, lambda: opt.update(0, w, np.full(8, 0.5), s))
    strided = np.full(16, 0.5, np.float32)[::2]   # a view: every check
    twin, wt, gt, st = _passed()
    opt.update(0, w, strided, s)
    twin.update(0, wt, np.full(8, 0.5, np.float32), st)
    assert np.array_equal(w, wt)


def test_a_weight_cannot_be_resized_in_place_while_its_step_is_prepared():
    """``ndarray.resize`` keeps the object and may move its memory; numpy refuses it for an
    array that a weak reference points at, as the prepared step's do, so the memory of a
    prepared step's arrays never moves (what its identity and size checks rely on)."""
    opt, w, g, s = _passed()
    assert id(w) in opt.__dict__["_warm"]
    with pytest.raises(ValueError, match="referenced"):
        w.resize(16, refcheck=False)
    with pytest.raises(ValueError, match="referenced"):
        s[0].resize(16, refcheck=False)


@pytest.mark.parametrize("name, kw", [("sgd", {}), ("adam", {})])
def test_a_standard_row_sparse_step_after_prepared_ones_keeps_its_numerics(name, kw):
    """A standard row-sparse update runs the dense update of the dense gradient with MXNet's
    row-sparse arithmetic (kernel_row's ``sparse``): on arrays with a prepared step too."""
    from toolkit import RowSparse
    kw = dict(kw, lazy_update=False, wd=0.03, rescale_grad=0.7, learning_rate=0.1)
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 3)).astype(np.float32)
    rows = np.array([1, 4])
    values = rng.standard_normal((2, 3)).astype(np.float32)
    a, b = optimizer.create(name, **kw), optimizer.create(name, **kw)
    wb = w.copy()
    sa, sb = a.create_state(0, w), b.create_state(0, wb)
    g = rng.standard_normal(w.shape).astype(np.float32)
    for _ in range(2):
        a.update(0, w, g, sa)              # prepared from the second on
        b.update(0, wb, g.copy(), sb)
    assert id(w) in a.__dict__["_warm"]
    a.update(0, w, RowSparse(rows, values, w.shape), sa)
    b.__dict__.pop("_warm", None)
    b.__dict__.pop("_checked", None)
    b.update(0, wb, RowSparse(rows, values, w.shape), sb)
    assert np.array_equal(w, wb)
    assert all(np.array_equal(x, y) for x, y in zip(a.state_arrays(sa), b.state_arrays(sb)))


def test_a_new_gradient_sharing_memory_by_any_route_is_refused():
    """A weight made with ``as_strided`` is no view by ``.base`` of the buffer it reads: a new
    gradient that is that buffer still shares its memory, and is refused as on a first call."""
    from numpy.lib.stride_tricks import as_strided
    opt = optimizer.create("adam")
    buf = np.ones(8, np.float32)
    w = as_strided(buf, shape=(8,), strides=(4,))
    s = opt.create_state(0, w)
    for _ in range(3):
        opt.update(0, w, np.full(8, 0.5, np.float32), s)
    with pytest.raises(ValueError, match="shares memory"):
        _unchanged(opt, w, s, lambda: opt.update(0, w, buf, s))


def test_a_subclass_that_orders_its_state_otherwise_takes_no_prepared_step():
    class Swapped(optimizer.Adam):
        def create_state(self, index, weight):
            m, v = super().create_state(index, weight)
            return (v, m)

        def state_arrays(self, state):
            return (state[1], state[0])
    a, b = Swapped(), optimizer.Adam()
    w, wb = np.ones(8, np.float32), np.ones(8, np.float32)
    sa, sb = a.create_state(0, w), b.create_state(0, wb)
    for k in range(4):
        g = np.full(8, 0.1 * (k + 1), np.float32)
        a.update(0, w, g, sa)
        b.update(0, wb, g, sb)
    assert np.array_equal(w, wb) and np.array_equal(sa[1], sb[0]) and np.array_equal(sa[0], sb[1])
    assert not a.__dict__.get("_warm")


def test_kept_constants_follow_a_pickled_optimizer_into_its_next_assignment():
    """The constants a step keeps are tied to an object made at each assignment, not to a
    number another process could make again."""
    import pickle
    opt, w, g, s = _passed()
    opt.beta1 = 0.8
    opt.update(0, w, g, s)
    clone = pickle.loads(pickle.dumps(opt))
    clone.beta1 = 0.0
    fresh = optimizer.create("adam", beta1=0.0, begin_num_update=clone.num_update)
    w2, s2 = w.copy(), tuple(a.copy() for a in s)
    w3, s3 = w.copy(), tuple(a.copy() for a in s)
    clone.update(0, w2, g, s2)
    fresh.update(0, w3, g, s3)
    assert np.array_equal(w2, w3) and all(np.array_equal(x, y) for x, y in zip(s2, s3))


def test_kept_constants_follow_mxnet_kernel():
    opt, w, g, s = _passed("adam", clip_gradient=0.3)
    before = opt.kernel_row(3, 0.1, 0.0)[1]
    opt.mxnet_kernel = False
    after = opt.kernel_row(3, 0.1, 0.0)[1]
    assert before.b1 == float(np.float32(0.9)) and after.b1 == 0.9  # rounded, then not


def test_a_hyperparameter_beyond_float32_warns_on_prepared_steps_as_on_checked_ones():
    import warnings
    opt, w, g, s = _passed("sgd", clip_gradient=1e39, convention="guide")  # c unrounded
    for call in (lambda: opt.update(0, w, g, s), lambda: opt.update(0, w.copy(), g, None)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        assert any("overflow" in str(c.message) for c in caught), caught
