#!/usr/bin/env python
"""Generate the golden MXNet-parity data in this folder.

Run with the Python of a virtual environment that has ``mxnet==1.9.1`` and
``numpy==1.23.5`` (MXNet 1.x does not import with numpy >= 1.24)::

    /tmp/mxvenv/bin/python tests/data/mxnet/generate.py            # refuses to overwrite
    /tmp/mxvenv/bin/python tests/data/mxnet/generate.py --force    # regenerate everything
    /tmp/mxvenv/bin/python tests/data/mxnet/generate.py --force --only adam facts

Output: one ``<optimizer>.json`` per optimizer and ``facts.json``.  Every number
stored here was produced by running MXNet; this script only drives MXNet and
records what it computes (no optimizer formula is implemented here).
See README.md in this folder for the file format.
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
FORMAT_VERSION = 1
DEFAULT_STEPS = 4

# "all-on" configuration (docs/mxnet-facts.md, "How to read the citations"): clipping active on
# most elements.
ALL_ON = dict(learning_rate=0.1, wd=0.1, rescale_grad=0.5, clip_gradient=0.6)


# --------------------------------------------------------------------------------------
# encoding
# --------------------------------------------------------------------------------------
def enc(a):
    """Exact encoding of a float array: float.hex() of every element (row-major)."""
    a = np.asarray(a)
    assert a.dtype in (np.float16, np.float32, np.float64), a.dtype
    return {"dtype": str(a.dtype), "shape": list(a.shape),
            "hex": [float(x).hex() for x in a.ravel()]}


def enc_scalar(x):
    """Exact encoding of one Python/numpy float."""
    x = float(x)
    return {"value": x, "hex": x.hex()}


def dump_json(obj, path):
    text = json.dumps(obj, indent=1, sort_keys=False, allow_nan=False)
    # keep each list of hex strings (and each list of numbers) on a single line
    text = re.sub(r'\[\s+("[^"\n]*"(?:,\s+"[^"\n]*")*)\s+\]',
                  lambda m: '[' + re.sub(r',\s+', ', ', m.group(1)) + ']', text)
    text = re.sub(r'\[\s+(-?[0-9][0-9eE.+-]*(?:,\s+-?[0-9][0-9eE.+-]*)*)\s+\]',
                  lambda m: '[' + re.sub(r',\s+', ', ', m.group(1)) + ']', text)
    with open(path, "w") as f:
        f.write(text + "\n")


# --------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------
def case_seed(case_id):
    return zlib.crc32(case_id.encode()) & 0x7FFFFFFF


def draw_weight(rng, shape, dtype):
    n = int(np.prod(shape))
    w = rng.standard_normal(n)
    w[rng.integers(n)] *= 5.0          # one larger element
    return w.reshape(shape).astype(dtype)


def draw_grad(rng, shape, dtype, zeros):
    """3*randn, with two elements at 1e-3 scale, two at 1e2 scale, and (optionally) two
    exact zeros, at positions that change from step to step."""
    n = int(np.prod(shape))
    g = 3.0 * rng.standard_normal(n)
    perm = rng.permutation(n)
    g[perm[0:2]] = 1e-3 * rng.standard_normal(2)
    g[perm[2:4]] = 1e2 * rng.standard_normal(2)
    if zeros:
        g[perm[4:6]] = 0.0
    return g.reshape(shape).astype(dtype)


# --------------------------------------------------------------------------------------
# state layout: names of the state slots (MXNet's create_state order) for each optimizer
# --------------------------------------------------------------------------------------
def inner_state_names(opt_name, kwargs):
    """Names of the (non multi-precision) state, in the order MXNet stores it.
    A str means a single NDArray, a tuple a tuple of NDArrays, None no state."""
    mom = kwargs.get("momentum", {"signum": 0.9}.get(opt_name, 0.0))
    if opt_name in ("sgd", "nag", "lbsgd", "signum"):
        return "mom" if mom != 0 else None
    if opt_name == "adagrad":
        return "h"
    if opt_name == "rmsprop":
        return ("n", "g", "delta") if kwargs.get("centered", False) else ("n",)
    if opt_name == "adadelta":
        return ("acc_g", "acc_delta")
    if opt_name == "adam":
        return ("mean", "var")
    if opt_name == "adamax":
        return ("m", "u")
    if opt_name == "nadam":
        return ("m", "v")
    if opt_name == "dcasgd":
        return ("mom", "w_prev")          # mom is None for momentum == 0
    if opt_name == "ftrl":
        return ("z", "n")
    if opt_name == "ftml":
        return ("d", "v", "z")
    if opt_name == "sgld":
        return None
    raise KeyError(opt_name)


def layout_of(opt_name, kwargs, mp):
    inner = inner_state_names(opt_name, kwargs)
    if not mp:
        return inner
    if opt_name in ("sgd", "nag"):       # their own create_state_multi_precision
        return (inner, "weight32")
    return ("weight32", inner)           # base-class wrapper


def layout_str(layout):
    if layout is None:
        return "None"
    if isinstance(layout, str):
        return layout
    return "(" + ", ".join(layout_str(x) for x in layout) + ")"


def extract_states(layout, state, out):
    """Walk MXNet's state object along `layout`, storing every NDArray under its name."""
    import mxnet as mx
    if layout is None:
        assert state is None, type(state)
        return
    if isinstance(layout, str):
        if state is None:
            return                        # e.g. DCASGD's mom slot with momentum == 0
        assert isinstance(state, mx.nd.NDArray), (layout, type(state))
        out[layout] = enc(state.asnumpy())
        return
    assert isinstance(state, (tuple, list)) and len(state) == len(layout), (layout, state)
    for sub_layout, sub_state in zip(layout, state):
        extract_states(sub_layout, sub_state, out)


# --------------------------------------------------------------------------------------
# running one case
# --------------------------------------------------------------------------------------
def run_case(spec):
    import mxnet as mx
    opt_name = spec["optimizer"]
    kwargs = dict(spec["kwargs"])
    dtype = np.dtype(spec["dtype"])
    shape = tuple(spec.get("shape", (11,)))
    order = spec.get("order") or [0] * spec.get("steps", DEFAULT_STEPS)
    zeros = spec.get("zeros", "all")
    case_id = spec["id"]
    seed = case_seed(case_id)
    rng = np.random.default_rng(seed)
    mp = bool(kwargs.get("multi_precision", False)) and dtype == np.float16
    layout = layout_of(opt_name, kwargs, mp)

    indices = sorted(set(order))
    init = {i: draw_weight(rng, shape, dtype) for i in indices}
    grads = []
    n_seen = {i: 0 for i in indices}
    for idx in order:
        use_zeros = zeros == "all" or (zeros == "after_first" and n_seen[idx] > 0)
        grads.append(draw_grad(rng, shape, dtype, use_zeros))
        n_seen[idx] += 1

    mx_seed = spec.get("mx_seed")
    if mx_seed is not None:
        mx.random.seed(mx_seed)

    captured = io.StringIO()
    with contextlib.redirect_stdout(captured), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = mx.optimizer.create(opt_name, **kwargs)
    updater = mx.optimizer.get_updater(opt)
    weights = {i: mx.nd.array(init[i], dtype=dtype) for i in indices}

    calls = []
    for k, (idx, g) in enumerate(zip(order, grads)):
        g_orig = g.copy()                            # AdaDelta scales the caller's grad in place
        g_nd = mx.nd.array(g, dtype=dtype)           # a fresh buffer for every call (LBSGD aliasing)
        updater(idx, g_nd, weights[idx])
        rec = {"index": idx, "grad": enc(g_orig), "weight": enc(weights[idx].asnumpy())}
        states = {}
        extract_states(layout, updater.states[idx], states)
        rec["states"] = states
        extras = {"t": opt._index_update_count[idx], "num_update": opt.num_update}
        if opt_name == "nadam":
            extras["m_schedule"] = enc_scalar(opt.m_schedule)
        if opt_name == "lbsgd":
            extras["num_cums"] = opt.cumgrads[idx]["num_cums"]
        rec["extras"] = extras
        calls.append(rec)

    if opt_name == "sgld":
        # Regenerate the same normal draws: same seed, same calls, same order
        # (python/mxnet/optimizer/optimizer.py:1524-1536 at tag 1.9.1).
        mx.random.seed(mx_seed)
        for rec, idx in zip(calls, order):
            lr = opt._get_lrs([idx])[0]
            noise = mx.nd.random.normal(0, math.sqrt(lr), shape=shape, dtype=dtype,
                                        ctx=weights[idx].context)
            rec["noise"] = enc(noise.asnumpy())

    case = {
        "id": case_id,
        "optimizer": opt_name,
        "kwargs": spec["kwargs"],
        "dtype": str(dtype),
        "multi_precision": mp,
        "steps": len(order),
        "shape": list(shape),
        "seed": seed,
        "state_layout": layout_str(layout),
        "state_names": sorted(calls[0]["states"]),
        "init": [{"index": i, "weight": enc(init[i])} for i in indices],
        "calls": calls,
    }
    if mx_seed is not None:
        case["mx_seed"] = mx_seed
    if spec.get("notes"):
        case["notes"] = spec["notes"]
    nonfinite = any(not all(math.isfinite(float.fromhex(h)) for h in arr["hex"])
                    for rec in calls for arr in [rec["weight"], *rec["states"].values()])
    if nonfinite and not spec.get("expect_nonfinite"):
        raise RuntimeError("case %s produced NaN/Inf" % case_id)
    if spec.get("expect_nonfinite"):
        assert nonfinite, case_id
        case["expect_nonfinite"] = True
    stdout = captured.getvalue().strip()
    if stdout:
        case["mxnet_stdout"] = stdout
    return case


# --------------------------------------------------------------------------------------
# the case list
# --------------------------------------------------------------------------------------
F32_ONLY = {"adagrad", "rmsprop", "adadelta", "ftrl"}   # state always float32 (mxnet-facts.md 4.1)


def build_specs():
    specs = []

    def add(opt, tag, kwargs, dtypes=None, **extra):
        if dtypes is None:
            dtypes = ["float32"] if opt in F32_ONLY else ["float32", "float64"]
        for dt in dtypes:
            spec = dict(optimizer=opt, kwargs=dict(kwargs), dtype=dt,
                        id="%s-%s-%s" % (opt, tag, {"float16": "f16mp", "float32": "f32",
                                                    "float64": "f64"}[dt]))
            spec.update(extra)
            specs.append(spec)

    # SGD -------------------------------------------------------------------------
    add("sgd", "plain", {})
    add("sgd", "plain-mom", dict(momentum=0.9))
    add("sgd", "allon", dict(ALL_ON))
    add("sgd", "allon-mom", dict(ALL_ON, momentum=0.9))
    add("sgd", "noclip-mom", dict(learning_rate=0.1, wd=0.1, rescale_grad=0.3, momentum=0.9),
        notes="no clip_gradient: the unclipped kernel branch; rescale_grad=0.3 (not a power of "
              "two) so (lr*rs)*g and lr*(rs*g) differ")
    add("sgd", "noclip", dict(learning_rate=0.1, wd=0.1, rescale_grad=0.3),
        notes="no clip_gradient: the unclipped kernel branch; rescale_grad=0.3 (not a power of "
              "two) so (lr*rs)*g and lr*(rs*g) differ")
    add("sgd", "parse-mom", dict(learning_rate=0.1, wd=1.2359228558422161e-05,
                                 rescale_grad=1 / 10001, momentum=0.9),
        notes="hyper-parameter parsing: rescale_grad is a float field parsed by dmlc-core from "
              "str() (1/10001 parses 1 float ulp away from float32(1/10001)); lrs/wds are "
              "Tuple<float> (correctly rounded, so wd=1.2359228558422161e-05 is float32(wd))")
    add("sgd", "parse", dict(learning_rate=0.1, wd=1.2359228558422161e-05, rescale_grad=1 / 10001),
        notes="as parse-mom, without momentum (multi_sgd_update)")
    add("sgd", "clip0", dict(ALL_ON, clip_gradient=0.0),
        notes="clip_gradient=0.0 is falsy: the kernel is called without clipping")
    add("sgd", "clip0-mom", dict(ALL_ON, clip_gradient=0.0, momentum=0.9),
        notes="clip_gradient=0.0 is falsy: the kernel is called without clipping")
    add("sgd", "allon-mom-2d", dict(ALL_ON, momentum=0.9, learning_rate=0.05), shape=(3, 4))
    add("sgd", "mp-plain-mom", dict(momentum=0.9, multi_precision=True), dtypes=["float16"])
    add("sgd", "mp-allon-mom", dict(ALL_ON, momentum=0.9, multi_precision=True),
        dtypes=["float16"])
    add("sgd", "mp-allon", dict(ALL_ON, multi_precision=True), dtypes=["float16"])

    # NAG -------------------------------------------------------------------------
    add("nag", "plain", {})
    add("nag", "plain-mom", dict(momentum=0.9))
    add("nag", "allon", dict(ALL_ON))
    add("nag", "allon-mom", dict(ALL_ON, momentum=0.9))
    add("nag", "noclip-mom", dict(learning_rate=0.1, wd=0.1, rescale_grad=0.3, momentum=0.9))
    add("nag", "noclip", dict(learning_rate=0.1, wd=0.1, rescale_grad=0.3))
    add("nag", "mp-plain-mom", dict(momentum=0.9, multi_precision=True), dtypes=["float16"])
    add("nag", "mp-allon-mom", dict(ALL_ON, momentum=0.9, multi_precision=True),
        dtypes=["float16"])

    # AdaGrad ---------------------------------------------------------------------
    add("adagrad", "plain", {})
    add("adagrad", "allon", dict(ALL_ON))
    add("adagrad", "hyper", dict(learning_rate=0.05, eps=1e-5, wd=0.03))
    add("adagrad", "clip0", dict(ALL_ON, clip_gradient=0.0),
        notes="clip_gradient=0.0 is not None: the Python op clips the gradient to 0")
    add("adagrad", "mp-allon", dict(ALL_ON, multi_precision=True), dtypes=["float16"])

    # RMSProp ---------------------------------------------------------------------
    add("rmsprop", "plain", {})
    add("rmsprop", "allon", dict(ALL_ON))
    add("rmsprop", "allon-clipw", dict(ALL_ON, clip_weights=0.55))
    add("rmsprop", "hyper", dict(learning_rate=0.01, gamma1=0.95, epsilon=1e-6))
    add("rmsprop", "centered-plain", dict(centered=True))
    add("rmsprop", "centered-allon-clipw", dict(ALL_ON, centered=True, clip_weights=0.55))
    add("rmsprop", "centered-hyper", dict(learning_rate=0.01, centered=True, gamma1=0.95,
                                          gamma2=0.8, epsilon=1e-6))
    add("rmsprop", "mp-centered-allon", dict(ALL_ON, centered=True, multi_precision=True),
        dtypes=["float16"])

    # AdaDelta --------------------------------------------------------------------
    add("adadelta", "plain", {})
    add("adadelta", "allon", dict(ALL_ON), notes="learning_rate is accepted and ignored")
    add("adadelta", "hyper", dict(rho=0.95, epsilon=1e-6, learning_rate=123.0, wd=0.01))
    add("adadelta", "clip0", dict(ALL_ON, clip_gradient=0.0))
    add("adadelta", "mp-allon", dict(ALL_ON, multi_precision=True), dtypes=["float16"])

    # Adam ------------------------------------------------------------------------
    add("adam", "plain", {})
    add("adam", "allon", dict(ALL_ON))
    add("adam", "hyper", dict(learning_rate=0.01, beta1=0.85, beta2=0.99, epsilon=1e-6))
    add("adam", "noclip", dict(learning_rate=0.1, wd=0.1, rescale_grad=0.3))
    add("adam", "lr1e-4", dict(learning_rate=1e-4), notes="lr_t at t=3 is a value whose str() "
        "dmlc-core parses 1 float ulp away from the correctly rounded float32")
    add("adam", "lrt-order-t1", dict(learning_rate=0.03162277736740993), dtypes=["float32"],
        notes="constructed lr: lr*(sqrt(1-b2^t)/(1-b1^t)) and (lr*sqrt(1-b2^t))/(1-b1^t) are "
              "adjacent doubles that parse to different float32 lr_t at t=1")
    add("adam", "lrt-order-t3", dict(learning_rate=0.003905735894813145), dtypes=["float32"],
        notes="constructed lr: the two lr_t evaluation orders parse to different float32 at t=3")
    add("adam", "clip0", dict(ALL_ON, clip_gradient=0.0),
        notes="clip_gradient=0.0 is falsy: the kernel is called without clipping")
    add("adam", "begin10", dict(ALL_ON, begin_num_update=10),
        notes="begin_num_update=10: first step has t=11")
    add("adam", "two-index-late", dict(ALL_ON), order=[0, 0, 0, 1, 0, 1, 1],
        notes="per-index t: index 1 starts at the 4th call (t=1 while num_update=3)")
    add("adam", "mp-plain", dict(multi_precision=True), dtypes=["float16"])
    add("adam", "mp-allon", dict(ALL_ON, multi_precision=True), dtypes=["float16"])

    # Adamax ----------------------------------------------------------------------
    add("adamax", "plain", {}, zeros="after_first",
        notes="no exact zeros at step 1 (u == 0 there would give 0/0 = NaN)")
    add("adamax", "allon", dict(ALL_ON))
    add("adamax", "hyper", dict(learning_rate=0.01, beta1=0.85, beta2=0.99), zeros="after_first")
    add("adamax", "zero-grad-nan", {}, dtypes=["float64"], steps=2, expect_nonfinite=True,
        notes="exact zero gradient at step 1 with wd=0: u == 0, MXNet produces NaN")
    add("adamax", "mp-allon", dict(ALL_ON, multi_precision=True), dtypes=["float16"])

    # Nadam -----------------------------------------------------------------------
    add("nadam", "plain", {})
    add("nadam", "allon", dict(ALL_ON))
    add("nadam", "hyper", dict(learning_rate=0.01, beta1=0.85, beta2=0.99, epsilon=1e-6,
                               schedule_decay=0.01))
    add("nadam", "two-index", dict(ALL_ON), order=[0, 1, 0, 1, 0, 1],
        notes="two indices updated alternately; m_schedule is one scalar shared by all indices")
    add("nadam", "mp-allon", dict(ALL_ON, multi_precision=True), dtypes=["float16"])

    # Signum / SignSGD ------------------------------------------------------------
    add("signum", "plain", {})
    add("signum", "allon", dict(ALL_ON))
    add("signum", "allon-wdlh", dict(ALL_ON, momentum=0.9, wd_lh=0.05))
    add("signum", "signsgd-plain", dict(momentum=0.0))
    add("signum", "signsgd-allon", dict(ALL_ON, momentum=0.0),
        notes="SignSGD: rescale_grad and clip_gradient have no effect")
    add("signum", "mp-allon-wdlh", dict(ALL_ON, momentum=0.9, wd_lh=0.05, multi_precision=True),
        dtypes=["float16"])

    # LBSGD -----------------------------------------------------------------------
    add("lbsgd", "bs1-plain", {})
    add("lbsgd", "bs1-allon-mom", dict(ALL_ON, momentum=0.9))
    add("lbsgd", "bs2-linear", dict(ALL_ON, momentum=0.9, batch_scale=2, warmup_strategy="linear",
                                    warmup_epochs=2, updates_per_epoch=2), steps=5,
        notes="nwup=4: updates at calls 2 and 4 (num_cums 2, 4), none at 1, 3, 5")
    add("lbsgd", "bs2-power2", dict(ALL_ON, momentum=0.9, batch_scale=2,
                                    warmup_strategy="power2", warmup_epochs=3,
                                    updates_per_epoch=2), steps=5)
    add("lbsgd", "bs2-sqrt", dict(ALL_ON, batch_scale=2, warmup_strategy="sqrt",
                                  warmup_epochs=3, updates_per_epoch=2), steps=5)
    add("lbsgd", "bs3-linear-begin", dict(ALL_ON, momentum=0.9, batch_scale=3,
                                          warmup_strategy="linear", warmup_epochs=4,
                                          updates_per_epoch=2, begin_epoch=1), steps=5,
        notes="begin_epoch=1: num_cums starts at updates_per_epoch + 1")
    add("lbsgd", "bs1-lars", dict(ALL_ON, momentum=0.9, warmup_strategy="lars"))
    add("lbsgd", "bs2-lars", dict(ALL_ON, batch_scale=2, warmup_strategy="lars"), steps=5)
    add("lbsgd", "bs1-lars-plain", dict(warmup_strategy="lars"))
    add("lbsgd", "parse-mom", dict(learning_rate=1.2359228558422161e-05, momentum=0.9),
        notes="sgd_mom_update's lr is a float field parsed by dmlc-core from str(lr): "
              "1.2359228558422161e-05 parses 1 float ulp away from float32(lr)")

    # DCASGD ----------------------------------------------------------------------
    add("dcasgd", "plain", {})
    add("dcasgd", "allon", dict(ALL_ON))
    add("dcasgd", "parse", dict(ALL_ON, rescale_grad=1 / 11), dtypes=["float64"],
        notes="NDArray scalar ops get str(x) parsed by dmlc-core as a double: "
              "1/11 parses 1 ulp away from the double 1/11")
    add("dcasgd", "hyper", dict(ALL_ON, lamda=2.0),
        notes="large lamda so the delay compensation term is visible")
    add("dcasgd", "mp-allon", dict(ALL_ON, lamda=2.0, multi_precision=True), dtypes=["float16"])

    # Ftrl ------------------------------------------------------------------------
    add("ftrl", "plain", {})
    add("ftrl", "allon", dict(ALL_ON))
    add("ftrl", "hyper", dict(learning_rate=0.2, lamda1=0.05, beta=0.5, wd=0.02))
    add("ftrl", "mp-allon", dict(ALL_ON, multi_precision=True), dtypes=["float16"])

    # FTML ------------------------------------------------------------------------
    add("ftml", "plain", {})
    add("ftml", "allon", dict(ALL_ON))
    add("ftml", "hyper", dict(learning_rate=0.05, beta1=0.7, beta2=0.99, epsilon=1e-6))
    add("ftml", "mp-allon", dict(ALL_ON, multi_precision=True), dtypes=["float16"])

    # SGLD ------------------------------------------------------------------------
    add("sgld", "plain", {}, mx_seed=1234)
    add("sgld", "allon", dict(ALL_ON), mx_seed=4321)
    add("sgld", "small-lr", dict(learning_rate=1e-4, wd=0.1, rescale_grad=0.5,
                                 clip_gradient=0.6), mx_seed=77,
        notes="small lr so the deterministic part is not hidden by the noise")
    return specs


# --------------------------------------------------------------------------------------
# facts
# --------------------------------------------------------------------------------------
def build_facts():
    import mxnet as mx
    from mxnet import lr_scheduler as lrs
    facts = {}

    def fact(key, description, value, **extra):
        d = {"description": description, "value": value}
        d.update(extra)
        facts[key] = d

    def quiet(fn, *a, **k):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = fn(*a, **k)
        return r, buf.getvalue()

    def seq(sched, n_max=40):
        return [float(sched(n)) for n in range(n_max + 1)]

    # ---- schedulers: one object, called with n = 0, 1, ..., 40 in order -------------
    sched_defs = {
        "factor": ("FactorScheduler", dict(step=3, factor=0.5, base_lr=1.0, stop_factor_lr=1e-3)),
        "factor_step1": ("FactorScheduler", dict(step=1, factor=0.9, base_lr=0.1)),
        "multifactor": ("MultiFactorScheduler", dict(step=[5, 10, 20], factor=0.3, base_lr=1.0)),
        "poly": ("PolyScheduler", dict(max_update=30, base_lr=1.0, pwr=2, final_lr=0.01)),
        "poly_pwr1": ("PolyScheduler", dict(max_update=25, base_lr=0.5, pwr=1)),
        "cosine": ("CosineScheduler", dict(max_update=30, base_lr=1.0, final_lr=0.05)),
    }
    warm = {"": {}, "_warmup_linear": dict(warmup_steps=6, warmup_begin_lr=0.1,
                                           warmup_mode="linear"),
            "_warmup_constant": dict(warmup_steps=6, warmup_begin_lr=0.1,
                                     warmup_mode="constant")}
    for key, (cls, kw) in sched_defs.items():
        for wkey, wkw in warm.items():
            args = dict(kw, **wkw)
            s = getattr(lrs, cls)(**args)
            fact("scheduler_%s%s" % (key, wkey),
                 "lr_scheduler.%s(**kwargs)(n) for n = 0..40, called in increasing order on one "
                 "object (schedulers are stateful)" % cls,
                 seq(s), scheduler=cls, kwargs=args, n=list(range(41)))

    # non-monotone calls on a FactorScheduler: the state does not go back
    s = lrs.FactorScheduler(step=2, factor=0.5, base_lr=1.0)
    ns = [0, 1, 2, 3, 4, 5, 9, 3, 0, 10, 11]
    fact("scheduler_factor_nonmonotone",
         "FactorScheduler(step=2, factor=0.5, base_lr=1.0) called with a non-monotone n sequence",
         [float(s(n)) for n in ns], n=ns)

    # scheduler constructor errors
    errs = {}
    for label, fn in [
            ("factor_gt_1", lambda: lrs.FactorScheduler(step=2, factor=1.5)),
            ("step_lt_1", lambda: lrs.FactorScheduler(step=0)),
            ("warmup_begin_gt_base", lambda: lrs.FactorScheduler(step=2, base_lr=0.1,
                                                                 warmup_begin_lr=0.2)),
            ("bad_warmup_mode", lambda: lrs.FactorScheduler(step=2, warmup_mode="cosine")),
            ("multifactor_not_increasing", lambda: lrs.MultiFactorScheduler(step=[5, 5])),
            ("multifactor_step_lt_1", lambda: lrs.MultiFactorScheduler(step=[0, 5])),
            ("poly_max_update_lt_1", lambda: lrs.PolyScheduler(max_update=0)),
            ("cosine_max_update_lt_1", lambda: lrs.CosineScheduler(max_update=0))]:
        try:
            fn()
            errs[label] = None
        except Exception as e:  # noqa: BLE001 - recording the exception type is the point
            errs[label] = type(e).__name__
    fact("scheduler_constructor_errors",
         "exception type name raised by each invalid scheduler construction (None = accepted)",
         errs)

    # ---- lr timing: LBSGD vs SGD under FactorScheduler(step=1, factor=0.5) -----------
    def lr_seen(opt_name, steps=5, **kw):
        sched = lrs.FactorScheduler(step=1, factor=0.5, base_lr=0.1)
        opt, _ = quiet(mx.optimizer.create, opt_name, learning_rate=0.1, lr_scheduler=sched, **kw)
        seen = []
        orig = opt._get_lrs

        def spy(indices):
            r = orig(indices)
            seen.append(float(r[0]))
            return r
        opt._get_lrs = spy
        upd = mx.optimizer.get_updater(opt)
        w = mx.nd.zeros((3,), dtype="float64")
        deltas = []
        for _ in range(steps):
            before = w.asnumpy().copy()
            upd(0, mx.nd.ones((3,), dtype="float64"), w)
            deltas.append(float(before[0] - w.asnumpy()[0]))
        return seen, deltas
    for opt_name in ("sgd", "lbsgd"):
        seen, deltas = lr_seen(opt_name)
        fact("lr_timing_%s" % opt_name,
             "%s(learning_rate=0.1, lr_scheduler=FactorScheduler(step=1, factor=0.5, "
             "base_lr=0.1)), float64 weight 0, gradient 1, 5 calls: the lr returned by "
             "_get_lrs at each call, and the weight decrease per call (= float64(float32(lr)))"
             % opt_name.upper(), seen, weight_decrease=deltas)

    # ---- wd / lr multipliers --------------------------------------------------------
    names = ["fc_weight", "fc_bias", "bn_gamma", "bn_beta"]
    idx2name = dict(enumerate(names))
    for opt_name in ("sgd", "adam", "lars"):
        opt, _ = quiet(mx.optimizer.create, opt_name, wd=0.1, param_idx2name=idx2name)
        fact("get_wds_idx2name_%s" % opt_name,
             "%s(wd=0.1, param_idx2name={0:'fc_weight',1:'fc_bias',2:'bn_gamma',3:'bn_beta'})"
             "._get_wds([0,1,2,3])" % opt_name, [float(x) for x in opt._get_wds([0, 1, 2, 3])],
             names=names)
    opt, _ = quiet(mx.optimizer.create, "sgd", learning_rate=0.2, wd=0.1,
                   param_idx2name=idx2name)
    opt.set_lr_mult({"fc_weight": 0.5, 2: 3.0})
    opt.set_wd_mult({"fc_bias": 2.0, 3: 4.0})
    fact("lr_wd_mult_by_name_and_index",
         "SGD(learning_rate=0.2, wd=0.1, param_idx2name=...) after set_lr_mult({'fc_weight':0.5, "
         "2:3.0}) and set_wd_mult({'fc_bias':2.0, 3:4.0}): _get_lrs / _get_wds for [0,1,2,3] "
         "(set_wd_mult replaces the name-based zero multipliers)",
         {"lrs": [float(x) for x in opt._get_lrs([0, 1, 2, 3])],
          "wds": [float(x) for x in opt._get_wds([0, 1, 2, 3])],
          "wd_mult": {str(k): v for k, v in opt.wd_mult.items()}})
    opt, _ = quiet(mx.optimizer.create, "sgd", wd=0.1, param_idx2name=idx2name)
    fact("wd_mult_dict_after_idx2name",
         "SGD(wd=0.1, param_idx2name=...).wd_mult right after construction",
         {str(k): v for k, v in opt.wd_mult.items()})

    # ---- learning_rate overriding the scheduler's base_lr ---------------------------
    for cls, kw in [("CosineScheduler", dict(max_update=10, base_lr=1.0)),
                    ("PolyScheduler", dict(max_update=10, base_lr=1.0, pwr=2)),
                    ("FactorScheduler", dict(step=1, factor=0.5, base_lr=1.0))]:
        sched = getattr(lrs, cls)(**kw)
        opt, out = quiet(mx.optimizer.create, "adam", lr_scheduler=sched)
        base_after = float(sched.base_lr)
        lr1 = float(sched(1))
        lr2 = float(sched(2))
        fact("adam_default_lr_with_%s" % cls,
             "Adam(lr_scheduler=%s(%s)) (default learning_rate=0.001): scheduler base_lr after "
             "construction, scheduler(1), scheduler(2), and whether a message was printed" % (
                 cls, ", ".join("%s=%r" % kv for kv in kw.items())),
             {"base_lr_after": base_after, "lr_1": lr1, "lr_2": lr2,
              "printed": out.strip()})
    sched = lrs.CosineScheduler(max_update=10, base_lr=1.0)
    opt, out = quiet(mx.optimizer.create, "ftrl", lr_scheduler=sched)
    fact("ftrl_scheduler_base_lr",
         "Ftrl(lr_scheduler=CosineScheduler(max_update=10, base_lr=1.0)): Ftrl does not forward "
         "learning_rate to the base class; scheduler base_lr after construction, opt.lr, "
         "opt._get_lr(0) at num_update=0",
         {"base_lr_after": float(sched.base_lr), "opt_lr": float(opt.lr),
          "get_lr_0": float(opt._get_lr(0)), "printed": out.strip()})
    sched = lrs.FactorScheduler(step=1, factor=0.5, base_lr=0.3)
    opt, out = quiet(mx.optimizer.create, "sgd", lr_scheduler=sched)
    fact("sgd_scheduler_no_lr",
         "SGD(lr_scheduler=FactorScheduler(step=1, factor=0.5, base_lr=0.3)) without "
         "learning_rate: opt.lr and the scheduler's base_lr afterwards",
         {"opt_lr": opt.lr, "base_lr_after": float(sched.base_lr), "printed": out.strip()})

    # ---- set_learning_rate -----------------------------------------------------------
    sched = lrs.FactorScheduler(step=1, factor=0.5, base_lr=0.1)
    opt, _ = quiet(mx.optimizer.create, "sgd", learning_rate=0.1, lr_scheduler=sched)
    with warnings.catch_warnings(record=True) as wlist:
        warnings.simplefilter("always")
        try:
            opt.set_learning_rate(0.5)
            raised = None
        except BaseException as e:  # noqa: BLE001
            raised = type(e).__name__
    fact("set_learning_rate_with_scheduler",
         "SGD(learning_rate=0.1, lr_scheduler=FactorScheduler(...)).set_learning_rate(0.5): "
         "exception raised (type name), warnings emitted via the warnings module, and opt.lr after",
         {"raised": raised, "warnings_emitted": len(wlist), "opt_lr_after": opt.lr,
          "learning_rate_property": float(opt.learning_rate)})
    opt, _ = quiet(mx.optimizer.create, "sgd", learning_rate=0.1)
    opt.set_learning_rate(0.5)
    fact("set_learning_rate_without_scheduler",
         "SGD(learning_rate=0.1).set_learning_rate(0.5): opt.lr and opt.learning_rate after",
         {"opt_lr": opt.lr, "learning_rate": opt.learning_rate})
    sched = lrs.FactorScheduler(step=1, factor=0.5, base_lr=0.1)
    opt, out = quiet(mx.optimizer.create, "sgd", learning_rate=0.2, lr_scheduler=sched)
    fact("lr_and_scheduler_mismatch_message",
         "SGD(learning_rate=0.2, lr_scheduler=FactorScheduler(base_lr=0.1)): the message is "
         "print()ed to stdout (not warnings.warn); base_lr is overwritten",
         {"stdout": out.strip(), "base_lr_after": float(sched.base_lr)})

    # ---- defaults of every registered optimizer --------------------------------------
    defaults = {}
    for name in sorted(mx.optimizer.Optimizer.opt_registry):
        if name == "test":
            continue
        try:
            opt, _ = quiet(mx.optimizer.create, name)
        except Exception as e:  # noqa: BLE001
            defaults[name] = {"error": type(e).__name__}
            continue
        d = {}
        for k, v in sorted(vars(opt).items()):
            if isinstance(v, (bool, int, float, str)) or v is None:
                d[k] = v
        defaults[name] = d
    fact("optimizer_defaults",
         "scalar attributes of mx.optimizer.create(name) with no arguments (vars(opt)); "
         "includes lr, wd, rescale_grad, clip_gradient, aggregate_num and the "
         "optimizer-specific hyper-parameters", defaults)
    fact("registry_names", "sorted(mx.optimizer.Optimizer.opt_registry)",
         sorted(mx.optimizer.Optimizer.opt_registry))

    # ---- update counts ----------------------------------------------------------------
    opt, _ = quiet(mx.optimizer.create, "adam", begin_num_update=10)
    upd = mx.optimizer.get_updater(opt)
    w = mx.nd.ones((3,))
    upd(0, mx.nd.ones((3,)), w)
    t_first = opt._index_update_count[0]
    upd(1, mx.nd.ones((3,)), mx.nd.ones((3,)))
    fact("begin_num_update_10",
         "Adam(begin_num_update=10): t after the first update of index 0; then t of a new index 1 "
         "after its first update, and num_update",
         {"t_index0_first": t_first, "t_index1_first": opt._index_update_count[1],
          "num_update": opt.num_update})

    # ---- LBSGD helpers ------------------------------------------------------------------
    lbm = {}
    for strat in ("linear", "power2", "sqrt", "other"):
        opt, _ = quiet(mx.optimizer.create, "lbsgd", warmup_strategy=strat, batch_scale=4,
                       warmup_epochs=2, updates_per_epoch=4)
        lbm[strat] = [float(opt._get_lbmult(n)) for n in range(0, 11)]
    fact("lbsgd_get_lbmult",
         "LBSGD(batch_scale=4, warmup_epochs=2, updates_per_epoch=4)._get_lbmult(nup) for "
         "nup = 0..10 (nwup = 8) per warmup_strategy", lbm, nup=list(range(0, 11)))
    opt, _ = quiet(mx.optimizer.create, "lbsgd", warmup_strategy="linear", batch_scale=4,
                   warmup_epochs=1, updates_per_epoch=1)
    fact("lbsgd_get_lbmult_nwup1",
         "LBSGD(batch_scale=4, warmup_epochs=1, updates_per_epoch=1)._get_lbmult(0..3) "
         "(nwup = 1)", [float(opt._get_lbmult(n)) for n in range(4)])

    # ---- aggregate_num ------------------------------------------------------------------
    fact("aggregate_num",
         "optimizer.aggregate_num per optimizer (MXNET_OPTIMIZER_AGGREGATION_SIZE unset)",
         {k: v.get("aggregate_num") for k, v in defaults.items()})

    # ---- errors -------------------------------------------------------------------------
    def err_of(fn):
        try:
            quiet(fn)
            return None
        except Exception as e:  # noqa: BLE001
            lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
            key = [ln for ln in lines if ln.startswith("MXNetError:")]
            line = (key or lines or [""])[0]
            return {"type": type(e).__name__, "message": line[:200]}

    def one_update(name, dtype="float32", n=3, **kw):
        def fn():
            opt = mx.optimizer.create(name, **kw)
            upd = mx.optimizer.get_updater(opt)
            w = mx.nd.ones((n,), dtype=dtype)
            upd(0, mx.nd.ones((n,), dtype=dtype), w)
            w.wait_to_read()
            return w.asnumpy()
        return fn
    errors = {}
    for name in ("adagrad", "rmsprop", "adadelta", "ftrl"):
        errors["%s_float64" % name] = err_of(one_update(name, "float64"))
        errors["%s_float16_no_mp" % name] = err_of(one_update(name, "float16"))
    errors["dcasgd_momentum_n3"] = err_of(one_update("dcasgd", momentum=0.9))
    errors["dcasgd_momentum_n1"] = err_of(one_update("dcasgd", n=1, momentum=0.9))
    errors["signsgd_wd_lh"] = err_of(one_update("signum", momentum=0.0, wd_lh=0.1))
    errors["rmsprop_rho_kwarg"] = err_of(lambda: mx.optimizer.create("rmsprop", rho=0.9))
    errors["adamax_epsilon_kwarg"] = err_of(lambda: mx.optimizer.create("adamax", epsilon=1e-8))
    errors["adamw_registry"] = err_of(lambda: mx.optimizer.create("adamw"))
    fact("errors",
         "exception type and message (the 'MXNetError:' line for MXNet errors) for invalid uses (None = no exception). "
         "One update through mx.optimizer.get_updater on a ones((n,)) weight",
         errors)

    # ---- scalar / cast facts -------------------------------------------------------------
    x = mx.nd.array(np.array([0.7, -0.7, 0.3], dtype=np.float64), dtype="float64")
    fact("nd_clip_bound_float64",
         "mx.nd.clip(float64 [0.7, -0.7, 0.3], -0.6, 0.6) as hex: the bounds are float32 "
         "(real_t), so the result is float64(float32(0.6))",
         [float(v).hex() for v in mx.nd.clip(x, -0.6, 0.6).asnumpy()])
    fact("nd_mul_scalar_float64",
         "(mx.nd float64 [1.0]) * 0.1 as hex: NDArray scalar operands are doubles "
         "(not float32-rounded) for float64 arrays",
         float((mx.nd.array([1.0], dtype="float64") * 0.1).asnumpy()[0]).hex())
    fact("nd_mul_scalar_float32",
         "(mx.nd float32 [1.0]) * 0.1 as hex", float((mx.nd.array([1.0], dtype="float32")
                                                     * 0.1).asnumpy()[0]).hex())

    # ---- how scalar hyper-parameters reach the operators ---------------------------------
    # Python passes every operator keyword as str(value); MXNet parses the string with
    # dmlc-core's own float parser (float and double fields), or with the C++ stream parser
    # (Tuple<float> fields such as multi_sgd_update's lrs/wds). Measured here on a fixed
    # sample of values, each read back exactly through a float64 or float32 computation.
    prng = np.random.default_rng(20240601)
    sample = [float(v) for v in np.exp(prng.uniform(np.log(1e-9), np.log(10.0), 60))]
    sample += [0.1, 0.01, 0.001, 1e-8, 1e-7, 0.9, 0.999, 0.6, 0.55, 1 / 3, 1 / 11, 1 / 10001,
               1.2359228558422161e-05, 0.00012345678901234567, 0.025915127955944278,
               0.0031622776601683794, 3.0000000000000004, 123.456789]
    rows = []
    for v in sample:
        one64 = mx.nd.ones((1,), dtype="float64")
        scalar_op = float((one64 * v).asnumpy()[0])
        w = mx.nd.zeros((1,), dtype="float32")
        mx.nd.sgd_update(w, -mx.nd.ones((1,), dtype="float32"), lr=v, wd=0.0, rescale_grad=1.0,
                         out=w)
        float_field = float(w.asnumpy()[0])
        w = mx.nd.zeros((1,), dtype="float64")
        mx.nd.multi_sgd_update(w, -mx.nd.ones((1,), dtype="float64"), lrs=[v], wds=[0.0],
                               num_weights=1, rescale_grad=1.0, out=[w])
        tuple_float = float(w.asnumpy()[0])
        wt, gr, d, vv, zz = [mx.nd.zeros((1,), dtype="float64") for _ in range(5)]
        mx.nd.ftml_update(wt, gr, d, vv, zz, lr=1.0, beta1=0.0, beta2=0.0, epsilon=v, t=1,
                          wd=0.0, rescale_grad=1.0, out=wt)
        double_field = float(d.asnumpy()[0])
        rows.append({"str": str(v), "exact_hex": v.hex(), "scalar_op_double_hex": scalar_op.hex(),
                     "float_field_hex": float_field.hex(), "tuple_float_hex": tuple_float.hex(),
                     "double_field_hex": double_field.hex()})
    fact("hyperparameter_parsing",
         "For each sample value v (given as the Python float whose str() is 'str'): the double an "
         "NDArray scalar op receives ((float64 ones(1)) * v); the float a kernel float field "
         "receives (sgd_update(w=0, grad=-1, lr=v) -> v); the float a Tuple<float> field "
         "receives (multi_sgd_update(lrs=[v]) on float64, hex of float64(float)); the double a "
         "kernel double field receives (ftml_update epsilon=v: d = eps with lr=1, beta1=0, "
         "zero grad/state). Compare with exact_hex (= v.hex()) and float32(v)", rows)

    # ---- multi-precision state layouts ---------------------------------------------------
    layouts = {}
    for name, kw in [("sgd", dict(momentum=0.9)), ("sgd", {}), ("nag", dict(momentum=0.9)),
                     ("adam", {}), ("adagrad", {}), ("rmsprop", {}),
                     ("rmsprop", dict(centered=True)), ("adadelta", {}), ("adamax", {}),
                     ("nadam", {}), ("signum", {}), ("signum", dict(momentum=0.0)),
                     ("lbsgd", dict(momentum=0.9)), ("dcasgd", {}), ("ftrl", {}), ("ftml", {}),
                     ("sgld", {}), ("lars", dict(momentum=0.9)), ("lamb", {})]:
        opt, _ = quiet(mx.optimizer.create, name, multi_precision=True, **kw)
        w16 = mx.nd.array(np.array([1.5, -2.25, 3.0]), dtype="float16")
        st, _ = quiet(opt.create_state_multi_precision, 0, w16)

        def describe(s):
            if s is None:
                return "None"
            if isinstance(s, mx.nd.NDArray):
                tag = "w32" if (s.dtype == np.float32 and
                                np.array_equal(s.asnumpy(), [1.5, -2.25, 3.0])) else "zeros"
                return "%s:%s" % (tag, np.dtype(s.dtype).name)
            return "(" + ", ".join(describe(x) for x in s) + ")"
        key = name + ("(" + ",".join("%s=%s" % kv for kv in kw.items()) + ")" if kw else "")
        layouts[key] = describe(st)
        if name == "lbsgd":
            st2, _ = quiet(opt.create_state, 0, w16)
            layouts["lbsgd(momentum=0.9).create_state"] = describe(st2)
    fact("multi_precision_state_layout",
         "opt.create_state_multi_precision(0, float16 weight) with multi_precision=True: "
         "'w32' = float32 copy of the weight, 'zeros' = a zero-initialised state array",
         layouts)

    # ---- lr actually used by the first updates of Adam with a Cosine schedule -------------
    sched = lrs.CosineScheduler(max_update=10, base_lr=1.0)
    opt, _ = quiet(mx.optimizer.create, "adam", lr_scheduler=sched)
    used = []
    orig_get_lrs = opt._get_lrs

    def spy_lrs(indices):
        r = orig_get_lrs(indices)
        used.append(float(r[0]))
        return r
    opt._get_lrs = spy_lrs
    upd = mx.optimizer.get_updater(opt)
    w = mx.nd.zeros((2,), dtype="float64")
    for _ in range(3):
        upd(0, mx.nd.ones((2,), dtype="float64"), w)
    fact("adam_cosine_lr_used",
         "Adam(lr_scheduler=CosineScheduler(max_update=10, base_lr=1.0)): the lr returned by "
         "_get_lrs in the first 3 updates (num_update 1, 2, 3), although base_lr became 0.001",
         used)

    # ---- LBSGD 'lars' multiplier on sample inputs -------------------------------------------
    opt, _ = quiet(mx.optimizer.create, "lbsgd", warmup_strategy="lars")
    lrng = np.random.default_rng(99)
    lars_rows = []
    for dt, n, wd in [("float32", 11, 0.1), ("float32", 33, 0.0), ("float32", 7, 1e-4),
                      ("float64", 11, 0.1), ("float32", 5, 100.0), ("float32", 6, 0.0)]:
        wv = lrng.standard_normal(n).astype(dt)
        gv = (3 * lrng.standard_normal(n)).astype(dt)
        if n == 6:
            gv *= 1e-5          # hits the upper clamp (100)
        if n == 5:
            wv *= 1e-4          # hits the lower clamp (0.01)
        r = opt._get_lars(mx.nd.array(wv, dtype=dt), mx.nd.array(gv, dtype=dt), wd)
        lars_rows.append({"weight": enc(wv), "grad": enc(gv), "wd": wd, "lars": enc_scalar(r)})
    fact("lbsgd_get_lars_samples",
         "LBSGD._get_lars(weight, g, wd) (Python float) on sample inputs: float32 squares summed "
         "by numpy in float32 (asnumpy().sum()), then the ratio in double, clamped to [0.01, 100]",
         lars_rows)

    # ---- gluon param_dict multipliers -----------------------------------------------------
    from mxnet import gluon
    dense = gluon.nn.Dense(2, in_units=3)
    dense.initialize()
    dense.weight.lr_mult = 0.5
    dense.weight.wd_mult = 2.0
    tr = gluon.Trainer(dense.collect_params(), "sgd", {"learning_rate": 0.1, "wd": 0.1})
    opt = tr._optimizer
    names = sorted(dense.collect_params().keys())
    before = {"lrs": [float(x) for x in opt._get_lrs([0, 1])],
              "wds": [float(x) for x in opt._get_wds([0, 1])]}
    dense.weight.lr_mult = 0.25
    after = {"lrs": [float(x) for x in opt._get_lrs([0, 1])]}
    fact("gluon_param_dict_multipliers",
         "gluon Dense(2, in_units=3) with weight.lr_mult=0.5, weight.wd_mult=2.0, Trainer sgd "
         "lr=0.1 wd=0.1 (params sorted by name: index 0 = bias, 1 = weight): _get_lrs/_get_wds "
         "for [0, 1]; then weight.lr_mult=0.25 set after the Trainer was built",
         {"param_names_sorted": names, "before": before, "after_lr_mult_change": after,
          "bias_wd_mult": dense.bias.wd_mult})

    # ---- updater state pickle -------------------------------------------------------------
    opt, _ = quiet(mx.optimizer.create, "adam")
    upd = mx.optimizer.get_updater(opt)
    upd(0, mx.nd.ones((2,), dtype="float64"), mx.nd.ones((2,), dtype="float64"))
    blob = upd.get_states(dump_optimizer=True)
    fact("updater_get_states_pickle",
         "Updater.get_states(dump_optimizer=True) after one Adam update: first two bytes (hex) "
         "= pickle protocol marker, and the optimizer's _index_update_count after loading",
         {"first_bytes_hex": blob[:2].hex(),
          "index_update_count": {str(k): v for k, v in
                                 __import__("pickle").loads(blob)[1]._index_update_count.items()}})

    # ---- Trainer rescale ----------------------------------------------------------------
    p = gluon.Parameter("w", shape=(2,), init=mx.init.One())
    p.initialize()
    tr = gluon.Trainer([p], "sgd", {"learning_rate": 0.1, "rescale_grad": 2.0})
    with mx.autograd.record():
        loss = (p.data() * 3).sum()
    loss.backward()
    tr.step(4)
    fact("trainer_step_rescale",
         "gluon.Trainer(..., 'sgd', {'learning_rate': 0.1, 'rescale_grad': 2.0}).step(4): "
         "optimizer.rescale_grad after step, and the weight after one step from 1.0 with grad 3",
         {"rescale_grad": tr._optimizer.rescale_grad,
          "weight": [float(v) for v in p.data().asnumpy()]})
    return facts


# --------------------------------------------------------------------------------------
def provenance(argv):
    import mxnet as mx
    with open(os.path.abspath(__file__), "rb") as f:
        script_sha = hashlib.sha256(f.read()).hexdigest()
    feats = mx.runtime.Features()
    return {
        "generator": "tests/data/mxnet/generate.py",
        "generator_sha256": script_sha,
        "format_version": FORMAT_VERSION,
        "mxnet_version": mx.__version__,
        "mxnet_features_enabled": sorted(f.name for f in feats.values() if f.enabled),
        "numpy_version": np.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([sys.executable, "tests/data/mxnet/generate.py"] + argv[1:]),
        "api": "opt = mx.optimizer.create(optimizer, **kwargs); upd = mx.optimizer.get_updater(opt);"
               " per call: upd(index, mx.nd.array(grad, dtype), weight) on context cpu(0);"
               " states read from upd.states[index]",
    }


def main(argv=None):
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--force", action="store_true", help="overwrite existing data files")
    ap.add_argument("--only", nargs="*", default=None,
                    help="optimizer names (and/or 'facts') to generate; default: all")
    ap.add_argument("--out", default=HERE, help="output folder (default: this folder)")
    args = ap.parse_args(argv[1:])

    import mxnet as mx
    assert mx.__version__ == "1.9.1", mx.__version__

    specs = build_specs()
    by_opt = {}
    for s in specs:
        by_opt.setdefault(s["optimizer"], []).append(s)
    targets = list(by_opt) + ["facts"]
    if args.only:
        unknown = set(args.only) - set(targets)
        if unknown:
            ap.error("unknown names: %s" % ", ".join(sorted(unknown)))
        targets = [t for t in targets if t in args.only]
    paths = {t: os.path.join(args.out, t + ".json") for t in targets}
    existing = [p for p in paths.values() if os.path.exists(p)]
    if existing and not args.force:
        sys.stderr.write("refusing to overwrite existing data (use --force):\n  "
                         + "\n  ".join(existing) + "\n")
        return 2

    prov = provenance(argv)
    for t in targets:
        if t == "facts":
            data = {"provenance": prov, "facts": build_facts()}
        else:
            cases = [run_case(s) for s in by_opt[t]]
            data = {"provenance": prov, "optimizer": t, "cases": cases}
        dump_json(data, paths[t])
        n = len(data["facts"]) if t == "facts" else len(data["cases"])
        print("wrote %s (%d %s, %d bytes)" % (os.path.relpath(paths[t]), n,
                                               "facts" if t == "facts" else "cases",
                                               os.path.getsize(paths[t])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
