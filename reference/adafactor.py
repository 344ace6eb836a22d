"""Reference Adafactor (registry name ``adafactor``; Shazeer and Stern 2018, "Adafactor: Adaptive
Learning Rates with Sublinear Memory Cost", ICML 2018, arXiv:1804.04235, Algorithms 4 and 5 with
the relative step size of section 8 and the update clipping of section 6; docs/optimizers/
adafactor.md).

The second moment of a matrix is kept factored: one statistic per row and one per column, from
which ``V = R C / (1^T R)`` is rebuilt (the rank-1 matrix nearest the full one in the generalised
Kullback-Leibler divergence, section 3: tests/test_adafactor_proofs.py checks it against scipy).
A weight of rank above 2 is factored over its last two dimensions, the leading ones a batch of
matrices (torch's rule; the paper writes the algorithms for matrices and vectors); a vector or a
0-d weight keeps its second moment whole (Algorithm 5).

Two conventions:

* ``"pytorch"`` (the default, since torch ships Adafactor): torch.optim.Adafactor's documented
  algorithm (torch 2.13, torch/optim/_adafactor.py, class Adafactor and
  ``_single_tensor_adafactor``)::

      rho_t   = min(lr, 1/sqrt(t));  alpha = max(eps2, RMS(w)) * rho_t     (w before the decay)
      w       = w * (1 - lr*wd)                                         (where wd != 0)
      omb     = t^beta2_decay                                           (1 - beta2hat_t)
      matrix: r = lerp(r, mean(g*g, axis=-1), omb);  c = lerp(c, mean(g*g, axis=-2), omb)
              V = r c / max(mean(r, axis=-2), eps1)
      vector: v = lerp(v, g*g, omb);  V = v
      u       = g / sqrt(max(V, eps1^2))
      w       = w - (alpha / max(1, RMS(u)/d)) * u

  (``lerp(a, b, x) = a + x*(b - a)``; ``r``, ``c`` are row and column *means*: ``row_var`` of
  shape ``(..., n, 1)`` and ``col_var`` of shape ``(..., 1, m)``, torch's.)
* ``"paper"``: Algorithms 4 and 5 as printed: the statistics are row and column *sums* of
  ``G^2 + eps1`` (``eps1`` added inside, no clamps), ``R = beta R + (1 - beta) rowsum``,
  ``V = R C / sum(R)``, ``U = G / sqrt(V)``, ``U_hat = U / max(1, RMS(U)/d)``,
  ``w = w - alpha U_hat`` with ``alpha`` and ``beta2hat_t = 1 - t^beta2_decay`` as above. The
  paper has no weight decay: ``wd`` enters as torch's (decoupled, ``w*(1 - lr*wd)``).

The relative step's cap is the learning rate (the paper's ``10^-2``, torch's ``lr``): with the
defaults, ``rho_t = min(1e-2, 1/sqrt(t))``. ``epsilon1`` None is each convention's default: the
paper's ``1e-30``; torch's ``finfo(dtype).eps`` of the weight's dtype, which this float64
module cannot know, so the toolkit hands it the number (float64's eps when called without one).

State (torch's names and shapes): ``row_var`` ``(..., n, 1)`` and ``col_var`` ``(..., 1, m)``
for a weight of rank 2 or more, ``variance`` (the weight's shape) otherwise; the slot a weight
does not use is an empty array of shape ``(0,)`` (torch keeps ``None``), so every weight has the
same three slots.
"""
from __future__ import annotations


import numpy as np

from ._util import (as_f64, check_convention, check_form, handed_to, host_double, merge_hyper,
                    python_clip)

NAME = "adafactor"
CONVENTIONS = ("pytorch", "paper")
#: torch.optim.Adafactor's update is a branch of its own (means, clamps, lerp)
PYTORCH = "pytorch"
STATE = ("row_var", "col_var", "variance")
#: torch.optim.Adafactor's defaults, which are the paper's (section 9: decay exponent -0.8,
#: eps2 1e-3, d 1, relative step capped at 1e-2)
HYPER = {"learning_rate": 1e-2, "beta2_decay": -0.8, "epsilon1": None, "epsilon2": 1e-3,
         "clip_threshold": 1.0}
#: known variants of the same update, ``step(..., form=...)`` (written out in :func:`step`'s
#: docstring): mistakes that are easy to make and pass many cases, which the oracle names
FORMS = {
    "unfactored": ("pytorch", "paper"),
    "rms_after_decay": ("pytorch", "paper"),
    "no_update_clipping": ("pytorch", "paper"),
    "no_relative_step": ("pytorch", "paper"),
}
#: ``epsilon1`` None under "paper" (Algorithm 4's epsilon_1)
PAPER_EPSILON1 = 1e-30
#: the empty array of a slot a weight does not use
UNUSED = (0,)


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("row_var", "col_var", "variance")``; a weight uses the first two (rank 2 or
    more) or the last."""
    _hyper(hyper)
    return STATE


def factored(shape) -> bool:
    """Whether a weight of ``shape`` keeps its second moment factored (rank 2 or more)."""
    return len(tuple(shape)) >= 2


def state_shapes(shape) -> dict:
    """Each slot's shape for a weight of ``shape`` (:data:`UNUSED` where the slot is unused)."""
    shape = tuple(int(s) for s in shape)
    if factored(shape):
        return {"row_var": shape[:-1] + (1,), "col_var": shape[:-2] + (1, shape[-1]),
                "variance": UNUSED}
    return {"row_var": UNUSED, "col_var": UNUSED, "variance": shape}


def init_state(weight, **hyper) -> dict:
    """Every statistic starts at zero (Algorithm 4, line 1; torch's zeros)."""
    _hyper(hyper)
    return {k: np.zeros(s, np.float64) for k, s in state_shapes(np.shape(weight)).items()}


def epsilon1(convention, given):
    """``epsilon1`` of a step: the value given, else the convention's default
    (:data:`PAPER_EPSILON1`; under "pytorch" float64's eps, module docstring)."""
    if given is not None:
        return float(given)
    return PAPER_EPSILON1 if convention == "paper" else float(np.finfo(np.float64).eps)


def estimate(row, col, convention="paper", eps1=0.0):
    """The full second moment rebuilt from the factored statistics ``row`` ``(..., n, 1)`` and
    ``col`` ``(..., 1, m)``: ``R C / sum(R)`` (Algorithm 4, line 8; the rank-1 matrix nearest
    the full one in the generalised KL divergence, section 3), or under "pytorch" from the means
    ``r c / max(mean(r), eps1)``."""
    if convention == "paper":
        return (row * col) / np.sum(row, axis=-2, keepdims=True)
    n = np.shape(value_of(row))[-2]
    return (row * col) / np.maximum(np.sum(row, axis=-2, keepdims=True) / n, eps1)


def _rms(x):
    """``RMS(x) = sqrt(sum(x^2)/size)``, as torch forms it: ``|x|/sqrt(size)``."""
    return np.sqrt(np.sum(x * x)) / float(max(int(np.size(value_of(x))), 1)) ** 0.5


def value_of(x):
    return getattr(x, "value", x)


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="pytorch", hyper_f32=True, form=None, **hyper):
    """One Adafactor step (module docstring). ``learning_rate`` (a HYPER key) is accepted and
    ignored: the step's cap is ``lr``. ``hyper_f32`` is accepted and ignored (no "mxnet"
    convention). ``g = clip(rescale_grad*grad, clip_gradient)`` first (the toolkit's common
    preprocessing: torch has neither, so at their defaults they change nothing).

    ``form`` (``FORMS``), or a tuple of them (several at once), each changing one thing::

        unfactored          every weight keeps its second moment whole, as a vector does
                            (Algorithm 5 for a matrix too: RMSProp with Adafactor's schedule)
        rms_after_decay     alpha from the RMS of the weight after the weight decay
        no_update_clipping  u not divided by max(1, RMS(u)/d)
        no_relative_step    rho_t = lr, not min(lr, 1/sqrt(t)) (optax.adafactor's)
    """
    convention = check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    forms = set(form) if isinstance(form, tuple) else {form}
    for f in forms:
        check_form(f, FORMS, NAME, convention)
    h = _hyper(hyper)
    decay, eps2, d = h["beta2_decay"], h["epsilon2"], h["clip_threshold"]
    eps1 = epsilon1(convention, h["epsilon1"])
    w = as_f64(weight)
    g = python_clip(rescale_grad * as_f64(grad), clip_gradient)
    shape = np.shape(value_of(w))
    whole = "unfactored" in forms or not factored(shape)
    # the host's double-precision constants, handed to the weight's precision
    omb = handed_to(host_double(float(t) ** decay, w), w)           # 1 - beta2hat_t
    rho = min(float(lr), 1.0 / float(t) ** 0.5)                     # relative step, section 8
    if "no_relative_step" in forms:
        rho = float(lr)
    alpha = np.maximum(eps2, _rms(w)) * rho                          # Algorithm 4, line 2
    if wd:
        w = w * handed_to(1.0 - lr * wd, w)
    if "rms_after_decay" in forms:
        alpha = np.maximum(eps2, _rms(w)) * rho
    if "no_update_clipping" in forms:  # (no division at all: a Tracked bound over inf is inf)
        d = None
    if convention == "paper":
        return _paper(w, g, state, shape, omb, eps1, alpha, d, whole)
    if not whole:
        r, c = as_f64(state["row_var"]), as_f64(state["col_var"])
        gg = g * g
        r = r + omb * (np.sum(gg, axis=-1, keepdims=True) / shape[-1] - r)
        c = c + omb * (np.sum(gg, axis=-2, keepdims=True) / shape[-2] - c)
        v_hat = estimate(r, c, convention, eps1)
        out = {"row_var": r, "col_var": c, "variance": as_f64(state["variance"])}
    else:
        v = _whole(state, shape)
        v_hat = v = v + omb * (g * g - v)
        out = _whole_out(state, v, shape)
    u = g / np.sqrt(np.maximum(v_hat, eps1 * eps1))
    denom = 1.0 if d is None else np.maximum(1.0, _rms(u) / d)       # update clipping
    return w - (alpha / denom) * u, out


def _whole(state, shape):
    """The whole second moment of a step: ``variance``; under the form "unfactored" a matrix's
    too, carried in ``row_var`` (zeros to begin with) with its full shape."""
    if factored(shape):
        v = as_f64(state["row_var"])
        return v if np.shape(value_of(v)) == shape else np.zeros(shape)
    return as_f64(state["variance"])


def _whole_out(state, v, shape):
    if factored(shape):  # "unfactored": the matrix's whole moment in row_var's place
        return {"row_var": v, "col_var": as_f64(state["col_var"]),
                "variance": as_f64(state["variance"])}
    return {"row_var": as_f64(state["row_var"]), "col_var": as_f64(state["col_var"]),
            "variance": v}


def _paper(w, g, state, shape, omb, eps1, alpha, d, whole):
    """Algorithms 4 (rank 2 or more) and 5 (otherwise) from line 3 on."""
    beta = 1.0 - omb
    gg = g * g + eps1
    if not whole:
        r = beta * as_f64(state["row_var"]) + omb * np.sum(gg, axis=-1, keepdims=True)  # line 6
        c = beta * as_f64(state["col_var"]) + omb * np.sum(gg, axis=-2, keepdims=True)  # line 7
        v_hat = estimate(r, c, "paper", eps1)                                        # line 8
        out = {"row_var": r, "col_var": c, "variance": as_f64(state["variance"])}
    else:
        v_hat = beta * _whole(state, shape) + omb * gg                      # Algorithm 5, line 6
        out = _whole_out(state, v_hat, shape)
    u = g / np.sqrt(v_hat)                                                # line 9
    u_hat = u if d is None else u / np.maximum(1.0, _rms(u) / d)          # line 10
    return w - alpha * u_hat, out                                         # line 11
