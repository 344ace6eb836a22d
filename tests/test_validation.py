"""Every validation error path of the optimizers, each with a "nothing changed" check.

A failed call must leave the weight, the gradient, every state array and the optimizer's update
counts (per index and ``num_update``) exactly as they were; arguments are checked before anything
is written. Also the positive paths of the layout checks: F-contiguous, 0-d and n-d weights, and
float16 weights without multi_precision.
"""
import math
import re
import warnings

import numpy as np
import pytest

from toolkit import lr_scheduler, optimizer
from toolkit.backends import cuda_available
from toolkit.optimizers.aliases import accepted_keywords
from toolkit.optimizers.spec import CONVENTIONS

#: config id -> (name, constructor kwargs): one configuration per state layout of every
#: optimizer (``Spec.layouts``, in its order), ids ``<name>-<index>``
CONFIGS = {f"{name}-{i}": (name, dict(kw)) for name, spec in optimizer.specs(oracle=True).items()
           for i, kw in enumerate(spec.layouts)}
OPT_NAMES = list(optimizer.specs())
#: configurations that take 2-D weights only (``Spec.matrix``: one history value per row)
MATRIX_ONLY = {c for c, (name, _) in CONFIGS.items() if optimizer.spec_of(name).matrix}
#: configurations that refuse weight decay at update time (``Spec.fixed``)
NO_WD = {c for c, (name, _) in CONFIGS.items() if "wd" in optimizer.spec_of(name).fixed}
DETERMINISTIC = [k for k in CONFIGS]  # SGLD's noise is seeded: deterministic too


def make(config, **extra):
    name, kw = CONFIGS[config]
    return optimizer.create(name, **{**kw, **extra})


def state_arrays(state):
    if state is None:
        return []
    if isinstance(state, np.ndarray):
        return [state]
    if not isinstance(state, (tuple, list)):
        return []
    out = []
    for s in state:
        out.extend(state_arrays(s))
    return out


def snapshot(opt, weight, grad, state):
    return (weight.tobytes(), weight.dtype, weight.shape, grad.tobytes(),
            [(a.tobytes(), a.dtype, a.shape) for a in state_arrays(state)],
            dict(opt._index_update_count), opt.num_update)


def rng_arrays(shape=(3, 4), dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    return w, g


def primed(config, shape=(3, 4), dtype=np.float32, **extra):
    """An optimizer, weight, grad and state after one successful update (counts non-zero)."""
    opt = make(config, **extra)
    w, g = rng_arrays(shape, dtype)
    state = opt.create_state(0, w)
    opt.update(0, w, g, state)
    return opt, w, g, state


def assert_fails_unchanged(opt, weight, grad, state, call, exc, match=None):
    """``call()`` raises ``exc`` and leaves weight, grad, state and counts as they were."""
    before = snapshot(opt, weight, grad, state)
    with pytest.raises(exc, match=match):
        call()
    assert snapshot(opt, weight, grad, state) == before


# ------------------------------------------------------------------------------------------
# create / registry / constructor keywords
# ------------------------------------------------------------------------------------------
def test_unknown_optimizer_name_lists_known_names():
    with pytest.raises(ValueError) as info:
        optimizer.create("adamwx")
    msg = str(info.value)
    assert "adamwx" in msg
    for name in OPT_NAMES:
        assert name in msg


def _spellings():
    """Every registered optimizer by its class name, in upper case and in mixed case."""
    for name, klass in optimizer.registry().items():
        yield from (klass.__name__, name.upper(),
                    "".join(c.upper() if i % 2 else c for i, c in enumerate(name)))


@pytest.mark.parametrize("spelling", list(_spellings()))
def test_create_is_case_insensitive(spelling):
    opt = optimizer.create(spelling)
    assert type(opt).__name__.lower() == spelling.lower()


def test_create_non_string_name():
    with pytest.raises(TypeError):
        optimizer.create(3)


@pytest.mark.parametrize("name", OPT_NAMES)
def test_unknown_constructor_keyword(name):
    with pytest.raises(TypeError):
        optimizer.create(name, bogus_keyword=1.0)


def test_guide_spelling_only_where_defined():
    # rho is RMSProp's guide spelling of gamma1; Adam has no rho (MXNet: TypeError too)
    with pytest.raises(TypeError):
        optimizer.Adam(rho=0.9)
    with pytest.raises(TypeError):
        optimizer.SGD(rho=0.9)


def test_rmsprop_gamma1_and_rho_both_given():
    with pytest.raises(TypeError, match="rho"):
        optimizer.RMSProp(gamma1=0.9, rho=0.9)
    with pytest.raises(TypeError, match="momentum"):
        optimizer.RMSProp(gamma2=0.9, momentum=0.9)


def test_sym_not_supported():
    with pytest.raises(ValueError):
        optimizer.SGD(sym=object())


# ------------------------------------------------------------------------------------------
# hyperparameter domains
# ------------------------------------------------------------------------------------------
BAD_FLOATS = [-1.0, -1e-12, float("nan"), float("inf"), float("-inf")]
NONFINITE = [float("nan"), float("inf")]


@pytest.mark.parametrize("name", OPT_NAMES)
@pytest.mark.parametrize("key", ["learning_rate", "wd", "rescale_grad"])
@pytest.mark.parametrize("value", BAD_FLOATS)
def test_base_hyperparameters_domain(name, key, value):
    with pytest.raises(ValueError, match=key):
        optimizer.create(name, **{key: value})


@pytest.mark.parametrize("name", OPT_NAMES)
@pytest.mark.parametrize("value", [-0.5, -1e-30, float("nan"), float("inf")])
def test_clip_gradient_domain(name, value):
    with pytest.raises(ValueError, match="clip_gradient"):
        optimizer.create(name, clip_gradient=value)


@pytest.mark.parametrize("name", OPT_NAMES)
@pytest.mark.parametrize("key,value", [("learning_rate", "0.1"), ("wd", True), ("rescale_grad", None),
                                       ("clip_gradient", "1")])
def test_base_hyperparameters_type(name, key, value):
    with pytest.raises(TypeError):
        optimizer.create(name, **{key: value})


#: every declared real-valued hyperparameter of every optimizer, by constructor keyword and
#: attribute (the domains, not a hand list: a new one is covered when it is declared)
REAL_HYPER = [(name, domain.keyword or attr, attr)
              for name, klass in sorted(optimizer.registry().items())
              for attr, domain in klass.hyperparameter_domains().items()
              if domain.kind in ("nonneg", "positive", "unit")]


@pytest.mark.parametrize("name,key,attr", REAL_HYPER, ids=[f"{n}-{k}" for n, k, _ in REAL_HYPER])
@pytest.mark.parametrize("huge", [10 ** 400, -10 ** 400, 10 ** 5000],
                         ids=["1e400", "-1e400", "1e5000"])
def test_an_int_beyond_float_range_is_a_clear_value_error(name, key, attr, huge):
    """float(10**400) raises OverflowError: every real hyperparameter, given to the constructor
    or assigned later, is refused with the ValueError a non-finite value gets, which names the
    argument and the value (abbreviated: 10**5000 has more digits than Python prints)."""
    digits = int(math.log10(abs(huge)))
    with pytest.raises(ValueError, match=rf"{key}.* must be finite, got an int of about "
                                         rf"-?1e\+{digits}\b") as info:
        optimizer.create(name, **{key: huge})
    assert len(str(info.value)) < 300
    opt = optimizer.create(name)
    before = getattr(opt, attr)
    with pytest.raises(ValueError, match=rf"{key}.* must be finite, got an int of about "):
        setattr(opt, attr, huge)
    assert getattr(opt, attr) is before


@pytest.mark.parametrize("name", OPT_NAMES)
def test_begin_num_update_domain(name):
    with pytest.raises(ValueError):
        optimizer.create(name, begin_num_update=-1)
    with pytest.raises(TypeError):
        optimizer.create(name, begin_num_update=1.5)


def _specific_bad():
    """Every optimizer's own hyperparameters (the base class's have the tests above), under each
    name its constructor takes (keyword and aliases: RMSProp's ``rho`` and ``momentum``), with
    every value the declared domain refuses and the error it must raise
    (``Domain.invalid_examples``: the domains, not a hand list, so a new optimizer or
    hyperparameter is covered when it is declared)."""
    base = optimizer.Optimizer.domains
    for name, klass in sorted(optimizer.registry().items()):
        accepted = accepted_keywords(klass)
        for attr, domain in klass.hyperparameter_domains().items():
            if attr in base:
                continue
            for key in dict.fromkeys([domain.keyword or attr, *domain.other_names(attr)]):
                if key in accepted:
                    yield from ((name, key, value, error)
                                for value, error in domain.invalid_examples())


#: (optimizer, keyword, refused value, its error)
SPECIFIC_BAD = list(_specific_bad())


@pytest.mark.parametrize("name,key,value,error", SPECIFIC_BAD)
def test_optimizer_specific_domain(name, key, value, error):
    with pytest.raises(error):
        optimizer.create(name, **{key: value})


@pytest.mark.parametrize("name,key,value,error", SPECIFIC_BAD)
def test_a_refusal_names_the_keyword_given(name, key, value, error):
    """The message begins with the name the value was given under: an alias (RMSProp's
    ``rho``, ``momentum``) names itself and the keyword it stands for."""
    with pytest.raises(error) as info:
        optimizer.create(name, **{key: value})
    assert re.match(rf"{key}(?!\w)", str(info.value)), str(info.value)


def test_a_label_names_the_keyword_given():
    """``Domain.label``: the keyword; an alias with the keyword it stands for; a keyword of
    another framework's that sets it (toolkit.torch's) with this one in parentheses; the hint
    where None is taken, after them."""
    from toolkit.optimizers import validation as v
    assert v.unit().label("beta1") == "beta1"
    assert v.unit().label("gamma1", alias="rho") == "rho (an alias of gamma1)"
    assert v.unit().label("beta1", given="betas[0]") == "betas[0] (beta1)"
    assert v.unit().label("beta1", given="beta1") == "beta1"
    assert v.nonneg(keyword="learning_rate").label("lr", given="lr") == "lr (learning_rate)"
    hinted = v.nonneg(none="None: off")
    assert hinted.label("epsilon1") == "epsilon1 (None: off)"
    assert hinted.label("epsilon1", given="eps[0]") == "eps[0] (epsilon1; None: off)"
    with pytest.raises(ValueError, match=r"^betas\[0\] \(beta1\) must be in \[0, 1\), got 1.5$"):
        v.unit().check("beta1", 1.5, given="betas[0]")


def test_invalid_examples_follow_the_kind():
    """``Domain.invalid_examples``: each value is refused by the domain's own check with the
    error given, and the kind's edges are among them."""
    from toolkit.optimizers import validation as v
    domains = [v.nonneg(), v.nonneg(none=True), v.positive(), v.unit(), v.unit(closed=True),
               v.integer(0), v.integer(1, maximum=5), v.choice(("linear", "sqrt")),
               v.choice(("a", "b"), none=True), v.flag(), v.flag(strict=False),
               v.callable_or_none()]
    for domain in domains:
        for value, error in domain.invalid_examples():
            with pytest.raises(error):
                domain.check("x", value)

    def values(domain, error=ValueError):
        return [x for x, e in domain.invalid_examples() if e is error]

    assert 1.0 in values(v.unit()) and 1.0 not in values(v.unit(closed=True))
    assert 1.5 in values(v.unit(closed=True)) and 0.0 in values(v.positive())
    assert 0.0 not in values(v.nonneg()) and any(x < 0 for x in values(v.nonneg()))
    assert None in values(v.nonneg(), TypeError) and None not in values(v.nonneg(none=True),
                                                                          TypeError)
    assert values(v.integer(0)) == [-1] and values(v.integer(1, maximum=5)) == [0, -1, 6]
    assert 2.0 in values(v.integer(1), TypeError)
    assert values(v.choice(("linear", "sqrt"))) == ["bogus", "LINEAR", None]
    assert None not in values(v.choice(("a", "b"), none=True))
    assert v.flag(strict=False).invalid_examples() == ()


#: values of the wrong type for each kind of domain (a strict flag takes a bool only)
WRONG_TYPE = {"nonneg": ("0.5",), "positive": ("0.5",), "unit": ("0.5", "0.9"),
              "int": (2.0, True), "flag": (1, "yes")}


def _wrong_types():
    """Every registered optimizer's every constructor keyword with a declared domain, with a
    value of the wrong type for it (``Optimizer.hyperparameter_domains``)."""
    for name, klass in optimizer.registry().items():
        accepted = accepted_keywords(klass)
        for attr, domain in klass.hyperparameter_domains().items():
            key = domain.keyword or attr
            if key not in accepted or (domain.kind == "flag" and not domain.strict):
                continue
            for value in WRONG_TYPE.get(domain.kind, ()):
                yield name, key, value


@pytest.mark.parametrize("name,key,value", list(_wrong_types()))
def test_optimizer_specific_types(name, key, value):
    with pytest.raises(TypeError):
        optimizer.create(name, **{key: value})


def test_unit_bounds_accepted():
    optimizer.SGD(momentum=0.0)
    optimizer.Adam(beta1=0.0, beta2=0.0)
    optimizer.AdaDelta(rho=1.0)
    optimizer.AdaDelta(rho=0.0)
    optimizer.LBSGD(batch_scale=1)


def test_signum_wd_lh_needs_momentum():
    with pytest.raises(ValueError, match="wd_lh"):
        optimizer.Signum(momentum=0.0, wd_lh=0.1)
    optimizer.Signum(momentum=0.0, wd_lh=0.0)
    optimizer.Signum(momentum=0.9, wd_lh=0.1)


def test_adamax_epsilon_only_in_guide_convention():
    with pytest.raises(ValueError, match="epsilon"):
        optimizer.Adamax(epsilon=1e-8)
    with pytest.raises(ValueError, match="epsilon"):
        optimizer.Adamax(epsilon=1e-8, convention="mxnet")
    opt = optimizer.Adamax(epsilon=1e-8, convention="guide")
    assert opt.epsilon == 1e-8
    with pytest.raises(ValueError):
        optimizer.Adamax(epsilon=-1e-8, convention="guide")


def test_nadam_guide_convention_refused():
    with pytest.raises(ValueError, match="guide"):
        optimizer.Nadam(convention="guide")


@pytest.mark.parametrize("name", OPT_NAMES)
@pytest.mark.parametrize("backend", ["gpu", "CPU", "numba", "", None])
def test_unknown_backend(name, backend):
    with pytest.raises(ValueError, match="backend"):
        optimizer.create(name, backend=backend)


@pytest.mark.parametrize("name", OPT_NAMES)
@pytest.mark.parametrize("convention", ["MXNet", "Paper", "torch", ""])
def test_unknown_convention(name, convention):
    with pytest.raises(ValueError, match="convention"):
        optimizer.create(name, convention=convention)


@pytest.mark.parametrize("name", OPT_NAMES)
def test_convention_none_is_the_optimizers_default_and_others_are_refused(name):
    """None (the default) is the spec's first convention ("mxnet" for MXNet's family, "paper"
    for Lion); a known convention the optimizer does not implement is refused, naming those
    it does."""
    spec = optimizer.spec_of(name)
    assert optimizer.create(name).convention == spec.default_convention == spec.conventions[0]
    assert optimizer.create(name, convention=None).convention == spec.default_convention
    for other in set(CONVENTIONS) - set(spec.conventions):
        with pytest.raises(ValueError, match=f"convention={other!r} is not available"):
            optimizer.create(name, convention=other)


def test_lr_scheduler_not_callable():
    with pytest.raises(TypeError, match="lr_scheduler"):
        optimizer.SGD(lr_scheduler=0.1)


def test_param_idx2name_not_dict():
    with pytest.raises(TypeError):
        optimizer.SGD(param_idx2name=["fc_weight"])


@pytest.mark.parametrize("bad", [{0: -1.0}, {"fc_weight": float("nan")}, {1: float("inf")}])
def test_bad_multipliers(bad):
    opt = optimizer.SGD(learning_rate=0.1, wd=0.1)
    with pytest.raises(ValueError):
        opt.set_lr_mult(bad)
    with pytest.raises(ValueError):
        opt.set_wd_mult(bad)
    with pytest.raises(TypeError):
        opt.set_lr_mult([1.0])
    with pytest.raises(TypeError):
        opt.set_wd_mult([1.0])


# ------------------------------------------------------------------------------------------
# backend="cuda" with numpy arrays: the error comes at update time and says why
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", list(CONFIGS))
def test_cuda_backend_with_numpy_arrays_raises_clearly_at_update(config):
    opt = make(config, backend="cuda")  # constructing is allowed
    w, g = rng_arrays()
    state = opt.create_state(0, w)
    ok, why = cuda_available()
    before = snapshot(opt, w, g, state)
    with pytest.raises(RuntimeError if not ok else TypeError) as info:
        opt.update(0, w, g, state)
    msg = str(info.value)
    assert "backend='cuda'" in msg
    if not ok:
        assert why in msg  # no GPU/driver, or numba-cuda missing: the reason, verbatim
    else:
        assert "numpy.ndarray" in msg and "backend='cpu'" in msg
    assert snapshot(opt, w, g, state) == before


# ------------------------------------------------------------------------------------------
# weight checks (update and create_state)
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", list(CONFIGS))
def test_weight_not_ndarray(config):
    opt, w, g, state = primed(config)
    before = snapshot(opt, w, g, state)
    with pytest.raises(TypeError, match="weight"):
        opt.update(0, w.tolist(), g, state)
    with pytest.raises(TypeError, match="weight"):
        opt.create_state(1, w.tolist())
    with pytest.raises(TypeError, match="weight"):
        opt.update_multi_precision(0, w.tolist(), g, state)
    assert snapshot(opt, w, g, state) == before


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.complex64, np.bool_])
def test_weight_non_float_dtype(config, dtype):
    opt, w, g, state = primed(config)
    wi = np.ones(w.shape, dtype)
    gi = np.ones(w.shape, dtype)
    before = snapshot(opt, w, g, state)
    with pytest.raises(TypeError, match="dtype"):
        opt.create_state(0, wi)
    with pytest.raises(TypeError, match="dtype"):
        opt.update(0, wi, gi, state)
    assert snapshot(opt, w, g, state) == before
    assert np.array_equal(wi, np.ones(w.shape, dtype))


@pytest.mark.parametrize("config", list(CONFIGS))
def test_read_only_weight(config):
    opt, w, g, state = primed(config)
    w.flags.writeable = False
    assert_fails_unchanged(opt, w, g, state, lambda: opt.update(0, w, g, state), ValueError,
                           "read-only")


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("view", ["step", "transpose_slice", "column"])
def test_non_contiguous_weight_refused(config, view):
    opt = make(config)
    base, gbase = rng_arrays((6, 8))
    if view == "step":
        w, g = base[:, ::2], gbase[:, ::2]
    elif view == "transpose_slice":
        w, g = base.T[1:5], gbase.T[1:5]
    else:
        w, g = base[:, 3], gbase[:, 3]
    assert not (w.flags.c_contiguous or w.flags.f_contiguous)
    base_before = base.copy()
    with pytest.raises(ValueError, match="contiguous"):
        opt.create_state(0, w)
    wc = np.ascontiguousarray(w if w.ndim == 2 or config not in MATRIX_ONLY else w[:, None])
    state = opt.create_state(0, wc)
    before = snapshot(opt, w, g, state)
    with pytest.raises(ValueError, match="contiguous"):
        opt.update(0, w, g.copy(), state)
    assert snapshot(opt, w, g, state) == before
    assert np.array_equal(base, base_before)  # never silently updated a copy nor the base


@pytest.mark.parametrize("config", list(CONFIGS))
def test_bad_index(config):
    opt, w, g, state = primed(config)
    for index in (True, 1.5, None, (0,)):
        assert_fails_unchanged(opt, w, g, state, lambda: opt.update(index, w, g, state),
                               TypeError, "index")


# ------------------------------------------------------------------------------------------
# grad checks
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", list(CONFIGS))
def test_grad_mismatch(config):
    opt, w, g, state = primed(config)
    bad = [
        (g.reshape(4, 3).copy(), ValueError, "shape"),
        (g.ravel().copy(), ValueError, "shape"),
        (np.zeros((3, 5), g.dtype), ValueError, "shape"),
        (g.astype(np.float64), TypeError, "dtype"),
        (g.astype(np.float16), TypeError, "dtype"),
        (g.tolist(), TypeError, "grad"),
        (None, TypeError, "grad"),
    ]
    for bad_grad, exc, match in bad:
        before = snapshot(opt, w, g, state)
        if isinstance(bad_grad, np.ndarray):
            grad_before = bad_grad.tobytes()
        with pytest.raises(exc, match=match):
            opt.update(0, w, bad_grad, state)
        assert snapshot(opt, w, g, state) == before
        if isinstance(bad_grad, np.ndarray):
            assert bad_grad.tobytes() == grad_before


def test_non_contiguous_grad_is_accepted_and_not_modified():
    opt = optimizer.Adam(learning_rate=0.01)
    w, _ = rng_arrays((3, 4))
    gbase = np.random.default_rng(5).standard_normal((3, 8)).astype(np.float32)
    g = gbase[:, ::2]
    gb = gbase.copy()
    w2 = w.copy()
    s1, s2 = opt.create_state(0, w), None
    opt.update(0, w, g, s1)
    opt2 = optimizer.Adam(learning_rate=0.01)
    s2 = opt2.create_state(0, w2)
    opt2.update(0, w2, np.ascontiguousarray(g), s2)
    assert np.array_equal(w, w2)
    assert np.array_equal(gbase, gb)


# ------------------------------------------------------------------------------------------
# state checks
# ------------------------------------------------------------------------------------------
def bad_states(opt, w, state):
    """(label, bad_state, exception) for the structure of this optimizer's state."""
    arrays = state_arrays(state)
    out = []
    if state is None:
        out.append(("array instead of None", np.zeros_like(w), TypeError))
        out.append(("tuple instead of None", (np.zeros_like(w),), TypeError))
        return out
    out.append(("None instead of state", None, TypeError))
    out.append(("list instead of tuple", list(state) if isinstance(state, tuple) else [state],
                TypeError))
    if isinstance(state, tuple):
        out.append(("too short", state[:-1], TypeError))
        out.append(("too long", state + (np.zeros_like(w),), TypeError))
        out.append(("bare array", arrays[0], TypeError))
        if any(s is None for s in state):
            out.append(("array where None", tuple(np.zeros_like(w) if s is None else s
                                                  for s in state), TypeError))
        if len(arrays) >= 2:
            a0 = arrays[0]
            shared = tuple(a0 if s is arrays[1] else s for s in state)
            out.append(("two slots share memory", shared, ValueError))
    else:
        out.append(("1-tuple instead of array", (state,), TypeError))

    def replace(i, new):
        k = -1

        def walk(s):
            nonlocal k
            if s is None:
                return None
            if isinstance(s, np.ndarray):
                k += 1
                return new if k == i else s
            return tuple(walk(x) for x in s)
        return walk(state)

    for i, a in enumerate(arrays):
        out.append((f"slot {i} wrong shape", replace(i, np.zeros(a.size + 1, a.dtype)), ValueError))
        if a.shape[::-1] != a.shape:  # (Adafactor's unused (0,) slot: the same shape)
            out.append((f"slot {i} transposed shape",
                        replace(i, np.zeros(a.shape[::-1], a.dtype)), ValueError))
        out.append((f"slot {i} float64", replace(i, a.astype(np.float64)), TypeError))
        out.append((f"slot {i} float16", replace(i, a.astype(np.float16)), TypeError))
        ro = a.copy()
        ro.flags.writeable = False
        out.append((f"slot {i} read-only", replace(i, ro), ValueError))
        out.append((f"slot {i} is the weight", replace(i, w), ValueError))
        out.append((f"slot {i} views the weight", replace(i, w.reshape(w.shape)), ValueError))
        if a.shape != w.shape and a.size:  # GroupAdaGrad's (rows, 1) history: a view of its
            # own shape (an empty array, Adafactor's unused slot, shares no memory)
            out.append((f"slot {i} views the weight, shaped as the slot",
                        replace(i, w.reshape(-1)[:a.size].reshape(a.shape)), ValueError))
        fo = np.asfortranarray(a)
        if not fo.flags.c_contiguous:  # a (rows, 1) array is both: then the same layout
            out.append((f"slot {i} F-ordered", replace(i, fo), ValueError))
        out.append((f"slot {i} list", replace(i, a.tolist()), TypeError))
    return out


@pytest.mark.parametrize("config", list(CONFIGS))
def test_bad_state(config):
    opt, w, g, state = primed(config)
    for label, bad, exc in bad_states(opt, w, state):
        arrays_before = [(a.tobytes(), a.dtype) for a in state_arrays(bad)
                         if isinstance(a, np.ndarray)]
        before = snapshot(opt, w, g, state)
        with pytest.raises(exc):
            opt.update(0, w, g, bad)
        assert snapshot(opt, w, g, state) == before, label
        assert [(a.tobytes(), a.dtype) for a in state_arrays(bad)
                if isinstance(a, np.ndarray)] == arrays_before, label


@pytest.mark.parametrize("config", [c for c in CONFIGS if CONFIGS[c][0] != "sgld"])
def test_bad_multi_precision_state(config):
    opt = make(config, multi_precision=True)
    w, g = rng_arrays(dtype=np.float16)
    state = opt.create_state_multi_precision(0, w)
    opt.update_multi_precision(0, w, g, state)
    before = snapshot(opt, w, g, state)
    with pytest.raises(TypeError):
        opt.update_multi_precision(0, w, g, state[0])
    with pytest.raises(TypeError):
        opt.update_multi_precision(0, w, g, state + (None,))
    with pytest.raises(TypeError):
        opt.update_multi_precision(0, w, g, None)
    # the float32 master copy replaced by a float16 one, or by the weight itself
    name = CONFIGS[config][0]
    mi = 1 if name in ("sgd", "nag", "lars") else 0
    for bad_master, exc in ((state[mi].astype(np.float16), TypeError), (w, TypeError),
                            (state[mi].astype(np.float64), TypeError),
                            (np.zeros(5, np.float32), ValueError)):
        bad = tuple(bad_master if i == mi else s for i, s in enumerate(state))
        with pytest.raises(exc):
            opt.update_multi_precision(0, w, g, bad)
    assert snapshot(opt, w, g, state) == before


# ------------------------------------------------------------------------------------------
# learning rate must be > 0 for FTRL and FTML
# ------------------------------------------------------------------------------------------
class ZeroAfter:
    """A scheduler-like callable: base_lr until ``n`` reaches ``stop``, then 0."""

    def __init__(self, base_lr, stop):
        self.base_lr, self.stop = base_lr, stop

    def __call__(self, n):
        return self.base_lr if n < self.stop else 0.0


@pytest.mark.parametrize("name", ["ftrl", "ftml"])
@pytest.mark.parametrize("how", ["poly", "custom", "lr_mult", "learning_rate"])
def test_zero_lr_refused_by_ftrl_ftml(name, how):
    kw = {}
    if how == "poly":
        kw["lr_scheduler"] = lr_scheduler.PolyScheduler(max_update=2, base_lr=0.1, final_lr=0.0)
        if name == "ftml":
            kw["learning_rate"] = 0.1
    elif how == "custom":
        kw["lr_scheduler"] = ZeroAfter(0.1, 2)
        kw["learning_rate"] = 0.1
    elif how == "learning_rate":
        kw["learning_rate"] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = optimizer.create(name, **kw)
    w, g = rng_arrays()
    state = opt.create_state(0, w)
    if how == "lr_mult":
        opt.update(0, w, g, state)
        opt.set_lr_mult({0: 0.0})
    elif how == "learning_rate":
        pass
    else:
        opt.update(0, w, g, state)  # n = 1: lr > 0
    # poly at n=2 is final_lr = 0; custom at n=2 is 0
    assert_fails_unchanged(opt, w, g, state, lambda: opt.update(0, w, g, state), ValueError,
                           "learning rate")
    # other optimizers accept lr == 0 and then leave the weight alone (SGD)
    sgd = optimizer.SGD(learning_rate=0.0)
    w2 = w.copy()
    sgd.update(0, w2, g, None)
    assert np.array_equal(w2, w)


def test_scheduler_producing_invalid_lr():
    opt = optimizer.SGD(lr_scheduler=lambda n: float("nan"))
    w, g = rng_arrays()
    assert_fails_unchanged(opt, w, g, None, lambda: opt.update(0, w, g, None), ValueError,
                           "learning rate")
    opt = optimizer.SGD(lr_scheduler=lambda n: -0.1)
    assert_fails_unchanged(opt, w, g, None, lambda: opt.update(0, w, g, None), ValueError,
                           "learning rate")


# ------------------------------------------------------------------------------------------
# set_learning_rate
# ------------------------------------------------------------------------------------------
def test_set_learning_rate_with_scheduler_raises_user_warning():
    sched = lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=0.1)
    opt = optimizer.SGD(learning_rate=0.1, lr_scheduler=sched)
    with pytest.raises(UserWarning, match="LRScheduler"):
        opt.set_learning_rate(0.5)
    assert opt.lr == 0.1
    assert opt.learning_rate == 0.1
    assert sched.base_lr == 0.1


def test_set_learning_rate_without_scheduler():
    opt = optimizer.SGD(learning_rate=0.1)
    opt.set_learning_rate(0.5)
    assert opt.lr == 0.5 and opt.learning_rate == 0.5
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            opt.set_learning_rate(bad)
        assert opt.lr == 0.5
    with pytest.raises(TypeError):
        opt.set_learning_rate("0.1")


def test_register_rejects_non_optimizer():
    with pytest.raises(TypeError):
        optimizer.register(object)
    with pytest.raises(TypeError):
        optimizer.register(lambda: None)


# ------------------------------------------------------------------------------------------
# positive paths: memory order, 0-d and n-d weights, float16 without multi_precision
# ------------------------------------------------------------------------------------------
def run_steps(config, w, grads, dtype_state=None, **extra):
    opt = make(config, **extra)
    state = opt.create_state(0, w)
    for g in grads:
        opt.update(0, w, g, state)
    return w, state


@pytest.mark.parametrize("config", [c for c in CONFIGS if CONFIGS[c][0] != "sgld"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_f_contiguous_weight_matches_c_contiguous(config, dtype):
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((5, 7)).astype(dtype)
    grads = [rng.standard_normal((5, 7)).astype(dtype) for _ in range(3)]
    wf = np.asfortranarray(w0)
    assert wf.flags.f_contiguous and not wf.flags.c_contiguous
    kw = {"wd": 0.0 if config in NO_WD else 0.01, "clip_gradient": 1.5, "rescale_grad": 0.7}
    # grads: F-ordered for the F weight (and one C-ordered, which must work too)
    gf = [np.asfortranarray(g) for g in grads[:2]] + [grads[2]]
    wf_out, sf = run_steps(config, wf, gf, **kw)
    wc_out, sc = run_steps(config, np.ascontiguousarray(w0), grads, **kw)
    assert wf_out.flags.f_contiguous
    assert np.array_equal(wf_out, wc_out)
    for a, b in zip(state_arrays(sf), state_arrays(sc)):
        assert a.flags.f_contiguous
        assert np.array_equal(a, b)


def test_sgld_refuses_f_ordered_weight():
    opt = optimizer.SGLD()
    w = np.asfortranarray(np.ones((3, 4)))
    g = np.ones((3, 4))
    before = w.copy()
    with pytest.raises(ValueError, match="C-contiguous"):
        opt.update(0, w, g, None)
    assert np.array_equal(w, before) and opt.num_update == 0


#: configurations whose update depends on the weight's rank (``Spec.tensor``: Adafactor factors
#: matrices; tests/test_adafactor.py tests its shapes)
BY_RANK = {c for c, (name, _) in CONFIGS.items() if optimizer.spec_of(name).tensor}


@pytest.mark.parametrize("config", [c for c in CONFIGS if c not in MATRIX_ONLY | BY_RANK])
@pytest.mark.parametrize("shape", [(), (1,), (2, 3, 4), (2, 1, 3, 1, 2)])
def test_0d_and_nd_weights(config, shape):
    rng = np.random.default_rng(2)
    w0 = np.asarray(rng.standard_normal(shape), dtype=np.float64)
    grads = [np.asarray(rng.standard_normal(shape), dtype=np.float64) for _ in range(3)]
    w, state = run_steps(config, w0.copy(), grads)
    assert w.shape == shape
    # same numbers as the flattened weight: element-wise optimizers do not care about the shape
    if CONFIGS[config][0] not in ("sgld", "lbsgd"):
        wflat, _ = run_steps(config, w0.reshape(-1).copy(), [g.reshape(-1) for g in grads])
        assert np.array_equal(w.reshape(-1), wflat)
    assert np.all(np.isfinite(w))
    for a in state_arrays(state):
        assert a.shape == shape


def copy_state(state, dtype):
    if state is None:
        return None
    if isinstance(state, np.ndarray):
        return state.astype(dtype)
    return tuple(copy_state(s, dtype) for s in state)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_float16_without_multi_precision(config):
    """float16 storage: each step is float32 arithmetic on the float16 values, rounded back."""
    rng = np.random.default_rng(3)
    w16 = rng.standard_normal((4, 6)).astype(np.float16)
    kw = {"wd": 0.0 if config in NO_WD else 0.01}
    opt16, opt32 = make(config, **kw), make(config, **kw)
    s16 = opt16.create_state(0, w16)
    assert all(a.dtype == np.float16 for a in state_arrays(s16))
    for _ in range(4):
        g16 = rng.standard_normal((4, 6)).astype(np.float16)
        w32 = w16.astype(np.float32)
        s32 = copy_state(s16, np.float32)
        opt32.update(0, w32, g16.astype(np.float32), s32)
        opt16.update(0, w16, g16, s16)
        assert w16.dtype == np.float16
        assert np.array_equal(w16, w32.astype(np.float16))
        for a, b in zip(state_arrays(s16), state_arrays(s32)):
            assert a.dtype == np.float16
            assert np.array_equal(a, b.astype(np.float16))
    assert opt16.num_update == opt32.num_update == 4


def test_multi_precision_on_float32_is_plain_update():
    opt = optimizer.Adam(multi_precision=True)
    w, g = rng_arrays()
    state = opt.create_state_multi_precision(0, w)
    assert isinstance(state, tuple) and len(state) == 2 and state[0].dtype == np.float32
    assert not np.any(state[0])  # (mean, var), no master copy
    w2 = w.copy()
    opt.update_multi_precision(0, w, g, state)
    opt2 = optimizer.Adam()
    s2 = opt2.create_state(0, w2)
    opt2.update(0, w2, g, s2)
    assert np.array_equal(w, w2)
    assert math.isfinite(float(w.sum()))


# ------------------------------------------------------------------------------------------
# GroupAdaGrad: a 2-D weight, a (rows, 1) history, no weight decay
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(), (4,), (2, 3, 4), (1, 1, 1)])
def test_groupadagrad_refuses_a_weight_that_is_not_2d(shape):
    opt, w, g, state = primed("groupadagrad-0")
    before = snapshot(opt, w, g, state)
    bad_w, bad_g = np.ones(shape, np.float32), np.ones(shape, np.float32)
    with pytest.raises(ValueError, match="2-D weight"):
        opt.create_state(1, bad_w)
    with pytest.raises(ValueError, match="2-D weight"):
        opt.create_state_multi_precision(1, bad_w.astype(np.float16))
    with pytest.raises(ValueError, match="2-D weight"):
        opt.update(1, bad_w, bad_g, state)
    assert snapshot(opt, w, g, state) == before
    assert np.all(bad_w == 1) and 1 not in opt._index_update_count


@pytest.mark.parametrize("bad_shape", [(3,), (3, 4), (4, 1), (1, 3), (3, 1, 1)])
def test_groupadagrad_refuses_a_history_of_the_wrong_shape(bad_shape):
    opt, w, g, state = primed("groupadagrad-0")   # w is (3, 4): the history is (3, 1)
    assert state.shape == (3, 1)
    bad = np.zeros(bad_shape, np.float32)
    assert_fails_unchanged(opt, w, g, state, lambda: opt.update(0, w, g, bad), ValueError,
                           r"state\['history'\] has shape")
    assert not bad.any()


def test_groupadagrad_refuses_weight_decay_per_step_before_writing():
    # MXNet 1.9.1 accepts wd at construction and asserts wd == 0 in update; so does this, with
    # the effective wd (wd * wd_mult) of the index being updated
    opt = optimizer.create("groupadagrad", learning_rate=0.1, wd=0.01)
    w, g = rng_arrays()
    state = opt.create_state(0, w)
    assert_fails_unchanged(opt, w, g, state, lambda: opt.update(0, w, g, state), ValueError,
                           "weight decay.*wd is 0.01 for index 0")
    w16 = w.astype(np.float16)
    opt16 = optimizer.create("groupadagrad", wd=0.5, multi_precision=True)
    s16 = opt16.create_state_multi_precision(0, w16)
    snap = (w16.tobytes(), s16[0].tobytes(), s16[1].tobytes())
    with pytest.raises(ValueError, match="wd"):
        opt16.update_multi_precision(0, w16, g.astype(np.float16), s16)
    assert (w16.tobytes(), s16[0].tobytes(), s16[1].tobytes()) == snap
    assert opt16.num_update == 0
    with pytest.raises(ValueError, match="wd"):
        opt.next_step(0)
    # a zero multiplier makes the step legal, as in MXNet
    opt.set_wd_mult({0: 0.0})
    opt.update(0, w, g, state)
    assert opt.num_update == 1 and state.any()
    named = optimizer.create("groupadagrad", wd=0.01, param_idx2name={0: "embed_bias"})
    named.update(0, w, g, named.create_state(0, w))   # not *_weight: multiplier 0


def test_lamb_bounds_in_the_wrong_order_are_refused():
    with pytest.raises(ValueError, match="lower_bound must not exceed upper_bound"):
        optimizer.create("lamb", lower_bound=2.0, upper_bound=1.0)
    # a bound of 0 is "no bound" (MXNet passes only a truthy bound): no order to check
    optimizer.create("lamb", lower_bound=2.0, upper_bound=0.0)


# Last in this file on purpose: its subprocess steps every optimizer's float32 kernels, which the
# tests above have compiled by now into numba's on-disk cache, so it loads them instead of
# compiling them again (on a fresh clone, first in the file, it compiled about 35, 30 s of CPU).
# What it checks does not depend on the cache: which modules the process imported.
def test_cpu_path_never_imports_numba_cuda():
    """``import toolkit`` and CPU updates of every optimizer leave numba-cuda unimported."""
    import subprocess
    import sys
    code = ("import sys, numpy as np\n"
            "from toolkit import optimizer\n"
            "for name in optimizer.registry():\n"
            "    opt = optimizer.create(name)\n"
            "    w = np.ones((2, 2), np.float32); s = opt.create_state(0, w)\n"
            "    opt.update(0, w, np.ones((2, 2), np.float32), s)\n"
            "print(sorted(m for m in sys.modules if m.startswith('numba_cuda') or m == 'numba.cuda'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
