"""AMSGrad on Adam and AdamW (Reddi et al. 2018; torch's ``amsgrad=True``): the third slot is the
running maximum of the second moment (the proof), the flag is refused under MXNet's convention
and changes nothing when off (two slots, the same numbers), ``toolkit.torch`` takes it from a
torch state_dict and gives it back, and the oracle holds it off unless ``fixed`` sets it (a
user's ``make_step`` is not handed it). Its equality with torch.optim is
tests/test_pytorch_convention.py's (cases with ``amsgrad``)."""
from __future__ import annotations

import numpy as np
import pytest

import reference
from torch_crossing import loaded_from_torch
from toolkit import oracle, optimizer


def _grads(n=7, steps=9, seed=3):
    rng = np.random.default_rng(seed)
    # magnitudes that rise and fall, so that the second moment falls below its maximum
    return [rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 2) for _ in range(steps)]


@pytest.mark.parametrize("name", ["adam", "adamw"])
@pytest.mark.parametrize("convention", ["guide", "pytorch"])
def test_the_maximum_is_the_running_maximum_of_the_second_moment(name, convention):
    """The reference's ``max_var`` after step t is the elementwise maximum of ``var`` over
    steps 1..t; its weight equals the one stepped with that maximum in ``var``'s place, and
    differs from plain Adam's once ``var`` falls below it."""
    mod = reference.OPTIMIZERS[name]
    w0, grads = np.linspace(-1.0, 1.0, 7), _grads()
    w, s = w0.copy(), mod.init_state(w0, amsgrad=True)
    plain_w, plain_s = w0.copy(), mod.init_state(w0)
    seen = []
    for t, g in enumerate(grads, 1):
        # no weight decay: Adam's coupled decay would bring the (different) weights into g
        w, s = mod.step(w, g, s, t=t, lr=0.01, convention=convention, amsgrad=True)
        plain_w, plain_s = mod.step(plain_w, g, plain_s, t=t, lr=0.01, convention=convention)
        seen.append(s["var"])
        assert np.array_equal(s["max_var"], np.maximum.reduce(seen))
        assert np.array_equal(s["var"], plain_s["var"])  # the moments themselves are Adam's
    assert (s["max_var"] > s["var"]).any() and not np.array_equal(w, plain_w)


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_off_keeps_two_slots_and_on_three(name):
    w = np.zeros(4, np.float32)
    assert len(optimizer.create(name).create_state(0, w)) == 2
    opt = optimizer.create(name, amsgrad=True, convention="pytorch")
    assert opt.state_slots() == ("mean", "var", "max_var")
    assert len(opt.create_state(0, w)) == 3


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_refused_under_mxnet_at_construction_and_on_assignment(name):
    with pytest.raises(ValueError, match="amsgrad=True is refused under convention 'mxnet': "
                                         "MXNet 1.9.1 has no AMSGrad"):
        optimizer.create(name, amsgrad=True)
    opt = optimizer.create(name, amsgrad=True, convention="guide")
    with pytest.raises(ValueError, match="refused under convention 'mxnet'"):
        opt.convention = "mxnet"
    assert opt.convention == "guide" and opt.amsgrad
    plain = optimizer.create(name)
    with pytest.raises(ValueError, match="refused under convention 'mxnet'"):
        plain.amsgrad = True
    assert plain.amsgrad is False


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_kernels_step_amsgrad_as_the_reference(backend):
    from toolkit.error_bounds import step_errors
    opt = optimizer.create("adam", learning_rate=0.1, amsgrad=True, convention="pytorch",
                           backend=backend)
    w = np.linspace(-1, 1, 7).astype(np.float32)
    s = opt.create_state(0, w)
    for g in _grads():
        for slot, (err, _, _) in step_errors(opt, 0, w, g.astype(np.float32), s).items():
            assert err <= 1.0, (slot, err)


def test_a_nan_second_moment_propagates_into_the_maximum():
    """torch.maximum propagates NaN (Python's max would keep the old maximum)."""
    opt = optimizer.create("adam", amsgrad=True, convention="pytorch")
    w = np.ones(2)
    s = opt.create_state(0, w)
    opt.update(0, w, np.array([1.0, np.nan]), s)
    assert np.isnan(s[2][1]) and s[2][0] > 0


def _torch_adam(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon,
                amsgrad):
    torch = pytest.importorskip("torch")
    p = torch.nn.Parameter(torch.tensor(w))
    opt = torch.optim.Adam([p], lr=learning_rate, betas=(beta1, beta2), eps=epsilon,
                           weight_decay=wd, amsgrad=amsgrad)

    def step(g):
        g = rescale_grad * np.asarray(g, np.float64)
        if clip_gradient is not None:
            g = np.clip(g, -clip_gradient, clip_gradient)
        p.grad = torch.tensor(g, dtype=p.dtype)
        opt.step()
        return p.detach().numpy().copy()
    return step


def test_the_oracle_holds_it_off_unless_fixed():
    pytest.importorskip("torch")
    r = oracle.verify(_torch_adam, "adam", convention="pytorch", fixed={"amsgrad": True},
                      dtype="float64", examples=20)
    assert r.passed, r.summary
    # an Adam without AMSGrad fails the AMSGrad reference
    plain = lambda w, amsgrad, **h: _torch_adam(w, amsgrad=False, **h)  # noqa: E731
    assert not oracle.verify(plain, "adam", convention="pytorch", fixed={"amsgrad": True},
                             dtype="float64", examples=20).passed
    # MXNet's convention refuses it, by name; identify leaves that convention out
    with pytest.raises(ValueError, match="fixed\\['amsgrad'\\] = True is refused by Adam under "
                                         "convention 'mxnet'"):
        oracle.verify(_torch_adam, "adam", fixed={"amsgrad": True})
    i = oracle.identify(_torch_adam, "adam", fixed={"amsgrad": True}, dtype="float64")
    assert i.convention == "guide" and "mxnet" not in i.matches, i.summary

    # not fixed: the cases do not hold it, so a make_step without it is not handed it
    def no_flag(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon):
        return _torch_adam(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2,
                           epsilon, False)
    r = oracle.verify(no_flag, "adam", convention="pytorch", dtype="float64", examples=10)
    # it runs (torch's float64 lerp is named where its case comes: docs/conformance.md, 3)
    assert r.failure is None and (r.passed or r.explanation.variant == "lerp"), r.summary


def test_toolkit_torch_takes_it_from_a_torch_state_dict_and_gives_it_back():
    torch = pytest.importorskip("torch")
    import toolkit.torch as tt

    def params():
        torch.manual_seed(0)
        return [torch.nn.Parameter(torch.randn(5, dtype=torch.float64))]
    theirs_p = params()
    theirs = torch.optim.Adam(theirs_p, lr=0.01, amsgrad=True)
    for k in range(3):
        theirs_p[0].grad = torch.full((5,), float(3 - k), dtype=torch.float64)
        theirs.step()
    mine_p = params()
    with torch.no_grad():
        mine_p[0].copy_(theirs_p[0])
    mine = tt.Adam(mine_p, lr=0.01, convention="pytorch")   # built without amsgrad
    mine.load_state_dict(theirs.state_dict())
    assert mine.param_groups[0]["amsgrad"] is True
    assert torch.equal(mine.state[mine_p[0]]["max_exp_avg_sq"],
                       theirs.state[theirs_p[0]]["max_exp_avg_sq"])
    back = torch.optim.Adam(params(), lr=0.01)
    back.load_state_dict(mine.state_dict())
    assert back.param_groups[0]["amsgrad"] is True
    # MXNet's convention cannot continue it: refused, the optimizer unchanged
    plain = tt.Adam(params())
    with pytest.raises(ValueError, match="refused under convention 'mxnet'.*unchanged"):
        plain.load_state_dict(theirs.state_dict())
    assert plain.param_groups[0]["amsgrad"] is False


def test_radams_decoupled_weight_decay_crosses_from_a_torch_state_dict():
    """Found by a review: an own keyword of torch's spelling and meaning crosses (RAdam's
    decoupled_weight_decay was dropped, and the next steps left torch's)."""
    torch = pytest.importorskip("torch")
    import toolkit.torch as tt
    p, q, theirs, mine = loaded_from_torch(torch.optim.RAdam, tt.RAdam, weight_decay=0.1,
                                           decoupled_weight_decay=True)
    assert mine.param_groups[0]["decoupled_weight_decay"] is True
    with torch.no_grad():
        q[0].copy_(p[0])
    for k in range(7):
        for x in (p, q):
            x[0].grad = torch.full((3,), 0.5 - 0.1 * k, dtype=torch.float64)
        theirs.step()
        mine.step()
    assert torch.equal(p[0], q[0])
