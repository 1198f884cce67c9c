#!/usr/bin/env bash
# One device call after a restructure: the ops' GPU tests, C1-C3 re-measured by the quick profile's
# shape sweep (the one training step), and the shipped epilogues against a copy at N = 65536 / 75600.
#   OUT=$OUT SUITE_GIT_SHA=<sha> bash lab/device/c1c3_epilogues.sh      (carry .whl; ~7 min)
. tools/device/common.sh; stamp env; gpu_env | tee $OUT/env.txt
stamp prebuild
gpu_prebuild suite.ops.fused_adaln.cuda all_configs
gpu_prebuild suite.ops.epilogue.cuda shipped_configs
stamp tests
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu -rfE tests/test_adaln.py tests/test_epilogue.py \
  tests/test_epilogue_variants.py tests/test_diffusers_patch.py tests/test_stepfn.py > $OUT/tests.log 2>&1
tail -4 $OUT/tests.log
stamp "reproduce --only C1,C2,C3 (quick)"
timeout 330 python3 -m suite reproduce --profile quick --only C1,C2,C3 --out /tmp/run-c1c3 > $OUT/reproduce.log 2>&1
echo "reproduce exit $?"; tail -25 $OUT/reproduce.log
tar czf $OUT/run.tgz -C /tmp run-c1c3
stamp "epilogue bench"
timeout 100 python3 -m lab.ops.epilogue_bench --out $OUT --reps 20 --ns 65536,75600 > $OUT/epilogue_bench.log 2>&1
python3 - <<'PY'
import os, pandas as pd
t = pd.read_csv(os.environ["OUT"] + "/epilogue_bench.csv")
print(t.pivot_table(index=["op", "pass", "D"], columns=["impl", "N"], values="pct_copy").round(0).to_string())
PY
stamp done
