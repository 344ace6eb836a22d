"""Hyperparameters assigned after construction run the constructor's checks (issue 19, item 6):
every declared domain refuses a bad value on assignment and keeps the old one; an assignment
that would change the layout of state already made is refused with a message that says what to
do; ``settings()`` lists every setting that changes the numbers."""
from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

from toolkit import Parameter, Trainer, optimizer

NAMES = sorted(optimizer.registry())
#: constructor keywords that are not settings of the numbers
NOT_NUMERIC = {"self", "args", "kwargs", "param_idx2name", "param_dict", "sym", "backend"}


def _bad_values(domain):
    if domain.kind in ("nonneg", "positive", "unit"):
        return [float("nan"), float("inf"), -1.0, "0.1"]
    if domain.kind == "int":
        return [domain.minimum - 1, 1.5, True]
    if domain.kind == "choice":
        return ["no such choice"]
    if domain.kind == "flag":
        return ["yes"] if domain.strict else []
    if domain.kind == "real":  # a real between bounds (Adafactor's beta2_decay <= 0)
        return [float("nan"), float("inf"), "0.1"] + \
            ([domain.minimum - 1.0] if domain.minimum is not None else []) + \
            ([domain.maximum + 1.0] if domain.maximum is not None else [])
    return [3.0]   # "callable"


CASES = [(name, attr, bad) for name in NAMES
         for attr, domain in optimizer.registry()[name].hyperparameter_domains().items()
         for bad in _bad_values(domain)]


@pytest.mark.parametrize("name, attr, bad", CASES, ids=[f"{n}-{a}-{b!r}" for n, a, b in CASES])
def test_a_bad_value_assigned_later_is_refused_and_the_old_one_kept(name, attr, bad):
    opt = optimizer.create(name)
    before = getattr(opt, attr)
    with pytest.raises((ValueError, TypeError)):
        setattr(opt, attr, bad)
    assert getattr(opt, attr) is before


def test_the_issues_reproducers():
    opt = optimizer.Adam()
    for attr, value in [("beta1", float("nan")), ("wd", float("nan")), ("lr", float("nan")),
                        ("beta1", 1)]:
        with pytest.raises(ValueError, match="finite|in \\[0, 1\\)"):
            setattr(opt, attr, value)
    w = np.ones(4, np.float32)
    s = opt.create_state(0, w)
    opt.update(0, w, np.full(4, 0.5, np.float32), s)    # the optimizer still steps
    assert np.all(np.isfinite(w))


def test_momentum_turned_on_after_a_trainers_states_exist_is_refused():
    p = Parameter("w", init=np.ones(4, np.float32))
    tr = Trainer([p], "sgd", {"learning_rate": 0.1})
    with pytest.raises(ValueError, match="Create a new optimizer with momentum=0.9"):
        tr.optimizer.momentum = 0.9
    assert tr.optimizer.momentum == 0.0
    p.grad()[:] = 1.0
    tr.step(1)                                  # still a plain SGD step
    assert np.array_equal(p.data(), np.full(4, np.float32(1) - np.float32(0.1), np.float32))


def test_momentum_set_before_any_state_is_used():
    opt = optimizer.SGD(learning_rate=0.1)
    opt.momentum = 0.9
    w = np.zeros(2, np.float32)
    s = opt.create_state(0, w)
    assert s is not None
    g = np.ones(2, np.float32)
    opt.update(0, w, g, s)
    opt.update(0, w, g, s)
    ref = optimizer.SGD(learning_rate=0.1, momentum=0.9)
    w2 = np.zeros(2, np.float32)
    s2 = ref.create_state(0, w2)
    ref.update(0, w2, g, s2)
    ref.update(0, w2, g, s2)
    assert np.array_equal(w, w2)


def test_a_layout_change_that_keeps_the_layout_is_allowed():
    opt = optimizer.SGD(momentum=0.9)
    opt.create_state(0, np.zeros(2, np.float32))
    opt.momentum = 0.5                          # still one momentum buffer
    assert opt.momentum == 0.5
    rms = optimizer.RMSProp()
    rms.create_state(0, np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="centered cannot change"):
        rms.centered = True


def test_a_convention_change_once_state_exists_is_refused():
    """The state's meaning is its convention's (SGD's momentum holds -lr*buf under "mxnet",
    torch's buffer under "pytorch"): once state is made the convention stays, nothing moved
    (a hostile review: the edit was taken and the next step read MXNet's buffer as torch's);
    before any state it may change."""
    opt = optimizer.SGD(learning_rate=0.1, momentum=0.9)
    w, g = np.ones(3), np.ones(3)
    s = opt.create_state(0, w)
    opt.update(0, w, g, s)
    with pytest.raises(ValueError, match=r"convention cannot change from 'mxnet' to "
                                         r"'pytorch': .*\(what it holds, by convention: "
                                         r"MXNet's -lr\*buf -> torch's buffer\)"):
        opt.convention = "pytorch"
    assert opt.convention == "mxnet"
    opt.update(0, w, g, s)                      # MXNet's second step, as if never asked
    ref = optimizer.SGD(learning_rate=0.1, momentum=0.9)
    w2 = np.ones(3)
    s2 = ref.create_state(0, w2)
    ref.update(0, w2, g, s2)
    ref.update(0, w2, g, s2)
    assert np.array_equal(w, w2) and np.array_equal(s, s2)
    fresh = optimizer.SGD(learning_rate=0.1, momentum=0.9)
    fresh.convention = "pytorch"                # no state yet: taken
    assert fresh.convention == "pytorch"
    opt.convention = "guide"                    # the same buffer (MXNet's): taken
    assert opt.convention == "guide"


@pytest.mark.parametrize("make, attr, value, match", [
    (lambda: optimizer.LAMB(lower_bound=1.0, upper_bound=2.0), "lower_bound", 3.0,
     "must not exceed"),
    (lambda: optimizer.Signum(momentum=0.9, wd_lh=0.1), "momentum", 0.0, "wd_lh needs"),
    (lambda: optimizer.Adamax(epsilon=1e-8, convention="guide"), "convention", "mxnet",
     "no epsilon"),
    # (Rprop's was checked at construction and at each step only, not on assignment)
    (lambda: optimizer.Rprop(), "etaminus", 2.0, r"^Rprop needs 0 < etaminus < 1 < etaplus"),
    (lambda: optimizer.Rprop(), "etaplus", 0.9, r"got etaminus=0\.5, etaplus=0\.9$"),
])
def test_relations_between_hyperparameters_hold_on_assignment(make, attr, value, match):
    opt = make()
    before = getattr(opt, attr)
    with pytest.raises(ValueError, match=match):
        setattr(opt, attr, value)
    assert getattr(opt, attr) == before


def test_assignments_together_check_their_relations_once_and_all_go_back_on_refusal():
    """``together()``: LAMB's bounds moved past each other in two assignments (each alone
    breaks the relation); a refusal at the end, or of one assignment inside, puts every
    assignment made inside back."""
    opt = optimizer.LAMB(lower_bound=1.0, upper_bound=2.0)
    with pytest.raises(ValueError, match="must not exceed"):
        opt.lower_bound = 3.0  # alone: refused
    with opt.together():
        opt.lower_bound = 3.0
        opt.upper_bound = 4.0
    assert (opt.lower_bound, opt.upper_bound) == (3.0, 4.0)
    with pytest.raises(ValueError, match=r"got lower_bound=5\.0 > upper_bound=4\.5$"):
        with opt.together():
            opt.upper_bound = 4.5
            opt.lower_bound = 5.0
    assert (opt.lower_bound, opt.upper_bound) == (3.0, 4.0)
    with pytest.raises(ValueError, match="beta1"):
        with opt.together():
            opt.upper_bound = 10.0
            opt.beta1 = 1.5  # its own domain refuses it
    assert (opt.lower_bound, opt.upper_bound, opt.beta1) == (3.0, 4.0, 0.9)
    with opt.together():  # nested: the outermost checks
        with opt.together():
            opt.lower_bound = 5.0
        opt.upper_bound = 6.0
    assert (opt.lower_bound, opt.upper_bound) == (5.0, 6.0)
    # every tie is checked at the end, in either order: state_rounding with state_dtype too
    for order in (("state_dtype", "state_rounding"), ("state_rounding", "state_dtype")):
        held = optimizer.Adam(state_dtype="bfloat16", state_rounding="stochastic")
        with held.together():
            for attr in order:
                setattr(held, attr, {"state_dtype": None, "state_rounding": "nearest"}[attr])
        assert (held.state_dtype, held.state_rounding) == (None, "nearest")


@pytest.mark.parametrize("name", NAMES)
def test_hyperparameters_name_every_constructor_keyword(name):
    klass = optimizer.registry()[name]
    opt = klass()
    keywords = set()
    for c in klass.__mro__:
        if "__init__" in c.__dict__:
            keywords |= set(inspect.signature(c.__init__).parameters)
    hp = opt.settings()
    # an alias (RMSProp's rho for gamma1) is another name of a setting, not one of its own
    assert keywords - NOT_NUMERIC - set(klass.hyperparameter_aliases()) <= set(hp)
    assert set(opt.reference_hyper()) <= set(hp)
    import json
    assert json.loads(json.dumps(hp)) == hp


def test_hyperparameters_follow_assignments_and_the_scheduler():
    from toolkit import lr_scheduler
    opt = optimizer.Adam(lr_scheduler=lr_scheduler.FactorScheduler(step=3))
    opt.beta1 = 0.5
    hp = opt.settings()
    assert hp["beta1"] == 0.5 and hp["lr_scheduler"]["type"].endswith("FactorScheduler")
    assert hp != optimizer.Adam(lr_scheduler=lr_scheduler.FactorScheduler(step=2)).settings()


def test_derived_settings_follow_their_sources():
    opt = optimizer.LBSGD(begin_epoch=2, updates_per_epoch=10)
    assert opt.init_updates == 20
    opt.begin_epoch = 3
    assert opt.init_updates == 30
    assert not math.isnan(opt.learning_rate)


# --- found by a hostile review of the change --------------------------------------------------
def test_multi_precision_turned_on_after_state_exists_is_refused():
    opt = optimizer.SGD(momentum=0.9)
    opt.create_state_multi_precision(0, np.zeros(2, np.float16))
    with pytest.raises(ValueError, match="multi_precision False -> True"):
        opt.multi_precision = True
    assert opt.multi_precision is False


def test_nadams_guide_convention_is_refused_on_assignment_too():
    opt = optimizer.Nadam()
    with pytest.raises(ValueError, match="not available for Nadam"):
        opt.convention = "guide"
    assert opt.convention == "mxnet"


def test_begin_num_update_moves_the_count_before_a_step_and_is_bounded_after():
    opt = optimizer.Adam()
    opt.begin_num_update = 5
    assert opt.num_update == 5
    w = np.zeros(2, np.float32)
    s = opt.create_state(0, w)
    opt.update(0, w, np.ones(2, np.float32), s)
    with pytest.raises(ValueError, match="exceeds the update counts"):
        opt.begin_num_update = 10
    assert opt.begin_num_update == 5 and opt.num_update == 6


def test_settings_tell_plain_function_schedules_apart():
    a = optimizer.create("sgd", lr_scheduler=lambda n: 0.1).settings()
    b = optimizer.create("sgd", lr_scheduler=lambda n: 0.9).settings()
    assert a != b
    assert a == optimizer.create("sgd", lr_scheduler=lambda n: 0.1).settings()


@pytest.mark.parametrize("make, data", [
    (optimizer.Nadam, {"m_schedule": -5.0}), (optimizer.Nadam, {"m_schedule": 2.0}),
    (optimizer.LBSGD, {"ncum": [[0, True]], "cum": []}),
    (optimizer.LBSGD, {"ncum": [[0, 2 ** 80]], "cum": []}),
    (optimizer.LBSGD, {"ncum": [[0, 1], [0, 2]], "cum": []}),
    (optimizer.LBSGD, {"ncum": [[1.5, 1]], "cum": []}),
])
def test_host_state_out_of_its_domain_is_refused(make, data):
    with pytest.raises(ValueError):
        make().check_host_state(data, {})


def test_a_guarded_update_names_the_gradient_it_refuses():
    opt = optimizer.SGD()
    w = np.zeros(3, np.float32)
    with pytest.raises(TypeError, match="^grad must be"):
        opt.update(0, w, [1.0, 2.0, 3.0], opt.create_state(0, w), skip_nonfinite=True)


# --------------------------------------------------------------------------------------------
# every other name of a hyperparameter (AdaGrad's eps, RMSProp's rho and momentum) is checked
# --------------------------------------------------------------------------------------------
#: every alias of every optimizer, from the declared data (Domain.keyword and Domain.aliases)
ALIAS_CASES = [(name, alias, attr) for name in NAMES
               for alias, attr in optimizer.registry()[name].hyperparameter_aliases().items()]


@pytest.mark.parametrize("name", NAMES)
def test_every_constructor_keyword_is_a_hyperparameter_or_an_alias_of_one(name):
    """The alias table is complete: a keyword the constructor accepts for a hyperparameter is
    its attribute, its declared keyword or a declared alias (so each is checked on assignment
    below)."""
    klass = optimizer.registry()[name]
    from toolkit.optimizers.aliases import accepted_keywords
    domains = klass.hyperparameter_domains()
    names = set(domains) | {d.keyword for d in domains.values() if d.keyword}
    assert accepted_keywords(klass) - NOT_NUMERIC - names <= set(klass.hyperparameter_aliases())
    for alias, attr in klass.hyperparameter_aliases().items():
        assert alias in accepted_keywords(klass) and attr in domains


def _alias_bad_values(domain):
    extra = [10 ** 400] if domain.kind in ("nonneg", "positive", "unit") else []
    return _bad_values(domain) + extra


@pytest.mark.parametrize("name, alias, attr", ALIAS_CASES,
                         ids=[f"{n}-{a}" for n, a, _ in ALIAS_CASES])
def test_an_alias_goes_through_the_check_of_its_hyperparameter(name, alias, attr):
    """``opt.eps = nan`` on AdaGrad or ``opt.rho = 5`` on RMSProp is refused exactly as
    ``opt.float_stable_eps = nan`` or ``opt.gamma1 = 5`` is, naming the alias, and the value is
    kept; reading the alias gives the hyperparameter's value; a good value assigned under the
    alias is the hyperparameter's value (its settings and repr follow)."""
    klass = optimizer.registry()[name]
    domain = klass.hyperparameter_domains()[attr]
    opt = optimizer.create(name)
    assert getattr(opt, alias) == getattr(opt, attr)
    for bad in [*_alias_bad_values(domain), float("nan")]:
        canonical = optimizer.create(name)
        with pytest.raises((ValueError, TypeError)) as expected:
            setattr(canonical, attr, bad)
        before = getattr(opt, attr)
        with pytest.raises(expected.type) as got:
            setattr(opt, alias, bad)
        assert alias in str(got.value)
        assert getattr(opt, attr) is before and getattr(opt, alias) is before
        assert alias not in vars(opt)   # no plain attribute beside the hyperparameter
    assert domain.kind in ("nonneg", "positive", "unit")   # the good values below are for these
    for good in (0.25, 0.5):
        setattr(opt, alias, good)
        assert getattr(opt, attr) == good == getattr(opt, alias)
        assert opt.settings()[domain.keyword or attr] == good
        assert optimizer.create(name, **{alias: good}).settings() == opt.settings()
