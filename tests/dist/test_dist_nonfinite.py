"""The non-finite guard under ``dist_sync``: the decision is taken on the summed gradients
(``Trainer.update`` runs after the reduction), so a NaN on one rank skips that parameter on
every rank, and the ranks stay bit for bit identical."""
import json

from conftest import DIST_DIR


def test_a_nonfinite_gradient_on_one_rank_is_skipped_on_every_rank(mpi, tmp_path):
    job = mpi(2, str(tmp_path), script=DIST_DIR / "nonfinite_worker.py", timeout=180,
              env={"MXOPT_DIST_TIMEOUT": "60"})
    assert job.rc == 0, job
    results = [json.loads((tmp_path / f"nonfinite-rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in results] == [0, 1], job
    for r in results:
        assert r["skipped"] == [[], ["p0"], ["p2"]]
        assert r["num_update"] == 3
    assert results[0]["weights"] == results[1]["weights"]
