"""The memory order of a ``toolkit.torch`` parameter: :func:`memory_order` finds it, :func:`ordered`
puts a tensor into it and :func:`unordered` back (channels_last weights step in the order their
elements lie in memory; their states are made in that order).
"""
from __future__ import annotations

__all__ = ["memory_order", "ordered", "unordered"]


def memory_order(p):
    """None for a contiguous tensor; else the permutation of its dimensions that lists them in
    memory order (``p.permute(perm)`` is contiguous: channels_last's ``(0, 2, 3, 1)``), or a
    ValueError where there is none (a tensor with gaps or overlaps)."""
    if p.is_contiguous():
        return None
    perm = tuple(sorted(range(p.dim()), key=lambda d: (-p.stride(d), -p.shape[d])))
    if not p.permute(perm).is_contiguous():
        raise ValueError(f"a parameter with strides {p.stride()} and shape {tuple(p.shape)} is "
                         "not dense in memory (gaps or overlaps); pass contiguous parameters")
    return perm


def ordered(t, perm):
    """``t`` with its dimensions in memory order (the permutation ``perm`` of its weight);
    a gradient not in that order is copied into it."""
    if perm is not None:
        t = t.permute(perm)
    return t if t.is_contiguous() else t.contiguous()


def unordered(t, perm):
    """A tensor made in memory order (``ordered``) seen in its weight's logical shape."""
    if perm is None:
        return t
    inverse = [0] * len(perm)
    for k, d in enumerate(perm):
        inverse[d] = k
    return t.permute(inverse)
