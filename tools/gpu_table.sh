#!/usr/bin/env bash
# The shipped launch table (issue 32 item 6) on one H200, in one device call of at most ~6
# minutes: NVRTC prebuild of the shipped configurations, the op's GPU tests through the table
# (tests/test_adaln_gpu.py: hold-out cases, fuzz against fp64, variants of layout) and the lab's
# variants through lab/kernel_rules.py's RuleConfig (lab/tests/test_variants_gpu.py: every
# variant matches the default; pair, interleaved, recomputing kernels bitwise).
#   usage (device tool, carry .whl): OUT=$OUT bash tools/gpu_table.sh
# Writes under $OUT: env.txt, tests.log, junit_op.xml, junit_lab.xml; prints a short table last.
set -uo pipefail
OUT=${OUT:-./gpu_out}; mkdir -p "$OUT"
T0=$(date +%s); stamp() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || echo "wheel install failed"
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  git log -1 --format='commit %H' 2>/dev/null; } > "$OUT/env.txt" 2>&1

stamp "NVRTC prebuild"
timeout 120 python3 -c "
import time; t=time.time()
from suite.ops.fused_cuda import prebuild, all_configs
from suite.cuda.launch import device_arch
print(prebuild(all_configs(), device_arch(0), workers=15), 'programs', f'{time.time()-t:.1f} s')"

stamp "op GPU tests (table)"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_adaln_gpu.py \
  --junitxml="$OUT/junit_op.xml" 2>&1 | tail -15 | tee "$OUT/tests.log"
stamp "lab GPU tests (RuleConfig variants)"
timeout 150 python3 -m pytest -q -p no:cacheprovider lab/tests/test_variants_gpu.py \
  --junitxml="$OUT/junit_lab.xml" 2>&1 | tail -15 | tee -a "$OUT/tests.log"

stamp "summary"
python3 - "$OUT" <<'PY'
import sys, xml.etree.ElementTree as ET
from pathlib import Path
print(f"{'suite':<10}{'tests':>7}{'failed':>8}{'errors':>8}{'skipped':>9}")
for name in ("op", "lab"):
    p = Path(sys.argv[1]) / f"junit_{name}.xml"
    if not p.is_file():
        print(f"{name:<10} not run: no junit file (timed out or crashed)")
        continue
    s = ET.parse(p).getroot()
    s = s if s.tag == "testsuite" else s[0]
    print(f"{name:<10}{s.get('tests'):>7}{s.get('failures'):>8}{s.get('errors'):>8}{s.get('skipped'):>9}")
PY
