#!/usr/bin/env bash
# Epilogue candidates vs the shipped kernels at N = 65536 / 75600 (both ops, fwd and bwd, D = 1536,
# 3072, 5120), with the ops GPU tests, the host-path burst and the AdaLN bandwidth, in ~4 min:
#   OUT=$OUT SUITE_GIT_SHA=<sha> bash lab/device/epilogue_candidates.sh   (carry .whl)
. tools/device/common.sh; stamp env; gpu_env
python3 - <<'PY'
import os, time
from suite.cuda.launch import device_arch
from suite.ops.epilogue import cuda as ec
from suite.ops.fused_adaln import cuda as fc
from lab import epilogue_variants as ev
t, arch, w = time.time(), device_arch(0), 15
n = fc.prebuild(fc.all_configs(), arch, workers=w) + ec.prebuild(list(dict.fromkeys(ec.shipped_configs() + ev.configs())), arch, workers=w)
print(n, "programs", f"{time.time()-t:.1f} s")
PY
stamp tests
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -x tests/test_adaln.py tests/test_epilogue.py tests/test_epilogue_variants.py > $OUT/tests.log 2>&1; tail -3 $OUT/tests.log
stamp variants
timeout 150 python3 -m lab.epilogue_variants --out $OUT --reps 20 --ns 65536,75600 > $OUT/variants.log 2>&1; tail -2 $OUT/variants.log
stamp host
timeout 60 python3 -m lab.ops.host_bench --out $OUT --reps 15 > $OUT/host.log 2>&1
stamp bw
timeout 40 python3 -m lab.ops.bandwidth_check --out $OUT --reps 15 > $OUT/bw.log 2>&1
python3 - <<'PY'
import pandas as pd, os
o=os.environ["OUT"]; pd.set_option("display.width",250)
t=pd.read_csv(f"{o}/epilogue_variants.csv")
p=t.pivot_table(index=["op","pass","D","N"],columns="candidate",values="pct_copy")
print(p.round(0).to_string())
h=pd.read_csv(f"{o}/host_path_gpu.csv"); print(h[h.op=="fwd"][["shape","impl","burst_us","host_us"]].round(1).to_string())
b=pd.read_csv(f"{o}/bandwidth.csv"); print(b.pivot_table(index=["op","N"],columns="D",values="pct_copy").round(1).to_string())
PY
stamp done
