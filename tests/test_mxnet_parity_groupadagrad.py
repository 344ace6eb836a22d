"""``groupadagrad`` (convention "mxnet") replayed against MXNet 1.9.1's own numbers, both paths:

* ``tests/data/mxnet/groupadagrad.json``: ``mx.optimizer.create('groupadagrad')`` with dense
  gradients (float32, float64 with a float64 history, float16 with multi_precision; rescaling,
  clipping on, off and at 0, several eps, a 1-column and a 128-column weight, exact zero rows);
* ``tests/data/mxnet/groupadagrad_rows.json``: the operator ``mx.nd.contrib.group_adagrad_update``
  with row-sparse gradients (the lazy update of the rows present), float32 and float64;

both written by ``tests/data/mxnet/generate_more.py``. Per call the toolkit is resynchronised to
MXNet's weight and history first. The one known source of difference is the row's sum of
squares: MXNet sums in the weight's dtype (a compensated, Kahan sum in the dense path's
``mean``; a plain running sum in the operator), the toolkit in float64 in a fixed order, rounded
to the dtype (docs/optimizers/groupadagrad.md). Each row whose sum MXNet's order reproduces
(:func:`mxnet_dense_sum`, :func:`mxnet_operator_sum`, emulations checked against MXNet itself)
must come out bit-identical, weight and history; every other row must lie within the oracle's
rounding-error bound, and so must MXNet's own result. The hyperparameters of these cases are
literals dmlc-core's parser reads exactly (tests/data/mxnet/README.md, item 1).
"""
from __future__ import annotations

import numpy as np
import pytest

import mxnet_data
from toolkit import optimizer
from toolkit.backends import cpu, launches
from toolkit.error_bounds import normalised_error, reference_call

DENSE = mxnet_data.load_cases("groupadagrad")
ROWS = mxnet_data.load_cases("groupadagrad_rows")


def mxnet_dense_sum(p):
    """The row sums of ``p*p`` as MXNet's ``mean`` forms them before dividing: a compensated
    (Kahan) sum in ``p``'s dtype, element by element in column order."""
    T = p.dtype.type
    out = []
    for row in p * p:
        s = c = T(0)
        for v in row:
            y = T(v - c)
            t = T(s + y)
            c = T(T(t - s) - y)
            s = t
        out.append(s)
    return np.array(out, p.dtype)


def mxnet_operator_sum(p):
    """The row sums of ``p*p`` as ``group_adagrad_update`` forms them: a running sum in ``p``'s
    dtype (optimizer_op-inl.h:121-125 at tag 1.9.1)."""
    T = p.dtype.type
    out = []
    for row in p * p:
        s = T(0)
        for v in row:
            s = T(s + v)
        out.append(s)
    return np.array(out, p.dtype)


def toolkit_sum(p):
    """The toolkit's row sums (toolkit/backends/rows.py): float64, four running sums (column
    ``j`` into sum ``j % 4``) added as ``(s0 + s1) + (s2 + s3)``, rounded to ``p``'s dtype."""
    x = p.astype(np.float64) ** 2
    n = x.shape[1]
    sums = np.zeros((x.shape[0], 4))
    for j in range(4 * (n // 4)):
        sums[:, j % 4] += x[:, j]
    for j in range(4 * (n // 4), n):
        sums[:, 0] += x[:, j]
    return ((sums[:, 0] + sums[:, 1]) + (sums[:, 2] + sums[:, 3])).astype(p.dtype)


def preprocessed(grad, kw, dtype, operator):
    """``clip(grad*rescale_grad, c)`` in ``dtype`` as each MXNet path forms it (the dense path
    clips whenever ``clip_gradient`` is not None, the operator only when it is truthy; the bounds
    and, in the operator, ``rescale_grad`` are float32)."""
    T = np.dtype(dtype).type
    rs = kw.get("rescale_grad", 1.0)
    p = grad.astype(dtype) * T(np.float32(rs) if operator else rs)
    c = kw.get("clip_gradient")
    if (c if operator else c is not None):
        b = T(np.float32(c))
        p = np.minimum(np.maximum(p, -b), b)
    return p.astype(dtype)


def _check_rows(name, ours, theirs, same, ref, ref_mx, rows, differing):
    """Rows of ``rows`` whose sums agree: bit-identical; the others: within the bound."""
    assert normalised_error(ours[rows], _take(ref, rows))[0] <= 1.0, name
    for k, r in enumerate(rows):
        if same[k]:
            assert np.array_equal(ours[r], theirs[r]), (name, r, ours[r], theirs[r])
        elif not np.array_equal(ours[r], theirs[r]):
            differing.append((name, int(r)))
    assert normalised_error(theirs[rows], _take(ref_mx, rows))[0] <= 1.0, name


def _take(tracked, rows):
    """Rows of a Tracked value (the oracle's result with its bound)."""
    from reference.error_bound import Tracked
    return Tracked(tracked.value[rows], tracked.err[rows], tracked.tie[rows], u=tracked.u,
                   tiny=tracked.tiny)


@pytest.mark.parametrize("case", DENSE, ids=[c["id"] for c in DENSE])
def test_dense_path_reproduces_mxnet_bit_for_bit_where_the_row_sums_agree(case):
    kw = case["kwargs"]
    mp = case["multi_precision"]
    opt = optimizer.create("groupadagrad", backend="cpu", **kw)
    weights = {e["index"]: np.array(e["weight"]) for e in case["init"]}
    states = {i: opt.create_state_multi_precision(i, w) for i, w in weights.items()}
    prev, differing, agreeing = {}, [], 0
    for call in case["calls"]:
        i, g = call["index"], call["grad"]
        w, state = weights[i], states[i]
        master, hist = opt.split_master(state) if mp else (w, state)
        if i in prev:
            w[...] = prev[i]["weight"]
            hist[...] = prev[i]["states"]["history"]
            if mp:
                master[...] = prev[i]["states"]["weight32"]
        dtype = master.dtype
        p = preprocessed(g, kw, dtype, operator=False)
        same = mxnet_dense_sum(p) == toolkit_sum(p)
        agreeing += int(same.sum())
        step = opt.next_step(i, master)
        g_in = g.astype(dtype)
        w_ref, st_ref = reference_call(opt, i, master.copy(), g_in, hist.copy(), step, dtype)
        # MXNet's own results: bounded at float32 precision where its scalars are float32
        w_mx, st_mx = reference_call(opt, i, master.copy(), g_in, hist.copy(), step, np.float32)
        opt.update_multi_precision(i, w, g, state)
        rows = np.arange(master.shape[0])
        theirs_w = call["states"]["weight32"] if mp else call["weight"]
        _check_rows("weight", master, theirs_w, same, w_ref, w_mx, rows, differing)
        _check_rows("history", hist, call["states"]["history"], same, st_ref["history"],
                    st_mx["history"], rows, differing)
        if mp:  # the float16 weight is the master rounded to nearest, as MXNet's cast
            assert np.array_equal(w, call["weight"])
        prev[i] = call
    assert agreeing > 0


@pytest.mark.parametrize("case", ROWS, ids=[c["id"] for c in ROWS])
def test_row_sparse_path_reproduces_mxnet_bit_for_bit_where_the_row_sums_agree(case):
    """``_rows_step`` (the row kernel a lazy row-sparse update runs), under the row-sparse
    numerics: only the rows present move; they match the operator."""
    kw = case["kwargs"]
    opt = optimizer.create("groupadagrad", backend="cpu", **kw)
    w = np.array(case["init"][0]["weight"])
    hist = opt.create_state(0, w)
    differing = []
    for call in case["calls"]:
        rows = np.array(call["rows"], np.int64)
        values = call["grad"]
        before_w, before_h = w.copy(), hist.copy()
        p = preprocessed(values, kw, w.dtype, operator=True)
        same = mxnet_operator_sum(p) == toolkit_sum(p)
        t, lr, wd = opt.next_step(0)[:3]
        with opt._row_sparse_step("lazy"):
            step = opt.next_step(0, w[rows])
            w_ref, st_ref = reference_call(opt, 0, w[rows], values, hist[rows], step, w.dtype)
            w_mx, st_mx = reference_call(opt, 0, w[rows], values, hist[rows], step, np.float32)
            launches.run(opt._rows_step(0, w, values, rows, hist, t, lr, wd), cpu.LAUNCHER)
        opt._commit_count(0, t)
        absent = np.setdiff1d(np.arange(w.shape[0]), rows)
        assert np.array_equal(w[absent], before_w[absent])
        assert np.array_equal(hist[absent], before_h[absent])
        assert np.array_equal(call["weight"][absent], before_w[absent])  # MXNet's too
        for name, ours, theirs, ref, ref_mx in (
                ("weight", w[rows], call["weight"][rows], w_ref, w_mx),
                ("history", hist[rows], call["states"]["history"][rows], st_ref["history"],
                 st_mx["history"])):
            _check_rows(name, ours, theirs, same, ref, ref_mx, np.arange(len(rows)), differing)
        w[...] = call["weight"]
        hist[...] = call["states"]["history"]


def test_the_recorded_facts_hold_in_the_data():
    """What the files show about MXNet 1.9.1 (docs/optimizers/groupadagrad.md): ``clip_gradient
    =0`` clips every dense gradient to zero (nothing moves) but does not clip in the operator;
    a gradient row of exact zeros leaves that row's weight and history unchanged."""
    clip0 = [c for c in DENSE if c["kwargs"].get("clip_gradient") == 0.0]
    assert clip0
    for case in clip0:
        w0 = {e["index"]: e["weight"] for e in case["init"]}
        for call in case["calls"]:
            assert np.array_equal(call["weight"], w0[call["index"]])
            assert not call["states"]["history"].any()
    op0 = [c for c in ROWS if c["kwargs"].get("clip_gradient") == 0.0]
    assert op0 and all(call["states"]["history"][call["rows"]].any()
                       for c in op0 for call in c["calls"] if call["rows"])
    allon = [c for c in DENSE if c["id"].startswith("groupadagrad-allon-")]
    assert len(allon) == 2
    for case in allon:                              # rows zeroed by the generator: (1, 0), (3, 4)
        for k, r in ((1, 0), (3, 4)):
            call = case["calls"][k]
            i = call["index"]
            earlier = [c for c in case["calls"][:k] if c["index"] == i]
            w_before = earlier[-1]["weight"] if earlier else \
                next(e["weight"] for e in case["init"] if e["index"] == i)
            h_before = earlier[-1]["states"]["history"][r] if earlier else 0.0
            assert not call["grad"][r].any()
            assert np.array_equal(call["weight"][r], w_before[r])
            assert np.array_equal(call["states"]["history"][r], np.broadcast_to(h_before, (1,)))
    assert {c["dtype"] for c in DENSE} == {"float16", "float32", "float64"}
    assert {c["dtype"] for c in ROWS} == {"float32", "float64"}
    assert mxnet_data.load_file("groupadagrad")["provenance"]["generator"] == \
        "tests/data/mxnet/generate_more.py"
