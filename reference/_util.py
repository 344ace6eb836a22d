"""Small helpers shared by the reference modules (never by the kernels).

Every reference step is written so that it also runs on :class:`reference.error_bound.Tracked`
inputs: only operators and the numpy functions sqrt, abs, sign, maximum, minimum, clip, where,
square and sum touch arrays. These helpers keep to that rule.
"""
from __future__ import annotations

import numpy as np

from .error_bound import Tracked, error, ties, value

#: the conventions of the toolkit and of most reference modules (each module lists its own in its
#: ``CONVENTIONS`` attribute; this tuple is their common default)
CONVENTIONS = ("mxnet", "guide")

#: every convention name the oracle knows. ``"pytorch"`` (PyTorch's documented ``torch.optim``
#: update) and ``"paper"`` (the published algorithm of an optimizer MXNet never had) exist only
#: in the modules whose ``CONVENTIONS`` list them; a module's first is its default. The reference's one
#: definition (it imports nothing from the toolkit); the toolkit's is
#: ``toolkit.optimizers.spec.CONVENTIONS``, and tests/test_reference_pytorch.py checks they agree.
KNOWN_CONVENTIONS = ("mxnet", "guide", "pytorch", "paper")


def as_f64(x):
    """An input as a float64 array (a Tracked input is passed through untouched)."""
    if isinstance(x, Tracked):
        return x
    return np.array(x, dtype=np.float64, copy=True)


def f32(x):
    """``float64(float32(x))``: MXNet 1.9.1 declares kernel hyperparameters ``float`` in its dmlc
    parameter structs, so they are rounded to float32 before use (docs/mxnet-facts.md, 3).

    MXNet actually parses each value from ``str(x)`` with dmlc-core's parser, which is not
    correctly rounded: for about 12% of arbitrary doubles (none of 0.1, 0.9, 0.999, 1e-8) its
    float32 is one ulp away from ``float32(x)`` (tests/data/mxnet/README.md, item 1). This
    function is the correctly rounded model; bit-identity with MXNet holds where the two agree."""
    return None if x is None else float(np.float32(x))


def merge_hyper(name: str, defaults: dict, given: dict) -> dict:
    """The optimizer's hyperparameters: ``defaults`` updated by ``given``; an unknown keyword is a
    TypeError naming it."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise TypeError(f"{name}: unknown hyperparameter(s) {', '.join(unknown)}; "
                        f"expected some of {sorted(defaults)}")
    return {**defaults, **given}


def check_convention(convention: str, conventions: tuple = CONVENTIONS, name: str = "",
                     pytorch=None) -> str:
    """Check ``convention`` against a module's ``conventions`` and return the branch to run.

    A convention the module does not implement is a ValueError naming the module (``name``) and
    the conventions it does implement. ``pytorch`` is the module's ``PYTORCH`` attribute: when
    ``convention == "pytorch"`` and ``pytorch`` names another convention of the module (PyTorch's
    update equals that convention mathematically), that convention's name is returned, so the
    module runs that branch exactly; otherwise ``convention`` itself is returned.
    """
    if convention not in conventions:
        who = f"{name}: " if name else ""
        if convention == "pytorch":
            raise ValueError(f"{who}convention 'pytorch' is not implemented for this optimizer "
                             f"(torch.optim has no counterpart); it implements {conventions}")
        raise ValueError(f"{who}convention must be one of {conventions}, got {convention!r}")
    if convention == "pytorch" and pytorch not in (None, "pytorch"):
        return pytorch
    return convention


def clip(x, c):
    """``clip(x, c)``: ``c`` if ``x > c``, ``-c`` if ``x < -c``, else ``x``."""
    return np.clip(x, -c, c)


def kernel_clip(x, c):
    """Clipping as MXNet's kernel optimizers gate it: off for ``None`` and ``0.0`` (the Python
    side passes ``clip_gradient`` only when it is truthy; docs/mxnet-facts.md, 2.1)."""
    return x if not c else clip(x, c)


def python_clip(x, c):
    """Clipping as MXNet's Python-op optimizers gate it: off only for ``None``, so
    ``clip_gradient=0.0`` clips every gradient to zero (docs/mxnet-facts.md, 2.1)."""
    return x if c is None else clip(x, c)


def guide_gradient(grad, weight, *, wd, rescale_grad, clip_gradient):
    """The gradient the guide writes ``grad(w_i)``, as the "guide" convention reads it:
    ``clip(rescale_grad * grad, clip_gradient) + wd * w``.

    The guide introduces weight decay once, for SGD (guide:43: ``-grad(w_i) - delta*w_i``),
    as a penalty added to the gradient; the guide convention applies that same L2 term to every
    optimizer. Rescaling and clipping are the Optimizer base class's preprocessing, which the guide
    takes for granted; clipping is on whenever ``clip_gradient`` is not None.
    """
    g = python_clip(rescale_grad * grad, clip_gradient)
    return g + wd * weight if wd else g


def pytorch_gradient(grad, weight, *, wd, rescale_grad, clip_gradient):
    """The gradient ``g_t`` of PyTorch's algorithm boxes, as the "pytorch" convention reads it:
    ``clip(rescale_grad * grad, clip_gradient) + wd * w``.

    torch.optim has neither ``rescale_grad`` nor ``clip_gradient``: the convention reads them as
    preprocessing of the gradient handed to torch (rescaled, then clipped whenever
    ``clip_gradient`` is not None). Then torch's own (coupled, L2) weight decay
    ``g_t <- g_t + lambda*theta_{t-1}``, applied only when ``lambda != 0``. The arithmetic is the
    same as :func:`guide_gradient`'s, deliberately: both read weight decay as the L2 term.
    """
    g = python_clip(rescale_grad * grad, clip_gradient)
    return g + wd * weight if wd else g


def check_amsgrad(amsgrad, convention, name):
    """``amsgrad`` (Adam's and AdamW's flag) as a bool, refused under ``convention="mxnet"``
    (MXNet 1.9.1 has no AMSGrad) with a ValueError naming the module."""
    if amsgrad and convention == "mxnet":
        raise ValueError(f"{name}: amsgrad=True is refused under convention 'mxnet' (MXNet 1.9.1 "
                         "has no AMSGrad); the 'guide' and 'pytorch' conventions have it")
    return bool(amsgrad)


def check_form(form, forms, name, convention):
    """Check a reference step's ``form`` (a known variant of the same equations, or None) and
    return it. ``forms`` is the module's ``FORMS``, ``{form: conventions it changes}``; a form the
    module does not have, or one that changes nothing under ``convention`` (the convention
    already reads that way), is a ValueError naming the ones it has."""
    if form is None:
        return None
    if form not in forms:
        raise ValueError(f"{name}: form must be None or one of {sorted(forms)}, got {form!r}")
    if convention not in forms[form]:
        raise ValueError(f"{name}: form {form!r} changes the {'/'.join(forms[form])} "
                         f"convention's equations only; convention {convention!r} already reads "
                         f"that way or has no such step")
    return form


def f32_any(x):
    """:func:`f32` of a float, or of a Tracked scalar (its value rounded to float32, the rounding
    added to its bound): a step constant formed in the weight's precision, then handed to a
    kernel that takes float32 parameters."""
    if isinstance(x, Tracked):
        v = np.float64(np.float32(x.value))
        return Tracked(v, x.err + np.abs(v - x.value), x.tie, u=x.u, tiny=x.tiny)
    return f32(x)


def round_f32(x, rounding=None):
    """``f32`` of a scalar that may be a 0-d Tracked (LBSGD's lars multiplier, LARS's step
    constants): the value is rounded, the difference is added to its error bound, so a Tracked
    run keeps the plain run's values. ``rounding``: the caller's ``f32`` for a plain float (a
    module's own, which a test may replace with MXNet's scalar parser), else this module's."""
    if isinstance(x, Tracked):
        v = value(x)
        r = np.float64(np.float32(v))
        return Tracked(r, error(x) + np.abs(r - v), ties(x), u=x.u, tiny=x.tiny)
    if isinstance(x, np.ndarray):
        return np.float64(np.float32(x))
    return (rounding or f32)(x)


def formed_in(x, like):
    """The scalar ``x`` as a value of the precision ``like`` is evaluated in: a Tracked scalar
    with one rounding when ``like`` is Tracked (the precision of the implementation checked), the
    float itself otherwise (a float64 run). Arithmetic on the result is then that precision's.
    The rounding is bounded as ``Tracked`` bounds a float constant's (``u*|x|`` plus the
    smallest subnormal ``like.tiny``, none for an exact 0): ``x`` below the precision's range
    (1e-45 in float32) rounds to 0 or a subnormal, an error far beyond ``u*|x|``."""
    if isinstance(like, Tracked):
        x = float(x)
        err = 0.0 if x == 0.0 else like.u * abs(x) + like.tiny
        return Tracked(np.float64(x), err, u=like.u, tiny=like.tiny)
    return float(x)


def host_double(x, like):
    """The scalar ``x`` as a step constant the host forms in double precision, whatever the
    precision of the implementation checked: with a Tracked ``like``, a Tracked scalar of
    float64's unit roundoff (its own rounding bounded), so that arithmetic on it bounds any
    accurate float64 evaluation of the constant (``pow``, or :func:`power`'s products), which
    then enters ``like``'s precision with one more rounding; the float itself otherwise.
    For constants whose conditioning is poor (RAdam's ``rho_t`` as ``beta2`` nears 1: two
    evaluations of it one ulp apart in ``beta2^t`` differ by 1e-12 of ``r_t``)."""
    if isinstance(like, Tracked):
        x = float(x)
        err = 0.0 if x == 0.0 else U64 * abs(x)
        return Tracked(np.float64(x), err, u=U64, tiny=2.0 ** -1074)
    return float(x)


def handed_to(x, like):
    """A host constant ``x`` (a float, or a Tracked scalar of :func:`host_double`) as the
    implementation checked takes it: in ``like``'s precision, with one more rounding (the
    kernels round their row of constants to the weight's dtype); a float stays a float when
    ``like`` is not Tracked."""
    if not isinstance(like, Tracked):
        return x
    if isinstance(x, Tracked):
        v = value(x)
        return Tracked(v, error(x) + (0.0 if v == 0.0 else like.u * abs(v) + like.tiny),
                       ties(x), u=like.u, tiny=like.tiny)
    return formed_in(x, like)


def host_power(b, t):
    """``b**t`` for an int ``t >= 1``: Python's ``pow`` of a float (as torch and the kernels'
    host form it); of a Tracked ``b``, the same ``pow`` of its value (a bound run keeps the
    plain run's values) with :func:`power`'s bound for ``t - 1`` products, widened by the
    distance between the two (so it bounds ``pow`` too)."""
    if not isinstance(b, Tracked):
        return b ** t
    p = power(b, t)
    v = np.float64(float(value(b)) ** t)
    return Tracked(v, error(p) + np.abs(v - value(p)), ties(p), u=p.u, tiny=p.tiny)


#: float32's and float64's unit roundoff
U32 = 2.0 ** -24
U64 = 2.0 ** -53


def f32_product(a, b, like):
    """``a*b`` as an implementation holding the product in float32 computes it, whatever the
    precision of its other arithmetic (torch.optim.NAdam's ``mu_product``, a float32 tensor in
    a float64 run): ``b`` (a float) and the product rounded to float32, ``a`` a float or the
    product of an earlier step. With a Tracked ``like`` the result is Tracked in ``like``'s
    precision, its bound the carried one of ``a`` times ``|b|`` plus the two float32 roundings;
    otherwise the float32 value as a float."""
    va = float(a.value) if isinstance(a, Tracked) else float(a)
    p = va * float(b)
    v = float(np.float32(np.float32(va) * np.float32(b)))
    if not isinstance(like, Tracked):
        return v
    ea = float(a.err) if isinstance(a, Tracked) else 0.0
    err = ea * abs(float(b)) + 2.0 * U32 * abs(p) + np.finfo(np.float32).smallest_subnormal
    return Tracked(np.float64(v), err, u=like.u, tiny=like.tiny)


def power(b, t):
    """``b**t`` for an int ``t >= 1`` by repeated multiplication (a Tracked ``b`` accumulates one
    rounding per product: a bound for ``pow`` in the same precision too)."""
    out = b
    for _ in range(int(t) - 1):
        out = out * b
    return out
