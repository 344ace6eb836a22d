#!/usr/bin/env python
"""Record what MXNet 1.9.1 does with float16 weights and gradients *without* multi_precision.

Run with the Python of a virtual environment that has ``mxnet==1.9.1`` and ``numpy==1.23.5``
(MXNet 1.x does not import with numpy >= 1.24), from the repository root::

    /tmp/mxvenv/bin/python tests/data/mxnet/float16_gen.py            # refuses to overwrite
    /tmp/mxvenv/bin/python tests/data/mxnet/float16_gen.py --force    # rewrite float16.json

Output: ``float16.json`` next to this script.  Every number stored there was produced by
running MXNet; this script only drives MXNet and records what it computes (no optimizer
formula is implemented here).  Format::

    {"provenance", "inputs" (the input kinds), "matrix_kwargs", "summary" (per variant:
     outcome, state dtypes, per case and call: differing elements, inf/NaN counts), "cases"}

A case: ``id`` (``<variant>-<config>-<inputs>``), ``variant``, ``optimizer`` (registry name),
``kwargs`` (exactly as passed to ``mx.optimizer.create``, always ``multi_precision=False``),
``shape``, ``seed`` (numpy seed of the inputs, CRC32 of the id; also ``mx_seed``), ``steps``,
``state_layout``, ``init`` and ``grads`` (float16), and ``mxnet``:

* ``outcome``: ``"ran"`` or ``"refused"``; ``warnings``; ``state_dtypes`` ({slot: dtype});
* refused: ``error`` (``type``, full ``message``, ``last_line``), ``refused_at_call``,
  ``after_refusal`` (weight/grad/state unchanged?, ``t`` and ``num_update`` after the call),
  ``direct_call_error_same``;
* ran: ``direct_update_same``; ``calls`` (one per call: ``weight``, ``states``, ``nonfinite``
  ({array: [n_inf, n_nan]}), ``f32_rounded_once`` ({array: float16}) and
  ``differ_from_f32_rounded_once`` ({array: n})); ``f32_run`` (per call: ``fits_f16``,
  ``fits_f16_by_array``, ``max_abs`` as ``float.hex``); ``nonfinite_from_f16_arithmetic`` (per
  call: inf/NaN in the float16 run while the float32 run fits in float16 up to that call);
  ``noise`` (SGLD: the float16 draws).

Every float16 array is ``{"dtype": "float16", "shape", "bits"}``, ``bits`` holding the IEEE
binary16 bit pattern of each element (row-major) as 4 hex digits.  For each case it runs:

* the float16 weight through ``mx.optimizer.get_updater(opt)`` with ``multi_precision=False``
  (``upd(index, grad16, weight16)``), recording the outcome (ran, or the exception), any
  warning, the state's dtypes, and the weight and state after each call;
* the same call sequence once more through direct ``create_state_multi_precision`` /
  ``update_multi_precision`` calls, to check that both paths agree;
* "float32, rounded once": before each call, a second MXNet optimizer (same kwargs) gets the
  float16 run's weight, state and gradient widened to float32 and makes the same call in
  float32; the result, rounded to float16 once, is what a float16 store of a float32 step
  gives.  The number of elements where the float16 run differs from it is recorded;
* a free-running float32 run from the same (float16-valued) inputs: whether every weight and
  state value it produces fits in float16 (then a non-finite value in the float16 run comes
  from float16 arithmetic, not from a result too large for float16).

SGLD draws its noise with ``mx.nd.random.normal(dtype=weight.dtype)``; the float16 and float32
streams differ, so the noise of the float16 run is recorded and replayed (widened) in the
float32 runs by substituting ``mxnet.optimizer.optimizer.normal`` for those runs only.
"""
import argparse
import contextlib
import datetime
import hashlib
import io
import json
import math
import os
import platform
import re
import sys
import warnings
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_NAME = "float16.json"
FORMAT_VERSION = 1
STEPS = 2
SHAPE = (3, 4, 5)              # the shape of MXNet's own optimizer tests

# Hyper-parameter values taken from the option lists of MXNet's
# tests/python/unittest/test_optimizer.py (clip_gradient 0.4/0.5, rescale_grad 0.14/0.8,
# wd 0.03/0.05/0.07, momentum 0.9, ...): one combination with clipping active on part of
# the uniform [0, 1) inputs.
MATRIX = dict(clip_gradient=0.5, rescale_grad=0.8, wd=0.05)

# variant -> (registry name, kwargs every config of the variant gets, matrix extras)
VARIANTS = {
    "sgd": ("sgd", {}, {}),
    "sgd-mom": ("sgd", dict(momentum=0.9), {}),
    "nag": ("nag", {}, {}),
    "nag-mom": ("nag", dict(momentum=0.9), {}),
    "adagrad": ("adagrad", {}, dict(eps=1e-8)),
    "rmsprop": ("rmsprop", {}, {}),
    "rmsprop-centered": ("rmsprop", dict(centered=True), {}),
    "adadelta": ("adadelta", {}, dict(rho=0.9, epsilon=1e-8)),
    "adam": ("adam", {}, {}),
    "adamax": ("adamax", {}, {}),
    "nadam": ("nadam", {}, {}),
    "signum": ("signum", {}, dict(learning_rate=0.05, wd_lh=0.015)),
    "signsgd": ("signum", dict(momentum=0.0), dict(learning_rate=0.05)),
    "lbsgd": ("lbsgd", {}, {}),
    "lbsgd-lars": ("lbsgd", dict(warmup_strategy="lars"), {}),
    "dcasgd": ("dcasgd", {}, {}),
    "ftrl": ("ftrl", {}, dict(lamda1=0.01)),
    "ftml": ("ftml", {}, dict(beta1=0.7, beta2=0.9)),
    "sgld": ("sgld", {}, {}),
}

# input kinds: (description, weight sampler, grad sampler); each takes (rng, n)
def _uniform(rng, n):
    return rng.uniform(0.0, 1.0, n)


def _signed(lo, hi):
    def draw(rng, n):
        return rng.choice([-1.0, 1.0], n) * rng.uniform(lo, hi, n)
    return draw


INPUTS = {
    "uniform": ("weight and grad uniform in [0, 1), as mx.random.uniform in MXNet's "
                "compare_optimizer", _uniform, _uniform),
    "mid": ("weight +-U[0, 1), grad +-U[260, 380]: g*g overflows float16 (> 65504) while every "
            "stored weight and state of the float32 computation fits in float16",
            _signed(0.0, 1.0), _signed(260.0, 380.0)),
    "large": ("weight +-U[1e3, 3e4], grad +-U[1e3, 6e4]", _signed(1e3, 3e4), _signed(1e3, 6e4)),
    "small": ("weight U[0, 1), grad +-U[1e-4, 1e-2]: squares of the gradient and epsilon=1e-8 "
              "underflow to 0 in float16", _uniform, _signed(1e-4, 1e-2)),
}

# (config, input kind): "default" = the variant's kwargs only; "matrix" adds MATRIX and extras
CONFIGS = [("default", "uniform"), ("matrix", "uniform"), ("default", "small"),
           ("default", "mid"), ("default", "large")]


# --------------------------------------------------------------------------------------
# encoding
# --------------------------------------------------------------------------------------
def enc16(a):
    """float16 array -> {"dtype", "shape", "bits"}: the IEEE binary16 bit pattern of each
    element (row-major) as 4 hex digits."""
    a = np.ascontiguousarray(a)
    assert a.dtype == np.float16, a.dtype
    return {"dtype": "float16", "shape": list(a.shape),
            "bits": ["%04x" % int(b) for b in a.view(np.uint16).ravel()]}


def hexf(x):
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x.hex()


def dump_json(obj, path):
    text = json.dumps(obj, indent=1, sort_keys=False, allow_nan=False)
    text = re.sub(r'\[\s+("[^"\n]*"(?:,\s+"[^"\n]*")*)\s+\]',
                  lambda m: '[' + re.sub(r',\s+', ', ', m.group(1)) + ']', text)
    atom = r'(?:-?[0-9][0-9eE.+-]*|true|false)'
    text = re.sub(r'\[\s+(%s(?:,\s+%s)*)\s+\]' % (atom, atom),
                  lambda m: '[' + re.sub(r',\s+', ', ', m.group(1)) + ']', text)
    # lists of short lists, e.g. [[0, 0], [3, 1]]
    text = re.sub(r'\[\s+(\[[^\[\]\n]*\](?:,\s+\[[^\[\]\n]*\])*)\s+\]',
                  lambda m: '[' + re.sub(r'\],\s+\[', '], [', m.group(1)) + ']', text)
    with open(path, "w") as f:
        f.write(text + "\n")


def case_seed(case_id):
    return zlib.crc32(case_id.encode()) & 0x7FFFFFFF


# --------------------------------------------------------------------------------------
# MXNet state objects
# --------------------------------------------------------------------------------------
def state_names(variant):
    name, base, _ = VARIANTS[variant]
    mom = base.get("momentum", 0.9 if name == "signum" else 0.0)
    return {
        "sgd": ("mom" if mom else None), "nag": ("mom" if mom else None),
        "signum": ("mom" if mom else None), "lbsgd": ("mom" if mom else None),
        "adagrad": "h",
        "rmsprop": ("n", "g", "delta") if base.get("centered") else ("n",),
        "adadelta": ("acc_g", "acc_delta"), "adam": ("mean", "var"), "adamax": ("m", "u"),
        "nadam": ("m", "v"), "dcasgd": ("mom", "w_prev"), "ftrl": ("z", "n"),
        "ftml": ("d", "v", "z"), "sgld": None,
    }[name]


def layout_str(layout):
    if layout is None:
        return "None"
    if isinstance(layout, str):
        return layout
    return "(" + ", ".join(layout_str(x) for x in layout) + ")"


def walk(layout, state, fn):
    """Call fn(name, ndarray) for every NDArray of `state`, named along `layout`."""
    import mxnet as mx
    if layout is None:
        assert state is None, type(state)
        return
    if isinstance(layout, str):
        if state is None:
            return
        assert isinstance(state, mx.nd.NDArray), (layout, type(state))
        fn(layout, state)
        return
    assert isinstance(state, (tuple, list)) and len(state) == len(layout), (layout, state)
    for sub_layout, sub_state in zip(layout, state):
        walk(sub_layout, sub_state, fn)


def state_numpy(layout, state):
    out = {}
    walk(layout, state, lambda n, a: out.__setitem__(n, a.asnumpy()))
    return out


def load_state(layout, state, values):
    """Overwrite every NDArray of `state` in place with values[name] (cast to its dtype)."""
    def put(n, a):
        a[:] = values[n].astype(a.dtype)
    walk(layout, state, put)


# --------------------------------------------------------------------------------------
@contextlib.contextmanager
def replay_normal(noises):
    """Substitute mxnet.optimizer.optimizer.normal with one that returns the recorded draws
    (widened to the requested dtype), in order."""
    import mxnet as mx
    import mxnet.optimizer.optimizer as mxopt
    real = mxopt.normal
    queue = list(noises)

    def fake(loc, scale, shape=None, dtype=None, ctx=None, **kwargs):
        arr = queue.pop(0)
        assert tuple(arr.shape) == tuple(shape)
        return mx.nd.array(arr.astype(np.dtype(dtype)), dtype=dtype, ctx=ctx)
    mxopt.normal = fake
    try:
        yield
    finally:
        mxopt.normal = real
    assert not queue


@contextlib.contextmanager
def record_normal(out):
    """Wrap mxnet.optimizer.optimizer.normal, storing every draw it returns."""
    import mxnet.optimizer.optimizer as mxopt
    real = mxopt.normal

    def wrapped(*args, **kwargs):
        r = real(*args, **kwargs)
        out.append(r.asnumpy().copy())
        return r
    mxopt.normal = wrapped
    try:
        yield
    finally:
        mxopt.normal = real


def make_opt(name, kwargs):
    import mxnet as mx
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return mx.optimizer.create(name, **kwargs)


def error_record(exc):
    msg = str(exc)
    last = [ln for ln in msg.splitlines() if ln.strip()][-1]
    return {"type": type(exc).__module__ + "." + type(exc).__name__, "message": msg,
            "last_line": last}


def counts_nonfinite(a):
    a = np.asarray(a)
    return [int(np.isinf(a).sum()), int(np.isnan(a).sum())]


def ndiff16(a, b):
    """Elements whose float16 bit patterns differ (NaN == NaN when both are NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    same = (a.view(np.uint16) == b.view(np.uint16)) | (np.isnan(a) & np.isnan(b))
    return int((~same).sum())


# --------------------------------------------------------------------------------------
def run_case(variant, config, inputs):
    import mxnet as mx
    name, base, extras = VARIANTS[variant]
    kwargs = dict(base)
    if config == "matrix":
        kwargs.update(MATRIX)
        if name == "sgld":
            kwargs.pop("rescale_grad")   # MXNet's SGLD test matrix has no rescale_grad
        kwargs.update(extras)
    kwargs["multi_precision"] = False
    case_id = "%s-%s-%s" % (variant, config, inputs)
    seed = case_seed(case_id)
    rng = np.random.default_rng(seed)
    n = int(np.prod(SHAPE))
    _, wdraw, gdraw = INPUTS[inputs]
    w0 = wdraw(rng, n).reshape(SHAPE).astype(np.float16)
    grads = [gdraw(rng, n).reshape(SHAPE).astype(np.float16) for _ in range(STEPS)]
    assert np.isfinite(w0).all() and all(np.isfinite(g).all() for g in grads)
    layout = state_names(variant)
    idx = 0

    rec = {"id": case_id, "variant": variant, "optimizer": name, "config": config,
           "inputs": inputs, "kwargs": kwargs, "shape": list(SHAPE), "seed": seed,
           "steps": STEPS, "state_layout": layout_str(layout),
           "init": enc16(w0), "grads": [enc16(g) for g in grads]}
    mxr = {}
    rec["mxnet"] = mxr

    # ---- 1. float16 through the Updater -------------------------------------------------
    mx.random.seed(seed)                      # SGLD's noise: independent of the case order
    rec["mx_seed"] = seed
    opt16 = make_opt(name, kwargs)
    upd16 = mx.optimizer.get_updater(opt16)
    w16 = mx.nd.array(w0, dtype=np.float16)
    noises = []
    calls = []
    out = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
            record_normal(noises):
        warnings.simplefilter("always")
        for k in range(STEPS):
            before_w = w16.asnumpy().copy()
            before_state = (state_numpy(layout, upd16.states[idx]) if idx in upd16.states
                            else None)
            g_nd = mx.nd.array(grads[k], dtype=np.float16)
            try:
                upd16(idx, g_nd, w16)
                mx.nd.waitall()
            except Exception as exc:           # MXNet refuses: record and stop this case
                after = state_numpy(layout, upd16.states[idx]) if idx in upd16.states else {}
                mxr["outcome"] = "refused"
                mxr["error"] = error_record(exc)
                mxr["refused_at_call"] = k + 1
                mxr["after_refusal"] = {
                    "weight_unchanged": ndiff16(w16.asnumpy(), before_w) == 0,
                    "grad_unchanged": ndiff16(g_nd.asnumpy(), grads[k]) == 0,
                    "state_unchanged": all(
                        np.array_equal(after[s], before_state[s] if before_state else
                                       np.zeros_like(after[s])) for s in after),
                    "t": opt16._index_update_count.get(idx),
                    "num_update": opt16.num_update,
                }
                break
            calls.append({"weight": w16.asnumpy().copy(),
                          "states": state_numpy(layout, upd16.states[idx])})
        else:
            mxr["outcome"] = "ran"
    mxr["warnings"] = sorted({"%s: %s" % (w.category.__name__, w.message) for w in caught})
    if out.getvalue().strip():
        mxr["stdout"] = out.getvalue().strip()
    if idx in upd16.states:
        dts = {}
        walk(layout, upd16.states[idx], lambda s, a: dts.__setitem__(s, np.dtype(a.dtype).name))
        mxr["state_dtypes"] = dts

    # ---- 2. the same calls, direct update_multi_precision --------------------------------
    optd = make_opt(name, kwargs)
    wd_ = mx.nd.array(w0, dtype=np.float16)
    direct_err = None
    with warnings.catch_warnings(), replay_normal(list(noises)) if noises else \
            contextlib.nullcontext(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        st = optd.create_state_multi_precision(idx, wd_)
        for k in range(STEPS):
            try:
                optd.update_multi_precision(idx, wd_, mx.nd.array(grads[k], dtype=np.float16), st)
                mx.nd.waitall()
            except Exception as exc:
                direct_err = error_record(exc)
                break
            if k < len(calls):
                if ndiff16(wd_.asnumpy(), calls[k]["weight"]) or any(
                        ndiff16(v, calls[k]["states"][s]) for s, v in
                        state_numpy(layout, st).items()):
                    direct_err = {"mismatch_at_call": k + 1}
    if mxr["outcome"] == "refused":
        assert direct_err is not None, case_id
        mxr["direct_call_error_same"] = direct_err.get("last_line") == mxr["error"]["last_line"]
        return rec
    mxr["direct_update_same"] = direct_err is None

    # ---- 3. float32 lock-step: each call from the float16 run's inputs, rounded once -----
    opt32 = make_opt(name, kwargs)
    upd32 = mx.optimizer.get_updater(opt32)
    prev_w, prev_s = w0, None
    steps = []
    with warnings.catch_warnings(), replay_normal(noises) if noises else \
            contextlib.nullcontext(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        for k in range(STEPS):
            w32 = mx.nd.array(prev_w.astype(np.float32), dtype=np.float32)
            if idx not in upd32.states:
                upd32.states[idx] = opt32.create_state_multi_precision(idx, w32)
                upd32.states_synced[idx] = True
            if prev_s is not None:
                load_state(layout, upd32.states[idx], prev_s)
            upd32(idx, mx.nd.array(grads[k].astype(np.float32), dtype=np.float32), w32)
            mx.nd.waitall()
            r_w = w32.asnumpy().astype(np.float16)
            r_s = {s: v.astype(np.float16) for s, v in
                   state_numpy(layout, upd32.states[idx]).items()}
            c = calls[k]
            steps.append({
                "weight": enc16(c["weight"]),
                "states": {s: enc16(v) for s, v in c["states"].items()},
                "nonfinite": dict({"weight": counts_nonfinite(c["weight"])},
                                  **{s: counts_nonfinite(v) for s, v in c["states"].items()}),
                "f32_rounded_once": dict({"weight": enc16(r_w)},
                                         **{s: enc16(v) for s, v in r_s.items()}),
                "differ_from_f32_rounded_once": dict(
                    {"weight": ndiff16(c["weight"], r_w)},
                    **{s: ndiff16(c["states"][s], r_s[s]) for s in r_s}),
            })
            prev_w, prev_s = c["weight"], c["states"]
    mxr["calls"] = steps
    if noises:
        mxr["noise"] = [enc16(z) for z in noises]

    # ---- 4. free-running float32 from the same inputs --------------------------------------
    optf = make_opt(name, kwargs)
    updf = mx.optimizer.get_updater(optf)
    wf = mx.nd.array(w0.astype(np.float32), dtype=np.float32)
    run = []
    with warnings.catch_warnings(), replay_normal(noises) if noises else \
            contextlib.nullcontext(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        for k in range(STEPS):
            updf(idx, mx.nd.array(grads[k].astype(np.float32), dtype=np.float32), wf)
            mx.nd.waitall()
            vals = dict({"weight": wf.asnumpy()}, **state_numpy(layout, updf.states[idx]))
            with np.errstate(over="ignore"):
                by_array = {s: bool(np.isfinite(v).all() and np.isfinite(v.astype(np.float16)).all())
                            for s, v in vals.items()}
            run.append({"fits_f16": all(by_array.values()), "fits_f16_by_array": by_array,
                        "max_abs": {s: hexf(np.abs(v).max()) for s, v in vals.items()}})
    mxr["f32_run"] = run
    nonfinite16 = [any(sum(x) for x in st["nonfinite"].values()) for st in steps]
    mxr["nonfinite_from_f16_arithmetic"] = [bool(nf and all(r["fits_f16"] for r in run[:k + 1]))
                                           for k, nf in enumerate(nonfinite16)]
    return rec


def build():
    cases = []
    for variant in VARIANTS:
        for config, inputs in CONFIGS:
            cases.append(run_case(variant, config, inputs))
    return cases


def summary(cases):
    """Per variant: outcome, state dtype, differing elements and non-finite counts."""
    out = {}
    for c in cases:
        v = out.setdefault(c["variant"], {"optimizer": c["optimizer"],
                                          "outcome": c["mxnet"]["outcome"],
                                          "state_dtypes": c["mxnet"].get("state_dtypes"),
                                          "cases": {}})
        m = c["mxnet"]
        if m["outcome"] == "refused":
            v["error_last_line"] = m["error"]["last_line"]
            continue
        v["cases"][c["config"] + "-" + c["inputs"]] = {
            "weight_elements_differing_from_f32_rounded_once":
                [st["differ_from_f32_rounded_once"]["weight"] for st in m["calls"]],
            "state_elements_differing_from_f32_rounded_once":
                [sum(n for s, n in st["differ_from_f32_rounded_once"].items() if s != "weight")
                 for st in m["calls"]],
            "weight_inf_nan": [st["nonfinite"]["weight"] for st in m["calls"]],
            "state_inf_nan": [[sum(x[0] for s, x in st["nonfinite"].items() if s != "weight"),
                               sum(x[1] for s, x in st["nonfinite"].items() if s != "weight")]
                              for st in m["calls"]],
            "f32_run_fits_f16": [r["fits_f16"] for r in m["f32_run"]],
        }
    return out


# --------------------------------------------------------------------------------------
def provenance(argv):
    import mxnet as mx
    with open(os.path.abspath(__file__), "rb") as f:
        script_sha = hashlib.sha256(f.read()).hexdigest()
    feats = mx.runtime.Features()
    return {
        "generator": "tests/data/mxnet/float16_gen.py",
        "generator_sha256": script_sha,
        "format_version": FORMAT_VERSION,
        "mxnet_version": mx.__version__,
        "mxnet_features_enabled": sorted(f.name for f in feats.values() if f.enabled),
        "numpy_version": np.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([sys.executable, "tests/data/mxnet/float16_gen.py"] + argv[1:]),
        "api": "opt = mx.optimizer.create(optimizer, **kwargs)  (multi_precision=False); "
               "upd = mx.optimizer.get_updater(opt); per call: upd(0, mx.nd.array(grad, "
               "float16), weight16) on cpu(0); states read from upd.states[0]",
        "test_matrix_source": "hyper-parameter values from the option lists of MXNet's "
                              "tests/python/unittest/test_optimizer.py (apache/mxnet, v1.x "
                              "with_seed/nose era; those tests skip float16 unless "
                              "multi_precision=True)",
    }


def main(argv=None):
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--force", action="store_true", help="overwrite an existing float16.json")
    ap.add_argument("--out", default=os.path.join(HERE, OUT_NAME), help="output file")
    args = ap.parse_args(argv[1:])

    import mxnet as mx
    assert mx.__version__ == "1.9.1", mx.__version__
    if os.path.exists(args.out) and not args.force:
        sys.stderr.write("refusing to overwrite existing data (use --force):\n  %s\n" % args.out)
        return 2
    prov = provenance(argv)
    cases = build()
    data = {"provenance": prov,
            "inputs": {k: v[0] for k, v in INPUTS.items()},
            "matrix_kwargs": MATRIX,
            "summary": summary(cases),
            "cases": cases}
    dump_json(data, args.out)
    print("wrote %s (%d cases, %d bytes)" % (os.path.relpath(args.out), len(cases),
                                             os.path.getsize(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
