#!/usr/bin/env bash
# The fused block epilogues on one GPU (H200): NVRTC prebuild, GPU + CPU tests, the benchmark
# (residual_norm and rms_norm, fwd and bwd, B=1, N in {4096, 32760, 75600}, D in {1536, 3072,
# 5120}, bf16: fused vs diffusers' eager ops vs torch.compile, % of a device copy of the byte
# floor). ~4 minutes. Writes under $OUT (default ./gpu_out): tests.log, bench.log,
# epilogue_bench.csv; prints the table last.
#   usage (device tool): OUT=$OUT bash tools/gpu_epilogue.sh [--quick]
set -o pipefail
. "$(dirname "$0")/gpu_common.sh"

stamp "environment"
gpu_env

stamp "NVRTC prebuild"
gpu_prebuild suite.ops.epilogue.cuda shipped_configs

stamp "tests (GPU and CPU)"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_epilogue_gpu.py \
  tests/test_epilogue_cpu.py > "$OUT/tests.log" 2>&1
echo "pytest exit=$?"; tail -15 "$OUT/tests.log"

stamp "benchmark"
timeout 240 python3 -m lab.ops.epilogue_bench --out "$OUT" --reps 30 "$@" > "$OUT/bench.log" 2>&1
echo "bench exit=$?"; grep -E "^\[|not run|Error" "$OUT/bench.log" | tail -25

stamp "summary"
python3 -c "
import sys; from pathlib import Path; from lab.ops.epilogue_bench import table
import pandas as pd; pd.set_option('display.width', 250)
print('% of a device copy of the byte floor; x: fused speed-up (B=1, bf16 x):')
print(table(Path(sys.argv[1]) / 'epilogue_bench.csv'))" "$OUT"
stamp "done"
