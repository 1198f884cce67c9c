#!/usr/bin/env bash
# The epilogues' bandwidth at the back-to-back protocol and the AdaLN host path, in one call (~5 min):
#   OUT=$OUT SUITE_GIT_SHA=<sha> bash lab/device/epilogues_host.sh   (carry .whl)
# 1. the shipped epilogue kernels, kernel level (lab.epilogue_variants --only shipped): residual_norm
#    and rms_norm, fwd and bwd, D = 1536/3072/5120, N = 65536/75600, % of a copy of the same bytes;
# 2. the same through the op (lab.ops.epilogue_bench: autograd.grad, L2 flush + GPU spin, 10 calls);
# 3. the AdaLN host path (lab.ops.host_bench): op and autograd floor in the same bursts;
# 4. the AdaLN bandwidth beside them (lab.ops.bandwidth_check), so the run names its own copy rate.
. tools/device/common.sh; stamp env; gpu_env | tee $OUT/env.txt
stamp prebuild
gpu_prebuild suite.ops.epilogue.cuda shipped_configs
gpu_prebuild suite.ops.fused_adaln.cuda all_configs
stamp variants
timeout 150 python3 -m lab.epilogue_variants --out $OUT --reps 30 --ns 65536,75600 --only shipped > $OUT/variants.log 2>&1; tail -2 $OUT/variants.log
stamp op-level
timeout 150 python3 -m lab.ops.epilogue_bench --out $OUT --reps 30 --ns 65536,75600 > $OUT/epilogue_bench.log 2>&1; tail -2 $OUT/epilogue_bench.log
stamp host
timeout 90 python3 -m lab.ops.host_bench --out $OUT --reps 30 > $OUT/host.log 2>&1; tail -2 $OUT/host.log
stamp bw
timeout 60 python3 -m lab.ops.bandwidth_check --out $OUT --reps 15 > $OUT/bw.log 2>&1; tail -2 $OUT/bw.log
stamp tables
python3 - <<'PY'
import os
import pandas as pd
o = os.environ["OUT"]; pd.set_option("display.width", 250)
t = pd.read_csv(f"{o}/epilogue_variants.csv") if os.path.exists(f"{o}/epilogue_variants.csv") else None
if t is not None:
    print("== shipped kernels, % of copy"); print(t.pivot_table(index=["op", "pass", "N"], columns="D", values="pct_copy").round(1).to_string())
if os.path.exists(f"{o}/epilogue_bench.csv"):
    from pathlib import Path
    from lab.ops.epilogue_bench import table
    print("== through the op"); print(table(Path(o) / "epilogue_bench.csv"))
try:
    h = pd.read_csv(f"{o}/host_path_gpu.csv"); print("== host path (us per call)"); print(h.round(1).to_string())
except FileNotFoundError:
    print("host_path_gpu missing")
try:
    b = pd.read_csv(f"{o}/bandwidth.csv"); print("== AdaLN % of copy")
    print(b.pivot_table(index=["op", "N"], columns="D", values="pct_copy").round(1).to_string())
except FileNotFoundError:
    print("bandwidth missing")
PY
stamp done
