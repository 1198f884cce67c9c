#!/usr/bin/env bash
# The fused block epilogues on one GPU (H200): NVRTC prebuild, GPU + CPU tests, the benchmark
# (residual_norm and rms_norm, fwd and bwd, B=1, N in {4096, 32760, 75600}, D in {1536, 3072,
# 5120}, bf16: fused vs diffusers' eager ops vs torch.compile, % of a device copy of the byte
# floor). ~4 minutes. Writes under $OUT (default ./gpu_out): tests.log, bench.log,
# epilogue_bench.csv; prints the table last.
#   usage (device tool): OUT=$OUT bash tools/gpu_epilogue.sh [--quick]
set -o pipefail
OUT=${OUT:-./gpu_out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
fi
# the worktree first: a staged suite wheel must not shadow the code under test
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:/tmp/site"
T0=$(date +%s); stamp() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }

stamp "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,ecc.mode.current --format=csv
python3 -c "import torch, cuda.bindings as cb; from cuda.bindings import nvrtc; \
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cuda-bindings', cb.__version__, \
'nvrtc', nvrtc.nvrtcVersion()[1:])"
git rev-parse HEAD 2>/dev/null || echo "git: no repository here"

stamp "NVRTC prebuild"
timeout 120 python3 -c "
import time; t = time.time()
from suite.ops.epilogue_cuda import prebuild, shipped_configs
from suite.cuda.launch import device_arch
n = prebuild(shipped_configs(), device_arch(0), workers=14)
print(n, 'programs for', device_arch(0), f'in {time.time() - t:.1f} s')"

stamp "tests (GPU and CPU)"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_epilogue_gpu.py \
  tests/test_epilogue_cpu.py > "$OUT/tests.log" 2>&1
echo "pytest exit=$?"; tail -15 "$OUT/tests.log"

stamp "benchmark"
timeout 240 python3 -m suite.ops.epilogue_bench --out "$OUT" --reps 30 "$@" > "$OUT/bench.log" 2>&1
echo "bench exit=$?"; grep -E "^\[|not run|Error" "$OUT/bench.log" | tail -25

stamp "summary"
python3 -c "
import sys; from pathlib import Path; from suite.ops.epilogue_bench import table
import pandas as pd; pd.set_option('display.width', 250)
print('% of a device copy of the byte floor; x: fused speed-up (B=1, bf16 x):')
print(table(Path(sys.argv[1]) / 'epilogue_bench.csv'))" "$OUT"
stamp "done"
