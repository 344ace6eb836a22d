"""Reference Schedule-Free SGD (registry name ``sgdschedulefree``; Defazio, Yang, Mehta,
Mishchenko, Khaled and Cutkosky 2024, "The Road Less Scheduled", NeurIPS 2024,
arXiv:2405.15682, its SGD form, equations (1)-(3); docs/optimizers/sgdschedulefree.md).

MXNet 1.9.1 never had it and torch.optim (torch 2.13) has none: one convention, ``"paper"``
(``PYTORCH = None``). The authors' ``schedulefree.SGDScheduleFree`` (schedulefree 1.4.1) and
``optax.contrib.schedule_free_sgd`` compute it. The paper's three sequences are Schedule-Free
AdamW's (``reference.adamwschedulefree``, whose averaging, warmup forms and moves between ``y``
and ``x`` this module takes), with the plain gradient step for ``z``::

    y_t     = (1 - momentum)*z_t + momentum*x_t           (1)
    z_{t+1} = z_t - gamma_t*(g_t + wd*y_t)                (2)
    x_{t+1} = (1 - c_{t+1})*x_t + c_{t+1}*z_{t+1}         (3)

with ``gamma_t = lr*min(1, t/warmup_steps)`` (no bias correction: there is no second moment)
and ``c_{t+1}`` the weight of :func:`reference.adamwschedulefree.averaging`. The toolkit
stores ``y`` in the weight and ``z`` in the state (:func:`step`); :func:`step_averaged` is
(1)-(3) as written.

State: ``z`` (a copy of the weight to start), and the float64 scalars ``lr_max`` and
``weight_sum`` (the implementation's group keys of those names).
"""
from __future__ import annotations

from . import adamwschedulefree as _family
from ._util import as_f64, check_convention, check_form, merge_hyper, python_clip

NAME = "sgdschedulefree"
CONVENTIONS = ("paper",)
#: torch.optim has no counterpart
PYTORCH = None
STATE = ("z",)
#: the scalars kept beside the array (the implementation's group keys)
SCALARS = ("lr_max", "weight_sum")
#: the authors' defaults (``SGDScheduleFree``: lr 1.0, momentum 0.9, warmup_steps 0, r 0,
#: weight_lr_power 2)
HYPER = {"learning_rate": 1.0, "momentum": 0.9, "warmup_steps": 0, "r": 0.0,
         "weight_lr_power": 2.0}
#: known variants (Schedule-Free AdamW's warmup forms: ``reference.adamwschedulefree.step``)
FORMS = {"warmup_lag": ("paper",), "warmup_f32": ("paper",)}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("z",)``."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """``z`` a copy of the weight, ``lr_max = -1`` and ``weight_sum = 0``."""
    state_slots(**hyper)
    return {"z": as_f64(weight), "lr_max": -1.0, "weight_sum": 0.0}


def _averaging(h):
    """The keywords of the family's averaging for these hyperparameters: no bias correction."""
    return {"warmup_steps": h["warmup_steps"], "r": h["r"],
            "weight_lr_power": h["weight_lr_power"], "lr_bias_correction": False}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="paper", hyper_f32=True, form=None, **hyper):
    """One step of (1)-(3) on the stored ``(y, z)``: ``weight`` is ``y_t``, ``state["z"]``
    is ``z_t``. ``learning_rate`` (a HYPER key) is accepted and ignored: the step uses ``lr``;
    ``hyper_f32`` is accepted and ignored. With ``g = clip(rescale_grad*grad, clip_gradient)``
    and the family's ``gamma_t`` and ``c = c_{t+1}``::

        u       = g + wd*y_t
        z_{t+1} = z_t - gamma_t*u                                          (2)
        y_{t+1} = (1 - c)*y_t + c*z_t - gamma_t*(1 - momentum*(1 - c))*u   ((1) and (3))

    the last line being (1) and (3) with ``x_t = (y_t - (1-momentum)*z_t)/momentum``
    eliminated. ``form`` (``FORMS``, or a tuple of both): Schedule-Free AdamW's
    ``warmup_lag`` and ``warmup_f32`` (:func:`reference.adamwschedulefree.step`).
    """
    check_convention(convention, CONVENTIONS, NAME)
    forms = set(form) if isinstance(form, tuple) else {form}
    for f in forms:
        check_form(f, FORMS, NAME, convention)
    h = _hyper(hyper)
    m = h["momentum"]
    y = as_f64(weight)
    z = as_f64(state["z"])
    g = python_clip(rescale_grad * as_f64(grad), clip_gradient)
    gamma, c, lr_max, weight_sum = _family.scheduled(
        t, lr, state["lr_max"], state["weight_sum"], forms, **_averaging(h))
    u = g + wd * y if wd else g
    z_new = z - gamma * u                                                    # (2)
    y_new = (1.0 - c) * y + c * z - (gamma * (1.0 - m * (1.0 - c))) * u      # (1), (3)
    return y_new, {"z": z_new, "lr_max": lr_max, "weight_sum": weight_sum}


def step_averaged(x, z, grad, scalars, *, t, lr, wd=0.0, **hyper):
    """One step of (1)-(3) as written, on ``(x_t, z_t)``; ``scalars`` is ``(lr_max,
    weight_sum)``. Returns ``(x_{t+1}, z_{t+1}, scalars)`` (``grad`` is the gradient at
    ``y_t``, no preprocessing)."""
    h = _hyper(hyper)
    m = h["momentum"]
    x, z, g = as_f64(x), as_f64(z), as_f64(grad)
    gamma, c, lr_max, weight_sum = _family.averaging(t, lr, *scalars, **_averaging(h))
    y = (1.0 - m) * z + m * x                                                # (1)
    z_new = z - gamma * g - gamma * wd * y                                   # (2)
    x_new = (1.0 - c) * x + c * z_new                                        # (3)
    return x_new, z_new, (lr_max, weight_sum)


def to_eval(y, z, momentum):
    """``x`` from the stored ``y`` (:func:`reference.adamwschedulefree.to_eval`)."""
    return _family.to_eval(y, z, momentum)


def to_train(x, z, momentum):
    """``y`` from ``x`` (:func:`reference.adamwschedulefree.to_train`)."""
    return _family.to_train(x, z, momentum)
