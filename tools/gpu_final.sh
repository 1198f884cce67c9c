#!/usr/bin/env bash
# One device call that re-checks what the ops32 run found broken and runs the training side's
# GPU checks: the op GPU tests (not the graph-capture ones), the bandwidth check, the epilogue
# benchmark, the host breakdown, then tools/gpu_train31.sh (train_step on diffusers' model).
#   usage (device tool, carry .whl): OUT=$OUT SUITE_GIT_SHA=<sha> bash tools/gpu_final.sh
set -uo pipefail
. "$(dirname "$0")/gpu_common.sh"
mkdir -p "$OUT/ops"
stamp "environment"; gpu_env
stamp "op GPU tests"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_adaln_gpu.py \
  tests/test_adaln_host_path_gpu.py tests/test_epilogue_gpu.py tests/test_diffusers_patch.py \
  -m gpu > "$OUT/ops/tests.log" 2>&1; echo "tests rc=$?"; tail -3 "$OUT/ops/tests.log"
stamp "bandwidth check"
timeout 60 python3 -m lab.ops.bandwidth_check --out "$OUT/ops" --reps 15 > "$OUT/ops/bandwidth.log" 2>&1
echo "bandwidth rc=$?"; tail -14 "$OUT/ops/bandwidth.log"
stamp "epilogue bench"
timeout 70 python3 -m lab.ops.epilogue_bench --out "$OUT/ops" --reps 20 > "$OUT/ops/epilogue_bench.log" 2>&1
echo "epilogue bench rc=$?"
python3 -c "
import sys; from pathlib import Path; from lab.ops.epilogue_bench import table
import pandas as pd; pd.set_option('display.width', 250)
print(table(Path(sys.argv[1]) / 'epilogue_bench.csv'))" "$OUT/ops" 2>&1 | tail -30
stamp "host breakdown"
timeout 50 python3 -m lab.ops.host_bench --breakdown --out "$OUT/ops" --calls 100 --reps 10 > "$OUT/ops/breakdown.log" 2>&1
echo "breakdown rc=$?"; tail -45 "$OUT/ops/breakdown.log"
tar czf "$OUT/ops.tgz" -C "$OUT" ops && rm -rf "$OUT/ops"
stamp "training side"
mkdir -p "$OUT/train"; OUT="$OUT/train" timeout 300 bash tools/gpu_train31.sh 2>&1 | tail -25
tar czf "$OUT/train.tgz" -C "$OUT" train && rm -rf "$OUT/train"
stamp "done"
