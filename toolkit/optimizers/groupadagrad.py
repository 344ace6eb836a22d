"""GroupAdaGrad: AdaGrad with one accumulator per row of a matrix weight (registry name
``groupadagrad``; MXNet 1.9.1's ``mxnet.optimizer.contrib.GroupAdaGrad``,
python/mxnet/optimizer/contrib.py:30-100 at tag 1.9.1; docs/optimizers/groupadagrad.md;
reference/groupadagrad.py)::

    g = clip(rescale_grad*grad, c)
    h = h + mean(g*g, axis=1)             (h: one value per row, shape (rows, 1))
    w = w - lr*g/sqrt(h + eps)

The step is a reduction along each row, not an element-wise rule: it runs on the row kernels of
:mod:`toolkit.backends.rows` (the row's sum of squares accumulated in float64 in a fixed order,
rounded to the weight's dtype, divided by the row length in that dtype: MXNet's order of the
rounding, with a more accurate sum). The same row kernel serves the dense step (every row) and
the lazy update of a row-sparse gradient (the rows present): :meth:`GroupAdaGrad._rows_step`.

Convention "mxnet" takes MXNet's preprocessing per path: a dense gradient clips whenever
``clip_gradient`` is not None (``0.0`` clips to zero) and rounds only the clip bound to float32;
a row-sparse gradient (MXNet's operator ``group_adagrad_update``) clips only when
``clip_gradient`` is truthy and rounds ``lr``, ``rescale_grad``, ``clip_gradient`` and ``eps``
to float32. Convention "guide" is the same formula with the hyperparameters as given.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..backends import arrays
from ..backends.launches import Launch
from . import gradient
from .base import Optimizer
from .registry import register
from .spec_spaces import Decades, OneOf
from .spec import BenchSetting, Spec
from .validation import nonneg

__all__ = ["GroupAdaGrad"]


class GroupAdaGradRow(NamedTuple):
    """The scalars of :func:`row_rules` (all three functions read the same row), rounded to the
    weight's dtype: packed on the host, read by name in the kernel."""
    lr: float
    rescale: float     #: rescale_grad
    clip_bound: float  #: clip_gradient, negative for none
    eps: float


def row_rules(f):
    """The row rule of GroupAdaGrad (:mod:`toolkit.backends.rows`), ``hp`` a
    :class:`GroupAdaGradRow`::

        p = clip(rs*g, c)                      (prep)
        h = h + f(f(s)/f(n));  a = sqrt(h + eps)   (reduce_row: s = sum of p*p over the row)
        w = w - (lr*p)/a                       (apply)
    """
    grad_of = gradient.rescaled(f)  # MXNet's g*rs: the same product (IEEE * commutes)

    def prep(g, hp):
        p = GroupAdaGradRow(*hp)
        return grad_of(g, p.rescale, p.clip_bound)

    def reduce_row(h, s, n, hp):
        p = GroupAdaGradRow(*hp)
        h = h + f(f(s) / f(n))
        return h, math.sqrt(h + p.eps)

    def apply(w, g, a, hp):
        p = GroupAdaGradRow(*hp)
        return w - (p.lr * g) / a
    return prep, reduce_row, apply


SPEC = Spec(
    name="groupadagrad", reference="reference.groupadagrad",
    pytorch=None, torch=None,
    space={"eps": OneOf(1e-05, Decades(-10, -1))},
    fixed={"wd": 0.0}, fixed_reason="MXNet 1.9.1 asserts wd == 0",
    matrix=True,
    record={"eps": 1e-05}, record_ulps=0,
    layouts=({"learning_rate": 0.1},),
    trainer=({"eps": 0.001},),
    demo={"learning_rate": 0.1},
    bench=(BenchSetting("groupadagrad", {}, quick=True),),
)


@register
class GroupAdaGrad(Optimizer):
    """GroupAdaGrad (MXNet ``groupadagrad``): AdaGrad with one learning-rate accumulator per row.

    ``h = h + mean(g*g, axis=1);  w = w - lr*g/sqrt(h + eps)`` with ``g = clip(rs*grad, c)``,
    for a 2-D weight (an embedding table: one accumulator per entity). Weight decay is not
    supported: a step whose weight decay ``wd*wd_mult`` is not 0 raises ValueError before
    anything is written (MXNet 1.9.1 asserts). State: ``history`` of shape ``(rows, 1)``, the
    weight's dtype (MXNet keeps it in float32 only, so its float64 weights fail; not
    reproduced). A ``toolkit.Trainer`` lays the histories of a group's parameters end to end
    and steps the group in one segmented row call.

    Example::

        >>> import numpy as np
        >>> from toolkit import optimizer
        >>> opt = optimizer.create("groupadagrad", learning_rate=0.5, eps=0.0)
        >>> w = np.zeros((2, 2), np.float32); h = opt.create_state(0, w)
        >>> opt.update(0, w, np.array([[3.0, 4.0], [0.0, 0.0]], np.float32), h)
        >>> h.ravel()                            # the row means of g*g: 12.5 and 0
        array([12.5,  0. ], dtype=float32)
        >>> w[0]                                 # -0.5*g/sqrt(12.5)
        array([-0.42426407, -0.56568545], dtype=float32)
    """

    spec = SPEC
    mxnet_kernel = False      # MXNet's dense path is NDArray operations (Python ops)
    state_like_weight = False  # one history value per row: laid out per row in a Trainer

    domains = {"float_stable_eps": nonneg(keyword="eps")}

    def __init__(self, eps=1e-5, **kwargs):
        self.float_stable_eps = eps
        super().__init__(**kwargs)

    def state_slots(self):
        return ("history",)

    def row_sparse_mode(self, index):
        """"lazy": MXNet 1.9.1 updates only the rows present (the operator
        ``group_adagrad_update``)."""
        return "lazy"

    # --- the weight is a matrix, the history one column -------------------------------------
    def check_shape(self, shape):
        if len(shape) != 2:
            raise ValueError(f"GroupAdaGrad needs a 2-D weight (rows x columns: one history "
                             f"value per row; MXNet 1.9.1 asserts it), got weight of shape "
                             f"{tuple(shape)}")

    def _check_weight(self, weight):
        w = super()._check_weight(weight)
        self.check_shape(w.shape)
        return w

    def _slot_template(self, name, weight):
        if len(weight.shape) != 2:
            raise ValueError(f"GroupAdaGrad needs a 2-D weight, got weight of shape "
                             f"{tuple(weight.shape)}")
        return (weight.shape[0], 1), weight.dtype

    def _template_key(self):
        # _slot_template above reads the weight's shape and dtype only: the base key holds
        return self.state_slots(), self._tuple_state()

    def _init_slot(self, name, weight):
        d = arrays.describe(weight)
        if d.kind == arrays.HOST:
            return np.zeros((d.shape[0], 1), d.dtype)
        if d.shape[1] == 0:
            raise ValueError("GroupAdaGrad: a CUDA weight with no columns has no history to "
                             f"keep (weight shape {d.shape})")
        return arrays.zeros_like(weight[:, :1])  # the weight's kind, device and dtype

    # --- weight decay: refused per step, where wd*wd_mult is known ---------------------------
    def _step_scalars(self, index):
        t, lr, wd = super()._step_scalars(index)
        if wd != 0:
            raise ValueError(
                f"GroupAdaGrad does not support weight decay (MXNet 1.9.1 asserts wd == 0), but "
                f"wd is {wd!r} for index {index!r} (wd={self.wd!r} times its wd_mult); "
                "construct it with wd=0, or set wd_mult 0 for this index")
        return t, lr, wd

    # --- the step --------------------------------------------------------------------------
    def _reference_call_kwargs(self, index, t):
        # a row-sparse gradient's rows take the operator's preprocessing (module docstring)
        return {"row_sparse": True} if self._row_sparse else {}

    @property
    def _row_sparse(self):
        return bool(getattr(self, "_row_sparse_numerics", False))

    def _hyper(self):
        """``rescale``, ``clip_bound`` and ``eps`` of this step by name (the fields of
        :class:`GroupAdaGradRow` but ``lr``), per convention and path (module docstring);
        ``clip_bound`` is -1 for no clipping."""
        rs, c, eps = self.rescale_grad, self.clip_gradient, self.float_stable_eps
        if self.convention != "mxnet":
            return dict(rescale=rs, clip_bound=-1.0 if c is None else c, eps=eps)
        f32 = (lambda x: float(np.float32(x)))
        if self._row_sparse:  # the operator's float fields, and its truthy clip gate
            return dict(rescale=f32(rs), clip_bound=f32(c) if c else -1.0, eps=f32(eps))
        return dict(rescale=rs, clip_bound=-1.0 if c is None else f32(c), eps=eps)

    def _kernel_step(self, index, weight, grad, state, t, lr, wd):
        # a lazy row-sparse step's launcher holds its rows (grad: their values)
        return self._rows_step(index, weight, grad, None, state, t, lr, wd)

    def _rows_step(self, index, weight, grad_rows, rows, state, t, lr, wd):
        """The launch of one step on validated arrays: gradient row
        ``k`` updates weight row ``rows[k]`` and history row ``rows[k]``; every other row is
        left as it is. ``rows`` None: the launcher's rows (a lazy row-sparse step), else every
        row, gradient row ``k`` to weight row ``k``.

        ``weight``: ``(n_rows, ncols)`` (the float32 master under multi_precision), C- or
        Fortran-contiguous; ``grad_rows``: ``(len(rows), ncols)`` of the weight's dtype (or
        float16 for a float32 master); ``rows``: a host int64 array, sorted and unique (a CUDA
        step also takes a device int64 array); ``state``: the ``(n_rows, 1)`` history. While the
        step runs under ``Optimizer._row_sparse_step(mode)`` convention "mxnet" takes the
        numerics of MXNet's row-sparse operator, else those of its dense path (module
        docstring). ``t`` and ``wd`` (0) are accepted for the common interface. Nothing is
        checked here: the caller has validated the arrays and the rows."""
        if self.convention == "mxnet" and self._row_sparse:
            lr = float(np.float32(lr))
        hyper = GroupAdaGradRow(lr=lr, **self._hyper())
        return Launch("rows", row_rules, weight, grad_rows, (state,), hyper, rows=rows)
