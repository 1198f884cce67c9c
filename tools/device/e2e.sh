#!/usr/bin/env bash
# The diffusers-integration GPU run, for one H200 (run from the repository root, .whl carried):
#   bash tools/device/e2e.sh
# 1. installs the staged wheels (diffusers among them) into /tmp/site, the worktree's suite first;
# 2. the GPU tests of patch_wan and e2e (bf16 patched vs diffusers on the tiny and 1.3B configs,
#    regional compile fullgraph without recompiles, a 1-block e2e smoke run);
# 3. the standalone e2e benchmark: Wan 2.1 1.3B, 30 blocks, bf16, checkpointing, all three shapes
#    (8 x 480p images, 81 frames 480p, 81 frames 720p), all five variants, 1 warm-up + 3 timed
#    interleaved steps each, the profiler step at the two 480p shapes; tables after every shape.
# Estimate (H200, eager 81f 480p step ~2.6 s, 720p ~10 s, ~20 s inductor compile per compiled
# variant and shape): install 15 s, tests <= 120 s, e2e ~340 s with 4 variants (no
# suite.ops.epilogue) or ~420 s with 5 (then its timeout may cut the 720p shape: the two 480p
# shapes' tables are written already). Every step is under `timeout`, so it ends by ~8.5 min.
# $OUT: gpu.txt, pytest.log, e2e.log, e2e/e2e_{steps,memory,profile}.csv; the table prints last.
set -o pipefail
OUT=${OUT:-reports/runs/device_e2e}
. "$(dirname "$0")/common.sh"
mkdir -p "$OUT/e2e"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -c 'import torch, diffusers, suite; print("torch", torch.__version__, "cuda",
  torch.version.cuda, "diffusers", diffusers.__version__, "suite", suite.__file__)' | tee -a "$OUT/gpu.txt"

timeout "${TEST_TIMEOUT:-120}" python3 -m pytest -q -m gpu -rs \
  tests/test_diffusers_patch.py tests/test_e2e.py 2>&1 | tee "$OUT/pytest.log" | tail -15

timeout "${E2E_TIMEOUT:-360}" python3 -m suite.experiments.e2e --out "$OUT/e2e" \
  --repeats "${REPEATS:-3}" --profile-shapes img480x8,v81x480 >"$OUT/e2e.log" 2>&1
echo "e2e exit status $? (timeout: 124); last log lines:"
grep "^\[" "$OUT/e2e.log" | tail -n 6

python3 - "$OUT/e2e" <<'PY'
import sys
from pathlib import Path
import pandas as pd
from suite.experiments import e2e
d = Path(sys.argv[1])
tables = {p.stem: pd.read_csv(p) for p in sorted(d.glob("e2e_*.csv"))}
if not tables:
    print("e2e: no tables written (see e2e.log)")
else:
    print("=== e2e (per-step samples in e2e_steps.csv) ===")
    e2e.print_tables(tables)
PY
