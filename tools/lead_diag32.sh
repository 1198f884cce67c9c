#!/usr/bin/env bash
set -uo pipefail
. "$(dirname "$0")/gpu_common.sh"
stamp env; gpu_env
stamp prebuild; gpu_prebuild suite.ops.fused_cuda all_configs 2>&1 | tail -2; gpu_prebuild suite.ops.epilogue_cuda shipped_configs 2>&1 | tail -2
stamp diag; timeout 120 python3 tools/lead_diag32.py "$OUT" > "$OUT/diag.log" 2>&1; echo "diag rc=$?"
stamp breakdown; timeout 60 python3 -m suite.ops.host_bench --breakdown --reps 10 > "$OUT/breakdown.log" 2>&1; echo rc=$?
stamp epilogue-bench; timeout 200 python3 -m suite.ops.epilogue_bench --out "$OUT" --reps 20 > "$OUT/epbench.log" 2>&1; echo rc=$?
gzip -f "$OUT/fb_trace.json" 2>/dev/null
python3 -c "
import sys; from pathlib import Path; from suite.ops.epilogue_bench import table
import pandas as pd; pd.set_option('display.width', 250)
print(table(Path(sys.argv[1]) / 'epilogue_bench.csv'))" "$OUT"
tail -60 "$OUT/diag.log"
stamp done
