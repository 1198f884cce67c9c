#!/usr/bin/env bash
# The fused AdaLN op's thin host path on one H200 (issue 32 items 1, 2, 6), in one device call
# of about 5 minutes: NVRTC prebuild of the shipped configurations, the GPU tests
# (tests/test_adaln_gpu.py, tests/test_adaln_host_path_gpu.py: hold-out cases, CPU modulation
# refused with CUDA alive after, fast path == general path, graphs, compile), the burst
# benchmark (lab.ops.host_bench: op / eager / compile-of-eager / autograd floor, fwd and
# fwd+bwd at 8x1560x1536 and 1x4096x1536 bf16; burst, host-only and CUDA-graph us per call) and
# the bandwidth check (lab.ops.bandwidth_check: bf16 fwd and bwd at N = 65536 / 75600,
# D = 1536 / 3072 / 5120, % of a measured copy, target >= 90%).
#   usage (device tool, carry .whl): OUT=$OUT SUITE_GIT_SHA=<sha> bash tools/gpu_ophost.sh
# Writes under $OUT: env.txt, tests.log, junit.xml, host_path_gpu.csv, host_bench.log,
# bandwidth.csv, bandwidth.log; prints a short table last.
set -uo pipefail
. "$(dirname "$0")/gpu_common.sh"

stamp "environment" | tee "$OUT/env.txt"
{ gpu_env; lscpu | grep -m1 "Model name"; } 2>&1 | tee -a "$OUT/env.txt"

stamp "NVRTC prebuild"
gpu_prebuild suite.ops.fused_adaln.cuda all_configs 2>&1 | tail -3

stamp "GPU tests"
timeout 170 python3 -m pytest -q -p no:cacheprovider -rfEs --junitxml="$OUT/junit.xml" \
  tests/test_adaln_gpu.py tests/test_adaln_host_path_gpu.py > "$OUT/tests.log" 2>&1
trc=$?
tail -15 "$OUT/tests.log"

stamp "burst benchmark"
timeout 200 python3 -m lab.ops.host_bench --out "$OUT" --reps 20 > "$OUT/host_bench.log" 2>&1
hrc=$?
tail -20 "$OUT/host_bench.log"

stamp "bandwidth check"
timeout 90 python3 -m lab.ops.bandwidth_check --out "$OUT" --reps 15 > "$OUT/bandwidth.log" 2>&1
brc=$?

stamp "summary"
echo "tests: $(grep -Eo '[0-9]+ (passed|failed|skipped|error)[a-z]*' "$OUT/tests.log" | tr '\n' ' ') (rc $trc)"
python3 - "$OUT" <<'EOF'
import sys
from pathlib import Path
import pandas as pd
out = Path(sys.argv[1])
p = out / "host_path_gpu.csv"
if p.exists():
    t = pd.read_csv(p)
    piv = t.pivot_table(index=["shape", "op"], columns="impl", values="burst_us", aggfunc="first")
    print("burst us per call (50 back-to-back calls):")
    print(piv.round(1).to_string())
    op = t[t.impl == "op"].set_index(["shape", "op"])
    print("op: host-only us per call, CUDA-graph us per call:")
    print(op[["host_us", "graph_us"]].to_string())
    if "eager" in piv:
        print("eager burst / op burst:")
        print((piv["eager"] / piv["op"]).round(2).to_string())
else:
    print("burst benchmark: no results (see host_bench.log)")
p = out / "bandwidth.csv"
if p.exists():
    b = pd.read_csv(p)
    print("bandwidth, % of copy (target >= 90):")
    print(b.pivot_table(index=["op", "N"], columns="D", values="pct_copy").round(1).to_string())
else:
    print("bandwidth check: no results (see bandwidth.log)")
EOF
echo "rc: tests $trc, host_bench $hrc, bandwidth $brc; $(( $(date +%s) - T0 )) s total"
