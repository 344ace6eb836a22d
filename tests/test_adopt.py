"""ADOPT's own facts (Taniguchi et al. 2024, Algorithm 2; docs/optimizers/adopt.md): the first
step only initialises the second moment, the clip bound is ``(t-1)^(1/4)``, a weight decay of 0
never reads the weight (as the reference and the authors' code), and ``toolkit.torch.ADOPT``
takes the authors' ``clip_lambda`` only as None or the paper's schedule."""
from __future__ import annotations

import numpy as np
import pytest

from reference import adopt as ref_adopt
from toolkit import optimizer
from toolkit.error_bounds import step_errors


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_the_first_step_only_initialises_the_second_moment(backend):
    opt = optimizer.create("adopt", learning_rate=0.1, wd=0.01, backend=backend)
    w = np.array([1.0, -2.0, 0.5], np.float32)
    g = np.array([0.5, -3.0, 0.0], np.float32)
    s = opt.create_state(0, w)
    opt.update(0, w, g, s)
    coupled = g + np.float32(0.01) * np.array([1.0, -2.0, 0.5], np.float32)
    assert np.array_equal(w, [1.0, -2.0, 0.5]) and not s[0].any()
    np.testing.assert_allclose(s[1], coupled * coupled, rtol=1e-6)


def test_the_clip_bound_grows_as_the_fourth_root_of_the_paper_step():
    assert [ref_adopt.clip_value(t) for t in (2, 3, 17)] == [1.0, 2.0 ** 0.25, 2.0]
    # a gradient 1e6 times the root of v is clipped to 1 at t = 2: m = (1 - beta1)*1
    opt = optimizer.create("adopt", learning_rate=1.0, beta1=0.5, epsilon=1e-12)
    w, s = np.zeros(1), opt.create_state(0, np.zeros(1))
    opt.update(0, w, np.array([1e-6]), s)
    opt.update(0, w, np.array([1.0]), s)
    assert s[0][0] == 0.5 and w[0] == -0.5


def test_a_weight_that_overflowed_does_not_poison_the_gradient_without_weight_decay():
    """float16 without a master copy: v underflows to 0, the normalised gradient 1e5 overflows
    and the weight becomes infinite (the oracle lets it: the reference is beyond the range
    too). With wd 0 the next gradient must not read it (0*inf is NaN): the second moment of
    step 3 is checked and exact."""
    opt = optimizer.create("adopt", learning_rate=1.0, beta1=0.0, beta2=0.0, epsilon=1e-5,
                           use_clipping=False)
    w = -np.ones(11, np.float16)
    s = opt.create_state_multi_precision(0, w)
    for k in range(3):
        g = -np.ones(11, np.float16)
        if k == 0:
            g[-1] = -1e-4
        res = step_errors(opt, 0, w, g, s)
        assert all(err <= 1.0 for err, _, _ in res.values()), (k, res)
    assert np.isinf(w[-1]) or np.isnan(w[-1])
    assert np.array_equal(s[1], np.ones(11, np.float16))


def test_torch_adopt_takes_the_papers_schedule_or_none():
    torch = pytest.importorskip("torch")
    import toolkit.torch as tt
    p = torch.nn.Parameter(torch.ones(3))
    assert tt.ADOPT([p]).param_groups[0]["clip_lambda"] == "step**0.25"
    given = tt.ADOPT([p], 1e-3, (0.9, 0.9999), 1e-6, lambda step: step ** 0.25)
    # a callable that is the paper's schedule (to float32's precision) is kept as its name, so
    # that state_dict() saves (the authors' code keeps it out of the group)
    assert given.param_groups[0]["use_clipping"] is True
    assert given.param_groups[0]["clip_lambda"] == "step**0.25"
    assert tt.ADOPT([p], clip_lambda=lambda s: torch.tensor(float(s)) ** 0.25) \
        .param_groups[0]["clip_lambda"] == "step**0.25"
    import io
    torch.save(given.state_dict(), io.BytesIO())
    assert tt.ADOPT([p], clip_lambda=None).param_groups[0]["use_clipping"] is False
    with pytest.raises(ValueError, match="clip_lambda=.* is refused: ADOPT's kernels clip at "
                                         "the paper's schedule"):
        tt.ADOPT([p], clip_lambda=lambda step: step ** 0.5)
    opt = tt.ADOPT([p], lr=0.1, weight_decay=0.01, decouple=True)
    for _ in range(2):
        p.grad = torch.tensor([0.5, -1.0, 2.0])
        opt.step()
    assert set(opt.state[p]) == {"step", "exp_avg", "exp_avg_sq"}
