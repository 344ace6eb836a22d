"""The Trainer's states file under hostile input and faults (issue 19, items 4, 5, 7 and 9, and
the states fuzz): every file is either loaded (a valid file) or refused with ``ValueError``, the
trainer bit for bit unchanged; never another exception, never a hang, never more memory than the
trainer's own arrays. ``docs/trainer.md``, "What a states file is checked for"."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import stat
import struct
import subprocess
import sys
import threading
import tracemalloc
import zipfile

import numpy as np
import pytest
from hypothesis import given, strategies as st

from toolkit import Parameter, Trainer, lr_scheduler
from toolkit.trainer import states
from toolkit.trainer.buffers import state_leaves

DATA = os.path.join(os.path.dirname(__file__), "data", "states")
SHAPES = [(3, 4), (), (5,)]  # a 0-d parameter among them (item 4)


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------
def _build(name="adam", kw=None, shapes=SHAPES, dtype="float32", sched_step=2):
    if kw is None:
        kw = {"learning_rate": 0.1, "lr_scheduler": lr_scheduler.FactorScheduler(
            step=sched_step, factor=0.5, base_lr=0.1)}
    params = [Parameter(f"p{i}", init=np.linspace(-1, 1, int(np.prod(s)), dtype=dtype)
                        .reshape(s)) for i, s in enumerate(shapes)]
    return Trainer(params, name, kw), params


def _steps(t, params, n, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        for p in params:
            p.set_grad(rng.standard_normal(p.shape).astype(p.dtype))
        t.step(2)


def _fingerprint(t):
    """Everything a load may change, and the weights, as bytes and plain values."""
    out = [np.asarray(p.data()).tobytes() for p in t._params]
    for g in t._groups:
        for k in range(len(g.members)):
            out.extend(np.asarray(x).tobytes() for x in state_leaves(g.views[k]))
    opt = t.optimizer
    sched = opt.lr_scheduler
    out.append(repr((sorted(opt._index_update_count.items()), opt.num_update, opt.lr,
                     None if sched is None else (sched.state_dict(), sched.config()),
                     opt.host_state()[0], sorted(opt.host_state()[1]))))
    out.extend(np.asarray(a).tobytes() for _, a in sorted(opt.host_state()[1].items()))
    return out


def _own_bytes(t):
    """The bytes of the trainer's own arrays: weights, gradients and state."""
    n = sum(np.asarray(p.data()).nbytes * 2 for p in t._params)
    for g in t._groups:
        for k in range(len(g.members)):
            n += sum(np.asarray(x).nbytes for x in state_leaves(g.views[k]))
    return n


def _seal(raw: bytes) -> bytes:
    """``raw`` with its last 64 bytes replaced by the SHA-256 of every byte before them (what
    save_states writes in the zip comment): an edit with a valid whole-file checksum."""
    return raw[:-64] + hashlib.sha256(raw[:-64]).hexdigest().encode() if len(raw) > 64 else raw


def _zip(members: dict, compression=zipfile.ZIP_STORED) -> bytes:
    """A sealed zip of raw member bytes (``name`` -> bytes, ``.npy`` added)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for name, data in members.items():
            zf.writestr(name + ".npy", data)
        zf.comment = b"0" * 64
    return _seal(buf.getvalue())


def _npy(a) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(a), allow_pickle=False)
    return buf.getvalue()


def _content(raw: bytes):
    """``(arrays, meta)`` of a states file's bytes (meta without its checksum)."""
    with np.load(io.BytesIO(raw), allow_pickle=False) as z:
        arrs = {n: z[n] for n in z.files}
    meta = json.loads(arrs.pop("meta").tobytes())
    meta.pop("checksum")
    return arrs, meta


def _pack(arrs: dict, meta, checksum=True) -> bytes:
    """A sealed states file of ``arrs`` and ``meta``, its inner checksum recomputed (so that the
    checks behind the checksums are reached)."""
    meta = json.loads(json.dumps(meta)) if isinstance(meta, (dict, list)) else meta
    if checksum and isinstance(meta, dict):
        meta["checksum"] = {"algorithm": "sha256", "value": states._checksum(arrs, meta)}
    text = json.dumps(meta, sort_keys=True)  # NaN and Infinity as JSON's extension writes them
    members = {n: _npy(a) for n, a in arrs.items()}
    members["meta"] = _npy(np.frombuffer(text.encode(), np.uint8))
    return _zip(members)


@contextlib.contextmanager
def _bounded(seconds):
    """Fail (instead of hanging CI) when the body runs longer than ``seconds``."""
    def boom(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _load_outcome(t, raw, memory_limit=None):
    """Load ``raw`` into ``t``: "loaded", or "refused" (ValueError, ``t`` unchanged). Any other
    exception, a hang, or an allocation above ``memory_limit`` bytes fails the test."""
    before = _fingerprint(t)
    tracemalloc.start()
    try:
        with _bounded(20):
            t.load_states(io.BytesIO(raw))
        outcome = "loaded"
    except ValueError as exc:
        assert "cannot load trainer states" in str(exc) or "load_states" in str(exc), exc
        outcome = "refused"
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    if memory_limit is not None:
        assert peak <= memory_limit, (peak, memory_limit)
    if outcome == "refused":
        assert _fingerprint(t) == before
    return outcome


_GOOD = {}


def _good():
    """``(raw bytes, trainer bytes)`` of a states file of the fuzzed trainer after 3 steps."""
    if not _GOOD:
        t, params = _build()
        _steps(t, params, 3)
        buf = io.BytesIO()
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "good.states")
            t.save_states(path)
            with open(path, "rb") as f:
                buf.write(f.read())
        _GOOD["raw"] = buf.getvalue()
        _GOOD["own"] = _own_bytes(t)
    return _GOOD["raw"], _GOOD["own"]


# ------------------------------------------------------------------------------------------
# item 4: a 0-d parameter
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,kw", [("adam", None), ("sgd", {"momentum": 0.9}),
                                     ("sgd", {"momentum": 0.9, "multi_precision": True})])
def test_a_0d_parameter_checkpoint_loads_and_training_continues_bit_identically(name, kw,
                                                                                 tmp_path):
    dtype = "float16" if kw and kw.get("multi_precision") else "float32"
    ta, pa = _build(name, kw, dtype=dtype)
    _steps(ta, pa, 2)
    path = tmp_path / "zero_d.states"
    ta.save_states(path)
    tb, pb = _build(name, kw, dtype=dtype)
    for p, q in zip(pa, pb):
        q.set_data(p.data().copy())
    tb.load_states(path)
    _steps(ta, pa, 2, seed=1)
    _steps(tb, pb, 2, seed=1)
    for p, q in zip(pa, pb):
        assert p.data().shape == q.data().shape
        assert np.array_equal(p.data(), q.data())


# ------------------------------------------------------------------------------------------
# item 5: save_states while another thread steps
# ------------------------------------------------------------------------------------------
def test_save_while_another_thread_steps_writes_one_whole_step(tmp_path):
    n = 10 ** 6
    t, params = _build("adam", {"learning_rate": 0.01}, shapes=[(n,)])
    grad = np.full(n, 0.5, np.float32)
    stop = threading.Event()
    errors = []

    def stepper():
        try:
            while not stop.is_set():
                params[0].set_grad(grad)
                t.step(1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    th = threading.Thread(target=stepper, daemon=True)
    th.start()
    try:
        with _bounded(120):
            for k in range(10):
                path = tmp_path / f"s{k}.states"
                t.save_states(path)  # returns normally: the file must load
                fresh, _ = _build("adam", {"learning_rate": 0.01}, shapes=[(n,)])
                fresh.load_states(path)
                # one whole step: Adam's first moment after k steps of a constant gradient g is
                # g (1 - beta1^k) in exact arithmetic, the same value in every element
                m = fresh._groups[0].views[0][0]
                assert np.all(m == m[0]), k
    finally:
        stop.set()
        th.join(30)
    assert not th.is_alive() and not errors


# ------------------------------------------------------------------------------------------
# item 7: load_states trusts nothing in the file
# ------------------------------------------------------------------------------------------
def _edit(meta, key, value):
    meta = json.loads(json.dumps(meta))
    if value is KeyError:
        meta.pop(key)
    else:
        meta[key] = value
    return meta


META_EDITS = [
    ("learning_rate", float("inf"), "learning rate"),
    ("learning_rate", -1.0, "learning rate"),
    ("learning_rate", "0.1", "learning rate"),
    ("learning_rate", True, "learning rate"),
    ("num_update", True, "num_update"),
    ("num_update", -1, "num_update"),
    ("num_update", 3.0, "num_update"),
    ("num_update", 2 ** 60, "num_update"),
    ("num_update", 1, "num_update 1 is below"),
    ("index_update_count", [[7, 3]], "index 7"),
    ("index_update_count", [[0, 3], [0, 3]], "more than once"),
    ("index_update_count", [["0", 3]], "index '0'"),
    ("index_update_count", [[0, True]], "update count"),
    ("index_update_count", [[0]], "pair"),
    ("index_update_count", {"0": 3}, "not a list"),
    ("params", KeyError, "lacks \\['params'\\]"),
    ("scheduler", KeyError, "lacks \\['scheduler'\\]"),
    ("params", 5, "params are int"),
    ("hyperparameters", [], "hyperparameters are list"),
    ("scheduler", "FactorScheduler", "scheduler entry"),
    ("host_state", [], "host_state is list"),
    ("version", True, "version True"),
    ("extra", 1, "unknown fields \\['extra'\\]"),
]


@pytest.mark.parametrize("key,value,match", META_EDITS,
                         ids=[f"{k}={v!r}" for k, v, _ in META_EDITS])
def test_every_metadata_field_is_checked_with_the_checksums_recomputed(key, value, match):
    raw, _ = _good()
    arrs, meta = _content(raw)
    t, params = _build()
    _steps(t, params, 1, seed=9)
    before = _fingerprint(t)
    with pytest.raises(ValueError, match=match):
        t.load_states(io.BytesIO(_pack(arrs, _edit(meta, key, value))))
    assert _fingerprint(t) == before
    t.load_states(io.BytesIO(_pack(arrs, meta)))  # the unedited repack loads


def test_nan_learning_rates_and_duplicate_or_unknown_parameters_are_refused():
    raw, _ = _good()
    arrs, meta = _content(raw)
    t, _ = _build()
    before = _fingerprint(t)
    bad = [
        (_pack(arrs, _edit(meta, "learning_rate", float("nan"))), "learning rate is invalid .*nan"),
        (_pack(arrs, _edit(meta, "params", meta["params"] + meta["params"][:1])),
         "parameter 0 more than once"),
        (_pack(arrs, _edit(meta, "params", meta["params"] + [dict(meta["params"][0], index=9)])),
         "does not have: \\[9\\]"),
        (_pack(dict(arrs, **{"state/9/0": arrs["state/0/0"]}), meta), "state/9/0"),
        (_pack(dict(arrs, **{"state/0/0": arrs["state/0/0"].astype(np.float64)}), meta),
         "state array 0 of parameter 'p0'"),
    ]
    for data, match in bad:
        with pytest.raises(ValueError, match=match):
            t.load_states(io.BytesIO(data))
        assert _fingerprint(t) == before


def test_a_flipped_central_directory_byte_is_a_value_error():
    raw, _ = _good()
    t, _ = _build()
    before = _fingerprint(t)
    cd = raw.rfind(b"PK\x01\x02")
    for offset in (10, 11, 20, 24, 42):  # compression method, the two sizes, header offset
        bad = bytearray(raw)
        bad[cd + offset] ^= 0x5A
        with pytest.raises(ValueError, match="cannot load trainer states"):
            t.load_states(io.BytesIO(_seal(bytes(bad))))
        assert _fingerprint(t) == before


def test_an_npy_header_declaring_a_trillion_elements_allocates_nothing():
    raw, own = _good()
    arrs, meta = _content(raw)
    t, _ = _build()
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (10 ** 12,)})
    members = {n: _npy(a) for n, a in arrs.items()}
    members["state/0/0"] = header.getvalue() + b"\0" * 48
    members["meta"] = _npy(np.frombuffer(json.dumps(dict(meta, checksum={
        "algorithm": "sha256", "value": "0" * 64})).encode(), np.uint8))
    assert _load_outcome(t, _zip(members), memory_limit=own + 2 ** 21) == "refused"


def test_a_deflated_member_is_refused_without_being_inflated():
    raw, own = _good()
    arrs, meta = _content(raw)
    t, _ = _build()
    big = np.zeros(2 ** 26, np.float32)  # 256 MiB of zeros, about 260 KB deflated
    arrs["state/0/0"] = big
    members = {n: _npy(a) for n, a in arrs.items()}
    members["meta"] = _npy(np.frombuffer(json.dumps(dict(meta, checksum={
        "algorithm": "sha256", "value": "0" * 64})).encode(), np.uint8))
    del big, arrs
    data = _zip(members, zipfile.ZIP_DEFLATED)
    del members
    assert len(data) < 2 ** 20
    assert _load_outcome(t, data, memory_limit=own + 2 ** 21) == "refused"


def test_a_file_larger_than_this_trainers_is_refused_before_it_is_read(tmp_path):
    raw, own = _good()
    t, _ = _build()
    path = tmp_path / "huge.states"
    with open(path, "wb") as f:
        f.write(raw)
        f.truncate(200 * 2 ** 20)  # sparse: 200 MiB that take no disk
    before = _fingerprint(t)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="more than this trainer's states file can be"):
            t.load_states(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < own + 2 ** 21
    assert _fingerprint(t) == before


def test_the_scheduler_configuration_is_stored_and_compared(tmp_path):
    ta, pa = _build(sched_step=3)
    _steps(ta, pa, 2)
    path = tmp_path / "s.states"
    ta.save_states(path)
    tb, _ = _build(sched_step=2)
    before = _fingerprint(tb)
    with pytest.raises(ValueError, match="scheduler configuration .*'step': 3"):
        tb.load_states(path)
    assert _fingerprint(tb) == before
    tc, _ = _build(sched_step=3)
    tc.load_states(path)
    assert tc.optimizer.lr_scheduler.state_dict() == ta.optimizer.lr_scheduler.state_dict()


def test_a_version_1_file_still_loads_and_training_continues_bit_identically():
    """tests/data/states/v1_adam_factor.states: written by the version-1 writer
    (tests/data/states/make_v1.py) after 3 steps of constant gradients 0.25 k."""
    def build():
        params = [Parameter(f"p{i}", init=np.linspace(-1, 1, n, dtype=np.float32).reshape(s))
                  for i, (n, s) in enumerate([(12, (3, 4)), (5, (5,))])]
        return Trainer(params, "adam", {"learning_rate": 0.1, "lr_scheduler":
                                        lr_scheduler.FactorScheduler(step=2, factor=0.5,
                                                                     base_lr=0.1)}), params

    def step(t, params, k):
        for p in params:
            p.set_grad(np.full(p.shape, 0.25 * (k + 1), np.float32))
        t.step(1)

    ta, pa = build()
    for k in range(3):
        step(ta, pa, k)
    tb, pb = build()
    for p, q in zip(pa, pb):
        q.set_data(p.data().copy())
    with open(os.path.join(DATA, "v1_adam_factor.states"), "rb") as f:
        assert _content(f.read())[1]["version"] == 1
    tb.load_states(os.path.join(DATA, "v1_adam_factor.states"))
    assert _fingerprint(tb) == _fingerprint(ta)
    for k in range(3, 6):
        step(ta, pa, k)
        step(tb, pb, k)
    for p, q in zip(pa, pb):
        assert np.array_equal(p.data(), q.data())


# ------------------------------------------------------------------------------------------
# item 9: files
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_new_file_gets_the_mode_open_gives_it(umask, mode, tmp_path):
    t, params = _build()
    old = os.umask(umask)
    try:
        t.save_states(tmp_path / "new.states")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new.states").st_mode) == mode


def test_a_replaced_file_keeps_its_mode(tmp_path):
    t, params = _build()
    path = tmp_path / "kept.states"
    path.write_bytes(b"old")
    os.chmod(path, 0o640)
    t.save_states(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    t.load_states(path)


def test_a_symlink_is_followed_and_its_target_replaced(tmp_path):
    t, params = _build()
    _steps(t, params, 1)
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "trainer.states"
    target.write_bytes(b"old")
    link = tmp_path / "link.states"
    link.symlink_to(target)
    t.save_states(link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes()[:4] == b"PK\x03\x04"
    assert sorted(os.listdir(tmp_path / "real")) == ["trainer.states"]  # no temporary left
    t.load_states(link)
    t.load_states(target)


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temporaries_of_the_same_path_are_removed_on_the_next_save(tmp_path):
    t, params = _build()
    dead = _dead_pid()
    stale = tmp_path / f".trainer.states.mxopt-tmp-{dead}-0a1b2c"
    alive = tmp_path / f".trainer.states.mxopt-tmp-{os.getppid()}-0a1b2c"  # a live writer's
    other = tmp_path / f".other.states.mxopt-tmp-{dead}-0a1b2c"  # another path's
    for f in (stale, alive, other):
        f.write_bytes(b"partial")
    t.save_states(tmp_path / "trainer.states")
    assert not stale.exists() and alive.exists() and other.exists()
    assert sorted(os.listdir(tmp_path)) == sorted([alive.name, other.name, "trainer.states"])


def test_a_save_killed_mid_write_leaves_a_temporary_the_next_save_removes(tmp_path):
    script = (
        "import os, signal, numpy as np, toolkit.trainer.states as s\n"
        "from toolkit import Parameter, Trainer\n"
        "t = Trainer([Parameter('w', init=np.zeros(4, np.float32))], 'adam', {})\n"
        "real = s._write_npz\n"
        "def die(f, payload):\n"
        "    real(f, payload)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "s._write_npz = die\n"
        f"t.save_states({str(tmp_path / 'w.states')!r})\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(states.__file__)))] + sys.path))
    r = subprocess.run([sys.executable, "-c", script], env=env, timeout=300)
    assert r.returncode == -signal.SIGKILL
    left = [f for f in os.listdir(tmp_path) if ".mxopt-tmp-" in f]
    assert len(left) == 1 and left[0].startswith(".w.states.mxopt-tmp-")
    t = Trainer([Parameter("w", init=np.zeros(4, np.float32))], "adam", {})
    t.save_states(tmp_path / "w.states")
    assert os.listdir(tmp_path) == ["w.states"]


@pytest.mark.parametrize("base", ["s" * 249 + ".state",             # 255 ASCII bytes
                                  "\u00e9" * 124 + "-\u20ac.st"],         # 255 UTF-8 bytes
                         ids=["ascii", "utf8"])
def test_a_255_byte_name_can_be_saved_and_its_stale_temporaries_are_removed(base, tmp_path):
    """The temporary's name must fit NAME_MAX (255 bytes, in the file system's encoding) too:
    ``.<name>.mxopt-tmp-<pid>-<random>`` for a 250-byte name did not, and the save failed."""
    assert len(os.fsencode(base)) == 255
    t, params = _build()
    _steps(t, params, 1)
    target = tmp_path / base
    t.save_states(target)
    assert os.listdir(tmp_path) == [base]                  # saved, no temporary left
    t.load_states(target)
    prefix = states._temporary_prefix(str(tmp_path), base)
    name = f"{prefix}{_dead_pid()}-0a1b2c3d4e5f"
    assert name.startswith(".") and ".mxopt-tmp-" in name and len(os.fsencode(name)) <= 255
    assert os.fsencode(name).decode("utf-8")                # whole characters only
    other = states._temporary_prefix(str(tmp_path), base[:-1] + "x")  # another long name
    assert other != prefix
    others = f"{other}{_dead_pid()}-0a1b2c"
    (tmp_path / name).write_bytes(b"partial")               # a save of this path killed
    (tmp_path / others).write_bytes(b"partial")             # another path's
    t.save_states(target)
    assert sorted(os.listdir(tmp_path)) == sorted([base, others])
    short = states._temporary_prefix(str(tmp_path), "trainer.states")
    assert short == ".trainer.states.mxopt-tmp-"            # a short name keeps the plain form


def test_load_states_takes_paths_and_binary_files_never_a_descriptor(tmp_path):
    t, params = _build()
    _steps(t, params, 1)
    path = tmp_path / "s.states"
    t.save_states(path)
    with open(path, "rb") as f:
        t.load_states(f)
        fd = f.fileno()
        with pytest.raises(TypeError, match="file descriptors are not accepted"):
            t.load_states(fd)
        os.fstat(fd)  # still open
        assert f.tell() > 0
    t.load_states(str(path))
    t.load_states(os.fsencode(str(path)))
    t.load_states(io.BytesIO(path.read_bytes()))
    with open(path, encoding="latin-1") as f, pytest.raises(TypeError, match="binary"):
        t.load_states(f)
    with pytest.raises(TypeError, match="path"):
        t.load_states(3.5)


def test_an_empty_or_folder_path_is_a_clear_error(tmp_path):
    t, _ = _build()
    with pytest.raises(ValueError, match="empty path"):
        t.save_states("")
    with pytest.raises(ValueError, match="empty path"):
        t.load_states("")
    with pytest.raises(ValueError, match="is a folder"):
        t.save_states(tmp_path)
    with pytest.raises(TypeError, match="path"):
        t.save_states(3)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------------
# the fuzz: random byte edits, random metadata edits, random member sizes
# ------------------------------------------------------------------------------------------
_FUZZ_TRAINER = {}


def _fuzz_trainer():
    if not _FUZZ_TRAINER:
        t, params = _build()
        _steps(t, params, 1, seed=7)
        _FUZZ_TRAINER["t"] = t
    return _FUZZ_TRAINER["t"]


def _check(raw):
    """The fuzz's property: a load, or a ValueError with the trainer unchanged; bounded in time
    and memory; a file that loads is a valid one (training goes on from it)."""
    good, own = _good()
    t = _fuzz_trainer()
    outcome = _load_outcome(t, raw, memory_limit=own + 2 ** 21)
    if outcome == "loaded":
        for p in t._params:
            p.set_grad(np.ones(p.shape, p.dtype))
        t.step(1)  # a valid file: training goes on from it (any learning rate >= 0 is valid)
        t.load_states(io.BytesIO(good))  # back to the same start for the next example
    return outcome


@given(edits=st.lists(st.tuples(st.integers(0, 2 ** 20), st.integers(0, 255)),
                      min_size=1, max_size=6),
       cut=st.one_of(st.none(), st.none(), st.integers(0, 2 ** 20)), reseal=st.booleans())
def test_fuzz_random_byte_edits(edits, cut, reseal):
    raw, _ = _good()
    data = bytearray(raw)
    for where, byte in edits:
        data[where % len(data)] = byte
    if cut is not None:
        data = data[:cut % len(data)]
    data = bytes(data)
    _check(_seal(data) if reseal else data)


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
              st.sampled_from([0, 1, 2, 3, -1, 2 ** 53, 2 ** 63]),
              st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.0, -0.0, 0.1]),
              st.text(max_size=8), st.sampled_from(["p0", "p1", "float32", "adam", "mxnet"])),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=8)


@given(data=st.data())
def test_fuzz_random_metadata_edits_with_the_checksums_recomputed(data):
    raw, _ = _good()
    arrs, meta = _content(raw)
    node = meta
    for _ in range(data.draw(st.integers(0, 4), label="depth")):
        if isinstance(node, dict) and node:
            child = node[data.draw(st.sampled_from(sorted(node)), label="key")]
        elif isinstance(node, list) and node:
            child = node[data.draw(st.integers(0, len(node) - 1), label="index")]
        else:
            break
        if not isinstance(child, (dict, list)):
            break
        node = child
    op = data.draw(st.sampled_from(["replace", "delete", "insert", "duplicate", "nudge"]),
                   label="op")
    keys = sorted(node) if isinstance(node, dict) else list(range(len(node)))
    numbers = [k for k in keys if type(node[k]) in (int, float)]
    if op == "nudge" and numbers:  # a plausible value: the same type, nearby (some load)
        k = data.draw(st.sampled_from(numbers), label="at")
        if type(node[k]) is int:
            node[k] = node[k] + data.draw(st.sampled_from([-2, -1, 1, 2, 4]), label="by")
        else:
            node[k] = node[k] * data.draw(st.sampled_from([0.0, 0.5, 2.0, -1.0]), label="by")
    elif keys and op in ("replace", "delete", "duplicate", "nudge"):
        k = data.draw(st.sampled_from(keys), label="at")
        if op in ("replace", "nudge"):
            node[k] = data.draw(_JSON, label="value")
        elif op == "delete":
            del node[k]
        elif isinstance(node, list):
            node.append(json.loads(json.dumps(node[k])))
        else:
            node[k + "_"] = node[k]
    elif isinstance(node, dict):
        node[data.draw(st.text(max_size=6), label="new key")] = data.draw(_JSON, label="value")
    else:
        node.append(data.draw(_JSON, label="value"))
    _check(_pack(arrs, meta))


_DTYPES = ["<f4", "<f8", "<f2", "<i8", "|u1", "|b1", ">f4", "<c8"]


@given(data=st.data())
def test_fuzz_random_member_sizes(data):
    raw, _ = _good()
    arrs, meta = _content(raw)
    names = sorted(arrs) + ["state/1/7", "state/5/0", "host/cum0"]
    for _ in range(data.draw(st.integers(1, 3), label="members")):
        name = data.draw(st.sampled_from(names), label="member")
        shape = tuple(data.draw(st.lists(st.integers(0, 6), max_size=3), label="shape"))
        dtype = data.draw(st.sampled_from(_DTYPES), label="dtype")
        arrs[name] = np.zeros(shape, dtype) + (1 if dtype != "|b1" else True)
        if data.draw(st.booleans(), label="describe it in the metadata"):
            for e in meta["params"]:
                for j, s in enumerate(e["state"]):
                    if name == f"state/{e['index']}/{j}":
                        s["shape"], s["dtype"] = list(shape), np.dtype(dtype).name
    members = {n: _npy(a) for n, a in arrs.items()}
    lie = data.draw(st.sampled_from([None, 0, 1, 10 ** 12, 2 ** 62, -1]), label="declared")
    if lie is not None:  # a header whose declared size is not what the member holds
        name = data.draw(st.sampled_from(sorted(arrs)), label="lying member")
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {
            "descr": arrs[name].dtype.str, "fortran_order": False,
            "shape": (max(lie, 0),) if lie >= 0 else (3, -1)})
        members[name] = header.getvalue() + arrs[name].tobytes()
    meta = dict(meta, checksum={"algorithm": "sha256", "value": states._checksum(arrs, meta)})
    members["meta"] = _npy(np.frombuffer(json.dumps(meta).encode(), np.uint8))
    _check(_zip(members))


def test_scheduler_config_is_the_constructor_arguments_as_json():
    made = [lr_scheduler.FactorScheduler(step=3, factor=0.5, stop_factor_lr=1e-4, base_lr=1.0,
                                         warmup_steps=2, warmup_begin_lr=0.5,
                                         warmup_mode="constant"),
            lr_scheduler.MultiFactorScheduler(step=[2, 5], factor=0.25, base_lr=0.5),
            lr_scheduler.PolyScheduler(max_update=10, base_lr=0.2, pwr=1.5, final_lr=0.01,
                                       warmup_steps=2),
            lr_scheduler.CosineScheduler(max_update=10, base_lr=0.2, final_lr=0.01)]
    for s in made:
        config = s.config()
        assert json.loads(json.dumps(config)) == config
        again = getattr(lr_scheduler, config["type"])(**config["args"])
        assert again.config() == config
        for n in range(1, 12):
            assert again(n) == s(n)
        assert s.config() == config  # stepping changes the state, not the configuration
    s = made[0]
    Trainer([Parameter("w", init=np.zeros(2, np.float32))], "sgd",
            {"learning_rate": 0.3, "lr_scheduler": s})
    assert s.base_lr == 0.3 and s.config()["args"]["base_lr"] == 1.0


def test_the_size_bound_follows_the_trainers_own_arrays(tmp_path):
    """One large parameter beside many scalars: an Adam trainer keeps no host arrays, so its
    file may be little more than its own state (found by a review: the bound once allowed a
    host array as large as the largest parameter for every parameter)."""
    t, _ = _build("adam", kw={"learning_rate": 0.1}, shapes=[(1 << 16,)] + [(1,)] * 60)
    own = 2 * 4 * ((1 << 16) + 60)                  # mean and var, float32
    blob = tmp_path / "big.states"
    blob.write_bytes(b"PK\x03\x04" + bytes(3 * own))
    with pytest.raises(ValueError, match="more than this trainer's states file can be"):
        t.load_states(str(blob))


def test_a_host_member_for_an_optimizer_without_host_arrays_is_named():
    raw, _ = _good()
    arrs, meta = _content(raw)
    t, _ = _build()
    before = _fingerprint(t)
    with pytest.raises(ValueError, match="'host/x', which this trainer has no use for"):
        t.load_states(io.BytesIO(_pack(dict(arrs, **{"host/x": arrs["state/0/0"]}), meta)))
    assert _fingerprint(t) == before


# ------------------------------------------------------------------------------------------
# the zip directory is bounded before zipfile parses it (a review of issue 19)
# ------------------------------------------------------------------------------------------
_CENTRAL = struct.Struct("<4s6H3L5H2L")  # a zip central directory file header (46 bytes)
_END = struct.Struct("<4s4H2LH")
_END64_LOCATOR = struct.Struct("<4sLQL")
_END64 = struct.Struct("<4sQ2H2L4Q")


def _huge_directory(n, how):
    """A sealed zip whose central directory holds ``n`` tiny entries (distinct names, no data),
    its end records declaring them as ``how`` says: "saturated" (65535 entries, no zip64),
    "zip64" (the true count in zip64 end records) or "one" (1 entry, the true directory
    size)."""
    head = b"PK\x03\x04" + bytes(26)
    cd = b"".join(_CENTRAL.pack(b"PK\x01\x02", 20, 20, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0)
                  + b"%05x" % k for k in range(n))
    records = b""
    count = {"saturated": 0xFFFF, "zip64": 0xFFFF, "one": 1}[how]
    if how == "zip64":
        at = len(head) + len(cd)
        records = _END64.pack(b"PK\x06\x06", 44, 45, 45, 0, 0, n, n, len(cd), len(head)) + \
            _END64_LOCATOR.pack(b"PK\x06\x07", 0, at, 1)
    end = _END.pack(b"PK\x05\x06", 0, 0, count, count, len(cd), len(head), 64)
    return _seal(head + cd + records + end + b"0" * 64)


@pytest.mark.parametrize("how", ["saturated", "zip64", "one"])
def test_a_directory_of_200k_tiny_entries_is_refused_before_zipfile_parses_it(how):
    """zipfile makes one ZipInfo per entry of the whole central directory when it opens a zip;
    the end records are read first, so a directory larger than this trainer's states can need
    is refused with little memory (zipfile's parse of it took tens of MB)."""
    t, _ = _build("adam", kw={"learning_rate": 0.1}, shapes=[(1 << 21,)])   # a 16 MB file
    raw = _huge_directory(200_000, how)
    assert len(raw) < states._Bounds(t).file  # within the file size bound: the directory's
    before = _fingerprint(t)
    tracemalloc.start()
    try:
        with _bounded(20), pytest.raises(ValueError, match="its zip directory (declares|takes)"):
            states.load(t, "crafted.states", raw=raw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 ** 20, peak
    assert _fingerprint(t) == before


def _with_zip64_end(raw, edit=None):
    """``raw`` (a states file) with zip64 end records before its end record (as zipfile writes
    for a directory beyond 4 GiB or 65535 entries), resealed; ``edit(fields)`` may change the
    zip64 record's and locator's fields first."""
    end = len(raw) - 64 - _END.size
    _, _, _, _, entries, size, offset, _ = _END.unpack_from(raw, end)
    f = {"record": [b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, size, offset],
         "locator": [b"PK\x06\x07", 0, end, 1]}
    if edit is not None:
        edit(f)
    records = _END64.pack(*f["record"]) + _END64_LOCATOR.pack(*f["locator"])
    tail = _END.pack(b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 64)
    return _seal(raw[:end] + records + tail + raw[-64:])


def test_zip64_end_records_are_read_and_checked():
    raw, _ = _good()
    t, params = _build()
    _steps(t, params, 1)
    t.load_states(io.BytesIO(_with_zip64_end(raw)))            # a valid zip64 end: it loads
    t2, params2 = _build()
    _steps(t2, params2, 1)
    t2.load_states(io.BytesIO(raw))
    assert _fingerprint(t) == _fingerprint(t2)
    bad = {
        "damaged": lambda f: f["locator"].__setitem__(2, 3),   # the record is not where it says
        "multi-disk": lambda f: f["record"].__setitem__(4, 1),
        "entries": lambda f: (f["record"].__setitem__(6, 10 ** 6),
                              f["record"].__setitem__(7, 10 ** 6)),
        "size": lambda f: f["record"].__setitem__(8, 10 ** 9),
        "offset": lambda f: f["record"].__setitem__(9, f["record"][9] + 1),
    }
    match = {"damaged": "zip64 end records are damaged", "multi-disk": "multi-disk",
             "entries": "declares 1000000 members", "size": "takes 1000000000 bytes",
             "offset": "does not end where its end records start"}
    for case, edit in bad.items():
        before = _fingerprint(t)
        with pytest.raises(ValueError, match=match[case]):
            t.load_states(io.BytesIO(_with_zip64_end(raw, edit)))
        assert _fingerprint(t) == before


def test_an_end_record_not_right_before_the_comment_is_refused():
    raw, _ = _good()
    t, _ = _build()
    end = len(raw) - 64 - _END.size
    short = bytearray(raw)
    short[end + 20:end + 22] = struct.pack("<H", 0)             # declares no comment
    with pytest.raises(ValueError, match="declares a 0-byte comment"):
        t.load_states(io.BytesIO(_seal(bytes(short))))
    late = bytearray(raw)
    late[end + 16:end + 20] = b"PK\x05\x06"                     # a second signature after it
    with pytest.raises(ValueError, match="not right before its 64-byte comment"):
        t.load_states(io.BytesIO(_seal(bytes(late))))
