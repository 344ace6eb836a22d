"""``python -m toolkit regress``: golden trajectories, recorded once and compared bit for bit.

``record`` stores, after each step of every optimizer x convention x backend x dtype on fixed
inputs, the weight and every state array as exact bits; ``compare`` reruns the stored inputs and
reports what changed, in ulps of each array's storage dtype::

    python -m toolkit regress record PATH [--only NAMES] [--backend B] [--dtype D]
                                          [--steps N] [--size N] [--force]
    python -m toolkit regress compare PATH [--bound N] [--json] [--only NAMES] [--backend B]

``PATH`` ending in ``.json`` is one file, any other a folder with one ``<name>.json`` per
optimizer (the layout of ``tests/data/golden/``). The file format, the bound, the entry statuses
and the exit codes are in ``docs/regression-testing.md``. Parts: :mod:`~toolkit.tools.regress.fileformat` (format, array
encoding, ulp distance), :mod:`~toolkit.tools.regress.recording` (``record``),
:mod:`~toolkit.tools.regress.comparing` (``compare``), :mod:`~toolkit.tools.regress.users` (a
user's optimizer), :mod:`~toolkit.tools.regress.cli`. Every public name is importable from here.
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
