"""Distributed Trainer (``kvstore="dist_sync"``) on 2 and 3 MPI ranks of this machine.

Each test starts ``mpiexec`` in a subprocess running ``worker.py`` (``conftest.run_mpi``); see
``docs/distributed.md`` for the semantics checked here."""
import json
import os

import numpy as np
import pytest

from toolkit import Trainer

STEPS = 25


def _load(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


@pytest.fixture(scope="module", params=[2, 3])
def trained(request, tmp_path_factory):
    from conftest import run_mpi
    n = request.param
    out = tmp_path_factory.mktemp(f"train{n}")
    job = run_mpi(n, "train", out, STEPS)
    assert job.rc == 0, job
    return n, out


def _single_process(worker, cid, n):
    _, name, kw, f64 = next(c for c in worker.CONFIGS if c[0] == cid)
    params = worker.make_params(17, f64)              # rank 0's initial values
    t = Trainer(params, name, dict(kw), kvstore="device")
    for step in range(STEPS):
        for k, p in enumerate(params):
            g = worker.grad_of(17, step, 0, k, p.shape, p.dtype)
            for r in range(1, n):                     # the concatenated batch: sum of the ranks'
                g = g + worker.grad_of(17, step, r, k, p.shape, p.dtype)
            p.grad()[...] = g
        t.step(worker.BATCH * n)
    return worker.snapshot(t, params)


def test_worker_configs(worker_module):
    """The worker's configurations name registered optimizers, each built from its keywords,
    each with a distinct id that the rank test below runs, and a first-pass reduction
    (``Spec.first_pass``) among them."""
    from toolkit.optimizer import create, spec_of, specs
    ids = [c[0] for c in worker_module.CONFIGS]
    assert len(set(ids)) == len(ids) and set(ids) == set(RANK_CASES)
    first_pass = False
    for _, name, kw, _ in worker_module.CONFIGS:
        assert name in specs(oracle=True)
        first_pass |= spec_of(name).first_pass_reads(create(name, **kw)) > 0
    assert first_pass


RANK_CASES = ["sgd-mom", "adam", "nadam", "lbsgd-lars"]


@pytest.mark.parametrize("cid", RANK_CASES)
def test_ranks_bit_identical_and_equal_to_one_process(trained, cid, worker_module):
    n, out = trained
    ranks = [_load(out / f"train-{cid}-rank{r}.npz") for r in range(n)]
    for r in range(1, n):
        assert ranks[r].keys() == ranks[0].keys()
        for key in ranks[0]:
            assert np.array_equal(_bits(ranks[r][key]), _bits(ranks[0][key])), (cid, r, key)
    one = _single_process(worker_module, cid, n)
    for key, want in one.items():
        got = ranks[0][key]
        if key == "digest":
            continue
        if n == 2:
            # a + b is commutative in IEEE arithmetic: the 2-rank sum has the one-process bits
            assert np.array_equal(_bits(got), _bits(want)), (cid, key)
        else:
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6, err_msg=f"{cid} {key}")


def test_two_bit_compression_matches_mxnet(mpi, tmp_path):
    for n in (2, 3):
        job = mpi(n, "mxnet2bit", tmp_path)
        assert job.rc == 0, job
        reports = [json.loads((tmp_path / f"mxnet2bit-rank{r}.json").read_text())
                   for r in range(n)]
        assert reports[0], f"no MXNet case with {n} contexts"
        for rep in reports:
            for cid, res in rep.items():
                assert res["mismatches"] == 0, (n, cid)
                # the bytes on the wire are the packed codes: 4 bytes per 16 elements
                assert set(res["payload_bytes"]) == {4 * res["words"]}, (cid, res)


@pytest.mark.parametrize("variant,n", [("shape", 2), ("name", 2), ("dtype", 3)])
def test_parameter_mismatch_raises_on_every_rank(mpi, tmp_path, variant, n):
    job = mpi(n, "mismatch", tmp_path, variant, timeout=120)
    assert job.rc not in (0, "timeout"), job
    assert job.seconds < 60, job
    for r in range(n):
        assert f"seen on rank {r}; every rank raises this" in job.out, (r, job)
    assert "DistMismatchError" in job.out and "no error" not in job.out


@pytest.mark.parametrize("plain", [False, True], ids=["launch", "plain-mpiexec"])
@pytest.mark.parametrize("what", ["raise", "kill", "exit"])
def test_a_failing_rank_ends_the_job_nonzero_within_the_bound(mpi, tmp_path, what, plain):
    # the watchdog bound is 10 s here; the job must end well within the 120 s test timeout.
    # plain: mpiexec -n 2 python worker.py, without mpi4py's own abort-on-exception runner
    job = mpi(2, "fault", tmp_path, what, timeout=120, env={"MXOPT_DIST_TIMEOUT": "10"},
              plain=plain)
    assert job.rc != "timeout", job
    assert job.rc != 0, job
    assert job.seconds < 40, job
    assert "finished" not in job.out, job
    if what == "raise":
        assert "rank 1 raises after a step" in job.out


def test_save_on_rank0_load_everywhere_continues_bit_identically(mpi, tmp_path):
    first, second = 7, 6
    job = mpi(2, "save", tmp_path, first, second)
    assert job.rc == 0, job
    assert (tmp_path / "ckpt.states").exists()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    job = mpi(2, "resume", tmp_path, first, second)
    assert job.rc == 0, job
    full = [_load(tmp_path / f"full-rank{r}.npz") for r in range(2)]
    resumed = [_load(tmp_path / f"resumed-rank{r}.npz") for r in range(2)]
    for r in range(2):
        for key in full[0]:
            assert np.array_equal(_bits(resumed[r][key]), _bits(full[0][key])), (r, key)
            assert np.array_equal(_bits(full[r][key]), _bits(full[0][key])), (r, key)


def test_any_exception_reading_the_file_on_rank_0_raises_on_every_rank(mpi, tmp_path):
    """Not only OSError, ValueError and TypeError: a RuntimeError from a file object, a
    KeyError (a bug), a MemoryError on rank 0 reach the other ranks at once (they raise a
    RuntimeError naming it), instead of leaving them waiting for the watchdog."""
    job = mpi(2, "loadfail", tmp_path, env={"MXOPT_DIST_TIMEOUT": "30"}, timeout=120)
    assert job.rc == 0, job
    assert job.seconds < 25, job               # no rank waited for the 30 s watchdog
    res = [json.loads((tmp_path / f"loadfail-rank{r}.json").read_text()) for r in range(2)]
    want = {"runtime": "RuntimeError: the disk went away",
            "keyerror": "KeyError: 'a bug in read_bytes'",
            "memory": "MemoryError: no memory for the file"}
    for case, text in want.items():
        assert res[0][case] == text, (case, res[0][case])        # rank 0: its own exception
        assert res[1][case].startswith("RuntimeError: load_states: rank 0 could not read "), \
            (case, res[1][case])
        assert res[1][case].endswith(text), (case, res[1][case])
    assert res[0]["digest"] == res[1]["digest"]


def test_stale_on_one_rank_is_stale_everywhere(mpi, tmp_path):
    job = mpi(2, "stale", tmp_path)
    assert job.rc == 0, job
    res = [json.loads((tmp_path / f"stale-rank{r}.json").read_text()) for r in range(2)]
    for r in range(2):
        assert "b (stale on rank 1)" in res[r]["strict"]
        assert res[r]["after_strict_a"] == [1.0] * 4          # nothing moved
        assert res[r]["b"] == [1.0] * 4 and res[r]["b_grad"] == [0.0] * 4
        # a: sum of both ranks' gradients (2) / batch 1, lr 0.5: 1 - 0.5 * 2 = 0
        assert res[r]["a"] == [0.0] * 4
    assert res[0]["digest"] == res[1]["digest"]
    for r in range(2):
        assert "call allreduce_grads() first" in res[r]["update_without_reduce"]
        assert "already all-reduced" in res[r]["second_reduce"]
        # a = 0, mom = -1 after the first step; split step: mom = 0.5 * -1 - 0.5 * 2 = -1.5
        assert res[r]["a_after_split"] == [-1.5] * 4


def test_launcher_runs_the_script_on_n_ranks(mpi, tmp_path):
    job = mpi(3, "hello", tmp_path, launcher=True)
    assert job.rc == 0, job
    for r in range(3):
        assert f"hello from rank {r} of 3 (dist_device_sync)" in job.out


def test_example_script_trains_on_two_ranks(mpi, tmp_path):
    pytest.importorskip("sklearn", reason="the example trains on scikit-learn's digits")
    from conftest import ROOT
    job = mpi(2, "--epochs", "2", "--compress", "0.01", "--checkpoint", tmp_path,
              script=ROOT / "examples" / "train_dist.py", launcher=True)
    assert job.rc == 0, job
    assert "2 ranks hold the same parameters and states" in job.out
    assert (tmp_path / "trainer.states").exists() and (tmp_path / "weights.npz").exists()
    acc = [float(line.split("test accuracy ")[1].split(",")[0])
           for line in job.out.splitlines() if "test accuracy" in line]
    assert len(acc) == 2 and acc[-1] > 0.8


def test_gpu_parameters_are_staged_through_host_buffers(mpi, tmp_path, worker_module):
    """Under numba's CUDA simulator (no GPU here): a GPU group and a host group on 2 ranks."""
    pytest.importorskip("numba.cuda")
    job = mpi(2, "cudasim", tmp_path, env={"NUMBA_ENABLE_CUDASIM": "1"})
    if job.rc != 0 and "CUDA" in job.out and "unavailable" in job.out:
        pytest.skip("the CUDA simulator is not usable here")
    assert job.rc == 0, job
    got = [_load(tmp_path / f"cudasim-rank{r}.npz") for r in range(2)]
    assert np.array_equal(got[0]["digest"], got[1]["digest"])
    from toolkit import Parameter
    ps = [Parameter("a", shape=(40,), init=1.0), Parameter("b", shape=(5,), init=2.0)]
    t = Trainer(ps, "adam", {"learning_rate": 0.1})
    for step in range(3):
        for k, p in enumerate(ps):
            p.set_grad(sum(worker_module.grad_of(3, step, r, k, p.shape, np.float32)
                           for r in range(2)))
        t.step(2)
    np.testing.assert_allclose(got[0]["a"], ps[0].data(), rtol=1e-6)
    assert np.array_equal(got[0]["b"], ps[1].data())


# --- issue 19: what ends a job, and how fast ---------------------------------------------------
# A watchdog of 5 s: each job must end well within the subprocess timeout (a regression fails
# as "timeout" instead of hanging the suite).
FAST = {"MXOPT_DIST_TIMEOUT": "5"}


@pytest.mark.parametrize("n", [2, 3])
def test_a_rank_failing_before_mpi_starts_ends_the_job_at_once(mpi, n):
    from conftest import DIST_DIR
    job = mpi(n, script=DIST_DIR / "early.py", launcher=True, env=FAST, timeout=90)
    assert job.rc not in (0, "timeout"), job
    assert "rank 1 fails before MPI is started" in job.out, job
    assert "mxopt launch: rank 1 stopped on an uncaught RuntimeError" in job.out, job
    # the launcher ends the job when rank 1 reports, not the 5 s watchdog of the others
    assert "did not complete within" not in job.out, job
    assert "built a Trainer" not in job.out, job
    assert job.seconds < 30, job


@pytest.mark.parametrize("how,launcher", [("raise", False), ("sleep", False), ("sleep", True)],
                         ids=["raise-plain-mpiexec", "sleep-plain-mpiexec", "sleep-launch"])
def test_mpi_start_up_and_comm_dup_run_under_the_watchdog(mpi, how, launcher):
    """Rank 1 fails before MPI_Init (rank 0 waits in MPI start-up, plain mpiexec: nothing else
    ends it), or starts MPI and sleeps (rank 0 waits in the communicator's duplication); rank
    0's watchdog ends the job after 5 s, and the launcher names the collective."""
    from conftest import DIST_DIR
    args = ["sleep"] if how == "sleep" else []
    job = mpi(2, *args, script=DIST_DIR / "early.py", plain=not launcher, launcher=launcher,
              env=FAST, timeout=90)
    assert job.rc not in (0, "timeout"), job
    what = "duplicating the communicator" if how == "sleep" else "MPI start-up"
    assert f"mxopt dist: rank 0: {what}" in job.out and "within 5 s" in job.out, job
    if launcher:
        assert f"mxopt launch: rank 0 aborted: the watchdog: {what}" in job.out, job
    assert job.seconds < 40, job


@pytest.mark.parametrize("n,who", [(2, 1), (3, 0)])
def test_a_rank_leaving_with_exit_status_0_fails_the_job_naming_it(mpi, n, who):
    job = mpi(n, "leave", "-", who, launcher=True, env=FAST, timeout=90)
    assert job.rc not in (0, "timeout"), job
    assert f"mxopt launch: rank {who} ended without finishing its script" in job.out, job
    assert "finished\n" not in job.out.replace("without finishing", ""), job
    assert job.seconds < 30, job


@pytest.mark.parametrize("n", [2, 3])
def test_ranks_with_different_settings_fail_on_every_rank(mpi, tmp_path, n):
    job = mpi(n, "settings", tmp_path, env={"MXOPT_DIST_TIMEOUT": "30"}, timeout=120)
    assert job.rc == 0, job
    res = [json.loads((tmp_path / f"settings-rank{r}.json").read_text()) for r in range(n)]
    last = n - 1
    others = "ranks 0, 1" if n == 3 else "rank 0"
    odd = f"rank {last}"
    want = {
        "build:learning_rate": f"the optimizer's learning_rate differs: 0.1 on {others}; 0.2 on "
                               f"{odd}",
        "build:rescale_grad": f"rescale_grad differs: 1.0 on {others}; 0.5 on {odd}",
        "build:wd": f"wd differs: 0.01 on {others}; 0.02 on {odd}",
        "build:clip_gradient": f"clip_gradient differs: None on {others}; 1.0 on {odd}",
        "build:momentum": f"momentum differs: 0.9 on {others}; 0.8 on {odd}",
        "build:lr_scheduler": "FactorScheduler(step=4",
        "build:lr_scheduler_none": f"; None on {odd}",
        "step:batch_size": f"batch_size differs: 4.0 on {others}; 8.0 on {odd}",
        "step:set_learning_rate": f"learning_rate differs: 0.1 on {others}; 0.3 on {odd}",
        "step:assigned_wd": f"wd differs: 0.01 on {others}; 0.5 on {odd}",
        "step:ignore_stale_grad": f"ignore_stale_grad differs: False on {others}; True on {odd}",
        "step:skip_nonfinite": f"skip_nonfinite differs: False on {others}; True on {odd}",
        "step:lr_mult": f"parameter 'w''s lr_mult differs: 1.0 on {others}; 5.0 on {odd}",
        "split:batch_size": f"rescale_grad (set by step's or update's batch_size) differs: 0.25 "
                            f"on {others}; 0.125 on {odd}",
    }
    for r in range(n):
        for case, text in want.items():
            got = res[r][case]
            assert text in got, (r, case, got)
            assert f"seen on rank {r}; every rank raises this" in got, (r, case, got)
        for case in ("batch_size", "set_learning_rate", "assigned_wd", "ignore_stale_grad",
                     "skip_nonfinite", "lr_mult"):
            assert res[r]["unchanged:" + case] is True, (r, case)  # nothing was updated
        assert res[r]["digest"] == res[0]["digest"]


def test_a_rank_that_leaves_early_with_status_0_is_named(mpi):
    """The others wait in the next step's collective until their watchdog ends the job; the
    launcher's message names the rank that had already finished."""
    from conftest import DIST_DIR
    job = mpi(2, script=DIST_DIR / "leaves_early.py", launcher=True, env=FAST, timeout=90)
    assert job.rc not in (0, "timeout"), job
    assert "rank 1 had already finished its script" in job.out, job
