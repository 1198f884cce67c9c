#!/usr/bin/env bash
# The trainer's GPU run, for the device machine (run from the repository root):
#   bash tools/device/train.sh [quick|full]
# One GPU: GPU trainer tests, the shape sweep, the cost fit and the training experiment (quick
# profile), into $OUT/run (tables as run.tgz) with logs; prints the metric table last.
# Two or more GPUs: instead, validates the emulator against a real two-rank NCCL run (all-reduce
# bus bandwidth, real DDP run, emulated run of the same plan, per-step error).
set -o pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PROFILE=${1:-quick}
OUT=${OUT:-reports/runs/device_train}
mkdir -p "$OUT"
NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())')
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/gpu.txt"

if [ "$NGPU" -ge 2 ]; then
  # budgets of a one-GPU reference trainer run (h200/train/run2/training_info.csv; reports/reference/INDEX.md names its commit)
  B="--m-mem ${M_MEM:-226800} --m-comp ${M_COMP:-3685322} --p ${P:-1.279}"
  COMMON="--model wan-1.3b --layers ${LAYERS:-1} --policy dual --steps ${STEPS:-12} --mix default $B"
  timeout 60 torchrun --nproc-per-node 2 -m suite.train.validate busbw --mbytes 256 --out "$OUT/busbw.json" 2>&1 | tee "$OUT/log"
  BW=$(python3 -c "import json; print(json.load(open('$OUT/busbw.json'))['busbw_gbps'])" || echo 350)
  timeout 150 torchrun --nproc-per-node 2 -m suite.train $COMMON --out "$OUT/real2" 2>&1 | tee -a "$OUT/log"
  CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m suite.train $COMMON --emulate-ranks 2 \
      --collective-busbw-gbps "$BW" --out "$OUT/emu2" 2>&1 | tee -a "$OUT/log"
  python3 -m suite.train.validate compare "$OUT/real2" "$OUT/emu2" --csv "$OUT/emulation_error.csv" 2>&1 | tee -a "$OUT/log"
  tar czf "$OUT/runs.tgz" -C "$OUT" real2 emu2 && rm -rf "$OUT/real2" "$OUT/emu2"
  exit 0
fi

run_exp() {  # run_exp NAME SECONDS: one experiment into $OUT/run, tables written as it finishes
  timeout "$2" python3 - "$1" "$PROFILE" "$OUT/run" <<'PY' 2>&1 | tee -a "$OUT/log"
import sys, time
from suite.experiments import load
from suite.rundir import RunContext, RunDir
name, profile, root = sys.argv[1:4]
class P:
    t0 = time.time()
    def log(self, m): print(f"[{time.time() - self.t0:6.1f}s] {m}", flush=True)
import json, os
opts = {"training": json.loads(os.environ.get("TRAINING_OPTS") or "{}")}
ctx = RunContext(RunDir(root), profile, "cuda", progress=P(), options=opts)
t = time.time()
for k, v in load(name).run(ctx).items():
    ctx.run.write_table(k, v)
ctx.run.mark_done(name, {"seconds": time.time() - t})
print(f"{name}: done in {time.time() - t:.1f} s")
PY
}
if [ -n "$SEED_DIR" ]; then
  # a training-only rerun on the tables of an earlier run (shapes_sweep, costmodel_fit, and the
  # maxseq/loss tables when TRAINING_OPTS skips them), e.g.
  # SEED_DIR=reports/reference/h200/quick-5753865/results TRAINING_OPTS='{"layers": 1, "skip_loss": true}'
  mkdir -p "$OUT/run/results" && cp "$SEED_DIR"/*.csv "$OUT/run/results/"
  rm -f "$OUT"/run/results/training_ranks.csv "$OUT"/run/results/training_info.csv
  run_exp training "${TRAIN_TIMEOUT:-320}"
else
  timeout 90 python3 -m pytest -q -m gpu tests/test_train_gpu.py 2>&1 | tee "$OUT/pytest.log"
  run_exp shapes 100
  run_exp costmodel 60
  run_exp training 320
fi
tar czf "$OUT/run.tgz" -C "$OUT" run
python3 - "$OUT/run" <<'PY' 2>&1 | tee "$OUT/metrics.txt"
import sys
import pandas as pd
from suite.experiments import load
from suite.rundir import RunDir
t = RunDir(sys.argv[1]).tables()
pd.set_option("display.width", 200); pd.set_option("display.max_colwidth", 40)
if "training_info" in t: print(t["training_info"].T.to_string())
for n in ("costmodel", "training"):
    try:
        m = load(n).summarize(t)
        print(m[["claim", "metric", "value", "ci_low", "ci_high", "baseline", "unit"]].round(3).to_string(index=False))
    except Exception as e:
        print(n, "summary failed:", repr(e))
PY
