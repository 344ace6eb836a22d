"""The oracle's third convention, ``"pytorch"``: PyTorch's documented ``torch.optim`` update.

Two groups of tests.

Without torch (always run):

* every reference module declares ``CONVENTIONS`` and ``PYTORCH`` consistently, with the values
  its spec declares (``Spec.pytorch``), as
  decided in docs/conventions.md ("The PyTorch convention (oracle only)");
* a module without a pytorch convention refuses it with a ValueError that names the module and
  the conventions it has; Nadam's "guide" is still a NotImplementedError;
* where ``PYTORCH`` names another convention, ``convention="pytorch"`` runs that branch exactly
  (bit for bit);
* every own "pytorch" branch runs on ``Tracked`` inputs, and for each there is a case where it
  differs from both "mxnet" and "guide" by more than rounding can explain (the criterion of
  tests/test_reference_conventions_1.py: ``|a - b| > 2*(err_a + err_b)`` somewhere, with float64
  running error bounds), so that a convention can later be identified from behaviour alone;
* the documented relations where the pytorch convention does agree with another one (SGD and
  NAG with a constant learning rate; AdaDelta with ``lr = 1`` and ``wd = 0``).

With torch (skipped when it is not installed): several steps of the real ``torch.optim``
optimizer in float64 against the reference's ``convention="pytorch"``, weights and every state
slot after every step, over several hyperparameter settings (weight decay, momentum on and off,
centered on and off, a learning rate that changes between steps, rescaling and clipping applied
to the gradient handed to torch), with torch's single-tensor (``foreach=False``) and multi-tensor
(``foreach=True``) implementations.

Tolerance of the torch comparison: ``|torch - ref| <= 1e-14*(|ref| + max|ref|)`` per array
(weights and every state slot, after every step of a free-running six-step trajectory). Both
sides compute the same equations in float64, in different evaluation orders (torch uses ``lerp``
for the first moments, ``sqrt(v)/sqrt(1 - beta2^t)`` where the guide writes
``sqrt(v/(1 - beta2^t))``, two ``addcdiv`` calls for NAdam's two terms, ...), so they may differ
by rounding only. Measured over all the cases below (torch 2.13, both implementations): at most
3.8e-16 = 1.7 float64 eps (eps = 2.2e-16) on this scale. 1e-14 (45 eps) leaves a 25-fold margin
for other CPUs (vectorised loops, FMA) and is still far below every difference between the
conventions in these cases (the smallest, Adamax's guide convention with torch's defaults,
is 4e-13; the others 1e-9 and up). The ``max|ref|`` term makes the bound normwise for elements
that are the difference of larger terms (a momentum buffer ``mu*b + g`` near zero carries the
absolute rounding of ``mu*b`` and ``g``, not a relative one of its own size).

torch keeps NAdam's ``mu_product`` (and the step counts) in ``torch.get_default_dtype()``
precision (float32 by default, torch/optim/optimizer.py ``_get_scalar_dtype``); the torch tests
therefore set the default dtype to float64 for their duration, so that torch's update is the
float64 algorithm of its documentation.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import reference
from reference import adadelta, nadam
from reference._util import KNOWN_CONVENTIONS
from reference.error_bound import Tracked, tiny
from toolkit.optimizer import spec_of, specs
from toolkit.oracle.frameworks.torch import gradient_for

MODULES = tuple(reference.OPTIMIZERS.values())
OWN = tuple(m for m in MODULES if m.PYTORCH == "pytorch")
ALIAS = tuple(m for m in MODULES if m.PYTORCH not in (None, "pytorch"))
WITHOUT = tuple(m for m in MODULES if m.PYTORCH is None)

U64 = 2.0 ** -53
SLACK = 2.0
RTOL = 1e-14


def _ids(m):
    return m.NAME


def t64(x):
    """An exact float64 input, tracked with float64 roundoff."""
    return Tracked(np.asarray(x, dtype=np.float64), u=U64, tiny=tiny(np.float64))


def _value(x):
    return x.value if isinstance(x, Tracked) else np.asarray(x)


def _err(x):
    return x.err if isinstance(x, Tracked) else np.zeros(np.shape(x))


# ------------------------------------------------------------------------------------------------
# the attributes and the refusal (no torch needed)
# ------------------------------------------------------------------------------------------------

def test_every_module_has_its_spec():
    """The decision per optimizer is its spec's ``pytorch`` (docs/conventions.md, "The PyTorch
    convention (oracle only)"): the modules are exactly the references the specs name."""
    assert set(reference.OPTIMIZERS) == set(specs(oracle=True))


@pytest.mark.parametrize("mod", MODULES, ids=_ids)
def test_conventions_and_pytorch_attributes(mod):
    assert isinstance(mod.CONVENTIONS, tuple) and mod.CONVENTIONS
    assert set(mod.CONVENTIONS) <= set(KNOWN_CONVENTIONS)
    # MXNet's family has "mxnet"; an optimizer MXNet never had has the paper's or torch's
    # update instead, never "mxnet" beside "paper"; the first is the default on both sides
    assert ("mxnet" in mod.CONVENTIONS) != ("paper" in mod.CONVENTIONS) or \
        ("mxnet" not in mod.CONVENTIONS and "pytorch" in mod.CONVENTIONS)
    assert mod.CONVENTIONS[0] == spec_of(mod.NAME).default_convention
    assert mod.PYTORCH == spec_of(mod.NAME).pytorch
    assert ("pytorch" in mod.CONVENTIONS) == (mod.PYTORCH is not None)
    if mod.PYTORCH not in (None, "pytorch"):
        assert mod.PYTORCH in mod.CONVENTIONS
    # the module docstring cites the torch source it was written from, or says there is none
    doc = mod.__doc__
    if mod.PYTORCH is None:
        assert "torch.optim (torch 2.13) has no" in doc
    else:
        assert "torch/optim/" in doc and "class " in doc and "torch 2.13" in doc


def test_toolkit_conventions():
    """The reference's common default stays mxnet and guide; the toolkit's optimizers take
    "pytorch" too, and the kernels implement it only where torch.optim has the optimizer (the
    reference has a pytorch convention) and the spec lists it (tests/test_pytorch_convention.py
    checks those against torch.optim)."""
    from reference import _util
    from toolkit.optimizers import base
    assert _util.CONVENTIONS == ("mxnet", "guide")
    assert base.CONVENTIONS == ("mxnet", "guide", "pytorch", "paper")
    # the one definition on each side of the layer boundary: the toolkit's (spec.CONVENTIONS,
    # which base, the oracle's ORDER and mxopt verify import) and the reference's
    from toolkit.optimizers import spec
    from toolkit.oracle import trajectory
    assert base.CONVENTIONS is spec.CONVENTIONS and trajectory.ORDER is spec.CONVENTIONS
    assert spec.CONVENTIONS == _util.KNOWN_CONVENTIONS
    assert spec.DEFAULT_CONVENTIONS == _util.CONVENTIONS
    for name, spec in specs(oracle=True).items():
        if "pytorch" in spec.conventions:
            assert spec.pytorch is not None, name


@pytest.mark.parametrize("mod", WITHOUT, ids=_ids)
def test_pytorch_refused_where_torch_has_no_optimizer(mod):
    w = np.array([[1.0, -2.0, 0.5]])  # a matrix: every module takes one (GroupAdaGrad only those)
    state = mod.init_state(w)
    with pytest.raises(ValueError) as info:
        mod.step(w, w, state, t=1, lr=0.1, convention="pytorch")
    msg = str(info.value)
    assert mod.NAME in msg and "'pytorch'" in msg and "torch.optim" in msg
    assert str(mod.CONVENTIONS) in msg


@pytest.mark.parametrize("mod", MODULES, ids=_ids)
def test_unknown_convention_refused(mod):
    w = np.array([[1.0, -2.0, 0.5]])  # a matrix: every module takes one (GroupAdaGrad only those)
    with pytest.raises(ValueError, match="convention must be one of") as info:
        mod.step(w, w, mod.init_state(w), t=1, lr=0.1, convention="tensorflow")
    assert mod.NAME in str(info.value) and str(mod.CONVENTIONS) in str(info.value)


def test_nadam_guide_still_not_implemented():
    w = np.ones(3)
    with pytest.raises(NotImplementedError, match="step_lookahead"):
        nadam.step(w, w, nadam.init_state(w), t=1, lr=0.1, convention="guide")


# ------------------------------------------------------------------------------------------------
# aliases: convention="pytorch" runs the named branch exactly
# ------------------------------------------------------------------------------------------------

ALIAS_SETTINGS = [
    dict(),
    dict(wd=0.01),
    dict(wd=0.05, rescale_grad=0.5, clip_gradient=0.3),     # 0.3: not float32-representable
    dict(wd=0.0, clip_gradient=0.0),
]


@pytest.mark.parametrize("setting", ALIAS_SETTINGS)
@pytest.mark.parametrize("mod", ALIAS, ids=_ids)
def test_alias_runs_that_branch_bit_for_bit(mod, setting):
    rng = np.random.default_rng(11)
    w0 = rng.normal(size=9)
    for hyper_f32 in (True, False):
        wa, sa = w0.copy(), mod.init_state(w0)
        wb, sb = w0.copy(), mod.init_state(w0)
        for t in range(1, 5):
            g = rng.normal(size=9)
            lr = 0.01 * t
            wa, sa = mod.step(wa, g, sa, t=t, lr=lr, convention="pytorch", hyper_f32=hyper_f32,
                              **setting)
            wb, sb = mod.step(wb, g, sb, t=t, lr=lr, convention=mod.PYTORCH, hyper_f32=hyper_f32,
                              **setting)
            assert np.array_equal(wa, wb)
            assert sa.keys() == sb.keys()
            assert all(np.array_equal(sa[k], sb[k]) for k in sa)


# ------------------------------------------------------------------------------------------------
# own branches: Tracked inputs, and a case that tells pytorch from mxnet and guide
# ------------------------------------------------------------------------------------------------

#: per optimizer with its own branch: hyperparameters, wd, the learning rate of each step and the
#: gradient scale of each step, chosen so that the pytorch convention's defining difference acts
DISTINGUISH = {  # checked against the registry by test_every_own_branch_has_a_distinguishing_case
    # the buffer excludes lr: a learning rate that changes between steps
    "sgd": dict(hyper=dict(momentum=0.9), wd=0.0, lrs=[0.1, 0.02, 0.3, 0.05], scales=[1.0] * 4),
    "nag": dict(hyper=dict(momentum=0.9), wd=0.0, lrs=[0.1, 0.02, 0.3, 0.05], scales=[1.0] * 4),
    # eps outside the root: an eps comparable to the accumulated squares
    "adagrad": dict(hyper=dict(eps=0.1), wd=0.0, lrs=[0.1] * 3, scales=[1.0] * 3),
    "rmsprop": dict(hyper=dict(epsilon=0.1), wd=0.0, lrs=[0.1] * 3, scales=[1.0] * 3),
    "rmsprop-centered": dict(hyper=dict(epsilon=1e-8, centered=True, gamma2=0.9), wd=0.0,
                             lrs=[0.1, 0.02, 0.3], scales=[1.0] * 3),
    # lr multiplies the step (and MXNet's wd is decoupled): lr != 1
    "adadelta": dict(hyper=dict(), wd=0.0, lrs=[0.5, 0.25, 2.0], scales=[1.0] * 3),
    # eps inside the max: it parts from the guide once beta2*u wins the max (shrinking gradients;
    # by eps*(1 - beta2^k) in u, so a small beta2), and from MXNet (no eps) with gradients near eps
    "adamax": dict(hyper=dict(beta2=0.5), wd=0.0, lrs=[0.1] * 3, scales=[1e-8, 1e-10, 1e-10]),
    # torch's decay is lr*wd, the paper's wd (times eta); MXNet's operator has no bias correction
    "adamw": dict(hyper=dict(eta=0.5), wd=0.1, lrs=[0.1, 0.02, 0.3], scales=[1.0] * 3),
    # torch rectifies from rho_t > 5, the paper from rho_t > 4: t = 5 at beta2 = 0.999
    "radam": dict(hyper=dict(), wd=0.0, lrs=[0.1] * 6, scales=[1.0] * 6),
    # Rprop has no other convention to differ from: its branch runs on Tracked inputs (signs
    # flipping between the drawn gradients)
    "rprop": dict(hyper=dict(), wd=0.0, lrs=[0.1] * 4, scales=[1.0] * 4),
    # ASGD has no other convention either: its branch runs on Tracked inputs (the averaging on)
    "asgd": dict(hyper=dict(t0=1.0, lambd=0.01), wd=0.01, lrs=[0.1] * 4, scales=[1.0] * 4),
    # SparseAdam has no other convention either: its branch runs on Tracked inputs
    "sparseadam": dict(hyper=dict(epsilon=1e-3), wd=0.0, lrs=[0.1] * 4, scales=[1.0] * 4),
    # torch's statistics are means clamped at eps1, the paper's sums of g^2 + eps1: they part
    # once eps1 is comparable to the squares
    "adafactor": dict(hyper=dict(epsilon1=0.1), wd=0.0, lrs=[0.1] * 3, scales=[1.0] * 3),
    # torch's lerped buffer is (1 - momentum) times the post's summed one, which the
    # normalisation removes but for epsilon: max(|X|, eps) and |X| + eps part at a large one
    "muon": dict(hyper=dict(epsilon=3.0), wd=0.0, lrs=[0.1] * 3, scales=[1.0] * 3,
                 shape=(3, 4)),
}


def _distinguish_cases():
    for key, case in DISTINGUISH.items():
        yield pytest.param(reference.OPTIMIZERS[key.split("-")[0]], case, id=key)


def _trajectory(mod, convention, case, tracked):
    rng = np.random.default_rng(2024)
    shape = case.get("shape", (12,))  # Muon's weights are matrices
    w0 = rng.normal(size=shape)
    grads = [s * rng.normal(size=shape) for s in case["scales"]]
    w = t64(w0) if tracked else w0
    state = mod.init_state(w0, **case["hyper"])
    if tracked:
        state = {k: t64(v) for k, v in state.items()}
    out = []
    for t, (g, lr) in enumerate(zip(grads, case["lrs"]), 1):
        w, state = mod.step(w, t64(g) if tracked else g, state, t=t, lr=lr, wd=case["wd"],
                            convention=convention, hyper_f32=False, **case["hyper"])
        out.append(w)
    return out


def test_every_own_branch_has_a_distinguishing_case():
    assert {k.split("-")[0] for k in DISTINGUISH} == {m.NAME for m in OWN}


@pytest.mark.parametrize("mod,case", list(_distinguish_cases()))
def test_pytorch_differs_from_mxnet_and_guide(mod, case):
    """Somewhere along the trajectory the pytorch weights differ from each other convention's by
    more than twice the sum of the two float64 running error bounds: not rounding."""
    pt = _trajectory(mod, "pytorch", case, tracked=True)
    for other in (c for c in mod.CONVENTIONS if c != "pytorch"):
        ot = _trajectory(mod, other, case, tracked=True)
        gaps = [np.abs(_value(a) - _value(b)) - SLACK * (_err(a) + _err(b)) for a, b in zip(pt, ot)]
        assert max(float(np.max(gap)) for gap in gaps) > 0.0, other
        # and by far: at least 1e-3 of the weight's displacement over the trajectory
        w0 = _value(_trajectory(mod, "pytorch", dict(case, lrs=[0.0] * len(case["lrs"])),
                                tracked=False)[0])
        disp = max(float(np.max(np.abs(_value(a) - w0))) for a in pt)
        diff = max(float(np.max(np.abs(_value(a) - _value(b)))) for a, b in zip(pt, ot))
        assert diff > 1e-3 * disp, (other, diff, disp)


@pytest.mark.parametrize("mod,case", list(_distinguish_cases()))
def test_pytorch_branch_runs_on_tracked(mod, case):
    """Only operators and the allowed numpy functions: on Tracked inputs the values are the plain
    float64 values bit for bit, with finite non-negative bounds."""
    plain = _trajectory(mod, "pytorch", case, tracked=False)
    tracked = _trajectory(mod, "pytorch", case, tracked=True)
    for a, b in zip(plain, tracked):
        assert isinstance(b, Tracked)
        assert np.array_equal(a, b.value)
        assert np.all(np.isfinite(b.err)) and not np.any(b.err < 0)


# ------------------------------------------------------------------------------------------------
# where the pytorch convention agrees with another one (documented relations)
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mod", [reference.sgd, reference.nag], ids=_ids)
def test_constant_lr_momentum_is_the_guide_trajectory(mod):
    """torch's buffer ``b`` excludes lr; with a constant lr the guide's ``v`` is ``-lr*b`` and the
    weights are the same (up to rounding: the Tracked criterion of agreement)."""
    rng = np.random.default_rng(5)
    w0 = rng.normal(size=10)
    lr, hyper = 0.07, dict(momentum=0.8)
    wp, sp = t64(w0), {k: t64(v) for k, v in mod.init_state(w0, **hyper).items()}
    wg, sg = t64(w0), {k: t64(v) for k, v in mod.init_state(w0, **hyper).items()}
    for t in range(1, 6):
        g = t64(rng.normal(size=10))
        wp, sp = mod.step(wp, g, sp, t=t, lr=lr, wd=0.01, convention="pytorch", **hyper)
        wg, sg = mod.step(wg, g, sg, t=t, lr=lr, wd=0.01, convention="guide", **hyper)
        assert np.all(np.abs(wp.value - wg.value) <= SLACK * (wp.err + wg.err))
        v_from_b = sp["mom"] * (-lr)
        assert np.all(np.abs(v_from_b.value - sg["mom"].value)
                      <= SLACK * (v_from_b.err + sg["mom"].err))


def test_sgd_dampening_and_nesterov_are_torchs_and_refused_where_torchs_are():
    """reference.sgd's dampening scales the gradient into the buffer from the second step on
    (the first buffer is the gradient itself), Nesterov adds momentum times the buffer; torch
    refuses Nesterov without momentum or with dampening, and "mxnet" and "guide" have
    neither."""
    w0, g = np.array([1.0, -2.0]), np.array([0.5, 0.25])
    hyper = dict(momentum=0.5, dampening=0.25)
    w1, s1 = reference.sgd.step(w0, g, {"mom": np.zeros(2)}, t=1, lr=0.5, convention="pytorch",
                                **hyper)
    assert np.array_equal(s1["mom"], g) and np.array_equal(w1, w0 - 0.5 * g)
    w2, s2 = reference.sgd.step(w1, g, s1, t=2, lr=0.5, convention="pytorch", **hyper)
    assert np.array_equal(s2["mom"], 0.5 * g + 0.75 * g)
    w3, s3 = reference.sgd.step(w0, g, {"mom": g}, t=2, lr=0.5, convention="pytorch",
                                momentum=0.5, nesterov=True)
    assert np.array_equal(s3["mom"], 1.5 * g) and np.array_equal(w3, w0 - 0.5 * (g + 0.75 * g))
    for bad in (dict(momentum=0.0, nesterov=True), dict(momentum=0.9, nesterov=True,
                                                         dampening=0.1)):
        with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and zero "
                                             "dampening"):
            reference.sgd.step(w0, g, {"mom": g}, t=2, lr=0.5, convention="pytorch", **bad)
    for convention in ("mxnet", "guide"):
        for bad in (dict(nesterov=True), dict(dampening=0.1)):
            with pytest.raises(ValueError, match="'nag' optimizer"):
                reference.sgd.step(w0, g, {"mom": g}, t=2, lr=0.5, convention=convention,
                                   momentum=0.9, **bad)


@pytest.mark.parametrize("mod", [reference.sgd, reference.nag], ids=_ids)
def test_first_step_buffer_is_the_gradient(mod):
    """torch sets the momentum buffer to ``g`` on the first step (not ``mu*b + (1-dampening)*g``);
    with dampening 0 and a zero buffer this is the same value, exactly."""
    w0 = np.array([1.0, -2.0, 0.5, 3.0])
    g = np.array([0.3, -0.7, 1e-300, -4.0])
    w1, s1 = mod.step(w0, g, mod.init_state(w0, momentum=0.9), t=1, lr=0.1, wd=0.25,
                      convention="pytorch", momentum=0.9)
    assert np.array_equal(s1["mom"], g + 0.25 * w0)


def test_adadelta_lr1_no_wd_agrees_with_mxnet_and_guide():
    rng = np.random.default_rng(9)
    w0 = rng.normal(size=10)
    ws = {c: t64(w0) for c in ("pytorch", "mxnet", "guide")}
    ss = {c: {k: t64(v) for k, v in adadelta.init_state(w0).items()} for c in ws}
    for t in range(1, 6):
        g = t64(rng.normal(size=10))
        for c in ws:
            ws[c], ss[c] = adadelta.step(ws[c], g, ss[c], t=t, lr=1.0, convention=c,
                                         hyper_f32=False)
        for c in ("mxnet", "guide"):
            a, b = ws["pytorch"], ws[c]
            assert np.all(np.abs(a.value - b.value) <= SLACK * (a.err + b.err)), c


# ------------------------------------------------------------------------------------------------
# against the real torch.optim (skipped without torch)
# ------------------------------------------------------------------------------------------------

@pytest.fixture
def torch64():
    torch = pytest.importorskip(
        "torch", reason="torch is not installed: the comparison with torch.optim needs it")
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield torch
    finally:
        torch.set_default_dtype(old)


def _make_torch(torch, name, params, *, lr, wd, hyper, foreach):
    """The torch.optim optimizer of the convention, with our hyperparameters mapped to torch's
    names (the mapping of each module's docstring), and the map torch state name -> our slot."""
    o = torch.optim
    if name in ("sgd", "nag"):
        mom = hyper.get("momentum", 0.0)
        opt = o.SGD(params, lr=lr, momentum=mom, dampening=hyper.get("dampening", 0.0),
                    weight_decay=wd, foreach=foreach,
                    nesterov=(name == "nag" and mom != 0.0) or hyper.get("nesterov", False))
        return opt, ({"mom": "momentum_buffer"} if mom != 0.0 else {})
    if name == "adagrad":
        opt = o.Adagrad(params, lr=lr, lr_decay=0.0, weight_decay=wd,
                        initial_accumulator_value=0.0, eps=hyper["eps"], foreach=foreach)
        return opt, {"history": "sum"}
    if name == "rmsprop":
        centered = hyper.get("centered", False)
        mom = hyper.get("gamma2", 0.9) if centered else 0.0
        opt = o.RMSprop(params, lr=lr, alpha=hyper.get("gamma1", 0.9),
                        eps=hyper.get("epsilon", 1e-8), weight_decay=wd, momentum=mom,
                        centered=centered, foreach=foreach)
        slots = {"n": "square_avg"}
        if centered:
            slots["g"] = "grad_avg"
            if mom > 0:          # torch keeps no buffer without momentum
                slots["delta"] = "momentum_buffer"
        return opt, slots
    if name == "adadelta":
        opt = o.Adadelta(params, lr=lr, rho=hyper.get("rho", 0.9),
                         eps=hyper.get("epsilon", 1e-5), weight_decay=wd, foreach=foreach)
        return opt, {"acc_g": "square_avg", "acc_delta": "acc_delta"}
    if name == "adamax":
        eps = hyper.get("epsilon")
        opt = o.Adamax(params, lr=lr, betas=(hyper.get("beta1", 0.9), hyper.get("beta2", 0.999)),
                       eps=1e-8 if eps is None else eps, weight_decay=wd, foreach=foreach)
        return opt, {"mean": "exp_avg", "u": "exp_inf"}
    if name == "adam":
        opt = o.Adam(params, lr=lr, betas=(hyper.get("beta1", 0.9), hyper.get("beta2", 0.999)),
                     eps=hyper.get("epsilon", 1e-8), weight_decay=wd, amsgrad=False,
                     foreach=foreach)
        return opt, {"mean": "exp_avg", "var": "exp_avg_sq"}
    if name == "nadam":
        opt = o.NAdam(params, lr=lr, betas=(hyper.get("beta1", 0.9), hyper.get("beta2", 0.999)),
                      eps=hyper.get("epsilon", 1e-8), weight_decay=wd,
                      momentum_decay=hyper.get("schedule_decay", 0.004),
                      decoupled_weight_decay=hyper.get("decoupled_weight_decay", False),
                      foreach=foreach)
        return opt, {"m": "exp_avg", "v": "exp_avg_sq", "m_schedule": "mu_product"}
    if name == "adamw":
        opt = o.AdamW(params, lr=lr * hyper.get("eta", 1.0),
                      betas=(hyper.get("beta1", 0.9), hyper.get("beta2", 0.999)),
                      eps=hyper.get("epsilon", 1e-8), weight_decay=wd, amsgrad=False,
                      foreach=foreach)
        return opt, {"mean": "exp_avg", "var": "exp_avg_sq"}
    if name == "radam":
        opt = o.RAdam(params, lr=lr, betas=(hyper.get("beta1", 0.9), hyper.get("beta2", 0.999)),
                      eps=hyper.get("epsilon", 1e-8), weight_decay=wd,
                      decoupled_weight_decay=hyper.get("decoupled_weight_decay", False),
                      foreach=foreach)
        return opt, {"mean": "exp_avg", "var": "exp_avg_sq"}
    if name == "rprop":
        opt = o.Rprop(params, lr=lr, etas=(hyper.get("etaminus", 0.5), hyper.get("etaplus", 1.2)),
                      step_sizes=(hyper.get("step_size_min", 1e-6),
                                  hyper.get("step_size_max", 50.0)), foreach=foreach)
        return opt, {"prev": "prev", "step_size": "step_size"}
    if name == "asgd":
        opt = o.ASGD(params, lr=lr, lambd=hyper.get("lambd", 1e-4), alpha=hyper.get("alpha", 0.75),
                     t0=hyper.get("t0", 1e6), weight_decay=wd, foreach=foreach)
        return opt, {"ax": "ax"}
    if name == "adafactor":
        opt = o.Adafactor(params, lr=lr, beta2_decay=hyper.get("beta2_decay", -0.8),
                          eps=(hyper.get("epsilon1"), hyper.get("epsilon2", 1e-3)),
                          d=hyper.get("clip_threshold", 1.0), weight_decay=wd, foreach=foreach)
        if params[0].dim() > 1:  # a matrix: factored
            return opt, {"row_var": "row_var", "col_var": "col_var"}
        return opt, {"variance": "variance"}
    if name == "sparseadam":  # one implementation (no foreach); sparse gradients (gradient_for)
        opt = o.SparseAdam(params, lr=lr, betas=(hyper.get("beta1", 0.9),
                                                 hyper.get("beta2", 0.999)),
                           eps=hyper.get("epsilon", 1e-8))
        return opt, {"mean": "exp_avg", "var": "exp_avg_sq"}
    raise AssertionError(name)


CHANGING = [0.1, 0.03, 0.2, 0.2, 0.05, 0.12]
CONSTANT = [0.05] * 6

#: (optimizer, hyperparameters, wd, learning rates per step, rescale_grad, clip_gradient)
TORCH_CASES = [  # checked against the registry by test_every_torch_optimizer_has_cases
    ("sgd", dict(), 0.0, CHANGING, 1.0, None),
    ("sgd", dict(), 0.1, CONSTANT, 1.0, None),
    ("sgd", dict(momentum=0.9), 0.0, CHANGING, 1.0, None),
    ("sgd", dict(momentum=0.5), 0.01, CONSTANT, 1.0, None),
    ("sgd", dict(momentum=0.9), 0.01, CHANGING, 0.5, 0.75),
    # torch's dampening (not on the first step, whose buffer is the gradient) and Nesterov
    ("sgd", dict(momentum=0.9, dampening=0.5), 0.01, CHANGING, 1.0, None),
    ("sgd", dict(momentum=0.5, dampening=0.1), 0.0, CONSTANT, 0.5, 0.75),
    ("sgd", dict(momentum=0.9, nesterov=True), 0.01, CHANGING, 1.0, None),
    ("sgd", dict(dampening=0.5), 0.1, CHANGING, 1.0, None),   # no momentum: unused
    ("nag", dict(), 0.1, CHANGING, 1.0, None),
    ("nag", dict(momentum=0.9), 0.0, CHANGING, 1.0, None),
    ("nag", dict(momentum=0.6), 0.05, CONSTANT, 1.0, None),
    ("nag", dict(momentum=0.9), 0.01, CHANGING, 0.5, 0.75),
    ("adagrad", dict(eps=1e-7), 0.0, CONSTANT, 1.0, None),
    ("adagrad", dict(eps=1e-10), 0.05, CHANGING, 1.0, None),
    ("adagrad", dict(eps=0.1), 0.01, CHANGING, 0.5, 0.75),
    ("rmsprop", dict(gamma1=0.9, epsilon=1e-8), 0.0, CONSTANT, 1.0, None),
    ("rmsprop", dict(gamma1=0.99, epsilon=0.1), 0.01, CHANGING, 1.0, None),
    ("rmsprop", dict(centered=True, gamma1=0.9, gamma2=0.9), 0.0, CHANGING, 1.0, None),
    ("rmsprop", dict(centered=True, gamma1=0.95, gamma2=0.0), 0.01, CHANGING, 1.0, None),
    ("rmsprop", dict(centered=True, gamma1=0.8, gamma2=0.5, epsilon=1e-3), 0.02, CHANGING, 0.5,
     0.75),
    ("adadelta", dict(), 0.0, [1.0] * 6, 1.0, None),
    ("adadelta", dict(rho=0.95, epsilon=1e-6), 0.01, [0.5, 1.0, 2.0, 0.25, 1.0, 0.7], 1.0, None),
    ("adadelta", dict(rho=0.8, epsilon=1e-3), 0.05, CHANGING, 0.5, 0.75),
    ("adamax", dict(), 0.0, CONSTANT, 1.0, None),
    ("adamax", dict(beta1=0.8, beta2=0.5, epsilon=1e-2), 0.01, CHANGING, 1.0, None),
    ("adamax", dict(epsilon=1e-3), 0.05, CHANGING, 0.5, 0.75),
    ("adam", dict(), 0.0, CONSTANT, 1.0, None),
    ("adam", dict(beta1=0.8, beta2=0.9, epsilon=1e-3), 0.01, CHANGING, 1.0, None),
    ("adam", dict(epsilon=1e-6), 0.05, CHANGING, 0.5, 0.75),
    ("nadam", dict(), 0.0, CONSTANT, 1.0, None),
    ("nadam", dict(beta1=0.8, beta2=0.9, epsilon=1e-3, schedule_decay=0.1), 0.01, CHANGING, 1.0,
     None),
    # MXNet's (the alias's) reading adds wd before clipping, torch's own branches after: with
    # clipping on, the alias is compared with wd = 0 (the two readings then coincide)
    ("nadam", dict(schedule_decay=0.004), 0.0, CHANGING, 0.5, 0.75),
    ("nadam", dict(decoupled_weight_decay=True), 0.1, CHANGING, 1.0, None),
    ("adamw", dict(), 0.0, CONSTANT, 1.0, None),
    ("adamw", dict(beta1=0.8, beta2=0.9, epsilon=1e-3), 0.1, CHANGING, 1.0, None),
    ("adamw", dict(eta=0.5, epsilon=1e-6), 0.05, CHANGING, 0.5, 0.75),
    # the rectified step from t = 6 (beta2 = 0.999 and 0.9)
    ("radam", dict(), 0.0, CONSTANT, 1.0, None),
    ("radam", dict(beta1=0.8, beta2=0.9, epsilon=1e-3), 0.01, CHANGING, 1.0, None),
    ("radam", dict(decoupled_weight_decay=True), 0.1, CHANGING, 0.5, 0.75),
    # torch reads lr on the first step only: a changing lr changes nothing after it
    ("rprop", dict(), 0.0, CONSTANT, 1.0, None),
    ("rprop", dict(etaminus=0.3, etaplus=2.0, step_size_min=1e-3, step_size_max=0.2), 0.0,
     CHANGING, 0.5, 0.75),
    # a constant lr (torch forms eta_{t+1} with step t's lr; the reference with step t+1's):
    # torch's eta and mu are float64 here (torch64 sets the default dtype)
    ("asgd", dict(), 0.0, CONSTANT, 1.0, None),
    ("asgd", dict(lambd=0.05, alpha=1.0, t0=2.0), 0.01, CONSTANT, 0.5, 0.75),
    # a matrix (5 x 7): factored; torch's relative step caps at lr, so a changing lr moves it
    ("adafactor", dict(), 0.0, CONSTANT, 1.0, None),
    ("adafactor", dict(beta2_decay=-0.5, epsilon1=1e-3, epsilon2=1e-2, clip_threshold=2.0), 0.1,
     CHANGING, 0.5, 0.75),
    # every row present (the dense gradient as a sparse one), the learning rate changing
    ("sparseadam", dict(), 0.0, CONSTANT, 1.0, None),
    ("sparseadam", dict(beta1=0.8, beta2=0.9, epsilon=1e-3), 0.0, CHANGING, 0.5, 0.75),
]


def _case_id(case):
    name, hyper, wd, lrs, rs, clip = case
    h = ",".join(f"{k}={v}" for k, v in hyper.items())
    lr = "lr~" if len(set(lrs)) > 1 else "lr"
    return f"{name}[{h}|wd={wd}|{lr}|rs={rs}|c={clip}]"


def _assert_close(actual, expected, what):
    expected = np.asarray(expected, dtype=np.float64)
    np.testing.assert_allclose(actual, expected, rtol=RTOL,
                               atol=RTOL * float(np.max(np.abs(expected))), err_msg=what)


#: optimizers with a PyTorch decision whose torch.optim runs another precision, run against it
#: elsewhere (where, and to what bound)
ELSEWHERE = {"muon": "torch's iteration runs in bfloat16: tests/test_muon_proofs.py (within the "
                     "bound of a bfloat16 iteration; the bfloat16 form bit for bit on small "
                     "matrices)"}


def test_every_torch_optimizer_has_cases():
    """Every optimizer whose spec names a PyTorch decision is run against torch.optim."""
    assert ({c[0] for c in TORCH_CASES} | set(ELSEWHERE)
            == {name for name, spec in specs(oracle=True).items() if spec.pytorch is not None})
    assert not {c[0] for c in TORCH_CASES} & set(ELSEWHERE)


@pytest.mark.parametrize("foreach", [False, True], ids=["single", "foreach"])
@pytest.mark.parametrize("case", TORCH_CASES, ids=_case_id)
def test_matches_torch_optim(torch64, case, foreach):
    torch = torch64
    name, hyper, wd, lrs, rs, clip = case
    mod = reference.OPTIMIZERS[name]
    rng = np.random.default_rng(zlib.crc32(_case_id(case).encode()))  # deterministic
    shape = (5, 7)
    w0 = rng.normal(size=shape)
    grads = [rng.normal(scale=2.0, size=shape) for _ in lrs]

    p = torch.nn.Parameter(torch.tensor(w0, dtype=torch.float64))
    opt, slots = _make_torch(torch, name, [p], lr=lrs[0], wd=wd, hyper=hyper, foreach=foreach)
    w, state = w0.copy(), mod.init_state(w0, **hyper)
    for t, (g, lr) in enumerate(zip(grads, lrs), 1):
        # the convention's reading of rescale_grad and clip_gradient: torch is handed the
        # rescaled, clipped gradient (torch then adds its own weight decay)
        gt = rs * g if clip is None else np.clip(rs * g, -clip, clip)
        p.grad = gradient_for(type(opt).__name__, torch.tensor(gt, dtype=torch.float64))
        for group in opt.param_groups:   # AdamW: torch's lr is eta*lr (reference/adamw.py)
            group["lr"] = lr * hyper.get("eta", 1.0) if name == "adamw" else lr
        opt.step()
        w, state = mod.step(w, g, state, t=t, lr=lr, wd=wd, rescale_grad=rs, clip_gradient=clip,
                            convention="pytorch", **hyper)
        _assert_close(p.detach().numpy(), w, f"{name} weight, step {t}")
        tstate = opt.state[p]
        for ours, theirs in slots.items():
            _assert_close(np.asarray(tstate[theirs].detach().numpy(), dtype=np.float64),
                          state[ours], f"{name} state {ours} (torch {theirs}), step {t}")
