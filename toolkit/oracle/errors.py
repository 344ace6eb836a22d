"""What the oracle raises when the fault is its own: :class:`InternalError`.

The user's code never makes the oracle raise (:mod:`toolkit.oracle.user` turns what it does into a
failed report), and a bad argument is a ``ValueError`` or ``TypeError`` before anything runs. An
exception after that is a bug of the toolkit: :func:`bug_report` turns it into an
:class:`InternalError` that says so and asks for a report (``mxopt`` exits 3 on it).
"""
from __future__ import annotations

import contextlib
import difflib

from .user import PASS_THROUGH, describe

__all__ = ["InternalError", "bug_report", "unknown_optimizer", "REPORT_TO"]

#: where a bug of the oracle is reported
REPORT_TO = "the toolkit's issue tracker"


class InternalError(RuntimeError):
    """A bug of the oracle itself (not of the user's code, nor a bad argument)."""


@contextlib.contextmanager
def bug_report(what):
    """Run the body; an exception it raises (but ``SystemExit``, ``KeyboardInterrupt`` and an
    :class:`InternalError` already made) becomes an :class:`InternalError` naming ``what``."""
    try:
        yield
    except (InternalError, *PASS_THROUGH):
        raise
    except Exception as e:  # noqa: BLE001 - the oracle's own fault, reported as such
        raise InternalError(
            f"{what} failed inside the oracle, not in your code ({describe(e)}). This is a bug "
            f"of the toolkit: please report it to {REPORT_TO} with the command or call, its "
            f"seed and the versions (mxopt --version)") from e


def unknown_optimizer(name, known):
    """The message of the ``ValueError`` for an optimizer name the oracle does not know: the
    closest registry names first ("did you mean 'adam'?", :func:`difflib.get_close_matches`),
    then every name it knows."""
    close = difflib.get_close_matches(str(name).lower(), list(known), n=3, cutoff=0.6)
    hint = (" (did you mean " + " or ".join(repr(c) for c in close) + "?)") if close else ""
    return f"unknown optimizer {name!r}{hint}; the oracle knows {', '.join(known)}"
