#!/usr/bin/env bash
# The fused ops' layout property tests on one GPU (tests/test_ops_layouts.py and
# test_epilogue_layouts.py: every public entry point against float64 over drawn shapes, dtypes
# and memory layouts), with every NVRTC program the draws can reach prebuilt in parallel first
# (a program compiles in 1-3 s). Writes
# $OUT/fuzz.log (pytest's output with hypothesis' statistics: draws per test, the seed).
#   usage (device tool, carry .whl): OUT=$OUT SEED=<n> [EXAMPLES=300] [LIMIT=360] bash tools/device/ops_fuzz.sh
set -o pipefail
. "$(dirname "$0")/common.sh"

stamp "environment"
gpu_env

stamp "NVRTC prebuild of every configuration the draws reach"
timeout 300 python3 -c "
import os, time; t = time.time()
from suite.cuda.launch import device_arch
from suite.ops.epilogue import cuda as epilogue_cuda
from suite.ops.fused_adaln import cuda as fused_cuda
from tests.layouts import fuzz_configs
adaln_cfgs, epi_cfgs = fuzz_configs(); arch = device_arch(0); w = max(1, (os.cpu_count() or 2) - 1)
n = fused_cuda.prebuild(adaln_cfgs, arch, w) + epilogue_cuda.prebuild(epi_cfgs, arch, w)
print(n, 'programs for', arch, f'in {time.time() - t:.0f} s')"

stamp "property test: ${EXAMPLES:-300} draws per entry point, seed ${SEED:-0}"
SUITE_FUZZ_EXAMPLES=${EXAMPLES:-300} timeout "${LIMIT:-360}" python3 -m pytest -p no:cacheprovider \
  -q -rfEs tests/test_ops_layouts.py tests/test_epilogue_layouts.py -k "cuda or reported" \
  --hypothesis-seed="${SEED:-0}" --hypothesis-show-statistics 2>&1 | tee "$OUT/fuzz.log" | grep -vE "^\s*$"
echo "pytest exit ${PIPESTATUS[0]}"
stamp "done"
