#!/usr/bin/env bash
# The shipped ops (fused AdaLN, block epilogues) on one H200, in one device call of at most 6
# minutes: correctness on the GPU, host path, graph capture, bandwidth against a measured copy:
#   1. NVRTC prebuild (AdaLN table, epilogues, the epilogue lab candidates), in parallel;
#   2. GPU tests of the ops (-m gpu): tests/test_adaln.py, test_epilogue.py, test_diffusers_patch.py,
#      test_timing_gpu.py, test_adaln_graph_gpu.py (fwd+bwd captured and replayed == eager; last:
#      a failed capture breaks the CUDA state of the process);
#   3. host path: the burst benchmark (op / eager / compile / autograd floor; burst, host-only,
#      CUDA-graph replay; fwd and fwd+bwd) and the breakdown with the real driver (each piece
#      timed alone, fwd+bwd split at the autograd engine's seams beside the floor, profiler);
#   4. CUDA-graph capture of fwd+bwd per impl, each failure in a fresh process (graph_check);
#   5. the epilogue lab: shipped kernels and candidates side by side at N = 65536, 75600 (reps 20);
#      the epilogue benchmark (fused vs eager vs compile) at N = 32760, 75600;
#   6. bf16 fwd / bwd bandwidth at N = 65536 / 75600 vs a measured copy (>= 90%).
# Each phase has a time-out inside a 350 s budget; a phase that runs out is reported, the rest go on.
#   usage (device tool, carry .whl): OUT=$OUT SUITE_GIT_SHA=<sha> bash tools/device/ops.sh
# (One piece alone runs as its module: e.g. python3 -m lab.ops.epilogue_bench --out DIR --quick.)
# $OUT (8 files): ops.log (all of this), host_path_gpu.csv, host_path_breakdown_gpu.csv,
# graph_check.csv, epilogue_variants.csv, epilogue_bench.csv, bandwidth.csv, logs.tar.gz
# (pytest log + junit, each phase's own log, env). The short table prints last.
set -uo pipefail
OUT=${OUT:-./gpu_out}; mkdir -p "$OUT"
HERE=$(dirname "$0")

main() {
. "$HERE/common.sh"
LOGS="$OUT/logs"; mkdir -p "$LOGS"
BUDGET=${BUDGET:-350}
# seconds for a phase: its own cap, or what the budget leaves after `reserve` for later phases
slot() { local cap=$1 reserve=$2 left=$(( BUDGET - ($(date +%s) - T0) - $2 )); echo $(( left < cap ? (left > 5 ? left : 5) : cap )); }
declare -A RC

stamp "environment" | tee "$LOGS/env.txt"
{ gpu_env; echo "suite commit: ${SUITE_GIT_SHA:-unknown}"; lscpu | grep -m1 "Model name"; nproc
  echo "CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-unset} governor=$(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo n/a)"; } 2>&1 | tee -a "$LOGS/env.txt"

stamp "NVRTC prebuild"
timeout "$(slot 75 260)" python3 - <<'PY' 2>&1 | tail -4
import os, time
from suite.cuda.launch import device_arch
from suite.ops.epilogue import cuda as ec
from suite.ops.fused_adaln import cuda as fc
from lab import epilogue_variants as ev
t, arch, w = time.time(), device_arch(0), max(1, (os.cpu_count() or 2) - 1)
n = fc.prebuild(fc.all_configs(), arch, workers=w)
n += ec.prebuild(list(dict.fromkeys(ec.shipped_configs() + ev.configs())), arch, workers=w)
print(n, "programs for", arch, f"in {time.time() - t:.1f} s")
PY
RC[prebuild]=$?

stamp "GPU tests"
timeout "$(slot 130 170)" python3 -m pytest -q -p no:cacheprovider -rfEs -m gpu \
  --junitxml="$LOGS/junit.xml" tests/test_adaln.py tests/test_epilogue.py tests/test_epilogue_variants.py \
  tests/test_diffusers_patch.py tests/test_timing_gpu.py lab/tests/test_graph_check_gpu.py \
  tests/test_adaln_graph_gpu.py \
  > "$LOGS/tests.log" 2>&1
RC[tests]=$?
grep -E "passed|failed|error|FAILED|ERROR" "$LOGS/tests.log" | tail -12

stamp "host path: burst benchmark"
timeout "$(slot 70 130)" python3 -m lab.ops.host_bench --out "$OUT" --reps 15 \
  > "$LOGS/host_bench.log" 2>&1
RC[host_bench]=$?
tail -18 "$LOGS/host_bench.log"

stamp "host path: breakdown (real driver) + profiler"
timeout "$(slot 40 110)" python3 -m lab.ops.host_bench --breakdown --profile --out "$OUT" \
  --calls 100 --reps 15 > "$LOGS/breakdown.log" 2>&1
RC[breakdown]=$?

stamp "CUDA-graph capture of fwd+bwd (graph_check)"
timeout "$(slot 60 100)" python3 -m lab.ops.graph_check --out "$OUT" > "$LOGS/graph_check.log" 2>&1
RC[graph_check]=$?
head -14 "$LOGS/graph_check.log"

stamp "epilogue lab: shipped vs candidates, N = 65536, 75600"
timeout "$(slot 90 70)" python3 -m lab.epilogue_variants --out "$OUT" --reps 20 --ns 65536,75600 \
  > "$LOGS/epilogue_variants.log" 2>&1
RC[epilogue_variants]=$?

stamp "bandwidth check (bf16, % of copy, target >= 90)"
timeout "$(slot 45 35)" python3 -m lab.ops.bandwidth_check --out "$OUT" --reps 15 \
  > "$LOGS/bandwidth.log" 2>&1
RC[bandwidth]=$?

stamp "epilogue benchmark: fused vs eager vs compile, N = 32760, 75600"
timeout "$(slot 90 8)" python3 -m lab.ops.epilogue_bench --out "$OUT" --reps 20 \
  --ns 32760,75600 > "$LOGS/epilogue_bench.log" 2>&1
RC[epilogue_bench]=$?

stamp "summary"
echo "tests: $(grep -Eo '[0-9]+ (passed|failed|skipped|deselected|error)[a-z]*' "$LOGS/tests.log" | tr '\n' ' ')"
python3 - "$OUT" <<'EOF'
import sys
from pathlib import Path
import pandas as pd
pd.set_option("display.width", 200)
out = Path(sys.argv[1])
def show(name, fn):
    p = out / name
    if not p.exists():
        print(f"{name}: not written (see logs.tar.gz)")
        return
    try:
        fn(pd.read_csv(p))
    except Exception as err:  # a summary must not hide the rest
        print(f"{name}: {type(err).__name__}: {err}")
def burst(t):
    print("host path, us per call (burst | host-only):")
    piv = t.pivot_table(index=["shape", "op"], columns="impl", values=["burst_us", "host_us"])
    print(piv.round(1).to_string())
    print("op, CUDA-graph replay us per call:")
    print(t[t.impl == "op"][["shape", "op", "graph_us"]].to_string(index=False, max_colwidth=110))
def breakdown(t):
    s = t[t.kind == "split"].pivot_table(index=["shape", "part"], columns="impl", values="us_median")
    print("fwd+bwd split at the engine's seams, median us (op vs autograd floor):")
    print(s.round(1).to_string())
    p = t[t.kind == "piece"].pivot_table(index="part", columns="shape", values="us_min")
    print("pieces timed alone, min us (all in host_path_breakdown_gpu.csv):")
    print(p.round(1).to_string())
def graphs(t):
    cols = [c for c in ("shape", "impl", "mode", "captured", "bitwise", "replay_us", "error") if c in t]
    print("fwd+bwd CUDA-graph capture:")
    print(t[cols].to_string(index=False, max_colwidth=70))
def variants(t):
    print("epilogue candidates, % of copy at N = 75600 (CTAs per SM, max abs vs shipped: CSV):")
    piv = t.pivot_table(index=["op", "pass", "D"], columns="candidate", values="pct_copy")
    order = [c for c in t.candidate.drop_duplicates() if c in piv]  # shipped first
    print(piv[order].round(0).to_string())
def bench(t):
    piv = t[t.N == t.N.max()].pivot_table(index=["op", "pass", "N", "D"], columns="impl",
                                          values="pct_copy")
    print("epilogue benchmark, % of copy of the byte floor (largest N; all in the CSV):")
    print(piv.round(0).to_string())
def bandwidth(t):
    print("AdaLN bf16 bandwidth, % of copy (target >= 90):")
    print(t.pivot_table(index=["op", "N"], columns="D", values="pct_copy").round(1).to_string())
show("host_path_gpu.csv", burst)
show("host_path_breakdown_gpu.csv", breakdown)
show("graph_check.csv", graphs)
show("epilogue_variants.csv", variants)
show("epilogue_bench.csv", bench)
show("bandwidth.csv", bandwidth)
EOF
rcs=""; for k in prebuild tests host_bench breakdown graph_check epilogue_variants bandwidth epilogue_bench; do rcs+="$k ${RC[$k]}, "; done
echo "rc (124: timed out): ${rcs%, }; $(( $(date +%s) - T0 )) s total"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOGS"
}

main 2>&1 | tee "$OUT/ops.log"
