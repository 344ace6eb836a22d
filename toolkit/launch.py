"""``mxopt launch -n N script.py [args]``: start N processes of a training script under MPI.

It runs the ``mpiexec`` of the installed MPI (the ``mpich`` wheel of the ``dist`` extra puts it
beside this Python) as::

    mpiexec -n N <this python> -m mpi4py script.py [args]

``-m mpi4py`` makes an uncaught exception on any rank abort the whole job (``MPI_Abort``), even
before the script builds a Trainer. The exit status is mpiexec's: 0 when every rank succeeded.
``--timeout S`` sets ``MXOPT_DIST_TIMEOUT`` (the watchdog of the Trainer's collectives) for the
ranks. With Open MPI, ``--oversubscribe`` (more ranks than cores) and, as root,
``--allow-run-as-root`` are added; MPICH needs neither.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig

__all__ = ["main", "find_mpiexec", "command"]


def find_mpiexec():
    """Path of ``mpiexec``: beside this Python (a venv or the interpreter's scripts folder,
    where pip installs the MPI wheels), else on PATH; None when there is none."""
    names = ("mpiexec", "mpiexec.hydra", "mpirun")
    folders = [os.path.dirname(sys.executable), sysconfig.get_path("scripts")]
    for folder in folders:
        for name in names:
            path = os.path.join(folder or "", name)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


def _flavour(mpiexec):
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    text = out.lower()
    if "open mpi" in text or "openrte" in text or "prte" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text:
        return "mpich"
    return "unknown"


def command(n, script, args, mpiexec=None):
    """The argument list ``main`` runs."""
    mpiexec = mpiexec or find_mpiexec()
    cmd = [mpiexec, "-n", str(n)]
    if _flavour(mpiexec) == "openmpi":
        cmd.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    return cmd + [sys.executable, "-m", "mpi4py", script] + list(args)


def _parser():
    p = argparse.ArgumentParser(
        prog="mxopt launch",
        description="Run a training script on N MPI ranks (a Trainer with kvstore='dist_sync' "
                    "trains data-parallel across them). Needs the dist extra: "
                    "pip install 'mxopt-toolkit[dist]'.")
    p.add_argument("-n", "--np", dest="n", type=int, required=True,
                   help="number of processes (ranks)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds a rank waits in one collective before the job is aborted "
                        "(sets MXOPT_DIST_TIMEOUT; default 600, 0 disables)")
    p.add_argument("--dry-run", action="store_true", help="print the command, run nothing")
    p.add_argument("script", help="the Python script every rank runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        ns = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if ns.n < 1:
        print("mxopt launch: -n must be at least 1", file=sys.stderr)
        return 2
    if not os.path.isfile(ns.script):
        print(f"mxopt launch: no such script: {ns.script}", file=sys.stderr)
        return 2
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        print("mxopt launch: mpi4py is not installed; pip install 'mxopt-toolkit[dist]'",
              file=sys.stderr)
        return 2
    mpiexec = find_mpiexec()
    if mpiexec is None:
        print("mxopt launch: no mpiexec found beside this Python nor on PATH; pip install "
              "'mxopt-toolkit[dist]' (the mpich wheel provides it)", file=sys.stderr)
        return 2
    cmd = command(ns.n, ns.script, ns.args, mpiexec)
    if ns.dry_run:
        print(" ".join(cmd))
        return 0
    env = dict(os.environ)
    if ns.timeout is not None:
        env["MXOPT_DIST_TIMEOUT"] = repr(float(ns.timeout))
    try:
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:  # pragma: no cover - interactive
        return 130
