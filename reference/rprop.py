"""Reference Rprop (registry name ``rprop``; Riedmiller and Braun 1993, "A Direct Adaptive Method
for Faster Backpropagation Learning: The RPROP Algorithm", ICNN 1993, as torch.optim.Rprop
documents it; docs/optimizers/rprop.md).

MXNet 1.9.1 never had Rprop; torch.optim (torch 2.13) ships it, so the module has one
convention, ``"pytorch"`` (``PYTORCH = "pytorch"``): torch's documented algorithm (the
algorithm box of torch/optim/rprop.py, class Rprop), which is Riedmiller and Braun's
per-weight step sizes without their weight-backtracking: where the gradient changed sign the
step size shrinks and the weight does not move, and the gradient is forgotten (the next step
sees no sign change), as torch's ``_single_tensor_rprop`` does. The step size of every weight
starts at the learning rate on the first step; the learning rate plays no other part (torch
reads it once, so a schedule changes nothing after the first step).

Where the two differ, the reference takes torch's code over its documentation box: the box
keeps the step size unclipped where the sign product is 0, the code clamps it to
``[step_size_min, step_size_max]`` at every step (the two differ only for a learning rate
outside that range, on the first step). The sign of the product ``g*prev`` is taken of the
product (an implementation in float32 rounds it, which underflows for tiny gradients: the
oracle's bound counts such a product as a tie), and the sign of a NaN is 0, as torch's. The
paper has no weight decay, nor has torch.

State: ``prev`` (the last gradient, zeroed where the sign changed; torch's ``prev``) and
``step_size`` (torch's ``step_size``), both starting at zero (``step_size`` takes the learning
rate on the first step).
"""
from __future__ import annotations

import numpy as np

from ._util import as_f64, check_convention, check_form, merge_hyper, python_clip

NAME = "rprop"
CONVENTIONS = ("pytorch",)
#: torch.optim.Rprop's update is the one convention
PYTORCH = "pytorch"
STATE = ("prev", "step_size")
#: torch.optim.Rprop's defaults (``etas=(0.5, 1.2)``, ``step_sizes=(1e-6, 50)``); the paper's
#: eta- 0.5 and eta+ 1.2, its step size bounds 1e-6 and 50 too
HYPER = {"learning_rate": 1e-2, "etaminus": 0.5, "etaplus": 1.2, "step_size_min": 1e-6,
         "step_size_max": 50.0}
#: known variants, ``step(..., form=...)`` (written out in :func:`step`'s docstring)
FORMS = {"backtracking": ("pytorch",), "no_forget": ("pytorch",),
         "unclamped_kept": ("pytorch",), "lag": ("pytorch",)}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("prev", "step_size")``."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """Both start at zero; the first step sets ``step_size`` to the learning rate."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="pytorch", hyper_f32=True, form=None, **hyper):
    """One Rprop step, torch.optim.Rprop's. ``learning_rate`` (a HYPER key) is accepted and
    ignored: the step uses ``lr`` (on the first step only). ``hyper_f32`` is accepted and
    ignored. ``wd`` must be 0 (Rprop has no weight decay).

    With ``g = clip(rescale_grad*grad, clip_gradient)`` (the toolkit's common preprocessing)::

        t = 1:  step_size = lr                          (the box's eta_0 = lr)
        s = g*prev
        s > 0:  step_size = min(step_size*etaplus, step_size_max)
        s < 0:  step_size = max(step_size*etaminus, step_size_min);  g = 0
        else:   step_size = clamp(step_size, step_size_min, step_size_max)  (s = 0, or NaN)
        w = w - step_size*sign(g);  prev = g

    ``sign`` is torch's: 0 for a NaN (a NaN gradient leaves the weight and its step size as
    they were, and is kept as ``prev``, whose products are then NaN: no sign seen).

    ``form`` (``FORMS``), each changing one line::

        backtracking  s < 0: the weight also takes back its last step, w + step_size_{t-1} *
                      sign(prev) (Riedmiller and Braun's weight-backtracking), which torch
                      does not
        no_forget     s < 0: g is kept (the weight steps against the new sign at once and
                      the next step compares with it), where torch zeroes it
        unclamped_kept  s = 0 (or NaN): the step size kept as it is, unclamped (torch's
                      documentation box and optax; torch's code clamps: they differ for a
                      learning rate outside the range, on the first step)
        lag           the weight moves by the previous step's update, not this one's (none
                      where this step's sign flipped), and this step's is kept for the next,
                      in the state's ``update`` (0 where the sign flipped): the first step
                      moves nothing (optax.rprop's scale_by_rprop, optax 0.2.8)

    ``form`` may also be a tuple of these forms, applied together (optax.rprop is ``("lag",
    "unclamped_kept")``); ``lag`` with ``backtracking`` is a ValueError.
    """
    check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    forms = set(form) if isinstance(form, tuple) else {form}
    for f in forms:
        check_form(f, FORMS, NAME, convention)
    if {"lag", "backtracking"} <= forms:
        raise ValueError("rprop: forms 'lag' and 'backtracking' do not go together (taking "
                         "back a step that has not been applied yet is no algorithm of record)")
    h = _hyper(hyper)
    if wd:
        raise ValueError(f"rprop has no weight decay (torch.optim.Rprop has none); got wd={wd!r}")
    lo, hi = h["step_size_min"], h["step_size_max"]
    w = as_f64(weight)
    g = python_clip(rescale_grad * as_f64(grad), clip_gradient)
    prev = as_f64(state["prev"])
    size = as_f64(state["step_size"])
    if t == 1:
        size = size * 0.0 + lr
    product = g * prev
    grew = np.clip(size * h["etaplus"], lo, hi)
    shrank = np.clip(size * h["etaminus"], lo, hi)
    kept = size if "unclamped_kept" in forms else np.clip(size, lo, hi)
    # a NaN product compares neither way: kept, as torch's sign of NaN is 0
    size_new = np.where(product > 0, grew, np.where(product < 0, shrank, kept))
    changed = product < 0
    if "no_forget" not in forms:
        g = np.where(changed, 0.0, g)
    # w - step_size*sign(g), with torch's sign (0 for NaN: the weight stays)
    update = np.where(g > 0, size_new, np.where(g < 0, -size_new, 0.0 * size_new))
    out = {"prev": g, "step_size": size_new}
    if "lag" in forms:  # the last step's update moves the weight; this one's waits
        last = state.get("update")
        last = 0.0 * w if last is None else as_f64(last)
        out["update"] = np.where(changed, 0.0 * update, update)
        return w - np.where(changed, 0.0 * last, last), out
    w_new = w - update
    if "backtracking" in forms:
        w_new = w_new + np.where(changed, size * np.sign(prev), 0.0)
    return w_new, out
