"""Reference Nadam (MXNet registry name ``nadam``): the float64 oracle of MXNet 1.9.1's Nadam
(python/mxnet/optimizer/optimizer.py:1995-2028 at tag 1.9.1; docs/optimizers/nadam.md) and, as a
separate function, of the guide's look-ahead Nadam (guide:179-183).

The two are different algorithms. MXNet implements Dozat's (2016) Nadam as Keras does: the
gradient at the current weight, mixed into the step (``m_bar``), and a warming momentum schedule
``mu_t = beta1*(1 - 0.5*0.96**(t*schedule_decay))`` (absent from the guide) whose running
product ``m_schedule`` enters the bias correction. The guide takes the first moment's gradient
at the look-ahead point ``w_i + beta1*v_i``: two gradients per step, so :func:`step_lookahead`
takes a gradient function and ``step(convention="guide")`` raises NotImplementedError
(``tests/test_proof_nadam.py`` shows the trajectories differ).

State: ``m`` and ``v``, plus ``m_schedule``, a Python float starting at 1.0. **MXNet keeps
``m_schedule`` on the optimizer, shared by all indices**: every update of any index multiplies
it. A pure step carries it in the state dict, so to reproduce MXNet with several parameters the
caller passes each step the ``m_schedule`` returned by the previous step of *any* index.

Convention "pytorch": PyTorch's documented NAdam (the algorithm box of torch/optim/nadam.py,
class NAdam, torch 2.13, ``decoupled_weight_decay=False``, ``maximize=False``) is mathematically
MXNet's (coupled weight decay, the same schedule with ``momentum_decay`` = ``schedule_decay``,
the same products, eps outside the root), so ``PYTORCH = "mxnet"``. Mapping: ``betas`` =
``(beta1, beta2)``, ``eps`` = ``epsilon``, ``weight_decay`` = ``wd``; slots ``exp_avg``/
``exp_avg_sq`` = ``m``/``v``, ``mu_product`` = ``m_schedule`` (torch keeps one per parameter,
MXNet one per optimizer: the caller decides what it passes). Under the alias
``rescale_grad``/``clip_gradient`` apply as MXNet's (weight decay before clipping), unlike the
other modules' "pytorch" branches: they differ only when clipping is active and ``wd != 0``.
What torch.optim.NAdam computes on CPU is ``form=("wd_after_clip", "lerp",
"schedule_product_f32")`` with ``hyper_f32=False`` (its float32 ``mu_product`` is a finding the
oracle explains, docs/conformance.md, not part of the convention).

``decoupled_weight_decay`` (a HYPER key, False by default; torch's flag, NAdamW): the weight
decays first, ``w = w*(1 - lr*wd)``, and no weight decay enters the gradient. Under "pytorch"
only: MXNet's Nadam couples ``wd`` into the gradient, so ``convention="mxnet"`` with the flag on
is a ValueError.
"""
from __future__ import annotations

import numpy as np

from ._util import (as_f64, check_convention, check_form, f32, f32_product, formed_in,
                    guide_gradient, merge_hyper, power, python_clip,
                    pytorch_gradient)
from .error_bound import Tracked

NAME = "nadam"
#: the conventions this module implements ("guide" is refused with NotImplementedError: it
#: needs two gradients per step, see :func:`step_lookahead`)
CONVENTIONS = ("mxnet", "pytorch")
#: torch.optim.NAdam is mathematically MXNet's Nadam: convention="pytorch" runs the mxnet branch
PYTORCH = "mxnet"
STATE = ("m", "v")
HYPER = {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8,
         "schedule_decay": 0.004, "decoupled_weight_decay": False}
#: ``step(..., form=...)`` variants (as in reference/adam.py), listed under "mxnet", which the
#: pytorch convention runs: torch.optim.NAdam's lerp (``exp_avg.lerp_(grad, 1 - beta1)``) and
#: float32 ``mu_product`` (torch/optim/nadam.py, torch 2.13); optax.nadam's bias corrections in
#: the weight's precision (``optax.tree.bias_correction``, optax 0.2.8); ``wd_after_clip``, the
#: other modules' "pytorch" gradient (clip, then torch's coupled weight decay).
FORMS = {
    "lerp": ("mxnet",),
    "constants_in_dtype": ("mxnet",),
    "schedule_product_f32": ("mxnet",),
    "wd_after_clip": ("mxnet",),
}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """Zeros for ``m`` and ``v``, and ``m_schedule = 1.0`` (see the module docstring: in MXNet
    it is one value per optimizer, shared by all indices)."""
    _hyper(hyper)
    shape = np.shape(weight)
    return {"m": np.zeros(shape), "v": np.zeros(shape), "m_schedule": 1.0}


def momentum_schedule(t, beta1, schedule_decay):
    """Dozat's warming momentum ``mu_t = beta1*(1 - 0.5*0.96**(t*schedule_decay))`` (a float)."""
    return beta1 * (1.0 - 0.5 * pow(0.96, t * schedule_decay))


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, form=None, **hyper):
    """One Nadam update as MXNet 1.9.1 computes it (``convention="mxnet"``).

    **"mxnet"** (docs/optimizers/nadam.md; Python-op optimizer: only the clip bound is rounded to
    float32 when ``hyper_f32``; Python-op clip gating, so ``clip_gradient=0.0`` clips every gradient
    to 0; weight decay before clipping). In MXNet's expression order::

        g          = clip(grad*rs + wd*w, c)
        mu_t       = beta1*(1 - 0.5*0.96**(t*schedule_decay))        (Python floats)
        mu_t1      = beta1*(1 - 0.5*0.96**((t+1)*schedule_decay))
        m_schedule = m_schedule*mu_t          # optimizer-wide, shared by every index
        ms_next    = m_schedule*mu_t1
        m          = beta1*m + (1-beta1)*g
        v          = beta2*v + ((1-beta2)*g)*g
        g_hat      = g/(1 - m_schedule)
        m_hat      = m/(1 - ms_next)
        v_hat      = v/(1 - beta2**t)
        m_bar      = (1-mu_t)*g_hat + mu_t1*m_hat
        w          = w - (lr*m_bar)/(sqrt(v_hat) + eps)

    The returned state carries the new ``m_schedule``. ``learning_rate`` (a HYPER key) is
    accepted and ignored: the step uses ``lr``.

    **"guide"**: raises NotImplementedError. guide:179 evaluates the gradient at the look-ahead
    point ``w_i + beta1*v_i`` and guide:180 at ``w_i``: two gradient evaluations per step, which an
    optimizer given one gradient cannot do. Use :func:`step_lookahead`.

    Differences from the guide: no look-ahead gradient, the momentum schedule ``mu_t`` and its
    product in the bias correction (the guide has neither ``schedule_decay`` nor ``mu_t``), the
    ``m_bar`` mixing of the current gradient; the epsilon placement (outside the root of the
    bias-corrected ``v``) is the same.

    **"pytorch"**: the mxnet branch, exactly (``PYTORCH = "mxnet"``; see the module docstring).

    ``form`` (default None: the equations above) is one known variant of them (``FORMS``),
    or a tuple of several applied together::

        lerp                  m = m + (1-beta1)*(g - m)   (torch.optim.NAdam: exp_avg.lerp_)
        constants_in_dtype    mu_t, mu_t1, m_schedule, ms_next and 1 - beta2^t formed in the
                              precision of the implementation checked (a Tracked weight's;
                              beta2^t as t-1 products; optax.nadam)
        schedule_product_f32  m_schedule = float32(float32(m_schedule)*float32(mu_t)), the
                              running product held in float32 whatever the weight's precision
                              (torch.optim.NAdam's mu_product in its default dtype)
        wd_after_clip         g = clip(rs*grad, c) + wd*w, the term added only when wd != 0
                              (the gradient of the other modules' "pytorch" branches)

    Under constants_in_dtype and schedule_product_f32 the returned ``m_schedule`` is Tracked when the weight is (it carries
    the product's rounding bound to the next step).
    """
    forms = ()
    if hyper.get("decoupled_weight_decay") and convention == "mxnet":
        raise ValueError("nadam: decoupled_weight_decay=True is refused under convention 'mxnet' "
                         "(MXNet's Nadam couples wd into the gradient); the 'pytorch' convention "
                         "has it")
    if convention != "guide":          # "guide" is recognised, and refused below
        convention = check_convention(convention, CONVENTIONS, NAME, PYTORCH)
        forms = tuple(check_form(f, FORMS, NAME, convention)
                      for f in (form if isinstance(form, tuple) else (form,)) if f is not None)
    h = _hyper(hyper)
    if convention == "guide":
        raise NotImplementedError(
            "nadam: the guide's Nadam (guide:179-183) needs the gradient at two points per step "
            "(the look-ahead point w + beta1*v for the first moment, w for the second), so it is "
            "not an optimizer step from one gradient; use reference.nadam.step_lookahead with a "
            "gradient function")
    beta1, beta2, eps, sd = h["beta1"], h["beta2"], h["epsilon"], h["schedule_decay"]
    if hyper_f32:
        clip_gradient = f32(clip_gradient)
    w = as_f64(weight)
    g = as_f64(grad)
    m = as_f64(state["m"])
    v = as_f64(state["v"])
    m_schedule = state["m_schedule"]
    if not isinstance(m_schedule, Tracked):   # Tracked: carried by a form (see above)
        m_schedule = float(m_schedule)

    if h["decoupled_weight_decay"]:   # torch's flag: the weight decays first, g has no wd
        if wd:
            w = w * (1.0 - lr * wd)
        wd = 0.0
    if "wd_after_clip" in forms:
        g = pytorch_gradient(g, w, wd=wd, rescale_grad=rescale_grad,
                             clip_gradient=clip_gradient)
    else:
        g = python_clip(g * rescale_grad + wd * w, clip_gradient)
    mu_t = momentum_schedule(t, beta1, sd)
    mu_t1 = momentum_schedule(t + 1, beta1, sd)
    c2 = 1.0 - pow(beta2, t)
    if "constants_in_dtype" in forms:
        mu_t, mu_t1 = formed_in(mu_t, w), formed_in(mu_t1, w)
        c2 = 1.0 - power(formed_in(beta2, w), t)
    if "schedule_product_f32" in forms:
        m_schedule = f32_product(m_schedule, mu_t, w)
    else:
        m_schedule = m_schedule * mu_t
    ms_next = m_schedule * mu_t1
    if "lerp" in forms:
        m = m + (1.0 - beta1) * (g - m)
    else:
        m = beta1 * m + (1.0 - beta1) * g
    v = beta2 * v + ((1.0 - beta2) * g) * g
    g_hat = g / (1.0 - m_schedule)
    m_hat = m / (1.0 - ms_next)
    v_hat = v / c2
    m_bar = (1.0 - mu_t) * g_hat + mu_t1 * m_hat
    w = w - (lr * m_bar) / (np.sqrt(v_hat) + eps)
    return w, {"m": m, "v": v, "m_schedule": m_schedule}


def step_lookahead(weight, state, grad_fn, *, t, lr, beta1, beta2, epsilon, wd=0.0,
                   rescale_grad=1.0, clip_gradient=None):
    """The guide's Nadam (guide:179-183) exactly as written, with a gradient function.

    ``grad_fn(x)`` returns the raw gradient at the point ``x`` (an array of the weight's shape);
    ``grad(x)`` below is the guide convention's gradient ``clip(rs*grad_fn(x), c) + wd*x``
    (clipping whenever ``clip_gradient is not None``). With ``i + 1 = t``::

        v_{i+1}      = beta1*v_i + (1-beta1)*grad(w_i + beta1*v_i)          guide:179
        E[g^2]_{i+1} = beta2*E[g^2]_i + (1-beta2)*grad(w_i)^2                guide:180
        v~_{i+1}     = v_{i+1}/(1 - beta1^(i+1))                            guide:181
        E~_{i+1}     = E[g^2]_{i+1}/(1 - beta2^(i+1))                       guide:182
        w_{i+1}      = w_i + lr/(sqrt(E~_{i+1}) + eps) * -v~_{i+1}           guide:183

    The state slots: ``m`` holds the guide's ``v``, ``v`` holds ``E[g^2]``; ``m_schedule`` (if
    present) is passed through unchanged (the guide has no momentum schedule). The look-ahead point
    adds ``beta1*v_i`` (a gradient-sized quantity) to the weight, as guide:179 writes it. Nothing is
    rounded to float32 here: this is the guide, not MXNet. Pure: the inputs are not modified.
    """
    w = as_f64(weight)
    v = as_f64(state["m"])
    E = as_f64(state["v"])

    def G(x):
        return guide_gradient(as_f64(grad_fn(x)), x, wd=wd, rescale_grad=rescale_grad,
                              clip_gradient=clip_gradient)

    g_look = G(w + beta1 * v)
    g_here = G(w)
    v_new = beta1 * v + (1.0 - beta1) * g_look                          # guide:179
    E_new = beta2 * E + (1.0 - beta2) * (g_here * g_here)               # guide:180
    v_tilde = v_new / (1.0 - pow(beta1, t))                             # guide:181
    E_tilde = E_new / (1.0 - pow(beta2, t))                             # guide:182
    w_new = w + lr / (np.sqrt(E_tilde) + epsilon) * -v_tilde            # guide:183
    new_state = {"m": v_new, "v": E_new}
    if "m_schedule" in state:
        new_state["m_schedule"] = float(state["m_schedule"])
    return w_new, new_state
