"""Where ``toolkit.torch`` hands addresses to the CPU executor: :func:`launch_addressed`, the one
call of the addressed kernel (``cpu.Launcher.run_addressed``) that the
vectorised and the steady step make, and :func:`run_rule_table`, which reads a table's
addresses from its tensors (``data_ptr()``: no numpy view, no copy); :func:`launch_addressed_mp`
and :func:`run_rule_table_mp` for bfloat16 weights with a float32 master. Every address reaching
``launch_addressed`` or ``launch_addressed_mp`` is a weight or gradient checked in this step or
an array the toolkit owns (``toolkit.torch.binding``); ``tests/test_torch_memory.py`` wraps
both to prove so.
"""
from __future__ import annotations

import numpy as np

from ..backends.cpu import LAUNCHER

__all__ = ["launch_addressed", "launch_addressed_mp", "run_rule_table", "run_rule_table_mp"]


def launch_addressed(factory, dtype, ptrs, sizes, table, planned=None):
    """Run ``factory``'s rule on row ``k`` of ``ptrs`` (the addresses of ``(weight, grad,
    *states)``, each ``sizes[k]`` elements of ``dtype``) with the hyperparameters of
    ``table[k]``; returns the call's :class:`~toolkit.backends.addressed.Planned` (None: no
    row active). ``planned``: what an earlier call of the same factory returned for arrays of
    the same shapes, sizes and active flags, every address unchanged since but those the
    caller checked (the steady step's gradients): it runs without being planned again. The
    CPU executor runs it (``cpu.Launcher.run_addressed``)."""
    return LAUNCHER.run_addressed(factory, dtype, ptrs, sizes, table, planned)


def launch_addressed_mp(factory, ptrs, sizes, table, weight, planned=None):
    """Run ``factory``'s float32 rule on row ``k`` of ``ptrs`` (the addresses of ``(float32
    master, gradient, *float32 states, weight)``, the gradient and the weight of type
    ``weight``, "bfloat16" or "float16", each ``sizes[k]`` elements) with the hyperparameters of
    ``table[k]`` (float32): the master updated, the weight rounded from it
    (:func:`toolkit.backends.addressed.run_rule_addressed_mp`). ``planned`` and the return
    value: as :func:`launch_addressed`'s."""
    return LAUNCHER.run_addressed_mp(factory, ptrs, sizes, table, weight, planned)


def run_rule_table_mp(factory, tensors, table, weight):
    """:func:`run_rule_table` for weights of type ``weight`` with a float32 master:
    ``tensors[k]`` is ``(master, grad, *states, weight)`` (contiguous CPU tensors), ``table``
    float32 (:func:`launch_addressed_mp`)."""
    if not tensors:
        return
    ptrs = np.array([[a.data_ptr() for a in arrays] for arrays in tensors], np.int64)
    sizes = np.array([arrays[0].numel() for arrays in tensors], np.int64)
    launch_addressed_mp(factory, ptrs, sizes, table, weight)


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
