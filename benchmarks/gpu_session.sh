#!/usr/bin/env bash
# The GPU's work of a session that is lent one (the device tool), in two calls that each end
# well inside its 10-minute limit, with what they measure written under $OUT (which the tool
# brings back: at most 8 files a call).
#
# Here, once, before the first call. The device machine reaches no registry, and its numpy 2.5
# breaks numba 0.68 at the first kernel compile (np.row_stack is gone), so numpy 2.4.6 travels
# as a wheel (tests/results/cuda-h100.md):
#
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#       --platform manylinux2014_x86_64 -d .whl numpy==2.4.6
#
# Then two device calls, each with carry [".whl"]:
#
#   bash benchmarks/gpu_session.sh tests   # tests/cuda on the GPU; toolkit check's CUDA rows
#   bash benchmarks/gpu_session.sh bench   # mxopt bench --device cuda; adam_cuda.py, muon_cuda.py
#
# Each writes env_<phase>.txt (GPU, driver, versions) beside its results. Copy what is worth
# keeping into tests/results/ and benchmarks/results/, the device named.
set -uo pipefail
phase="${1:-}"
case "$phase" in
    tests|bench) ;;
    *) echo "usage: bash benchmarks/gpu_session.sh tests|bench" >&2; exit 2 ;;
esac
: "${OUT:?run it through the device tool, which sets OUT}"
cd "$(dirname "$0")/.."
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
# the toolkit itself, editable and without its dependencies (the image holds them; nothing can
# be fetched there): the pytest plugin and `python3 -m toolkit` then work as here
python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 1
export PYTHONUNBUFFERED=1
{
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv
    python3 - <<'EOF'
import importlib.metadata as md
import sys
print("python", sys.version.split()[0])
for name in ("numpy", "numba", "numba-cuda", "cupy-cuda13x", "torch", "hypothesis"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "not installed")
EOF
} >"$OUT/env_$phase.txt" 2>&1

status=0
if [ "$phase" = tests ]; then
    # several processes: compiling the kernels is most of the time, and the machine has 16 cores
    timeout 420 python3 -m pytest -q -p no:cacheprovider -n 8 --dist loadfile -rs tests/cuda \
        2>&1 | tee "$OUT/cuda_tests.log" || status=1
    timeout 120 python3 -m toolkit check --seed 7 --cases 4 --json \
        >"$OUT/check_seed7.json" 2>"$OUT/check_seed7.err" || status=1
else
    timeout 400 python3 -m toolkit bench --device cuda --no-progress --out "$OUT" \
        --markdown "$OUT/suite_cuda.md" 2>&1 | tee "$OUT/bench.log" || status=1
    timeout 150 python3 benchmarks/adam_cuda.py --out "$OUT/adam_cuda.json" \
        2>&1 | tee -a "$OUT/bench.log" || status=1
    timeout 90 python3 benchmarks/muon_cuda.py --out "$OUT/muon_cuda.json" \
        2>&1 | tee -a "$OUT/bench.log" || status=1
fi
exit "$status"
