"""Reference Schedule-Free AdamW (registry name ``adamwschedulefree``; Defazio, Yang, Mehta,
Mishchenko, Khaled and Cutkosky 2024, "The Road Less Scheduled", NeurIPS 2024, arXiv:2405.15682,
Algorithm 1, "Schedule-Free AdamW"; docs/optimizers/adamwschedulefree.md).

MXNet 1.9.1 never had it and torch.optim (torch 2.13) has none, so the module has one convention,
``"paper"`` (``PYTORCH = None``). The authors' PyTorch implementation (facebookresearch/
schedule_free, the ``schedulefree`` package: ``AdamWScheduleFreePaper`` is Algorithm 1,
``AdamWScheduleFree`` its later default with the bias correction inside the root,
``lr_bias_correction=False`` here) and ``optax.contrib.schedule_free_adamw`` compute it.

Algorithm 1 keeps three sequences: ``z`` (the base AdamW-like iterate), ``x`` (the weighted
average of the ``z``, the point one evaluates) and ``y = (1-beta1)*z + beta1*x`` (where the
gradient is taken). As the authors' implementation, the toolkit stores ``y`` in the weight and
``z`` in the state, and updates ``y`` without forming ``x`` (:func:`step`);
:func:`step_averaged` is Algorithm 1 in its own ``(x, z)`` notation, and
tests/test_adamwschedulefree.py proves the two the same trajectory. :func:`to_eval` and
:func:`to_train` move the weight between ``y`` and ``x`` (the implementation's ``eval()`` and
``train()``).

State: ``z`` (it starts as a copy of the weight: line 2, ``z_1 = x_1``) and ``var`` (line 7's
``v``, the implementation's ``exp_avg_sq``), and two float64 scalars of the averaging weights,
``lr_max`` (the largest ``gamma_t`` so far, -1 before the first step) and ``weight_sum`` (the
sum of the weights so far), the implementation's group keys of those names.
"""
from __future__ import annotations

import math

import numpy as np

from ._util import (as_f64, check_convention, check_form, formed_in, merge_hyper, power,
                    python_clip)

NAME = "adamwschedulefree"
CONVENTIONS = ("paper",)
#: torch.optim has no counterpart
PYTORCH = None
STATE = ("z", "var")
#: the scalars kept beside the arrays (the implementation's group keys)
SCALARS = ("lr_max", "weight_sum")
#: the authors' defaults (``AdamWScheduleFree`` and ``AdamWScheduleFreePaper``: lr 0.0025, betas
#: (0.9, 0.999), eps 1e-8, warmup_steps 0, r 0, weight_lr_power 2); ``lr_bias_correction``:
#: Algorithm 1's ``sqrt(1 - beta2^t)`` in the learning rate (True), or the implementation's
#: later default, ``v/(1 - beta2^t)`` under the root (False)
HYPER = {"learning_rate": 0.0025, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8,
         "warmup_steps": 0, "r": 0.0, "weight_lr_power": 2.0, "lr_bias_correction": True}
#: known variants, ``step(..., form=...)`` (written out in :func:`step`'s docstring)
FORMS = {"constants_in_dtype": ("paper",), "warmup_lag": ("paper",), "warmup_f32": ("paper",)}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("z", "var")``."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """``z`` a copy of the weight (line 2), ``var`` zeros (line 3), ``lr_max = -1`` and
    ``weight_sum = 0`` (the implementation's initial group values)."""
    state_slots(**hyper)
    return {"z": as_f64(weight), "var": np.zeros(np.shape(weight), dtype=np.float64),
            "lr_max": -1.0, "weight_sum": 0.0}


def averaging(t, lr, lr_max, weight_sum, **hyper):
    """The host's scalars of step ``t`` (float64, the implementation's order of operations):
    ``(gamma_t, c_{t+1}, lr_max, weight_sum)`` after the step::

        gamma_t    = lr * min(1, t/warmup_steps) * sqrt(1 - beta2^t)   (line 8; the root only
                                                                         with lr_bias_correction)
        lr_max     = max(lr_max, gamma_t)
        weight     = t^r * lr_max^weight_lr_power
        weight_sum = weight_sum + weight
        c_{t+1}    = weight/weight_sum                (0 when weight_sum is 0: a zero lr)

    With ``r = 0`` and ``weight_lr_power = 2`` this is line 10, ``c_{t+1} = gamma_t^2 /
    sum_i gamma_i^2``, for every non-decreasing ``gamma_t`` (Algorithm 1's always is: its
    warmup and its root both grow with ``t``). The implementation weighs by the largest
    ``gamma`` so far instead of ``gamma_t``, so a learning rate lowered later (a scheduler)
    does not lower the weight of the newer iterates; this module does as the implementation.
    """
    h = _hyper(hyper)
    warmup = h["warmup_steps"]
    sched = t / warmup if t <= warmup else 1.0   # the implementation's (k+1)/warmup, k = t-1
    gamma = lr * sched
    if h["lr_bias_correction"]:
        gamma = gamma * math.sqrt(1.0 - h["beta2"] ** t)
    lr_max = max(gamma, float(lr_max))
    weight = (t ** h["r"]) * (lr_max ** h["weight_lr_power"])
    weight_sum = float(weight_sum) + weight
    c = weight / weight_sum if weight_sum != 0.0 else 0.0
    return gamma, c, lr_max, weight_sum


def _warmup_f32(lr, k, warmup):
    """``lr*min(1, k/warmup)`` as optax's ``warmup_constant_schedule(0, lr, warmup)`` forms it
    at count ``k`` (float32 whatever the weight's precision): ``frac = 1 - min(k, warmup)/
    warmup``, then ``(0 - lr)*frac + lr``, each operation rounded to float32."""
    f = np.float32
    frac = f(1.0) - f(min(max(k, 0), warmup)) / f(warmup)
    return float(f(f(-lr) * frac) + f(lr))


def scheduled(t, lr, lr_max, weight_sum, forms=(), **hyper):
    """:func:`averaging` under the warmup forms of ``forms`` (``warmup_lag``, ``warmup_f32``:
    :func:`step`'s docstring), the scalars of the step of the Schedule-Free family's
    references (``reference.sgdschedulefree`` too)."""
    h = _hyper(hyper)
    if not (set(forms) & {"warmup_lag", "warmup_f32"} and h["warmup_steps"]):
        return averaging(t, lr, lr_max, weight_sum, **hyper)
    warmup, flat = h["warmup_steps"], {**hyper, "warmup_steps": 0}

    def warm(k):  # lr*min(1, k/warmup), in float32 (warmup_f32) or as averaging forms it
        if "warmup_f32" in forms:
            return _warmup_f32(lr, k, warmup)
        return lr * (k / warmup if k <= warmup else 1.0)

    lag = t - 1 if "warmup_lag" in forms else t
    gamma = averaging(t, warm(lag), lr_max, weight_sum, **flat)[0]
    _, c, lr_max, weight_sum = averaging(t, warm(t), lr_max, weight_sum, **flat)
    return gamma, c, lr_max, weight_sum


def _normalised(g, v, t, beta2, eps, lr_bias_correction, like=None):
    """Line 9's ``g/(sqrt(v) + eps)``; without ``lr_bias_correction`` the implementation's
    later ``g/(sqrt(v/(1 - beta2^t)) + eps)``, with ``1 - beta2^t`` formed in the precision of
    ``like`` where it is given (the form ``constants_in_dtype``), else in double."""
    if lr_bias_correction:
        return g / (np.sqrt(v) + eps)
    bc2 = 1.0 - (beta2 ** t if like is None else power(formed_in(beta2, like), t))
    return g / (np.sqrt(v / bc2) + eps)


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="paper", hyper_f32=True, form=None, **hyper):
    """One step of Algorithm 1 on the stored ``(y, z)``: ``weight`` is ``y_t``, ``state["z"]``
    is ``z_t``. ``learning_rate`` (a HYPER key) is accepted and ignored: the step uses ``lr``
    (the algorithm's ``gamma``). ``hyper_f32`` is accepted and ignored (it rounds MXNet's
    kernel parameters).

    With ``g = clip(rescale_grad*grad, clip_gradient)`` (the toolkit's common preprocessing;
    line 6's gradient at ``y_t``) and :func:`averaging`'s ``gamma_t`` and ``c = c_{t+1}``::

        v_{t+1} = beta2*v_t + (1 - beta2)*g*g                            (line 7)
        u       = g/(sqrt(v_{t+1}) + eps) + wd*y_t                       (line 9's step)
        z_{t+1} = z_t - gamma_t*u                                        (line 9)
        y_{t+1} = (1 - c)*y_t + c*z_t - gamma_t*(1 - beta1*(1 - c))*u    (lines 5 and 11)

    The last line is lines 5 and 11 with ``x_t = (y_t - (1-beta1)*z_t)/beta1`` eliminated:
    ``y_{t+1} = (1-beta1)*z_{t+1} + beta1*((1-c)*x_t + c*z_{t+1})``. The weight decay is the
    algorithm's ``gamma_t*lambda*y_t``, decoupled from ``v``, at the point the gradient is
    taken.

    ``form`` (``FORMS``), or a tuple of two of them::

        constants_in_dtype  1 - beta2^t under the root (without lr_bias_correction; with it
                            the form changes nothing) formed in the precision of the
                            implementation checked (as optax forms it: float32)
        warmup_lag          the step's learning rate taken from the warmup one step late,
                            gamma_t = lr*min(1, (t-1)/warmup_steps) (times the root with
                            lr_bias_correction), so that the first step moves nothing, while
                            the averaging weights (lr_max, c) keep line 8's
                            lr*min(1, t/warmup_steps); both warmup values formed in float64,
                            as the step forms line 8's. Without a warmup (warmup_steps = 0)
                            it changes nothing.
        warmup_f32          both warmup values, lr*min(1, t/warmup_steps) for the step's
                            gamma_t and for the averaging weights, formed in float32 whatever
                            the weight's precision, as optax's warmup_constant_schedule forms
                            them (:func:`_warmup_f32`; after the warmup that is lr rounded to
                            float32). Without a warmup it changes nothing.

    optax.contrib.schedule_free_adamw with ``warmup_steps`` is ``("warmup_lag",
    "warmup_f32")`` (optax 0.2.8): its ``scale_by_learning_rate`` reads the warmup schedule at
    the count of the steps before this one (from 0), its ``schedule_free`` wrapper at this
    step's (from 1), and ``warmup_constant_schedule`` returns float32; a float32 run of it
    is ``("constants_in_dtype", "warmup_lag")``, its float32 warmup values being the run's own
    precision.
    """
    check_convention(convention, CONVENTIONS, NAME)
    forms = set(form) if isinstance(form, tuple) else {form}
    for f in forms:
        check_form(f, FORMS, NAME, convention)
    h = _hyper(hyper)
    beta1, beta2 = h["beta1"], h["beta2"]
    y = as_f64(weight)
    z = as_f64(state["z"])
    v = as_f64(state["var"])
    g = python_clip(rescale_grad * as_f64(grad), clip_gradient)
    gamma, c, lr_max, weight_sum = scheduled(t, lr, state["lr_max"], state["weight_sum"],
                                             forms, **hyper)
    v_new = beta2 * v + (1.0 - beta2) * (g * g)                                # line 7
    u = _normalised(g, v_new, t, beta2, h["epsilon"], h["lr_bias_correction"],
                    like=y if "constants_in_dtype" in forms else None)
    if wd:
        u = u + wd * y
    z_new = z - gamma * u                                                      # line 9
    y_new = (1.0 - c) * y + c * z - (gamma * (1.0 - beta1 * (1.0 - c))) * u   # lines 5, 11
    return y_new, {"z": z_new, "var": v_new, "lr_max": lr_max, "weight_sum": weight_sum}


def step_averaged(x, z, v, grad, scalars, *, t, lr, wd=0.0, **hyper):
    """One step of Algorithm 1 as written, on ``(x_t, z_t, v_t)``; ``scalars`` is
    ``(lr_max, weight_sum)``. Returns ``(x_{t+1}, z_{t+1}, v_{t+1}, scalars)`` (no gradient
    preprocessing: ``grad`` is line 6's ``g_t``)::

        y_t     = (1 - beta1)*z_t + beta1*x_t                            (line 5)
        v_{t+1} = beta2*v_t + (1 - beta2)*g_t^2                          (line 7)
        z_{t+1} = z_t - gamma_t*g_t/(sqrt(v_{t+1}) + eps) - gamma_t*wd*y_t  (line 9)
        x_{t+1} = (1 - c_{t+1})*x_t + c_{t+1}*z_{t+1}                    (lines 10, 11)
    """
    h = _hyper(hyper)
    beta1, beta2 = h["beta1"], h["beta2"]
    x, z, v, g = as_f64(x), as_f64(z), as_f64(v), as_f64(grad)
    gamma, c, lr_max, weight_sum = averaging(t, lr, *scalars, **hyper)
    y = (1.0 - beta1) * z + beta1 * x                                          # line 5
    v_new = beta2 * v + (1.0 - beta2) * (g * g)                                # line 7
    z_new = z - gamma * _normalised(g, v_new, t, beta2, h["epsilon"],
                                    h["lr_bias_correction"]) - gamma * wd * y  # line 9
    x_new = (1.0 - c) * x + c * z_new                                          # line 11
    return x_new, z_new, v_new, (lr_max, weight_sum)


def to_eval(y, z, beta1):
    """The evaluation point ``x = (y - (1-beta1)*z)/beta1`` from the stored ``y`` (the
    implementation's ``eval()``: ``y + (1 - 1/beta1)*(z - y)``, the same number)."""
    y, z = as_f64(y), as_f64(z)
    return y + (1.0 - 1.0 / beta1) * (z - y)


def to_train(x, z, beta1):
    """The gradient point ``y = (1-beta1)*z + beta1*x`` from ``x`` (the implementation's
    ``train()``: ``x + (1 - beta1)*(z - x)``)."""
    x, z = as_f64(x), as_f64(z)
    return x + (1.0 - beta1) * (z - x)
