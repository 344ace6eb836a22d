"""Where ``toolkit.torch`` hands addresses to a kernel: :func:`launch_addressed`, the one call
of the addressed kernel (:func:`toolkit.backends.addressed.run_rule_addressed`) that the
vectorised and the steady step make, and :func:`run_rule_table`, which reads a table's
addresses from its tensors (``data_ptr()``: no numpy view, no copy). Every address reaching
``launch_addressed`` is a weight or gradient checked in this step or an array the toolkit owns
(``toolkit.torch.binding``); ``tests/test_torch_memory.py`` wraps it to prove so.
"""
from __future__ import annotations

import numpy as np

from ..backends.addressed import run_rule_addressed

__all__ = ["launch_addressed", "run_rule_table"]


def launch_addressed(factory, dtype, ptrs, sizes, table):
    """Run ``factory``'s rule on row ``k`` of ``ptrs`` (the addresses of ``(weight, grad,
    *states)``, each ``sizes[k]`` elements of ``dtype``) with the hyperparameters of
    ``table[k]``."""
    run_rule_addressed(factory, dtype, ptrs, sizes, table)


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
    launch_addressed(factory, dtype, ptrs, sizes, table)
