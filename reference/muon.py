"""Reference Muon (registry name ``muon``; Jordan et al. 2024, "Muon: An optimizer for hidden
layers in neural networks", kellerjordan.github.io/posts/muon; torch 2.13's ``torch.optim.Muon``,
torch/optim/_muon.py, class Muon, ``_single_tensor_muon``, ``_zeropower_via_newtonschulz``,
``_adjust_lr``).

MomentUm Orthogonalized by Newton-Schulz: the momentum of a 2-D weight's gradient is replaced by
an approximate orthogonalisation (``U V^T`` of its SVD ``U S V^T``) computed by a few quintic
Newton-Schulz iterations, then applied with a shape-dependent step. Muon is for the 2-D weights
of hidden layers only: any other weight (a bias, a gain, a convolution filter not reshaped) is a
ValueError, as torch refuses it; the usual split optimises those (and, by the authors' advice,
the embedding and the output layer) with AdamW.

Newton-Schulz (:func:`newton_schulz`), with ``(a, b, c)`` the coefficients::

    X = G / max(|G|_F, eps)        ("pytorch": torch's clamp)  or  G / (|G|_F + eps)  ("paper")
    X = X^T                        if rows > cols (so that the Gram matrix is the small one)
    repeat steps times:  A = X X^T;  B = b A + c A A;  X = a X + B X
    X = X^T                        back, if transposed

Each iteration acts on the singular values alone: with ``X = U diag(s) V^T`` every term is
``U diag(.) V^T``, so ``X <- U diag(phi(s)) V^T`` with the scalar odd quintic
``phi(s) = a s + b s^3 + c s^5`` (:func:`phi`; ``steps`` of them: :func:`phi_iterate`).
The normalisation puts every singular value in (0, 1]; the default coefficients (slope 3.4445
at 0) do not converge to 1 but leave each in a band (tests/test_muon_proofs.py: 0.682..1.134 for
``s`` in [1e-2, 1] after 5 steps, 0.471..1.202 for ``s`` in [1e-3, 1]).

Two conventions:

* ``"pytorch"`` (the default, since torch ships Muon): ``_single_tensor_muon``::

      buf = lerp(buf, g, 1 - momentum)                  (buf + (1 - momentum)*(g - buf))
      u   = lerp(g, buf, momentum) if nesterov else buf
      O   = NS(u)                                       (clamp(|X|_F, min=eps))
      w   = w * (1 - lr*wd)                              (lr unadjusted)
      w   = w - adjust(lr) * O

  with ``adjust(lr) = lr*sqrt(max(1, rows/cols))`` (``adjust_lr`` None or ``"original"``) or
  ``lr*0.2*sqrt(max(rows, cols))`` (``"match_rms_adamw"``, Moonshot's "Muon is Scalable for LLM
  Training", arXiv:2502.16982). torch lerps as ``a + w*(b - a)`` for ``|w| < 0.5``, else
  ``b - (b - a)*(1 - w)``; this module writes it the same way (torch's CPU kernel fuses a
  multiply-add there, so float64 results may differ from torch's in the last bit).
* ``"paper"``: the post's algorithm: ``buf = momentum*buf + g``, ``u = g + momentum*buf`` with
  Nesterov, else ``buf``; ``O = NS(u)`` with ``|X|_F + eps``; ``w = w - lr*max(1,
  rows/cols)^0.5 * O``. The post has no weight decay: ``wd`` enters as torch's (decoupled,
  ``w*(1 - lr*wd)``, the authors' repository's too). ``adjust_lr`` applies as under "pytorch"
  ("original" is the post's scale).

The two conventions orthogonalise multiples of one another (torch's buffer is ``1 - momentum``
times the post's, by induction, and so is the Nesterov mix); NS is scale-invariant but for the
``eps`` of the normalisation, so they differ by ``eps``'s placement and by rounding.

Precision: torch and the post run the Newton-Schulz iteration in bfloat16; the oracle runs it in
float64 (the toolkit holds a bfloat16 iteration to a bound: tests/test_muon_proofs.py measures
it) unless ``form="bfloat16"``, which emulates torch's CPU arithmetic (:func:`bf16`): the
input rounded to bfloat16 (through float32, as torch converts), the Frobenius norm accumulated
in float and rounded to bfloat16, the division rounded, and every matrix product accumulated
in float32 and rounded once to bfloat16, ``addmm``'s ``beta*C + alpha*(A B)`` formed before
that one rounding (torch 2.13 CPU, measured: products and ``addmm`` agree with this model but
for about 2e-4 of the elements, near ties where float32's accumulation order, which this
emulation replaces by float64's, decides the bfloat16 rounding). The result, bfloat16, is then
added to the float64 weight exactly as torch's ``add_`` promotes it.

Hyperparameters (MXNet-style names; torch's in parentheses): ``learning_rate`` (``lr``, 1e-3;
accepted and ignored by ``step``, which takes ``lr``), ``momentum`` (0.95), ``nesterov``
(True), ``ns_coefficients`` ((3.4445, -4.7750, 2.0315)), ``epsilon`` (``eps``, 1e-7),
``ns_steps`` (5), ``adjust_lr`` (``adjust_lr_fn``, None). Weight decay is ``step``'s ``wd``
(torch's default 0.1 is the caller's to pass). State: ``momentum_buffer`` (torch's name), the
weight's shape, zeros to begin with.

Error bounds (:class:`reference.error_bound.Tracked`): on Tracked inputs :func:`newton_schulz`
returns a Tracked result whose bound is normwise, since a componentwise running bound through
``steps`` quintic iterations would be vacuous (a perturbation of a small singular value grows by
up to ``phi'(0) = a`` per step, 3.4445^5 ~ 480 over five, and ``|A||B|`` overestimates ``|A B|``
of near-orthogonal factors by about the square root of the inner dimension). The bound
(:func:`newton_schulz_bound`), first order like every Tracked bound:

* the normalised input ``X_0`` is computed with Tracked arithmetic (its sum of squares, root,
  clamp and division); ``d_0`` is the Frobenius norm of its componentwise bound;
* iteration ``k`` from the exact ``X_{k-1}`` adds a local error ``d_k``: the Frobenius norm of the
  componentwise bound of its three products and two scaled sums in unit roundoff ``u`` (a
  dot product of ``n`` terms: ``n u sum|x_i y_i|``; a ``beta C + alpha A B`` of inner dimension
  ``n``: ``(n + 3) u (|alpha||A||B| + |beta||C|)``, the constants' own rounding included);
* an error ``E`` in ``X_k`` reaches the output through the rest of the iteration, the matrix
  function ``X = U diag(s) V^T -> U diag(f(s)) V^T`` with ``f = phi^(steps-k)`` (odd), whose
  Frechet derivative has Frobenius norm at most the largest of ``|f'(t)|`` and ``f(t)/t`` over
  the interval of ``X_k``'s singular values ``phi^k(s_0)`` (the divided differences of an odd
  ``f``; Noferini 2017, "A formula for the Frechet derivative of a generalized matrix
  function", SIAM J. Matrix Anal. Appl. 38(2)): that largest value ``L_k`` is taken on a grid
  of 4001 points and the singular values themselves;
* the output's bound is ``sum_k L_k d_k`` (``L_steps = 1``), for every element (an element is at
  most the Frobenius norm of the error).

With ``form="bfloat16"`` the value is the emulation of torch's bfloat16 arithmetic, which
differs from torch's only where float32's accumulation order decides a bfloat16 rounding; its
bound is ``L_0 d_0`` (the input's own error, in the checked precision) plus ``L * 2^-8`` with
``L`` the whole iteration's constant: a model of those flips whose size is measured, not derived
(tests/test_muon_proofs.py: at most 0.18 of it).
"""
from __future__ import annotations

import math

import numpy as np

from . import lowbit
from ._util import as_f64, check_convention, check_form, merge_hyper, python_clip
from .error_bound import Tracked

NAME = "muon"
CONVENTIONS = ("pytorch", "paper")
#: torch.optim.Muon's update is a branch of its own (lerp, clamp)
PYTORCH = "pytorch"
STATE = ("momentum_buffer",)
#: Keller Jordan's quintic coefficients (torch's DEFAULT_A, DEFAULT_B, DEFAULT_C)
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
#: torch.optim.Muon's defaults but weight decay (``step``'s ``wd``)
HYPER = {"learning_rate": 1e-3, "momentum": 0.95, "nesterov": True,
         "ns_coefficients": NS_COEFFICIENTS, "epsilon": 1e-7, "ns_steps": 5, "adjust_lr": None}
#: ``step(..., form=...)``: ``"bfloat16"`` runs the Newton-Schulz iteration in bfloat16 as torch
#: does on CPU (module docstring), under either convention (the post's code is bfloat16 too)
FORMS = {"bfloat16": ("pytorch", "paper")}
#: the values of ``adjust_lr`` (torch's ``adjust_lr_fn``)
ADJUST_LR = (None, "original", "match_rms_adamw")


def _hyper(hyper):
    h = merge_hyper(NAME, HYPER, hyper)
    if h["adjust_lr"] not in ADJUST_LR:
        raise ValueError(f"{NAME}: adjust_lr must be one of {ADJUST_LR}, got {h['adjust_lr']!r}")
    if len(tuple(h["ns_coefficients"])) != 3:
        raise ValueError(f"{NAME}: ns_coefficients must be three numbers (a, b, c)")
    if int(h["ns_steps"]) != h["ns_steps"] or h["ns_steps"] < 0:
        raise ValueError(f"{NAME}: ns_steps must be a nonnegative integer")
    return h


def value_of(x):
    return getattr(x, "value", x)


def check_matrix(shape):
    """A weight's shape, refused unless 2-D (torch.optim.Muon's rule)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) != 2:
        raise ValueError(f"{NAME}: Muon optimises 2-D weights only (hidden layers' matrices); "
                         f"got a weight of shape {shape}. Optimise the others (biases, gains, "
                         "embeddings, the output layer) with AdamW, the usual split")
    return shape


def state_slots(**hyper) -> tuple:
    """Always ``("momentum_buffer",)``."""
    _hyper(hyper)
    return STATE


def init_state(weight, **hyper) -> dict:
    """The momentum buffer starts at zero (torch's ``zeros_like``); a weight that is not 2-D is
    refused."""
    _hyper(hyper)
    shape = check_matrix(np.shape(value_of(weight)))
    return {"momentum_buffer": np.zeros(shape, np.float64)}


def phi(s, coefficients=NS_COEFFICIENTS):
    """The scalar quintic ``a s + b s^3 + c s^5`` one Newton-Schulz iteration applies to every
    singular value."""
    a, b, c = coefficients
    s2 = s * s
    return s * (a + s2 * (b + c * s2))


def phi_iterate(s, steps=5, coefficients=NS_COEFFICIENTS):
    """``phi`` composed ``steps`` times: what :func:`newton_schulz` does to the singular values
    of its normalised input."""
    for _ in range(int(steps)):
        s = phi(s, coefficients)
    return s


def bf16(x):
    """float64 values rounded to bfloat16 as torch converts (``reference.lowbit.bfloat16``: to
    float32, then to the nearest bfloat16, ties to even), as float64."""
    return lowbit.bfloat16(x).astype(np.float64)


def product(x, y):
    """``x @ y`` of plain float64 arrays in one fixed order: each product rounded, then summed
    left to right (``acc = x[:, 0] y[0]``, then ``acc + x[:, k] y[k]`` for k = 1, 2, ...), so
    that the oracle's numbers do not depend on the BLAS numpy links (whose kernels, chosen per
    CPU, order and fuse the sums differently). The same roundings in the same order as
    ``add.accumulate`` of the (n, k, m) products along k, bit for bit, without the (n, k, m)
    array (20 times faster at 400 x 200)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.shape[1] == 0:
        return np.zeros((x.shape[0], y.shape[1]))
    if x.ndim != 2 or y.ndim != 2 or y.shape[0] != x.shape[1]:  # numpy's broadcast, or its error
        return np.add.accumulate(x[:, :, None] * y[None, :, :], axis=1)[:, -1, :]
    acc = x[:, 0, None] * y[0]
    for k in range(1, x.shape[1]):
        acc += x[:, k, None] * y[k]
    return acc


def _matmul(x, y, rounded):
    """:func:`product`; ``rounded``: then rounded once to bfloat16 (torch's CPU bfloat16
    product accumulates in float32 and rounds once; the float64 accumulation here differs from
    it only at near ties)."""
    p = product(x, y)
    return bf16(p) if rounded else p


def newton_schulz(G, coefficients=NS_COEFFICIENTS, steps=5, eps=1e-7, *, clamp=True,
                  bfloat16=False):
    """``steps`` quintic Newton-Schulz iterations on the 2-D ``G`` (module docstring): about
    ``U diag(phi^steps(s/|G|_F)) V^T`` for ``G = U diag(s) V^T``. ``clamp``: normalise by
    ``max(|G|_F, eps)`` (torch), else by ``|G|_F + eps`` (the post). ``bfloat16``: emulate
    torch's bfloat16 CPU arithmetic (module docstring), else float64 throughout.

    A Tracked ``G`` gives a Tracked result with the normwise bound of
    :func:`newton_schulz_bound`."""
    if isinstance(G, Tracked):
        return newton_schulz_bound(G, coefficients, steps, eps, clamp=clamp, bfloat16=bfloat16)
    if len(tuple(coefficients)) != 3:
        raise ValueError(f"{NAME}: ns_coefficients must be three numbers (a, b, c)")
    a, b, c = (float(k) for k in coefficients)
    G = np.asarray(G, dtype=np.float64)
    check_matrix(G.shape)
    rnd = bf16 if bfloat16 else (lambda v: v)
    X = rnd(G)
    tall = G.shape[0] > G.shape[1]
    if tall:
        X = X.T
    norm = rnd(np.sqrt(np.sum(X * X)))  # torch: accumulated in float, rounded to bfloat16
    norm = rnd(np.maximum(norm, eps)) if clamp else rnd(norm + eps)
    X = rnd(X / norm)
    for _ in range(int(steps)):
        A = _matmul(X, X.T, bfloat16)
        B = rnd(b * A + c * product(A, A))     # addmm(A, A, A, beta=b, alpha=c): one rounding
        X = rnd(a * X + product(B, X))         # addmm(X, B, X, beta=a): one rounding
    return X.T if tall else X


def lipschitz(s, steps, coefficients=NS_COEFFICIENTS, points=4001):
    """``L``: a bound on the Frobenius norm of the Frechet derivative of the matrix function that
    applies ``phi^steps`` to the singular values, at a matrix whose singular values are ``s``:
    the largest of ``|(phi^steps)'(t)|`` and ``phi^steps(t)/t`` over ``[min s, max s]`` (module
    docstring), on a grid of ``points`` plus ``s`` itself; 1 for ``steps = 0``."""
    s = np.abs(np.asarray(s, np.float64).ravel())
    if int(steps) == 0 or s.size == 0:
        return 1.0
    lo, hi = float(np.min(s)), float(np.max(s))
    t = np.concatenate([np.linspace(lo, hi, points), s])
    if lo > 0:
        t = np.concatenate([t, np.geomspace(lo, hi, points)])
    a, b, c = (float(k) for k in coefficients)
    x, d = t.copy(), np.ones_like(t)
    for _ in range(int(steps)):
        d = d * (a + x * x * (3.0 * b + 5.0 * c * x * x))
        x = phi(x, coefficients)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(t > 0, np.abs(x) / np.where(t > 0, t, 1.0), np.abs(d))
    return float(max(np.max(np.abs(d)), np.max(ratio)))


def _iteration_error(X, coefficients, u, tiny):
    """``(next X, d)``: one exact iteration from the exact ``X`` (rows <= cols; BLAS's products:
    the bound's, not the oracle's value) and the Frobenius norm ``d`` of the componentwise
    first-order bound of evaluating it in unit roundoff ``u`` (module docstring)."""
    a, b, c = (float(k) for k in coefficients)
    n, m = X.shape
    aX = np.abs(X)
    A = X @ X.T
    eA = m * u * (aX @ aX.T) + m * tiny
    aA = np.abs(A)
    B = b * A + c * (A @ A)
    eB = ((n + 3) * u * (abs(c) * (aA @ aA) + abs(b) * aA) + abs(b) * eA
          + abs(c) * (eA @ aA + aA @ eA) + (n + 3) * tiny)
    Y = a * X + B @ X
    eY = (n + 3) * u * (abs(a) * aX + np.abs(B) @ aX) + eB @ aX + (n + 3) * tiny
    return Y, float(np.linalg.norm(eY))


def newton_schulz_bound(G, coefficients=NS_COEFFICIENTS, steps=5, eps=1e-7, *, clamp=True,
                        bfloat16=False):
    """:func:`newton_schulz` of a Tracked ``G``: a Tracked result whose every element carries
    the normwise first-order bound ``sum_k L_k d_k`` of the module docstring (``bfloat16``: the
    emulation's value, with ``L_0 d_0 + L 2^-8``). A near tie or an operand beyond the range
    anywhere in ``G`` flags every element (each depends on all of ``G``)."""
    if len(tuple(coefficients)) != 3:
        raise ValueError(f"{NAME}: ns_coefficients must be three numbers (a, b, c)")
    check_matrix(G.shape)
    u, tiny = G.u, G.tiny
    tall = G.shape[0] > G.shape[1]
    X = Tracked(G.value.T, G.err.T, G.tie.T, u=u, tiny=tiny) if tall else G
    norm = np.sqrt(np.sum(X * X))
    norm = np.maximum(norm, eps) if clamp else norm + eps
    X0 = X / norm
    flagged = bool(np.any(X0.tie)) or bool(np.any(G.tie))
    s = np.linalg.svd(X0.value, compute_uv=False)
    terms = [lipschitz(s, steps, coefficients) * float(np.linalg.norm(X0.err))]
    Xk = X0.value
    for k in range(1, int(steps) + 1):
        Xk, d = _iteration_error(Xk, coefficients, u, tiny)
        terms.append(lipschitz(phi_iterate(s, k, coefficients), steps - k, coefficients) * d)
    value = newton_schulz(G.value, coefficients, steps, eps, clamp=clamp, bfloat16=bfloat16)
    if bfloat16:
        bound = terms[0] + lipschitz(s, steps, coefficients) * 2.0 ** -8
    else:
        bound = float(np.sum(terms))
    return Tracked(value, np.full(value.shape, bound), np.full(value.shape, flagged), u=u,
                   tiny=tiny)


def adjusted_lr(lr, adjust_lr, shape):
    """torch's ``_adjust_lr``: ``lr*sqrt(max(1, rows/cols))`` for None or ``"original"`` (the
    post's scale), ``lr*0.2*sqrt(max(rows, cols))`` for ``"match_rms_adamw"``."""
    rows, cols = shape[:2]
    if adjust_lr is None or adjust_lr == "original":
        # a weight of no columns has nothing to step (torch divides by zero there)
        return lr * math.sqrt(max(1, rows / cols)) if cols else lr
    if adjust_lr == "match_rms_adamw":
        return lr * (0.2 * math.sqrt(max(rows, cols)))
    raise ValueError(f"{NAME}: adjust_lr must be one of {ADJUST_LR}, got {adjust_lr!r}")


def _lerp(a, b, w):
    """torch's ``lerp(a, b, w)`` for a scalar weight (module docstring). torch rounds ``w`` to
    the tensors' precision and forms ``1 - w`` there (exactly, ``w`` in [0.5, 1]): on Tracked
    operands that coefficient carries the rounding of ``w``, ``u|w|``, which for ``w`` near 1
    is far more than a rounding of ``1 - w`` itself (momentum 0.0124: 80 times more)."""
    if abs(w) < 0.5:
        return a + w * (b - a)
    like = next((x for x in (a, b) if isinstance(x, Tracked)), None)
    if like is not None:
        w = Tracked(w, err=like.u * abs(w) + like.tiny, u=like.u, tiny=like.tiny)
    return b - (b - a) * (1.0 - w)


def step(weight, grad, state, *, t, lr, wd=0.0, rescale_grad=1.0, clip_gradient=None,
         convention="pytorch", hyper_f32=True, form=None, **hyper):
    """One Muon step (module docstring). ``t`` is accepted and unused (Muon has no bias
    correction); ``learning_rate`` (a HYPER key) and ``hyper_f32`` (no "mxnet" convention) are
    accepted and ignored. ``g = clip(rescale_grad*grad, clip_gradient)`` first (the toolkit's
    common preprocessing: torch has neither, so at their defaults they change nothing).

    ``form`` (``FORMS``)::

        bfloat16   the Newton-Schulz iteration in bfloat16, as torch and the post run it
                   (:func:`newton_schulz` with ``bfloat16=True``)
    """
    convention = check_convention(convention, CONVENTIONS, NAME, PYTORCH)
    form = check_form(form, FORMS, NAME, convention)
    h = _hyper(hyper)
    mu, eps = float(h["momentum"]), float(h["epsilon"])
    w = as_f64(weight)
    shape = check_matrix(np.shape(value_of(w)))
    g = python_clip(rescale_grad * as_f64(grad), clip_gradient)
    buf = as_f64(state["momentum_buffer"])
    if convention == "paper":
        buf = mu * buf + g
        u = g + mu * buf if h["nesterov"] else buf
    else:
        buf = _lerp(buf, g, 1.0 - mu)
        u = _lerp(g, buf, mu) if h["nesterov"] else buf
    O = newton_schulz(u, h["ns_coefficients"], h["ns_steps"], eps,
                      clamp=convention == "pytorch", bfloat16=form == "bfloat16")
    if wd:
        w = w * (1.0 - lr * wd)
    w = w - adjusted_lr(lr, h["adjust_lr"], shape) * O
    return w, {"momentum_buffer": buf}
