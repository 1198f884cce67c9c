#!/usr/bin/env bash
# One device call (one H200, < 8 minutes) for the fused AdaLN kernel variants
# (lab/kernel_variants.py, predictions in lab/LOG.md "Next measurements"):
#   1. NVRTC prebuild, in parallel, of every configuration the tests, sanitizers and timings use,
#      for every variant; ptxas resource report of the variants (registers, spills, occupancy);
#   2. at the same time: the op's GPU tests (default kernels) and every variant against the
#      default (lab/tests/test_variants_gpu.py) | compute-sanitizer memcheck, racecheck,
#      initcheck on a small set, every variant (inputs copied from the host, see
#      tools/adaln_sanitize.py, so initcheck can run with the kernel filter and finish);
#   3. alone on the GPU: every variant against the default kernel and the baselines on the quick
#      grid plus bf16 N = 16384 (python -m suite.experiments.kernels.bench: L2-cold, CUDA events, a GPU spin of at
#      least 2x the host enqueue time, so the small-N backward is timed on the GPU only);
#   4. a short table last. Raw CSVs and logs under $OUT.
# Usage (device tool): OUT=$OUT [VARIANTS=default,a,b] [KERNELS_PROFILE=full] [SUITE_GIT_SHA=sha] \
#   [FULL_FWD=default,a] [FULL_BWD=default,b] [SMOKE=a,b] bash lab/device/kernel_variants.sh
# (FULL_FWD / FULL_BWD: step 3 times those variants side by side on the full grid, one op each,
# instead of the quick grid; SKIP_TIMINGS=1 skips step 3)
# (VARIANTS narrows every phase to those variants; default: all of lab/kernel_variants.VARIANTS;
# KERNELS_PROFILE also runs the kernels experiment on that grid before the variant timings)
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-./gpu_out}; mkdir -p "$OUT"
T0=$(date +%s); stamp() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
# sanitizer order: the new shared-memory backward first, so a time-out still covers it
ALL=$(python3 -c "from lab.kernel_variants import VARIANTS; print(','.join(VARIANTS))")
export VARIANTS=${VARIANTS:-$ALL}
SAN_VARIANTS=$VARIANTS

stamp "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,ecc.mode.current --format=csv \
  | tee "$OUT/env.txt"
python3 -c "import torch, cuda.bindings as cb; from cuda.bindings import nvrtc; \
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cuda-bindings', cb.__version__, \
'nvrtc', nvrtc.nvrtcVersion()[1:])" | tee -a "$OUT/env.txt"
# the node's copy of the tree has no usable history: the caller passes the commit it copied
echo "commit ${SUITE_GIT_SHA:-$(git log -1 --format=%H 2>/dev/null)}" | tee -a "$OUT/env.txt"

stamp "NVRTC prebuild (default + variants)"
timeout 90 python3 - <<'PY'
import os, time
t = time.time()
from suite.cuda.launch import device_arch
from lab.kernel_variants import VARIANTS
from lab.variants import variant_config
from suite.ops.fused_adaln.cuda import KernelConfig, all_configs, prebuild
# what lab/tests/test_variants_gpu.py and tools/adaln_sanitize.py --small run on each variant
used = [(("bf16", "float", "bf16"), 0), (("float", "float", "float"), 0),
        (("bf16", "float", "float"), 0), (("bf16", "bf16", "bf16"), 1), (("f16", "f16", "f16"), 1),
        (("float", "float", "float"), 1), (("bf16", "float", "bf16"), 2),
        (("f16", "float", "f16"), 2), (("float", "float", "float"), 2)]
base = [KernelConfig(*c, D, m) for c, m in used for D in (64, 1000, 1536, 3072, 4100, 5120, 8192)]
names = os.environ["VARIANTS"].split(",")
cfgs = set(all_configs()) | {variant_config(c, v) for c in base for v in names}
n = prebuild(sorted(cfgs, key=str), device_arch(0), workers=16)
print(n, "programs for", device_arch(0), f"in {time.time() - t:.1f} s")
PY
timeout 30 python3 lab/kernel_variants_report.py --arch sm_90 --variants "$VARIANTS" --csv "$OUT/variant_resources.csv" \
  > "$OUT/variant_resources.md" 2>&1; echo "resource report exit=$? ($OUT/variant_resources.md)"

# A variant whose kernels wait on each other (round 37's bwd-lastk: finalizers polled a count) could hang the
# GPU: one short backward per variant first, killed after 90 s, so a hang costs 90 s of the call,
# not every phase's time-out (a process stuck in a spinning kernel may ignore SIGINT).
# (SMOKE: the variants to smoke-test; default: all of VARIANTS when they are at most 4, else none)
nvar=$(echo "$VARIANTS" | tr ',' '\n' | grep -c .)
SMOKE=${SMOKE-$([ "$nvar" -le 4 ] && echo "$VARIANTS")}
stamp "smoke test: one small backward per variant in '${SMOKE}' (killed after 90 s)"
for v in ${SMOKE//,/ }; do
  timeout -s KILL 90 env ADAPTIVELOAD_ADALN_VARIANT="$v" python3 lab/bwd_timeline.py --widths 1536 \
    --ns 4096 --reps 5 > "$OUT/smoke_$v.log" 2>&1
  rc=$?; echo "smoke $v exit=$rc: $(grep -m1 'D= 1536' "$OUT/smoke_$v.log")"
  [ $rc -eq 137 ] && { echo "HANG: variant $v did not finish a backward in 90 s; stopping"; exit 3; }
done

stamp "GPU tests: the op's and every variant's against the default | compute-sanitizer (parallel)"
( timeout -s INT 180 python3 -m pytest -q -rfEs --durations=8 -p no:cacheprovider -m gpu \
    tests/test_adaln.py lab/tests/test_variants_gpu.py > "$OUT/gpu_tests.log" 2>&1
  echo "pytest exit=$?" >> "$OUT/gpu_tests.log" ) &
for tool in memcheck racecheck initcheck; do
  ( timeout -s INT 170 compute-sanitizer --tool $tool --kernel-name kns=adaln \
      --report-api-errors no --error-exitcode 9 \
      python3 tools/adaln_sanitize.py --small --variants $SAN_VARIANTS > "$OUT/sanitize_$tool.log" 2>&1
    echo "exit=$?" >> "$OUT/sanitize_$tool.log" ) &
done
wait
tail -12 "$OUT/gpu_tests.log"
for tool in memcheck racecheck initcheck; do
  echo "$tool: $(tail -1 "$OUT/sanitize_$tool.log") $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' \
    "$OUT/sanitize_$tool.log" | tr '\n' ' ') variants done: $(grep -c 'sanitize cases done' \
    "$OUT/sanitize_$tool.log")/$(echo "$SAN_VARIANTS" | tr , "\n" | wc -l)"
done

if [ -n "${KERNELS_PROFILE:-}" ]; then  # the kernels experiment's grid with the default kernels
  stamp "kernels experiment, --profile $KERNELS_PROFILE"
  timeout "${KERNELS_LIMIT:-330}" python3 -m suite.experiments.kernels --profile "$KERNELS_PROFILE" \
    --out "$OUT/kernels" > "$OUT/kernels.log" 2>&1
  echo "kernels exit=$? ($(ls "$OUT/kernels" 2>/dev/null | tr '\n' ' '))"
fi

if [ -n "${SKIP_TIMINGS:-}" ]; then  # e.g. a call for the kernels experiment's grid alone
  stamp "timings skipped (SKIP_TIMINGS)"
elif [ -n "${FULL_FWD:-}${FULL_BWD:-}" ]; then  # side by side on the full grid, per op, no baselines
  for op in fwd bwd; do
    list=$([ $op = fwd ] && echo "${FULL_FWD:-}" || echo "${FULL_BWD:-}")
    [ -n "$list" ] || continue
    stamp "timings: $op on the full grid, $list"
    timeout 240 python3 -m lab.variant_sweep --out "$OUT/full_$op" --variants "$list" --profile full \
      --ops $op --baselines "" > "$OUT/full_$op.log" 2>&1
    echo "bench $op exit=$?"; tail -n 45 "$OUT/full_$op.log"
  done
else
  stamp "timings: variants vs default and baselines (quick grid + bf16 N=16384)"
  timeout 200 python3 -m lab.variant_sweep --out "$OUT" --reps 30 --variants "$VARIANTS" > "$OUT/variants_bench.log" 2>&1
  echo "bench exit=$?"
  grep -E "copy bandwidth|failed|HOST-BOUND" "$OUT/variants_bench.log" | head -20
fi

stamp "summary"
python3 - "$OUT" <<'PY'
import sys
import pandas as pd
pd.set_option("display.width", 250); pd.set_option("display.max_columns", 40)
out = sys.argv[1]
try:
    t = pd.read_csv(f"{out}/variants_table.csv")
except FileNotFoundError:
    sys.exit("no variants_table.csv: see variants_bench.log")
cols = [c for c in t.columns if c not in ("B",)]
print("% of copy (fwd) / of byte floor (bwd) by variant; best_x_default: best vs default (median time)")
print(t[cols].to_string(index=False))
PY
# the device tool returns at most 8 files: everything raw in one archive, the table beside it
tar czf /tmp/variants_raw.tgz -C "$OUT" . && mv /tmp/variants_raw.tgz "$OUT/" && \
  find "$OUT" -type f ! -name variants_raw.tgz ! -name variants_table.csv -delete
stamp "done"
