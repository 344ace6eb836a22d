"""MPI jobs: ``mxopt launch -n N script.py [args]`` starts N processes of a training script
under MPI, supervises them, and ends the whole job as soon as any rank fails; the same file is
the small runner each rank runs the script through (:func:`run_rank`). ``toolkit.launch`` is its
deprecated alias; ``toolkit.mpi_env`` beside it reads the rank MPI's launcher sets.

It runs ``mpiexec -n N <this python> <this file> script.py [args]``; each rank's runner reports
over a Unix socket how its script ended, and a rank that ends abnormally (or without reporting)
ends the job, since MPICH's ``mpiexec`` alone can wait for ever or exit 0 there
(docs/distributed.md, "What ends a job, and how fast").

This file imports only the standard library and the stdlib-only ``toolkit.mpi_env``: each rank
runs it before anything else, so it imports neither the ``toolkit`` package (Numba) nor mpi4py.
"""
from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time

__all__ = ["main", "find_mpiexec", "command", "run_rank", "report", "SOCKET_ENV",
           "EVERYWHERE_GRACE_S"]

#: environment variable holding the launcher's socket path in every rank
SOCKET_ENV = "MXOPT_LAUNCH_SOCKET"
#: "pid:fd" of the runner's socket, for the ``toolkit.mpi_jobs`` a Trainer imports
_FD_ENV = "MXOPT_LAUNCH_FD"


def _library_module(name):
    """The toolkit's stdlib-only module ``toolkit/<name>.py``, loaded by path: this file, run by
    path on each rank, must not import the ``toolkit`` package (its import compiles Numba
    kernels), and must not import mpi4py (MPI would start before the script runs)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location(f"_mxopt_mpi_jobs_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __package__:   # imported as toolkit.mpi_jobs (the CLI, a Trainer)
    from .mpi_env import rank_from_env
else:             # run by path: the per-rank runner
    rank_from_env = _library_module("mpi_env").rank_from_env
#: seconds the launcher waits for the other ranks after one reports an error every rank raises
EVERYWHERE_GRACE_S = 10.0
#: seconds between a rank's failure and SIGTERM to mpiexec (lets its last output through)
_FLUSH_S = 0.3
#: seconds mpiexec gets to end the ranks after SIGTERM before the launcher kills what is left
_TERM_WAIT_S = 5.0


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
    return cmd + [sys.executable, os.path.abspath(__file__), script] + list(args)


# -------------------------------------------------------------------------------------------
# the rank side
# -------------------------------------------------------------------------------------------
_channel = None


def report(event, **info):
    """Tell the launcher how this rank is ending (``event``: ``"done"``, ``"exception"``,
    ``"exit"`` or ``"abort"``, with JSON-able details); does nothing in a process the launcher
    did not start. The runner reports the script's end itself; a Trainer's watchdog reports the
    collective it gave up on before it aborts."""
    channel = _channel
    if channel is None:
        # the runner runs this file as __main__: a Trainer's ``toolkit.mpi_jobs`` is another copy
        # of the module, which finds the runner's socket through the environment (this process
        # only: a forked child has another pid)
        pid, _, fd = os.environ.get(_FD_ENV, "").partition(":")
        if pid != str(os.getpid()) or not fd.isdigit():
            return
        try:
            channel = socket.socket(fileno=os.dup(int(fd)))
        except OSError:
            return
    try:
        channel.sendall((json.dumps(dict(info, event=event)) + "\n").encode("utf-8"))
    except OSError:
        pass
    finally:
        if channel is not _channel:
            channel.close()   # this duplicate only: the runner's socket stays connected


def _connect():
    global _channel
    path = os.environ.get(SOCKET_ENV)
    if not path:
        return
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
    except OSError as exc:
        sys.stderr.write(f"mxopt launch: rank {rank_from_env()}: cannot reach the launcher at "
                         f"{path} ({exc}); this rank's failures will not end the job at once\n")
        return
    _channel = s
    os.environ[_FD_ENV] = f"{os.getpid()}:{s.fileno()}"
    # a forked child must not keep the launcher's view of this rank alive
    os.register_at_fork(after_in_child=_forget_channel)
    report("hello", rank=rank_from_env(), pid=os.getpid())


def _forget_channel():
    global _channel
    if _channel is not None:
        try:
            _channel.close()
        except OSError:
            pass
    _channel = None


def _mpi_running():
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        return mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized(), mpi
    except Exception:  # noqa: BLE001 - a broken MPI: nothing to abort
        return False, mpi


def run_rank(argv):
    """Run ``argv[0]`` (a script) with arguments ``argv[1:]`` as ``python script.py`` would,
    reporting its end to the launcher; returns the exit status."""
    import runpy
    import traceback
    if not argv:
        sys.stderr.write("usage: python mpi_jobs.py script.py [args]\n")
        return 2
    _connect()
    script = argv[0]
    sys.argv[:] = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or code == 0:
            report("done")
            raise
        report("exit", code=code if isinstance(code, int) else 1,
               text=None if isinstance(code, int) else str(code))
        running, mpi = _mpi_running()
        if running:   # as python -m mpi4py: the others may wait in a collective
            if not isinstance(code, int):
                sys.stderr.write(f"{code}\n")
            sys.stderr.flush()
            sys.stdout.flush()
            mpi.COMM_WORLD.Abort(code if isinstance(code, int) and 0 < code < 256 else 1)
        raise
    except BaseException as exc:  # noqa: BLE001 - reported, printed, then the job ends
        everywhere = bool(getattr(exc, "raised_on_every_rank", False))
        report("exception", type=type(exc).__name__, everywhere=everywhere)
        try:
            sys.excepthook(type(exc), exc, exc.__traceback__)
        except Exception:  # noqa: BLE001
            traceback.print_exception(type(exc), exc, exc.__traceback__)
        running, mpi = _mpi_running()
        if running and not everywhere:
            sys.stderr.flush()
            sys.stdout.flush()
            mpi.COMM_WORLD.Abort(1)
        return 1
    report("done")
    return 0


# -------------------------------------------------------------------------------------------
# the launcher side
# -------------------------------------------------------------------------------------------
class _Rank:
    def __init__(self):
        self.rank = None
        self.pid = None
        self.buf = b""
        self.end = None        # the reported end (a dict), or "closed" (died without one)


def _describe_end(r):
    end = r.end
    who = f"rank {r.rank}" if r.rank is not None else "a rank"
    if end == "closed":
        return (f"{who} ended without finishing its script (os._exit, a signal, MPI_Abort or a "
                "crash; its output above may say why)")
    kind = end.get("event")
    if kind == "exception":
        return f"{who} stopped on an uncaught {end.get('type')} (its traceback is above)"
    if kind == "exit":
        return f"{who} exited with status {end.get('code')}" + \
            (f" ({end['text']})" if end.get("text") else "")
    if kind == "abort":
        return f"{who} aborted: {end.get('reason', '')}"
    return f"{who} ended ({kind})"


def _early_note(ranks, failure):
    """Ranks that finished their script while the failing one still ran: a rank that leaves
    early (``sys.exit(0)`` mid-training) leaves the others waiting in a collective."""
    early = sorted(r.rank for r in ranks if r is not failure and r.rank is not None
                   and isinstance(r.end, dict) and r.end.get("event") == "done")
    if not early:
        return ""
    who = ", ".join(map(str, early))
    return (f" (rank{'s' if len(early) > 1 else ''} {who} had already finished its script "
            "while the others were still running: a rank that leaves early, for example by "
            "sys.exit(0) mid-training, leaves the others waiting)")


def _failed(end):
    return end == "closed" or end.get("event") != "done"


def _status_of(end):
    if isinstance(end, dict) and end.get("event") == "exit":
        code = end.get("code")
        if isinstance(code, int) and 0 < code < 256:
            return code
    return 1


def _supervise(cmd, env, n):
    """Run ``cmd`` (mpiexec), watching the ranks through a Unix socket; returns the status."""
    base = None   # a socket's path has ~100 bytes at most: a long TMPDIR falls back to /tmp
    if len(tempfile.gettempdir()) > 60 and os.path.isdir("/tmp"):
        base = "/tmp"
    folder = tempfile.mkdtemp(prefix="mxopt-launch-", dir=base)
    path = os.path.join(folder, "ranks.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(path)
    except OSError as exc:   # e.g. a TMPDIR too long for a socket's path
        server.close()
        shutil.rmtree(folder, ignore_errors=True)
        sys.stderr.write(f"mxopt launch: cannot listen on {path} ({exc}); running the ranks "
                         "unwatched (a rank failing before MPI starts may leave the others "
                         "waiting until their watchdog ends them); set TMPDIR to a short path\n")
        return subprocess.call(cmd, env=env)
    server.listen(max(n, 16))
    server.setblocking(False)
    env = dict(env, **{SOCKET_ENV: path})
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ, None)
    ranks = []
    failure = None            # the first rank that did not end normally
    stop_at = None            # when to end the job
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)

    def fail(r):
        nonlocal failure, stop_at
        if failure is None and _failed(r.end):
            failure = r
            everywhere = isinstance(r.end, dict) and r.end.get("everywhere")
            stop_at = time.monotonic() + (EVERYWHERE_GRACE_S if everywhere else _FLUSH_S)

    def read(key):
        r = key.data
        try:
            chunk = key.fileobj.recv(65536)
        except OSError:
            chunk = b""
        if chunk:
            r.buf += chunk
            while b"\n" in r.buf:
                line, r.buf = r.buf.split(b"\n", 1)
                try:
                    msg = json.loads(line.decode("utf-8"))
                except ValueError:
                    continue
                if msg.get("event") == "hello":
                    r.rank, r.pid = msg.get("rank"), msg.get("pid")
                elif r.end is None:
                    r.end = msg     # the first word on how the rank ends is the one kept
                    fail(r)
            return
        sel.unregister(key.fileobj)
        key.fileobj.close()
        if r.end is None:
            r.end = "closed"
            fail(r)

    def pump(timeout):
        for key, _ in sel.select(timeout):
            if key.data is None:
                try:
                    conn, _ = server.accept()
                except OSError:
                    continue
                r = _Rank()
                ranks.append(r)
                sel.register(conn, selectors.EVENT_READ, r)
            else:
                read(key)

    terminated = False

    def on_term(signum, frame):
        raise _Stopped(signum)

    try:
        previous = {sig: signal.signal(sig, on_term) for sig in (signal.SIGTERM, signal.SIGHUP)}
    except ValueError:  # pragma: no cover - not the main thread: no handlers
        previous = {}
    try:
        while proc.poll() is None:
            pump(0.1)
            if stop_at is not None and not terminated and time.monotonic() >= stop_at:
                sys.stderr.write(f"mxopt launch: {_describe_end(failure)}"
                         f"{_early_note(ranks, failure)}; ending the job\n")
                sys.stderr.flush()
                terminated = True
                _terminate(proc, ranks)
        # what the ranks said just before mpiexec returned
        deadline = time.monotonic() + 1.0
        while len(sel.get_map()) > 1 and time.monotonic() < deadline:
            pump(0.05)
    except KeyboardInterrupt:  # pragma: no cover - interactive
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(_TERM_WAIT_S)
        except subprocess.TimeoutExpired:
            _terminate(proc, ranks)
        return 130
    except _Stopped as stop:   # the launcher was told to stop: so is the job
        _terminate(proc, ranks)
        return 128 + stop.signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for key in list(sel.get_map().values()):
            key.fileobj.close()
        sel.close()
        shutil.rmtree(folder, ignore_errors=True)
    rc = proc.returncode
    if failure is not None:
        if not terminated:
            sys.stderr.write(f"mxopt launch: {_describe_end(failure)}"
                         f"{_early_note(ranks, failure)}; ending the job\n")
        return _status_of(failure.end)
    if rc != 0:
        return rc if 0 < rc < 256 else 1
    missing = n - sum(1 for r in ranks if r.end is not None and not _failed(r.end))
    if missing:
        sys.stderr.write(f"mxopt launch: mpiexec exited 0 but {missing} of {n} rank(s) did not "
                         "report finishing their script; treating the job as failed\n")
        return 1
    return 0


class _Stopped(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _terminate(proc, ranks):
    """SIGTERM to mpiexec (it ends every rank); after a while SIGKILL to whatever is left."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(_TERM_WAIT_S)
    except subprocess.TimeoutExpired:
        for pid in [r.pid for r in ranks if isinstance(r.pid, int)] + [proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        proc.wait()
    except OSError:  # pragma: no cover - already gone
        pass


def _parser():
    p = argparse.ArgumentParser(
        prog="mxopt launch",
        description="Run a training script on N MPI ranks (a Trainer with kvstore='dist_sync' "
                    "trains data-parallel across them); the job ends, non-zero, as soon as any "
                    "rank fails. Needs the dist extra: pip install 'mxopt-toolkit[dist]'.")
    p.add_argument("-n", "--np", dest="n", type=int, required=True,
                   help="number of processes (ranks); required, no default")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds a rank waits in one collective before the job is aborted "
                        "(sets MXOPT_DIST_TIMEOUT; default 600, 0 disables)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the command, run nothing (default: run it)")
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
    if ns.timeout is not None and not (ns.timeout >= 0 and ns.timeout != float("inf")):
        print(f"mxopt launch: --timeout must be a finite number >= 0, got {ns.timeout!r}",
              file=sys.stderr)
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
    return _supervise(cmd, env, ns.n)


if __name__ == "__main__":   # a rank: python mpi_jobs.py script.py [args]
    sys.exit(run_rank(sys.argv[1:]))
