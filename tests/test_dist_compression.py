"""MXNet's 2-bit gradient compression without MPI: the quantiser against MXNet 1.9.1's own
numbers (``tests/data/mxnet/compression_2bit.json``, written by ``compression_gen.py``), the
parameter checks against MXNet's refusals, and the distributed kvstore names the Trainer refuses
(``docs/distributed.md``). The distributed runs themselves are in ``tests/dist``."""
import json
import os

import numpy as np
import pytest

from toolkit import Parameter, Trainer
from toolkit.trainer import compression as C
from toolkit.trainer import dist

DATA = os.path.join(os.path.dirname(__file__), "data", "mxnet", "compression_2bit.json")


def _dec(a):
    return np.array([float.fromhex(h) for h in a["hex"]], dtype=a["dtype"]).reshape(a["shape"])


@pytest.fixture(scope="module")
def mx_data():
    with open(DATA) as f:
        return json.load(f)


def test_data_provenance(mx_data):
    prov = mx_data["provenance"]
    assert prov["mxnet_version"] == "1.9.1"
    assert prov["generator"] == "tests/data/mxnet/compression_gen.py"
    assert all(all(c["pulled_equal"]) for c in mx_data["cases"])


def test_quantiser_matches_mxnet_bit_for_bit(mx_data):
    for case in mx_data["cases"]:
        p = C.check_params(case["params"])
        n = int(np.prod(case["shape"]))
        residuals = [np.zeros(n, np.float32) for _ in range(case["contexts"])]
        for s in range(case["steps"]):
            words = np.stack([C.quantize(_dec(case["grads"][s][c]).reshape(-1), residuals[c],
                                         p["threshold32"])
                              for c in range(case["contexts"])])
            assert words.nbytes == case["contexts"] * 4 * ((n + 15) // 16)
            out = C.dequantize_sum(words, p["threshold32"], np.empty(n, np.float32))
            want = _dec(case["merged"][s]).reshape(-1)
            assert np.array_equal(out.view(np.uint32), want.view(np.uint32)), (case["id"], s)


def test_threshold_is_read_as_mxnet_reads_it(mx_data):
    # 2.7245463: dmlc-core's ParseFloat<float> lands one ulp above float32(2.7245463); MXNet's
    # merged values carry that threshold
    case = next(c for c in mx_data["cases"] if c["id"] == "t2.7245463-ctx2")
    t32 = C.mxnet_float32(2.7245463)
    assert t32 != np.float32(2.7245463)
    merged = np.concatenate([_dec(m).reshape(-1) for m in case["merged"]])
    levels = {abs(float(v)) for v in merged if v != 0}
    assert float(t32) in levels and float(np.float32(2.7245463)) not in levels
    assert C.check_params({"type": "2bit"})["threshold32"] == np.float32(0.5)  # MXNet's default


def test_layout_sixteen_codes_per_word_mxnet_order():
    t = np.float32(1.0)
    grad = np.zeros(20, np.float32)
    grad[0], grad[1], grad[5], grad[16] = 1.0, -1.0, 2.0, -3.0
    res = np.zeros(20, np.float32)
    words = C.quantize(grad, res, t)
    assert words.shape == (2,) and words.dtype == np.uint32
    b = words.view(np.uint8)
    assert b[0] == 0b11_10_00_00          # elements 0..3: +t, -t, 0, 0 (first in the high bits)
    assert b[1] == 0b00_11_00_00          # element 5: +t, residual 1 kept
    assert b[4] == 0b10_00_00_00          # element 16 opens the second word: -t
    assert res[5] == 1.0 and res[16] == -2.0 and res[0] == 0.0
    mask = np.ones(20, np.uint8)
    mask[5] = 0
    words = C.quantize(np.zeros(20, np.float32), res, t, mask=mask)
    assert res[5] == 1.0 and res[16] == -1.0   # masked: untouched; others drain the residual


def test_bytes_model():
    n = 25_557_032
    assert dist.bytes_model(n, 4, 1) == 0
    assert dist.bytes_model(n, 4, 2) == 4 * n                     # 2(N-1)/N * 4n
    assert dist.bytes_model(n, 4, 2, compressed=True) == 4 * ((n + 15) // 16)


@pytest.mark.parametrize("params, exc, match", [
    ({"type": "2bit", "threshold": 0}, ValueError, "greater than 0"),
    ({"type": "2bit", "threshold": -0.5}, ValueError, "greater than 0"),
    ({"type": "2bit", "threshold": float("nan")}, ValueError, "finite"),
    ({"type": "2bit", "threshold": float("inf")}, ValueError, "finite"),
    ({"type": "2bit", "threshold": "abc"}, ValueError, "threshold"),
    ({"type": "2bit", "threshold": 1e-60}, ValueError, "float32"),
    ({"type": "1bit", "threshold": 0.5}, ValueError, "unknown gradient compression type"),
    ({"type": "foo"}, ValueError, "unknown gradient compression type"),
    ({"threshold": 0.5}, ValueError, "needs a 'type'"),
    ({"type": "2bit", "treshold": 0.5}, ValueError, "unknown key"),
    ("2bit", TypeError, "dict"),
])
def test_bad_compression_params_are_clear_errors(params, exc, match):
    with pytest.raises(exc, match=match):
        C.check_params(params)


def test_mxnet_refuses_the_same_compression_params(mx_data):
    """Every refusal above has MXNet's counterpart in the data (measured)."""
    errs = {json.dumps(e["params"], sort_keys=True) + e["dtype"]: e["error"]
            for e in mx_data["errors"]}
    assert "threshold must be greater than 0" in errs[
        json.dumps({"type": "2bit", "threshold": 0}, sort_keys=True) + "float32"]["line"]
    assert "Unknown type" in errs[
        json.dumps({"type": "1bit", "threshold": 0.5}, sort_keys=True) + "float32"]["line"]
    assert "Required parameter type" in errs[json.dumps({"threshold": 0.5}) + "float32"]["line"]
    # float64 and float16 gradients fail inside MXNet's quantiser: the toolkit refuses them
    assert errs[json.dumps({"type": "2bit", "threshold": 0.5}, sort_keys=True) + "float64"]


@pytest.mark.parametrize("kv", ["dist_async", "dist_device_async", "dist_async_device"])
def test_async_kvstores_are_refused_naming_what_is_supported(kv):
    with pytest.raises(ValueError, match="asynchronous.*not supported.*'dist_sync'"):
        Trainer([Parameter("w", shape=(2,))], "sgd", kvstore=kv)


@pytest.mark.parametrize("kv", ["horovod", "nccl", "dist_whatever_sync2"])
def test_other_distributed_kvstores_are_refused(kv):
    with pytest.raises(ValueError, match="not supported.*'dist_sync'"):
        Trainer([Parameter("w", shape=(2,))], "sgd", kvstore=kv)


def test_compression_needs_a_distributed_kvstore_and_valid_params():
    with pytest.raises(ValueError, match="needs a distributed kvstore"):
        Trainer([Parameter("w", shape=(2,))], "sgd", compression_params={"type": "2bit"})
    assert dist.kvstore_type("dist_sync") == "dist_sync"
    assert dist.kvstore_type("device") is None and dist.kvstore_type(None) is None


def test_one_process_trainer_reports_one_worker():
    t = Trainer([Parameter("w", shape=(2,))], "sgd")
    assert t.kvstore is None and t.num_workers == 1 and t.rank == 0
