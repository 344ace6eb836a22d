"""The oracle as a product: check anyone's optimizer against the documented equations.

This package is the surface users import (``from toolkit import oracle``): ``verify``
(:mod:`toolkit.oracle.core`) runs a user's ``make_step`` beside the float64 reference on cases
drawn from a seed (:mod:`toolkit.oracle.cases`, :mod:`toolkit.oracle.space`) and returns a
:class:`VerifyReport` whose ``max_error`` is normalised to the dtype's rigorous rounding bound
(1.0, ``toolkit.error_bounds``); ``identify`` (:mod:`toolkit.oracle.identification`) names the
convention an implementation follows; ``audit`` (:mod:`toolkit.oracle.conformance`) checks other
frameworks. The seed is :data:`DEFAULT_SEED` unless another, or ``"random"``, is asked for.

The user's side is one function::

    make_step(weight0, **hyperparameters) -> step      # MXNet's names: learning_rate, wd, ...
    step(grad) -> new_weight                           # keeps its own state between calls

in any framework and precision (``docs/oracle.md`` says what it is given and may return; a
user's exception or a malformed output makes a failed report, never escapes).

Example::

    >>> import numpy as np
    >>> from toolkit import oracle
    >>> def make_sgd(w, learning_rate, wd, rescale_grad, clip_gradient, momentum):
    ...     w = w.copy()
    ...     def step(g):
    ...         g = rescale_grad * g
    ...         if clip_gradient is not None:
    ...             g = np.clip(g, -clip_gradient, clip_gradient)
    ...         w[...] = w - learning_rate * (g + wd * w)
    ...         return w
    ...     return step
    >>> report = oracle.verify(make_sgd, "sgd", convention="guide", fixed={"momentum": 0.0},
    ...                        dtype="float64", examples=20, seed=1)
    >>> report.passed, report.max_error <= 1.0
    (True, True)
"""
from .core import (DEFAULT_SEED, FRAMEWORKS, KINDS, DomainVerdict, Explanation,  # noqa: F401
                   IdentifyReport, InternalError, OracleMismatch, VerifyReport,
                   assert_matches_oracle, conventions_of, identify, resolve_seed, verify,
                   versions)
from .conformance import audit  # noqa: E402

__all__ = ["verify", "identify", "assert_matches_oracle", "VerifyReport", "IdentifyReport",
           "conventions_of", "OracleMismatch", "DEFAULT_SEED", "FRAMEWORKS", "versions",
           "Explanation", "DomainVerdict", "KINDS", "audit", "resolve_seed", "InternalError"]
