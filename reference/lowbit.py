"""Low-precision optimizer states, defined exactly (``state_dtype``, coming: bfloat16 and 8-bit
states): bfloat16 rounding and 8-bit blockwise quantization with a dynamic code map.

This module is the oracle's definition of what a state of ``state_dtype="int8"`` holds and how
it is made; the kernels are checked against it code for code. It needs numpy only.

**The dynamic maps** (:data:`SIGNED`, :data:`UNSIGNED`): 256 float32 values each, sorted, as
bitsandbytes 0.50.2 makes them (``bitsandbytes.functional.create_dynamic_map(signed)``, with
its defaults ``max_exponent_bits=7, total_bits=8``; Dettmers et al., "8-bit Optimizers via
Block-wise Quantization", ICLR 2022, section 2, "dynamic tree quantization"): for each decade
``10^(i-6)``, ``i = 0..6``, the midpoints of ``2^i + 1`` (signed; ``2^(i+1) + 1`` unsigned)
points evenly spaced over [0.1, 1], scaled by the decade, with their negatives for the signed
map, and 0 and 1. They are data here (:data:`SIGNED_BITS`, :data:`UNSIGNED_BITS`, their float32
bit patterns), not recomputed: bitsandbytes forms them with ``torch.linspace`` in float32, whose
last bits this module does not reproduce. A signed map is for a first moment (either sign), an
unsigned one for a second moment (never negative).

**Blockwise quantization** (:func:`quantize`, :func:`dequantize`), of a state ``x`` flattened in C
order and cut into blocks of :data:`BLOCK` elements (the last one shorter), each block ``b``:

    absmax_b = max |x_i| over the block                     (float32; NaN if any x_i is NaN)
    r_b      = 1 / max(absmax_b, 1e-38)                     (float32)
    s_i      = clip(x_i * r_b, -1, 1)                       (float32)
    code_i   = the first k with s_i <= mid_k, else 255      (mid_k = (map_k + map_{k+1}) / 2,
                                                             float32: the nearest map value,
                                                             a tie going to the lower one)
    x_i      ~ map[code_i] * absmax_b                       (float32: dequantize)

bitsandbytes' portable backend (``backends/default/ops.py``, ``quantize_blockwise``:
``torch.bucketize`` on the midpoints) computes exactly this; its 8-bit optimizers on the CPU
dequantize, update in float32 and quantize again with the same block size
(``backends/cpu/ops.py``, ``_optimizer_update_8bit_blockwise_cpu``, ``blocksize = 256``), but
where its native library is loaded they quantize with ``cquantize_blockwise_cpu_fp32``, which
in 0.50.2 does not take the nearest code (an exact zero gets code 131 of the signed map).

**bfloat16** (:func:`bfloat16`): a float32 value rounded to the nearest bfloat16 (ties to even),
as torch converts: float64 values are rounded to float32 first.

**A step with held states** (:func:`step`): a state slot of ``state_dtype`` ("float32",
"bfloat16" or "int8") holds what :func:`hold` makes of the float32 values a kernel computed;
the values it holds (:func:`values`, exact) enter the optimizer's float64 step, and each new
slot is held again from its value rounded to float32. On Tracked values (the oracle's error
bounds) :func:`hold` also says which elements a rounding within their bound could hold
otherwise (:func:`flips`): a bfloat16 value within its bound of a rounding boundary, a code
within its bound of a midpoint, or a block whose maximum is itself uncertain. A kernel's held
state is then compared code for code, the flips found and counted, not tolerated wholesale.
"""
from __future__ import annotations

import numpy as np

from .error_bound import Tracked
from .noise import splitmix64

__all__ = ["BLOCK", "SIGNED", "UNSIGNED", "SIGNED_BITS", "UNSIGNED_BITS", "STATE_DTYPES",
           "code_map", "midpoints", "quantize", "dequantize", "bfloat16", "rounding_bits",
           "blocks_of", "hold",
           "values", "flips", "held", "step"]

#: what a state slot may be held in
STATE_DTYPES = ("float32", "bfloat16", "int8")

#: elements per block: bitsandbytes' 8-bit optimizers' (backends/cpu/ops.py, blocksize = 256)
BLOCK = 256

SIGNED_BITS = (
    0xBF7E3333, 0xBF7A999A, 0xBF770000, 0xBF736666, 0xBF6FCCCD, 0xBF6C3333, 0xBF68999A, 0xBF650000,
    0xBF616666, 0xBF5DCCCD, 0xBF5A3333, 0xBF56999A, 0xBF530000, 0xBF4F6666, 0xBF4BCCCD, 0xBF483333,
    0xBF44999A, 0xBF410000, 0xBF3D6666, 0xBF39CCCD, 0xBF363334, 0xBF32999A, 0xBF2F0000, 0xBF2B6666,
    0xBF27CCCD, 0xBF243334, 0xBF20999A, 0xBF1D0000, 0xBF196666, 0xBF15CCCD, 0xBF123334, 0xBF0E999A,
    0xBF0B0000, 0xBF076666, 0xBF03CCCC, 0xBF003333, 0xBEF93332, 0xBEF20000, 0xBEEACCCC, 0xBEE3999A,
    0xBEDC6666, 0xBED53333, 0xBECE0000, 0xBEC6CCCC, 0xBEBF999A, 0xBEB86666, 0xBEB13333, 0xBEAA0000,
    0xBEA2CCCC, 0xBE9B999A, 0xBE946666, 0xBE8D3334, 0xBE860000, 0xBE7D9999, 0xBE6F3333, 0xBE60CCCD,
    0xBE526666, 0xBE440000, 0xBE35999A, 0xBE273333, 0xBE18CCCD, 0xBE0A6666, 0xBDF80000, 0xBDDB3334,
    0xBDC9EB85, 0xBDC428F7, 0xBDBE6667, 0xBDB8A3D7, 0xBDB2E148, 0xBDAD1EB8, 0xBDA75C2A, 0xBDA1999A,
    0xBD9BD70A, 0xBD96147B, 0xBD9051EB, 0xBD8A8F5D, 0xBD84CCCD, 0xBD7E147B, 0xBD728F5D, 0xBD670A3D,
    0xBD5B851F, 0xBD500000, 0xBD447AE1, 0xBD38F5C3, 0xBD2D70A3, 0xBD21EB85, 0xBD166667, 0xBD0AE148,
    0xBCFEB852, 0xBCE7AE15, 0xBCD0A3D7, 0xBCB9999A, 0xBCA28F5D, 0xBC8B851F, 0xBC68F5C3, 0xBC3AE148,
    0xBC1F3B64, 0xBC160418, 0xBC0CCCCD, 0xBC039581, 0xBBF4BC6A, 0xBBE24DD3, 0xBBCFDF3B, 0xBBBD70A4,
    0xBBAB020D, 0xBB989374, 0xBB8624DD, 0xBB676C8A, 0xBB428F5C, 0xBB1DB22D, 0xBAF1A9FC, 0xBAA7EF9D,
    0xBA7765FF, 0xBA59E83E, 0xBA3C6A80, 0xBA1EECC1, 0xBA016F01, 0xB9C7E283, 0xB98CE705, 0xB923D70B,
    0xB8BA1F4B, 0xB88AEFB3, 0xB8378034, 0xB7B24206, 0xB70205FF, 0xB65A1A94, 0xB513A3B7, 0x00000000,
    0x3513A3B7, 0x365A1A94, 0x370205FF, 0x37B24206, 0x38378034, 0x388AEFB3, 0x38BA1F4B, 0x3923D70B,
    0x398CE705, 0x39C7E283, 0x3A016F01, 0x3A1EECC1, 0x3A3C6A80, 0x3A59E83E, 0x3A7765FF, 0x3AA7EF9D,
    0x3AF1A9FC, 0x3B1DB22D, 0x3B428F5C, 0x3B676C8A, 0x3B8624DD, 0x3B989374, 0x3BAB020D, 0x3BBD70A4,
    0x3BCFDF3B, 0x3BE24DD3, 0x3BF4BC6A, 0x3C039581, 0x3C0CCCCD, 0x3C160418, 0x3C1F3B64, 0x3C3AE148,
    0x3C68F5C3, 0x3C8B851F, 0x3CA28F5D, 0x3CB9999A, 0x3CD0A3D7, 0x3CE7AE15, 0x3CFEB852, 0x3D0AE148,
    0x3D166667, 0x3D21EB85, 0x3D2D70A3, 0x3D38F5C3, 0x3D447AE1, 0x3D500000, 0x3D5B851F, 0x3D670A3D,
    0x3D728F5D, 0x3D7E147B, 0x3D84CCCD, 0x3D8A8F5D, 0x3D9051EB, 0x3D96147B, 0x3D9BD70A, 0x3DA1999A,
    0x3DA75C2A, 0x3DAD1EB8, 0x3DB2E148, 0x3DB8A3D7, 0x3DBE6667, 0x3DC428F7, 0x3DC9EB85, 0x3DDB3334,
    0x3DF80000, 0x3E0A6666, 0x3E18CCCD, 0x3E273333, 0x3E35999A, 0x3E440000, 0x3E526666, 0x3E60CCCD,
    0x3E6F3333, 0x3E7D9999, 0x3E860000, 0x3E8D3334, 0x3E946666, 0x3E9B999A, 0x3EA2CCCC, 0x3EAA0000,
    0x3EB13333, 0x3EB86666, 0x3EBF999A, 0x3EC6CCCC, 0x3ECE0000, 0x3ED53333, 0x3EDC6666, 0x3EE3999A,
    0x3EEACCCC, 0x3EF20000, 0x3EF93332, 0x3F003333, 0x3F03CCCC, 0x3F076666, 0x3F0B0000, 0x3F0E999A,
    0x3F123334, 0x3F15CCCD, 0x3F196666, 0x3F1D0000, 0x3F20999A, 0x3F243334, 0x3F27CCCD, 0x3F2B6666,
    0x3F2F0000, 0x3F32999A, 0x3F363334, 0x3F39CCCD, 0x3F3D6666, 0x3F410000, 0x3F44999A, 0x3F483333,
    0x3F4BCCCD, 0x3F4F6666, 0x3F530000, 0x3F56999A, 0x3F5A3333, 0x3F5DCCCD, 0x3F616666, 0x3F650000,
    0x3F68999A, 0x3F6C3333, 0x3F6FCCCD, 0x3F736666, 0x3F770000, 0x3F7A999A, 0x3F7E3333, 0x3F800000,
)

UNSIGNED_BITS = (
    0x00000000, 0x34AE7BAA, 0x35500998, 0x360E9B38, 0x3692CCF6, 0x36DE4C51, 0x3714E5D5, 0x3783126E,
    0x37E171A0, 0x381FE868, 0x384F1800, 0x387E479A, 0x3896BB99, 0x38AE5364, 0x38C5EB31, 0x3906594B,
    0x394154CA, 0x397C5049, 0x399BA5E4, 0x39B923A2, 0x39D6A163, 0x39F41F22, 0x3A08CE71, 0x3A178D50,
    0x3A264C30, 0x3A350B10, 0x3A43C9EF, 0x3A5288D0, 0x3A6147AF, 0x3A70068E, 0x3A7EC56E, 0x3A958106,
    0x3ABA5E35, 0x3ADF3B64, 0x3B020C4A, 0x3B147AE1, 0x3B26E978, 0x3B395810, 0x3B4BC6A7, 0x3B5E3540,
    0x3B70A3D7, 0x3B818937, 0x3B8AC082, 0x3B93F7CF, 0x3B9D2F1A, 0x3BA66666, 0x3BAF9DB2, 0x3BB8D4FD,
    0x3BC20C4A, 0x3BCB4395, 0x3BD47AE1, 0x3BDDB22E, 0x3BE6E978, 0x3BF020C5, 0x3BF9580F, 0x3C0147AE,
    0x3C05E354, 0x3C0A7EF9, 0x3C0F1AA0, 0x3C13B645, 0x3C1851EB, 0x3C1CED92, 0x3C218937, 0x3C2F5C2A,
    0x3C466667, 0x3C5D70A3, 0x3C747AE2, 0x3C85C28F, 0x3C9147AF, 0x3C9CCCCD, 0x3CA851EB, 0x3CB3D70B,
    0x3CBF5C29, 0x3CCAE147, 0x3CD66667, 0x3CE1EB87, 0x3CED70A3, 0x3CF8F5C3, 0x3D023D70, 0x3D080000,
    0x3D0DC28F, 0x3D13851F, 0x3D1947AF, 0x3D1F0A3D, 0x3D24CCCD, 0x3D2A8F5C, 0x3D3051EB, 0x3D36147B,
    0x3D3BD70A, 0x3D41999A, 0x3D475C28, 0x3D4D1EB8, 0x3D52E147, 0x3D58A3D7, 0x3D5E6667, 0x3D6428F7,
    0x3D69EB87, 0x3D6FAE15, 0x3D7570A3, 0x3D7B3333, 0x3D807AE2, 0x3D835C2A, 0x3D863D71, 0x3D891EB8,
    0x3D8C0000, 0x3D8EE148, 0x3D91C290, 0x3D94A3D7, 0x3D97851F, 0x3D9A6667, 0x3D9D47AF, 0x3DA028F6,
    0x3DA30A3E, 0x3DA5EB85, 0x3DA8CCCD, 0x3DABAE15, 0x3DAE8F5C, 0x3DB170A4, 0x3DB451EB, 0x3DB73333,
    0x3DBA147B, 0x3DBCF5C3, 0x3DBFD70B, 0x3DC2B852, 0x3DC5999A, 0x3DC87AE2, 0x3DCB5C29, 0x3DD40000,
    0x3DE26666, 0x3DF0CCCD, 0x3DFF3333, 0x3E06CCCC, 0x3E0E0000, 0x3E153334, 0x3E1C6666, 0x3E23999A,
    0x3E2ACCCC, 0x3E320000, 0x3E393334, 0x3E406666, 0x3E47999A, 0x3E4ECCCC, 0x3E560000, 0x3E5D3334,
    0x3E646666, 0x3E6B999A, 0x3E72CCCC, 0x3E7A0000, 0x3E809999, 0x3E843333, 0x3E87CCCD, 0x3E8B6666,
    0x3E8F0000, 0x3E92999A, 0x3E963333, 0x3E99CCCC, 0x3E9D6666, 0x3EA10000, 0x3EA4999A, 0x3EA83333,
    0x3EABCCCC, 0x3EAF6666, 0x3EB30000, 0x3EB6999A, 0x3EBA3333, 0x3EBDCCCC, 0x3EC16666, 0x3EC50000,
    0x3EC8999A, 0x3ECC3333, 0x3ECFCCCC, 0x3ED36666, 0x3ED70000, 0x3EDA999A, 0x3EDE3333, 0x3EE1CCCC,
    0x3EE56666, 0x3EE90000, 0x3EEC999A, 0x3EF03333, 0x3EF3CCCC, 0x3EF76666, 0x3EFB0000, 0x3EFE9999,
    0x3F01199A, 0x3F02E666, 0x3F04B333, 0x3F068000, 0x3F084CCC, 0x3F0A199A, 0x3F0BE666, 0x3F0DB334,
    0x3F0F8000, 0x3F114CCD, 0x3F13199A, 0x3F14E666, 0x3F16B334, 0x3F188000, 0x3F1A4CCD, 0x3F1C199A,
    0x3F1DE666, 0x3F1FB334, 0x3F218000, 0x3F234CCD, 0x3F25199A, 0x3F26E666, 0x3F28B334, 0x3F2A8000,
    0x3F2C4CCD, 0x3F2E199A, 0x3F2FE666, 0x3F31B334, 0x3F338000, 0x3F354CCD, 0x3F37199A, 0x3F38E666,
    0x3F3AB334, 0x3F3C8000, 0x3F3E4CCD, 0x3F40199A, 0x3F41E666, 0x3F43B334, 0x3F458000, 0x3F474CCC,
    0x3F49199A, 0x3F4AE666, 0x3F4CB334, 0x3F4E8000, 0x3F504CCC, 0x3F52199A, 0x3F53E666, 0x3F55B334,
    0x3F578000, 0x3F594CCC, 0x3F5B199A, 0x3F5CE666, 0x3F5EB334, 0x3F608000, 0x3F624CCC, 0x3F64199A,
    0x3F65E666, 0x3F67B334, 0x3F698000, 0x3F6B4CCC, 0x3F6D199A, 0x3F6EE666, 0x3F70B334, 0x3F728000,
    0x3F744CCC, 0x3F76199A, 0x3F77E666, 0x3F79B334, 0x3F7B8000, 0x3F7D4CCC, 0x3F7F199A, 0x3F800000,
)

#: the maps as float32 arrays (read-only)
SIGNED = np.array(SIGNED_BITS, np.uint32).view(np.float32)
UNSIGNED = np.array(UNSIGNED_BITS, np.uint32).view(np.float32)
SIGNED.flags.writeable = False
UNSIGNED.flags.writeable = False


def code_map(signed):
    """The dynamic map of a first moment (``signed``) or a second moment."""
    return SIGNED if signed else UNSIGNED


def midpoints(code):
    """``(code[k] + code[k+1]) / 2`` in float32: the 255 thresholds between the codes."""
    code = np.asarray(code, np.float32)
    return (code[:-1] + code[1:]) / np.float32(2)


def blocks_of(n, block=BLOCK):
    """How many blocks ``n`` elements take (the last one shorter)."""
    return -(-int(n) // int(block))


def _blocked(x, block):
    flat = np.asarray(x, np.float32).reshape(-1)
    n = flat.size
    nb = blocks_of(n, block)
    padded = np.zeros(nb * block, np.float32)
    padded[:n] = flat
    return padded.reshape(nb, block), n


def quantize(x, signed, block=BLOCK):
    """``(codes, absmax)`` of ``x`` (rounded to float32 first): uint8 codes of ``x``'s shape and
    one float32 absolute maximum per block (module docstring)."""
    shape = np.shape(x)
    blocks, n = _blocked(x, block)
    with np.errstate(invalid="ignore"):
        absmax = np.max(np.abs(blocks), axis=1)            # padding zeros change no maximum
        nan = np.isnan(blocks).any(axis=1)
    absmax = np.where(nan, np.float32(np.nan), absmax).astype(np.float32)
    r = np.float32(1) / np.maximum(absmax, np.float32(1e-38))
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.clip(blocks * r[:, None], np.float32(-1), np.float32(1))
    codes = np.searchsorted(midpoints(code_map(signed)), s, side="left")
    codes = np.where(np.isnan(s), 255, codes).astype(np.uint8)
    return codes.reshape(-1)[:n].reshape(shape), absmax


def dequantize(codes, absmax, signed, block=BLOCK):
    """The float32 values of ``codes`` (any shape) with their blocks' ``absmax``."""
    codes = np.asarray(codes, np.uint8)
    flat = codes.reshape(-1)
    scale = np.repeat(np.asarray(absmax, np.float32), block)[:flat.size]
    return (code_map(signed)[flat] * scale).astype(np.float32).reshape(codes.shape)


def bfloat16(x, bits=None):
    """``x`` rounded to float32, then to bfloat16, as float32 values (a NaN stays a NaN, an
    infinity an infinity): to the nearest (ties to even), or, given ``bits`` (16 random bits
    per element, :func:`rounding_bits`), stochastically: the float32 bits plus ``bits``, cut to
    the high half (Zamirai et al. 2020, "Revisiting BFloat16 Training": a value rounds up with
    probability its distance from the bfloat16 below over the gap)."""
    f = np.asarray(x, np.float64).astype(np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    if bits is None:
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    else:
        u = ((u + np.asarray(bits, np.uint64).reshape(f.shape)) >> 16) << 16
    out = u.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(f), np.float32(np.nan), out)


def rounding_bits(key, n, slot):
    """The 16 random bits (as uint64) that round element ``i`` of state slot ``slot`` (its
    position among the step's state arrays, 0 to 2) stochastically: bits ``16*slot`` up of
    ``splitmix64(key + i)``, ``key`` a ``reference.noise.stream_key(seed, stream, step)`` (the
    counter-based generator of SGLD's noise: every backend draws the same)."""
    i = np.arange(int(n), dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = splitmix64(np.uint64(int(key) & 0xFFFFFFFFFFFFFFFF) + i)
    return (h >> np.uint64(16 * int(slot))) & np.uint64(0xFFFF)


def _value_err(x):
    """``(value, err)`` of a Tracked or plain array."""
    if isinstance(x, Tracked):
        return np.asarray(x.value, np.float64), np.asarray(x.err, np.float64)
    v = np.asarray(x, np.float64)
    return v, np.zeros(v.shape)


def hold(x, state_dtype, signed=True, block=BLOCK, bits=None):
    """What a slot of ``state_dtype`` holds for the values ``x`` (plain or Tracked), rounded to
    float32 first as a kernel computes them: float32 values ("float32", "bfloat16": bfloat16
    values as float32, stochastically rounded with ``bits``) or ``(codes, absmax)``
    ("int8")."""
    v, _ = _value_err(x)
    f = v.astype(np.float32)
    if state_dtype == "float32":
        return f
    if state_dtype == "bfloat16":
        return bfloat16(f, bits)
    if state_dtype == "int8":
        return quantize(f, signed, block)
    raise ValueError(f"state_dtype must be one of {STATE_DTYPES}, got {state_dtype!r}")


def values(held, state_dtype, signed=True, block=BLOCK):
    """The float64 values a held slot stands for, exactly."""
    if state_dtype == "int8":
        return dequantize(*held, signed, block).astype(np.float64)
    return np.asarray(held, np.float32).astype(np.float64)


def flips(x, state_dtype, signed=True, block=BLOCK, scale=1.0, bits=None):
    """Per element of the Tracked (or plain) ``x``: whether a value within its error bound could
    be held otherwise than ``x``'s own value is (module docstring). Rounding to bfloat16 and
    finding a code are monotone, so that is whether the two ends of the interval are held
    differently (a code's interval widened by its block maximum's own bound); ``scale``
    multiplies the bound (the checks' safety factor); ``bits``: a stochastic rounding's (for a
    fixed draw it is monotone too). All False for float32 (its rounding is the bound's own) and
    for a plain array."""
    v, e = _value_err(x)
    e = scale * e
    if state_dtype not in STATE_DTYPES:
        raise ValueError(f"state_dtype must be one of {STATE_DTYPES}, got {state_dtype!r}")
    if state_dtype == "float32" or not np.any(e > 0):
        return np.zeros(v.shape, bool)
    with np.errstate(invalid="ignore", over="ignore"):
        if state_dtype == "bfloat16":
            lo, hi = bfloat16(v - e, bits), bfloat16(v + e, bits)
            return ~((lo == hi) | np.isnan(v))
        shape = v.shape
        flat_v, flat_e = v.reshape(-1), e.reshape(-1)
        n = flat_v.size
        nb = blocks_of(n, block)
        pv, pe = np.zeros(nb * block), np.zeros(nb * block)
        pv[:n], pe[:n] = flat_v, flat_e
        pv, pe = pv.reshape(nb, block), pe.reshape(nb, block)
        top = np.max(np.abs(pv), axis=1)
        # the block's maximum may be another element's, or its own shifted within its bound
        top_err = np.max(np.where(np.abs(pv) + pe >= top[:, None], pe, 0.0), axis=1)
        s = pv / top[:, None]
        s_err = (pe + np.abs(s) * top_err[:, None]) / np.maximum(top - top_err, 0.0)[:, None]
        mids = midpoints(code_map(signed)).astype(np.float64)
        lo = np.searchsorted(mids, np.clip(s - s_err, -1, 1), side="left")
        hi = np.searchsorted(mids, np.clip(s + s_err, -1, 1), side="left")
        out = (lo != hi) | ~np.isfinite(s_err)
        out &= (top > 0)[:, None]
    return out.reshape(-1)[:n].reshape(shape)


def held(x, state_dtype, signed=True, block=BLOCK, scale=1.0, slack=0.0):
    """The values a slot of ``state_dtype`` holds for the Tracked ``x`` (:func:`hold`,
    :func:`values`), as a Tracked whose bound covers every value that holding a value within
    ``scale`` times ``x``'s bound could stand for: the neighbouring bfloat16 (float32) value
    past a rounding boundary, the neighbouring codes past a midpoint, each code times a block
    maximum within that maximum's own bound (and its rounding to float32). A later step run on
    it bounds an implementation that held the moment otherwise at a tie, where it did; every
    other element carries no bound (bfloat16) or its block maximum's (int8). ``slack``: a
    relative error of ``s`` an implementation's own scaling may add (a division instead of the
    reciprocal's product, another midpoint test: a few float32 roundings). Near ties are kept;
    a plain ``x`` gives plain values."""
    v, e = _value_err(x)
    h = hold(x, state_dtype, signed, block)
    out = values(h, state_dtype, signed, block)
    if not isinstance(x, Tracked):
        return out
    e = scale * e
    with np.errstate(invalid="ignore", over="ignore"):
        if state_dtype == "int8":
            err = _code_spread(v, e, h, signed, block, slack)
        else:
            near = bfloat16 if state_dtype == "bfloat16" else \
                (lambda y: np.asarray(y, np.float64).astype(np.float32))
            lo, hi = near(v - e).astype(np.float64), near(v + e).astype(np.float64)
            err = np.maximum(np.abs(lo - out), np.abs(hi - out))
    bad = ~np.isfinite(err) | ~np.isfinite(out)
    return Tracked(out, np.where(bad, np.inf, err), x.tie | bad, u=x.u, tiny=x.tiny)


def _code_spread(v, e, h, signed, block, slack):
    """Per element: how far the int8 value of a value within ``e`` of ``v`` can lie from the
    value of ``h = (codes, absmax)``, the oracle's holding of ``v`` (:func:`held`): the codes
    of the two ends of the interval against its own, at its block maximum, and every code
    times the bound of the maximum (an element's own bound where it could be the maximum,
    and the maximum's rounding to float32)."""
    shape, n = v.shape, v.size
    nb = blocks_of(n, block)
    pv, pe, codes = np.zeros(nb * block), np.zeros(nb * block), np.zeros(nb * block, np.intp)
    pv[:n], pe[:n], codes[:n] = v.reshape(-1), e.reshape(-1), h[0].reshape(-1)
    pv, pe, codes = pv.reshape(nb, block), pe.reshape(nb, block), codes.reshape(nb, block)
    top = np.max(np.abs(pv), axis=1)
    raw = np.max(np.where(np.abs(pv) + pe >= top[:, None], pe, 0.0), axis=1)
    top_err = np.where((top == 0) & (raw == 0), 0.0,  # a block of exact zeros stays exact
                       raw + np.spacing(np.asarray(h[1], np.float32)).astype(np.float64))
    s = pv / np.where(top > 0, top, 1.0)[:, None]
    s_err = (pe + np.abs(s) * top_err[:, None]) / np.maximum(top - top_err, 0.0)[:, None] + \
        slack * np.abs(s)
    qmap = code_map(signed).astype(np.float64)
    mids = midpoints(code_map(signed)).astype(np.float64)
    lo = np.searchsorted(mids, np.clip(s - s_err, -1, 1), side="left")
    hi = np.searchsorted(mids, np.clip(s + s_err, -1, 1), side="left")
    spread = (np.maximum(np.abs(qmap[lo] - qmap[codes]), np.abs(qmap[hi] - qmap[codes])) *
              np.asarray(h[1], np.float64)[:, None] +
              np.maximum(np.abs(qmap[lo]), np.abs(qmap[hi])) * top_err[:, None])
    return spread.reshape(-1)[:n].reshape(shape)


def step(module, weight, grad, held, *, state_dtype, signs, block=BLOCK, scale=1.0, extra=None,
         bits=None, **kwargs):
    """One step of the reference ``module`` (``reference.<name>``) whose state slots are held
    in ``state_dtype``: ``held`` maps each slot to what :func:`hold` made of it, ``signs`` each
    slot to whether its values take either sign (a first moment: the signed map) or none (a
    second moment: the unsigned one). The held values enter ``module.step`` exactly (as
    float64, or Tracked where ``weight`` is); ``kwargs`` are its own. Returns ``(weight,
    new_held, new_values, flipped)``: the new held slots, the float64 (or Tracked) values they
    were held from, and per slot :func:`flips` (the bound times ``scale``). ``extra``: more of
    the state dict that is not held (a schedule's running product), passed as it is;
    ``bits``: per slot, the random bits of a stochastic rounding to bfloat16
    (:func:`rounding_bits`), None to the nearest."""
    state = dict(extra or {})
    for name, h in held.items():
        x = values(h, state_dtype, signs[name], block)
        # the held values are exact inputs of the step: Tracked with no error where the
        # weight is Tracked
        state[name] = Tracked(x, u=weight.u, tiny=weight.tiny) if isinstance(weight, Tracked) \
            else x
    w, new = module.step(weight, grad, state, **kwargs)
    bits = bits or {}
    out_held = {k: hold(v, state_dtype, signs[k], block, bits.get(k)) for k, v in new.items()
                if k in signs}
    flipped = {k: flips(v, state_dtype, signs[k], block, scale, bits.get(k))
               for k, v in new.items() if k in signs}
    return w, out_held, new, flipped
