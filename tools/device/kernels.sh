#!/usr/bin/env bash
# The fused AdaLN kernels in one call on the GPU machine: build (NVRTC, parallel), GPU tests,
# benchmark, opmemory, compute-sanitizer. Usage: tools/device/kernels.sh [quick|reference|full]
# Writes everything under $OUT (default ./gpu_out); prints a short table last.
set -o pipefail
PROFILE=${1:-quick}
. "$(dirname "$0")/common.sh"

stamp "environment"
gpu_env

stamp "NVRTC prebuild"
gpu_prebuild suite.ops.fused_adaln.cuda all_configs

stamp "GPU tests"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_adaln.py \
  -k "not nvrtc" 2>&1 | tail -25

stamp "benchmark ($PROFILE)"
timeout 330 python3 -m suite.experiments.kernels --profile "$PROFILE" --out "$OUT" | tail -40
stamp "opmemory"
timeout 60 python3 -m suite.experiments.opmemory --out "$OUT" | grep -v Warn

stamp "compute-sanitizer"
# All three instrument only our kernels (kns=adaln) and skip host API lookups that cuda-bindings
# makes for driver entry points (cuGetProcAddress_v2 "errors" in the 2026-12-01 run).
# tools/adaln_sanitize.py copies every input from the host, so initcheck sees it initialized
# under the kernel filter (inputs written by torch's uninstrumented kernels looked uninitialized).
for tool in memcheck racecheck initcheck; do
  filt="--kernel-name kns=adaln --report-api-errors no"; lim=90
  timeout $lim compute-sanitizer --tool $tool $filt --error-exitcode 9 \
    python3 tools/adaln_sanitize.py > "$OUT/sanitize_$tool.log" 2>&1
  echo "$tool exit=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | tr '\n' ' ')"
done
cat "$OUT"/sanitize_*.log > "$OUT/sanitizer.log" && rm -f "$OUT"/sanitize_*.log

stamp "summary"
python3 - "$OUT" <<'PY'
import sys, pandas as pd
pd.set_option("display.width", 250)
t = pd.read_csv(f"{sys.argv[1]}/kernels.csv")
t = t[t.B == 1]
p = t.pivot_table(index=["op", "dtype", "D", "N"], columns="impl", values="pct_copy_bw").round(0)
print("% of copy bandwidth (B=1):"); print(p.to_string())
PY
stamp "done"
