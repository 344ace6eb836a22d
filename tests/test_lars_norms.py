"""The per-tensor norms of LBSGD's 'lars' and LARS on the CPU (``cpu.lars_norms``, the Trainer's
``cpu.run_norms``): float64 sums in the one fixed order the backend documents, bit for bit,
whatever the kernel (serial or parallel, one tensor or a segmented group, float16 gradient
widened on load), and LBSGD's step with ``batch_scale`` 1, which skips its (zero) accumulator,
equal bit for bit to the step that reads it."""
import numpy as np
import pytest

from toolkit import optimizer
from toolkit.backends import cpu, jit, order


def _chunk_sums(w, y):
    """One chunk's ``(sum w^2, sum y^2)`` in the documented order: element ``i`` into running
    sum ``i % 4`` (strictly in element order: ``np.add.accumulate``), the last ``len % 4``
    into sum 0 after the others, then ``(s0 + s1) + (s2 + s3)``."""
    out = []
    for x in (np.asarray(w, np.float64), np.asarray(y, np.float64)):
        sq = x * x
        m4 = sq.shape[0] // 4 * 4
        s = np.zeros(4)
        if m4:
            s = np.add.accumulate(sq[:m4].reshape(-1, 4), axis=0)[-1].copy()
        for v in sq[m4:]:
            s[0] += v
        out.append((s[0] + s[1]) + (s[2] + s[3]))
    return out


def _oracle(w, g, cum=None, bs=0.0):
    """``(sum w^2, sum gm^2)`` of one flat tensor: chunks of ``order.CHUNK`` added in order from
    0.0; ``gm = (cum + g)/bs`` in the arithmetic dtype (``g`` when ``cum`` is None or ``bs`` is
    0; a float16 ``g`` widened to float32 first)."""
    g = g.astype(w.dtype)
    gm = g if cum is None or bs == 0 else (cum + g) / w.dtype.type(bs)
    ww = gg = 0.0
    for a in range(0, w.shape[0], order.CHUNK):
        sw, sg = _chunk_sums(w[a:a + order.CHUNK], gm[a:a + order.CHUNK])
        ww += sw
        gg += sg
    return ww, gg


def _arrays(n, dtype, seed):
    rng = np.random.default_rng(seed)

    def draw():
        return (rng.standard_normal(n) * np.exp(rng.uniform(-15, 15, n))).astype(dtype)
    w, g, c = draw(), draw(), draw()
    w[::13] = -0.0
    g[::7] = 0.0
    return w, g, c


SIZES = [0, 1, 3, 4, 5, 17, 63, 64, 67, order.CHUNK - 1, order.CHUNK + 5,
         jit.PARALLEL_THRESHOLD, 3 * order.CHUNK + 7]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", SIZES)
def test_tensor_norms_follow_the_documented_order(n, dtype):
    w, g, c = _arrays(n, dtype, n)
    assert cpu.lars_norms(w, g, None, 0) == _oracle(w, g)
    for bs in (1, 3):
        assert cpu.lars_norms(w, g, c, bs) == _oracle(w, g, c, bs)


@pytest.mark.parametrize("n", [5, 67, order.CHUNK + 5, jit.PARALLEL_THRESHOLD + 3])
def test_float16_gradient_is_widened_on_load(n):
    """A float16 gradient (multi-precision) gives the norms of its float32 copy, bit for
    bit, without the copy."""
    w, _, c = _arrays(n, np.float32, 1)
    g16 = np.random.default_rng(2).standard_normal(n).astype(np.float16)
    g16[::5] = np.float16(6e-8)                     # subnormal
    g16[1::9] = -np.float16(3.1e-5)
    for cum, bs in ((None, 0), (c, 1), (c, 3)):
        assert cpu.lars_norms(w, g16, cum, bs) == cpu.lars_norms(w, g16.astype(np.float32),
                                                                 cum, bs)
        assert cpu.lars_norms(w, g16, cum, bs) == _oracle(w, g16, cum, bs)


def test_every_float16_value_widens_exactly():
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = every[np.isfinite(every)]
    w = np.zeros(4, np.float32)
    for h in finite:
        gg = cpu.lars_norms(w, np.full(4, h), None, 0)[1]
        assert gg == 4.0 * float(np.float32(h)) ** 2, h
    w = np.ones(every.shape[0], np.float32)
    a = cpu.lars_norms(w, every, None, 0)
    b = cpu.lars_norms(w, every.astype(np.float32), None, 0)
    assert np.isnan(a[1]) and np.isnan(b[1]) and a[0] == b[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_segmented_norms_equal_the_tensor_norms(dtype):
    """A Trainer's group: every member's norms equal its own ``lars_norms`` bit for bit (same
    chunks, same order), inactive members are left at 0, and a member with ``batch_scale`` 0 in
    a group with accumulators takes the norms of its gradient."""
    sizes = [5, order.CHUNK + 3, 1, 2 * order.CHUNK, 4099, jit.PARALLEL_THRESHOLD + 1]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    w, g, c = _arrays(int(offsets[-1]), dtype, 3)
    table = np.array([[1.0, 2.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 3.0], [1.0, 0.0]])
    out = np.full((len(sizes), 2), -1.0)
    cpu.run_norms(w, g, c, table, order.chunk_table(offsets), out, True)
    for k in range(len(sizes)):
        a, b = offsets[k], offsets[k + 1]
        if table[k, 0] == 0:
            assert tuple(out[k]) == (0.0, 0.0)
            continue
        bs = table[k, 1]
        expect = cpu.lars_norms(w[a:b], g[a:b], c[a:b] if bs else None, bs)
        assert tuple(out[k]) == expect
    out2 = np.zeros((len(sizes), 2))
    cpu.run_norms(w, g, w, np.ones((len(sizes), 2)), order.chunk_table(offsets), out2, False)
    for k in range(len(sizes)):
        a, b = offsets[k], offsets[k + 1]
        assert tuple(out2[k]) == cpu.lars_norms(w[a:b], g[a:b], None, 0)


def test_order_does_not_depend_on_the_thread_count():
    import numba
    w, g, c = _arrays(5 * order.CHUNK + 3, np.float32, 4)
    expect = cpu.lars_norms(w, g, c, 3)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        assert cpu.lars_norms(w, g, c, 3) == expect
    finally:
        numba.set_num_threads(before)
    assert expect == _oracle(w, g, c, 3)


# --- LBSGD with batch_scale 1: the accumulator stays zero and the step leaves it alone -------
CASES = [({"momentum": 0.9, "warmup_strategy": "lars"}, {}),
         ({"momentum": 0.0, "warmup_strategy": "lars"}, {"clip_gradient": 0.5}),
         ({"momentum": 0.9, "warmup_strategy": "linear"}, {"wd": 0.01, "rescale_grad": 0.5}),
         ({"momentum": 0.0, "warmup_strategy": "sqrt"}, {"clip_gradient": 1e-3, "wd": 0.1})]


def _run(kw, common, dtype, mp, skip, steps=4):
    opt = optimizer.create("lbsgd", learning_rate=0.1, multi_precision=mp, **kw, **common)
    rng = np.random.default_rng(7)
    n = jit.PARALLEL_THRESHOLD + 9
    w = rng.standard_normal(n).astype(dtype)
    w[::11] = 0.0
    state = opt.create_state_multi_precision(0, w) if mp else opt.create_state(0, w)
    for _ in range(steps):
        g = rng.standard_normal(n).astype(dtype)
        g[::3] = -0.0                                 # -0.0 + 0 is +0.0 in both forms
        g[1::17] = 0.0
        if not skip:
            opt._cum_zero.clear()                    # read the accumulator, as before
        (opt.update_multi_precision if mp else opt.update)(0, w, g, state)
    return w, state, opt


@pytest.mark.parametrize("kw,common", CASES)
@pytest.mark.parametrize("dtype,mp", [(np.float32, False), (np.float64, False),
                                      (np.float16, True)])
def test_lbsgd_skipping_the_zero_accumulator_changes_nothing(kw, common, dtype, mp):
    w1, s1, o1 = _run(kw, common, dtype, mp, skip=True)
    w2, s2, o2 = _run(kw, common, dtype, mp, skip=False)
    assert w1.tobytes() == w2.tobytes()
    for a, b in zip(o1.state_arrays(s1) if not mp else [s1[0]] + list(o1.state_arrays(s1[1])),
                    o2.state_arrays(s2) if not mp else [s2[0]] + list(o2.state_arrays(s2[1]))):
        assert a.tobytes() == b.tobytes()
    assert not o1._cum[0].any() and not o2._cum[0].any()


def test_lbsgd_with_batch_scale_1_neither_reads_nor_writes_a_zero_accumulator():
    kw = dict(learning_rate=0.1, momentum=0.9, warmup_strategy="lars")
    a, b = optimizer.create("lbsgd", **kw), optimizer.create("lbsgd", **kw)
    w = np.linspace(-1, 1, 64, dtype=np.float32)
    g = np.linspace(1, -2, 64, dtype=np.float32)
    wa, wb = w.copy(), w.copy()
    sa, sb = a.create_state(0, wa), b.create_state(0, wb)
    a.update(0, wa, g, sa)
    b.update(0, wb, g, sb)
    assert 0 in a._cum_zero
    a._cum[0][...] = np.nan                          # a zero accumulator is not read ...
    a._cum[0].flags.writeable = False                # ... nor written
    b._cum_zero.clear()                              # b reads its zeros
    a.update(0, wa, g, sa)
    b.update(0, wb, g, sb)
    assert wa.tobytes() == wb.tobytes() and sa.tobytes() == sb.tobytes()


def test_lbsgd_restored_accumulator_is_read_once_then_skipped():
    """A restored (non-zero) accumulator with batch_scale 1 is added by the next step, as MXNet
    does, and zeroed; later steps skip it."""
    kw = dict(learning_rate=0.1, momentum=0.9, warmup_strategy="lars")
    a, b = optimizer.create("lbsgd", **kw), optimizer.create("lbsgd", **kw)
    w = np.linspace(-1, 1, 64, dtype=np.float32)
    g = np.linspace(1, -2, 64, dtype=np.float32)
    cum = np.full(64, 0.25, np.float32)
    sa, sb = a.create_state(0, w), b.create_state(0, w)
    wa, wb = w.copy(), w.copy()
    a.check_host_state({"ncum": [[0, 0]], "cum": [[0, "c"]]}, {"c": cum})()
    assert 0 not in a._cum_zero
    a.update(0, wa, g, sa)
    b.update(0, wb, g + cum, sb)                     # cum + grad: exact here
    assert wa.tobytes() == wb.tobytes() and 0 in a._cum_zero and not a._cum[0].any()
    a.update(0, wa, g, sa)
    b.update(0, wb, g, sb)
    assert wa.tobytes() == wb.tobytes()


def test_trainer_group_mixing_skipped_and_read_accumulators(tmp_path):
    """After a restore, a member stepped alone skips its zeroed accumulator while the others
    still read theirs: one group with both kinds (norms of the gradient for the first, of
    ``(cum + grad)/1`` for the others) equals one Trainer per parameter, bit for bit."""
    from toolkit import Parameter, Trainer
    hyper = {"learning_rate": 0.1, "momentum": 0.9, "warmup_strategy": "lars"}
    rng = np.random.default_rng(11)
    inits = [rng.standard_normal(40).astype(np.float32),
             rng.standard_normal(order.CHUNK + 70).astype(np.float32)]
    grads = [[rng.standard_normal(x.shape[0]).astype(np.float32) for x in inits]
             for _ in range(4)]
    together = [Parameter(f"p{k}_weight", init=x.copy()) for k, x in enumerate(inits)]
    alone = [Parameter(f"p{k}_weight", init=x.copy()) for k, x in enumerate(inits)]
    tg = Trainer(together, "lbsgd", dict(hyper))
    ta = [Trainer([p], "lbsgd", dict(hyper)) for p in alone]

    def step(which, k):
        for j in which:
            together[j].set_grad(grads[k][j])
            alone[j].set_grad(grads[k][j])
        tg.step(1, ignore_stale_grad=True)
        for j in which:
            ta[j].step(1)
    step((0, 1), 0)
    tg.save_states(tmp_path / "g.states")
    tg.load_states(tmp_path / "g.states")  # restored: every accumulator is read once more
    for j, t in enumerate(ta):
        t.save_states(tmp_path / f"{j}.states")
        t.load_states(tmp_path / f"{j}.states")
    step((0,), 1)                          # p0 zeroed its accumulator, p1 did not step
    assert tg.optimizer.norm_inputs(0) == 0 and tg.optimizer.norm_inputs(1) == 1
    step((0, 1), 2)                        # one group: a skipped and a read accumulator
    step((0, 1), 3)
    for p, q in zip(together, alone):
        assert p.data().tobytes() == q.data().tobytes()


def test_compiled_mxnet_step_scalars_equal_the_reference_trust_ratio():
    """LARS's compiled float32 step scalars (toolkit/optimizers/lars.py) are
    ``reference.lars.mxnet_trust_lr`` bit for bit, with the products MXNet's kernel forms,
    over norms from 0 and float32's underflow to its overflow."""
    import reference.lars as ref
    from toolkit.optimizers import lars

    scalars = lars._mxnet_scalars()
    rng = np.random.default_rng(11)
    f = np.float32
    cases = [(0.1, 0.0, 4.0), (0.1, 4.0, 0.0), (0.1, 1e-50, 4.0), (0.1, 4.0, 1e-50),
             (0.1, 1e40, 4.0), (0.1, 4.0, 1e40), (0.0, 4.0, 9.0), (-0.5, 4.0, 9.0)]
    cases += [(10.0 ** rng.uniform(-4, 1), 10.0 ** rng.uniform(-46, 40),
               10.0 ** rng.uniform(-46, 40)) for _ in range(2000)]
    for k, (lr, ww, gg) in enumerate(cases):
        eta, eps = 10.0 ** rng.uniform(-4, 0), [0.0, 1e-9, 1e-3][k % 3]
        wd, rs, mu = [0.0, 1e-4, 0.3][k % 3], 10.0 ** rng.uniform(-3, 1), 0.9 * (k % 2)
        with np.errstate(all="ignore"):
            want = ref.mxnet_trust_lr(lr, ww, gg, eta=eta, eps=eps, wd=wd, rescale_grad=rs)
            products = (float(f(want) * f(wd)), float(f(rs)), float(f(mu)),
                        float(f(want) * f(rs)))
        got = scalars(lr, ww, gg, eta, eps, wd, rs, mu)
        assert np.array_equal(np.array(got), np.array((want,) + products), equal_nan=True), \
            (lr, ww, gg)
