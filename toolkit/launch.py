"""Deprecated alias of :mod:`toolkit.mpi_jobs` (``mxopt launch``'s launcher and per-rank runner),
kept for one release: importing it, or running it (``python toolkit/launch.py script.py``,
``python -m toolkit.launch script.py``), warns ``DeprecationWarning`` and does what
``toolkit.mpi_jobs`` does, with the same exit status.

Run by path, this file imports only the standard library and ``toolkit/mpi_jobs.py`` (loaded by
path), as ``mpi_jobs.py`` itself does: not the ``toolkit`` package (Numba) nor mpi4py.
"""
import os
import sys
import warnings

_MESSAGE = ("toolkit.launch is deprecated and will be removed in the next release: use "
            "toolkit.mpi_jobs (the same functions; run toolkit/mpi_jobs.py by path as the "
            "per-rank runner)")

if __package__:   # imported as toolkit.launch, or run as python -m toolkit.launch
    if __name__ == "__main__":
        warnings.warn(_MESSAGE, DeprecationWarning, stacklevel=1)
    else:
        from .deprecation import warn_import
        warn_import(_MESSAGE, __file__)
    from .mpi_env import rank_from_env  # noqa: F401
    from .mpi_jobs import (EVERYWHERE_GRACE_S, SOCKET_ENV, command, find_mpiexec,  # noqa: F401
                           main, report, run_rank)
else:             # run by path: load toolkit/mpi_jobs.py by path, as mpi_jobs.py loads mpi_env
    warnings.warn(_MESSAGE, DeprecationWarning, stacklevel=1)
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        "_mxopt_mpi_jobs", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "mpi_jobs.py"))
    _mpi_jobs = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mpi_jobs)
    (EVERYWHERE_GRACE_S, SOCKET_ENV, command, find_mpiexec, main, report, run_rank,
     rank_from_env) = (_mpi_jobs.EVERYWHERE_GRACE_S, _mpi_jobs.SOCKET_ENV, _mpi_jobs.command,
                       _mpi_jobs.find_mpiexec, _mpi_jobs.main, _mpi_jobs.report,
                       _mpi_jobs.run_rank, _mpi_jobs.rank_from_env)

__all__ = ["main", "find_mpiexec", "command", "run_rank", "report", "SOCKET_ENV",
           "EVERYWHERE_GRACE_S"]

if __name__ == "__main__":   # a rank: python launch.py script.py [args]
    sys.exit(run_rank(sys.argv[1:]))
