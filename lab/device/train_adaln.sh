#!/usr/bin/env bash
# diffusers' AdaLN against the fused one in emulated training, on one H200 (run from the
# repository root; <= 5 minutes):
#   bash lab/device/train_adaln.sh
# 1. the trainer's GPU tests (tests/test_train_gpu.py: diffusers' Wan transformer, checkpointing,
#    fused AdaLN against diffusers' own, FSDP2 on one NCCL rank in fp32 and bf16);
# 2. two short emulated runs of Wan 2.1 1.3B (LAYERS blocks of 30, gradient checkpointing, bf16,
#    16 virtual ranks, the same dual-constraint plan) through `python -m suite.train`: diffusers'
#    own AdaLN ("wan", eager) and the fused one (patch_wan).
# Writes $OUT/{gpu.txt, pytest.log, log, <adaln>_steps.csv, <adaln>_micro.csv, table.txt} and
# prints the per-run step times last (step 0 holds the warm-up: the means leave it out).
set -o pipefail
source tools/device/common.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LAYERS=${LAYERS:-2}
STEPS=${STEPS:-3}
gpu_env | tee "$OUT/gpu.txt"

stamp "GPU tests (tests/test_train_gpu.py)"
timeout 150 python3 -m pytest -q -m gpu tests/test_train_gpu.py 2>&1 | tee "$OUT/pytest.log" | tail -15

RUNS=/tmp/train_adaln_runs
rm -rf "$RUNS"
for ADALN in wan fused; do
  stamp "emulated: wan-1.3b, $LAYERS blocks, checkpointing, bf16, 16 ranks, adaln $ADALN"
  timeout 100 python3 -m suite.train --model wan-1.3b --layers "$LAYERS" --checkpointing \
      --dtype bf16 --adaln "$ADALN" --policy dual --m-mem 75600 --p 1.5 --steps "$STEPS" \
      --emulate-ranks 16 --corpus-size 4000 --out "$RUNS/$ADALN" 2>&1 | tail -4 | tee -a "$OUT/log"
  cp "$RUNS/$ADALN/steps.csv" "$OUT/${ADALN}_steps.csv" 2>/dev/null
  cp "$RUNS/$ADALN/micro.csv" "$OUT/${ADALN}_micro.csv" 2>/dev/null
done

stamp "per-run step times"
python3 - "$RUNS" <<'PY' 2>&1 | tee "$OUT/table.txt"
import sys
from pathlib import Path

import pandas as pd

rows = []
for d in sorted(Path(sys.argv[1]).iterdir()):
    f = d / "steps.csv"
    if not f.exists():
        rows.append({"run": d.name, "status": "failed (see log)"})
        continue
    s = pd.read_csv(f)
    later = s[s.step >= 1] if len(s) > 1 else s
    rows.append({
        "run": d.name, "status": "ok", "steps": len(s),
        "step0_s": round(float(s.step_s.iloc[0]), 3),
        "step_s_mean": round(float(later.step_s.mean()), 3),
        "compute_max_mean_s": round(float(later.compute_max_s.mean()), 3),
        "rank_cv": round(float(later.rank_cv.mean()), 3),
        "tokens_per_s": round(float(later.tokens.sum() / later.step_s.sum())),
        "peak_GiB": round(float(s.peak_mem_bytes.max()) / 2**30, 2),
        "step_times_s": " ".join(f"{v:.2f}" for v in s.step_s),
    })
pd.set_option("display.width", 200)
print(pd.DataFrame(rows).to_string(index=False))
PY
