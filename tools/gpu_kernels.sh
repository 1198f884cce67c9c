#!/usr/bin/env bash
# One call on the GPU machine: build (NVRTC, parallel), GPU tests, benchmark, opmemory,
# compute-sanitizer. Usage: tools/gpu_kernels.sh [quick|reference|full]
# Writes everything under $OUT (default ./gpu_out); prints a short table last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PROFILE=${1:-quick}
OUT=${OUT:-./gpu_out}; mkdir -p "$OUT"
T0=$(date +%s); stamp() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }

stamp "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,ecc.mode.current --format=csv
python3 -c "import torch, cuda.bindings as cb; from cuda.bindings import nvrtc; \
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cuda-bindings', cb.__version__, \
'nvrtc', nvrtc.nvrtcVersion()[1:])"

stamp "NVRTC prebuild"
timeout 120 python3 -c "
import time; t=time.time()
from suite.ops.fused_adaln.cuda import prebuild, all_configs
from suite.cuda.launch import device_arch
n = prebuild(all_configs(), device_arch(0), workers=14)
print(n, 'programs for', device_arch(0), f'in {time.time()-t:.1f} s')"

stamp "GPU tests"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_adaln_gpu.py \
  tests/test_adaln_cpu.py -k "not nvrtc" 2>&1 | tail -25

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
