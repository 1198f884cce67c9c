#!/usr/bin/env bash
# The small e2e shape under the shipped epilogue table and under the one before it, alternately
# in separate processes (new, old, new, old), so a slow node hits both alike (~45 s a run):
#   OUT=$OUT bash lab/device/e2e_shipped_ab.sh [shapes] [repeats]   (carry .whl)
# "old" puts back the backward lines the H100-only sweep chose (bwd-pf-lb1; rms_norm 5120 bwd-lb2).
. tools/device/common.sh; gpu_env > $OUT/env.txt
SHAPES=${1:-img480x8}; REPS=${2:-8}
for i in 1 2; do for arm in new old; do
  stamp "$arm $i"
  ARM=$arm timeout 120 python3 - --out $OUT/$arm$i --shapes $SHAPES --repeats $REPS --profile-shapes '' \
    > $OUT/$arm$i.log 2>&1 <<'PY'
import os, runpy
if os.environ["ARM"] == "old":
    import suite.ops.epilogue.cuda as c
    from lab.epilogue_variants import LAB_VARIANTS
    c.VARIANTS.update(LAB_VARIANTS)  # the lab's candidates, selectable by the table
    gm, rms = c._GM, c._RMS
    c.SHIPPED.update({("bf16", gm, "bwd", 1536): "bwd-pf-lb1", ("bf16", gm, "bwd", 3072): "bwd-pf-lb1",
                      ("bf16", rms, "bwd", 3072): "bwd-pf-lb1", ("bf16", rms, "bwd", 5120): "bwd-lb2"})
runpy.run_module("suite.experiments.e2e", run_name="__main__")
PY
  tail -6 $OUT/$arm$i.log
done; done
stamp done
