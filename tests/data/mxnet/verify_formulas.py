#!/usr/bin/env python
"""Probe: which exact float formula reproduces the golden MXNet data bit for bit.

Not a test and not part of the library.  It replays every case of the golden data
(tests/data/mxnet/*.json) with small numpy candidate formulas, evaluated one IEEE
operation at a time in the case's dtype, and reports for each candidate whether it matches
MXNet bit for bit on every call (weights and every state array).  Where several candidate
operation orders exist, each is tried, so the report shows which order MXNet uses.

Runs with numpy only (any version >= 1.23)::

    python tests/data/mxnet/verify_formulas.py            # summary
    python tests/data/mxnet/verify_formulas.py -v         # per case
    python tests/data/mxnet/verify_formulas.py --parse=exact   # hyper-parameters correctly
                                                   # rounded instead of dmlc-parsed

Scalar conventions used below (see README.md, "Facts for bit-exact reproduction"):
  K(x): a kernel hyper-parameter (dmlc ``float`` field): T(float32(x))
  S(x): a Python scalar given to an NDArray scalar op (_mul_scalar etc., a double): T(x)
  C(x): an ``nd.clip`` bound (real_t = float32): T(float32(x))
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import mxnet_data  # noqa: E402

F32 = np.float32
# PARSE = "dmlc": hyper-parameters reach MXNet as str(x) and are parsed by dmlc-core's
# ParseFloat (not correctly rounded); "exact": correctly rounded conversion (for comparison).
PARSE = "dmlc"


def parse_dmlc(s, T):
    """Re-implementation of the algorithm of dmlc-core's ParseFloat<T> on a decimal string:
    integer part, then up to 19 fraction digits as double(digits)/double(10**n) added in T,
    then an exponent applied by dividing/multiplying by 1e8/10 powers built up in T."""
    i, neg = 0, False
    if s[i] in "+-":
        neg, i = s[i] == "-", i + 1
    if s[i:].lower().startswith(("inf", "nan")):
        return T(float(s))
    predec = 0
    while i < len(s) and s[i].isdigit():
        predec, i = predec * 10 + int(s[i]), i + 1
    value = T(float(predec))
    if i < len(s) and s[i] == ".":
        i += 1
        val2, pow10, cnt = 0, 1, 0
        while i < len(s) and s[i].isdigit():
            if cnt < 19:
                val2, pow10 = val2 * 10 + int(s[i]), pow10 * 10
            i, cnt = i + 1, cnt + 1
        value = T(value + T(np.float64(float(val2)) / np.float64(float(pow10))))
    if i < len(s) and s[i] in "eE":
        i += 1
        frac = s[i] == "-"
        if s[i] in "+-":
            i += 1
        expon = int(s[i:])
        scale = T(1.0)
        while expon >= 8:
            scale, expon = T(scale * T(F32(1e8))), expon - 8
        while expon > 0:
            scale, expon = T(scale * T(10.0)), expon - 1
        value = T(value / scale) if frac else T(value * scale)
    return -value if neg else value


def K(T, x):
    """A kernel hyper-parameter declared `float` in the op's dmlc Parameter struct."""
    if PARSE == "exact":
        return T(F32(x))
    return T(parse_dmlc(repr(float(x)), F32))


def KT(T, x):
    """An element of a Tuple<float> parameter (multi_sgd lrs/wds): correctly rounded."""
    return T(F32(x))


def S(T, x):
    """A Python scalar given to an NDArray scalar op (double field), cast to the dtype."""
    if PARSE == "exact":
        return T(x)
    return T(parse_dmlc(repr(float(x)), np.float64))


def KD(T, x):
    """A kernel hyper-parameter declared `double` (FTML epsilon)."""
    return S(T, x)


def clip(x, c):
    return np.minimum(np.maximum(x, -c), c)     # = mshadow clip: c if x>c; -c if x<-c; else x


def sign(x):
    return np.sign(x).astype(x.dtype)


def hp(case):
    """Hyper-parameters: MXNet's defaults (facts.json optimizer_defaults) + case kwargs."""
    d = dict(DEFAULTS[case["optimizer"]])
    for k, v in case["kwargs"].items():
        k = {"learning_rate": "lr", "eps": "float_stable_eps"}.get(k, k)
        d[k] = v
    return d


# ------------------------------------------------------------------------------------
# candidate update rules.  Each: (p, T, w, st, g, t, ctx, v) -> (w, st)
#   p hyper-params, T compute dtype, st dict of state arrays, t per-index count after
#   increment, ctx per-optimizer shared dict, v the variant name.
# ------------------------------------------------------------------------------------
def sgd_like_grad_term(p, T, g, v_noclip, tuple_lr=False):
    """The lr*g part of the SGD kernels: lr*clip(rs*g, c), or unclipped (lr*rs)*g / lr*(rs*g)."""
    lr, rs = (KT if tuple_lr else K)(T, p["lr"]), K(T, p["rescale_grad"])
    if p["clip_gradient"]:
        return lr * clip(rs * g, K(T, p["clip_gradient"]))
    return (lr * rs) * g if v_noclip == "(lr*rs)*g" else lr * (rs * g)


def upd_sgd(p, T, w, st, g, t, ctx, v):
    lr, wd, mu = K(T, p["lr"]), K(T, p["wd"]), K(T, p["momentum"])
    if v.startswith("multi"):        # lrs / wds are Tuple<float> parameters
        lr, wd = KT(T, p["lr"]), KT(T, p["wd"])
    noclip = "lr*(rs*g)" if "lr*(rs*g)" in v else "(lr*rs)*g"
    gt = sgd_like_grad_term(p, T, g, noclip, tuple_lr=v.startswith("multi"))
    if v.startswith("multi"):        # multi_sgd(_mom)_update: mom = (mu*mom - (lr*wd)*w) - lr*g
        mom = st.get("mom", np.zeros_like(w))
        mom = (mu * mom - (lr * wd) * w) - gt
        if p["momentum"] > 0:
            st["mom"] = mom
        return w + mom, st
    if v.startswith("sgd_update"):   # sgd_update form even for momentum 0
        if p["momentum"] > 0:
            raise NotImplementedError
        return (T(1) - lr * wd) * w - gt, st
    if v.startswith("textbook"):     # w - lr*(g + wd*w)
        if p["momentum"] > 0:
            raise NotImplementedError
        return w - (gt + lr * (wd * w)), st
    raise KeyError(v)


def upd_nag(p, T, w, st, g, t, ctx, v):
    lr, wd, mu = K(T, p["lr"]), K(T, p["wd"]), K(T, p["momentum"])
    rs = K(T, p["rescale_grad"])
    if p["momentum"] == 0:                                     # sgd_update
        gt = sgd_like_grad_term(p, T, g, "(lr*rs)*g")
        return (T(1) - lr * wd) * w - gt, st
    gg = clip(rs * g, K(T, p["clip_gradient"])) if p["clip_gradient"] else rs * g
    m1 = mu * st["mom"]
    w_new = w - m1 + (mu + T(1)) * (m1 - lr * (gg + wd * w))
    w_in_mom = w_new if v == "aliased" else w
    st["mom"] = m1 - lr * (gg + wd * w_in_mom)
    return w_new, st


def upd_adagrad(p, T, w, st, g, t, ctx, v):
    lr, wd, rs, eps = p["lr"], p["wd"], p["rescale_grad"], p["float_stable_eps"]
    gg = g * S(T, rs)
    if p["clip_gradient"] is not None:
        gg = clip(gg, K(T, p["clip_gradient"]))
    h = st["h"] + gg * gg
    div = gg / np.sqrt(h + S(T, eps))
    if v == "python":          # w += (div + w*wd) * (-lr)
        w = w + (div + w * S(T, wd)) * S(T, -lr)
    elif v == "distributed":   # w -= lr*div + lr*wd*w
        w = w - (S(T, lr) * div + S(T, lr * wd) * w)
    st["h"] = h
    return w, st


def upd_rmsprop(p, T, w, st, g, t, ctx, v):
    lr, wd, rs = K(T, p["lr"]), K(T, p["wd"]), K(T, p["rescale_grad"])
    g1, eps = K(T, p["gamma1"]), K(T, p["epsilon"])
    gg = rs * g + wd * w
    if p["clip_gradient"]:
        gg = clip(gg, K(T, p["clip_gradient"]))
    if p["centered"]:
        # kernel (variant "mxnet"):  n = ((1-g1)*g)*g + g1*n ; delta = g2*delta - (lr*g)/sqrt(..)
        g2 = K(T, p["gamma2"])
        if v == "mxnet":
            n = ((T(1) - g1) * gg) * gg + g1 * st["n"]
        else:
            n = (T(1) - g1) * (gg * gg) + g1 * st["n"]
        gb = (T(1) - g1) * gg + g1 * st["g"]
        den = np.sqrt((n - gb * gb) + eps)
        step = (lr * gg) / den if v == "mxnet" else lr * (gg / den)
        delta = g2 * st["delta"] - step
        w = w + delta
        st["g"], st["delta"] = gb, delta
    else:
        # kernel (variant "mxnet"):  n = (1-g1)*(g*g) + g1*n ; w = w - lr*(g/sqrt(n+eps))
        if v == "mxnet":
            n = (T(1) - g1) * (gg * gg) + g1 * st["n"]
            w = w - lr * (gg / np.sqrt(n + eps))
        else:
            n = ((T(1) - g1) * gg) * gg + g1 * st["n"]
            w = w - (lr * gg) / np.sqrt(n + eps)
    if p["clip_weights"]:
        w = clip(w, K(T, p["clip_weights"]))
    st["n"] = n
    return w, st


def upd_adadelta(p, T, w, st, g, t, ctx, v):
    rho, eps, wd, rs = p["rho"], p["epsilon"], p["wd"], p["rescale_grad"]
    gg = g * S(T, rs)
    if p["clip_gradient"] is not None:
        gg = clip(gg, K(T, p["clip_gradient"]))
    acc_g = st["acc_g"] * S(T, rho)
    acc_g = acc_g + (S(T, 1.0 - rho) * gg) * gg
    if v == "python":
        cd = (np.sqrt(st["acc_delta"] + S(T, eps)) / np.sqrt(acc_g + S(T, eps))) * gg
    else:
        cd = np.sqrt(st["acc_delta"] + S(T, eps)) * (gg / np.sqrt(acc_g + S(T, eps)))
    acc_d = st["acc_delta"] * S(T, rho)
    acc_d = acc_d + (S(T, 1.0 - rho) * cd) * cd
    w = w - (cd + S(T, wd) * w)
    st["acc_g"], st["acc_delta"] = acc_g, acc_d
    return w, st


def upd_adam(p, T, w, st, g, t, ctx, v):
    b1, b2 = p["beta1"], p["beta2"]
    coef1, coef2 = 1.0 - b1 ** t, 1.0 - b2 ** t
    if "lr*(sqrt/c1)" in v:
        lr_t = p["lr"] * (math.sqrt(coef2) / coef1)
    else:
        lr_t = (p["lr"] * math.sqrt(coef2)) / coef1
    lr = T(lr_t) if "lr_t-double" in v else K(T, lr_t)
    wd, rs, eps = K(T, p["wd"]), K(T, p["rescale_grad"]), K(T, p["epsilon"])
    B1, B2 = K(T, b1), K(T, b2)
    gg = g * rs + w * wd
    if p["clip_gradient"]:
        gg = clip(gg, K(T, p["clip_gradient"]))
    m = B1 * st["mean"] + (T(1) - B1) * gg
    var = B2 * st["var"] + ((T(1) - B2) * gg) * gg
    w = w - (lr * m) / (np.sqrt(var) + eps)
    st["mean"], st["var"] = m, var
    return w, st


def upd_adamax(p, T, w, st, g, t, ctx, v):
    b1, b2 = p["beta1"], p["beta2"]
    lr = p["lr"] / (1.0 - b1 ** t)
    gg = g * S(T, p["rescale_grad"]) + S(T, p["wd"]) * w
    if p["clip_gradient"] is not None:
        gg = clip(gg, K(T, p["clip_gradient"]))
    if v == "python":
        m = st["m"] * S(T, b1) + S(T, 1.0 - b1) * gg
    else:      # kernel-style float32 constants
        m = st["m"] * K(T, b1) + (T(1) - K(T, b1)) * gg
    u = np.maximum(S(T, b2) * st["u"], np.abs(gg))
    with np.errstate(invalid="ignore", divide="ignore"):
        w = w - (S(T, lr) * m) / u
    st["m"], st["u"] = m, u
    return w, st


def upd_nadam(p, T, w, st, g, t, ctx, v):
    b1, b2, eps, sd = p["beta1"], p["beta2"], p["epsilon"], p["schedule_decay"]
    gg = g * S(T, p["rescale_grad"]) + S(T, p["wd"]) * w
    if p["clip_gradient"] is not None:
        gg = clip(gg, K(T, p["clip_gradient"]))
    mom_t = b1 * (1. - 0.5 * (pow(0.96, t * sd)))
    mom_t1 = b1 * (1. - 0.5 * (pow(0.96, (t + 1) * sd)))
    key = "m_schedule" if v != "per-index" else ("m_schedule", ctx["index"])
    ms = ctx.get(key, 1.0) * mom_t
    ctx[key] = ms
    ms_next = ms * mom_t1
    m = st["m"] * S(T, b1) + S(T, 1. - b1) * gg
    vv = st["v"] * S(T, b2) + (S(T, 1. - b2) * gg) * gg
    if v == "div-as-mul":
        g_p = gg * S(T, 1. / (1. - ms))
        m_p = m * S(T, 1. / (1. - ms_next))
        v_p = vv * S(T, 1. / (1. - pow(b2, t)))
    else:
        g_p = gg / S(T, 1. - ms)
        m_p = m / S(T, 1. - ms_next)
        v_p = vv / S(T, 1. - pow(b2, t))
    m_bar = S(T, 1. - mom_t) * g_p + S(T, mom_t1) * m_p
    w = w - (S(T, p["lr"]) * m_bar) / (np.sqrt(v_p) + S(T, eps))
    st["m"], st["v"] = m, vv
    ctx["last_m_schedule"] = ms
    return w, st


def upd_signum(p, T, w, st, g, t, ctx, v):
    lr, wd, mu = K(T, p["lr"]), K(T, p["wd"]), K(T, p["momentum"])
    if p["momentum"] == 0:                                     # signsgd_update
        return (T(1) - lr * wd) * w - lr * sign(g), st
    rs = K(T, p["rescale_grad"])
    gg = clip(rs * g, K(T, p["clip_gradient"])) if p["clip_gradient"] else rs * g
    if v == "kernel":
        mom = mu * st["mom"] - ((T(1) - mu) * wd) * w - (T(1) - mu) * gg
    else:
        mom = mu * st["mom"] - (T(1) - mu) * (wd * w + gg)
    st["mom"] = mom
    wdlh = K(T, p["wd_lh"])
    return (T(1) - lr * wdlh) * w + lr * sign(mom), st


def upd_lbsgd(p, T, w, st, g, t, ctx, v):
    idx = ctx["index"]
    cg = ctx.setdefault(("cum", idx), {"cum": None, "n": 0})
    init_updates = p["begin_epoch"] * p["updates_per_epoch"] if "begin_epoch" in p else 0
    lr_py = ctx["lr_before_count"]
    if cg["n"] > 0:
        cum = g.copy() if cg["cum"] is None else cg["cum"] + g
        cg["n"] += 1
    else:
        cum, cg["n"] = g.copy(), init_updates + 1
    cg["cum"] = cum
    if cg["n"] % p["batch_scale"] != 0:
        return w, st
    gm = cum / S(T, p["batch_scale"])
    if p["warmup_strategy"] == "lars":
        if v == "lars-sum-float64":
            w2 = float(np.sum((w * w).astype(np.float64)))
            g2 = float(np.sum((gm * gm).astype(np.float64)))
        else:
            w2, g2 = float(np.sum(w * w)), float(np.sum(gm * gm))   # numpy sum in dtype T
        if v == "lars-float32-arith":      # the ratio evaluated in float32 instead of double
            W2, G2 = T(w2), T(g2)
            mult = math.sqrt(float(W2 / (G2 + T(p["wd"]) * W2 + T(1e-18))))
        else:
            mult = math.sqrt(w2 / (g2 + p["wd"] * w2 + 1e-18))
        mult = min(max(mult, 0.01), 100)
    else:
        nwup = p["warmup_epochs"] * p["updates_per_epoch"]
        M, nup = float(p["batch_scale"]), cg["n"]
        if nup >= nwup:
            mult = M
        elif nwup <= 1:
            mult = 1.0
        elif p["warmup_strategy"] == "linear":
            mult = 1.0 + (M - 1) * nup / nwup
        elif p["warmup_strategy"] == "power2":
            mult = 1.0 + (M - 1) * (nup * nup) / (nwup * nwup)
        elif p["warmup_strategy"] == "sqrt":
            mult = 1.0 + (M - 1) * math.sqrt(float(nup) / nwup)
        else:
            mult = 1.0
    cg["cum"] = None
    q = dict(p, lr=lr_py * mult)
    lr, wd, mu = K(T, q["lr"]), K(T, q["wd"]), K(T, q["momentum"])
    gt = sgd_like_grad_term(q, T, gm, "(lr*rs)*g")
    if p["momentum"] > 0:                                       # sgd_mom_update
        mom = (mu * st["mom"] - (lr * wd) * w) - gt
        st["mom"] = mom
        return w + mom, st
    return (T(1) - lr * wd) * w - gt, st                        # sgd_update


def upd_dcasgd(p, T, w, st, g, t, ctx, v):
    gg = g * S(T, p["rescale_grad"])
    if p["clip_gradient"] is not None:
        gg = clip(gg, K(T, p["clip_gradient"]))
    comp = ((S(T, p["lamda"]) * gg) * gg) * (w - st["w_prev"])
    if v == "python":
        mom = S(T, -p["lr"]) * ((gg + S(T, p["wd"]) * w) + comp)
    else:
        mom = -(S(T, p["lr"]) * ((gg + S(T, p["wd"]) * w) + comp))
        mom = mom - (S(T, p["lr"]) * T(0))
    st["w_prev"] = w.copy()
    return w + mom, st


def upd_ftrl(p, T, w, st, g, t, ctx, v):
    lr, wd, rs = K(T, p["lr"]), K(T, p["wd"]), K(T, p["rescale_grad"])
    l1, beta = K(T, p["lamda1"]), K(T, p["beta"])
    gg = g * rs
    if p["clip_gradient"]:
        gg = clip(gg, K(T, p["clip_gradient"]))
    n, z = st["n"], st["z"]
    if v == "kernel":
        z = z + (gg - ((np.sqrt(n + gg * gg) - np.sqrt(n)) * w) / lr)
    else:
        z = z + (gg - (np.sqrt(n + gg * gg) - np.sqrt(n)) * (w / lr))
    n = n + gg * gg
    w = ((sign(z) * l1 - z) / ((beta + np.sqrt(n)) / lr + wd)) * (np.abs(z) > l1).astype(T)
    st["z"], st["n"] = z, n
    return w, st


def upd_ftml(p, T, w, st, g, t, ctx, v):
    lr, wd, rs = K(T, p["lr"]), K(T, p["wd"]), K(T, p["rescale_grad"])
    b1, b2 = K(T, p["beta1"]), K(T, p["beta2"])
    eps = KD(T, p["epsilon"]) if v == "eps-double" else K(T, p["epsilon"])
    gg = rs * g + wd * w
    if p["clip_gradient"]:
        gg = clip(gg, K(T, p["clip_gradient"]))
    vv = b2 * st["v"] + (T(1) - b2) * (gg * gg)
    tt = T(t)
    d_t = ((T(1) - b1 ** tt) / lr) * (np.sqrt(vv / (T(1) - b2 ** tt)) + eps)
    z = (b1 * st["z"] + (T(1) - b1) * gg) - (d_t - b1 * st["d"]) * w
    st["v"], st["z"], st["d"] = vv, z, d_t
    return -z / d_t, st


def upd_sgld(p, T, w, st, g, t, ctx, v):
    gg = g * S(T, p["rescale_grad"])
    if p["clip_gradient"] is not None:
        gg = clip(gg, K(T, p["clip_gradient"]))
    lr = p["lr"]
    w = w + S(T, -lr / 2) * (gg + S(T, p["wd"]) * w)
    return w + ctx["noise"], st


# optimizer -> (update function, variants, state init)
def zeros_state(names):
    return lambda w: {n: np.zeros_like(w) for n in names}


def state_init(case, p):
    name = case["optimizer"]
    if name in ("sgd", "nag", "lbsgd", "signum"):
        return zeros_state(["mom"] if p.get("momentum", 0) else [])
    if name == "dcasgd":
        return lambda w: {"w_prev": w.copy()}
    names = {"adagrad": ["h"], "adadelta": ["acc_g", "acc_delta"], "adam": ["mean", "var"],
             "adamax": ["m", "u"], "nadam": ["m", "v"], "ftrl": ["z", "n"],
             "ftml": ["d", "v", "z"], "sgld": [],
             "rmsprop": ["n", "g", "delta"] if p.get("centered") else ["n"]}[name]
    return zeros_state(names)


RULES = {
    "sgd": (upd_sgd, ["multi", "multi lr*(rs*g)", "sgd_update", "textbook"]),
    "nag": (upd_nag, ["aliased", "textbook"]),
    "adagrad": (upd_adagrad, ["python", "distributed"]),
    "rmsprop": (upd_rmsprop, ["mxnet", "swapped-orders"]),
    "adadelta": (upd_adadelta, ["python", "regrouped"]),
    "adam": (upd_adam, ["lr*(sqrt/c1)", "(lr*sqrt)/c1", "lr*(sqrt/c1) lr_t-double"]),
    "adamax": (upd_adamax, ["python", "float32-constants"]),
    "nadam": (upd_nadam, ["python", "div-as-mul", "per-index"]),
    "signum": (upd_signum, ["kernel", "factored"]),
    "lbsgd": (upd_lbsgd, ["lars-sum-dtype", "lars-sum-float64", "lars-float32-arith"]),
    "dcasgd": (upd_dcasgd, ["python"]),
    "ftrl": (upd_ftrl, ["kernel", "w/lr"]),
    "ftml": (upd_ftml, ["eps-double", "eps-float32"]),
    "sgld": (upd_sgld, ["python"]),
}


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    both_nan = np.isnan(a) & np.isnan(b)
    u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return bool(np.all(both_nan | (a.view(u) == b.view(u))))


def replay(case, variant):
    """Return (ok, first mismatch description, max abs diff over all calls)."""
    name = case["optimizer"]
    fn, _ = RULES[name]
    p = hp(case)
    mp = case["multi_precision"]
    T = np.float32 if mp else np.dtype(case["dtype"]).type
    init = state_init(case, p)
    weights = {i: w.astype(T) for i, w in mxnet_data.initial_weights(case).items()}
    states = {i: init(w) for i, w in weights.items()}
    counts = {}
    ctx = {}
    maxdiff = 0.0
    first_bad = None
    for k, call in enumerate(case["calls"]):
        i = call["index"]
        ctx["index"] = i
        ctx["lr_before_count"] = p["lr"]
        counts[i] = counts.get(i, p["begin_num_update"]) + 1
        t = counts[i]
        if call["extras"]["t"] != t:
            return False, "t mismatch", float("inf")
        if "noise" in call:
            ctx["noise"] = call["noise"].astype(T)
        g = call["grad"].astype(T)
        try:
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                w, st = fn(p, T, weights[i], dict(states[i]), g, t, ctx, variant)
        except NotImplementedError:
            return None, "n/a", float("nan")
        weights[i], states[i] = w, st
        got = dict(st)
        if mp:
            got = {"weight32": w, **{kk: vv for kk, vv in st.items()
                                     if kk in call["states"]}}
            w_cmp = w.astype(np.float16)
        else:
            w_cmp = w
        if name == "dcasgd":
            got = {kk: vv for kk, vv in got.items()}
        pairs = [("weight", w_cmp, call["weight"])] + [
            (kk, got.get(kk), call["states"][kk]) for kk in call["states"]]
        if name == "nadam":
            ms = ctx["last_m_schedule"]
            if ms != call["extras"]["m_schedule"]:
                pairs.append(("m_schedule", np.float64(ms),
                              np.float64(call["extras"]["m_schedule"])))
        for label, mine, ref in pairs:
            if mine is None or not same_bits(mine, ref):
                d = float("inf") if mine is None else float(
                    np.nanmax(np.abs(np.asarray(mine, np.float64) - np.asarray(ref, np.float64))))
                maxdiff = max(maxdiff, d)
                if first_bad is None:
                    first_bad = "call %d %s (max|diff| %.3g)" % (k + 1, label, d)
    return first_bad is None, first_bad, maxdiff


def main():
    verbose = "-v" in sys.argv
    global DEFAULTS, PARSE
    if "--parse=exact" in sys.argv:
        PARSE = "exact"
    DEFAULTS = mxnet_data.load_facts()["optimizer_defaults"]["value"]
    summary = []
    for name in mxnet_data.available():
        cases = mxnet_data.load_cases(name)
        _, variants = RULES[name]
        for variant in variants:
            res = [(c["id"],) + replay(c, variant) for c in cases]
            applicable = [r for r in res if r[1] is not None]
            n_ok = sum(1 for r in applicable if r[1])
            summary.append((name, variant, n_ok, len(applicable)))
            print("%-9s %-28s bit-exact in %2d/%2d cases" % (name, variant, n_ok, len(applicable)))
            if verbose:
                for cid, ok, why, md in res:
                    if ok is not None:
                        print("      %-34s %s" % (cid, "exact" if ok else "DIFF " + why))
    return summary


if __name__ == "__main__":
    main()
