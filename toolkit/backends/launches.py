"""What an optimizer's kernel step returns, and how a backend's launcher runs it.

A kernel step is a value: one :class:`Launch` (a rule, its arrays, its row of hyperparameters),
or, for a step whose later work reads what earlier work found (LARS's and LBSGD's norms, LAMB's
direction sums) or that keeps bookkeeping after its launch (Nadam's schedule), a generator that yields
each :class:`Launch` and each request (:class:`Norms`, :class:`Directions`) and is sent each
request's answer. :func:`run` runs one through a launcher (the CPU's, a lazy row-sparse or a
multi-precision one, CUDA's); the Trainer drives the same values with :func:`drive`, keeping the
launches of a whole group and answering the requests from one reduction over it.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["KINDS", "Launch", "Norms", "Directions", "rule", "noise", "row_rule", "factored",
           "matrix", "SEGMENTED", "steps_of", "drive", "run", "collect", "run_launch", "run_many",
           "prepare_many", "in_order", "answer",
           "keyed"]


#: the kinds of launch a backend runs
KINDS = ("rule", "noise", "rows", "factored", "matrix")
#: the kinds a backend also runs over a Trainer group's flat buffers in one segmented call
#: (a "matrix" step runs per weight: its products are per matrix anyway)
SEGMENTED = ("rule", "noise", "rows", "factored")


class Launch(NamedTuple):
    """One kernel call: ``kind`` "rule" (an element-wise rule), "noise" (one drawing a normal
    per element), "rows" (a row rule, ``toolkit.backends.rows``) or "factored" (a whole step
    over a weight's matrices, their row and column statistics and its own sums,
    ``toolkit.backends.cpu_factored``: Adafactor) or "matrix" (a 2-D weight's direction
    orthogonalised through matrix products, ``toolkit.backends.cpu_matrix``: Muon); another kind
    is refused where it is run."""
    kind: str
    factory: object       #: the rule factory
    weight: object
    grad: object
    states: tuple         #: the state arrays ("rows": the per-row history alone)
    hyper: tuple          #: the rule's row of hyperparameters ("factored", "matrix": float64)
    key: object = None    #: "noise": the stream key of the draws; "rule": of a stochastic
    #: rounding of low-precision states (None: to nearest)
    aux: tuple = ()       #: "noise": the float64 scalars beside the row
    rows: object = None   #: "rows": the gradient's rows (None: the launcher's, or every row)


class Norms(NamedTuple):
    """A request: ``(sum w^2, sum g'^2)`` in float64 of a weight and its step's gradient
    (``g' = (cum + grad)/batch_scale`` when ``cum`` is given), LARS's and LBSGD's 'lars'."""
    weight: object
    grad: object
    cum: object
    batch_scale: float


class Directions(NamedTuple):
    """A request: ``(sum w^2, sum u^2)`` of the first pass ``first`` of a two-pass step
    (``rules.DirectionPass``, LAMB), which writes nothing."""
    first: object
    weight: object
    grad: object
    states: tuple


def rule(factory, weight, grad, states, hyper):
    """The launch of an element-wise rule over ``weight``, ``grad`` and ``states``."""
    return Launch("rule", factory, weight, grad, tuple(states), hyper)


def noise(factory, weight, grad, hyper, key, aux):
    """The launch of a noise rule: element ``i`` draws ``normal(key, i)`` (C order)."""
    return Launch("noise", factory, weight, grad, (), hyper, key=key, aux=tuple(aux))


def row_rule(factory, weight, grad, history, rows, hyper):
    """The launch of a row rule: gradient row ``k`` updates weight and history row ``rows[k]``
    (``rows`` None: the launcher's rows, else row ``k``)."""
    return Launch("rows", factory, weight, grad, (history,), hyper, rows=rows)


def factored(factory, weight, grad, states, hyper):
    """The launch of a factored step over ``weight`` (its shape says which of ``states``, the
    row, column and whole statistics, it reads), ``hyper`` its float64 row."""
    return Launch("factored", factory, weight, grad, tuple(states), hyper)


def matrix(factory, weight, grad, states, hyper):
    """The launch of a matrix step over the 2-D ``weight`` and its ``states`` (the momentum
    buffer), ``hyper`` its float64 row (``toolkit.backends.cpu_matrix``)."""
    return Launch("matrix", factory, weight, grad, tuple(states), hyper)


def keyed(step, key):
    """The kernel step ``step`` with ``key`` on each "rule" launch (the key of a stochastic
    rounding of low-precision states, ``Optimizer.state_rounding``); its requests' answers
    passed on."""
    if type(step) is Launch:
        return _with_key(step, key)
    if getattr(step, "send", None) is None:
        raise _not_a_step(step)
    return _keyed(step, key)


def _with_key(launch, key):
    if launch.kind != "rule":
        return launch
    return Launch(launch.kind, launch.factory, launch.weight, launch.grad, launch.states,
                  launch.hyper, key, launch.aux, launch.rows)


def _keyed(step, key):
    reply = None
    while True:
        try:
            item = step.send(reply)
        except StopIteration:
            return
        reply = yield (_with_key(item, key) if type(item) is Launch else item)


def _checked(launch):
    if launch.kind not in KINDS:
        raise ValueError(f"a Launch of kind {launch.kind!r}: a backend runs {', '.join(KINDS)}")
    return launch


def _not_a_step(step):
    return TypeError(
        f"a kernel step returned {type(step).__name__}: it returns what to run, a "
        "toolkit.backends.launches.Launch or a generator of them (an override that calls "
        "super()._kernel_step(...) returns what that returns)")


def steps_of(step):
    """The kernel step ``step`` as a generator (a :class:`Launch` yielded once), the answers it
    is sent passed on."""
    if type(step) is Launch:
        yield step
        return
    if getattr(step, "send", None) is None:
        raise _not_a_step(step)
    yield from step


def drive(step, launch, answer_request):
    """Take the kernel step ``step`` to its end: each :class:`Launch` to ``launch``, each
    request to ``answer_request``, whose answer the step is sent. Returns the launches."""
    if type(step) is Launch:
        launch(_checked(step))
        return 1
    send = getattr(step, "send", None)
    if send is None:
        raise _not_a_step(step)
    n, reply = 0, None
    while True:
        try:
            item = send(reply)
        except StopIteration:
            if n == 0:
                raise TypeError("a kernel step yielded no launch: it returns or yields what to "
                                "run, a toolkit.backends.launches.Launch") from None
            return n
        if type(item) is Launch:
            launch(_checked(item))
            n, reply = n + 1, None
        elif isinstance(item, (Norms, Directions)):
            reply = answer_request(item)
        else:
            raise _not_a_step(item)


def run_launch(launch, launcher):
    """Run one :class:`Launch` through ``launcher``."""
    if launch.kind == "rule":
        if launch.key is None:
            launcher.run_rule(launch.factory, launch.weight, launch.grad, launch.states,
                              launch.hyper)
        else:  # a stochastic rounding's key (state_rounding): the CPU launcher's keyword
            launcher.run_rule(launch.factory, launch.weight, launch.grad, launch.states,
                              launch.hyper, key=launch.key)
    elif launch.kind == "noise":
        launcher.run_noise_rule(launch.factory, launch.weight, launch.grad, launch.hyper,
                                launch.key, launch.aux)
    elif launch.kind == "factored":
        launcher.run_factored(launch.factory, launch.weight, launch.grad, launch.states,
                              launch.hyper)
    elif launch.kind == "matrix":
        launcher.run_matrix(launch.factory, launch.weight, launch.grad, launch.states,
                            launch.hyper)
    else:
        launcher.run_rows(launch.factory, launch.weight, launch.grad, launch.states[0],
                          launch.rows, launch.hyper)


def prepare_many(calls, launcher, names=None):
    """``run()`` of ``calls``, the launches of distinct parameters' steps, one each (no array
    one of them writes is read or written by another, so their order is free), through
    ``launcher``; ``run()`` returns the kernel calls made. Every one a "rule" launch and the
    launcher able to take them together (``prepare_rules``, the CPU's: checked now, then one
    parallel call over all their blocks), together; else one by one, in order. ``names``: a
    string naming each call's parameter where a refusal names it."""
    together = getattr(launcher, "prepare_rules", None)
    if together is not None and len(calls) > 1 and all(c.kind == "rule" for c in calls):
        return together(calls, names)
    return in_order(calls, launcher)


def in_order(calls, launcher):
    """``run()`` of the launches ``calls`` one by one, in order, through ``launcher``; it
    returns how many ran."""
    def run():
        for c in calls:
            run_launch(c, launcher)
        return len(calls)
    return run


def run_many(calls, launcher):
    """:func:`prepare_many`'s ``run()`` at once: the kernel calls made."""
    return prepare_many(calls, launcher)()


def answer(request, launcher):
    """A request answered by ``launcher``'s first passes, over the request's own arrays."""
    if type(request) is Norms:
        return launcher.lars_norms(*request)
    return launcher.direction_norms(*request)


def run(step, launcher):
    """Run the kernel step ``step`` through ``launcher``; returns the launches."""
    if type(step) is Launch:  # the common case, without the closures
        run_launch(_checked(step), launcher)
        return 1
    return drive(step, lambda item: run_launch(item, launcher),
                 lambda request: answer(request, launcher))


def collect(step, launcher):
    """The launches of the kernel step ``step``, in order, none run; its requests answered by
    ``launcher`` (so a later launch's row is the one a real run would make)."""
    out = []
    drive(step, out.append, lambda request: answer(request, launcher))
    return out
