"""The shipped fused AdaLN launch configurations (suite.ops.fused_adaln.kernel_config): every
kernel name and launch shape of 243 configurations (three x dtypes, two modulation dtypes, two
output dtypes, nine widths D = 1 ... 8192, three modes) equals tests/data/adaln_launch_configs.json,
written from the measured configuration at 4a30506 (before the tuning lab left suite/). Its names
were shortened when the lab-only template switches left the kernels, the machine code the same
(lab/kernel_code_diff.py --base 728903d). Names fix the machine code (NVRTC instantiates exactly
them), the launch fields fix the grid. The lab's rules that the table was written from, and the
tests of where they put each design: lab/tests/test_lab_kernel_config.py."""

import json
from pathlib import Path

from suite.ops.fused_adaln.kernel_config import KernelConfig, all_configs

SNAPSHOT = Path(__file__).resolve().parent / "data" / "adaln_launch_configs.json"
WIDTHS = (1, 7, 64, 1000, 1536, 3072, 4100, 5120, 8192)


def launch_fields(c: KernelConfig) -> dict:
    """What the op launches for configuration c (the snapshot's fields)."""
    m = c.fwd_many
    return dict(
        names=c.names(),
        fwd_many=m.fwd(True) if m else None,
        fwd_many_rows=c.fwd_many_rows,
        fwd_threads=c.fwd_threads,
        fwd_rows=c.fwd_rows,
        bwd_threads=c.bwd_threads,
        bwd_rows=c.bwd_rows,
        bwd_part_width=c.bwd_part_width,
        bwd_dyn=[c.bwd_dyn_bytes(True), c.bwd_dyn_bytes(False)],
        carve=[c.bwd_carveout(True), c.bwd_carveout(False)],
        fwd_pf=[
            c.fwd_launch(True, r).fwd_prefetch and not c.fwd_launch(True, r).fwd_pair(True)
            for r in (1, 10**6)
        ],
        fwd_many_threads=m.fwd_threads if m else None,
        fwd_many_rowsper=m.fwd_rows if m else None,
    )


def test_shipped_configurations_are_the_measured_ones():
    want = json.loads(SNAPSHOT.read_text())
    got = {f"{c.tx}/{c.tm}/{c.ty}/{c.D}/{c.mode}": launch_fields(c) for c in all_configs(WIDTHS)}
    assert set(got) == set(want)
    bad = [k for k in want if got[k] != want[k]]
    assert not bad, f"{len(bad)} configurations changed, e.g. {bad[:3]}"
