"""What an MPI launcher tells each process through its environment, read before MPI starts.

``mpiexec`` sets each process's rank in an environment variable before the process runs, so the
distributed Trainer's watchdog and ``mxopt launch``'s per-rank runner can name the rank while MPI
is still starting. Standard library only: ``toolkit.mpi_jobs`` loads this file by path on every
rank without importing the ``toolkit`` package (whose import compiles Numba kernels).
"""
from __future__ import annotations

import os

__all__ = ["RANK_VARIABLES", "rank_from_env"]

#: the environment variables that hold a process's rank, in the order they are read: MPICH's
#: (hydra's PMI), Open MPI's, PMIx's
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def rank_from_env(default=None):
    """This process's rank as the MPI launcher states it (the first of :data:`RANK_VARIABLES`
    that holds a non-negative integer), or ``default`` when none does (a process not started
    by an MPI launcher)."""
    for name in RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return default
