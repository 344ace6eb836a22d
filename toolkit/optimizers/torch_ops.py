"""The element-wise operations of torch.optim's single-tensor updates, rounded as torch's CPU
kernels round them, for the rules of ``convention="pytorch"`` (written once, inlined into the
rules as :mod:`.gradient`'s helpers are).

Measured on torch 2.13's CPU kernels (float64, AVX512 and AVX2 builds): ``x.add(y, alpha=a)``,
``addcmul_`` and ``lerp_`` round once through a fused multiply-add; ``addcdiv_(a, b, value=v)``
is ``x + (v*a)/b`` without one; ``mul_``, ``div`` and ``add_`` by a scalar are plain IEEE
operations. torch's ``sqrt`` of a CPU tensor is MKL's ``vdSqrt``/``vsSqrt`` (high-accuracy mode,
not correctly rounded: about 1% of float64 results are one ulp from IEEE's); the rules take the
IEEE square root, as torch's fused CPU kernels and its CUDA kernels do (docs/conventions.md,
"pytorch").

* :func:`gradient`: ``clip(rs*grad, c)``, then torch's coupled weight decay
  ``g.add(w, alpha=wd)`` when ``wd != 0`` (torch has neither ``rescale_grad`` nor
  ``clip_gradient``: at their defaults they change nothing);
* :func:`lerp`: torch's ``start.lerp_(end, weight)``;
* :func:`square_avg`: ``avg.mul_(beta).addcmul_(g, g, value=1 - beta)``;
* :func:`maximum`: ``torch.maximum(a, b)`` (AMSGrad's running maximum), NaN where either is.
"""
from __future__ import annotations

from ..backends.jit import fma, inlined

__all__ = ["gradient", "lerp", "square_avg", "maximum"]


def gradient(f):
    """``gradient(grad, w, rs, wd, c)``: ``g = clip(rs*grad, c)`` (no clipping when ``c < 0``),
    then ``g + wd*w`` rounded once when ``wd != 0`` (torch skips the term at 0)."""
    zero = f(0)

    def gradient_(grad, w, rs, wd, c):
        g = rs * grad
        if c >= zero:
            g = min(max(g, -c), c)
        if wd != zero:
            g = fma(wd, w, g)
        return g
    return inlined(gradient_)


def lerp(f):
    """``lerp(start, end, weight)``, torch's ``start.lerp_(end, weight)``:
    ``start + weight*(end - start)`` for ``|weight| < 0.5``, else
    ``end - (end - start)*(1 - weight)``, each rounded once at the sum."""
    half, one = f(0.5), f(1)

    def lerp_(start, end, weight):
        d = end - start
        if abs(weight) < half:
            return fma(weight, d, start)
        return fma(weight - one, d, end)
    return inlined(lerp_)


def square_avg(f):
    """``square_avg(avg, g, beta, omb)``: ``avg*beta + (omb*g)*g`` rounded once at the sum
    (``avg.mul_(beta).addcmul_(g, g, value=omb)``, ``omb`` = ``1 - beta`` formed on the host)."""
    def square_avg_(avg, g, beta, omb):
        return fma(omb * g, g, avg * beta)
    return inlined(square_avg_)


def maximum(f):
    """``maximum(a, b)``, torch's ``torch.maximum``: the larger, and NaN where either is NaN
    (Python's ``max`` would keep ``a`` against a NaN ``b``)."""
    def maximum_(a, b):
        if b > a or b != b:
            return b
        return a
    return inlined(maximum_)
