"""``state_dtype`` in ``toolkit.torch`` (docs/state-dtype.md, "toolkit.torch"): a step equals
``toolkit.optimizer``'s update with the same held states, bit for bit and code for code
(int8, bfloat16 to nearest and stochastic; a channels_last weight, a bfloat16 weight with its
float32 master); ``opt.state[p]`` shows the held arrays themselves; ``state_dict()`` carries
codes, block maxima and map, loads with ``weights_only=True`` and continues bit for bit; a bad
map, non-finite block maxima or codes of the wrong length are refused with nothing changed;
``convert_states=True`` converts float32 moments to int8 and back; a ``torch.optim`` state_dict
loads into held states; what cannot be held is refused before anything is written."""
from __future__ import annotations

import copy
import io
import os
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed")
import toolkit.torch as tt  # noqa: E402
from toolkit import optimizer  # noqa: E402
from toolkit.backends import lowbit  # noqa: E402

#: (registry name, MXNet keywords, state_dtype, state_rounding): each optimizer held in the
#: kernels' three forms at least once
CASES = [  # checked against the registry by test_cases_name_optimizers_with_moments
    ("adam", dict(learning_rate=0.01, wd=0.01), "int8", "nearest"),
    ("adam", dict(learning_rate=0.01), "bfloat16", "stochastic"),
    ("adamw", dict(learning_rate=0.01, wd=0.1, convention="pytorch"), "bfloat16", "nearest"),
    ("sgd", dict(learning_rate=0.1, momentum=0.9), "int8", "nearest"),
    ("rmsprop", dict(learning_rate=0.01, centered=True), "int8", "nearest"),
    ("lion", dict(learning_rate=0.001, wd=0.1), "int8", "nearest"),
]


def _params(seed=0):
    """A matrix of 8192 elements (int8 blocks), a vector of 100 (below INT8_MIN_SIZE: the
    default state) and a channels_last 4-d weight of 8192 (blocks cut in memory order)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(64, 128, generator=g)),
            torch.nn.Parameter(torch.randn(100, generator=g)),
            torch.nn.Parameter(torch.randn(8, 16, 8, 8, generator=g).to(
                memory_format=torch.channels_last))]


def _grads(params, step):
    g = torch.Generator().manual_seed(1000 + step)
    return [torch.randn(p.shape, generator=g).to(memory_format=torch.channels_last)
            if p.dim() == 4 else torch.randn(p.shape, generator=g) for p in params]


def _memory(t):
    """A tensor's elements in memory order as a C-ordered numpy array (a copy)."""
    if t.dim() == 4 and not t.is_contiguous():
        t = t.permute(0, 2, 3, 1)
    return t.detach().contiguous().numpy().copy()


def _train(opt, params, steps, start=0):
    for s in range(start, start + steps):
        for p, g in zip(params, _grads(params, s)):
            p.grad = g
        opt.step()


def _saved(sd):
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def test_cases_name_optimizers_with_moments():
    from toolkit.optimizers.held import held_optimizers
    assert {c[0] for c in CASES} <= set(held_optimizers())


@pytest.mark.parametrize("name,kw,state_dtype,rounding", CASES,
                         ids=[f"{c[0]}-{c[2]}-{c[3]}" for c in CASES])
def test_steps_equal_the_optimizers_update(name, kw, state_dtype, rounding):
    params = _params()
    held = dict(state_dtype=state_dtype, state_rounding=rounding, state_seed=7)
    opt = tt.create(name, params, **kw, **held)
    ref = optimizer.create(name, **kw, **held)
    weights = [_memory(p) for p in params]
    states = [ref.create_state(k, w) for k, w in enumerate(weights)]
    for s in range(4):
        for k, g in enumerate(_grads(params, s)):
            ref.update(k, weights[k], _memory(g), states[k])
        _train(opt, params, 1, start=s)
    for k, p in enumerate(params):
        assert _memory(p).tobytes() == weights[k].tobytes(), f"weight {k}"
        bound = opt._bindings[p].toolkit_state
        for mine, theirs in zip(ref.state_arrays(bound), ref.state_arrays(states[k])):
            if type(theirs) is lowbit.Quantized:
                assert np.array_equal(mine.codes, theirs.codes)
                assert mine.absmax.tobytes() == theirs.absmax.tobytes()
            else:
                assert np.asarray(mine).tobytes() == np.asarray(theirs).tobytes()


def test_a_group_steps_its_members_together(monkeypatch):
    """A group's step plans every member, then checks and runs them in one held call: one
    parallel loop over the held members' blocks (the 8192-element and the channels_last
    weights), one over the small member's default state; the numbers are each member's own
    update's (the test above)."""
    from toolkit.backends import cpu_lowbit
    seen = []
    prepare, run = cpu_lowbit.prepare_held_many, cpu_lowbit.HeldCall.run

    def counted_prepare(factory, steps, names=None):
        seen.append(("steps", len(steps)))
        return prepare(factory, steps, names)

    def counted_run(call):
        calls = run(call)
        seen.append(("kernel calls", calls))
        return calls
    monkeypatch.setattr(cpu_lowbit, "prepare_held_many", counted_prepare)
    monkeypatch.setattr(cpu_lowbit.HeldCall, "run", counted_run)
    params = _params()
    _train(tt.Adam(params, lr=0.01, state_dtype="int8"), params, 2)
    assert seen == [("steps", 3), ("kernel calls", 2)] * 2


@pytest.mark.parametrize("name", ["adam", "nadam"])
def test_members_at_different_counts_step_as_their_own_updates(name):
    """A parameter without a gradient in one step falls behind (its count and rate differ from
    the others'): each member takes the row of its own count (Adam: one row per distinct
    count, planned at once; Nadam: each member's kernel step in index order, its schedule
    advancing per index), equal to ``toolkit.optimizer``'s update bit for bit and code for
    code."""
    params = _params()
    kw = dict(learning_rate=0.01, wd=0.01, state_dtype="int8")
    opt = tt.create(name, params, **kw)
    ref = optimizer.create(name, **kw)
    weights = [_memory(p) for p in params]
    states = [ref.create_state(k, w) for k, w in enumerate(weights)]
    for s in range(4):
        grads = _grads(params, s)
        for k, (p, g) in enumerate(zip(params, grads)):
            p.grad = None if (s == 1 and k == 2) else g
            if p.grad is not None:
                ref.update(k, weights[k], _memory(g), states[k])
        opt.step()
    for k, p in enumerate(params):
        assert _memory(p).tobytes() == weights[k].tobytes(), f"weight {k}"
        for mine, theirs in zip(ref.state_arrays(opt._bindings[p].toolkit_state),
                                ref.state_arrays(states[k])):
            if type(theirs) is lowbit.Quantized:
                assert np.array_equal(mine.codes, theirs.codes)
                assert mine.absmax.tobytes() == theirs.absmax.tobytes()
            else:
                assert np.asarray(mine).tobytes() == np.asarray(theirs).tobytes()


def test_parameters_sharing_memory_are_refused_with_nothing_changed():
    """The group's launches run in one parallel call, so what one parameter writes may not be
    another's weight, state or gradient: one tensor given twice (torch only warns), two views
    of one buffer, and a gradient that is another parameter's weight are refused before any
    count, weight or state changes, naming the parameters."""
    big = torch.randn(64, 128)
    twice = torch.nn.Parameter(big.clone())
    buffer = torch.randn(2 * 8192)
    views = [torch.nn.Parameter(buffer[:8192]), torch.nn.Parameter(buffer[4096:12288])]
    for v in views:
        v.grad = torch.randn(8192)
    p, q = torch.nn.Parameter(big.clone()), torch.nn.Parameter(big.clone() + 1)
    p.grad, q.grad = torch.randn(64, 128), p.detach()
    twice.grad = torch.randn(64, 128)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's warning of a duplicate parameter
        cases = [(tt.Adam([twice, twice], lr=0.01, state_dtype="int8"), [twice],
                  "parameter 0 and parameter 1 write the same memory"),
                 (tt.Adam(views, lr=0.01, state_dtype="int8"), views,
                  "parameter 0 and parameter 1 write the same memory"),
                 (tt.Adam([p, q], lr=0.01, state_dtype="int8"), [p, q],
                  "the gradient of parameter 1 shares memory with a weight or a state slot "
                  "that parameter 0 writes")]
    for opt, params, message in cases:
        before = [t.detach().clone() for t in params]
        with pytest.raises(ValueError, match=message):
            opt.step()
        assert all(torch.equal(t.detach(), b) for t, b in zip(params, before))
        assert opt._inners[0].num_update == 0
        assert all(int(opt.state[t].get("step", 0)) == 0 for t in params)  # none counted


def test_opt_state_shows_the_held_arrays():
    params = _params()
    opt = tt.Adam(params, lr=0.01, state_dtype="int8")
    _train(opt, params, 2)
    big, small, cl = (opt.state[p] for p in params)
    assert sorted(big) == ["exp_avg_absmax", "exp_avg_codes", "exp_avg_sq_absmax",
                           "exp_avg_sq_codes", "step"]
    assert big["exp_avg_codes"].dtype == torch.uint8 and big["exp_avg_codes"].shape == (64, 128)
    assert big["exp_avg_absmax"].dtype == torch.float32 and big["exp_avg_absmax"].shape == (32,)
    assert sorted(small) == ["exp_avg", "exp_avg_sq", "step"]  # 100 elements: float32
    assert small["exp_avg"].dtype == torch.float32
    # channels_last: the codes are shown in the weight's logical shape and strides
    assert cl["exp_avg_codes"].shape == params[2].shape
    assert cl["exp_avg_codes"].stride() == params[2].stride()
    # views of what the kernel steps: the codes it holds are the ones shown
    q = opt._bindings[params[0]].toolkit_state[0]
    assert big["exp_avg_codes"].data_ptr() == q.codes.ctypes.data
    assert big["exp_avg_absmax"].data_ptr() == q.absmax.ctypes.data
    bf = tt.Adam(_params(), lr=0.01, state_dtype="bfloat16")
    _train(bf, bf.param_groups[0]["params"], 1)
    assert bf.state[bf.param_groups[0]["params"][0]]["exp_avg"].dtype == torch.bfloat16


def test_bfloat16_weights_step_through_their_master():
    g0 = torch.Generator().manual_seed(3)
    p = torch.nn.Parameter(torch.randn(64, 96, generator=g0).bfloat16())
    opt = tt.Adam([p], lr=0.01, multi_precision=True, state_dtype="int8")
    ref = optimizer.Adam(learning_rate=0.01, state_dtype="int8")
    master = p.detach().float().numpy().copy()
    state = ref.create_state(0, master)
    for s in range(3):
        g = torch.randn(p.shape, generator=g0).bfloat16()
        p.grad = g
        opt.step()
        ref.update(0, master, g.float().numpy(), state)
    assert opt.state[p]["weight32"].numpy().tobytes() == master.tobytes()
    assert torch.equal(p.detach(), torch.from_numpy(master).bfloat16())
    assert np.array_equal(opt.state[p]["exp_avg_codes"].numpy(), state[0].codes)


@pytest.mark.parametrize("state_dtype", ["int8", "bfloat16"])
def test_state_dict_round_trip_continues_bit_for_bit(state_dtype):
    params = _params()
    opt = tt.Adam(params, lr=0.01, state_dtype=state_dtype)
    _train(opt, params, 3)
    sd = _saved(opt.state_dict())
    if state_dtype == "int8":
        assert sorted(sd["state"][0]) == ["exp_avg_absmax", "exp_avg_codes", "exp_avg_order",
                                          "exp_avg_qmap", "exp_avg_sq_absmax",
                                          "exp_avg_sq_codes", "exp_avg_sq_order",
                                          "exp_avg_sq_qmap", "step"]
        assert sd["state"][0]["exp_avg_order"] == [0, 1]
        assert sd["state"][2]["exp_avg_order"] == [0, 2, 3, 1]  # channels_last: memory order
        assert sd["state"][0]["exp_avg_qmap"].numpy().tobytes() == lowbit.SIGNED.tobytes()
        assert sd["state"][0]["exp_avg_sq_qmap"].numpy().tobytes() == lowbit.UNSIGNED.tobytes()
    copies = []
    for how in ("load", "deepcopy", "pickle"):
        mine = [torch.nn.Parameter(p.detach().clone()) for p in params]
        if how == "load":
            other = tt.Adam(mine, lr=0.01, state_dtype=state_dtype)
            other.load_state_dict(sd)
        else:
            other = copy.deepcopy(opt) if how == "deepcopy" else pickle.loads(pickle.dumps(opt))
            mine = other.param_groups[0]["params"]
        copies.append((other, mine))
    _train(opt, params, 3, start=3)
    for other, mine in copies:
        _train(other, mine, 3, start=3)
        for p, q in zip(params, mine):
            assert p.detach().numpy().tobytes() == q.detach().numpy().tobytes()
            for key, value in opt.state[p].items():
                assert torch.equal(value, other.state[q][key]), key


def _corrupt(entry, how):
    if how == "a map of one value changed":
        entry["exp_avg_qmap"] = entry["exp_avg_qmap"].clone()
        entry["exp_avg_qmap"][100] += 1e-6
    elif how == "the signed map for the second moment's":
        entry["exp_avg_sq_qmap"] = entry["exp_avg_qmap"]
    elif how == "a NaN block maximum":
        entry["exp_avg_absmax"] = entry["exp_avg_absmax"].clone()
        entry["exp_avg_absmax"][5] = float("nan")
    elif how == "a negative block maximum":
        entry["exp_avg_sq_absmax"] = -entry["exp_avg_sq_absmax"]
    elif how == "codes of the wrong length":
        entry["exp_avg_codes"] = entry["exp_avg_codes"].flatten()[:-1]
    elif how == "float32 codes":
        entry["exp_avg_codes"] = entry["exp_avg_codes"].float()
    elif how == "block maxima of the wrong count":
        entry["exp_avg_absmax"] = entry["exp_avg_absmax"][:-1]
    elif how == "no map":
        del entry["exp_avg_qmap"]
    elif how == "no block maxima":
        del entry["exp_avg_sq_absmax"]
    else:  # pragma: no cover
        raise AssertionError(how)


CORRUPTIONS = [("a map of one value changed", "not a code map"),
               ("the signed map for the second moment's", "convert_states=True"),
               ("a NaN block maximum", "block maximum 5 of exp_avg is nan"),
               ("a negative block maximum", "block maxima are finite and >= 0"),
               ("codes of the wrong length", "uint8 of the parameter's shape"),
               ("float32 codes", "uint8 of the parameter's shape"),
               ("block maxima of the wrong count", "float32 of shape (32,)"),
               ("no map", "without 'exp_avg_qmap'"),
               ("no block maxima", "without 'exp_avg_sq_absmax'")]


@pytest.mark.parametrize("how,message", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_a_bad_held_state_is_refused_with_nothing_changed(how, message):
    params = _params()
    opt = tt.Adam(params, lr=0.01, state_dtype="int8")
    _train(opt, params, 2)
    before = _saved(opt.state_dict())
    bad = _saved(opt.state_dict())
    _corrupt(bad["state"][0], how)
    with pytest.raises((ValueError, TypeError), match=message.replace("(", r"\(").replace(
            ")", r"\)")):
        opt.load_state_dict(bad)
    after = opt.state_dict()
    for k, entry in before["state"].items():
        for key, value in entry.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(after["state"][k][key]))


def test_float32_moments_convert_to_int8_and_back():
    params = _params()
    f32 = tt.Adam(params, lr=0.01)
    _train(f32, params, 3)
    mine = [torch.nn.Parameter(p.detach().clone()) for p in params]
    i8 = tt.Adam(mine, lr=0.01, state_dtype="int8")
    i8.load_state_dict(f32.state_dict(), convert_states=True)
    assert i8.param_groups[0]["state_dtype"] == "int8"  # the group keeps its own
    for p, q in zip(params, mine):
        for slot, qmap in (("exp_avg", lowbit.SIGNED), ("exp_avg_sq", lowbit.UNSIGNED)):
            if p.numel() < 4096:
                assert torch.equal(i8.state[q][slot], f32.state[p][slot])
                continue
            want = lowbit.quantize(_memory(f32.state[p][slot]), qmap)
            assert np.array_equal(_memory(i8.state[q][slot + "_codes"]), want.codes)
            assert i8.state[q][slot + "_absmax"].numpy().tobytes() == want.absmax.tobytes()
    # and back: the int8 moments' exact values, in float32
    back = [torch.nn.Parameter(p.detach().clone()) for p in params]
    again = tt.Adam(back, lr=0.01)
    again.load_state_dict(i8.state_dict(), convert_states=True)
    assert again.param_groups[0]["state_dtype"] is None
    for q, r in zip(mine, back):
        if q.numel() < 4096:
            continue
        for slot, qmap in (("exp_avg", lowbit.SIGNED), ("exp_avg_sq", lowbit.UNSIGNED)):
            held = lowbit.Quantized(_memory(i8.state[q][slot + "_codes"]),
                                    i8.state[q][slot + "_absmax"].numpy(), qmap)
            assert _memory(again.state[r][slot]).tobytes() == lowbit.dequantize(held).tobytes()
    # without convert_states the saved options are taken, as torch takes them
    again.load_state_dict(i8.state_dict())
    assert again.param_groups[0]["state_dtype"] == "int8"
    assert "exp_avg_codes" in again.state[back[0]]


def test_moments_saved_otherwise_than_the_options_say_are_refused_unless_converted():
    params = _params()
    f32 = tt.Adam(params, lr=0.01)
    _train(f32, params, 1)
    sd = f32.state_dict()
    sd["param_groups"][0]["state_dtype"] = "int8"
    with pytest.raises(ValueError, match="saved as a float tensor; this optimizer holds it as "
                                         r"int8 \(signed map\).*convert_states=True"):
        f32.load_state_dict(sd)
    assert f32.param_groups[0]["state_dtype"] is None
    # a float tensor of another dtype (bfloat16 included) is cast, as torch casts a state
    sd = f32.state_dict()
    sd["state"][0]["exp_avg"] = sd["state"][0]["exp_avg"].bfloat16()
    f32.load_state_dict(sd)
    assert torch.equal(f32.state[params[0]]["exp_avg"], sd["state"][0]["exp_avg"].float())


def test_a_torch_optim_state_dict_loads_into_held_states_and_back():
    params = _params()
    theirs = [torch.nn.Parameter(p.detach().clone().contiguous()) for p in params[:2]]
    ref = torch.optim.Adam(theirs, lr=0.01)
    for p, g in zip(theirs, _grads(theirs, 0)):
        p.grad = g
    ref.step()
    mine = [torch.nn.Parameter(p.detach().clone()) for p in theirs]
    i8 = tt.Adam(mine, lr=0.01, state_dtype="int8", convention="pytorch")
    i8.load_state_dict(ref.state_dict())
    want = lowbit.quantize(ref.state[theirs[0]]["exp_avg"].numpy(), lowbit.SIGNED)
    assert np.array_equal(i8.state[mine[0]]["exp_avg_codes"].numpy(), want.codes)
    bf = tt.Adam(mine, lr=0.01, state_dtype="bfloat16", convention="pytorch")
    bf.load_state_dict(ref.state_dict())
    assert torch.equal(bf.state[mine[0]]["exp_avg"],
                       ref.state[theirs[0]]["exp_avg"].bfloat16())
    # a bfloat16-state state_dict loads into torch.optim: the moments widened exactly
    back = torch.optim.Adam(theirs, lr=0.01)
    back.load_state_dict(bf.state_dict())
    assert torch.equal(back.state[theirs[0]]["exp_avg"],
                       bf.state[mine[0]]["exp_avg"].float())


def test_what_cannot_be_held_is_refused_before_anything_is_written():
    params = _params()
    emb = torch.nn.Parameter(torch.randn(64, 80))
    opt = tt.Adam([params[0], emb], lr=0.01, state_dtype="int8")
    params[0].grad = torch.randn(64, 128)
    emb.grad = torch.sparse_coo_tensor(torch.tensor([[1, 3]]), torch.randn(2, 80), (64, 80),
                                       check_invariants=True)
    before = params[0].detach().clone()
    with pytest.raises(TypeError, match="sparse gradient with state_dtype='int8'"):
        opt.step()
    assert torch.equal(params[0].detach(), before) and not opt.state
    half = torch.nn.Parameter(torch.randn(64, 80).half())
    opt = tt.Adam([params[0], half], lr=0.01, state_dtype="int8", multi_precision=True)
    half.grad = torch.randn(64, 80).half()
    with pytest.raises(NotImplementedError, match="float16"):
        opt.step()
    assert torch.equal(params[0].detach(), before) and not opt.state
    with pytest.raises(ValueError, match="no element-wise moments"):
        tt.Adadelta(params, state_dtype="int8")


def test_a_group_changes_state_dtype_before_its_first_step_only():
    params = _params()
    opt = tt.Adam(params[:1], lr=0.01)
    opt.param_groups[0]["state_dtype"] = "bfloat16"  # no state yet: taken
    opt.add_param_group({"params": params[1:], "state_dtype": "int8"})
    _train(opt, params, 1)
    assert opt.state[params[0]]["exp_avg"].dtype == torch.bfloat16
    assert "exp_avg_codes" in opt.state[params[2]]
    opt.param_groups[0]["state_dtype"] = "int8"
    with pytest.raises(ValueError, match="state_dtype cannot change from 'bfloat16' to 'int8' "
                                         "once the group's parameters have state"):
        _train(opt, params, 1, start=1)
    assert opt.param_groups[0]["state_dtype"] == "int8"  # the user's edit stays, refused


def test_model_double_after_a_step_goes_on_through_load_state_dict():
    params = _params()[:1]
    opt = tt.Adam(params, lr=0.01, state_dtype="int8")
    _train(opt, params, 2)
    params[0].data = params[0].data.double()
    params[0].grad = torch.randn(64, 128, dtype=torch.float64)
    with pytest.raises(TypeError, match="load_state_dict"):
        opt.step()
    opt.load_state_dict(opt.state_dict())  # int8 moments step float64 weights as they are
    ref = optimizer.Adam(learning_rate=0.01, state_dtype="int8")
    w = params[0].detach().numpy().copy()
    q = opt._bindings[params[0]].toolkit_state
    state = tuple(lowbit.Quantized(s.codes.copy(), s.absmax.copy(), s.qmap) for s in q)
    ref.restore_counts({0: 2}, 2)
    g = params[0].grad.numpy().copy()
    opt.step()
    ref.update(0, w, g, state)
    assert params[0].detach().numpy().tobytes() == w.tobytes()


def test_zero_redundancy_optimizer_consolidates_int8_states(tmp_path):
    """Two gloo processes (``tests/torch_zero.py``), bounded in time: the consolidated state
    holds each int8 slot's codes, block maxima and map; loaded into a fresh
    ZeroRedundancyOptimizer, both ranks continue bit for bit; the map is taken with the codes
    and leaves the local optimizer's state."""
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(here), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, os.path.join(here, "torch_zero.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = sorted(line for line in done.stdout.splitlines() if line.startswith("rank "))
    slots = ["exp_avg_absmax", "exp_avg_codes", "exp_avg_sq_absmax", "exp_avg_sq_codes"]
    assert lines == [
        "rank 0 equal True keys " + ",".join(sorted(slots + [
            "exp_avg_qmap", "exp_avg_sq_qmap", "exp_avg_order", "exp_avg_sq_order", "step"])),
        "rank 1 equal True keys " + ",".join(sorted((slots + ["step"]) * 2))], done.stdout


def test_a_wrong_map_written_into_opt_state_is_refused():
    params = _params()[:1]
    opt = tt.Adam(params, lr=0.01, state_dtype="int8")
    _train(opt, params, 1)
    before = params[0].detach().clone()
    for fresh in (False, True):  # beside the bound codes, or with codes of its own
        entry = {k: v.clone() if fresh else v for k, v in opt.state[params[0]].items()}
        entry["exp_avg_sq_qmap"] = torch.from_numpy(lowbit.SIGNED.copy())
        opt.state[params[0]] = entry
        with pytest.raises(ValueError, match="'exp_avg_sq_qmap' is not the unsigned map"):
            _train(opt, params, 1, start=1)
        assert torch.equal(params[0].detach(), before)
    entry["exp_avg_sq_qmap"] = torch.from_numpy(lowbit.UNSIGNED.copy())
    opt.state[params[0]] = entry
    _train(opt, params, 1, start=1)  # the right map: taken, and gone from the entry
    assert "exp_avg_sq_qmap" not in opt.state[params[0]]


def _bitsandbytes_entry(p, step, seed):
    """A parameter's state as bitsandbytes 0.50.2's Adam8bit keeps it in a state_dict (the
    layout: its quantized moments under ``__bnb_optimizer_quant_state__``), made with the
    toolkit's own quantizer from random moments."""
    g = torch.Generator().manual_seed(seed)
    m, v = torch.randn(p.shape, generator=g) * 0.1, torch.rand(p.shape, generator=g) * 1e-3
    if p.numel() < 4096:  # bitsandbytes keeps small tensors' moments in float32
        held = {"state1": m, "state2": v}
    else:
        qm = lowbit.quantize(m.numpy(), lowbit.SIGNED)
        qv = lowbit.quantize(v.numpy(), lowbit.UNSIGNED)
        held = {"state1": torch.from_numpy(qm.codes), "absmax1": torch.from_numpy(qm.absmax),
                "qmap1": torch.from_numpy(lowbit.SIGNED.copy()),
                "state2": torch.from_numpy(qv.codes), "absmax2": torch.from_numpy(qv.absmax),
                "qmap2": torch.from_numpy(lowbit.UNSIGNED.copy())}
    return {"step": step, "__bnb_optimizer_quant_state__": held}


def test_a_bitsandbytes_state_dict_loads_as_it_is_held():
    """bitsandbytes' 8-bit Adam state_dict (its layout, built here so that the test needs no
    bitsandbytes) loads into int8 states code for code, and into float32 moments as the
    values its codes stand for; a state quantized per tensor is refused by name."""
    params = _params()[:2]
    entries = {k: _bitsandbytes_entry(p, 3, k) for k, p in enumerate(params)}
    sd = {"state": entries, "param_groups": [{"lr": 0.001, "betas": (0.9, 0.999), "eps": 1e-8,
                                              "weight_decay": 0, "params": [0, 1]}]}
    i8 = tt.Adam(params, lr=0.001, state_dtype="int8", convention="pytorch")
    i8.load_state_dict(sd)
    held = entries[0]["__bnb_optimizer_quant_state__"]
    assert torch.equal(i8.state[params[0]]["exp_avg_codes"], held["state1"])
    assert torch.equal(i8.state[params[0]]["exp_avg_sq_absmax"], held["absmax2"])
    assert torch.equal(i8.state[params[1]]["exp_avg"],
                       entries[1]["__bnb_optimizer_quant_state__"]["state1"])
    assert int(i8.state[params[0]]["step"]) == 3
    f32 = tt.Adam(params, lr=0.001, convention="pytorch")
    f32.load_state_dict(sd)
    want = lowbit.dequantize(lowbit.Quantized(held["state2"].numpy(), held["absmax2"].numpy(),
                                              lowbit.UNSIGNED))
    assert f32.state[params[0]]["exp_avg_sq"].numpy().tobytes() == want.tobytes()
    del held["absmax1"]  # (bitsandbytes' block_wise=False keeps one scale, "max1")
    with pytest.raises(ValueError, match="block_wise=False"):
        i8.load_state_dict(sd)


def test_bitsandbytes_own_adam8bit_state_dict_loads_code_for_code():
    bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes not installed")
    params = _params()[:2]
    theirs = bnb.optim.Adam8bit(params, lr=0.001)
    _train(theirs, params, 2)
    mine = tt.Adam(params, lr=0.001, state_dtype="int8", convention="pytorch")
    mine.load_state_dict(theirs.state_dict())
    for p in params:
        s = theirs.state[p]
        if p.numel() >= 4096:
            assert torch.equal(mine.state[p]["exp_avg_codes"], s["state1"])
            assert torch.equal(mine.state[p]["exp_avg_sq_absmax"], s["absmax2"])
        else:
            assert torch.equal(mine.state[p]["exp_avg"], s["state1"])


def test_a_layout_change_after_a_step_requantizes_in_the_new_blocks():
    """``p.data`` in another memory order after a step: the int8 moments are decoded in their
    old blocks and held again in blocks of the new order (a warning says so), then the step
    equals ``update`` from that state, bit for bit and code for code."""
    scale = torch.logspace(-4, 0, 64).view(64, 1)  # rows of very different size: one a block
    p = torch.nn.Parameter(torch.randn(64, 256) * scale)
    opt = tt.Adam([p], lr=1e-3, state_dtype="int8")
    p.grad = torch.randn(64, 256) * scale
    opt.step()
    old = [lowbit.Quantized(opt.state[p][n + "_codes"].numpy().copy(),
                            opt.state[p][n + "_absmax"].numpy().copy(), qmap)
           for n, qmap in (("exp_avg", lowbit.SIGNED), ("exp_avg_sq", lowbit.UNSIGNED))]
    p.data = p.data.t().contiguous().t()  # the same values, column-major
    g = torch.randn(64, 256) * scale
    p.grad = g
    ref = optimizer.Adam(learning_rate=1e-3, state_dtype="int8")
    # the new blocks: the old values in the new memory order (the transpose, C-ordered)
    state = tuple(lowbit.quantize(np.ascontiguousarray(lowbit.dequantize(q).T), q.qmap)
                  for q in old)
    w = p.detach().t().contiguous().numpy().copy()
    ref.restore_counts({0: 1}, 1)
    with pytest.warns(UserWarning, match="requantized in blocks of its order"):
        opt.step()
    ref.update(0, w, g.t().contiguous().numpy(), state)
    assert p.detach().t().contiguous().numpy().tobytes() == w.tobytes()
    assert np.array_equal(opt.state[p]["exp_avg_codes"].t().contiguous().numpy(), state[0].codes)


def test_saved_int8_blocks_keep_their_order_without_their_strides():
    """A serializer that makes tensors contiguous loses the codes' strides; the saved
    ``_order`` still says how the blocks of a channels_last weight were cut."""
    params = _params()
    opt = tt.Adam(params, lr=0.01, state_dtype="int8")
    _train(opt, params, 2)
    sd = opt.state_dict()
    flat = {**sd, "state": {k: {n: v.contiguous() if isinstance(v, torch.Tensor) else v
                                for n, v in e.items()} for k, e in sd["state"].items()}}
    mine = [torch.nn.Parameter(p.detach().clone()) for p in params]
    f32 = tt.Adam(mine, lr=0.01)
    f32.load_state_dict(flat, convert_states=True)
    q = opt._bindings[params[2]].toolkit_state[0]  # channels_last: codes in memory order
    assert _memory(f32.state[mine[2]]["exp_avg"]).tobytes() == lowbit.dequantize(q).tobytes()
    flat["state"][2]["exp_avg_order"] = [0, 1, 2]
    with pytest.raises(ValueError, match="must list the 4 dimensions"):
        f32.load_state_dict(flat)


def test_bitsandbytes_channels_last_blocks_and_sgd_momentum():
    """bitsandbytes cuts a channels_last weight's blocks in its logical order (its codes keep
    the weight's strides); its 8-bit SGD momentum is torch's buffer, which MXNet's convention
    keeps as -lr times it: refused there, scaled from float32."""
    p = _params()[2]
    m = torch.randn(p.shape) * torch.logspace(-3, 0, 16).view(1, 16, 1, 1)
    q = lowbit.quantize(m.numpy(), lowbit.SIGNED)  # logical (C) order
    codes = torch.from_numpy(q.codes).to(memory_format=torch.channels_last)
    held = {"state1": codes, "absmax1": torch.from_numpy(q.absmax),
            "qmap1": torch.from_numpy(lowbit.SIGNED.copy())}
    sd = {"state": {0: {"step": 1, "__bnb_optimizer_quant_state__": held}},
          "param_groups": [{"lr": 0.1, "momentum": 0.9, "params": [0]}]}
    lion = tt.Lion([p], lr=0.1)
    lion.load_state_dict(sd)
    assert lion.state[p]["exp_avg"].contiguous().numpy().tobytes() == \
        lowbit.dequantize(q).tobytes()
    p = _params()[0]  # contiguous: SGD's codes load as they are
    m = torch.randn(p.shape)
    q = lowbit.quantize(m.numpy(), lowbit.SIGNED)
    held.update(state1=torch.from_numpy(q.codes), absmax1=torch.from_numpy(q.absmax))
    sgd = tt.SGD([p], lr=0.1, momentum=0.9, state_dtype="int8")
    with pytest.raises(ValueError, match="convention='pytorch'"):
        sgd.load_state_dict(sd)
    sgd = tt.SGD([p], lr=0.1, momentum=0.9, state_dtype="int8", convention="pytorch")
    sgd.load_state_dict(sd)
    assert torch.equal(sgd.state[p]["momentum_buffer_codes"], held["state1"])
    held.update(state1=m)  # a float32 momentum (a small tensor's) is scaled
    del held["absmax1"], held["qmap1"]
    sgd = tt.SGD([p], lr=0.1, momentum=0.9)
    sgd.load_state_dict(sd)
    assert torch.equal(sgd.state[p]["mom"], m * -0.1)


@pytest.mark.parametrize("state_dtype", [None, "bfloat16", "int8"])
def test_an_empty_parameter_steps(state_dtype):
    p = torch.nn.Parameter(torch.randn(0))
    opt = tt.Adam([p], lr=0.01, state_dtype=state_dtype)
    for _ in range(2):
        p.grad = torch.zeros(0)
        opt.step()
    assert sorted(opt.state[p]) == ["exp_avg", "exp_avg_sq", "step"]


def test_odd_saved_states_are_refused():
    params = _params()[:1]
    opt = tt.Adam(params, lr=0.01, state_dtype="int8")
    _train(opt, params, 2)
    sd = opt.state_dict()
    sd["state"][0]["step"] = torch.tensor(1.5)
    with pytest.raises(ValueError, match="step"):
        opt.load_state_dict(sd)
    sd = opt.state_dict()
    sd["state"][0]["exp_avg"] = torch.zeros(64, 128)
    with pytest.raises(ValueError, match="holds both 'exp_avg' and 'exp_avg_codes'"):
        opt.load_state_dict(sd)
    half = torch.nn.Parameter(torch.randn(64, 80).half())
    opt = tt.Adam([half], lr=0.01, state_dtype="int8", multi_precision=True)
    half.grad = torch.randn(64, 80).half()
    with pytest.raises(NotImplementedError, match="^parameter 0: "):
        opt.step()
