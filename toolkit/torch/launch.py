"""The one function that runs a rule's table of rows over CPU tensors
(:func:`run_rule_table`), what ``toolkit.torch``'s vectorised step calls for each (param group,
dtype): one call of the addressed kernel (:func:`toolkit.backends.addressed.run_rule_addressed`)
over the tensors' own memory, read through ``data_ptr()`` (no numpy view, no copy).
"""
from __future__ import annotations

import numpy as np

from ..backends.addressed import run_rule_addressed

__all__ = ["run_rule_table"]


def run_rule_table(factory, dtype, tensors, table):
    """Run ``factory``'s rule over each ``tensors[k]`` (``(weight, grad, *states)``: CPU
    tensors of ``dtype``, contiguous, in the weight's memory order; updated in place) with the
    hyperparameters of ``table[k]``: a numpy array ``(n, 1 + len(hp))`` of ``dtype``, column 0
    the active flag (a row with 0 is skipped), as ``cpu.run_segmented`` takes it. One kernel
    call; ``tensors`` keeps every tensor alive for it."""
    if not tensors:
        return
    ptrs = np.array([[a.data_ptr() for a in arrays] for arrays in tensors], np.int64)
    sizes = np.array([arrays[0].numel() for arrays in tensors], np.int64)
    run_rule_addressed(factory, dtype, ptrs, sizes, table)
