"""The one function that runs a rule's table of rows over CPU tensors
(:func:`run_rule_table`), what ``toolkit.torch``'s vectorised step calls for each (param group,
dtype).

For now it runs each tensor through the CPU launcher on numpy views of the tensors (zero-copy:
``Tensor.numpy()`` shares the memory; a gradient not in its weight's memory order is copied
into it), one call per tensor with that tensor's row. The addressed kernel family
(``toolkit/backends/addressed.py``, ``run_rule_addressed(factory, dtype, ptrs, sizes, table)``:
one call over tensors at arbitrary addresses) replaces the loop with one call where every
tensor of a row is dense in the weight's memory order. Every tensor handed here is contiguous
(``toolkit.torch`` passes the views in memory order), so the switch is::

    ptrs = np.array([[a.data_ptr() for a in arrays] for arrays in tensors], np.int64)
    sizes = np.array([arrays[0].numel() for arrays in tensors], np.int64)
    run_rule_addressed(factory, dtype, ptrs, sizes, table)
"""
from __future__ import annotations

from ..backends import cpu

__all__ = ["run_rule_table"]


def run_rule_table(factory, dtype, tensors, table):
    """Run ``factory``'s rule over each ``tensors[k]`` (``(weight, grad, *states)``, CPU
    tensors of ``dtype``, updated in place) with the hyperparameters of ``table[k]``: a numpy
    array ``(n, 1 + len(hp))`` of ``dtype``, column 0 the active flag (a row with 0 is skipped),
    as ``cpu.run_segmented`` takes it."""
    for arrays, row in zip(tensors, table):
        if not row[0]:
            continue
        views = [a.numpy() for a in arrays]
        # each value of the row is the dtype's already: rounding it again changes nothing
        cpu.LAUNCHER.run_rule(factory, views[0], views[1], tuple(views[2:]),
                              tuple(row[1:].tolist()))
