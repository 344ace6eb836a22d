"""MXNet's 2-bit gradient compression (``compression_params={"type": "2bit", "threshold": t}``).

Semantics, as MXNet 1.9.1 computes them (measured: ``tests/data/mxnet/compression_2bit.json``;
the kernel is ``quantize_2bit``/``dequantize_2bit`` in src/kvstore/gradient_compression-inl.h):

* the sender keeps a float32 *residual* per element, zero at the start;
* per step and element, in float32: ``r = residual + grad``; if ``r >= t`` the code is "+t" and
  ``residual = r - t``; else if ``r <= -t`` the code is "-t" and ``residual = r + t``; else the
  code is "0" and ``residual = r``;
* a code takes 2 bits: 16 codes fill one 32-bit word. Element ``j`` (0..15) of a word sits in
  byte ``j // 4`` of the word's little-endian bytes, the first element of a byte in its two high
  bits; "+t" is ``0b11``, "-t" is ``0b10``, "0" is ``0b00`` (MXNet's layout);
* the receiver decodes every sender's codes to ``+t``, ``-t`` or ``0`` and sums them in float32,
  sender after sender.

``t`` is the threshold as MXNet reads it: the Python value goes to MXNet as ``str(value)`` and is
parsed by dmlc-core's ``ParseFloat<float>``, which is not correctly rounded (a few values land one
float32 ulp away from ``float32(t)``; :func:`mxnet_float32` reproduces it). MXNet's quantiser is
float32 only (a float64 or float16 gradient fails inside MXNet), so the toolkit refuses other
dtypes with a clear error.

The functions here work on flat float32 numpy arrays and need no MPI: :func:`quantize` and
:func:`dequantize_sum` are the two halves the distributed Trainer runs around one ``Allgather``.
"""
from __future__ import annotations

import math
import numbers
import threading

import numpy as np

__all__ = ["check_params", "mxnet_float32", "words_for", "quantize", "dequantize_sum",
           "DEFAULT_THRESHOLD", "TYPES"]

#: MXNet's default threshold when only ``{"type": "2bit"}`` is given (measured)
DEFAULT_THRESHOLD = 0.5
#: compression types MXNet 1.9.1 knows (measured: "1bit" and others are "Unknown type")
TYPES = ("2bit",)

_POS, _NEG = np.uint32(3), np.uint32(2)
_lock = threading.Lock()
_kernels: dict = {}
_PARALLEL_WORDS = 1 << 12   # 65536 elements: below, the serial loop is faster


def mxnet_float32(value: float) -> np.float32:
    """The float32 MXNet 1.9.1 reads for a float hyperparameter: ``str(value)`` parsed by
    dmlc-core's ``ParseFloat<float>`` (integer part; up to 19 fraction digits as a double ratio
    added in float32; the exponent applied with powers of ten built from 1e8 and 10 in float32).
    ``tests/data/mxnet/README.md``, "Facts", item 1, describes and measures it."""
    s = repr(float(value))
    if s.lower() in ("inf", "-inf", "nan"):
        return np.float32(float(s))
    f32 = np.float32
    i, neg = 0, False
    if s[i] in "+-":
        neg, i = s[i] == "-", i + 1
    whole = 0
    while i < len(s) and s[i].isdigit():
        whole, i = whole * 10 + int(s[i]), i + 1
    out = f32(float(whole))
    if i < len(s) and s[i] == ".":
        i += 1
        digits, scale, seen = 0, 1, 0
        while i < len(s) and s[i].isdigit():
            if seen < 19:
                digits, scale = digits * 10 + int(s[i]), scale * 10
            i, seen = i + 1, seen + 1
        out = f32(out + f32(np.float64(float(digits)) / np.float64(float(scale))))
    if i < len(s) and s[i] in "eE":
        i += 1
        down = s[i] == "-"
        if s[i] in "+-":
            i += 1
        e = int(s[i:])
        p = f32(1.0)
        with np.errstate(over="ignore", under="ignore"):  # float32 overflows as dmlc's does
            while e >= 8:
                p, e = f32(p * f32(1e8)), e - 8
            while e > 0:
                p, e = f32(p * f32(10.0)), e - 1
            out = f32(out / p) if down else f32(out * p)
    return f32(-out) if neg else out


def check_params(params):
    """Validate ``compression_params``; returns None (no compression) or
    ``{"type": "2bit", "threshold": t, "threshold32": float32 t as MXNet reads it}``.

    Errors (before anything is built): not a dict (``TypeError``); no ``type``, an unknown type,
    an unknown key, or a threshold that is not a finite number > 0 (``ValueError``), as MXNet
    1.9.1 refuses them (its messages: "Required parameter type", "Unknown type for gradient
    compression", "threshold must be greater than 0")."""
    if params is None:
        return None
    if not isinstance(params, dict):
        raise TypeError(f"compression_params must be a dict such as {{'type': '2bit', "
                        f"'threshold': 0.5}} or None, got {type(params).__name__}")
    if "type" not in params:
        raise ValueError("compression_params needs a 'type' (supported: '2bit'), e.g. "
                         "{'type': '2bit', 'threshold': 0.5}")
    ctype = params["type"]
    if ctype not in TYPES:
        raise ValueError(f"unknown gradient compression type {ctype!r}: supported is '2bit' "
                         "(the only type MXNet 1.9.1 has); pass {'type': '2bit', 'threshold': t} "
                         "or compression_params=None")
    unknown = sorted(set(params) - {"type", "threshold"})
    if unknown:
        raise ValueError(f"compression_params has unknown key(s) {unknown}; 2bit takes "
                         "'threshold' only")
    t = params.get("threshold", DEFAULT_THRESHOLD)
    if isinstance(t, bool) or not isinstance(t, numbers.Real):
        raise ValueError(f"compression threshold must be a finite number > 0, got {t!r}")
    t = float(t)
    if not math.isfinite(t) or t <= 0:
        raise ValueError(f"compression threshold must be a finite number > 0, got {t!r} "
                         "(MXNet: 'threshold must be greater than 0')")
    t32 = mxnet_float32(t)
    if not (np.isfinite(t32) and t32 > 0):
        raise ValueError(f"compression threshold {t!r} is not a finite float32 > 0 once read "
                         f"as float32 ({float(t32)!r})")
    return {"type": "2bit", "threshold": t, "threshold32": t32}


def words_for(n: int) -> int:
    """32-bit words holding ``n`` 2-bit codes."""
    return (int(n) + 15) // 16


def _compile(parallel):
    import numba
    from numba import prange, types

    opts = dict(error_model="numpy", fastmath=False, cache=True, nogil=True, boundscheck=False)
    f32, u32, u8 = types.float32, types.uint32, types.uint8
    qsig = types.void(f32[::1], f32[::1], u32[::1], f32, u8[::1], types.boolean)
    dsig = types.void(u32[:, ::1], f32[::1], f32[:, ::1])
    rng = prange if parallel else range

    # Element j of a word: bits 8*(j//4) + 6 - 2*(j%4) and the next one. Full words run a fixed
    # 16-step loop (a variable trip count was measured 5x slower); the tail word after it.
    def quantize_kernel(grad, residual, words, t, mask, use_mask):
        n = grad.shape[0]
        neg = -t
        zero = np.float32(0)
        full = n // 16
        if not use_mask:
            for w in rng(full):
                word = np.uint32(0)
                base = w * 16
                for j in range(16):
                    r = residual[base + j] + grad[base + j]
                    pos = r >= t
                    ng = r <= neg
                    residual[base + j] = r - (t if pos else (neg if ng else zero))
                    code = np.uint32(3) if pos else (np.uint32(2) if ng else np.uint32(0))
                    word |= code << np.uint32(8 * (j >> 2) + 6 - 2 * (j & 3))
                words[w] = word
            first = full
        else:
            first = 0
        for w in range(first, words.shape[0]):   # the tail word; every word under a mask
            word = np.uint32(0)
            base = w * 16
            for j in range(min(16, n - base)):
                if use_mask and mask[base + j] == 0:
                    continue
                r = residual[base + j] + grad[base + j]
                pos = r >= t
                ng = r <= neg
                residual[base + j] = r - (t if pos else (neg if ng else zero))
                code = np.uint32(3) if pos else (np.uint32(2) if ng else np.uint32(0))
                word |= code << np.uint32(8 * (j >> 2) + 6 - 2 * (j & 3))
            words[w] = word

    def dequantize_kernel(words, out, table):
        # out = ((0 + d_0) + d_1) + ...: sender after sender, each element in float32; a byte's
        # four codes are decoded through a 256 x 4 table (branches measured 10x slower)
        n = out.shape[0]
        senders = words.shape[0]
        zero = np.float32(0)
        full = n // 16
        for w in rng(full):
            base = w * 16
            for j in range(16):
                out[base + j] = zero
            for s in range(senders):
                word = words[s, w]
                for b in range(4):
                    byte = (word >> np.uint32(8 * b)) & np.uint32(255)
                    for k in range(4):
                        out[base + 4 * b + k] += table[byte, k]
        for w in range(full, words.shape[1]):
            base = w * 16
            for j in range(n - base):
                out[base + j] = zero
            for s in range(senders):
                word = words[s, w]
                for j in range(n - base):
                    byte = (word >> np.uint32(8 * (j >> 2))) & np.uint32(255)
                    out[base + j] += table[byte, j & 3]

    q = numba.njit([qsig], parallel=parallel, **opts)(quantize_kernel)
    d = numba.njit([dsig], parallel=parallel, **opts)(dequantize_kernel)
    return q, d


def _kernel(which, nwords):
    parallel = nwords >= _PARALLEL_WORDS
    with _lock:
        pair = _kernels.get(parallel)
        if pair is None:
            pair = _kernels[parallel] = _compile(parallel)
    return pair[0 if which == "q" else 1]


_NO_MASK = np.ones(1, np.uint8)


def _check_f32(name, a):
    if not (isinstance(a, np.ndarray) and a.dtype == np.float32 and a.ndim == 1
            and a.flags.c_contiguous):
        raise TypeError(f"{name} must be a 1-D C-contiguous float32 numpy array")


def quantize(grad, residual, threshold, out=None, mask=None):
    """Encode ``residual + grad`` into 2-bit codes, in place on ``residual`` (MXNet's
    ``quantize_2bit``). ``threshold`` is used as given, in float32 (pass ``check_params(...)
    ["threshold32"]`` for MXNet's reading of a Python value). ``mask`` (uint8, optional): elements
    where it is 0 are not touched (code 0, residual unchanged). Returns the uint32 words (``out``
    when given)."""
    _check_f32("grad", grad)
    _check_f32("residual", residual)
    if residual.shape != grad.shape:
        raise ValueError("residual and grad must have the same shape")
    n = grad.shape[0]
    nw = words_for(n)
    if out is None:
        out = np.empty(nw, np.uint32)
    elif out.dtype != np.uint32 or out.shape != (nw,) or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous uint32 array of {nw} words")
    use_mask = mask is not None
    if use_mask and (mask.dtype != np.uint8 or mask.shape != grad.shape):
        raise ValueError("mask must be a uint8 array shaped like grad")
    _kernel("q", nw)(grad, residual, out, np.float32(threshold),
                     mask if use_mask else _NO_MASK, use_mask)
    return out


def dequantize_sum(words, threshold, out):
    """Decode the codes of every sender (rows of ``words``, shape ``(senders, words)``) and
    write their float32 sum, sender after sender, into ``out`` (MXNet's ``dequantize_2bit`` then
    the merge)."""
    _check_f32("out", out)
    words = np.asarray(words)
    if words.ndim == 1:
        words = words.reshape(1, -1)
    if words.dtype != np.uint32 or words.shape[1] != words_for(out.shape[0]) \
            or not words.flags.c_contiguous:
        raise ValueError(f"words must be C-contiguous uint32 of shape (senders, "
                         f"{words_for(out.shape[0])})")
    _kernel("d", words.shape[1])(words, out, _table(threshold))
    return out


_tables: dict = {}


def _table(threshold):
    """Byte -> its four decoded values (``+t``, ``-t`` or 0), the first code in the high bits."""
    t = np.float32(threshold)
    key = t.tobytes()
    table = _tables.get(key)
    if table is None:
        codes = (np.arange(256)[:, None] >> (6 - 2 * np.arange(4))[None, :]) & 3
        table = np.where(codes == 3, t, np.where(codes == 2, -t, np.float32(0)))
        table = _tables[key] = np.ascontiguousarray(table, np.float32)
    return table
