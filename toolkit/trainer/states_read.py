"""Reading the Trainer's states file: the bounds of what this trainer's file can be (taken
from its own arrays) and the archive read within them: size, whole-file checksum, zip end records
and directory, every member's headers, the metadata's format and version, and the inner checksum.
The metadata's fields are checked in ``states_check``.
"""
from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import re
import stat
import struct
import zipfile

import numpy as np

from ..backends import arrays
from ..optimizers.held import STATE_DTYPES
from . import states_held
from .states_format import FORMAT, READS, SEAL, checksum, collect, refuse, state_members

__all__ = ["Bounds", "read_bytes", "read_states"]

#: room per zip member beside its data: zip local and central headers, the npy header
_MEMBER_OVERHEAD = 4096
#: the largest npy header read (numpy writes 128 bytes for these arrays)
_NPY_HEADER_MAX = 2048
#: the zip end records and the comment
_ARCHIVE_OVERHEAD = 1024
#: the most bytes one member's zip central directory entry takes: the fixed header (46), the
#: name (at most 73: ``host/`` + 64 + ``.npy``) and a zip64 extra field (at most 28), rounded up
_CENTRAL_ENTRY_MAX = 160
#: zip directory entries parsed beyond the members a trainer expects (see ``Bounds.entries``)
_NAMED_EXTRA = 16


# ------------------------------------------------------------------------------------------
# loading: bounds
# ------------------------------------------------------------------------------------------
class Bounds:
    """What this trainer expects of a states file, from its own arrays: each state member's
    exact size, the largest host-side array and metadata; the whole file's size. With
    ``convert`` (``load_states(..., convert_states=True)``), a file whose moments are held
    otherwise (another ``state_dtype``, ``states_held.forms``) is within the bounds too."""

    def __init__(self, trainer, convert=False):
        meta, live = collect(trainer, copies=False)
        members = state_members(trainer)
        opt = trainer.optimizer
        #: state_dtype -> {(index, slot): states_held.Form} (None: not convertible)
        self._forms = {}
        self._members, self._opt = members, opt
        own = self.forms(opt.state_dtype)
        self.state = {}  # member name -> (shape, dtype), as this trainer holds its state
        for (i, j), form in own.items():
            self.state.update(states_held.members(f"state/{i}/{j}", form))
        #: member name -> the most bytes it may hold (every layout a load may convert from)
        self._limits = {n: int(np.prod(s, dtype=np.int64)) * d.itemsize
                        for n, (s, d) in self.state.items()}
        for sd in (STATE_DTYPES if convert else ()):
            for (i, j), form in (self.forms(sd) or {}).items():
                for n, (s, d) in states_held.members(f"state/{i}/{j}", form).items():
                    size = int(np.prod(s, dtype=np.int64)) * d.itemsize
                    self._limits[n] = max(self._limits.get(n, 0), size)
        sizes = [int(np.prod(p.shape, dtype=np.int64)) for _, p, _ in members]
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
        state_bytes = sum(self._limits.values())
        self.file = (state_bytes + len(self._limits) * _MEMBER_OVERHEAD
                     + host_total + self.meta + _MEMBER_OVERHEAD
                     + _ARCHIVE_OVERHEAD)
        #: the most members a file may hold (state arrays, host arrays, the metadata)
        self.members = len(self._limits) + self.host_count + 1
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
        if name in self._limits:
            return self._limits[name] + _NPY_HEADER_MAX
        if name.startswith("host/") and len(name) > 5 and self.host_count:
            return self.host_each
        return None


    def forms(self, state_dtype):
        """``{(index, slot): states_held.Form}`` of this trainer's state slots as a file
        saved with ``state_dtype`` holds them; None when they cannot be converted."""
        if state_dtype not in self._forms:
            out = {}
            for i, p, leaves in self._members:
                fs = states_held.forms(self._opt, p, leaves, state_dtype)
                if fs is None:
                    out = None
                    break
                out.update(((i, j), f) for j, f in enumerate(fs))
            self._forms[state_dtype] = out
        return self._forms[state_dtype]

    def expected(self, state_dtype):
        """``{member name: (shape, dtype)}`` of the state members of a file saved with
        ``state_dtype`` (None when this trainer's slots cannot be converted from it)."""
        forms = self.forms(state_dtype)
        if forms is None:
            return None
        out = {}
        for (i, j), form in forms.items():
            out.update(states_held.members(f"state/{i}/{j}", form))
        return out


def read_bytes(trainer, source):
    """The bytes of the states file ``source`` (a path, or a binary file object open for
    reading), refused with ``ValueError`` when larger than this trainer's states file can be,
    before it is read. A distributed Trainer's rank 0 reads the file with it."""
    return _read_bounded(source, Bounds(trainer).file)


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
                refuse(source, f"it is {size} bytes, more than this trainer's states file can "
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
        refuse(source, f"it is more than {limit} bytes, more than this trainer's states file "
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
    end = len(raw) - SEAL - _END.size
    # zipfile takes the last end-record signature within the file's last 64 KiB + 22 bytes; in
    # a states file it is the record right before the 64-byte comment (the comment is hex)
    if end < 0 or raw.rfind(b"PK\x05\x06", max(0, end - (1 << 16))) != end:
        refuse(path, "its zip end record is not right before its 64-byte comment, where "
                      "save_states writes it")
    _, disk, cd_disk, here, entries, size, offset, comment = _END.unpack_from(raw, end)
    if comment != SEAL:
        refuse(path, f"its zip end record declares a {comment}-byte comment, not {SEAL}")
    records = end                   # where the end records start (the directory ends there)
    locator = end - _END64_LOCATOR.size
    if locator >= 0 and raw[locator:locator + 4] == b"PK\x06\x07":
        # zip64 (save_states writes it for a directory beyond 4 GiB or 65535 entries): zipfile
        # then takes every count, size and offset from the zip64 record
        _, record_disk, record, disks = _END64_LOCATOR.unpack_from(raw, locator)
        if record_disk != 0 or disks != 1 or record != locator - _END64.size or record < 0 or \
                raw[record:record + 4] != b"PK\x06\x06" or \
                _END64.unpack_from(raw, record)[1] != _END64.size - 12:
            refuse(path, "its zip64 end records are damaged (the zip64 record is not right "
                          "before its locator, or is not one)")
        _, _, _, _, disk, cd_disk, here, entries, size, offset = _END64.unpack_from(raw, record)
        records = record
    if disk != 0 or cd_disk != 0 or here != entries:
        refuse(path, f"its zip end record describes a multi-disk archive (disk {disk}, "
                      f"directory on disk {cd_disk}, {here} of {entries} entries on this disk)")
    if entries > bounds.entries:
        refuse(path, f"its zip directory declares {entries} members, more than this trainer's "
                      f"{bounds.members} at most")
    if size > bounds.directory:
        refuse(path, f"its zip directory takes {size} bytes, more than the {bounds.directory} "
                      f"that this trainer's {bounds.members} members can need")
    if offset + size != records:
        refuse(path, f"its zip directory ({size} bytes from offset {offset}) does not end "
                      f"where its end records start (offset {records})")
    return entries


_MEMBER_NAME = re.compile(r"(meta|state/(0|[1-9]\d{0,8})/(0|[1-9]\d{0,3})(/absmax)?|"
                          r"host/[A-Za-z0-9_]{1,64})\.npy\Z")


def _array(path, raw, info, limit):
    """The array of the stored member ``info``: a read-only view of ``raw`` (nothing is
    copied), after checking its local header and npy header against ``limit`` bytes."""
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
        refuse(path, f"member {info.filename!r} is compressed or encrypted (save_states stores "
                      "members uncompressed)")
    if info.file_size != info.compress_size or info.file_size > limit:
        refuse(path, f"member {info.filename!r} declares {info.file_size} bytes (stored "
                      f"{info.compress_size}); this trainer expects at most {limit}")
    start = info.header_offset
    if start < 0 or start + _LOCAL.size > len(raw):
        refuse(path, f"member {info.filename!r} lies outside the file")
    sig, _, _, _, _, _, _, _, _, nlen, xlen = _LOCAL.unpack_from(raw, start)
    if sig != b"PK\x03\x04" or raw[start + 30:start + 30 + nlen] != \
            info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437"):
        refuse(path, f"member {info.filename!r} has a damaged local header")
    data = start + _LOCAL.size + nlen + xlen
    end = data + info.file_size
    if end > len(raw) - SEAL:
        refuse(path, f"member {info.filename!r} lies outside the file")
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
        refuse(path, f"member {info.filename!r} has a damaged npy header "
                      f"({type(exc).__name__}: {exc})")
    if dtype.hasobject or dtype.kind not in "biufc" or dtype.fields is not None or \
            dtype.subdtype is not None:
        refuse(path, f"member {info.filename!r} holds {dtype} (states files hold plain numeric "
                      "arrays only)")
    if any(n < 0 for n in shape):
        refuse(path, f"member {info.filename!r} declares the shape {shape}")
    count = 1
    for n in shape:
        count *= n
    header = f.tell()
    if count * dtype.itemsize != info.file_size - header:
        refuse(path, f"member {info.filename!r} declares shape {shape} of {dtype} "
                      f"({count * dtype.itemsize} bytes) but holds {info.file_size - header}")
    try:
        a = np.frombuffer(raw, dtype=dtype, count=count, offset=data + header)
    except ValueError as exc:  # pragma: no cover - the bounds above leave nothing to refuse
        refuse(path, f"member {info.filename!r} cannot be read ({exc})")
    return a.reshape(shape[::-1]).T if fortran else a.reshape(shape)


def read_states(path, raw=None, bounds=None, identify=None):
    """``(meta, arrays)`` of a states file (or of its bytes ``raw``, read elsewhere: a
    distributed Trainer's rank 0 sends them), checked for size (against ``bounds``, what a
    trainer expects), integrity and format; the arrays are read-only views of the bytes.
    ``identify(meta)``, called once the metadata is read and before any other member is, may
    refuse a file meant for another optimizer or model with a clearer message."""
    if raw is None:
        raw = _read_bounded(path, bounds.file)
    elif len(raw) > bounds.file:
        refuse(path, f"it is {len(raw)} bytes, more than this trainer's states file can be "
                      f"({bounds.file} bytes at most)")
    raw = bytes(raw)
    if raw[:1] == b"\x80" or raw[:2] in (b"(l", b"(d", b"}q", b"]q"):
        refuse(path, "it is a Python pickle (MXNet's save_states writes those); pickles can run "
                      "code and are never loaded")
    if raw[:4] != b"PK\x03\x04":
        refuse(path, f"it is not a {FORMAT} file (no zip/npz header)")
    if len(raw) <= SEAL or \
            hashlib.sha256(memoryview(raw)[:-SEAL]).hexdigest().encode("ascii") != raw[-SEAL:]:
        refuse(path, "its whole-file checksum does not match (the file is truncated or "
                      "corrupted, or was not written by save_states)")
    declared = _check_directory(path, raw, bounds)  # bounded before zipfile parses it
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            infos = zf.infolist()
    except Exception as exc:  # noqa: BLE001 - zipfile's parser of untrusted bytes: any failure
        refuse(path, f"it is damaged or not a {FORMAT} file ({type(exc).__name__}: {exc})")
    if len(infos) != declared:
        refuse(path, f"its zip directory holds {len(infos)} entries, its end record declares "
                      f"{declared}")
    names = [i.filename for i in infos]
    if len(set(names)) != len(names):
        seen = collections.Counter(names)
        refuse(path, f"it holds members more than once: "
                      f"{sorted(n for n, k in seen.items() if k > 1)[:20]}")
    for name in names:
        if _MEMBER_NAME.match(name) is None:
            refuse(path, f"it holds a member {name[:100]!r} that is not part of a {FORMAT} "
                          "file")
    if "meta.npy" not in names:
        refuse(path, f"it is not a {FORMAT} file (no metadata)")
    m = _array(path, raw, infos[names.index("meta.npy")], bounds.member("meta"))
    if m.dtype != np.uint8 or m.ndim != 1:
        refuse(path, f"its metadata is {m.dtype}{m.shape}, not UTF-8 bytes")
    try:
        meta = json.loads(m.tobytes().decode("utf-8"))  # NaN, Infinity: refused field by field
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError too
        refuse(path, f"its metadata is damaged ({type(exc).__name__}: {exc})")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        refuse(path, f"it is not a {FORMAT} file")
    version = meta.get("version")
    if type(version) is not int or version not in READS:
        refuse(path, f"it has format version {version!r}; this toolkit reads versions "
                      f"{list(READS)}")
    check = meta.pop("checksum", None)
    if not isinstance(check, dict) or set(check) != {"algorithm", "value"} or \
            check["algorithm"] != "sha256" or not isinstance(check["value"], str):
        refuse(path, "it has no valid checksum")
    if identify is not None:  # a file for another optimizer or model: say so first
        identify(meta)
    for info in infos:   # a member this trainer has no use for is named before any is read
        name = info.filename[:-4]
        if name != "meta" and bounds.member(name) is None:
            refuse(path, f"it holds {name!r}, which this trainer has no use for")
    if len(infos) > bounds.members:
        refuse(path, f"it holds {len(infos)} members, more than this trainer's "
                      f"{bounds.members} at most")
    loaded = {}
    for info in infos:
        name = info.filename[:-4]
        if name == "meta":
            continue
        loaded[name] = _array(path, raw, info, bounds.member(name))
    try:
        mine = checksum(loaded, meta)
    except (ValueError, TypeError, RecursionError) as exc:
        refuse(path, f"its metadata cannot be checked ({type(exc).__name__}: {exc})")
    if mine != check["value"]:
        refuse(path, "its checksum does not match its contents (the file is corrupted)")
    return meta, loaded

