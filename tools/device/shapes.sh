#!/usr/bin/env bash
# The shape sweep and the cost-model fits alone, on one H200 (run from the repository root, .whl
# carried):
#   SUITE_GIT_SHA=<sha> bash tools/device/shapes.sh
# 1. installs the staged wheels (diffusers among them) into /tmp/site, the worktree's suite first;
# 2. the GPU tests of suite.train.stepfn (the 30-block Wan 2.1 1.3B step; an oversized shape
#    raises ShapeOutOfMemory and the next shape runs);
# 3. the quick-profile shape sweep and its fits alone: `reproduce --profile quick --only costmodel`
#    (= the shapes and costmodel experiments; `--only C1,C2,C3` would add the training experiment,
#    which also reports C1/C2 alternatives). diffusers' WanTransformer3DModel, Wan 2.1 1.3B, 30
#    blocks, bf16, gradient checkpointing, eager, text 512; 11 buckets at the equal-token
#    B = floor(75600 / S) + a ladder of cheap B: 25 shapes, 1 warm-up + 2 timed steps each.
# Estimate (suite/experiments/costmodel/sweep.py's docstring: 2.6 s at one 32,760-token clip, 3.8x spread
# at equal tokens): install 15 s, tests ~40 s, sweep ~185 s + ~15 s model build and fits: ~4.3 min.
# Every step is under `timeout` (tests 60 s, sweep 255 s), so the script ends by ~5.6 min even if
# the estimate is off; a sweep cut by its timeout writes no table, and its per-shape log lines
# (median of the timed repeats) are printed instead.
# $OUT (5 files): gpu.txt, pytest.log, reproduce.log, shapes_sweep.csv and run.tgz (the whole run
# directory: results/{shapes_*,costmodel_*}.csv, done.json, env.json); the per-shape medians and
# the fits print last.
set -o pipefail
OUT=${OUT:-reports/runs/device_shapes}
. "$(dirname "$0")/common.sh"
stamp "environment"
gpu_env | tee "$OUT/gpu.txt"
python3 -c 'import torch, diffusers, suite; print("torch", torch.__version__, "diffusers",
  diffusers.__version__, "suite", suite.__file__)' | tee -a "$OUT/gpu.txt"

stamp "GPU tests of the step function"
timeout "${TEST_TIMEOUT:-60}" python3 -m pytest -q -m gpu -rs tests/test_stepfn.py 2>&1 \
  | tee "$OUT/pytest.log" | tail -6

stamp "quick-profile sweep + fits (reproduce --only costmodel)"
run=/tmp/run-shapes
rm -rf "$run"
start=$(date +%s)
timeout "${SWEEP_TIMEOUT:-255}" python3 -m suite reproduce --profile quick --only costmodel \
  --out "$run" --no-report >"$OUT/reproduce.log" 2>&1
echo "reproduce exit status $? (timeout: 124) after $(( $(date +%s) - start )) s; last log lines:"
grep -a "shapes:\|costmodel:" "$OUT/reproduce.log" | tail -n 4
ls "$run"/results/shapes_sweep.csv* >/dev/null 2>&1 || grep -a "shapes: B=" "$OUT/reproduce.log"
tar czf "$OUT/run.tgz" -C /tmp run-shapes
cp "$run"/results/shapes_sweep.csv* "$OUT"/ 2>/dev/null

stamp "tables"
python3 - "$run" <<'PY'
import sys
from pathlib import Path

import pandas as pd

from suite.experiments import costmodel
from suite.rundir import RunDir

pd.set_option("display.width", 200)
run = RunDir(Path(sys.argv[1]))
try:
    sw = run.read_table("shapes_sweep")
except FileNotFoundError:
    sys.exit("shapes_sweep not written (see reproduce.log)")
meta = sw.iloc[0]
print(f"{costmodel.model_conditions(meta)} on {meta['device']}, text {meta['text_len']}")
g = sw.groupby(["B", "S"])
med = g.agg(tokens=("tokens", "first"), n=("step_s", "size"), median_s=("step_s", "median"),
            min_s=("step_s", "min"), max_s=("step_s", "max"),
            peak_gib=("peak_mem_bytes", lambda x: x.max() / 2**30)).reset_index()
warm = run.read_table("shapes_warmup").groupby(["B", "S"])["step_s"].first()
med["warmup_s"] = [warm.get((b, s)) for b, s in zip(med["B"], med["S"])]
med["eq_tok"] = med["B"] == meta["m_tok"] // med["S"]
print(med.sort_values(["S", "B"]).to_string(index=False, float_format="%.3f"))
timed, warmed = sw["step_s"].sum(), med["warmup_s"].sum()
print(f"steps: {timed:.1f} s timed + {warmed:.1f} s warm-up = {timed + warmed:.1f} s of steps")
eq = med[med["eq_tok"]]
print(f"equal-token spread: {eq.median_s.max() / eq.median_s.min():.2f}x over {len(eq)} buckets")
sk = run.read_table("shapes_skipped")
print(f"skipped (out of memory): {len(sk)}" + ("" if sk.empty else f" {sk[['B', 'S']].values.tolist()}"))
tables = run.tables()
if "costmodel_fit" not in tables:
    sys.exit("costmodel tables not written (see reproduce.log)")
fit = tables["costmodel_fit"]
print(fit[["variant", "a", "b", "p", "p_lo", "p_hi", "r2", "loo_err", "m_mem", "s_cross"]]
      .to_string(index=False))
if "costmodel_quadratic" in tables:
    print(tables["costmodel_quadratic"][["a", "c", "b", "d", "r2", "loo_err", "resid_cv"]]
          .to_string(index=False))
rows = costmodel.summarize(tables)
print(rows[["claim", "metric", "value", "ci_low", "ci_high"]].to_string(index=False))
PY
