"""What an MPI launcher tells each process through its environment, read before MPI starts.

``mpiexec`` (MPICH's hydra, Open MPI, PMIx launchers) sets each process's rank in an environment
variable before the process runs. The distributed Trainer (``toolkit.trainer.dist``) names the
rank in its watchdog's messages while MPI is still starting, and ``mxopt launch``'s per-rank
runner (``toolkit.mpi_jobs``) names it before the script (and mpi4py) is imported.

This module imports only the standard library and nothing of the toolkit: ``toolkit.mpi_jobs``,
run by path on every rank before anything else, loads it by path, without importing the
``toolkit`` package (whose import compiles Numba kernels).
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
