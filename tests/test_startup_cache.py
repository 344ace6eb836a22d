"""Start-up: numba's on-disk cache works for the rule kernels, so a second process loads every
kernel it needs instead of compiling it (numba keys a kernel that closes over a rule by the
pickled rule: a plain function pickles to the same bytes in every process)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import numpy as np
from toolkit import Parameter, Trainer, optimizer
for name in ("adam", "sgld", "lars", "lamb"):
    for n in (64, 1 << 16):     # the serial and the parallel kernel
        opt = optimizer.create(name)
        w = np.ones(n, np.float32); s = opt.create_state(0, w)
        opt.update(0, w, np.ones(n, np.float32), s)
p = [Parameter("a", shape=(3,)), Parameter("b", shape=(4,))]
t = Trainer(p, "ftrl")
for q in p:
    q.grad()[...] = 1.0
t.step(1)
for mp in (False, True):        # the row kernels: one tensor, float16 with a master, a group
    opt = optimizer.create("groupadagrad", multi_precision=mp)
    w = np.ones((4, 8), np.float16 if mp else np.float32)
    opt.update_multi_precision(0, w, np.ones((4, 8), w.dtype),
                               opt.create_state_multi_precision(0, w))
p = [Parameter("e", shape=(3, 4)), Parameter("f", shape=(2, 5))]
t = Trainer(p, "groupadagrad")
for q in p:
    q.grad()[...] = 1.0
t.step(1)
"""


def _run(cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir), NUMBA_DEBUG_CACHE="1")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def first_process(tmp_path_factory):
    """One process that compiled every kernel of ``SCRIPT`` into a fresh cache: the cache
    directory and what it printed (both tests read the same first run: it compiles everything,
    the slowest part of this file)."""
    cache = tmp_path_factory.mktemp("numba_cache")
    return cache, _run(cache)


def test_a_second_process_loads_every_kernel_from_the_cache(first_process):
    cache, first = first_process
    assert "data saved" in first                    # the first process compiled and saved
    second = _run(cache)
    assert "data loaded" in second
    saved = [line for line in second.splitlines() if "data saved" in line]
    assert saved == [], f"the second process compiled again: {saved}"


def test_serial_and_parallel_kernels_are_cached_apart(first_process):
    """numba's cache key ignores ``parallel``: the two variants of a loop must not share an
    index, or the one compiled first is loaded for both (a serial call then ran the parallel
    kernel, 8 ms for 2^12 elements)."""
    cache, _ = first_process
    names = [p.name for p in cache.rglob("*.nbi")]
    assert any(".serial" in n for n in names) and any(".parallel" in n for n in names), names
    shared = [n for n in names if "loop" in n and ".serial" not in n and ".parallel" not in n]
    assert shared == [], shared


RULES_SCRIPT = """
import hashlib
import numpy as np
from numba.core.serialize import dumps
from toolkit import optimizer
from toolkit.backends import cpu, jit, launches
out = []
for name in ("adam", "sgd", "ftrl", "rmsprop", "nadam"):
    opt = optimizer.create(name)
    w = np.ones(4, np.float32)
    for c in launches.collect(opt.planned_step(0, w, np.ones(4, np.float32),
                                               opt.create_state(0, w)), cpu.LAUNCHER):
        out.append(hashlib.sha256(dumps(jit.inlined(c.factory(np.float32)))).hexdigest())
print(out)
"""


def test_a_rule_pickles_alike_however_its_module_was_loaded(tmp_path):
    """numba's cache key of a kernel holds the pickled rule it closes over. A rule pickles
    alike whether the toolkit was imported from source, from a .pyc, or through pytest's
    assertion rewriting (a pickle of a function writes its file name once where the module's
    ``__file__`` and the code's ``co_filename`` are one object, twice where they are two equal
    ones): else each way of loading compiled every kernel again, and a subprocess of the test
    suite reused none of the kernels its pytest process had compiled."""
    def run(**env):
        e = dict(os.environ, **env)
        e.pop("NUMBA_ENABLE_CUDASIM", None)
        out = subprocess.run([sys.executable, "-c", RULES_SCRIPT], env=e, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout
    source = run(PYTHONDONTWRITEBYTECODE="1")
    pycache = str(tmp_path / "pyc")
    run(PYTHONDONTWRITEBYTECODE="", PYTHONPYCACHEPREFIX=pycache)       # writes the .pyc files
    assert any((tmp_path / "pyc").rglob("jit*.pyc"))
    from_pyc = run(PYTHONDONTWRITEBYTECODE="", PYTHONPYCACHEPREFIX=pycache)
    assert source.count(",") >= 4 and source == from_pyc
    ns = {}
    from contextlib import redirect_stdout
    from io import StringIO
    buf = StringIO()
    with redirect_stdout(buf):
        exec(RULES_SCRIPT, ns)                                 # this (pytest) process
    assert buf.getvalue() == source
