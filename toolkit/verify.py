"""Deprecated alias of :mod:`toolkit.error_bounds` (the rigorous error bounds that check an
optimizer against the float64 oracle), kept for one release: importing it warns
``DeprecationWarning`` and gives the same public names, bound to the same objects.
(The oracle's own ``verify`` is :func:`toolkit.oracle.verify`.)
"""
from .deprecation import warn_import

from .error_bounds import (SAFETY, check_function, compare, depends, element_errors,  # noqa: F401
                           finite_score, further_beyond, normalised_error, overflow_mask,
                           overflow_threshold, overflowed, reference_call, step_errors,
                           trajectory_errors, unit)
from .error_bounds import __all__  # noqa: F401

warn_import("toolkit.verify is deprecated and will be removed in the next release: use "
            "toolkit.error_bounds (the same names)", __file__)
