"""The tiny-matrix passes of a factored step (``toolkit.backends.cpu_factored``): matrices of
fewer than 4 rows and columns, many at once, each position's values gathered in a vector of
their own so that the statistics' roots and divisions run a vector of matrices at a time.

* :func:`tiny_pass_of`, any such shape: each position gathered by a strided loop;
* :func:`tiny33_pass_of`, the 3 x 3 kernels of a convolution (most of a CNN's weights): blocks
  of :data:`BLOCK33` matrices transposed whole by :func:`_gather9_of` and :func:`_scatter9_of`
  (a vector load and shuffles: LLVM's loop vectoriser takes a stride of 9 element by element,
  gathers or scatters, three to four times slower; the store into ``u`` non-temporal), the statistics of a matrix in one loop
  (each of its nine values a local), the direction by position.

Both take the same arithmetic in the same order (``cpu_factored``'s module docstring gives
the orders); the transposes move values and compute nothing.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic
from numba.np.unsafe.ndarray import to_fixed_tuple

from .jit import fma

__all__ = ["BLOCK33", "BLOCKS33", "tiny_pass_of", "tiny33_pass_of"]

def _block33():
    """The 3 x 3 matrices one transpose moves, for the machine the kernels are compiled for
    (numba's ``NUMBA_CPU_NAME`` and ``NUMBA_CPU_FEATURES`` where set, else the host's; numba's
    cache keys compiled code by the same CPU): 16, a 512-bit vector of float32 values per
    position, where AVX-512 is there (the size chosen on such a machine, not compared with
    smaller blocks there); else 4. On AVX2 (AMD Zen 3) LLVM lowers the transposes of 16
    matrices, shuffles of 144 values (288 bytes: nine AVX2 registers of float32), into far
    more shuffle, blend, insert and extract instructions than those of 4 (the compiled
    float32 pass holds 461 of them against 166), and the 3 x 3 pass over ResNet-50's
    convolutions, one thread, is about 1.5 times faster in float32 and 2 times in float64
    with 4, the same bits (measured: benchmarks/results/README.md, "Adafactor")."""
    from llvmlite import binding
    from numba.core import config
    features = (config.CPU_FEATURES or "") if config.CPU_NAME else \
        binding.get_host_cpu_features().flatten()
    return 16 if "+avx512f" in features.split(",") else 4


#: the block sizes the 3 x 3 pass takes (each divides 16: ``FactoredLayout.tiny33``'s work
#: items start at multiples of 16)
BLOCKS33 = (4, 16)
#: the 3 x 3 matrices one transpose moves on this machine (:func:`_block33`)
BLOCK33 = _block33()


def _block_of(context, builder, arrty, arr, offset, count):
    """A pointer to ``count`` elements of ``arr`` from ``offset``, as an LLVM vector."""
    data = context.make_array(arrty)(context, builder, arr).data
    vec = ir.VectorType(context.get_data_type(arrty.dtype), count)
    return builder.bitcast(builder.gep(data, [offset]), vec.as_pointer()), vec


def _mask(values):
    values = list(values)
    return ir.Constant(ir.VectorType(ir.IntType(32), len(values)), list(values))


def _gather9_of(block):
    """The intrinsic ``gather9(src, soff, dst, doff, stride)``: ``dst[doff + p*stride + l] =
    src[soff + 9*l + p]`` for ``l < block``, ``p < 9``: ``block`` matrices of 9 transposed,
    by one vector load and 9 shuffles."""
    @intrinsic
    def gather9(typingctx, src, soff, dst, doff, stride):
        sig = types.void(src, types.intp, dst, types.intp, types.intp)

        def codegen(context, builder, signature, args):
            s, so, d, do, st = args
            size = context.get_abi_sizeof(context.get_data_type(signature.args[0].dtype))
            ptr, vec = _block_of(context, builder, signature.args[0], s, so, 9 * block)
            whole = builder.load(ptr, align=size)
            for p in range(9):
                part = builder.shuffle_vector(whole, ir.Constant(vec, ir.Undefined),
                                              _mask(9 * k + p for k in range(block)))
                at = builder.add(do, builder.mul(st, ir.Constant(st.type, p)))
                dptr, _ = _block_of(context, builder, signature.args[2], d, at, block)
                builder.store(part, dptr, align=size)
            return context.get_dummy_value()
        return sig, codegen
    return gather9


def _scatter9_of(block):
    """The intrinsic ``scatter9(src, soff, stride, dst, doff)``: ``dst[doff + 9*l + p] =
    src[soff + p*stride + l]`` for ``l < block``, ``p < 9``: :func:`_gather9_of`'s backwards
    (9 vector loads, shuffles, one vector store). The store is non-temporal (no line of ``u``
    is read before it is written, as a plain store reads it; ``u`` is read back from memory,
    by the item's fused sums in float32, by the sums' pass in float64: the same bytes, and
    the 3 x 3 pass 1.08 to 1.11 times faster than with plain stores, measured with blocks of
    16 on AVX-512; no faster nor slower with 4 on AVX2) and weakly ordered:
    :func:`_store_fence` after the last."""
    @intrinsic
    def scatter9(typingctx, src, soff, stride, dst, doff):
        sig = types.void(src, types.intp, types.intp, dst, types.intp)

        def codegen(context, builder, signature, args):
            s, so, st, d, do = args
            size = context.get_abi_sizeof(context.get_data_type(signature.args[0].dtype))
            parts = []
            for p in range(9):
                at = builder.add(so, builder.mul(st, ir.Constant(st.type, p)))
                ptr, vec = _block_of(context, builder, signature.args[0], s, at, block)
                parts.append(builder.load(ptr, align=size))
            whole, n = parts[0], block  # the 9 vectors end to end
            for part in parts[1:]:
                if n > block:  # (a shuffle takes two vectors of one length)
                    part = builder.shuffle_vector(part, ir.Constant(vec, ir.Undefined),
                                                  _mask(k % block for k in range(n)))
                whole = builder.shuffle_vector(whole, part, _mask(range(n + block)))
                n += block
            out = builder.shuffle_vector(whole, ir.Constant(whole.type, ir.Undefined),
                                         _mask((e % 9) * block + e // 9 for e in range(n)))
            ptr, _ = _block_of(context, builder, signature.args[3], d, do, n)
            store = builder.store(out, ptr, align=size)
            store.set_metadata("nontemporal", builder.module.add_metadata(
                [ir.Constant(ir.IntType(32), 1)]))
            return context.get_dummy_value()
        return sig, codegen
    return scatter9


#: the transposes of the two block sizes (:data:`BLOCKS33`), module globals that the compiled
#: pass picks between by its block (a closure constant: one branch is compiled)
_gather9_4, _scatter9_4 = _gather9_of(4), _scatter9_of(4)
_gather9_16, _scatter9_16 = _gather9_of(16), _scatter9_of(16)


@intrinsic
def _store_fence(typingctx):
    """A sequentially consistent fence: the non-temporal stores of :func:`_scatter9_of` before
    it are visible to every thread after it (x86 orders them only by a fence)."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()
    return sig, codegen


def tiny_pass_of(rule, n_hyper, fused, pair_sum):
    """The pass of the tiny matrices of any shape (work table ``FactoredLayout.tiny``);
    ``fused``: each work item's sums of ``w^2`` and ``u^2`` by ``pair_sum`` into ``part``
    (``cpu_factored``)."""
    prep, stat, moment, _, den_of, estimate, direction, _, _ = rule

    def tiny_pass(g, r, c, u, seg, tiny, table, w, part, base):
        # tiny matrices (fewer than 4 rows and columns), many at once: position p of matrix
        # bb gathered in G[p, bb], so that every line below is a loop over bb that vectorises;
        # each row and column is all "tail" in the row order (fma after fma), each column of
        # several down the rows, each mean of fewer than 4 a plain running sum
        for k in prange(tiny.shape[0]):
            s = tiny[k, 0]
            if table[s, 0] == 0.0:
                continue
            hp = to_fixed_tuple(table[s, 1:], n_hyper)
            wo, n, m, ro, co = seg[s, 0], seg[s, 2], seg[s, 3], seg[s, 4], seg[s, 5]
            b0, b1 = tiny[k, 1], tiny[k, 2]
            nb, nm = b1 - b0, n * m
            gk = g[wo + b0 * nm:wo + b1 * nm]
            G = np.empty((nm, nb), gk.dtype)
            for p in range(nm):  # (strided loads, contiguous stores: they vectorise)
                Gp = G[p]
                for bb in range(nb):
                    Gp[bb] = prep(gk[bb * nm + p], hp)
            rk, ck = r[ro + b0 * n:ro + b1 * n], c[co + b0 * m:co + b1 * m]
            R = np.empty((n, nb), gk.dtype)
            C = np.empty((m, nb), gk.dtype)
            for i in range(n):  # the statistics gathered too, updated in place below
                Ri = R[i]
                for bb in range(nb):
                    Ri[bb] = rk[bb * n + i]
            for j in range(m):
                Cj = C[j]
                for bb in range(nb):
                    Cj[bb] = ck[bb * m + j]
            S = np.zeros(nb)
            for i in range(n):
                for bb in range(nb):
                    S[bb] = 0.0
                for j in range(m):
                    Gp = G[i * m + j]
                    for bb in range(nb):
                        x = np.float64(Gp[bb])
                        S[bb] = fma(x, x, S[bb])
                Ri, G0 = R[i], G[i * m]
                for bb in range(nb):
                    Ri[bb] = moment(Ri[bb], stat(S[bb], G0[bb], m, hp), hp)
            for j in range(m):
                for bb in range(nb):
                    S[bb] = 0.0
                for i in range(n):
                    Gp = G[i * m + j]
                    if m == 1:
                        for bb in range(nb):
                            x = np.float64(Gp[bb])
                            S[bb] = fma(x, x, S[bb])
                    else:
                        for bb in range(nb):
                            x = np.float64(Gp[bb])
                            S[bb] = S[bb] + x * x
                Cj, Gj = C[j], G[j]
                for bb in range(nb):
                    Cj[bb] = moment(Cj[bb], stat(S[bb], Gj[bb], n, hp), hp)
            for bb in range(nb):
                S[bb] = 0.0
            for i in range(n):
                Ri = R[i]
                for bb in range(nb):
                    S[bb] = S[bb] + np.float64(Ri[bb])
            D = np.empty(nb, gk.dtype)
            for bb in range(nb):
                D[bb] = den_of(0.0 + S[bb], n, hp)
            for i in range(n):
                Ri = R[i]
                for j in range(m):
                    Gp, Cj = G[i * m + j], C[j]
                    for bb in range(nb):  # the direction, back in G
                        Gp[bb] = direction(Gp[bb], estimate(Ri[bb], Cj[bb], D[bb], hp), hp)
            uk = u[wo + b0 * nm:wo + b1 * nm]
            for p in range(nm):
                Gp = G[p]
                for bb in range(nb):
                    uk[bb * nm + p] = Gp[bb]
            for i in range(n):
                Ri = R[i]
                for bb in range(nb):
                    rk[bb * n + i] = Ri[bb]
            for j in range(m):
                Cj = C[j]
                for bb in range(nb):
                    ck[bb * m + j] = Cj[bb]
            if fused:
                part[base + k, 0], part[base + k, 1] = pair_sum(w, u, wo + b0 * nm, nb * nm)
    return tiny_pass


def tiny33_pass_of(rule, n_hyper, fused, pair_sum, block=BLOCK33):
    """The pass of the 3 x 3 matrices (work table ``FactoredLayout.tiny33``): per work item,
    its matrices transposed ``block`` at a time (one of :data:`BLOCKS33`; the numbers do not
    depend on it) into ``G`` (position ``p`` of matrix ``bb`` at ``G[p*nb + bb]``),
    then one loop over the matrices for the rows, the columns and the denominator (their
    statistics updated in place), then the direction by position, in place in ``G``, and
    ``G`` transposed back into ``u``. The same arithmetic as :func:`tiny_pass_of` for
    ``n = m = 3``: a row's sum of squares ``fma`` after ``fma``, a column's ``s + x*x``, the
    denominator's sum of the rows' statistics left to right; ``fused`` as there."""
    if block not in BLOCKS33:
        raise ValueError(f"block must be one of {BLOCKS33}, not {block!r}")
    prep, stat, moment, _, den_of, estimate, direction, _, _ = rule

    def tiny33_pass(g, r, c, u, seg, tiny, table, w, part, base):
        for k in prange(tiny.shape[0]):
            s = tiny[k, 0]
            if table[s, 0] == 0.0:
                continue
            hp = to_fixed_tuple(table[s, 1:], n_hyper)
            wo, ro, co = seg[s, 0], seg[s, 4], seg[s, 5]
            b0, b1 = tiny[k, 1], tiny[k, 2]
            nb = b1 - b0
            full = nb - nb % block
            gk, uk = g[wo + b0 * 9:wo + b1 * 9], u[wo + b0 * 9:wo + b1 * 9]
            rk, ck = r[ro + b0 * 3:ro + b1 * 3], c[co + b0 * 3:co + b1 * 3]
            G = np.empty(9 * nb, gk.dtype)
            for b in range(0, full, block):
                if block == 16:  # (a closure constant: one branch compiled)
                    _gather9_16(gk, 9 * b, G, b, nb)
                else:
                    _gather9_4(gk, 9 * b, G, b, nb)
            for p in range(9):  # the matrices after the last whole block
                for bb in range(full, nb):
                    G[p * nb + bb] = gk[bb * 9 + p]
            D = np.empty(nb, gk.dtype)
            for bb in range(nb):
                x0, x1 = prep(G[bb], hp), prep(G[nb + bb], hp)
                x2, x3 = prep(G[2 * nb + bb], hp), prep(G[3 * nb + bb], hp)
                x4, x5 = prep(G[4 * nb + bb], hp), prep(G[5 * nb + bb], hp)
                x6, x7 = prep(G[6 * nb + bb], hp), prep(G[7 * nb + bb], hp)
                x8 = prep(G[8 * nb + bb], hp)
                y0, y1, y2 = np.float64(x0), np.float64(x1), np.float64(x2)
                y3, y4, y5 = np.float64(x3), np.float64(x4), np.float64(x5)
                y6, y7, y8 = np.float64(x6), np.float64(x7), np.float64(x8)
                q = 3 * bb
                r0 = moment(rk[q], stat(fma(y2, y2, fma(y1, y1, fma(y0, y0, 0.0))), x0, 3,
                                        hp), hp)
                r1 = moment(rk[q + 1], stat(fma(y5, y5, fma(y4, y4, fma(y3, y3, 0.0))), x3, 3,
                                            hp), hp)
                r2 = moment(rk[q + 2], stat(fma(y8, y8, fma(y7, y7, fma(y6, y6, 0.0))), x6, 3,
                                            hp), hp)
                ck[q] = moment(ck[q], stat(((0.0 + y0 * y0) + y3 * y3) + y6 * y6, x0, 3, hp),
                               hp)
                ck[q + 1] = moment(ck[q + 1], stat(((0.0 + y1 * y1) + y4 * y4) + y7 * y7, x1,
                                                   3, hp), hp)
                ck[q + 2] = moment(ck[q + 2], stat(((0.0 + y2 * y2) + y5 * y5) + y8 * y8, x2,
                                                   3, hp), hp)
                rk[q], rk[q + 1], rk[q + 2] = r0, r1, r2
                D[bb] = den_of(0.0 + (((0.0 + np.float64(r0)) + np.float64(r1))
                                      + np.float64(r2)), 3, hp)
            R = np.empty(3 * nb, gk.dtype)  # the statistics by position too
            C = np.empty(3 * nb, gk.dtype)
            for i in range(3):
                Ri = R[i * nb:(i + 1) * nb]
                for bb in range(nb):
                    Ri[bb] = rk[3 * bb + i]
            for j in range(3):
                Cj = C[j * nb:(j + 1) * nb]
                for bb in range(nb):
                    Cj[bb] = ck[3 * bb + j]
            for p in range(9):  # the direction, back in G
                i, j = p // 3, p % 3
                Gp, Ri, Cj = G[p * nb:(p + 1) * nb], R[i * nb:(i + 1) * nb], C[j * nb:(j + 1) * nb]
                for bb in range(nb):
                    Gp[bb] = direction(prep(Gp[bb], hp), estimate(Ri[bb], Cj[bb], D[bb], hp), hp)
            for b in range(0, full, block):
                if block == 16:
                    _scatter9_16(G, b, nb, uk, 9 * b)
                else:
                    _scatter9_4(G, b, nb, uk, 9 * b)
            for p in range(9):
                for bb in range(full, nb):
                    uk[bb * 9 + p] = G[p * nb + bb]
            _store_fence()
            if fused:
                part[base + k, 0], part[base + k, 1] = pair_sum(w, u, wo + b0 * 9, nb * 9)
    return tiny33_pass
