"""Reference (float64 oracle) for LAMB, layer-wise adaptive moments (MXNet ``lamb``; You, Li,
Reddi, Hseu, Kumar, Bhojanapalli, Song, Demmel, Keutzer and Hsieh, "Large Batch Optimization for
Deep Learning: Training BERT in 76 minutes", ICLR 2020, Algorithm 2).

Notation: ``rs`` = ``rescale_grad``, ``c`` = ``clip_gradient``, ``m``/``v`` the moments (slots
``mean``/``var``), ``t`` the per-index count, ``u`` the update direction, ``|x|`` the Euclidean
norm of a whole tensor, ``phi`` the paper's scaling function of the weight norm.

guide (Algorithm 2 per tensor; ``eta_t`` = ``lr``, ``lambda`` = ``wd``, ``gamma_l``/``gamma_u`` =
``lower_bound``/``upper_bound``)::

    g     = clip(rs*grad, c)                      (clipping whenever c is not None; no decay in g)
    m     = beta1*m + (1-beta1)*g
    v     = beta2*v + (1-beta2)*g*g
    m_hat = m/(1 - beta1^t) ;  v_hat = v/(1 - beta2^t)      (omitted when bias_correction=False)
    u     = m_hat/(sqrt(v_hat) + eps) + wd*w      (the paper's r_t + lambda*x_t)
    phi   = min(max(|w|, lower_bound), upper_bound)           (a bound of None or 0 is no bound)
    w     = w - lr*(phi/|u|)*u                    (ratio 1 when phi or |u| is 0)

Readings taken: epsilon on the root of the bias-corrected ``v`` (Algorithm 2); ``wd*w`` joins the
ratio before the norm; ``phi`` is the clamp the paper suggests; ``0/0`` (left open) is a ratio
of 1, as MXNet takes it.

mxnet: MXNet 1.9.1's ``mxnet.optimizer.LAMB`` (python/mxnet/optimizer/optimizer.py:1249-1372 at
tag 1.9.1; docs/optimizers/lamb.md) as its ``Updater`` runs it: always with a list of indices
(optimizer.py:2076, 2103-2124; ``aggregate_num`` 45 at optimizer.py:1262), so through the
aggregated ``multi_lamb_update`` (optimizer.py:1316-1359; python/mxnet/ndarray/contrib.py:608-643;
the kernel ``_multi_lamb_update``, src/operator/contrib/multi_lamb.cc:175). Measured on MXNet
1.9.1 (tests/data/mxnet/lamb.json, from tests/data/mxnet/generate_more.py; float32 bit for bit):
every hyperparameter is a float32; ``clip_gradient`` and the bounds reach the operator only when
truthy (optimizer.py:1317-1322), so None, 0 and negatives are off; ``t`` is the per-index
``step_count`` (optimizer.py:1328-1329); for float32 weights ``u`` is formed in double and
rounded once; the norms are float32 sums of squares and the ratio a float32 ``r1/r2``.
Not reproduced: the kernel's float32 ``u`` buffer for float64 weights, and its one-at-a-time
float32 sums (here a float64 sum rounded once: the ratio can differ by an ulp).

MXNet's single-tensor path (one integer index, or ``MXNET_OPTIMIZER_AGGREGATION_SIZE=1``;
optimizer.py:1274-1315) computes the same update with other roundings, and with
``multi_precision`` never updates the float32 master (a bug not reproduced:
docs/known-differences.md).

PyTorch: torch.optim (torch 2.13) has no LAMB (``PYTORCH = None``).
"""
from __future__ import annotations

import numpy as np

from ._util import as_f64, check_convention, f32, kernel_clip, merge_hyper, python_clip
from .error_bound import Tracked, error, ties, value

NAME = "lamb"
CONVENTIONS = ("mxnet", "guide")
#: torch.optim has no counterpart
PYTORCH = None
STATE = ("mean", "var")
HYPER = {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6,
         "lower_bound": None, "upper_bound": None, "bias_correction": True}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("mean", "var")``."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """Both moments start at zero."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def _bias(beta, t, like):
    """``1 - beta^t``. An implementation forms ``beta^t`` once (rounded to its precision) and
    subtracts it from 1 (rounded again): on Tracked inputs both roundings join the bound."""
    p = float(beta) ** t
    if isinstance(like, Tracked):
        p = Tracked(np.float64(p), like.u * abs(p), u=like.u, tiny=like.tiny)
    return 1 - p


def _near_zero(x):
    """Whether a Tracked norm may be 0 in an implementation (its bound reaches 0) while its
    value is not, or the reverse."""
    return bool(np.any(error(x) > 0) and np.all(value(x) <= error(x)))


def mxnet_ratio(w2, u2, lower_bound, upper_bound):
    """The trust ratio of ``multi_lamb_update`` as MXNet 1.9.1 evaluates it: float32 sums of
    squares ``w2``, ``u2`` (given here in float64, rounded once), float32 roots, the clamp to the
    float32 bounds that are truthy, and ``r1/r2`` in float32 (1 when either is 0)."""
    f = np.float32
    r1, r2 = np.sqrt(f(w2)), np.sqrt(f(u2))
    if lower_bound:
        r1 = max(r1, f(lower_bound))
    if upper_bound:
        r1 = min(r1, f(upper_bound))
    if r1 == 0 or r2 == 0:
        return 1.0
    return float(r1 / r2)


def _ratio(w, u, lower_bound, upper_bound, convention):
    """``phi(|w|)/|u|`` (1 when either is 0), Tracked when the inputs are: the "mxnet" value is
    the float32 evaluation, its distance from the float64 one added to the bound."""
    r1 = np.sqrt(np.sum(w * w))
    r2 = np.sqrt(np.sum(u * u))
    phi = r1
    if lower_bound:
        phi = np.maximum(phi, lower_bound)
    if upper_bound:
        phi = np.minimum(phi, upper_bound)
    like = r2 if isinstance(r2, Tracked) else phi
    tracked = isinstance(like, Tracked)
    tie = tracked and (_near_zero(phi) or _near_zero(r2))
    vphi, vr2 = float(value(phi)), float(value(r2))
    if vphi == 0 or vr2 == 0:
        exact = 1.0
    else:
        exact = phi / r2
    if convention == "mxnet":
        r = mxnet_ratio(float(value(np.sum(w * w))), float(value(np.sum(u * u))),
                        lower_bound, upper_bound)
        if not tracked:
            return r
        return Tracked(np.float64(r), error(exact) + abs(r - float(value(exact))),
                       bool(np.any(ties(exact))) or tie, u=like.u, tiny=like.tiny)
    if tracked and (tie or not isinstance(exact, Tracked)):
        return Tracked(np.float64(value(exact)), error(exact), tie or bool(np.any(ties(exact))),
                       u=like.u, tiny=like.tiny)
    return exact


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, **hyper):
    """One LAMB step (both moments and the weight); ``learning_rate`` is accepted and ignored
    (``lr`` is the effective rate).

    **"mxnet"** (``multi_lamb_update``; ``lr, wd, rs, c, beta1, beta2, eps`` and the truthy
    bounds rounded to float32 when ``hyper_f32``; clipping, lower and upper bound off for None
    and 0)::

        g = clip(grad*rs, c)
        m = beta1*m + (1-beta1)*g ;  v = beta2*v + ((1-beta2)*g)*g
        u = (m/(1 - beta1^t))/(sqrt(v/(1 - beta2^t)) + eps) + wd*w    (no 1 - beta^t without
                                                                       bias_correction)
        w = w - (lr*mxnet_ratio(|w|^2, |u|^2))*u

    **"guide"** (Algorithm 2)::

        g = clip(rs*grad, c)          (None: off; 0 clips every gradient to zero)
        m, v, u as above ;  w = w - lr*(phi(|w|)/|u|)*u
    """
    convention = check_convention(convention, CONVENTIONS, NAME)
    h = _hyper(hyper)
    beta1, beta2, eps = h["beta1"], h["beta2"], h["epsilon"]
    lower, upper, bias_correction = h["lower_bound"], h["upper_bound"], h["bias_correction"]
    w = as_f64(weight)
    gr = as_f64(grad)
    m = as_f64(state["mean"])
    v = as_f64(state["var"])

    if convention == "mxnet":
        if hyper_f32:
            lr, wd = f32(lr), f32(wd)
            rescale_grad, clip_gradient = f32(rescale_grad), f32(clip_gradient)
            beta1, beta2, eps = f32(beta1), f32(beta2), f32(eps)
            lower = f32(lower) if lower else None
            upper = f32(upper) if upper else None
        g = kernel_clip(gr * rescale_grad, clip_gradient)
        m_new = beta1 * m + (1.0 - beta1) * g
        v_new = beta2 * v + ((1.0 - beta2) * g) * g
    else:
        g = python_clip(rescale_grad * gr, clip_gradient)
        m_new = beta1 * m + (1.0 - beta1) * g                         # Algorithm 2: m_t
        v_new = beta2 * v + (1.0 - beta2) * (g * g)                   # Algorithm 2: v_t
    if bias_correction:
        m_hat = m_new / _bias(beta1, t, w)                              # m_t/(1 - beta1^t)
        v_hat = v_new / _bias(beta2, t, w)                              # v_t/(1 - beta2^t)
    else:
        m_hat, v_hat = m_new, v_new
    u = m_hat / (np.sqrt(v_hat) + eps) + wd * w                         # r_t + lambda*x_t
    ratio = _ratio(w, u, lower, upper, convention)
    w_new = w - (lr * ratio) * u                                        # x_{t+1}
    return w_new, {"mean": m_new, "var": v_new}
