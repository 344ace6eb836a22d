"""Running the user's ``make_step`` on one case, and what counts as a failed step.

Whatever the user's code returns or raises is a verdict, never a crash of the oracle: an
exception (of any kind but ``SystemExit`` and ``KeyboardInterrupt``, which are the user's way
to stop and pass through), a ``make_step`` that returns no callable, and a result that is not
an array of real floating-point numbers of the weight's shape end the case with a message.
"""
from __future__ import annotations

import inspect
import time
import traceback

import numpy as np

__all__ = ["Implementation", "run", "takes", "describe", "PASS_THROUGH"]

#: exceptions of the user's code that stop the oracle too (everything else is a verdict)
PASS_THROUGH = (SystemExit, KeyboardInterrupt)


class Implementation:
    """The user's ``make_step`` with what the oracle accepts of it: ``allow_wider``, results
    of a wider floating dtype than the input's (an implementation that computes wider on
    purpose; by default another dtype is a failed step). ``wider``: the wider dtype it returned,
    once it has (None before, and when it never does). ``pinned``: the names ``fixed`` pins;
    those its signature does not take (no such parameter, no ``**kwargs``) are not passed
    (``dropped``): an Adam written with PyTorch's argument list pins ``rescale_grad=1`` and
    never sees it. ``timeout``: seconds one ``step`` call may take (None: no limit), checked
    after it returns. ``progress``: called with the number of cases run after each one."""

    def __init__(self, make_step, allow_wider=False, pinned=(), timeout=None, progress=None):
        if not callable(make_step):
            raise TypeError("make_step must be callable: make_step(weight0, **hyper) -> "
                            "step(grad)")
        if not isinstance(allow_wider, bool):
            raise TypeError(f"allow_wider must be True or False, got {allow_wider!r}")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(
                timeout, (int, float)) or not timeout > 0 or timeout == float("inf")):
            raise ValueError(f"timeout must be a finite number of seconds > 0 per step, or None "
                             f"(no limit), got {timeout!r}")
        if progress is not None and not callable(progress):
            raise TypeError(f"progress must be callable (it gets the cases run), got "
                            f"{progress!r}")
        self.make_step, self.allow_wider, self.wider = make_step, allow_wider, None
        self.dropped = tuple(k for k in pinned if not takes(make_step, k))
        self.timeout, self.progress, self.cases = timeout, progress, 0

    def run(self, case, dtype):
        """:func:`run` of this implementation on ``case`` (``wider`` noted)."""
        outs, failure = run(self.make_step, case, dtype, self.allow_wider, self.dropped,
                            self.timeout)
        returned = getattr(outs, "returned", None)
        if returned is not None and self.wider is None:
            self.wider = returned
        self.cases += 1
        if self.progress is not None:
            self.progress(self.cases)
        return outs, failure


class _Outputs(list):
    """The weights a run returned, with ``returned``: the wider dtype they came in, or None."""
    returned = None


def takes(make_step, name):
    """Whether ``make_step``'s signature takes keyword ``name`` (a parameter of that name, or
    ``**kwargs``; True where the signature cannot be read)."""
    params = _parameters(make_step)
    return params is None or name in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _parameters(make_step):
    try:
        return inspect.signature(make_step).parameters
    except (TypeError, ValueError):  # a builtin or an object without a readable signature
        return None


def _cannot_take(make_step, hyper):
    """Why ``make_step(weight0, **hyper)`` cannot bind, with what to do, or None."""
    params = _parameters(make_step)
    if params is None:
        return None
    try:
        inspect.signature(make_step).bind(None, **hyper)
    except TypeError as e:
        missing = [k for k in hyper if not takes(make_step, k)]
        what = (f"it takes no {', '.join(repr(k) for k in missing)}" if missing else str(e))
        return (f"make_step cannot be called as make_step(weight0, {', '.join(hyper)}): "
                f"{what}. Take the missing names (or **kwargs), or, where your "
                f"implementation has no such hyperparameter, pin it with fixed "
                f"(fixed={{'{missing[0] if missing else 'name'}': value}}, mxopt verify "
                f"--fixed NAME=VALUE): a pinned name make_step does not take is not passed")
    return None


def run(make_step, case, dtype, allow_wider=False, drop=(), timeout=None):
    """``(outs, failure)``: the user's weights after every step of ``case`` (float64 copies),
    and None; or the steps run so far (None when ``make_step`` itself failed) and a message
    saying what went wrong. A result of another floating dtype than ``dtype`` is wrong, but a
    wider one where ``allow_wider`` (``outs.returned`` names it). ``drop``: hyperparameters not
    passed to ``make_step`` (pinned ones its signature does not take). ``timeout``: seconds a
    ``step`` call may take, checked after it returns (a slower step fails the case)."""
    dtype = np.dtype(dtype)
    w0 = case.weight.astype(dtype)
    hyper = {k: v for k, v in case.hyper.items() if k not in drop}
    try:
        step = make_step(w0.copy(), **hyper)
    except PASS_THROUGH:
        raise
    except BaseException as e:  # noqa: BLE001 - a user's exception is a verdict, not a crash
        if isinstance(e, TypeError):
            why = _cannot_take(make_step, hyper)
            if why is not None:
                return None, why
        return None, f"make_step raised {describe(e)}"
    if not callable(step):
        return None, f"make_step returned {type(step).__name__}, not a callable step(grad)"
    outs = _Outputs()
    for t, g in enumerate(case.grads, start=1):
        started = time.perf_counter()
        try:
            raw = step(g.astype(dtype))
        except PASS_THROUGH:
            raise
        except BaseException as e:  # noqa: BLE001
            return outs, f"step {t} raised {describe(e)}"
        took = time.perf_counter() - started
        if timeout is not None and took > timeout:
            return outs, (f"step {t} took {took:.3g} s, over the limit of {timeout:g} s per step "
                          f"(timeout={timeout:g}; mxopt verify --timeout)")
        try:
            out = _to_numpy(raw)
        except PASS_THROUGH:
            raise
        except BaseException as e:  # noqa: BLE001
            return outs, (f"step {t} returned a {type(raw).__name__} that numpy cannot read "
                          f"as an array: {describe(e)}")
        wrong = _wrong_output(out, raw, w0, t) or _wrong_dtype(out.dtype, dtype, t, allow_wider)
        if wrong is not None:
            return outs, wrong
        if out.dtype != dtype:
            outs.returned = out.dtype.name
        with np.errstate(all="ignore"):  # a long double beyond float64's range is inf
            outs.append(np.array(out, dtype=np.float64))  # a copy: steps may reuse arrays
    return outs, None


def _wrong_output(out, raw, w0, t):
    """Why ``out`` (step ``t``'s result as numpy read it) is not a weight, or None."""
    if out.dtype.kind == "c":
        return (f"step {t} returned complex values (dtype {out.dtype}); a weight is real, and "
                f"dropping the imaginary part would hide the error")
    if out.dtype.kind != "f":
        return (f"step {t} returned a {type(raw).__name__} of dtype {out.dtype}, not "
                f"floating-point numbers")
    if out.shape != w0.shape:
        return f"step {t} returned shape {out.shape}; the weight's shape is {w0.shape}"
    return None


def _wrong_dtype(got, want, t, allow_wider):
    """Why floating dtype ``got`` of step ``t``'s result is not the input's ``want``, or None."""
    if got == want or (allow_wider and got.itemsize > want.itemsize):
        return None
    if got.itemsize > want.itemsize:
        return (f"step {t} returned {got.name} for {want.name} input: the oracle checks "
                f"{want.name} arithmetic; compute in {want.name}, or pass allow_wider=True "
                f"(mxopt verify --allow-wider) if your implementation computes wider on purpose")
    return (f"step {t} returned {got.name} for {want.name} input: a result narrower than its "
            f"input loses the precision the oracle checks")


def _to_numpy(x):
    if hasattr(x, "detach") and hasattr(x, "cpu"):          # a PyTorch tensor
        x = x.detach().cpu().numpy()
    elif hasattr(x, "__cuda_array_interface__"):
        from ..backends.arrays import to_host
        x = to_host(x)
    return np.asarray(x)


def describe(e):
    """``"Type: message at file:line"`` of the user's exception ``e`` (its message as far as it
    can be printed)."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f" at {tb[-1].filename}:{tb[-1].lineno}" if tb else ""
    try:
        text = str(e)
    except PASS_THROUGH:
        raise
    except BaseException:  # noqa: BLE001 - an exception whose message itself raises
        text = "(its message cannot be printed)"
    return f"{type(e).__name__}: {text}{where}"
