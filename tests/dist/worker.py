"""The script the distributed tests run on every rank (``mpiexec -n N python toolkit/mpi_jobs.py
worker.py MODE OUTDIR [args]``: ``toolkit.mpi_jobs.command``). Each mode writes ``OUTDIR/<mode>-rank<r>.npz`` (or prints) what
the test then checks. Gradients are a pure function of (seed, step, rank, parameter), so the
test can rebuild every rank's gradient in one process (:func:`grad_of`)."""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository root

from toolkit import Parameter, Trainer, lr_scheduler  # noqa: E402

SHAPES = [(3, 4), (5,), (2, 2, 3), (7,), (300,)]
BATCH = 4   # per rank: step(BATCH * num_workers) averages over every sample

#: (id, optimizer, keywords, one float64 parameter too): a deliberate choice of the facts a
#: distributed step must keep (momentum with weight decay, a float64 parameter beside float32
#: ones, optimizer-level state (Nadam's m_schedule), a first-pass reduction (LARS's norms))
CONFIGS = [  # checked against the registry by tests/dist/test_dist.py::test_worker_configs
    ("sgd-mom", "sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 0.01}, False),
    ("adam", "adam", {"learning_rate": 0.01, "wd": 0.001}, True),
    ("nadam", "nadam", {"learning_rate": 0.01}, False),
    ("lbsgd-lars", "lbsgd", {"learning_rate": 0.05, "momentum": 0.9,
                             "warmup_strategy": "lars"}, False),
]


def grad_of(seed, step, rank, k, shape, dtype):
    rng = np.random.default_rng([seed, step, rank, k])
    return rng.standard_normal(shape).astype(dtype)


def init_of(seed, k, shape, dtype):
    rng = np.random.default_rng([seed, 10**6, k])
    return rng.standard_normal(shape).astype(dtype)


def make_params(seed, f64, init_seed=None):
    init_seed = seed if init_seed is None else init_seed
    params = []
    for k, s in enumerate(SHAPES):
        dtype = np.float64 if (f64 and k == len(SHAPES) - 1) else np.float32
        params.append(Parameter(f"p{k}", shape=s, dtype=dtype,
                                init=init_of(init_seed, k, s, dtype),
                                lr_mult=1.0 + 0.25 * (k % 2), wd_mult=0.5 * (k % 3)))
    return params


def write_grads(params, seed, step, rank):
    for k, p in enumerate(params):
        p.grad()[...] = grad_of(seed, step, rank, k, p.shape, p.dtype)


def snapshot(trainer, params):
    out = {}
    for k, p in enumerate(params):
        out[f"w{k}"] = np.array(p.data())
    for g in trainer._groups:
        from toolkit.trainer.buffers import state_leaves
        for j, leaf in enumerate(state_leaves(g.state)):
            out[f"s{g.dtype}_{j}"] = np.array(leaf)
    return out


def mode_train(outdir, steps):
    steps = int(steps)
    for cid, name, kw, f64 in CONFIGS:
        rank_seed = 17
        # every rank starts from different values: the Trainer must broadcast rank 0's
        import mpi4py.MPI as MPI
        r = MPI.COMM_WORLD.Get_rank()
        params = make_params(rank_seed, f64, init_seed=rank_seed + 1000 * r)
        t = Trainer(params, name, dict(kw), kvstore="dist_sync")
        for step in range(steps):
            write_grads(params, rank_seed, step, t.rank)
            t.step(BATCH * t.num_workers)
        snap = snapshot(t, params)
        snap["digest"] = np.frombuffer(t.kvstore.check_in_sync().encode(), np.uint8)
        np.savez(os.path.join(outdir, f"train-{cid}-rank{t.rank}.npz"), **snap)


def mode_mxnet2bit(outdir):
    sys.path.insert(0, os.path.dirname(HERE))
    from toolkit.trainer import compression as C
    with open(os.path.join(os.path.dirname(HERE), "data", "mxnet", "compression_2bit.json")) as f:
        data = json.load(f)
    import mpi4py.MPI as MPI
    n = MPI.COMM_WORLD.Get_size()

    def dec(a):
        return np.array([float.fromhex(h) for h in a["hex"]], dtype=a["dtype"]).reshape(
            a["shape"])
    report = {}
    for case in data["cases"]:
        if case["contexts"] != n:
            continue
        p = Parameter("g", shape=tuple(case["shape"]), init=0.0)
        t = Trainer([p], "sgd", {"learning_rate": 0.0}, kvstore="dist_sync",
                    compression_params=dict(case["params"]))
        bad = 0
        sent = []
        for s in range(case["steps"]):
            p.grad()[...] = dec(case["grads"][s][t.rank])
            t.allreduce_grads()
            got = np.array(p.grad())
            want = dec(case["merged"][s])
            bad += int((got.view(np.uint32) != want.view(np.uint32)).sum())
            sent.append(t.kvstore.last_step_bytes["payload_bytes"])
            t.update(1)
        report[case["id"]] = {"mismatches": bad, "payload_bytes": sent,
                              "words": C.words_for(int(np.prod(case["shape"])))}
    with open(os.path.join(outdir, f"mxnet2bit-rank{MPI.COMM_WORLD.Get_rank()}.json"), "w") as f:
        json.dump(report, f)


def mode_mismatch(outdir, variant):
    import mpi4py.MPI as MPI
    r = MPI.COMM_WORLD.Get_rank()
    shape = (4,) if (variant == "shape" and r == 1) else (3,)
    dtype = "float64" if (variant == "dtype" and r == 2) else "float32"
    name = "w_other" if (variant == "name" and r == 1) else "w"
    Trainer([Parameter(name, shape=shape, dtype=dtype)], "sgd", kvstore="dist_sync")
    print(f"rank {r}: no error", flush=True)


def mode_fault(outdir, what):
    import signal
    p = Parameter("w", shape=(100,), init=1.0)
    t = Trainer([p], "sgd", {"learning_rate": 0.1, "momentum": 0.9}, kvstore="dist_sync")
    p.grad()[...] = 1.0
    t.step(1)
    if t.rank == 1:
        if what == "raise":
            raise RuntimeError("rank 1 raises after a step")
        if what == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if what == "exit":
            sys.exit(3)
    _step_to_the_end(t, p)


def _step_to_the_end(t, p, steps=50):
    """The ranks that stay step on, then say they finished."""
    for _ in range(steps):
        p.grad()[...] = 1.0
        t.step(1)
    print(f"rank {t.rank} finished", flush=True)


def _ckpt_trainer(params):
    sched = lr_scheduler.FactorScheduler(step=3, factor=0.7, base_lr=0.02)
    return Trainer(params, "adam", {"learning_rate": 0.02, "lr_scheduler": sched,
                                    "wd": 0.001}, kvstore="dist_sync")


def mode_save(outdir, first, second):
    """Train first+second steps; after `first`, rank 0 saves weights and states."""
    first, second = int(first), int(second)
    params = make_params(5, True)
    t = _ckpt_trainer(params)
    for step in range(first + second):
        if step == first:
            t.save_states(os.path.join(outdir, "ckpt.states"))
            if t.rank == 0:
                np.savez(os.path.join(outdir, "ckpt-weights.npz"),
                         **{f"w{k}": np.array(p.data()) for k, p in enumerate(params)})
            t.kvstore.barrier()
        write_grads(params, 5, step, t.rank)
        t.step(BATCH * t.num_workers)
    np.savez(os.path.join(outdir, f"full-rank{t.rank}.npz"), **snapshot(t, params))


def mode_resume(outdir, first, second):
    first, second = int(first), int(second)
    import mpi4py.MPI as MPI
    r = MPI.COMM_WORLD.Get_rank()
    params = make_params(5, True, init_seed=999 + r)   # wrong values: rank 0 loads the real ones
    if r == 0:
        with np.load(os.path.join(outdir, "ckpt-weights.npz")) as z:
            for k, p in enumerate(params):
                p.set_data(z[f"w{k}"])
    t = _ckpt_trainer(params)
    t.load_states(os.path.join(outdir, "ckpt.states"))
    for step in range(first, first + second):
        write_grads(params, 5, step, t.rank)
        t.step(BATCH * t.num_workers)
    t.kvstore.check_in_sync()
    np.savez(os.path.join(outdir, f"resumed-rank{t.rank}.npz"), **snapshot(t, params))


class _FailingFile:
    """A binary file object whose read() fails with an exception that is not an OSError."""

    def read(self, n=-1):
        raise RuntimeError("the disk went away")


def mode_loadfail(outdir):
    """Rank 0 cannot read the states file, with exceptions beyond OSError/ValueError/TypeError:
    every rank records what it raised, then the ranks train on together."""
    import toolkit.trainer.states as states
    params = make_params(5, False)
    t = _ckpt_trainer(params)
    result = {}
    real = states.read_bytes

    def buggy(trainer, source):
        raise KeyError("a bug in read_bytes")

    def exhausted(trainer, source):
        raise MemoryError("no memory for the file")

    cases = {"runtime": (_FailingFile(), None), "keyerror": ("ckpt.states", buggy),
             "memory": ("ckpt.states", exhausted)}
    for case, (source, fake) in cases.items():
        if fake is not None and t.rank == 0:
            states.read_bytes = fake
        try:
            t.load_states(source)
            result[case] = "no error"
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            result[case] = f"{type(exc).__name__}: {exc}"
        finally:
            states.read_bytes = real
    for step in range(2):
        write_grads(params, 5, step, t.rank)
        t.step(BATCH * t.num_workers)
    result["digest"] = t.kvstore.check_in_sync()
    with open(os.path.join(outdir, f"loadfail-rank{t.rank}.json"), "w") as f:
        json.dump(result, f)


def mode_stale(outdir):
    from toolkit import StaleGradientError
    a, b = Parameter("a", shape=(4,), init=1.0), Parameter("b", shape=(4,), init=1.0)
    t = Trainer([a, b], "sgd", {"learning_rate": 0.5, "momentum": 0.5}, kvstore="dist_sync")
    a.grad()[...] = 1.0
    if t.rank == 0:
        b.grad()[...] = 1.0    # fresh on rank 0 only
    result = {}
    try:
        t.step(1)
        result["strict"] = "no error"
    except StaleGradientError as exc:
        result["strict"] = str(exc)
    result["after_strict_a"] = a.data().tolist()
    t.step(1, ignore_stale_grad=True)
    result["a"] = a.data().tolist()
    result["b"] = b.data().tolist()
    result["b_grad"] = b.grad().tolist()
    result["digest"] = t.kvstore.check_in_sync()
    try:                                   # update() applies reduced gradients only
        t.update(1)
        result["update_without_reduce"] = "no error"
    except RuntimeError as exc:
        result["update_without_reduce"] = str(exc)
    a.grad()[...] = 1.0
    b.grad()[...] = 1.0
    t.allreduce_grads()
    try:                                   # a second reduction would sum the sums
        t.allreduce_grads()
        result["second_reduce"] = "no error"
    except RuntimeError as exc:
        result["second_reduce"] = str(exc)
    t.update(1)
    result["a_after_split"] = a.data().tolist()
    with open(os.path.join(outdir, f"stale-rank{t.rank}.json"), "w") as f:
        json.dump(result, f)


def mode_cudasim(outdir):
    """GPU parameters (numba's CUDA simulator when NUMBA_ENABLE_CUDASIM=1) beside host ones: the
    GPU group is staged through its host buffer."""
    from toolkit.backends import arrays
    ps = [Parameter("a", shape=(40,), init=1.0, device="cuda"),
          Parameter("b", shape=(5,), init=2.0)]
    t = Trainer(ps, "adam", {"learning_rate": 0.1}, kvstore="dist_device_sync")
    for step in range(3):
        for k, p in enumerate(ps):
            p.set_grad(grad_of(3, step, t.rank, k, p.shape, np.float32))
        t.step(2)
    np.savez(os.path.join(outdir, f"cudasim-rank{t.rank}.npz"),
             a=arrays.to_host(ps[0].data()), b=np.array(ps[1].data()),
             digest=np.frombuffer(t.kvstore.check_in_sync().encode(), np.uint8))


def mode_hello(outdir):
    p = Parameter("w", shape=(2,), init=1.0)
    t = Trainer([p], "sgd", kvstore="dist_device_sync")
    print(f"hello from rank {t.rank} of {t.num_workers} ({t.kvstore.type})", flush=True)


def mode_leave(outdir, who):
    """Rank ``who`` leaves with os._exit(0) after a step while the others go on stepping."""
    p = Parameter("w", shape=(100,), init=1.0)
    t = Trainer([p], "sgd", {"learning_rate": 0.1}, kvstore="dist_sync")
    p.grad()[...] = 1.0
    t.step(1)
    if t.rank == int(who):
        os._exit(0)
    _step_to_the_end(t, p)


def _sched(step):
    return lr_scheduler.FactorScheduler(step=step, factor=0.5, base_lr=0.1)


def mode_settings(outdir):
    """Each case: the last rank builds its Trainer (or takes a step) with one setting changed;
    every rank records the DistMismatchError it raised (or "no error")."""
    from toolkit.trainer.dist import DistMismatchError
    import mpi4py.MPI as MPI
    r, n = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    odd = r == n - 1
    base = {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}
    construction = {            # case: (what every other rank passes, what the last rank changes)
        "learning_rate": ({}, {"learning_rate": 0.2}),
        "rescale_grad": ({}, {"rescale_grad": 0.5}),
        "wd": ({}, {"wd": 0.02}),
        "clip_gradient": ({}, {"clip_gradient": 1.0}),
        "momentum": ({}, {"momentum": 0.8}),
        "lr_scheduler": ({"lr_scheduler": 3}, {"lr_scheduler": 4}),
        "lr_scheduler_none": ({"lr_scheduler": 3}, {"lr_scheduler": None}),
    }
    result = {}
    for case, (common, change) in construction.items():
        kw = dict(base, **common)
        if odd:
            kw.update(change)
        if kw.get("lr_scheduler") is not None:
            kw["lr_scheduler"] = _sched(kw["lr_scheduler"])
            kw.pop("learning_rate")
        p = Parameter("w", shape=(4,), init=1.0)
        try:
            Trainer([p], "sgd", kw, kvstore="dist_sync")
            result["build:" + case] = "no error"
        except DistMismatchError as exc:
            result["build:" + case] = str(exc)

    def trainer():
        p = Parameter("w", shape=(4,), init=1.0)
        return p, Trainer([p], "sgd", dict(base), kvstore="dist_sync")

    steps = {
        "batch_size": lambda t: t.step(8 if odd else 4),
        "set_learning_rate": lambda t: (t.set_learning_rate(0.3) if odd else None,
                                        t.step(4)),
        "assigned_wd": lambda t: (setattr(t.optimizer, "wd", 0.5) if odd else None,
                                  t.step(4)),
        "ignore_stale_grad": lambda t: t.step(4, ignore_stale_grad=odd),
        "skip_nonfinite": lambda t: t.step(4, skip_nonfinite=odd),
        "lr_mult": lambda t: (setattr(p, "lr_mult", 5.0) if odd else None,
                              t.step(4)),
    }
    for case, act in steps.items():
        p, t = trainer()
        p.grad()[...] = 1.0
        t.step(4)                                   # one agreed step first
        p.grad()[...] = 1.0
        before = p.data().tolist()
        try:
            act(t)
            result["step:" + case] = "no error"
        except DistMismatchError as exc:
            result["step:" + case] = str(exc)
        result["unchanged:" + case] = p.data().tolist() == before
    # split step: update's batch_size is compared at the next allreduce_grads
    p, t = trainer()
    p.grad()[...] = 1.0
    t.allreduce_grads()
    t.update(8 if odd else 4)
    p.grad()[...] = 1.0
    try:
        t.allreduce_grads()
        result["split:batch_size"] = "no error"
    except DistMismatchError as exc:
        result["split:batch_size"] = str(exc)
    # the same settings everywhere still train, and agree
    p, t = trainer()
    for _ in range(3):
        p.grad()[...] = 1.0 + r
        t.step(4)
    result["digest"] = t.kvstore.check_in_sync()
    with open(os.path.join(outdir, f"settings-rank{r}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    mode, outdir, *rest = sys.argv[1:]
    globals()["mode_" + mode](outdir, *rest)
