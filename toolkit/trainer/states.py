"""The Trainer's states file: data, never code. This module writes it (``save``) and is the
import path of its public names; the format is in ``states_format``, the bounded read of the
archive in ``states_read``, the checks of the metadata and ``load`` in ``states_check``.

Writing copies the state under the Trainer's step lock (one consistent step) into a temporary
file beside the target (``_temporary_prefix``), fsyncs it, renames it over the target and
fsyncs the folder. Loading bounds and checks everything before it changes anything.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import stat
import zipfile

import numpy as np

from .states_check import load
from .states_format import (FORMAT, HELD_VERSION, MAX_COUNT, READS, SEAL, VERSION,  # noqa: F401
                            checksum, collect)
from .states_read import Bounds, read_bytes

__all__ = ["save", "load", "read_bytes", "FORMAT", "VERSION", "HELD_VERSION", "READS"]

_TMP_MARK = ".mxopt-tmp-"
#: the longest end of a temporary's name after the mark: ``<pid>-<12 hex digits>``
_TMP_TAIL = 10 + 1 + 12
_CHUNK = 1 << 20

#: the names the tests reach the checksum and the bounds by
_checksum = checksum
_Bounds = Bounds


# ------------------------------------------------------------------------------------------
# saving
# ------------------------------------------------------------------------------------------
def _save_target(path):
    """The file a save writes: ``path`` itself, or the file a symlink ``path`` points to."""
    if isinstance(path, int) or not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"save_states needs a path (str or os.PathLike), got "
                        f"{type(path).__name__} {path!r}")
    path = os.fsdecode(os.fspath(path))
    if path == "":
        raise ValueError("save_states needs a file path, got '' (an empty path); pass e.g. "
                         "'trainer.states'")
    if os.path.islink(path):
        path = os.path.realpath(path)  # follow it: the target is replaced, the link stays
    if os.path.isdir(path):
        raise ValueError(f"save_states path {path!r} is a folder; pass a file path in it")
    return path


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True  # another user's process, or we cannot tell: keep its file
    return True


def _name_max(folder):
    """The longest file name, in bytes, that ``folder``'s file system takes (255 when it does
    not say)."""
    try:
        n = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # pragma: no cover - no pathconf here
        n = -1
    return n if n > 0 else 255


def _temporary_prefix(folder, base):
    """What every temporary file of a save of ``base`` in ``folder`` starts with:
    ``.<base>.mxopt-tmp-``, or, when the temporary's name would be longer than the file system
    takes (NAME_MAX bytes, counted in the file system's encoding),
    ``.<the start of base>~<16 hex digits of base's SHA-256>.mxopt-tmp-`` (still hidden, still
    ours, and still one prefix per path)."""
    room = _name_max(folder) - len(_TMP_MARK) - _TMP_TAIL
    name = "." + base
    if len(os.fsencode(name)) <= room:
        return name + _TMP_MARK
    digest = hashlib.sha256(os.fsencode(base)).hexdigest()[:16]
    start = base[:max(room, 0)]
    while start and len(os.fsencode(f".{start}~{digest}")) > room:
        start = start[:-1]    # whole characters: a multi-byte one is kept whole or dropped
    return f".{start}~{digest}{_TMP_MARK}"


def _remove_stale_temporaries(folder, prefix):
    """Remove the files ``<prefix><pid>-<random>`` (``_temporary_prefix``) whose writer process
    has died (a save killed mid-write leaves one)."""
    pattern = re.compile(re.escape(prefix) + r"([1-9]\d{0,9})-[0-9a-f]+\Z")
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = pattern.match(name)
        if m is None or int(m.group(1)) == os.getpid() or _pid_alive(int(m.group(1))):
            continue
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            pass


def _write_npz(f, payload):
    """The npz archive of ``payload`` (stored members, as ``np.savez`` writes them) into the
    binary file ``f``, with a 64-byte placeholder archive comment."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, a in payload.items():
            with zf.open(name + ".npy", "w", force_zip64=a.nbytes > 2 ** 30) as m:
                np.lib.format.write_array(m, a, allow_pickle=False)
        zf.comment = b"0" * SEAL


def save(trainer, path):
    target = _save_target(path)
    with trainer.step_lock:  # one consistent step: no step runs while the state is copied
        meta, arrs = collect(trainer)
    meta["checksum"] = {"algorithm": "sha256", "value": checksum(arrs, meta)}
    payload = dict(arrs)
    payload["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode("utf-8"), np.uint8)
    folder = os.path.dirname(os.path.abspath(target))
    prefix = _temporary_prefix(folder, os.path.basename(target))
    _remove_stale_temporaries(folder, prefix)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)  # a replaced file keeps its mode
    except FileNotFoundError:
        mode = None  # a new file: 0666 masked by the umask, as open() gives
    tmp = os.path.join(folder, f"{prefix}{os.getpid()}-{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "w+b") as f:
            _write_npz(f, payload)
            size = f.tell()
            f.flush()
            f.seek(0)
            h = hashlib.sha256()
            left = size - SEAL
            while left > 0:
                chunk = f.read(min(_CHUNK, left))
                if not chunk:
                    raise OSError(errno.EIO, f"short read of the temporary file {tmp!r}")
                h.update(chunk)
                left -= len(chunk)
            f.seek(size - SEAL)
            f.write(h.hexdigest().encode("ascii"))
            f.flush()
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)

