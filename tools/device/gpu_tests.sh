#!/usr/bin/env bash
# Every test marked `gpu` (one GPU; not `multigpu`) in tests/ and lab/tests, after NVRTC-compiling
# in parallel every program those tests reach (the fused AdaLN's configurations, the shipped
# epilogues, the layout property tests' draws), so no test waits on a compile.
#   usage (device tool, carry .whl): OUT=$OUT SUITE_GIT_SHA=<sha> [LIMIT=420] bash tools/device/gpu_tests.sh [pytest args]
# $OUT: gpu.txt (GPU, driver, versions, commit), gpu_tests.log, junit.xml.
set -uo pipefail
. "$(dirname "$0")/common.sh"
gpu_env | tee "$OUT/gpu.txt"

stamp "prebuild"
timeout 200 python3 -c "
import os, sys, time; sys.path.insert(0, 'tests'); t = time.time()
from layouts import fuzz_configs
from suite.cuda.launch import device_arch
from suite.ops.epilogue import cuda as ep
from suite.ops.fused_adaln import cuda as ad
arch, w = device_arch(0), max(1, (os.cpu_count() or 2) - 1)
fa, fe = fuzz_configs()
n = ad.prebuild(list(dict.fromkeys([*ad.all_configs(), *fa])), arch, w)
n += ep.prebuild(list(dict.fromkeys([*ep.shipped_configs(), *fe])), arch, w)
print(n, 'programs for', arch, f'in {time.time() - t:.1f} s')"

stamp "gpu tests"
ADAPTIVELOAD_TEST_VARIANTS=${ADAPTIVELOAD_TEST_VARIANTS:-default} timeout "${LIMIT:-420}" \
  python3 -m pytest -q -rfEs -m "gpu and not multigpu" --continue-on-collection-errors \
  -p no:cacheprovider --durations=15 --junitxml "$OUT/junit.xml" tests lab/tests "$@" \
  2>&1 | tee "$OUT/gpu_tests.log" | tail -40
echo "pytest exit ${PIPESTATUS[0]}"
stamp "done"
