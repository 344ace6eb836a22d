"""The variants the reference writes as a wider bound, planted in numpy implementations and caught
at ``examples=1`` at three seeds, named (tests/test_oracle_discriminating.py does the variants
written as other values, Adam's and NAdam's float32 constants).

* ``lerp``: every (optimizer, convention, dtype) where a discriminating case tells it apart
  (``discriminating.find``: scored by the trajectory with ``1 - beta1`` rounded to the dtype,
  ``discriminating.CONCRETE``) has a numpy implementation of its own here or in the variant tests
  (``make_adam``, ``make_adamax``), and each fails and is named; a test checks that none of those
  settings lacks one.
* ``constants_in_dtype`` in Adam and AdamW (optax.adamw's float32 bias corrections), under
  each convention and dtype where a case tells it apart; where the table says "not
  guaranteed" (``discriminating.NOT_GUARANTEED``: AdamW, torch's convention, float16) the numpy
  implementation passes its case, which is the measured reason.
The Adam and AdamW without the variant pass the same cases.
"""
from __future__ import annotations

import numpy as np
import pytest

from toolkit import oracle
from toolkit.optimizer import specs
from toolkit.oracle import discriminating
from toolkit.oracle.variants import variants_of

from test_oracle_discriminating import SEEDS, _conventions
from test_oracle_variants import make_adam
from test_oracle_variants_more import _clip, _f32, make_adamax


def _bc(beta, t, dt, variant):
    """``1 - beta^t``: in double precision, or formed in the weight's precision."""
    if variant == "constants_in_dtype":
        return dt(1) - dt(beta) ** t
    return 1.0 - beta ** t


def make_adamw(convention, variant=None):
    """AdamW in numpy under ``convention`` (reference/adamw.py): MXNet's (float32
    hyperparameters, no bias correction), the paper's (the guide's) or torch.optim.AdamW's; the
    first moment as a lerp for ``lerp``, the bias corrections in the dtype for
    ``constants_in_dtype``."""
    def make(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon, eta):
        w, t = w.copy(), [0]
        m, v = np.zeros_like(w), np.zeros_like(w)
        dt = w.dtype.type
        lr, wd_, rs, c, b1, b2, eps, eta_ = (
            [_f32(x) for x in (learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2,
                               epsilon, eta)] if convention == "mxnet"
            else (learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon, eta))

        def step(g):
            t[0] += 1
            g = _clip(rs * g, c)
            if convention == "pytorch":
                w[...] = w * (1.0 - eta_ * lr * wd_)
            m[...] = m + (1.0 - b1) * (g - m) if variant == "lerp" else b1 * m + (1.0 - b1) * g
            v[...] = b2 * v + (1.0 - b2) * g * g
            if convention == "mxnet":
                w[...] = w - eta_ * (lr * m / (np.sqrt(v) + eps) + wd_ * w)
                return w
            c1, c2 = _bc(b1, t[0], dt, variant), _bc(b2, t[0], dt, variant)
            if convention == "pytorch":
                w[...] = w - eta_ * lr * (m / c1) / (np.sqrt(v) / np.sqrt(c2) + eps)
            else:
                w[...] = w - eta_ * (lr * (m / c1) / (np.sqrt(v / c2) + eps) + wd_ * w)
            return w
        return step
    return make


def make_adamax_pytorch(variant=None):
    """torch.optim.Adamax in numpy: ``g = clip(rs*g, c) + wd*w``, ``m`` (a lerp for ``lerp``),
    ``u = max(beta2*u, |g| + eps)``, ``w -= lr/(1 - beta1^t) * m/u``."""
    def make(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon=None):
        w, t = w.copy(), [0]
        m, u = np.zeros_like(w), np.zeros_like(w)
        eps = 1e-8 if epsilon is None else epsilon

        def step(g):
            t[0] += 1
            g = _clip(rescale_grad * g, clip_gradient)
            g = g + wd * w if wd else g
            m[...] = (m + (1.0 - beta1) * (g - m) if variant == "lerp"
                      else beta1 * m + (1.0 - beta1) * g)
            u[...] = np.maximum(beta2 * u, np.abs(g) + eps)
            w[...] = w - learning_rate / (1.0 - beta1 ** t[0]) * m / u
            return w
        return step
    return make


def make_adamax_mxnet(variant=None):
    """MXNet's Adamax in numpy (no epsilon; the clip bound in float32): ``g = clip(rs*g + wd*w,
    c)``, ``m`` (a lerp for ``lerp``), ``u = max(beta2*u, |g|)``, ``w -= lr_t*m/u`` where
    ``u > 0``."""
    def make(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2):
        w, t = w.copy(), [0]
        m, u = np.zeros_like(w), np.zeros_like(w)

        def step(g):
            t[0] += 1
            g = _clip(rescale_grad * g + wd * w, _f32(clip_gradient))
            m[...] = (m + (1.0 - beta1) * (g - m) if variant == "lerp"
                      else beta1 * m + (1.0 - beta1) * g)
            u[...] = np.maximum(beta2 * u, np.abs(g))
            lr_t = learning_rate / (1.0 - beta1 ** t[0])
            w[...] = np.where(u > 0, w - lr_t * m / np.where(u > 0, u, 1.0), w)
            return w
        return step
    return make


#: (optimizer, convention) -> make(variant): the numpy implementations planted here
PLANTS = {
    ("adam", "guide"): lambda v=None: make_adam("guide", v),
    ("adam", "mxnet"): lambda v=None: make_adam("mxnet", v),
    ("adamw", "mxnet"): lambda v=None: make_adamw("mxnet", v),
    ("adamw", "guide"): lambda v=None: make_adamw("guide", v),
    ("adamw", "pytorch"): lambda v=None: make_adamw("pytorch", v),
    ("adamax", "guide"): make_adamax,
    ("adamax", "mxnet"): make_adamax_mxnet,
    ("adamax", "pytorch"): make_adamax_pytorch,
}


def _told_apart(variant):
    """``(optimizer, convention, dtype)`` wherever a discriminating case tells ``variant``
    apart (in either domain: verify runs both)."""
    out = []
    for name, spec in specs(oracle=True).items():
        if spec.noise or variant not in spec.variants:
            continue
        ref = spec.reference_module()
        for convention in _conventions(name):
            if not any(v.name == variant and v.applies(ref, convention)
                       for v in variants_of(spec)):
                continue
            for dtype in discriminating.DTYPES:
                if any(variant in discriminating.find(name, convention, dtype, domain)
                       for domain in ("usual", "full")):
                    out.append((name, convention, dtype))
    return out


LERPS = _told_apart("lerp")
#: constants in the dtype, for the optimizers with a numpy plant here (NAdam's are
#: tests/test_oracle_discriminating.py's)
CONSTANTS = [s for s in _told_apart("constants_in_dtype") if s[0] in ("adam", "adamw")]


def _guaranteed(name, variant, convention, dtype):
    return (name, variant, convention, dtype) not in discriminating.NOT_GUARANTEED


def test_every_setting_a_case_tells_the_lerp_apart_in_has_a_plant():
    assert LERPS and {(n, c) for n, c, _ in LERPS} <= set(PLANTS), LERPS
    assert {n for n, _, _ in LERPS} == {"adam", "adamw", "adamax"}, LERPS


@pytest.mark.parametrize("name, convention, dtype", LERPS)
def test_a_lerp_fails_at_one_example_and_is_named(name, convention, dtype):
    for seed in SEEDS:
        r = oracle.verify(PLANTS[(name, convention)]("lerp"), name, convention=convention,
                          dtype=dtype, examples=1, seed=seed)
        assert not r.passed and r.explanation.variant == "lerp", (seed, r.summary)
    r = oracle.verify(PLANTS[(name, convention)](), name, convention=convention, dtype=dtype,
                      examples=1, seed=SEEDS[0])
    assert r.passed, r.summary


def test_the_constants_are_told_apart_where_the_table_says():
    assert CONSTANTS == [("adam", "mxnet", "float16"), ("adam", "mxnet", "float32"),
                         ("adam", "guide", "float32"), ("adamw", "guide", "float32"),
                         ("adamw", "pytorch", "float16"), ("adamw", "pytorch", "float32")]
    assert all(_guaranteed(n, "lerp", c, d) for n, c, d in LERPS)


@pytest.mark.parametrize("name, convention, dtype", CONSTANTS)
def test_constants_in_the_dtype_fail_at_one_example_and_are_named(name, convention, dtype):
    make = PLANTS[(name, convention)]
    if not _guaranteed(name, "constants_in_dtype", convention, dtype):
        # the table's "not guaranteed": the numpy implementation rounds inside the bound there
        r = oracle.verify(make("constants_in_dtype"), name, convention=convention, dtype=dtype,
                          examples=1, seed=SEEDS[0])
        assert r.passed, "caught now: take it out of discriminating.NOT_GUARANTEED"
        return
    for seed in SEEDS:
        r = oracle.verify(make("constants_in_dtype"), name, convention=convention, dtype=dtype,
                          examples=1, seed=seed)
        assert not r.passed and r.explanation.variant == "constants_in_dtype", (seed, r.summary)
    r = oracle.verify(make(), name, convention=convention, dtype=dtype, examples=1,
                      seed=SEEDS[0])
    assert r.passed, r.summary
