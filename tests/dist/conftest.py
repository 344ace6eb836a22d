"""The distributed tests: each runs ``mpiexec -n 2`` or ``-n 3`` on this machine.

They run in a pytest process of their own (``.ci/run``: ``python -m pytest tests/dist`` after
installing the ``dist`` extra). The main test command (path ``tests``) does not collect them:
"dist" is in pytest's default ``norecursedirs``; should a run collect them anyway without naming
this folder, they are skipped with that reason. When asked for but mpi4py or
``mpiexec`` is missing they are skipped with a reason naming what is missing, or fail when
``MXOPT_DIST_REQUIRED=1`` (CI sets it, so that a broken install never passes as "all skipped").
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

DIST_DIR = Path(__file__).resolve().parent
ROOT = DIST_DIR.parent.parent
WORKER = DIST_DIR / "worker.py"


def _requested(config):
    if os.environ.get("MXOPT_DIST_TESTS") == "1":
        return True
    for arg in config.args:
        path = Path(str(arg).split("::")[0])
        path = (Path(config.invocation_params.dir) / path).resolve()
        if path == DIST_DIR or DIST_DIR in path.parents:
            return True
    return False


def _missing():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed (pip install -e '.[dist]')"
    from toolkit.mpi_jobs import find_mpiexec
    if find_mpiexec() is None:
        return "no mpiexec beside this Python nor on PATH (pip install -e '.[dist]' installs MPICH)"
    return None


def pytest_collection_modifyitems(config, items):
    mine = [it for it in items if DIST_DIR in Path(str(it.fspath)).resolve().parents]
    if not mine:
        return
    if not _requested(config):
        mark = pytest.mark.skip(reason="distributed tests run in their own pytest process: "
                                       "python -m pytest tests/dist (as .ci/run does)")
    else:
        why = _missing()
        if why is None:
            return
        if os.environ.get("MXOPT_DIST_REQUIRED") == "1":
            raise pytest.UsageError(f"MXOPT_DIST_REQUIRED=1 but {why}")
        mark = pytest.mark.skip(reason=f"distributed tests need MPI: {why}")
    for it in mine:
        it.add_marker(mark)


class Job:
    def __init__(self, rc, out, seconds):
        self.rc, self.out, self.seconds = rc, out, seconds

    def __repr__(self):
        return f"Job(rc={self.rc}, {self.seconds:.1f} s)\n{self.out[-4000:]}"


def run_mpi(n, *args, timeout=240, env=None, script=WORKER, launcher=False, plain=False):
    """Run ``script`` on ``n`` ranks; returns a :class:`Job` (exit status, output, seconds).
    Default: ``mpiexec`` with ``mxopt launch``'s per-rank runner but without the launcher
    (``toolkit.mpi_jobs.command``); ``launcher``: through ``python -m toolkit launch``;
    ``plain``: ``mpiexec -n N python script`` (no runner: the Trainer's own abort hook and
    watchdog must do)."""
    from toolkit.mpi_jobs import command, find_mpiexec
    if plain:
        cmd = [find_mpiexec(), "-n", str(n), sys.executable, str(script)] + [str(a) for a in args]
    elif launcher:
        cmd = [sys.executable, "-m", "toolkit", "launch", "-n", str(n), str(script)] + \
            [str(a) for a in args]
    else:
        cmd = command(n, str(script), [str(a) for a in args], find_mpiexec())
    full_env = dict(os.environ)
    full_env.setdefault("MXOPT_DIST_TIMEOUT", "120")
    full_env.update(env or {})
    full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=str(ROOT), env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        # SIGTERM: mpiexec (and mxopt launch, which forwards it) ends every rank; a SIGKILL
        # would leave the ranks running (each is in a session of its own)
        rc = "timeout"
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    return Job(rc, out or "", time.monotonic() - t0)


@pytest.fixture
def mpi():
    return run_mpi


@pytest.fixture(scope="session")
def worker_module():
    sys.path.insert(0, str(DIST_DIR))
    import worker
    return worker

