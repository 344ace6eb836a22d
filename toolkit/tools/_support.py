"""Shared by ``regress`` and ``accuracy``: the optimizer x convention x backend x dtype matrix,
the CUDA availability rule for reports, provenance, and rich progress bars (optional).

Private: the public entry points are ``toolkit.tools.regress`` and ``toolkit.tools.accuracy``.
"""
from __future__ import annotations

import contextlib
import datetime
import importlib.metadata
import os
import platform
import subprocess
import sys

#: the dtypes of the matrix: float16 with a float32 master copy (multi_precision), float16
#: without one (float32 arithmetic rounded to float16 on store), float32, float64
DTYPES = ("float32", "float64", "float16-mp", "float16")
#: the kernel backends of the matrix (the reference backend is the float64 oracle itself)
KERNEL_BACKENDS = ("cpu", "cuda")
DISTRIBUTION = "mxopt-toolkit"  # pyproject.toml's [project] name


class UsageError(ValueError):
    """A bad request (unknown optimizer, backend not available, ...): exit code 2."""


def storage_dtype(dtype: str):
    """The numpy dtype of the weight for a matrix dtype name."""
    import numpy as np
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return np.dtype(np.float16) if dtype.startswith("float16") else np.dtype(dtype)


def optimizer_conventions() -> dict:
    """``{registry name: conventions}`` of the optimizers with an oracle (their spec names a
    reference module: ``specs(oracle=True)``), sorted by name; the conventions are the spec's
    (``Spec.conventions``: Nadam's kernels implement "mxnet" and "pytorch"). Read live: an optimizer
    registered later (a plug-in) is in it."""
    from ..optimizers.registry import specs
    return {name: tuple(spec.conventions) for name, spec in specs(oracle=True).items()}


def select_optimizers(names) -> list:
    """Validate ``names`` (None: all) against the known optimizers; returns a list of names."""
    known = optimizer_conventions()
    if names is None:
        return list(known)
    if isinstance(names, str):
        names = [names]
    out = []
    for n in names:
        key = str(n).lower()
        if key not in known:
            from ..optimizers.registry import specs
            what = (f"optimizer {n!r} has no oracle (its spec names no reference module: "
                    "nothing to compare it with)" if key in specs() else
                    f"unknown optimizer {n!r}")
            raise UsageError(f"{what}; known: {', '.join(sorted(known))}")
        if key not in out:
            out.append(key)
    return out


def split_names(values):
    """``["adam,sgd", "nag"]`` -> ``["adam", "sgd", "nag"]`` (argparse lists, comma-separated
    or repeated); None stays None."""
    if values is None:
        return None
    out = []
    for v in values:
        out.extend(x.strip() for x in str(v).split(",") if x.strip())
    return out


def cuda_status():
    """``(ok, kind, reason)``: kind is ``"gpu"``, ``"simulator"`` or None.

    The simulator runs the kernels in Python (no FMA contraction, no float16 hardware): its
    numbers are not a GPU's, so reports use it only when it is asked for explicitly.
    """
    from ..backends import cuda_available
    ok, why = cuda_available()
    if not ok:
        return False, None, why
    sim = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
    return True, ("simulator" if sim else "gpu"), why


def choose_backends(requested, *, allowed=KERNEL_BACKENDS):
    """``(backends, skipped)``: the backends to run and ``{backend: reason}`` for those left out.

    ``requested`` None: "cpu", plus "cuda" on a real GPU (the simulator is used only when
    "cuda" is asked for explicitly). An explicitly requested "cuda" that cannot run raises
    :class:`UsageError`.
    """
    if requested is None:
        ok, kind, why = cuda_status()
        if ok and kind == "gpu":
            return ["cpu", "cuda"], {}
        return ["cpu"], {"cuda": why if not ok else
                         f"{why}: the simulator is used only when asked for (--backend cuda)"}
    out = []
    for b in requested:
        if b not in allowed:
            raise UsageError(f"unknown backend {b!r}; expected one of {', '.join(allowed)}")
        if b == "cuda":
            ok, _, why = cuda_status()
            if not ok:
                raise UsageError(f"the cuda backend was asked for but cannot run here: {why}")
        if b not in out:
            out.append(b)
    return out, {}


def select_dtypes(dtypes):
    if dtypes is None:
        return list(DTYPES)
    out = []
    for d in dtypes:
        if d not in DTYPES:
            raise UsageError(f"unknown dtype {d!r}; expected one of {', '.join(DTYPES)}")
        if d not in out:
            out.append(d)
    return out


def to_device(a):
    from numba import cuda
    return cuda.to_device(a)


# --- provenance -------------------------------------------------------------------------------
def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def toolkit_version():
    """The installed distribution's version (pyproject.toml's ``mxopt-toolkit``), else the
    package's ``__version__``, else None."""
    v = _version(DISTRIBUTION)
    if v is None:
        v = getattr(sys.modules.get(__package__), "__version__", None)
    return v


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def _git_commit():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(root, ".git")):
        return None
    try:
        out = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("+modified" if dirty.stdout.strip() else "")


def provenance(command=None, *, cuda=True) -> dict:
    """Where and with what a file or report was made."""
    import numba
    import numpy as np
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command if command is not None else " ".join(
            [os.path.basename(sys.argv[0]) or "python"] + sys.argv[1:]),
        "toolkit": toolkit_version(),
        "git": _git_commit(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "llvmlite": _version("llvmlite"),
        "numba_cuda": _version("numba-cuda"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
    }
    if cuda:
        ok, kind, why = cuda_status()
        dev = None
        if ok and kind == "gpu":
            try:
                from numba import cuda as nc
                d = nc.get_current_device()
                name = d.name.decode() if isinstance(d.name, bytes) else str(d.name)
                dev = {"name": name, "compute_capability": list(d.compute_capability)}
            except Exception:  # pragma: no cover - a driver that lists no device
                dev = None
        info["cuda"] = {"kind": kind, "device": dev, "reason": why}
    return info


# --- rich (optional) --------------------------------------------------------------------------
def have_rich() -> bool:
    import importlib.util
    return importlib.util.find_spec("rich") is not None


class _NoProgress:
    def update(self, description=None, advance=1):
        pass


class _RichProgress:
    def __init__(self, progress, task):
        self._p, self._t = progress, task

    def update(self, description=None, advance=1):
        self._p.update(self._t, advance=advance,
                       **({"description": description} if description else {}))


@contextlib.contextmanager
def progress_bar(enabled, total, description):
    """A rich progress bar on stderr (``bar.update(description, advance)``); nothing when
    disabled or when rich is not installed."""
    if not enabled or not have_rich():
        yield _NoProgress()
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)
    with Progress(TextColumn("{task.description:<36}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as p:
        yield _RichProgress(p, p.add_task(description, total=total))
