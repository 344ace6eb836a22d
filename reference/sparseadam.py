"""Reference SparseAdam (registry name ``sparseadam``; torch.optim.SparseAdam, the "lazy" Adam
for sparse gradients: Kingma and Ba 2015's moments and bias corrections, applied only where the
gradient has entries; docs/optimizers/sparseadam.md).

MXNet 1.9.1 has no optimizer of this name (its Adam with ``lazy_update=True`` is the nearest:
see below); torch.optim (torch 2.13) ships it, so the module has one convention, ``"pytorch"``
(``PYTORCH = "pytorch"``): torch's update, torch/optim/_functional.py ``sparse_adam``, whose
class documentation (torch/optim/sparse_adam.py) says what it is (Adam's moments and step, only
for the entries present in the gradient) but has no algorithm box: the code is the algorithm,
line by line below.

What torch computes for the rows present in a (coalesced) sparse gradient ``g``, with the
parameter's own count ``t`` (it advances at every step the parameter has a gradient, even an
empty one, which moves nothing)::

    m = m + (1 - beta1)*(g - m)                    (torch's "old += (1 - b)*(new - old)")
    v = v + (1 - beta2)*(g*g - v)
    w = w - lr*sqrt(1 - beta2^t)/(1 - beta1^t) * m/(sqrt(v) + eps)

Rows absent from the gradient keep their weight, ``m`` and ``v`` exactly (nothing decays).
Mathematically the moments are Adam's (``m + (1-b)(g - m) = b*m + (1-b)*g``), and epsilon is
added to the uncorrected root with both bias corrections folded into the step size: MXNet's
placement (``reference.adam``, convention "mxnet", with no weight decay), not torch.optim.Adam's
(which adds eps to the corrected root, ``sqrt(v/(1 - beta2^t)) + eps``): the two differ by a
factor ``sqrt(1 - beta2^t)`` on epsilon, 31.6 at t = 1 with beta2 = 0.999.

A dense gradient is a sparse gradient with every row present: the update above, everywhere.
That is what this module's :func:`step` takes (the oracle's cases are dense); the toolkit's lazy
row-sparse step is checked to be this step on the rows present (tests/test_row_sparse.py).

The moments' rounded form (torch's ``m + (1-beta1)*(g - m)``, not ``beta1*m + (1-beta1)*g``)
is the one written here, so the float64 trajectory is torch's arithmetic. torch's SparseAdam
has no weight decay: ``wd`` must be 0.

State: ``mean`` (torch's ``exp_avg``) and ``var`` (torch's ``exp_avg_sq``), both starting at
zero.
"""
from __future__ import annotations

import numpy as np

from ._util import (as_f64, check_convention, check_form, formed_in, handed_to, host_double,
                    host_power, merge_hyper, power, python_clip)

NAME = "sparseadam"
CONVENTIONS = ("pytorch",)
#: torch.optim.SparseAdam's update is the one convention
PYTORCH = "pytorch"
STATE = ("mean", "var")
#: torch.optim.SparseAdam's defaults (``lr=1e-3, betas=(0.9, 0.999), eps=1e-8``)
HYPER = {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}
#: known variants, ``step(..., form=...)`` (written out in :func:`step`'s docstring)
FORMS = {"eps_corrected": ("pytorch",), "constants_in_dtype": ("pytorch",)}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("mean", "var")``."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """Both moments start at zero (torch's ``zeros_like``)."""
    return {name: np.zeros(np.shape(weight), dtype=np.float64) for name in state_slots(**hyper)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="pytorch", hyper_f32=True, form=None, **hyper):
    """One SparseAdam step on a dense gradient (every row present), torch.optim.SparseAdam's.
    ``learning_rate`` (a HYPER key) is accepted and ignored: the step uses ``lr``.
    ``hyper_f32`` is accepted and ignored. ``wd`` must be 0 (torch's SparseAdam has none).

    With ``g = clip(rescale_grad*grad, clip_gradient)`` (the toolkit's common preprocessing;
    torch has neither) and ``t`` the parameter's count (1 on its first step)::

        m = m + (1 - beta1)*(g - m)
        v = v + (1 - beta2)*(g*g - v)
        step_size = lr*sqrt(1 - beta2^t)/(1 - beta1^t)      (formed on the host in double)
        w = w - step_size * m/(sqrt(v) + eps)

    ``form`` (``FORMS``), each changing one line::

        eps_corrected       w = w - step_size * m/(sqrt(v) + eps*sqrt(1 - beta2^t)):
                            epsilon added to the bias-corrected root, as torch.optim.Adam adds
                            it (SparseAdam written as Adam on the rows present)
        constants_in_dtype  1 - beta1^t, 1 - beta2^t and the step size formed in the precision
                            of the implementation checked (a Tracked weight's), beta^t as t-1
                            products, instead of once in double precision
    """
    check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    form = check_form(form, FORMS, NAME, convention)
    h = _hyper(hyper)
    if wd:
        raise ValueError(f"sparseadam has no weight decay (torch.optim.SparseAdam has none); "
                         f"got wd={wd!r}")
    beta1, beta2, eps = h["beta1"], h["beta2"], h["epsilon"]
    w = as_f64(weight)
    g = python_clip(rescale_grad * as_f64(grad), clip_gradient)
    m = as_f64(state["mean"])
    v = as_f64(state["var"])
    m_new = m + (1.0 - beta1) * (g - m)          # exp_avg += (1 - beta1)*(grad - exp_avg)
    v_new = v + (1.0 - beta2) * (g * g - v)      # exp_avg_sq += (1 - beta2)*(grad^2 - exp_avg_sq)
    if form == "constants_in_dtype":
        bc1 = 1.0 - power(formed_in(beta1, w), t)
        bc2 = 1.0 - power(formed_in(beta2, w), t)
        step_size = lr * np.sqrt(bc2) / bc1
    else:
        # torch's Python floats: step_size = lr*math.sqrt(bias_correction2)/bias_correction1,
        # handed to the weight's precision as one constant
        bc1 = 1.0 - host_power(host_double(beta1, w), t)
        bc2 = 1.0 - host_power(host_double(beta2, w), t)
        step_size = handed_to(lr * np.sqrt(bc2) / bc1, w)
    if form == "eps_corrected":
        eps = eps * np.sqrt(bc2)
    w_new = w - step_size * (m_new / (np.sqrt(v_new) + eps))
    return w_new, {"mean": m_new, "var": v_new}
