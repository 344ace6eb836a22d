"""The seed of an oracle run, in one place: ``verify``, ``identify``, the audit and ``mxopt
check`` draw their cases from :data:`DEFAULT_SEED` unless another is asked for, take ``"random"``
for a fresh one (recorded, so the run can be repeated), and refuse anything else, on the command
line (:func:`parse_seed`) as in Python (:func:`resolve_seed`).
"""
from __future__ import annotations

import argparse
import numbers
import secrets

__all__ = ["DEFAULT_SEED", "resolve_seed", "parse_seed"]

#: the seed of ``verify`` and ``identify`` unless another is asked for: the same verdict every run
DEFAULT_SEED = 0


def resolve_seed(seed):
    """The int seed of a run: ``seed`` itself (an int >= 0), or a fresh one for ``"random"``
    (which the caller records, so the run can be repeated); anything else is a ValueError that
    says what is taken. ``verify``, ``identify``, the audit and ``mxopt check`` resolve theirs
    here."""
    if isinstance(seed, str) and seed == "random":
        return secrets.randbelow(2 ** 32)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be an int >= 0 (default {DEFAULT_SEED}: the same cases and "
                         f"verdict every run) or 'random' (a fresh seed, recorded in the "
                         f"report), got {seed!r}")
    return int(seed)


def parse_seed(text):
    """``--seed``'s value: an int >= 0, or ``"random"`` (a fresh seed, which the report records
    so that the run can be repeated); anything else is an argparse usage error that says so."""
    if text == "random":
        return text
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if seed < 0:
        raise argparse.ArgumentTypeError(f"takes an int >= 0 or 'random', got {text!r}")
    return seed
