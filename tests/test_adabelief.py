"""AdaBelief's own facts (Zhuang et al. 2020, Algorithm 2; docs/optimizers/adabelief.md): the
first step is ``-lr*sign(g)/beta1``, the second moment holds epsilon summed with decay, the
authors' rectified form waits for ``rho_t >= 5``, ``toolkit.torch.AdaBelief`` takes the authors'
keywords and defaults, and equals their code bit for bit in float64 where it is installed."""
from __future__ import annotations

import contextlib
import importlib.util
import io

import numpy as np
import pytest

from reference import adabelief as ref
from reference import radam as ref_radam
from toolkit import optimizer


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_the_first_step_is_the_sign_over_beta1(backend):
    """t = 1: m_hat = g and s_hat = beta1^2*g^2 (+ epsilon/(1 - beta2)), so the step is
    -lr*sign(g)/beta1 for epsilon far below |g|: the deviation from this step's mean."""
    opt = optimizer.create("adabelief", learning_rate=0.1, beta1=0.5, backend=backend)
    w = np.zeros(3)
    s = opt.create_state(0, w)
    g = np.array([2.0, -3.0, 1e-3])
    opt.update(0, w, g, s)
    np.testing.assert_allclose(w[:2], [-0.2, 0.2], rtol=1e-12)
    # exactly: s = (1 - beta2)*(beta1*g)^2 + eps, s_hat = s/(1 - beta2), eps again outside
    exact = -0.1 * g / (np.sqrt((1e-3 * (0.5 * g) ** 2 + 1e-16) / 1e-3) + 1e-16)
    np.testing.assert_allclose(w, exact, rtol=1e-12)
    assert exact[2] != -0.2  # epsilon/(1 - beta2) shows at |g| = 1e-3


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_the_second_moment_sums_epsilon_with_decay(backend):
    """A zero gradient leaves the deviation 0: s is epsilon*(1 - beta2^t)/(1 - beta2), and the
    weight does not move."""
    eps, beta2 = 1e-3, 0.5
    opt = optimizer.create("adabelief", epsilon=eps, beta2=beta2, backend=backend)
    w = np.ones(2)
    s = opt.create_state(0, w)
    for t in range(1, 5):
        opt.update(0, w, np.zeros(2), s)
        np.testing.assert_allclose(s[1], eps * (1 - beta2 ** t) / (1 - beta2), rtol=1e-14)
    assert np.array_equal(w, [1.0, 1.0]) and not s[0].any()


def _first_rectified(beta2):
    return next(t for t in range(1, 100) if ref_radam.rho(beta2, t)[1] >= ref.RECTIFY_THRESHOLD)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_the_rectified_form_waits_for_rho_5(backend):
    """rectify: momentum steps (degenerated_to_sgd) or none before rho_t >= 5 (t = 6 at beta2
    0.999), the rectified adaptive step from there; the moments move throughout."""
    assert _first_rectified(0.999) == 6
    g = np.array([0.5, -2.0])
    moved = {}
    for sgd in (True, False):
        opt = optimizer.create("adabelief", learning_rate=0.1, rectify=True,
                               degenerated_to_sgd=sgd, backend=backend)
        w = np.ones(2)
        s = opt.create_state(0, w)
        path = []
        for _ in range(6):
            opt.update(0, w, g, s)
            path.append(w.copy())
        moved[sgd] = path
        assert s[0].any() and s[1].any()
    # momentum steps: w - lr*m_hat, and m_hat = g for a constant gradient
    np.testing.assert_allclose(moved[True][0], 1 - 0.1 * g, rtol=1e-12)
    np.testing.assert_allclose(moved[True][4], 1 - 0.5 * g, rtol=1e-12)
    assert all(np.array_equal(p, [1.0, 1.0]) for p in moved[False][:5])
    assert not np.array_equal(moved[False][5], [1.0, 1.0])


def test_toolkit_torch_takes_the_authors_keywords_and_defaults():
    torch = pytest.importorskip("torch")
    import toolkit.torch as tt
    p = torch.nn.Parameter(torch.ones(3))
    g = tt.AdaBelief([p]).param_groups[0]
    # the authors' defaults, where toolkit.optimizer's are the paper's
    assert (g["weight_decouple"], g["rectify"], g["eps"]) == (True, True, 1e-16)
    mine = optimizer.create("adabelief")
    assert (mine.weight_decouple, mine.rectify) == (False, False)
    # the authors' positional order: lr, betas, eps, weight_decay, amsgrad, weight_decouple...
    g = tt.AdaBelief([p], 1e-2, (0.8, 0.99), 1e-8, 0.1, False, False).param_groups[0]
    assert (g["lr"], g["beta1"], g["beta2"], g["epsilon"], g["wd"], g["weight_decouple"]) == \
        (1e-2, 0.8, 0.99, 1e-8, 0.1, False)
    assert tt.AdaBelief([p], print_change_log=False).param_groups[0]["print_change_log"] is False
    with pytest.raises(ValueError, match="amsgrad=True is refused: the toolkit's AdaBelief "
                                         "keeps no running maximum"):
        tt.AdaBelief([p], amsgrad=True)
    opt = tt.AdaBelief([p], lr=0.1, weight_decay=0.01)
    for _ in range(2):
        p.grad = torch.tensor([0.5, -1.0, 2.0])
        opt.step()
    assert set(opt.state[p]) == {"step", "exp_avg", "exp_avg_var"}
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    again = tt.AdaBelief([torch.nn.Parameter(torch.ones(3))])
    again.load_state_dict(torch.load(buf, weights_only=True))
    assert again.param_groups[0]["wd"] == 0.01


OPTIONS = [{}, {"rectify": False}, {"weight_decouple": False, "weight_decay": 0.01},
           {"weight_decay": 0.1}, {"weight_decay": 0.1, "fixed_decay": True},
           {"degenerated_to_sgd": False}, {"eps": 1e-8, "betas": (0.5, 0.99)}]


@pytest.mark.skipif(importlib.util.find_spec("adabelief_pytorch") is None or
                    importlib.util.find_spec("torch") is None,
                    reason="adabelief-pytorch (the authors' AdaBelief) or torch not installed: "
                           "pip install torch adabelief-pytorch==0.2.1 to compare with it")
@pytest.mark.parametrize("options", OPTIONS, ids=[str(o) for o in OPTIONS])
def test_toolkit_torch_equals_the_authors_code_in_float64(options):
    import torch
    from adabelief_pytorch import AdaBelief as Authors

    import toolkit.torch as tt
    gen = torch.Generator().manual_seed(0)
    theirs = [torch.randn(40, dtype=torch.float64, generator=gen).requires_grad_()
              for _ in range(2)]
    mine = [t.detach().clone().requires_grad_() for t in theirs]
    with contextlib.redirect_stdout(io.StringIO()):  # their code prints at construction
        a = Authors(theirs, lr=0.01, print_change_log=False, **options)
    b = tt.AdaBelief(mine, lr=0.01, **options)
    for _ in range(12):  # the rectified step begins at t = 6
        for x, y in zip(theirs, mine):
            grad = torch.randn(40, dtype=torch.float64, generator=gen)
            x.grad, y.grad = grad.clone(), grad.clone()
        a.step()
        b.step()
    for x, y in zip(theirs, mine):
        assert torch.equal(x, y)
        assert torch.equal(a.state[x]["exp_avg"], b.state[y]["exp_avg"])
        assert torch.equal(a.state[x]["exp_avg_var"], b.state[y]["exp_avg_var"])


def test_amsgrad_is_refused_for_what_it_is():
    """AdaBelief keeps no running maximum; the message says so (not that MXNet lacks it)."""
    with pytest.raises(TypeError, match="AdaBelief takes no amsgrad: it keeps no running "
                                        "maximum of a second moment"):
        optimizer.create("adabelief", amsgrad=True)
