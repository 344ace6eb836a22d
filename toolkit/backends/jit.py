"""The compile policy and the kernel cache of the Numba CPU kernels, in one place.

Every CPU kernel (of the backends, and an optimizer's own host helper) is compiled here:
explicit signatures, :data:`COMPILE_OPTIONS` (``error_model="numpy"``: the python error model
blocks vectorisation; no fastmath; on-disk cache), serial below :data:`PARALLEL_THRESHOLD`
elements and ``prange`` above (docs/backends.md, "How the CPU kernels are compiled"). Kernels are
kept per process in a :class:`KernelCache` (:data:`KERNELS`).

A kernel closes over plain Python functions (:func:`inlined`, :func:`by_value`), never jitted
dispatchers: numba's on-disk cache keys a kernel by the pickled bytes of its closure, and a plain
function pickles the same in every process, so a new process loads every kernel from the cache
(tests/test_startup_cache.py). This module imports nothing of the toolkit.
"""
from __future__ import annotations

import math
import os
import threading
from fractions import Fraction
import types as pytypes
import warnings

import numba
import numba.core.caching as _caching
import numpy as np
from numba import types
from numba.core.errors import NumbaIRAssumptionWarning
from numba.extending import intrinsic, overload, register_jitable

__all__ = ["COMPILE_OPTIONS", "PARALLEL_THRESHOLD", "DTYPES", "NUMBA_TYPES", "KernelCache",
           "KERNELS", "cached", "compile_kernel", "read_only", "readonly_variant", "call_readonly",
           "by_value", "inlined", "fma"]

try:
    import fcntl
except ImportError:  # not POSIX: numba's own unlocked save
    fcntl = None


def _locked(save):
    """numba's index save (``IndexDataCacheFile.save``: read the index, add the new entry, write
    it back, then the data file) under an exclusive ``flock`` of the cache directory. Unlocked,
    processes that compile into one cache at once (pytest-xdist's workers, the simulator's
    process) each wrote back the index as they had read it, so all but the last entry of a race
    were lost (numba issues #4807, #10128) and compiled again by a later process; two could also
    take the same data file name for different kernels."""
    def save_locked(self, key, data):
        try:
            fd = os.open(self._cache_path, os.O_RDONLY)
        except OSError:
            return save(self, key, data)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return save(self, key, data)
        finally:
            os.close(fd)  # releases the lock
    save_locked.locked = True
    return save_locked


if fcntl is not None and not getattr(_caching.IndexDataCacheFile.save, "locked", False):
    _caching.IndexDataCacheFile.save = _locked(_caching.IndexDataCacheFile.save)

#: The compile options of every CPU kernel.
COMPILE_OPTIONS = dict(error_model="numpy", fastmath=False, cache=True, nogil=True,
                       boundscheck=False)

#: Below this many elements a parallel loop costs more than it saves (docs/backends.md, "How the
#: CPU kernels are compiled": the break-even measured on a 2-core machine lies between 2**15 and
#: 2**16).
PARALLEL_THRESHOLD = 1 << 15

#: Arithmetic dtypes with compiled CPU kernels.
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

#: The numba scalar type of each arithmetic dtype.
NUMBA_TYPES = {np.dtype(np.float32): types.float32, np.dtype(np.float64): types.float64}


class KernelCache:
    """Compiled kernels of one process, each built once under a lock.

    ``get(key)`` is the plain dict lookup (the hot path of a step: a kernel that is compiled
    already costs one lookup); ``cached(key, build)`` builds a missing one."""

    def __init__(self):
        self._kernels: dict = {}
        self._lock = threading.Lock()
        self.get = self._kernels.get

    def cached(self, key, build):
        """The kernel under ``key``, built by ``build()`` the first time (once, under the lock)."""
        kernel = self._kernels.get(key)
        if kernel is None:
            with self._lock:
                kernel = self._kernels.get(key)
                if kernel is None:
                    kernel = self._kernels[key] = build()
        return kernel


#: The CPU kernels (and host helpers) of every module, keyed by what they compile.
KERNELS = KernelCache()


def cached(key, build):
    """The CPU kernel under ``key`` in :data:`KERNELS`, built by ``build()`` the first time."""
    return KERNELS.cached(key, build)


def compile_kernel(sig, parallel):
    """The decorator that compiles a kernel with :data:`COMPILE_OPTIONS`. The serial and the
    parallel variant of a loop are one Python function, and numba's on-disk cache keys a kernel
    by its code and closure but not by ``parallel``: each variant gets its own qualified name,
    hence its own cache index, so neither is ever loaded for the other."""
    def wrap(fn):
        fn.__qualname__ = f"{fn.__qualname__}.{'parallel' if parallel else 'serial'}"
        return numba.njit([sig], parallel=bool(parallel), **COMPILE_OPTIONS)(fn)
    return wrap


def read_only(t):
    """The numba array type ``t`` made read-only: the type of an argument a kernel only reads
    (a gradient). One compiled kernel then takes writable and read-only numpy arrays alike
    (numba converts a writable array to it; a signature with a writable type refuses a
    read-only array), so a caller's read-only gradient compiles nothing more."""
    return t.copy(readonly=True)


def readonly_variant(kernel, args):
    """The variant of the compiled ``kernel`` (one explicit signature) that takes the numpy
    arrays of ``args`` that are read-only (a gradient the caller made read-only, a row-sparse
    gradient's values) as read-only arrays, or None when none of them is: numba refuses a
    read-only array where the signature has a writable one. Compiled the first time it is asked
    for, with the same policy and on-disk cache under its own name, and cached per process:
    a start-up that sees only writable gradients compiles nothing more. A kernel that writes to
    such an argument fails to compile (the callers check that weights and states are
    writable first)."""
    readonly = tuple(i for i, a in enumerate(args)
                     if type(a) is np.ndarray and not a.flags.writeable)
    if not readonly:
        return None

    def build():
        (sig,) = kernel.nopython_signatures
        argtys = list(sig.args)
        for i in readonly:
            argtys[i] = argtys[i].copy(readonly=True)
        fn = kernel.py_func
        fn = pytypes.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                                  fn.__closure__)
        fn.__qualname__ = f"{kernel.py_func.__qualname__}.readonly"
        with warnings.catch_warnings():
            # the pedantic SSA check the writable variant was compiled under (rows.py says why)
            warnings.simplefilter("ignore", NumbaIRAssumptionWarning)
            return numba.njit([sig.return_type(*argtys)],
                              parallel=bool(kernel.targetoptions.get("parallel")),
                              **COMPILE_OPTIONS)(fn)
    return cached(("readonly", kernel, readonly), build)


def call_readonly(kernel, *args):
    """Call ``kernel`` through :func:`readonly_variant` after it refused ``args``; called
    while that TypeError is being handled, it raises it again when no argument is read-only
    (the refusal had another cause). The fast path stays ``kernel(*args)`` in a ``try``."""
    variant = readonly_variant(kernel, args)
    if variant is None:
        raise  # noqa: PLE0704 - the caller's TypeError, as it was
    return variant(*args)


def by_value(fn):
    """A copy of module-level function ``fn`` that is not the object its module exports, so
    that a kernel closing over it is cached under its code (pickled by value) rather than its
    name: a changed ``fn`` then changes the cache key instead of loading a stale kernel."""
    return pytypes.FunctionType(_filed(fn.__code__, fn.__globals__), fn.__globals__, fn.__name__,
                                fn.__defaults__, fn.__closure__)


def _filed(code, globals_):
    """``code`` (and the code objects nested in it) naming its file by the module's own
    ``__file__`` object: a function pickled by value carries both strings, and the pickle writes
    them once where they are one object, twice where they are two equal ones. Which it is depends
    on how the module was loaded (from source, from a .pyc, or rewritten by pytest's assertion
    hook), so without this each loading gave a kernel another cache key and compiled it again."""
    file = globals_.get("__file__")
    if not isinstance(file, str) or code.co_filename != file:
        return code
    consts = tuple(_filed(c, globals_) if isinstance(c, pytypes.CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_filename=file, co_consts=consts)


def inlined(fn):
    """``fn`` made callable from compiled code and inlined there, as ``njit(inline="always")``
    does, but kept a plain Python function: a kernel closes over it, and numba's on-disk cache
    keys a closure by the pickled bytes of what it closes over. A plain function pickles to the
    same bytes in every process (its code and constants); a jitted dispatcher does not (it
    carries a per-process id), which made every process recompile every kernel and add files
    to the cache. The key also changes when a rule's code changes, so a stale kernel is never
    loaded."""
    fn.__code__ = _filed(fn.__code__, fn.__globals__)
    return register_jitable(inline="always")(fn)


def called(fn):
    """``fn`` made callable from compiled code as :func:`inlined` makes it, but compiled as a
    function of its own and called (LLVM may still inline it): a loop that vectorises alone
    and not inside a large caller's body."""
    fn.__code__ = _filed(fn.__code__, fn.__globals__)
    return register_jitable(fn)


def fma(a, b, c):
    """``a*b + c`` rounded once (a fused multiply-add), for the rules that must round as an
    implementation that fuses does (torch's CPU kernels form ``x.add_(y, alpha=a)``,
    ``addcmul_`` and ``lerp_`` with one: ``convention="pytorch"``), in the widest of the three
    float types. Compiled code (the CPU loops and the CUDA device functions) calls LLVM's
    ``llvm.fma``, a hardware FMA on x86-64 with FMA3 and on every CUDA GPU; called from Python
    (numba's CUDA simulator) it is computed exactly with :class:`fractions.Fraction` and rounded
    to float64 (correctly), then to a narrower numpy type if the operands are one (float32:
    rounded twice, which the simulator's tests allow). Infinities and NaNs give what IEEE's
    fused operation gives (a finite product plus an infinite ``c`` is ``c``; an exact result
    beyond float64's range is an infinity)."""
    fa, fb, fc = float(a), float(b), float(c)
    if not (math.isfinite(fa) and math.isfinite(fb)) or math.isnan(fc):
        exact = fa * fb + fc        # an infinite or NaN product: as the fused operation
    elif math.isinf(fc):
        exact = fc                  # a finite product cannot cancel an infinity
    else:
        q = Fraction(fa) * Fraction(fb) + Fraction(fc)
        try:
            exact = float(q)
        except OverflowError:
            exact = math.inf if q > 0 else -math.inf
    kinds = [type(x) for x in (a, b, c) if isinstance(x, np.floating)]
    return np.result_type(*kinds).type(exact) if kinds else exact


@intrinsic
def _llvm_fma(typingctx, a, b, c):
    if not all(isinstance(x, types.Float) for x in (a, b, c)):
        return None
    out = typingctx.unify_types(a, b, c)

    def codegen(context, builder, signature, args):
        args = [context.cast(builder, v, t, out) for v, t in zip(args, signature.args)]
        return builder.fma(*args)
    return out(a, b, c), codegen


@overload(fma, jit_options={}, inline="always")
def _fma_overload(a, b, c):
    if all(isinstance(x, types.Float) for x in (a, b, c)):
        return lambda a, b, c: _llvm_fma(a, b, c)
