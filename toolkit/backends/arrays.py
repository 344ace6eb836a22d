"""The array contract: what every backend accepts as weight, gradient and state, checked in one place.

A step takes numpy arrays (CPU and reference backends) or CUDA arrays (numba device arrays and
anything exporting ``__cuda_array_interface__``: CuPy, PyTorch). :func:`describe` reads either
into one :class:`ArrayDesc`, and the ``check_*`` functions apply the same rules and messages to
both before any kernel runs (floating dtype, writeable, contiguous, matching shapes and dtypes,
one kind and device, no overlap).

This module imports no backend: what the interface cannot tell (a pointer's device; allocating
and copying a numba device array) it asks of the operations registered for the kind
(:func:`register_kind`), which the CUDA backend registers when imported.
"""
from __future__ import annotations

import ctypes
import math
import operator

import numpy as np

__all__ = ["ArrayDesc", "NUMPY_SIGNATURE", "HOST", "DEVICE", "FLOAT_DTYPES", "describe", "is_device_array",
           "check_weight", "check_grad", "check_state_array", "check_disjoint", "kind_name",
           "compute_dtype", "zeros_like", "copy", "astype", "to_host", "copy_from_host", "register_kind",
           "register_loader", "kind_ops"]

HOST, DEVICE = "host", "cuda"
FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
#: what a check of the array contract reads of a numpy array that can change while the array
#: object stays the same (its memory never moves): one call gives them all
NUMPY_SIGNATURE = operator.attrgetter("shape", "strides", "dtype", "flags.writeable")


class ArrayDesc:
    """One array as a step sees it, whichever library made it."""

    __slots__ = ("obj", "kind", "shape", "dtype", "strides", "_ptr", "_lo", "_hi", "readonly",
                 "stream", "c_contiguous", "f_contiguous", "library", "size")

    def __init__(self, obj, kind, shape, dtype, strides, ptr, readonly, stream, library):
        self.obj, self.kind, self.library = obj, kind, library
        self.shape, self.dtype, self.strides = tuple(shape), np.dtype(dtype), tuple(strides)
        self._ptr, self.readonly, self.stream = int(ptr), bool(readonly), stream
        self.c_contiguous, self.f_contiguous = _contiguity(self.shape, self.strides,
                                                           self.dtype.itemsize)
        self._lo, self._hi = _extent(self._ptr, self.shape, self.strides, self.dtype.itemsize)
        self.size = math.prod(self.shape)

    @classmethod
    def of_numpy(cls, a):
        """A numpy array's description, read from numpy's own attributes and flags (its
        contiguity rules are the ones ``_contiguity`` writes down for device arrays); the data
        pointer and extent are read only when asked for (a step between numpy arrays checks
        overlap with ``numpy.may_share_memory``, the same bounds test)."""
        d = cls.__new__(cls)
        flags = a.flags
        d.obj, d.kind, d.library, d.stream = a, HOST, "numpy", None
        d.shape, d.dtype, d.strides, d.size = a.shape, a.dtype, a.strides, a.size
        d.readonly = not flags.writeable
        d.c_contiguous, d.f_contiguous = flags.c_contiguous, flags.f_contiguous
        d._ptr = None
        return d

    def _bounds(self):
        self._ptr = int(self.obj.__array_interface__["data"][0])
        self._lo, self._hi = _extent(self._ptr, self.shape, self.strides, self.dtype.itemsize)

    @property
    def ptr(self):
        """The address of the first element."""
        if self._ptr is None:
            self._bounds()
        return self._ptr

    @property
    def lo(self):
        """The lowest byte address the elements occupy."""
        if self._ptr is None:
            self._bounds()
        return self._lo

    @property
    def hi(self):
        """One past the highest byte address the elements occupy."""
        if self._ptr is None:
            self._bounds()
        return self._hi

    @property
    def order(self):
        """"F" for a Fortran-ordered (and not also C-ordered) array, else "C"."""
        return "F" if self.f_contiguous and not self.c_contiguous else "C"

    def __repr__(self):
        return (f"ArrayDesc({self.library}, shape={self.shape}, dtype={self.dtype}, "
                f"order={self.order if self.contiguous else 'strided'})")

    @property
    def contiguous(self):
        """Whether the array is one dense block (C or Fortran order)."""
        return self.c_contiguous or self.f_contiguous


def _c_strides(shape, itemsize):
    strides, acc = [], itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


def _contiguity(shape, strides, itemsize):
    """NumPy's rules: dimensions of length 1 have arbitrary strides; empty arrays are both."""
    if any(n == 0 for n in shape):
        return True, True

    def dense(dims):
        acc = itemsize
        for n, s in dims:
            if n != 1 and s != acc:
                return False
            acc *= n
        return True
    dims = list(zip(shape, strides))
    return dense(reversed(dims)), dense(dims)


def _extent(ptr, shape, strides, itemsize):
    """The half-open byte range ``[lo, hi)`` the array's elements occupy."""
    if any(n == 0 for n in shape):
        return ptr, ptr
    lo = hi = ptr
    for n, s in zip(shape, strides):
        if s >= 0:
            hi += (n - 1) * s
        else:
            lo += (n - 1) * s
    return lo, hi + itemsize


def _library(obj):
    """The library that made a device array: "cupy", "torch", "numba" or its module's name."""
    mod = type(obj).__module__.split(".")[0]
    if mod.startswith("cupy"):
        return "cupy"
    if mod.startswith("numba"):
        return "numba"
    return mod


def is_device_array(obj) -> bool:
    """Whether ``obj`` is a CUDA array (numba device array or ``__cuda_array_interface__``)."""
    if isinstance(obj, np.ndarray):
        return False
    if getattr(type(obj), "__cuda_ndarray__", False):
        return True
    try:
        return hasattr(obj, "__cuda_array_interface__")
    except Exception:  # a torch tensor that requires grad raises on access: still a device array
        return True


def describe(obj, what="weight") -> ArrayDesc:
    """Read ``obj`` (a numpy array or a CUDA array) into an :class:`ArrayDesc`; TypeError for
    anything else, naming ``what``."""
    if isinstance(obj, np.ndarray):
        return ArrayDesc.of_numpy(obj)
    sim = getattr(obj, "_ary", None)
    if getattr(type(obj), "__cuda_ndarray__", False) and isinstance(sim, np.ndarray):
        # numba's CUDA simulator: a device array is a numpy array in a wrapper
        return ArrayDesc(obj, DEVICE, sim.shape, sim.dtype, sim.strides,
                         sim.__array_interface__["data"][0], not sim.flags.writeable, None,
                         "numba")
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        cai = None
    except Exception as exc:  # PyTorch: "Can't get __cuda_array_interface__ on Variable that requires grad"
        raise TypeError(f"{what} exports no usable __cuda_array_interface__ ({exc}); for a "
                        f"PyTorch tensor that requires grad, pass tensor.detach() (a view of "
                        f"the same memory)") from None
    if cai is None:
        raise TypeError(f"{what} must be a numpy.ndarray or a CUDA array (a numba device array "
                        f"or an object with __cuda_array_interface__, such as a CuPy array or "
                        f"a PyTorch CUDA tensor), got {type(obj).__name__}")
    if cai.get("mask") is not None:
        raise TypeError(f"{what} is a masked CUDA array; masks are not supported")
    try:
        dtype = np.dtype(cai["typestr"])
    except TypeError:
        raise TypeError(f"{what} has an unknown CUDA array typestr {cai['typestr']!r}") from None
    shape = tuple(int(n) for n in cai["shape"])
    if any(n < 0 for n in shape):
        raise TypeError(f"{what} exports a malformed __cuda_array_interface__ (shape {shape})")
    strides = cai.get("strides")
    strides = _c_strides(shape, dtype.itemsize) if strides is None else tuple(int(s) for s in strides)
    ptr, readonly = cai["data"]
    return ArrayDesc(obj, DEVICE, shape, dtype, strides, ptr or 0, readonly, cai.get("stream"),
                     _library(obj))


def kind_name(d: ArrayDesc) -> str:
    """How an error message names the array's kind ("a numpy.ndarray", "a CUDA array (cupy)")."""
    return "a numpy.ndarray" if d.kind == HOST else f"a CUDA array ({d.library})"


# --------------------------------------------------------------------------------------------
# the operations a device kind provides (registered from above: this module imports no backend)
# --------------------------------------------------------------------------------------------
_ops: dict = {}
_loaders: dict = {}


def register_kind(kind, ops):
    """Register the operations on device arrays of ``kind`` (:data:`DEVICE`) that need the
    device's own library: an object with ``device_of(desc)`` (the device ordinal),
    ``zeros(desc, dtype, shape=None)``, ``convert_into(dst_desc, src_desc)``,
    ``copy_from_host(desc, host)`` and ``to_host(desc)``. The backend of that kind calls it when
    it is imported."""
    _ops[kind] = ops


def register_loader(kind, load):
    """``load()`` imports the backend that registers ``kind``'s operations; called the first
    time they are needed (so the CPU path never imports a device library)."""
    _loaders[kind] = load


def kind_ops(kind=DEVICE):
    """The operations registered for ``kind`` (loading its backend the first time)."""
    ops = _ops.get(kind)
    if ops is None:
        load = _loaders.get(kind)
        if load is not None:
            load()
            ops = _ops.get(kind)
        if ops is None:
            raise RuntimeError(f"no backend registered the operations of {kind!r} arrays "
                               "(import toolkit.backends first)")
    return ops


def _device_of(d: ArrayDesc):
    return kind_ops(d.kind).device_of(d)  # only reached with device arrays present


# --------------------------------------------------------------------------------------------
# the checks: same rules and messages for every kind
# --------------------------------------------------------------------------------------------
def check_weight(w: ArrayDesc, what="weight"):
    """The weight's part of the contract: a float dtype, writeable, one contiguous block."""
    if w.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{what} dtype must be float16, float32 or float64, got {w.dtype}")
    if w.readonly:
        raise ValueError(f"{what} is read-only; the update is in place and needs a writeable array")
    if not w.contiguous:
        fix = ("np.ascontiguousarray" if w.kind == HOST else "a contiguous copy, e.g. "
               ".contiguous() or cupy.ascontiguousarray")
        raise ValueError(f"{what} is not contiguous (a strided view); updating it in place "
                         f"would need a copy: pass a contiguous array ({fix}) and copy the "
                         "result back yourself")


def check_same_kind(what, a: ArrayDesc, w: ArrayDesc):
    """``a`` on the weight's side (host or one CUDA device), else a TypeError/ValueError."""
    if a.kind != w.kind:
        raise TypeError(f"{what} is {kind_name(a)} but the weight is {kind_name(w)}; all arrays "
                        "of a step must live on the same side (host or one CUDA device)")
    if a.kind == DEVICE:
        da, dw = _device_of(a), _device_of(w)
        if da != dw:
            raise ValueError(f"{what} is on CUDA device {da} but the weight is on device {dw}; "
                             "all arrays of a step must be on one device")


def check_grad(w: ArrayDesc, g: ArrayDesc):
    """The gradient's part of the contract: the weight's kind, device, shape and dtype."""
    check_same_kind("grad", g, w)
    if g.shape != w.shape:
        raise ValueError(f"grad shape {g.shape} does not match weight shape {w.shape}")
    if g.dtype != w.dtype:
        raise TypeError(f"grad dtype {g.dtype} does not match weight dtype {w.dtype}")
    if g.kind == DEVICE and g.size > 1 and not (g.c_contiguous and w.c_contiguous or
                                                g.f_contiguous and w.f_contiguous):
        raise ValueError("grad is not contiguous in the weight's memory order; the CUDA backend "
                         "reads gradients in place and does not copy them: pass a contiguous "
                         "gradient")
    if overlaps(g, w):
        raise ValueError("grad shares memory with the weight")


def check_state_array(what, a: ArrayDesc, shape, dtype, w: ArrayDesc):
    """A state array's part of the contract: the weight's kind and device, the expected shape
    and dtype, writeable, one contiguous block, no overlap with the weight."""
    check_same_kind(what, a, w)
    if a.shape != shape and a.shape != tuple(shape):
        raise ValueError(f"{what} has shape {a.shape}, expected {tuple(shape)}")
    if a.dtype != dtype:
        raise TypeError(f"{what} has dtype {a.dtype}, expected {np.dtype(dtype)}")
    if a.readonly:
        raise ValueError(f"{what} is read-only")
    if a.size > 1 and not (a.c_contiguous and w.c_contiguous or a.f_contiguous and w.f_contiguous):
        raise ValueError(f"{what} is not contiguous in the weight's memory order")
    if overlaps(a, w):
        raise ValueError(f"{what} shares memory with the weight")


def overlaps(a: ArrayDesc, b: ArrayDesc) -> bool:
    """Whether two arrays of one kind may share memory (their byte extents intersect)."""
    if a.kind != b.kind:
        return False
    if a.library == b.library == "numpy":
        return bool(np.may_share_memory(a.obj, b.obj))  # numpy's bounds test: the same rule
    return a.lo < b.hi and b.lo < a.hi


def check_disjoint(named):
    """``named``: ``[(name, ArrayDesc), ...]``; a ValueError for the first overlapping pair."""
    for i, (na, a) in enumerate(named):
        for nb, b in named[:i]:
            if overlaps(a, b):
                raise ValueError(f"{na} shares memory with {nb}")


# --------------------------------------------------------------------------------------------
# new arrays of the weight's own kind (create_state), on the weight's device
# --------------------------------------------------------------------------------------------
def _torch_dtype(torch, dtype):
    return {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32,
            np.dtype(np.float64): torch.float64}[np.dtype(dtype)]


def compute_dtype(a):
    """The dtype of a step's arithmetic on ``a``: float32 for a float16 device array (its
    kernels widen on load), else ``a``'s own (a host float16 step runs on float32 copies)."""
    d = describe(a, "array")
    if d.kind != HOST and d.dtype == np.float16:
        return np.dtype(np.float32)
    return d.dtype


def zeros_like(a, dtype=None):
    """Zeros shaped like ``a``, of ``a``'s kind (numpy, CuPy, torch, else numba device array),
    on its device, in its memory order."""
    d = describe(a)
    dtype = d.dtype if dtype is None else np.dtype(dtype)
    if d.kind == HOST:
        return np.zeros_like(a, dtype=dtype, order="K")
    if d.library == "cupy":
        import cupy
        with a.device:
            return cupy.zeros_like(a, dtype=dtype, order="K")
    if d.library == "torch":
        import torch
        return torch.zeros_like(a, dtype=_torch_dtype(torch, dtype),
                                memory_format=torch.preserve_format)
    return kind_ops(d.kind).zeros(d, dtype)


def zeros(shape, dtype, like):
    """C-ordered zeros of ``shape`` and ``dtype``, of ``like``'s kind (numpy, CuPy, torch, else
    numba device array) and on its device."""
    d = describe(like)
    dtype = np.dtype(dtype)
    if d.kind == HOST:
        return np.zeros(shape, dtype)
    if d.library == "cupy":
        import cupy
        with like.device:
            return cupy.zeros(shape, dtype)
    if d.library == "torch":
        import torch
        return torch.zeros(tuple(shape), dtype=_torch_dtype(torch, dtype), device=like.device)
    return kind_ops(d.kind).zeros(d, dtype, shape=tuple(shape))


def copy(a):
    """A copy of ``a`` of its own kind, device and memory order."""
    return astype(a, describe(a).dtype)


def astype(a, dtype):
    """``a`` converted to ``dtype`` (a new array of ``a``'s kind, device and memory order)."""
    d = describe(a)
    dtype = np.dtype(dtype)
    if d.kind == HOST:
        return a.astype(dtype, order="K")
    if d.library == "cupy":
        with a.device:
            return a.astype(dtype, order="K", copy=True)
    if d.library == "torch":
        import torch
        out = torch.empty_like(a, dtype=_torch_dtype(torch, dtype),
                               memory_format=torch.preserve_format)
        out.copy_(a)
        return out
    ops = kind_ops(d.kind)
    out = ops.zeros(d, dtype)
    ops.convert_into(describe(out), d)
    return out


def copy_from_host(dst, host):
    """Copy the numpy array ``host`` into ``dst`` (numpy, CuPy, torch or numba) in place."""
    d = describe(dst, "destination")
    host = np.asarray(host)
    if host.shape != d.shape:
        raise ValueError(f"cannot copy an array of shape {host.shape} into one of shape {d.shape}")
    host = host.astype(d.dtype, copy=False)
    if d.kind == HOST:
        dst[...] = host
    elif d.library == "cupy":
        dst.set(np.ascontiguousarray(host) if d.order == "C" else np.asfortranarray(host))
    elif d.library == "torch":
        import torch
        dst.copy_(torch.from_numpy(np.ascontiguousarray(host)))
    elif hasattr(dst, "copy_to_device"):
        dst.copy_to_device(np.ascontiguousarray(host) if d.order == "C" else
                           np.asfortranarray(host))
    else:
        kind_ops(d.kind).copy_from_host(d, host)


def to_host(a):
    """A numpy copy of a CUDA array (synchronising); numpy arrays are returned as they are."""
    if a is None or isinstance(a, np.ndarray):
        return a
    if isinstance(a, tuple):
        return tuple(to_host(x) for x in a)
    d = describe(a)
    if d.library == "torch":
        return a.detach().cpu().numpy()
    if d.library == "cupy":
        return a.get()
    if hasattr(a, "copy_to_host"):
        return a.copy_to_host()
    return kind_ops(d.kind).to_host(d)


def host_view(d: ArrayDesc):
    """The numpy array over a simulated device array's memory (the CUDA simulator only)."""
    buf = (ctypes.c_char * max(d.hi - d.lo, 1)).from_address(d.lo)
    flat = np.frombuffer(buf, dtype=d.dtype, count=(d.hi - d.lo) // d.dtype.itemsize)
    return flat
