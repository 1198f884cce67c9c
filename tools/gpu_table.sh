#!/usr/bin/env bash
# The shipped launch table (issue 32 item 6) on one H200, in one device call of at most ~6
# minutes: NVRTC prebuild of the shipped configurations, the op's GPU tests through the table
# (tests/test_adaln_gpu.py: hold-out cases, fuzz against fp64, variants of layout) and the lab's
# variants through lab/kernel_rules.py's RuleConfig (lab/tests/test_variants_gpu.py: every
# variant matches the default; pair, interleaved, recomputing kernels bitwise).
#   usage (device tool, carry .whl): OUT=$OUT bash tools/gpu_table.sh
# Writes under $OUT: env.txt, tests.log, junit_op.xml, junit_lab.xml; prints a short table last.
set -uo pipefail
. "$(dirname "$0")/gpu_common.sh"
gpu_env > "$OUT/env.txt" 2>&1

stamp "NVRTC prebuild"
gpu_prebuild suite.ops.fused_adaln.cuda all_configs


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
