"""SparseAdam's own facts (torch.optim.SparseAdam's update; docs/optimizers/sparseadam.md): it is
MXNet's Adam mathematically (epsilon on the uncorrected root) with torch's rounding of the
moments; a row-sparse gradient steps its rows only and an empty one counts the step; weight
decay is refused before anything changes; and ``toolkit.torch.SparseAdam`` is
``torch.optim.SparseAdam`` in a user's embedding training loop: bit for bit in float64 and
float32 (torch's square root taken as IEEE's: tests/test_pytorch_convention.py says why), with
duplicate rows, empty gradients and ``maximize``, its ``step`` an int as torch keeps it, and its
state_dict crossing both ways."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

from reference import adam as ref_adam
from reference import sparseadam as ref_sparseadam
from toolkit import RowSparse, optimizer


def _trajectory(step, w0, grads, **kw):
    w, state = w0, None
    out = []
    for t, g in enumerate(grads, 1):
        if state is None:
            state = {"mean": 0.0 * w0, "var": 0.0 * w0}
        w, state = step(w, g, state, t=t, lr=0.05, **kw)
        out.append(w)
    return out


def test_it_is_mxnets_adam_without_weight_decay_up_to_rounding():
    """The same mathematics as reference.adam's "mxnet" convention (wd 0, hyperparameters in
    double): m + (1-b)(g - m) is b*m + (1-b)*g, and both add epsilon to sqrt(v) with the bias
    corrections in the step size. They differ by rounding only: 1e-13 relative over eight
    steps, where torch.optim.Adam's placement of epsilon (the variant eps_corrected) differs
    by far more."""
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal(64)
    grads = [rng.standard_normal(64) * 10.0 ** rng.uniform(-4, 1, 64) for _ in range(8)]
    hyper = dict(beta1=0.8, beta2=0.95, epsilon=1e-3)
    mine = _trajectory(ref_sparseadam.step, w0, grads, **hyper)
    mxnet = _trajectory(ref_adam.step, w0, grads, convention="mxnet", hyper_f32=False, **hyper)
    for a, b in zip(mine, mxnet):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=0)
    other = _trajectory(ref_sparseadam.step, w0, grads, form="eps_corrected", **hyper)
    assert max(np.max(np.abs(a - b) / np.abs(b)) for a, b in zip(other, mxnet)) > 1e-6


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_rows_absent_keep_weight_and_moments_and_an_empty_gradient_counts(backend):
    opt = optimizer.create("sparseadam", learning_rate=0.1, backend=backend)
    w = np.zeros((4, 2), np.float32)
    s = opt.create_state(0, w)
    opt.update(0, w, RowSparse([1], np.ones((1, 2), np.float32), (4, 2)), s)
    moved = w[1].copy()
    assert not w[[0, 2, 3]].any() and not s[0][[0, 2, 3]].any() and not s[1][[0, 2, 3]].any()
    empty = RowSparse(np.zeros(0, np.int64), np.zeros((0, 2), np.float32), (4, 2))
    opt.update(0, w, empty, s)
    assert opt.num_update == 2 and np.array_equal(w[1], moved)
    # the third step's bias corrections are those of t = 3, as torch's count is
    opt.update(0, w, RowSparse([1], np.ones((1, 2), np.float32), (4, 2)), s)
    twin = optimizer.create("sparseadam", learning_rate=0.1, backend=backend)
    v = np.zeros((1, 2), np.float32)
    sv = twin.create_state(0, v)
    for g in (np.ones((1, 2), np.float32), None, np.ones((1, 2), np.float32)):
        twin.update(0, v, g if g is not None else RowSparse(
            np.zeros(0, np.int64), np.zeros((0, 2), np.float32), (1, 2)), sv)
    assert np.array_equal(w[1], v[0])


def test_weight_decay_is_refused_before_anything_changes():
    opt = optimizer.create("sparseadam", learning_rate=0.1, wd=0.01)
    w = np.ones(3, np.float32)
    s = opt.create_state(0, w)
    with pytest.raises(ValueError, match="SparseAdam has no weight decay"):
        opt.update(0, w, np.ones(3, np.float32), s)
    assert np.array_equal(w, np.ones(3)) and not s[0].any() and not s[1].any()
    assert opt.num_update == 0


# ------------------------------------------------------------------------------------------------
# toolkit.torch.SparseAdam against torch.optim.SparseAdam
# ------------------------------------------------------------------------------------------------
torch = pytest.importorskip("torch", reason="toolkit.torch needs PyTorch")

import toolkit.torch as tt  # noqa: E402
from test_pytorch_convention import IEEESqrt  # noqa: E402


class Model(torch.nn.Module):
    """An embedding bag a user trains with SparseAdam: sparse gradients, rows repeated within a
    batch (torch's backward leaves them uncoalesced)."""

    def __init__(self, dtype):
        super().__init__()
        torch.manual_seed(3)
        self.emb = torch.nn.Embedding(40, 6, sparse=True).to(dtype)

    def forward(self, idx):
        return self.emb(idx).sum(dim=1)


def _batches(n, dtype):
    g = torch.Generator().manual_seed(11)
    out = []
    for k in range(n):
        idx = torch.randint(0, 40, (5, 3), generator=g)
        idx[0, :] = idx[1, 0]   # a row several times in one batch
        target = torch.randn(5, 6, generator=g, dtype=dtype)
        out.append((idx, target))
    return out


def _train(opt, model, batches, empty_at=()):
    for k, (idx, target) in enumerate(batches):
        opt.zero_grad()
        if k in empty_at:  # a parameter whose gradient holds no row this step
            model.emb.weight.grad = torch.sparse_coo_tensor(
                torch.zeros((1, 0), dtype=torch.long),
                torch.zeros((0, 6), dtype=model.emb.weight.dtype), (40, 6))
        else:
            (model(idx) - target).square().sum().backward()
        opt.step()


@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_an_embedding_training_loop_is_torchs_bit_for_bit(dtype, maximize):
    kw = dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6, maximize=maximize)
    batches = _batches(12, dtype)
    runs = []
    for make in (torch.optim.SparseAdam, tt.SparseAdam):
        model = Model(dtype)
        opt = make(model.parameters(), **kw)
        with IEEESqrt():
            _train(opt, model, batches, empty_at=(4, 5))
        runs.append((model.emb.weight.detach().clone(), opt.state[model.emb.weight]))
    (w_torch, s_torch), (w_mine, s_mine) = runs
    assert torch.equal(w_torch, w_mine)
    assert torch.equal(s_torch["exp_avg"], s_mine["exp_avg"])
    assert torch.equal(s_torch["exp_avg_sq"], s_mine["exp_avg_sq"])
    assert s_torch["step"] == s_mine["step"] == 12
    assert type(s_mine["step"]) is int  # torch's SparseAdam keeps an int


def _saved(sd):
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def test_a_run_crosses_to_torch_and_back_and_goes_on_as_torchs():
    """Three steps in one, the state_dict into the other (torch.load(weights_only=True)), then
    three more: every crossing ends with torch's own run's bits (float64, IEEE root)."""
    dtype = torch.float64
    batches = _batches(9, dtype)
    reference = Model(dtype)
    ref_opt = torch.optim.SparseAdam(reference.parameters(), lr=0.02)
    with IEEESqrt():
        _train(ref_opt, reference, batches)
    for first, second in ((tt.SparseAdam, torch.optim.SparseAdam),
                          (torch.optim.SparseAdam, tt.SparseAdam)):
        a = Model(dtype)
        opt_a = first(a.parameters(), lr=0.02)
        with IEEESqrt():
            _train(opt_a, a, batches[:3])
        b = Model(dtype)
        b.load_state_dict(a.state_dict())
        opt_b = second(b.parameters(), lr=0.5)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            opt_b.load_state_dict(_saved(opt_a.state_dict()))
        assert opt_b.param_groups[0]["lr"] == 0.02
        assert type(opt_b.state[b.emb.weight]["step"]) is int
        with IEEESqrt():
            _train(opt_b, b, batches[3:])
        assert torch.equal(b.emb.weight, reference.emb.weight), (first, second)


def test_a_dense_gradient_is_every_row_where_torch_refuses_it():
    """torch.optim.SparseAdam raises on a dense gradient; toolkit.torch takes it as the sparse
    gradient holding every row (the documented difference)."""
    w0 = torch.randn(5, 3, dtype=torch.float64)
    g = torch.randn(5, 3, dtype=torch.float64)
    p = torch.nn.Parameter(w0.clone())
    theirs = torch.optim.SparseAdam([p], lr=0.1)
    p.grad = g.clone()
    with pytest.raises(RuntimeError, match="does not support dense gradients"):
        theirs.step()
    dense, sparse = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    a, b = tt.SparseAdam([dense], lr=0.1), tt.SparseAdam([sparse], lr=0.1)
    dense.grad = g.clone()
    sparse.grad = torch.sparse_coo_tensor(torch.arange(5)[None], g.clone(), (5, 3))
    a.step()
    b.step()
    assert torch.equal(dense, sparse)


def test_epsilon_zero_and_weight_decay_are_refused_as_torch_refuses_them():
    """eps > 0, as torch.optim.SparseAdam checks (sqrt(v) + 0 divides by 0 on a row that saw
    only zeros); weight_decay, a keyword torch's SparseAdam does not have, is refused with the
    reason, not with MXNet's name for it."""
    p = torch.nn.Parameter(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="epsilon"):
        tt.SparseAdam([p], eps=0.0)
    with pytest.raises(ValueError, match="epsilon"):
        optimizer.create("sparseadam", epsilon=0.0)
    with pytest.raises(TypeError, match="SparseAdam takes no weight_decay: SparseAdam has no "
                                        "weight decay"):
        tt.SparseAdam([p], weight_decay=0.1)
    with pytest.raises(TypeError, match="takes no weight_decay"):
        optimizer.create("sparseadam", weight_decay=0.1)


def test_a_multi_precision_run_through_torch_continues_from_torchs_weights():
    """float16 parameters with a float32 master (multi_precision=True): torch.optim.SparseAdam
    carries the master copy in the state_dict without stepping it (and casts it to float16 on
    loading); back in the toolkit, the run continues from torch's weights, the master made
    afresh from them, not from the stale copy."""
    dtype = torch.float16
    batches = _batches(6, dtype)
    a = Model(dtype)
    mine = tt.SparseAdam(a.parameters(), lr=0.05, multi_precision=True)
    _train(mine, a, batches[:2])
    theirs = torch.optim.SparseAdam(a.parameters(), lr=0.05)
    theirs.load_state_dict(_saved(mine.state_dict()))
    _train(theirs, a, batches[2:4])
    after_torch = a.emb.weight.detach().clone()
    back = tt.SparseAdam(a.parameters(), lr=0.05, multi_precision=True)
    back.load_state_dict(_saved(theirs.state_dict()))
    master = back.state[a.emb.weight]["weight32"]
    assert torch.equal(master, after_torch.float())
    _train(back, a, batches[4:])
    # only the rows the last two batches hold moved, from torch's weights
    rows = torch.unique(torch.cat([b[0].flatten() for b in batches[4:]]))
    untouched = torch.ones(40, dtype=torch.bool)
    untouched[rows] = False
    assert torch.equal(a.emb.weight[untouched], after_torch[untouched])
    assert not torch.equal(a.emb.weight[rows], after_torch[rows])
