"""The gradient preprocessing of the rules, written once: rescale, clip, and where weight decay
enters.

Each helper is made for a float type ``f`` (``factory(f) -> rule``, as a rule is) and returned
inlined (``toolkit.backends.jit.inlined``), a fresh function per factory call so that a kernel's
on-disk cache key follows its code. Its arithmetic is the spelled-out form's, operation for
operation:

* :func:`rescaled`: ``clip(rs*grad, c)`` (no clipping when ``c < 0``, the "no clip" value a
  convention's constants give);
* :func:`decayed_then_clipped`: ``clip(rs*grad + wd*w, c)`` (MXNet 1.9.1's updates that fold
  the weight decay into the gradient before clipping, its kernels (Adam, RMSProp, FTML) and
  its Python ops (Adamax, Nadam) alike);
* :func:`clipped_then_decayed`: ``clip(rs*grad, c) + wd*w`` (the guide's ``G``);
* :func:`clip`: ``min(max(g, -c), c)`` when ``c >= 0``.
"""
from __future__ import annotations

from ..backends.jit import inlined

__all__ = ["clip", "rescaled", "decayed_then_clipped", "clipped_then_decayed", "through",
           "SIGN_FIELDS"]

#: the attribute :func:`through` sets on a rule factory
SIGN_FIELDS = "gradient_sign_fields"


def through(*fields):
    """Mark a rule factory whose rule reads its gradient ``grad`` only through products with
    the fields ``fields`` of its row (``rs*grad``; SGD's MXNet kernels also ``lrrs*grad``):
    negating those fields then gives, bit for bit, the step of ``-grad`` (IEEE negation is
    exact, a product's sign is the exclusive or of its factors' and its rounding symmetric,
    clipping to ``[-c, c]`` is symmetric). ``toolkit.torch``'s ``maximize`` reads it
    (``toolkit/torch/maximize.py``; proven per rule by ``tests/test_torch_maximize.py``)."""
    def mark(factory):
        setattr(factory, SIGN_FIELDS, tuple(fields))
        return factory
    return mark


def clip(f):
    """``clip(g, c)``: ``g`` limited to ``[-c, c]`` when ``c >= 0``, else ``g``."""
    zero = f(0)

    def clip_(g, c):
        if c >= zero:
            return min(max(g, -c), c)
        return g
    return inlined(clip_)


def rescaled(f):
    """``rescaled(grad, rs, c) = clip(rs*grad, c)``."""
    zero = f(0)

    def rescaled_(grad, rs, c):
        g = rs * grad
        if c >= zero:
            g = min(max(g, -c), c)
        return g
    return inlined(rescaled_)


def decayed_then_clipped(f):
    """``decayed_then_clipped(grad, w, rs, wd, c) = clip(rs*grad + wd*w, c)``."""
    zero = f(0)

    def decayed_then_clipped_(grad, w, rs, wd, c):
        g = rs * grad + wd * w
        if c >= zero:
            g = min(max(g, -c), c)
        return g
    return inlined(decayed_then_clipped_)


def clipped_then_decayed(f):
    """``clipped_then_decayed(grad, w, rs, wd, c) = clip(rs*grad, c) + wd*w``."""
    zero = f(0)

    def clipped_then_decayed_(grad, w, rs, wd, c):
        g = rs * grad
        if c >= zero:
            g = min(max(g, -c), c)
        return g + wd * w
    return inlined(clipped_then_decayed_)
