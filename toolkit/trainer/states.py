"""The Trainer's states file: data, never code.

(One module of about 810 lines: the writer and the reader, with every check of a damaged,
foreign or mismatched file, are one contract kept side by side, so that each check reads
against what is written.)

Format (version 2, ``docs/trainer.md``): a NumPy ``.npz`` archive (a zip of stored, uncompressed
``.npy`` files) holding

* ``meta``: UTF-8 JSON as a uint8 array: the format name and version, the optimizer's registry
  name, convention and hyperparameters, the learning rate, ``num_update`` and the per-index counts,
  the scheduler's configuration and state, the optimizer's own host-side state (Nadam's momentum
  schedule, LBSGD's call counts), the parameters (index, name, shape, dtype) with the shapes and
  dtypes of their state arrays, and a SHA-256 checksum of every array and of the rest of the
  metadata;
* ``state/<index>/<k>``: the k-th state array of parameter ``index`` (the leaves of what
  ``create_state_multi_precision`` returns, in order, so the float32 master copy of a
  multi-precision parameter is one of them);
* ``host/<name>``: arrays of the optimizer's host-side state (LBSGD's gradient accumulators);
* the zip archive comment (the file's last 64 bytes): the SHA-256, in hex, of every byte before
  it, so a flipped bit anywhere in the file is caught before the zip is even parsed.

Version 1 (no scheduler configuration) is still read.

Writing: the state is copied under the Trainer's step lock (one consistent step), written to a
temporary file ``.<name>.mxopt-tmp-<pid>-<random>`` beside the target (a symlink's target; a
name too long for that is cut and given a hash: ``_temporary_prefix``), flushed and fsynced,
renamed over the target, and the folder fsynced. Loading bounds the file, its zip directory and
every member by what this trainer expects before reading them, then reads and checks everything
(zip structure, format, checksum, every metadata field's type and domain, optimizer,
hyperparameters, parameters, scheduler configuration and state) before it changes anything; any
malformed or mismatched file raises ``ValueError`` and leaves the Trainer exactly as it was.
"""
from __future__ import annotations

import collections
import copy
import errno
import hashlib
import io
import json
import math
import os
import re
import secrets
import stat
import struct
import zipfile

import numpy as np

from ..backends import arrays
from ..optimizers.base import check_nonneg
from .buffers import state_leaves

__all__ = ["save", "load", "read_bytes", "FORMAT", "VERSION", "READS"]

FORMAT = "mxopt-toolkit trainer states"
#: the version this toolkit writes
VERSION = 2
#: the versions it reads (1: no scheduler configuration)
READS = (1, 2)
#: the zip archive comment, the file's last bytes: the SHA-256 (hex) of every byte before it
_SEAL = 64
#: counts above this are refused (they are exact integers in float64, and fit every kernel's t)
MAX_COUNT = 2 ** 53
#: room per zip member beside its data: zip local and central headers, the npy header
_MEMBER_OVERHEAD = 4096
#: the largest npy header read (numpy writes 128 bytes for these arrays)
_NPY_HEADER_MAX = 2048
#: the zip end records and the comment
_ARCHIVE_OVERHEAD = 1024
#: the most bytes one member's zip central directory entry takes: the fixed header (46), the
#: name (at most 73: ``host/`` + 64 + ``.npy``) and a zip64 extra field (at most 28), rounded up
_CENTRAL_ENTRY_MAX = 160
#: zip directory entries parsed beyond the members a trainer expects (see ``_Bounds.entries``)
_NAMED_EXTRA = 16
_TMP_MARK = ".mxopt-tmp-"
#: the longest end of a temporary's name after the mark: ``<pid>-<12 hex digits>``
_TMP_TAIL = 10 + 1 + 12
_CHUNK = 1 << 20


# ------------------------------------------------------------------------------------------
# what a file holds
# ------------------------------------------------------------------------------------------
def _checksum(arrs: dict, meta: dict) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(meta, sort_keys=True).encode())
    for name in sorted(arrs):
        a = arrs[name]
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8))  # no copy when contiguous
    return h.hexdigest()


def _scheduler_config(s):
    config = getattr(s, "config", None)
    return json.loads(json.dumps(config())) if callable(config) else None


def _scheduler_meta(opt):
    s = opt.lr_scheduler
    if s is None:
        return None
    if not hasattr(s, "state_dict"):
        raise TypeError(f"the lr_scheduler {type(s).__name__} has no state_dict(); it cannot be "
                        "saved")
    return {"type": type(s).__name__, "config": _scheduler_config(s), "state": s.state_dict()}


def _hyper(opt):
    h = {k: v for k, v in opt.reference_hyper().items()}
    h.update(wd=opt.wd, clip_gradient=opt.clip_gradient, multi_precision=opt.multi_precision,
             begin_num_update=opt.begin_num_update)
    return json.loads(json.dumps(h))  # as JSON will give it back


def _members(trainer):
    """``[(index, parameter, [state leaf, ...])]`` of the trainer's stepped parameters."""
    out = []
    for g in trainer.groups:
        for k, (i, p) in enumerate(g.members):
            out.append((i, p, state_leaves(g.views[k])))
    out.sort(key=lambda e: e[0])
    return out


def _collect(trainer, copies=True):
    """``(meta, arrays)`` of the trainer's current state. With ``copies`` the arrays are host
    copies that no later step changes; without, ``arrays`` maps each name to the live array."""
    opt = trainer.optimizer
    arrs = {}
    params = []
    members = _members(trainer)
    if copies and any(arrays.describe(leaf).kind != arrays.HOST for _, _, leaves in members
                      for leaf in leaves):
        from numba import cuda  # a step's kernels may run on another thread's stream: wait
        cuda.synchronize()
    for i, p, leaves in members:
        entry = {"index": i, "name": p.name, "shape": list(p.shape), "dtype": p.dtype.name,
                 "state": []}
        for j, leaf in enumerate(leaves):
            d = arrays.describe(leaf)
            # np.array, not np.ascontiguousarray: that one makes a 0-d array 1-d (issue 19.4)
            arrs[f"state/{i}/{j}"] = (np.array(arrays.to_host(leaf), order="C", copy=True)
                                      if copies else leaf)
            entry["state"].append({"shape": list(d.shape), "dtype": np.dtype(d.dtype).name})
        params.append(entry)
    extra, extra_arrays = opt.host_state()
    extra = json.loads(json.dumps(extra))  # a copy, as JSON will give it back
    for name, a in extra_arrays.items():
        arrs[f"host/{name}"] = (np.array(arrays.to_host(a), order="C", copy=True)
                                if copies else a)
    meta = {
        "format": FORMAT, "version": VERSION,
        "optimizer": type(opt).__name__.lower(), "convention": opt.convention,
        "hyperparameters": _hyper(opt), "learning_rate": opt.lr,
        "num_update": opt.num_update,
        "index_update_count": [[k, v] for k, v in sorted(opt.update_counts.items(),
                                                         key=lambda kv: str(kv[0]))],
        "scheduler": json.loads(json.dumps(_scheduler_meta(opt))), "host_state": extra,
        "params": params,
    }
    return meta, arrs


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
        zf.comment = b"0" * _SEAL


def save(trainer, path):
    target = _save_target(path)
    with trainer.step_lock:  # one consistent step: no step runs while the state is copied
        meta, arrs = _collect(trainer)
    meta["checksum"] = {"algorithm": "sha256", "value": _checksum(arrs, meta)}
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
            left = size - _SEAL
            while left > 0:
                chunk = f.read(min(_CHUNK, left))
                if not chunk:
                    raise OSError(errno.EIO, f"short read of the temporary file {tmp!r}")
                h.update(chunk)
                left -= len(chunk)
            f.seek(size - _SEAL)
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


# ------------------------------------------------------------------------------------------
# loading: bounds
# ------------------------------------------------------------------------------------------
def _refuse(path, why):
    raise ValueError(f"cannot load trainer states from {_label(path)}: {why}; the trainer is "
                   "unchanged")


def _label(path):
    if isinstance(path, (str, bytes, os.PathLike)):
        return repr(os.fsdecode(os.fspath(path)))
    name = getattr(path, "name", None)
    return repr(name) if isinstance(name, str) else f"a {type(path).__name__}"


class _Bounds:
    """What this trainer expects of a states file, from its own arrays: each state member's
    exact size, the largest host-side array and metadata; the whole file's size."""

    def __init__(self, trainer):
        meta, live = _collect(trainer, copies=False)
        members = _members(trainer)
        self.state = {}  # member name -> (shape, dtype)
        sizes = []
        for i, p, leaves in members:
            sizes.append(int(np.prod(p.shape, dtype=np.int64)))
            for j, leaf in enumerate(leaves):
                d = arrays.describe(leaf)
                self.state[f"state/{i}/{j}"] = (tuple(d.shape), np.dtype(d.dtype))
        # host-side arrays: the optimizer's ``host_buffers()`` (LBSGD's accumulators), one per
        # name and parameter, each shaped like its parameter (at most 8-byte elements), and
        # whatever it holds now; none for an optimizer that keeps none
        per = len(trainer.optimizer.host_buffers())
        held = [a for n, a in live.items() if n.startswith("host/")]
        held_bytes = [int(np.prod(d.shape, dtype=np.int64)) * np.dtype(d.dtype).itemsize
                      for d in map(arrays.describe, held)]
        self.host_count = max(per * len(members), len(held))
        self.host_each = max([8 * max(sizes + [0])] * bool(per) + held_bytes + [0]) \
            + _MEMBER_OVERHEAD
        host_total = max(per * 8 * sum(sizes), sum(held_bytes)) \
            + self.host_count * _MEMBER_OVERHEAD
        own = len(json.dumps(meta, sort_keys=True).encode("utf-8")) + 200  # + the checksum
        self.meta = 2 * own + 65536 + 256 * len(members)
        state_bytes = sum(int(np.prod(s, dtype=np.int64)) * d.itemsize
                          for s, d in self.state.values())
        self.file = (state_bytes + len(self.state) * _MEMBER_OVERHEAD
                     + host_total + self.meta + _MEMBER_OVERHEAD
                     + _ARCHIVE_OVERHEAD)
        #: the most members a file may hold (state arrays, host arrays, the metadata)
        self.members = len(self.state) + self.host_count + 1
        #: the most entries (and bytes) of a zip central directory that zipfile is let parse:
        #: the members, and a few more, so that a member this trainer has no use for is named
        #: (``_NAMED_EXTRA``) before the member count is refused
        self.entries = self.members + _NAMED_EXTRA
        self.directory = self.entries * _CENTRAL_ENTRY_MAX

    def member(self, name):
        """The largest stored size (npy header included) of member ``name``, or None if this
        trainer expects no such member."""
        if name == "meta":
            return self.meta + _NPY_HEADER_MAX
        if name in self.state:
            shape, dtype = self.state[name]
            return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize + _NPY_HEADER_MAX
        if name.startswith("host/") and len(name) > 5 and self.host_count:
            return self.host_each
        return None


def read_bytes(trainer, source):
    """The bytes of the states file ``source`` (a path, or a binary file object open for
    reading), refused with ``ValueError`` when larger than this trainer's states file can be,
    before it is read. A distributed Trainer's rank 0 reads the file with it."""
    return _read_bounded(source, _Bounds(trainer).file)


def _read_bounded(source, limit):
    if isinstance(source, (bool, int)):
        raise TypeError(f"load_states needs a path (str or os.PathLike) or a binary file object, "
                        f"got the int {source!r} (file descriptors are not accepted: open it "
                        "with open(fd, 'rb', closefd=False))")
    if isinstance(source, (str, bytes, os.PathLike)):
        path = os.fspath(source)
        if path in ("", b""):
            raise ValueError("load_states needs a file path, got '' (an empty path)")
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if stat.S_ISREG(os.fstat(f.fileno()).st_mode) and size > limit:
                _refuse(source, f"it is {size} bytes, more than this trainer's states file can "
                                f"be ({limit} bytes at most)")
            raw = f.read(limit + 1)
    elif callable(getattr(source, "read", None)):
        raw = source.read(limit + 1)
        if isinstance(raw, str):
            raise TypeError("load_states needs a binary file object (open the file with 'rb'), "
                            "got a text one")
        if not isinstance(raw, (bytes, bytearray, memoryview)):
            raise TypeError(f"load_states: the file object's read() returned "
                            f"{type(raw).__name__}, not bytes")
        raw = bytes(raw)
    else:
        raise TypeError(f"load_states needs a path (str or os.PathLike) or a binary file object, "
                        f"got {type(source).__name__}")
    if len(raw) > limit:
        _refuse(source, f"it is more than {limit} bytes, more than this trainer's states file "
                        "can be")
    return raw


# ------------------------------------------------------------------------------------------
# loading: the archive
# ------------------------------------------------------------------------------------------
_LOCAL = struct.Struct("<4s5H3L2H")  # a zip local file header (30 bytes)
# the end records (PKWARE's APPNOTE.TXT, 4.3.14 to 4.3.16): the end of central directory record
# (signature, this disk, the directory's disk, entries on this disk, entries, directory size,
# directory offset, comment length), the zip64 end of central directory locator (signature, the
# zip64 record's disk, its offset, disks) and the zip64 end of central directory record
# (signature, size of the rest, version made by, version needed, this disk, the directory's
# disk, entries on this disk, entries, directory size, directory offset)
_END = struct.Struct("<4s4H2LH")            # 22 bytes, then the comment
_END64_LOCATOR = struct.Struct("<4sLQL")     # 20 bytes, right before the end record
_END64 = struct.Struct("<4sQ2H2L4Q")         # 56 bytes, right before the locator


def _check_directory(path, raw, bounds):
    """The number of members the zip's end records declare, after checking those records and
    that the central directory they describe is no larger than this trainer's states can need.
    Read here, before ``zipfile`` parses the directory (it makes one object per entry for
    every entry the declared directory size holds), so a file with a huge directory of tiny
    entries is refused without allocating them."""
    end = len(raw) - _SEAL - _END.size
    # zipfile takes the last end-record signature within the file's last 64 KiB + 22 bytes; in
    # a states file it is the record right before the 64-byte comment (the comment is hex)
    if end < 0 or raw.rfind(b"PK\x05\x06", max(0, end - (1 << 16))) != end:
        _refuse(path, "its zip end record is not right before its 64-byte comment, where "
                      "save_states writes it")
    _, disk, cd_disk, here, entries, size, offset, comment = _END.unpack_from(raw, end)
    if comment != _SEAL:
        _refuse(path, f"its zip end record declares a {comment}-byte comment, not {_SEAL}")
    records = end                   # where the end records start (the directory ends there)
    locator = end - _END64_LOCATOR.size
    if locator >= 0 and raw[locator:locator + 4] == b"PK\x06\x07":
        # zip64 (save_states writes it for a directory beyond 4 GiB or 65535 entries): zipfile
        # then takes every count, size and offset from the zip64 record
        _, record_disk, record, disks = _END64_LOCATOR.unpack_from(raw, locator)
        if record_disk != 0 or disks != 1 or record != locator - _END64.size or record < 0 or \
                raw[record:record + 4] != b"PK\x06\x06" or \
                _END64.unpack_from(raw, record)[1] != _END64.size - 12:
            _refuse(path, "its zip64 end records are damaged (the zip64 record is not right "
                          "before its locator, or is not one)")
        _, _, _, _, disk, cd_disk, here, entries, size, offset = _END64.unpack_from(raw, record)
        records = record
    if disk != 0 or cd_disk != 0 or here != entries:
        _refuse(path, f"its zip end record describes a multi-disk archive (disk {disk}, "
                      f"directory on disk {cd_disk}, {here} of {entries} entries on this disk)")
    if entries > bounds.entries:
        _refuse(path, f"its zip directory declares {entries} members, more than this trainer's "
                      f"{bounds.members} at most")
    if size > bounds.directory:
        _refuse(path, f"its zip directory takes {size} bytes, more than the {bounds.directory} "
                      f"that this trainer's {bounds.members} members can need")
    if offset + size != records:
        _refuse(path, f"its zip directory ({size} bytes from offset {offset}) does not end "
                      f"where its end records start (offset {records})")
    return entries


_MEMBER_NAME = re.compile(r"(meta|state/(0|[1-9]\d{0,8})/(0|[1-9]\d{0,3})|host/[A-Za-z0-9_]{1,64})"
                          r"\.npy\Z")


def _array(path, raw, info, limit):
    """The array of the stored member ``info``: a read-only view of ``raw`` (nothing is
    copied), after checking its local header and npy header against ``limit`` bytes."""
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
        _refuse(path, f"member {info.filename!r} is compressed or encrypted (save_states stores "
                      "members uncompressed)")
    if info.file_size != info.compress_size or info.file_size > limit:
        _refuse(path, f"member {info.filename!r} declares {info.file_size} bytes (stored "
                      f"{info.compress_size}); this trainer expects at most {limit}")
    start = info.header_offset
    if start < 0 or start + _LOCAL.size > len(raw):
        _refuse(path, f"member {info.filename!r} lies outside the file")
    sig, _, _, _, _, _, _, _, _, nlen, xlen = _LOCAL.unpack_from(raw, start)
    if sig != b"PK\x03\x04" or raw[start + 30:start + 30 + nlen] != \
            info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437"):
        _refuse(path, f"member {info.filename!r} has a damaged local header")
    data = start + _LOCAL.size + nlen + xlen
    end = data + info.file_size
    if end > len(raw) - _SEAL:
        _refuse(path, f"member {info.filename!r} lies outside the file")
    f = io.BytesIO(raw[data:min(end, data + _NPY_HEADER_MAX)])
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(
                f, max_header_size=_NPY_HEADER_MAX)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(
                f, max_header_size=_NPY_HEADER_MAX)
        else:
            raise ValueError(f"npy format version {version} is not read")
    except Exception as exc:  # noqa: BLE001 - numpy's parser of untrusted bytes: any failure
        _refuse(path, f"member {info.filename!r} has a damaged npy header "
                      f"({type(exc).__name__}: {exc})")
    if dtype.hasobject or dtype.kind not in "biufc" or dtype.fields is not None or \
            dtype.subdtype is not None:
        _refuse(path, f"member {info.filename!r} holds {dtype} (states files hold plain numeric "
                      "arrays only)")
    if any(n < 0 for n in shape):
        _refuse(path, f"member {info.filename!r} declares the shape {shape}")
    count = 1
    for n in shape:
        count *= n
    header = f.tell()
    if count * dtype.itemsize != info.file_size - header:
        _refuse(path, f"member {info.filename!r} declares shape {shape} of {dtype} "
                      f"({count * dtype.itemsize} bytes) but holds {info.file_size - header}")
    try:
        a = np.frombuffer(raw, dtype=dtype, count=count, offset=data + header)
    except ValueError as exc:  # pragma: no cover - the bounds above leave nothing to refuse
        _refuse(path, f"member {info.filename!r} cannot be read ({exc})")
    return a.reshape(shape[::-1]).T if fortran else a.reshape(shape)


def _read(path, raw=None, bounds=None, identify=None):
    """``(meta, arrays)`` of a states file (or of its bytes ``raw``, read elsewhere: a
    distributed Trainer's rank 0 sends them), checked for size (against ``bounds``, what a
    trainer expects), integrity and format; the arrays are read-only views of the bytes.
    ``identify(meta)``, called once the metadata is read and before any other member is, may
    refuse a file meant for another optimizer or model with a clearer message."""
    if raw is None:
        raw = _read_bounded(path, bounds.file)
    elif len(raw) > bounds.file:
        _refuse(path, f"it is {len(raw)} bytes, more than this trainer's states file can be "
                      f"({bounds.file} bytes at most)")
    raw = bytes(raw)
    if raw[:1] == b"\x80" or raw[:2] in (b"(l", b"(d", b"}q", b"]q"):
        _refuse(path, "it is a Python pickle (MXNet's save_states writes those); pickles can run "
                      "code and are never loaded")
    if raw[:4] != b"PK\x03\x04":
        _refuse(path, f"it is not a {FORMAT} file (no zip/npz header)")
    if len(raw) <= _SEAL or \
            hashlib.sha256(memoryview(raw)[:-_SEAL]).hexdigest().encode("ascii") != raw[-_SEAL:]:
        _refuse(path, "its whole-file checksum does not match (the file is truncated or "
                      "corrupted, or was not written by save_states)")
    declared = _check_directory(path, raw, bounds)  # bounded before zipfile parses it
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            infos = zf.infolist()
    except Exception as exc:  # noqa: BLE001 - zipfile's parser of untrusted bytes: any failure
        _refuse(path, f"it is damaged or not a {FORMAT} file ({type(exc).__name__}: {exc})")
    if len(infos) != declared:
        _refuse(path, f"its zip directory holds {len(infos)} entries, its end record declares "
                      f"{declared}")
    names = [i.filename for i in infos]
    if len(set(names)) != len(names):
        seen = collections.Counter(names)
        _refuse(path, f"it holds members more than once: "
                      f"{sorted(n for n, k in seen.items() if k > 1)[:20]}")
    for name in names:
        if _MEMBER_NAME.match(name) is None:
            _refuse(path, f"it holds a member {name[:100]!r} that is not part of a {FORMAT} "
                          "file")
    if "meta.npy" not in names:
        _refuse(path, f"it is not a {FORMAT} file (no metadata)")
    m = _array(path, raw, infos[names.index("meta.npy")], bounds.member("meta"))
    if m.dtype != np.uint8 or m.ndim != 1:
        _refuse(path, f"its metadata is {m.dtype}{m.shape}, not UTF-8 bytes")
    try:
        meta = json.loads(m.tobytes().decode("utf-8"))  # NaN, Infinity: refused field by field
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError too
        _refuse(path, f"its metadata is damaged ({type(exc).__name__}: {exc})")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        _refuse(path, f"it is not a {FORMAT} file")
    version = meta.get("version")
    if type(version) is not int or version not in READS:
        _refuse(path, f"it has format version {version!r}; this toolkit reads versions "
                      f"{list(READS)}")
    check = meta.pop("checksum", None)
    if not isinstance(check, dict) or set(check) != {"algorithm", "value"} or \
            check["algorithm"] != "sha256" or not isinstance(check["value"], str):
        _refuse(path, "it has no valid checksum")
    if identify is not None:  # a file for another optimizer or model: say so first
        identify(meta)
    for info in infos:   # a member this trainer has no use for is named before any is read
        name = info.filename[:-4]
        if name != "meta" and bounds.member(name) is None:
            _refuse(path, f"it holds {name!r}, which this trainer has no use for")
    if len(infos) > bounds.members:
        _refuse(path, f"it holds {len(infos)} members, more than this trainer's "
                      f"{bounds.members} at most")
    loaded = {}
    for info in infos:
        name = info.filename[:-4]
        if name == "meta":
            continue
        loaded[name] = _array(path, raw, info, bounds.member(name))
    try:
        mine = _checksum(loaded, meta)
    except (ValueError, TypeError, RecursionError) as exc:
        _refuse(path, f"its metadata cannot be checked ({type(exc).__name__}: {exc})")
    if mine != check["value"]:
        _refuse(path, "its checksum does not match its contents (the file is corrupted)")
    return meta, loaded


# ------------------------------------------------------------------------------------------
# loading: the metadata, field by field
# ------------------------------------------------------------------------------------------
_KEYS = {
    1: {"format", "version", "optimizer", "convention", "hyperparameters", "learning_rate",
        "num_update", "index_update_count", "scheduler", "host_state", "params"},
}
_KEYS[2] = _KEYS[1]
_PARAM_KEYS = {"index", "name", "shape", "dtype", "state"}
_SCHED_KEYS = {1: {"type", "state"}, 2: {"type", "config", "state"}}


def _same(a, b):
    """JSON values equal in type too (``True`` is not ``1``, ``1`` is not ``1.0``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _count(path, what, x, low):
    if type(x) is not int or not low <= x <= MAX_COUNT:
        _refuse(path, f"its {what} is {x!r}; it must be an integer in [{low}, {MAX_COUNT}]")
    return x


def _entry_shape(path, what, x):
    if not isinstance(x, list) or len(x) > 64 or \
            any(type(n) is not int or not 0 <= n <= MAX_COUNT for n in x):
        _refuse(path, f"its {what} is {x!r}, not a list of sizes")
    return tuple(x)


def _check_identity(path, meta, trainer):
    """The file is for this trainer's optimizer (name, convention, hyperparameters)."""
    opt = trainer.optimizer
    version = meta["version"]
    missing = sorted(_KEYS[version] - set(meta))
    unknown = sorted(set(meta) - _KEYS[version] - {"format", "version"})
    if missing or unknown:
        _refuse(path, f"its metadata lacks {missing} or has unknown fields {unknown}")
    name = type(opt).__name__.lower()
    if not _same(meta["optimizer"], name):
        _refuse(path, f"it was saved by optimizer {meta['optimizer']!r}, this trainer uses "
                      f"{name!r}")
    if not _same(meta["convention"], opt.convention):
        _refuse(path, f"it was saved with convention {meta['convention']!r}, this trainer's "
                      f"optimizer uses {opt.convention!r}")
    mine, theirs = _hyper(opt), meta["hyperparameters"]
    if not isinstance(theirs, dict):
        _refuse(path, f"its hyperparameters are {type(theirs).__name__}, not a dict")
    if not _same(theirs, mine):
        diff = sorted(k for k in set(mine) | set(theirs)
                      if not _same(mine.get(k, ...), theirs.get(k, ...)))
        _refuse(path, f"its hyperparameters differ from this optimizer's in {diff} (file: "
                      f"{ {k: theirs.get(k) for k in diff} }, optimizer: "
                      f"{ {k: mine.get(k) for k in diff} })")


def _check_params(path, meta, trainer, bounds, loaded=None):
    """The parameter entries (and, given ``loaded``, the state arrays) against this trainer's;
    returns ``[(state leaf, array)]`` to copy (empty without ``loaded``)."""
    entries = meta["params"]
    if not isinstance(entries, list):
        _refuse(path, f"its params are {type(entries).__name__}, not a list")
    by_index = {}
    for e in entries:
        if not isinstance(e, dict) or set(e) != _PARAM_KEYS:
            _refuse(path, f"its parameter entry {str(e)[:200]} does not have exactly the keys "
                          f"{sorted(_PARAM_KEYS)}")
        i = e["index"]
        if type(i) is not int:
            _refuse(path, f"its parameter index {i!r} is not an integer")
        if i in by_index:
            _refuse(path, f"it holds parameter {i} more than once")
        by_index[i] = e
    targets = []
    for i, p, leaves in _members(trainer):
        e = by_index.pop(i, None)
        here = (p.name, p.shape, p.dtype.name)
        if e is None:
            _refuse(path, f"parameter {i} is {here} here but not in the file")
        got = (e["name"], _entry_shape(path, f"parameter {i}'s shape", e["shape"]), e["dtype"])
        if not (_same(got[0], here[0]) and got[1] == here[1] and _same(got[2], here[2])):
            _refuse(path, f"parameter {i} is {here} here but {got} in the file")
        if not isinstance(e["state"], list) or len(e["state"]) != len(leaves):
            _refuse(path, f"parameter {p.name!r} has {len(leaves)} state arrays here, "
                          f"{len(e['state']) if isinstance(e['state'], list) else e['state']!r}"
                          " in the file")
        for j, (leaf, s) in enumerate(zip(leaves, e["state"])):
            shape, dtype = bounds.state[f"state/{i}/{j}"]
            a = None if loaded is None else loaded.get(f"state/{i}/{j}")
            if not isinstance(s, dict) or set(s) != {"shape", "dtype"} or \
                    not _same(s["dtype"], dtype.name) or \
                    _entry_shape(path, f"state {j} of {p.name!r}", s["shape"]) != shape or \
                    (loaded is not None and (a is None or a.shape != shape or a.dtype != dtype)):
                _refuse(path, f"state array {j} of parameter {p.name!r} does not match "
                              f"(here {dtype}{shape}, file "
                              f"{None if a is None else (a.dtype, a.shape)}, described as "
                              f"{str(s)[:200]})")
            targets.append((leaf, a))
    if by_index:
        _refuse(path, f"it holds parameters this trainer does not have: "
                      f"{sorted(by_index)[:20]}")
    if loaded is None:
        return targets
    extra = sorted(n for n in loaded if n.startswith("state/") and n not in bounds.state)
    if extra:
        _refuse(path, f"it holds state arrays this trainer does not have: {extra[:20]}")
    return targets


def _check_meta(path, meta, loaded, trainer, bounds):
    """Every field of ``meta`` checked for type and domain and against ``trainer``; returns
    ``(targets, counts, num_update, lr, scheduler_state, commit_host)``."""
    opt = trainer.optimizer
    version = meta["version"]
    _check_identity(path, meta, trainer)
    targets = _check_params(path, meta, trainer, bounds, loaded)
    # --- counts and learning rate ---------------------------------------------------------
    begin = opt.begin_num_update
    num_update = _count(path, "num_update", meta["num_update"], begin)
    pairs = meta["index_update_count"]
    if not isinstance(pairs, list):
        _refuse(path, f"its index_update_count is {type(pairs).__name__}, not a list of "
                      "[index, count] pairs")
    known = range(len(trainer.parameters))
    counts = {}
    for pair in pairs:
        if not isinstance(pair, list) or len(pair) != 2:
            _refuse(path, f"its index_update_count entry {str(pair)[:200]} is not an [index, "
                          "count] pair")
        k, t = pair
        if type(k) is not int or k not in known:
            _refuse(path, f"its index_update_count names index {k!r}; this trainer's indices "
                          f"are 0..{len(known) - 1}")
        if k in counts:
            _refuse(path, f"its index_update_count holds index {k} more than once")
        counts[k] = _count(path, f"update count of index {k}", t, begin)
    if counts and max(counts.values()) > num_update:
        _refuse(path, f"its num_update {num_update} is below its largest update count "
                      f"{max(counts.values())}")
    lr = meta["learning_rate"]
    try:
        if type(lr) not in (int, float):
            raise TypeError(f"learning_rate must be a real number, got {type(lr).__name__} "
                            f"{lr!r}")
        lr = check_nonneg("learning_rate", lr)  # the constructor's check
    except (TypeError, ValueError) as exc:
        _refuse(path, f"its learning rate is invalid ({exc})")
    # --- scheduler ------------------------------------------------------------------------
    sched, smeta = opt.lr_scheduler, meta["scheduler"]
    if smeta is not None and (not isinstance(smeta, dict) or set(smeta) != _SCHED_KEYS[version]):
        _refuse(path, f"its scheduler entry {str(smeta)[:200]} does not have exactly the keys "
                      f"{sorted(_SCHED_KEYS[version])}")
    if (sched is None) != (smeta is None) or (sched is not None and
                                              not _same(smeta["type"], type(sched).__name__)):
        _refuse(path, f"its scheduler ({None if smeta is None else smeta['type']!r}) does not "
                      f"match this optimizer's ({None if sched is None else type(sched).__name__})")
    sched_state = None
    if sched is not None:
        if version >= 2:
            config = _scheduler_config(sched)
            if not _same(smeta["config"], config):
                _refuse(path, f"its scheduler configuration {str(smeta['config'])[:300]} differs "
                              f"from this optimizer's {config}")
        sched_state = smeta["state"]
        try:
            copy.deepcopy(sched).load_state_dict(sched_state)
        except (TypeError, ValueError, KeyError, OverflowError) as exc:
            _refuse(path, f"its scheduler state is invalid ({exc})")
    # --- the optimizer's host-side state --------------------------------------------------
    host = meta["host_state"]
    if not isinstance(host, dict):
        _refuse(path, f"its host_state is {type(host).__name__}, not a dict")
    host_arrays = {n[len("host/"):]: a for n, a in loaded.items() if n.startswith("host/")}
    try:
        commit_host = opt.check_host_state(host, host_arrays)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
        _refuse(path, f"its optimizer state is invalid ({type(exc).__name__}: {exc})")
    return targets, counts, num_update, lr, sched_state, commit_host


def load(trainer, path, raw=None):
    """Load the states file ``path`` (a path or a binary file object; or its bytes ``raw``,
    read elsewhere) into ``trainer``; ``ValueError`` (the trainer unchanged) for any file it
    does not accept."""
    with trainer.step_lock:  # no step runs between the checks and the commit
        bounds = _Bounds(trainer)
        meta, loaded = _read(path, raw, bounds,
                             lambda meta: (_check_identity(path, meta, trainer),
                                           _check_params(path, meta, trainer, bounds)))
        targets, counts, num_update, lr, sched_state, commit_host = _check_meta(
            path, meta, loaded, trainer, bounds)
        # --- commit: everything has been checked ---------------------------------------------
        opt = trainer.optimizer
        for leaf, a in targets:
            arrays.copy_from_host(leaf, a)
        opt.restore_counts(counts, num_update)
        opt.lr = float(lr)
        if opt.lr_scheduler is not None:
            opt.lr_scheduler.load_state_dict(sched_state)
        commit_host()
