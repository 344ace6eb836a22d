"""Convention "mxnet" against numbers produced by MXNet 1.9.1 itself (tests/data/mxnet/).

For every recorded call the toolkit (CPU backend) is resynchronised to MXNet's weight and state
before the call, performs the call, and must land within the rounding-error bound of the float64
oracle evaluated on the same inputs, as must MXNet's own result: toolkit, oracle and MXNet agree to
within the arithmetic's rounding. How many values are bit-identical to MXNet is reported.
Hyperparameters pass through dmlc's string parser in MXNet, which is not correctly rounded
(tests/data/mxnet/README.md, item 1), so bit-identity is not asserted.
"""
from __future__ import annotations

import numpy as np
import pytest

import mxnet_data
from reference import OPTIMIZERS
from toolkit import optimizer
from toolkit.error_bounds import _copy_state, normalised_error, reference_call

#: MXNet's family (the optimizers with an "mxnet" convention; MXNet never had the others)
NAMES = [n for n in sorted(OPTIMIZERS) if n != "sgld" and "mxnet" in OPTIMIZERS[n].CONVENTIONS]
CASES = [c for n in NAMES for c in mxnet_data.load_cases(n)]


def _slots(opt, mx_states):
    names = [k for k in mx_states if k != "weight32"]
    return dict(zip(opt.state_slots(), names))


def _set_state(opt, state, mp, values, mx_states):
    master, inner = opt.split_master(state) if mp else (None, state)
    if mp:
        master[...] = mx_states["weight32"]
    for (ours, theirs), a in zip(_slots(opt, mx_states).items(), opt.state_arrays(inner)):
        a[...] = mx_states[theirs]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_toolkit_reproduces_mxnet(case):
    kwargs = dict(case["kwargs"])
    opt = optimizer.create(case["optimizer"], backend="cpu", **kwargs)
    mp = bool(case["multi_precision"])
    weights = {e["index"]: np.array(e["weight"]) for e in case["init"]}
    states = {i: opt.create_state_multi_precision(i, w) for i, w in weights.items()}
    prev = {}
    bits = total = 0
    for k, call in enumerate(case["calls"]):
        i, g = call["index"], call["grad"]
        w, state = weights[i], states[i]
        if i in prev:  # resynchronise to MXNet's result of this index's previous call
            w[...] = prev[i]["weight"]
            _set_state(opt, state, mp, prev[i], prev[i]["states"])
        master, inner = opt.split_master(state) if mp else (w, state)
        dtype = np.float32 if mp else w.dtype
        step = opt.next_step(i, master)
        g_in = g.astype(np.float32) if mp else g
        w_ref, st_ref = reference_call(opt, i, master.copy(), g_in, _copy_state(inner), step,
                                       dtype)
        # MXNet's own values: its hyperparameters go through dmlc's float parser (not correctly
        # rounded), so they are known to float32 accuracy only: bound them at that precision.
        w_mx, st_mx = reference_call(opt, i, master.copy(), g_in, _copy_state(inner), step,
                                     np.float32)
        opt.update_multi_precision(i, w, g, state)
        outs = {"weight": (master, call["states"]["weight32"] if mp else call["weight"], w_ref, w_mx)}
        for (ours, theirs), a in zip(_slots(opt, call["states"]).items(), opt.state_arrays(inner)):
            outs[ours] = (a, call["states"][theirs], st_ref[ours], st_mx[ours])
        if case.get("expect_nonfinite"):
            # MXNet's Adamax yields NaN where u == 0 (0/0); the toolkit leaves the weight unchanged
            bad = ~np.isfinite(call["weight"])
            assert bad.any() and np.isfinite(w).all()
            continue
        for name, (ours, theirs, ref, ref_mx) in outs.items():
            e_ours = normalised_error(ours, ref)[0]
            e_mx = normalised_error(theirs, ref_mx)[0]
            assert e_ours <= 1.0, f"call {k}: toolkit {name} off the oracle by {e_ours:.3g}"
            # MXNet's FTML kernel evaluates (1-beta1^t)/lr and 1-beta2^t in float32 inside the
            # kernel (several roundings), which the bound models as one: its float32 values are
            # reported, not asserted (an open item; the toolkit's own values are asserted above).
            if not (case["optimizer"] == "ftml" and dtype == np.float32):
                assert e_mx <= 1.0, f"call {k}: MXNet {name} off the oracle by {e_mx:.3g}"
            bits += int(np.sum(np.asarray(ours) == np.asarray(theirs)))
            total += np.asarray(ours).size
        if mp:
            assert np.array_equal(w, master.astype(np.float16))
        if case["optimizer"] == "nadam":
            assert opt.m_schedule == pytest.approx(call["extras"]["m_schedule"], rel=1e-15)
        prev[i] = call
    print(f"{case['id']}: {bits}/{total} values bit-identical to MXNet")
