"""``python -m toolkit regress``: golden trajectories, recorded once and compared bit for bit.

``record`` runs every optimizer x convention x backend x dtype on fixed inputs and stores, after
each step, the weight and every state array as exact bits, with the inputs and the provenance
(versions, machine, date, command). ``compare`` reruns the stored inputs with the code and
machine of today and reports, per entry that changed, what changed and by how much::

    python -m toolkit regress record PATH [--only NAMES] [--backend B] [--dtype D]
                                          [--steps N] [--size N] [--force]
    python -m toolkit regress compare PATH [--bound N] [--json] [--only NAMES] [--backend B]

``PATH`` ending in ``.json`` is one file; any other path is a folder with one file per optimizer
(``<name>.json``; the layout of ``tests/data/golden/``). ``compare`` reads either.

Backends recorded by default: ``cpu``, and ``cuda`` on a real GPU (numba's simulator only when
``--backend cuda`` asks for it: it runs kernels in Python, so its numbers are not a GPU's).
``--backend reference`` records the float64 oracle itself (our golden files). Dtypes:
``float32``, ``float64``, ``float16-mp`` (float16 weight, float32 master copy and state),
``float16`` (no master copy).

The bound of ``compare`` is in **ulps of each array's own storage dtype** (the distance between
the stored and the recomputed bit patterns, counted in representable numbers; ``--bound 0``, the
default, is bit-exact). Each entry may carry its own allowance ``ulps`` (the golden files allow
1 ulp where libm's ``pow``/``exp``/``log``/``cos`` are involved); an entry passes when its
largest distance is at most ``max(bound, ulps)``. ``+0`` and ``-0`` are 0 ulps apart: a changed
sign of zero is reported (status ``within``), never a failure. NaN against NaN is equal (payloads
are not compared); NaN against a number is an infinite distance.

Entry statuses: ``same`` (bit-identical), ``within`` (differs, inside the allowance), ``changed``
(beyond it), ``error`` (the rerun raised), ``extra`` (the file names an optimizer or convention
this toolkit no longer has), ``skipped`` (its backend cannot run here, e.g. no GPU: not a
failure), ``missing`` (the recorded scope would hold it today but the file does not, e.g. an
optimizer added since: not a failure; record again to cover it).

Exit codes of :func:`main`:

* ``0`` -- recorded; or compared and every entry is ``same``/``within``/``skipped``/``missing``
* ``1`` -- compared and some entry is ``changed``, ``error`` or ``extra``
* ``2`` -- usage or file error: bad arguments, an unknown optimizer, an explicitly requested
  backend that cannot run here, a file that exists (record without ``--force``), a missing,
  truncated, corrupted or foreign file, or one of a newer format version

A user's optimizer: ``record --target module:function --optimizer NAME`` (or
:func:`record_user`) records a ``make_step`` on the oracle's cases with the reference's weight
beside each step; ``compare`` reruns it (the target the file names, ``--target``, or
``compare(..., make_step=f)``) and says of each entry that moved by how many ulps, and whether
toward or away from the reference (:mod:`~toolkit.tools.regress.users`).

The file format (``format: "mxopt-regress"``, ``version: 1``; version 2 adds a user's entries)
is described in ``docs/regression-testing.md``.

The package by parts: the file format, the encoding of arrays and the distance in ulps
(:mod:`~toolkit.tools.regress.fileformat`), the entries and ``record``
(:mod:`~toolkit.tools.regress.recording`), ``compare`` and its report
(:mod:`~toolkit.tools.regress.comparing`), a user's optimizer
(:mod:`~toolkit.tools.regress.users`), the command line (:mod:`~toolkit.tools.regress.cli`).
Every public name is importable from here (``toolkit.tools.regress.compare``, ...).
"""
from __future__ import annotations

from . import cli, comparing, fileformat, recording, users  # noqa: F401
from .cli import main
from .comparing import FAILING, STATUSES, ArrayChange, EntryResult, Report, compare
from .fileformat import (BACKENDS, ENCODINGS, FORMAT, USER, USER_VERSION, VERSION,
                         RegressFileError, decode, document, encode, entry_id, load,
                         ulp_distance, write)
from .recording import (COMMON, DEFAULT_SIZE, DEFAULT_STEPS, SEED, RecordResult, common_for,
                        fill_entry, hyper_for, new_entry, record, recorded_inputs,
                        reference_hyper, run_entry)
from .users import DEFAULT_CASES, Direction, record_user, user_entries

__all__ = ["FORMAT", "VERSION", "RegressFileError", "Report", "EntryResult", "ArrayChange",
           "record", "compare", "load", "write", "new_entry", "hyper_for", "common_for",
           "reference_hyper", "run_entry", "fill_entry",
           "document", "encode", "decode", "ulp_distance", "main", "record_user",
           "user_entries", "Direction", "USER", "USER_VERSION"]
