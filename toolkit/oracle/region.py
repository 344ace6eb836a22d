"""Where a failure of :func:`~toolkit.oracle.verify`'s full domain only lies: the worst case's
hyperparameters that lie outside their usual ranges are moved towards them, one at a time, and the
value where the case turns from failing to passing is bisected ("only for beta1 < 0.00258").

It knows nothing of the user's code: ``fails(**change)`` re-runs the worst case with ``change``
applied (:func:`toolkit.oracle.explanation.locate` builds it) and says whether it still fails.
"""
from __future__ import annotations

import math

from . import space

__all__ = ["locate", "bisect"]


def locate(hyper, usual, fixed, fails, steps):
    """The region text of a worst case with hyperparameters ``hyper`` and ``steps`` steps that
    fails where the usual domain (``usual``: ``{name: Space}``) passes. ``fixed``: the pinned
    values (never moved: both domains hold them). ``fails(**change)`` re-runs the case."""
    outside = [k for k, s in usual.items() if k in hyper and not space.inside(s, hyper[k])]
    pinned = [k for k in outside if k in fixed]
    outside = [k for k in outside if k not in pinned]
    if not outside:
        also = (f" (but {', '.join(pinned)}, pinned outside their usual ranges in both domains)"
                if pinned else "")
        return (f"the worst case fails with every hyperparameter in its usual range{also}: its "
                "weights and gradients, not its hyperparameters, make it fail (run more "
                "examples)")
    for k in outside:
        found = _region_of(k, hyper[k], usual[k], lambda x, k=k: fails(**{k: x}), steps)
        if found is not None:
            return found
    moved = {k: space.nearest(usual[k], hyper[k]) for k in outside}
    if any(v is None for v in moved.values()) or fails(**moved):
        return ("the worst case still fails with its hyperparameters moved into their usual "
                f"ranges ({', '.join(outside)}): its weights and gradients make it fail")
    return (f"only where {', '.join(outside)} lie outside their usual ranges together (the "
            f"worst case passes with all of them moved in, not with one)")


def _region_of(k, x, usual, fails, steps):
    """The region text of hyperparameter ``k`` whose value ``x`` (outside its usual range
    ``usual``) fails, where ``fails(value)`` re-runs the worst case: the usual value on each side
    of ``x`` (:func:`~toolkit.oracle.space.neighbours`, so a value in a range's gap sees both
    pieces) that passes is bisected towards ``x``; the text gives the edges found ("only for
    momentum between 0 and 0.3"), or None when no usual value passes. The text gives the worst
    case's length, ``steps``: the region holds within that horizon, and a longer run may fail
    elsewhere (torch's centered RMSprop turns NaN at usual alphas after a hundred steps)."""
    below, above = space.neighbours(usual, x)
    usual_range = f"{k}'s usual range is {space.describe(usual)}"
    low = below is not None and not fails(below)
    high = above is not None and not fails(above)
    if not (low or high):
        return None
    if x == 0 and high and above > 0 and not fails(above * 1e-300):
        return f"only for {k} = 0 ({usual_range})"
    lo_edge = bisect(fails, x, below) if low else None
    if high:
        bad = above * 1e-300 if x == 0 and above > 0 else x
        hi_edge = bisect(fails, bad, above)
    else:
        hi_edge = None
    # what a usual value on the other side does, when it does not pass
    other = ("" if low and high else
             f"; it fails at the usual value {k} = {above if low else below:.3g} too"
             if (above if low else below) is not None else "")
    case = f"the worst case, {steps} step{'s' if steps != 1 else ''} long,"
    if low and high:
        return (f"only for {k} between {lo_edge:.3g} and {hi_edge:.3g} ({case} fails at "
                f"{k} = {x:.3g} and passes at {lo_edge:.3g} and at {hi_edge:.3g}; "
                f"{usual_range})")
    edge, side, passes = ((lo_edge, ">", f"passes up to {lo_edge:.3g}") if low else
                          (hi_edge, "<", f"passes from {hi_edge:.3g} on"))
    return (f"only for {k} {side} {edge:.3g} ({case} fails at {k} = {x:.3g} and {passes}"
            f"{other}; {usual_range})")


def bisect(fails, bad, good, steps=40):
    """The value between ``bad`` (fails) and ``good`` (passes) where ``fails`` turns: geometric
    bisection over a wide positive range, arithmetic otherwise; returns the passing end. The
    geometric mean is ``sqrt(bad)*sqrt(good)``: ``sqrt(bad*good)`` underflows to 0 for ends
    such as 1e-300 and 1e-150, and 0 lies outside the range (it ended in a division by 0)."""
    geometric = bad > 0 and good > 0 and max(bad, good) / min(bad, good) > 10.0
    for _ in range(steps):
        mid = math.sqrt(bad) * math.sqrt(good) if geometric else 0.5 * (bad + good)
        if not min(bad, good) < mid < max(bad, good):
            break
        if fails(mid):
            bad = mid
        else:
            good = mid
        if (max(bad, good) / min(bad, good) < 1.01 if geometric
                else abs(good - bad) <= 1e-3 * max(abs(good), abs(bad), 1e-300)):
            break
    return good
