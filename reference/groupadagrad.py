"""Reference (float64 oracle) for GroupAdaGrad: AdaGrad with one accumulator per row (MXNet
1.9.1's ``mxnet.optimizer.contrib.GroupAdaGrad``, registry name ``groupadagrad``).

The weight is a matrix (one row per entity, as an embedding table); the history keeps one value
per row, shape ``(rows, 1)``, fed with the mean of the squared gradient over the row. See
docs/optimizers/groupadagrad.md.

MXNet 1.9.1 (python/mxnet/optimizer/contrib.py:30-100 at tag 1.9.1) has two paths:

* a dense gradient (contrib.py:94-100): NDArray operations in the weight's dtype,
  ``g = clip(grad*rescale_grad, c)`` whenever ``clip_gradient`` is not None (contrib.py:96-97:
  ``0.0`` clips every gradient to zero), ``history += mean(square(g), axis=1, keepdims=True)``
  (contrib.py:98; a Kahan sum in the weight's dtype), ``weight -= lr*g/sqrt(history + eps)``
  (contrib.py:99-100); ``lr``, ``rescale_grad`` and ``eps`` are scalar-op doubles (rounded to
  float32 for a float32 weight), the clip bounds float32.
* a row-sparse gradient (contrib.py:79-93): ``mx.nd.contrib.group_adagrad_update``
  (src/operator/contrib/optimizer_op-inl.h:96-138 at tag 1.9.1, ``GroupAdagradDnsRspKernel``),
  lazily on the rows present. Measured: the same formula (optimizer_op-inl.h:133:
  ``lr*g/sqrt(history + eps)``) but ``lr``, ``eps``, ``rescale_grad`` and ``clip_gradient`` are
  float32 fields (optimizer_op-inl.h:47-50, for a float64 weight too); clipping only when
  ``clip_gradient`` is truthy (contrib.py:85-86; the kernel clips when >= 0,
  optimizer_op-inl.h:114), so ``0.0`` does not clip; and the row sum is a plain running sum in
  the weight's dtype (optimizer_op-inl.h:121-126).

MXNet asserts ``wd == 0`` (contrib.py:77) and a 2-D weight (contrib.py:66); this module raises a
ValueError for either. MXNet's history is always float32 (contrib.py:67-68), so a float64 or a
plain float16 weight fails at the first update ("Incompatible attr"); the reference is float64.

PyTorch: torch.optim (torch 2.13) has no GroupAdaGrad (``PYTORCH = None``).
"""
from __future__ import annotations

import numpy as np

from ._util import as_f64, check_convention, f32, kernel_clip, merge_hyper, python_clip

NAME = "groupadagrad"
CONVENTIONS = ("mxnet", "guide")
#: torch.optim has no counterpart
PYTORCH = None
STATE = ("history",)
HYPER = {"eps": 1e-5}


def _hyper(hyper):
    return merge_hyper(NAME, HYPER, hyper)


def state_slots(**hyper) -> tuple:
    """Always ``("history",)``."""
    _hyper(hyper)
    return STATE


def _check_matrix(shape, what="weight"):
    if len(shape) != 2:
        raise ValueError(f"{NAME}: {what} must be 2-D (rows x columns: one history value per "
                         f"row), got shape {tuple(shape)}")


def init_state(weight, **hyper) -> dict:
    """The history starts at zero, one value per row: shape ``(rows, 1)`` (contrib.py:65-69;
    ``eps`` is not its initial value, whatever MXNet's docstring says)."""
    _hyper(hyper)
    shape = np.shape(weight)
    _check_matrix(shape)
    return {"history": np.zeros((shape[0], 1), dtype=np.float64)}


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="mxnet", hyper_f32=True, row_sparse=False, **hyper):
    """One GroupAdaGrad step on a ``(rows, d)`` weight; ``t`` is unused. ``wd`` must be 0.

    In every convention, with ``g`` the preprocessed gradient and ``h`` the ``(rows, 1)``
    history::

        h = h + (1/d) * sum_j g[:, j]^2                    (the row mean of g^2)
        w = w - lr*g/sqrt(h + eps)                         (h broadcast along the row)

    convention="guide": Duchi, Hazan and Singer's AdaGrad ("Adaptive Subgradient Methods for
    Online Learning and Stochastic Optimization", JMLR 12, 2011: ``x_{t+1} = x_t -
    eta*diag(G_t)^(-1/2)*g_t``, ``G_t`` the sum of ``g g^T``) with one accumulator per row, the
    mean of the row's diagonal entries, as MXNet's docstring cites it. The guide has no equation
    for it; the reading taken is MXNet's dense formula evaluated exactly: ``eps`` inside the
    root (as the guide's AdaGrad, guide:95), ``g = clip(rescale_grad*grad, c)`` clipping
    whenever ``clip_gradient`` is not None, and no weight decay.

    convention="mxnet": MXNet 1.9.1's formula, the same, with its preprocessing and rounding.
    Dense gradient: ``g = clip(grad*rescale_grad, c)``, clipping whenever ``c`` is not None
    (``0.0`` clips to zero); ``c`` rounded to float32 when ``hyper_f32`` (``nd.clip``'s float
    bounds); ``lr``, ``rescale_grad``, ``eps`` are used as given (scalar-op doubles, which a
    float32 implementation rounds to float32 anyway). ``row_sparse=True``: the update of the
    rows present in a row-sparse gradient, ``weight``, ``grad`` and ``history`` being those rows
    (the operator ``group_adagrad_update``): clipping only when ``c`` is truthy (``0.0`` is
    off), and ``lr``, ``rescale_grad``, ``clip_gradient``, ``eps`` rounded to float32 when
    ``hyper_f32`` (float parameter fields), for float64 weights too. In the guide convention
    ``row_sparse`` changes nothing: a lazy update applies the same formula to the rows present.
    """
    convention = check_convention(convention, CONVENTIONS, NAME)
    eps = _hyper(hyper)["eps"]
    if wd != 0:
        raise ValueError(f"{NAME}: wd must be 0, got {wd!r} (MXNet 1.9.1 asserts it: weight "
                         "decay is not supported)")
    w = as_f64(weight)
    gr = as_f64(grad)
    hist = as_f64(state["history"])
    _check_matrix(np.shape(w))
    if np.shape(gr) != np.shape(w):
        raise ValueError(f"{NAME}: grad shape {np.shape(gr)} does not match weight shape "
                         f"{np.shape(w)}")
    if np.shape(hist) != (np.shape(w)[0], 1):
        raise ValueError(f"{NAME}: history must have shape {(np.shape(w)[0], 1)}, got "
                         f"{np.shape(hist)}")
    d = np.shape(w)[1]

    if convention == "guide":
        g = python_clip(rescale_grad * gr, clip_gradient)
    elif row_sparse:
        if hyper_f32:
            lr, rescale_grad, eps = f32(lr), f32(rescale_grad), f32(eps)
            clip_gradient = f32(clip_gradient)
        g = kernel_clip(gr * rescale_grad, clip_gradient)
    else:
        if hyper_f32:
            clip_gradient = f32(clip_gradient)
        g = python_clip(gr * rescale_grad, clip_gradient)
    hist_new = hist + np.sum(g * g, axis=1, keepdims=True) / d
    w_new = w - lr * g / np.sqrt(hist_new + eps)
    return w_new, {"history": hist_new}
