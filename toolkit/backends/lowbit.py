"""Low-precision state slots for the kernels: bfloat16 arrays and 8-bit blockwise codes.

A slot held in bfloat16 is a numpy array of :data:`BFLOAT16` (``ml_dtypes``); the kernels see
its ``uint16`` view. A slot held in 8 bits is a :class:`Quantized`: one uint8 code per element,
one float32 scale per block of :data:`BLOCK` elements (C order, the last block shorter) and the
code map the codes index, :data:`SIGNED` for a moment of either sign, :data:`UNSIGNED` for one
that is never negative (bitsandbytes 0.50.2's dynamic maps, ``create_dynamic_map(signed)``,
kept here as their float32 bit patterns). Per block ``b``::

    absmax_b = max |x_i|                       (float32; NaN if any x_i is NaN)
    r_b      = 1 / max(absmax_b, 1e-38)        (float32)
    s_i      = clip(x_i * r_b, -1, 1)          (float32)
    code_i   = #{k : mid_k < s_i}              (mid_k = (map_k + map_{k+1}) / 2 in float32;
                                                a NaN s_i gives 255)
    x_i      ~ map[code_i] * absmax_b          (float32)

:func:`quantize` and :func:`dequantize` are the numpy conversions (a user's, and the tests');
the kernels find codes with the table encoder of :func:`encoder`, exact by construction.
This module needs numpy and ml_dtypes only.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import ml_dtypes
import numpy as np

__all__ = ["BLOCK", "BFLOAT16", "SIGNED", "UNSIGNED", "Quantized", "Encoder", "blocks_of",
           "midpoints", "quantize", "dequantize", "to_bfloat16", "encoder", "encode", "packed",
           "encode_packed", "PACKED_CELLS", "NAN_CELL",
           "rounding_bits", "bfloat16_stochastic", "mix", "map_kind"]

#: elements per block of an 8-bit slot (bitsandbytes' 8-bit optimizers' block size)
BLOCK = 256

#: the numpy dtype of a bfloat16 slot
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

#: float32 bit patterns of the signed map (create_dynamic_map(signed=True))
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

#: float32 bit patterns of the unsigned map (create_dynamic_map(signed=False))
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


def _frozen(bits):
    a = np.array(bits, np.uint32).view(np.float32)
    a.flags.writeable = False
    return a


#: the signed dynamic map (a first moment's): 256 sorted float32 values in [-0.993, 1]
SIGNED = _frozen(SIGNED_BITS)
#: the unsigned dynamic map (a second moment's): 256 sorted float32 values in [0, 1]
UNSIGNED = _frozen(UNSIGNED_BITS)


class Quantized:
    """A state slot held in 8 bits (module docstring): ``codes[i]`` stands for
    ``qmap[codes[i]] * absmax[i // BLOCK]`` (float32).

    Not a tuple: an optimizer's state is an array or a tuple of arrays, and a one-slot state
    (SGD's momentum) is the slot itself, so a slot must not read as a tuple of three. Its fields
    are fixed once made (the arrays themselves are written in place by a step);
    :meth:`replace` makes another with some changed."""

    __slots__ = ("codes", "absmax", "qmap")

    def __init__(self, codes, absmax, qmap):
        object.__setattr__(self, "codes", codes)     #: uint8, of the slot's shape (C order)
        object.__setattr__(self, "absmax", absmax)   #: float32 ``(blocks_of(codes.size),)``
        object.__setattr__(self, "qmap", qmap)       #: :data:`SIGNED` or :data:`UNSIGNED`

    def __setattr__(self, name, value):
        raise AttributeError(f"Quantized.{name} is fixed once made; use replace({name}=...)")

    def __reduce__(self):
        """Copies and pickles (``copy.deepcopy``, a checkpoint) restore the map by name, so a
        copy's ``qmap`` is :data:`SIGNED` or :data:`UNSIGNED` itself, as the kernels take it."""
        name = "SIGNED" if self.qmap is SIGNED else "UNSIGNED" if self.qmap is UNSIGNED \
            else None
        return _restored, (self.codes, self.absmax, self.qmap if name is None else name)

    def replace(self, **changes):
        """A Quantized with the fields in ``changes`` replaced (the arrays not copied)."""
        fields = {f: getattr(self, f) for f in self.__slots__}
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"Quantized has no field {sorted(unknown)[0]!r}")
        return Quantized(**{**fields, **changes})

    def __repr__(self):
        which = "SIGNED" if self.qmap is SIGNED else "UNSIGNED" if self.qmap is UNSIGNED \
            else "another map"
        shape = getattr(self.codes, "shape", None)
        return f"Quantized(codes of shape {shape}, {getattr(self.absmax, 'size', '?')} " \
               f"block maxima, {which})"


def _restored(codes, absmax, qmap):
    """A :class:`Quantized` from its pickled fields, a named map made the module's own."""
    if isinstance(qmap, str):
        qmap = {"SIGNED": SIGNED, "UNSIGNED": UNSIGNED}[qmap]
    return Quantized(codes, absmax, qmap)


def blocks_of(n):
    """How many blocks of :data:`BLOCK` elements ``n`` elements take (the last one shorter)."""
    return -(-int(n) // BLOCK)


def _check_map(qmap):
    if qmap is not SIGNED and qmap is not UNSIGNED:
        raise ValueError("qmap must be toolkit.backends.lowbit.SIGNED or UNSIGNED (the map "
                         "object itself), got another array")


def midpoints(qmap):
    """``(qmap[k] + qmap[k+1]) / 2`` in float32: the 255 thresholds between the codes."""
    q = np.asarray(qmap, np.float32)
    return (q[:-1] + q[1:]) / np.float32(2)


def map_kind(q):
    """"signed" or "unsigned": the kind of a :class:`Quantized` slot, by the identity of its map
    (the kernels' tables are built for :data:`SIGNED` and :data:`UNSIGNED` themselves); a
    ValueError for any other map."""
    if q.qmap is SIGNED:
        return "signed"
    if q.qmap is UNSIGNED:
        return "unsigned"
    raise ValueError("a Quantized slot's qmap must be toolkit.backends.lowbit.SIGNED or "
                     "UNSIGNED (the map object itself)")


def quantize(x, qmap):
    """The :class:`Quantized` of ``x`` (any shape, rounded to float32 first) with the code
    map ``qmap`` (module docstring): nearest code, a tie going to the lower one."""
    _check_map(qmap)
    x = np.asarray(x)
    flat = x.astype(np.float32).reshape(-1)
    n = flat.size
    nb = blocks_of(n)
    blocks = np.zeros(nb * BLOCK, np.float32)
    blocks[:n] = flat
    blocks = blocks.reshape(nb, BLOCK)
    with np.errstate(invalid="ignore", over="ignore"):
        absmax = np.max(np.abs(blocks), axis=1, initial=np.float32(0))
        absmax[np.isnan(blocks).any(axis=1)] = np.nan
        r = np.float32(1) / np.maximum(absmax, np.float32(1e-38))
        s = np.clip(blocks * r[:, None], np.float32(-1), np.float32(1))
    codes = np.searchsorted(midpoints(qmap), s, side="left")
    codes[np.isnan(s)] = 255
    codes = codes.astype(np.uint8).reshape(-1)[:n].reshape(x.shape)
    return Quantized(codes, absmax.astype(np.float32), qmap)


def dequantize(q):
    """The float32 values a :class:`Quantized` stands for, of its codes' shape."""
    _check_map(q.qmap)
    codes = np.asarray(q.codes, np.uint8)
    scale = np.repeat(np.asarray(q.absmax, np.float32), BLOCK)[:codes.size]
    with np.errstate(invalid="ignore", over="ignore"):  # a NaN or infinite scale: as IEEE
        values = q.qmap[codes.reshape(-1)] * scale
    return values.astype(np.float32).reshape(codes.shape)


# ------------------------------------------------------------------------------------------
# The table encoder: code_i = #{k : mid_k < s_i} in a few branch-free operations
# ------------------------------------------------------------------------------------------
#: float32 bits of 2**-23: every |s| below it lies in the first cell, below the smallest
#: nonzero midpoint of either map (1.6e-7 unsigned, 2.8e-7 signed)
LOW_BITS = 0x34000000
#: float32 bits of 1.0, the largest |s| (s is clipped)
ONE_BITS = 0x3F800000
#: mantissa bits that index a cell, per map (K, the corrections, is 1 for both: measured
#: in benchmarks/lowbit_cpu.py --encoder)
DEFAULT_BITS = 7


class Encoder(NamedTuple):
    """The tables of the encoder of one code map (:func:`encoder`)."""
    shift: int          #: 23 - mantissa bits: ``cell = (clamped |s| bits - LOW_BITS) >> shift``
    cells: int          #: cells per sign; the index of a negative ``s``'s cell adds ``cells``
    base: np.ndarray    #: int32 (32-bit gathers), per cell: the code of its lowest value
    thr: np.ndarray     #: float32 (K, 2*cells): ``mid[base + j]`` (+inf beyond the last)


def _cell_ends(shift, cells):
    """The magnitudes (float32 bits) of each cell's smallest and largest member."""
    c = np.arange(cells, dtype=np.int64)
    small = LOW_BITS + (c << shift)
    small[0] = 0                                 # the clamp puts every smaller |s| in cell 0
    large = np.minimum(LOW_BITS + ((c + 1) << shift) - 1, ONE_BITS)
    return small.astype(np.uint32), large.astype(np.uint32)


@functools.lru_cache(maxsize=None)
def _encoder(signed, bits):
    qmap = SIGNED if signed else UNSIGNED
    shift = 23 - bits
    cells = ((ONE_BITS - LOW_BITS) >> shift) + 1
    small, large = _cell_ends(shift, cells)
    mid = midpoints(qmap)
    sign = np.uint32(0x80000000)
    # a cell's lowest value: its smallest magnitude if positive, its largest if negative
    lowest = np.concatenate([small, large | sign]).view(np.float32)
    highest = np.concatenate([large, small | sign]).view(np.float32)
    base = np.searchsorted(mid, lowest, side="left")
    k = int(np.max(np.searchsorted(mid, highest, side="left") - base))
    padded = np.concatenate([mid, np.full(k + 1, np.inf, np.float32)])
    thr = np.stack([padded[base + j] for j in range(k)]) if k else np.zeros((0, 2 * cells),
                                                                              np.float32)
    base, thr = base.astype(np.int32), np.ascontiguousarray(thr, np.float32)
    base.flags.writeable = thr.flags.writeable = False
    return Encoder(shift, cells, base, thr)


def encoder(qmap, bits=DEFAULT_BITS):
    """The encoder tables of ``qmap`` with ``bits`` mantissa bits per cell.

    ``s`` (a float32 in [-1, 1], or NaN) falls in the cell of its sign and its magnitude's
    float32 bits clamped to ``[LOW_BITS, ONE_BITS]``, shifted right by ``23 - bits`` (its
    exponent and top ``bits`` mantissa bits); then ``code = base[cell] + sum_j (s >
    thr[j, cell])``. Exact: ``code(s) = #{k : mid_k < s}`` is monotone in ``s``; the cell's
    lowest value ``lo`` has ``base = code(lo)``, every ``s`` in the cell is ``>= lo`` and ``<=``
    its highest value ``hi``, so the midpoints below ``s`` are the ``base`` below ``lo`` and a
    prefix of ``mid[base], mid[base+1], ...`` no longer than ``K = max over cells of
    code(hi) - code(lo)``, which is how many thresholds each cell keeps (computed here from the
    tables, not assumed). A NaN compares false everywhere; the kernel selects 255 for it."""
    _check_map(qmap)
    return _encoder(qmap is SIGNED, int(bits))


#: the packed encoder's compare value for a cell without a threshold inside it (never exceeded)
NO_THRESHOLD = 0xFFFF
#: cells of the packed encoder per sign (7 mantissa bits: the high halves of LOW_BITS to ONE_BITS)
PACKED_CELLS = ((ONE_BITS - LOW_BITS) >> 16) + 1
#: the packed encoder's cell of a NaN (after both signs' cells): code 255
NAN_CELL = 2 * PACKED_CELLS


@functools.lru_cache(maxsize=None)
def _packed(signed):
    """:func:`packed`'s table, built from :func:`encoder`'s and checked against its argument."""
    enc = _encoder(signed, DEFAULT_BITS)
    if enc.shift != 16 or enc.thr.shape[0] != 1:
        raise AssertionError("the packed encoder needs cells of 16 bits and K = 1")
    c = np.arange(2 * enc.cells, dtype=np.int64)
    neg = c >= enc.cells
    high = c % enc.cells + (LOW_BITS >> 16)            # the high 16 bits of the cell's |s|
    t = enc.thr[0].view(np.uint32).astype(np.int64)
    inside = ((t & 0x7FFFFFFF) >> 16 == high) & ((t >> 31) == neg) & np.isfinite(enc.thr[0])
    # outside, the threshold is above every member (code(hi) = base): s > t is never true
    above = np.where(neg, (t >> 31 == 0) | ((t & 0x7FFFFFFF) >> 16 < high), t >> 16 > high)
    # the clamped cells (below LOW_BITS, at ONE_BITS) must have no threshold inside
    clamped = [0, enc.cells - 1, enc.cells, 2 * enc.cells - 1]
    if not np.all(inside | above | ~np.isfinite(enc.thr[0])) or np.any(inside[clamped]):
        raise AssertionError("the packed encoder's argument does not hold for this map")
    low = t & 0xFFFF
    cmp = np.where(inside, np.where(neg, NO_THRESHOLD - low, low), NO_THRESHOLD)
    table = ((enc.base.astype(np.int64) << 16) | cmp).astype(np.uint32)
    table = np.append(table, np.uint32(255 << 16 | NO_THRESHOLD))   # NAN_CELL: code 255
    table.flags.writeable = False
    return table


def packed(qmap):
    """The encoder of :func:`encoder` (7 mantissa bits, K = 1) in one uint32 word per cell:
    ``base << 16 | t``, so that a kernel makes one table lookup, not two.

    With 7 mantissa bits a cell is the high 16 bits of the clamped ``|s|`` (and the sign),
    and a threshold inside the cell shares them, so ``s > thr`` compares the low 16 bits:
    ``x = low16(|s|)`` (positive ``s``) or ``0xFFFF - low16(|s|)`` (negative: ``s > thr``
    when ``|s| < |thr|``) against ``t = x`` of the threshold; a cell whose threshold lies
    above all its members gets :data:`NO_THRESHOLD`, which no ``x`` exceeds. So ``code =
    base + (x > t)``, the same code as :func:`encoder`'s (a threshold never lies below its
    cell: ``base`` counts the midpoints below the cell's lowest value). Cell 0 of either sign
    holds the clamped magnitudes below :data:`LOW_BITS`, the last those at or above
    :data:`ONE_BITS`; no threshold lies in either (checked).
    A NaN takes the extra cell :data:`NAN_CELL` (code 255, no threshold)."""
    _check_map(qmap)
    return _packed(qmap is SIGNED)


def encode_packed(s, table):
    """:func:`packed`'s encoder in numpy on float32 ``s`` (the compiled one's source of truth in
    the tests): codes as int64, 255 for a NaN."""
    s = np.asarray(s, np.float32)
    u = s.view(np.uint32).astype(np.int64)
    mag = np.clip(u & 0x7FFFFFFF, LOW_BITS, ONE_BITS)
    neg = u >> 31
    cell = (mag >> 16) - (LOW_BITS >> 16) + neg * PACKED_CELLS
    cell[np.isnan(s)] = NAN_CELL
    x = (mag & 0xFFFF) ^ (neg * 0xFFFF)
    e = table[cell].astype(np.int64)
    return (e >> 16) + (x > (e & 0xFFFF))


def encode(s, enc):
    """The table encoder in numpy on float32 ``s`` (the compiled one's source of truth in the
    tests): codes as int64, 255 for a NaN."""
    s = np.asarray(s, np.float32)
    u = s.view(np.uint32)
    mag = np.clip(u & np.uint32(0x7FFFFFFF), LOW_BITS, ONE_BITS) - np.uint32(LOW_BITS)
    cell = (mag >> np.uint32(enc.shift)) + (u >> np.uint32(31)) * np.uint32(enc.cells)
    code = enc.base[cell].astype(np.int64)
    for t in enc.thr:
        code += s > t[cell]
    return np.where(np.isnan(s), 255, code)


# ------------------------------------------------------------------------------------------
# Stochastic rounding to bfloat16
# ------------------------------------------------------------------------------------------
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def mix(x):
    """SplitMix64's finaliser on uint64 (an array or a scalar, wrapping), as
    toolkit.backends.noise mixes; plain enough for a CUDA device function
    (``toolkit.backends.cuda_lowbit`` compiles it)."""
    x = x + _GAMMA
    x = (x ^ (x >> _S30)) * _C1
    x = (x ^ (x >> _S27)) * _C2
    return x ^ (x >> _S31)


def rounding_bits(key, n, slot):
    """The 16 random bits (uint32) that round element ``i`` of state slot ``slot`` (0, 1, 2)
    stochastically: bits ``16*slot`` to ``16*slot + 15`` of ``mix(key + i)``, the counter-based
    generator of the SGLD noise (``key``: ``toolkit.backends.noise.stream_key(seed, stream,
    step)``), so that every backend rounds alike."""
    i = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = mix(np.uint64(int(key) & 0xFFFFFFFFFFFFFFFF) + i)
    return ((h >> np.uint64(16 * int(slot))) & np.uint64(0xFFFF)).astype(np.uint32)


def bfloat16_stochastic(x, key, slot):
    """``x`` (flat) rounded to float32, then to bfloat16 stochastically (Zamirai et al., 2020,
    "Revisiting BFloat16 Training"): the float32 bits plus :func:`rounding_bits`, truncated
    to the high half, so a value rounds up with probability its distance from the lower
    bfloat16 over the gap (unbiased in expectation); a NaN is ``0xFFFF``. Returns the bits."""
    f = np.asarray(x).astype(np.float32).reshape(-1)
    u = f.view(np.uint32)
    out = ((u + rounding_bits(key, f.size, slot)) >> np.uint32(16)).astype(np.uint16)
    out[np.isnan(f)] = 0xFFFF
    return out


def to_bfloat16(x):
    """``x`` rounded to float32, then to the nearest bfloat16 (ties to even), as an array of
    :data:`BFLOAT16` of ``x``'s shape; a NaN is ``0xFFFF``, as the kernels store it (where
    ``ml_dtypes``' conversion keeps the NaN's sign and payload)."""
    f = np.asarray(x).astype(np.float32)
    u = f.reshape(-1).view(np.uint32).astype(np.uint64)  # 1-D: a 0-d array's sums are scalars
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    bits[np.isnan(f.reshape(-1))] = 0xFFFF
    return bits.view(BFLOAT16).reshape(f.shape)
