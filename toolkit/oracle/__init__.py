"""The oracle as a product: check anyone's optimizer against the documented equations.

``verify`` lives in :mod:`toolkit.oracle.core`, ``identify`` in
:mod:`toolkit.oracle.identification`, the audit of other frameworks
(``audit``) in :mod:`toolkit.oracle.conformance`, the search space and the command line in
``space`` and ``cli``; this package is the surface users import (``from toolkit import oracle``).

``verify(make_step, optimizer)`` runs a user's implementation beside the float64 reference on
cases drawn by index from its seed (hyperparameters, weights and gradient sequences over several
decades, aimed at branch points; the cases of fewer examples are the first of more,
:mod:`toolkit.oracle.cases`) and returns a :class:`VerifyReport`: ``passed``, ``max_error``
(normalised: 1.0 is the rigorous rounding bound of the dtype, ``toolkit.error_bounds``), the worst
case and a readable ``summary``. ``identify(make_step, optimizer)`` runs cases on which the
conventions ("mxnet", "guide", "pytorch") give different results and names the one the
implementation follows (:class:`IdentifyReport`). Both draw their cases from a fixed seed
(:data:`DEFAULT_SEED`: the same verdict on every run) unless another, or ``"random"``, is asked
for, and record the seed and the versions they ran with (:func:`versions`) in the report.

The user's side is one function::

    make_step(weight0, **hyperparameters) -> step      # MXNet's names: learning_rate, wd, ...
    step(grad) -> new_weight                           # keeps its own state between calls

It may use any framework and any precision: ``weight0`` and every ``grad`` are numpy arrays of
``dtype`` (copies: the function may keep or modify them; vectors, and matrices for
``groupadagrad``, whose update works row by row), and ``new_weight`` is anything
``numpy.asarray`` accepts, a PyTorch tensor (on any device), or a CUDA array. A user's exception,
an output of the wrong shape, or complex or non-numeric values make a failed report that says so;
it never escapes. ``fixed`` hyperparameters are checked by the optimizer's own constructor.

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

The cases and the bound are those of our own tests (``docs/oracle.md``); the hyperparameter space
is :mod:`toolkit.oracle.space`.
"""
from .core import (DEFAULT_SEED, FRAMEWORKS, KINDS, DomainVerdict, Explanation,  # noqa: F401
                   IdentifyReport, InternalError, OracleMismatch, VerifyReport,
                   assert_matches_oracle, conventions_of, identify, resolve_seed, verify,
                   versions)
from .conformance import audit  # noqa: E402

__all__ = ["verify", "identify", "assert_matches_oracle", "VerifyReport", "IdentifyReport",
           "conventions_of", "OracleMismatch", "DEFAULT_SEED", "FRAMEWORKS", "versions",
           "Explanation", "DomainVerdict", "KINDS", "audit", "resolve_seed", "InternalError"]
