#!/usr/bin/env bash
# GPU regression benchmarks on a GPU node: pytest-benchmark kernels (JSON) and the asv GPU suite
# saved under machine "h200" for the commit whose .git travels with the tree.
#   usage (device tool, carry .whl and .git): bash tools/gpu_bench.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
exec > >(tee "$out/bench.log") 2>&1
python3 -m pip install -q --no-index --find-links .whl adaptiveload-suite
timeout 120 python3 -m pytest -q tests/bench/test_bench_kernels.py --benchmark-enable \
  --benchmark-timer suite.timing.cuda_synced_perf_counter --benchmark-json "$out/bench_kernels.json" \
  --benchmark-columns median,iqr,rounds -p no:cacheprovider
git config --global --add safe.directory "$PWD"
timeout 200 python3 -m benchmarks.run_asv --machine h200 --bench "bench_kernels"
tar czf "$out/asv_results.tgz" .asv/results
