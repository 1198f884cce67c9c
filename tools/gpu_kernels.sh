#!/usr/bin/env bash
# One call on the GPU machine: build (NVRTC, parallel), GPU tests, compute-sanitizer, benchmark.
# Usage: tools/gpu_kernels.sh [quick|full]    writes everything under $OUT (default ./gpu_out)
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
git rev-parse HEAD 2>/dev/null; git status --short 2>/dev/null | head -5

stamp "NVRTC prebuild"
timeout 120 python3 -c "
import time; t=time.time()
from suite.ops.fused_cuda import prebuild, all_configs
from suite.cuda.launch import device_arch
n = prebuild(all_configs(), device_arch(0), workers=14)
print(n, 'programs for', device_arch(0), f'in {time.time()-t:.1f} s')"

if [ "$PROFILE" != "bench" ]; then
  stamp "GPU tests"
  timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_adaln_gpu.py \
    tests/test_adaln_cpu.py -k "not nvrtc" 2>&1 | tail -40
  stamp "compute-sanitizer"
  for tool in memcheck racecheck initcheck; do
    timeout 80 compute-sanitizer --tool $tool --kernel-name regex:adaln --error-exitcode 9 \
      python3 tools/adaln_sanitize.py > "$OUT/sanitize_$tool.log" 2>&1
    echo "$tool exit=$? $(tail -2 "$OUT/sanitize_$tool.log" | tr '\n' ' ')"
  done
  cat "$OUT"/sanitize_*.log > "$OUT/sanitizer.log" && rm -f "$OUT"/sanitize_*.log
fi

stamp "benchmark ($PROFILE)"
BPROF=$PROFILE; [ "$PROFILE" = "bench" ] && BPROF=full
timeout 420 python3 -m suite.experiments.kernels --profile "$BPROF" --out "$OUT" | tail -150
stamp "opmemory"
timeout 90 python3 -m suite.experiments.opmemory --out "$OUT"

stamp "summary"
python3 - "$OUT" <<'PY'
import sys, pandas as pd
t = pd.read_csv(f"{sys.argv[1]}/kernels.csv")
t = t[t.B == 1]
p = t.pivot_table(index=["op", "dtype", "D", "N"], columns="impl", values="pct_copy_bw").round(0)
print("% of copy bandwidth (B=1):"); print(p.to_string())
s = t.pivot_table(index=["op", "dtype", "D", "N"], columns="impl", values="ms_median")
for base in ("wan-eager", "compile-wan", "compile-eager"):
    for imp in ("fused", "fused-f32out"):
        if imp in s and base in s:
            print(f"speedup {imp} vs {base}:", (s[base] / s[imp]).round(2).to_dict())
PY
stamp "done"
