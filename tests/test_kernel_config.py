"""The shipped fused AdaLN launch configurations (suite.ops.kernel_config): every kernel name and
launch shape of 243 configurations (three x dtypes, two modulation dtypes, two output dtypes,
nine widths D = 1 ... 8192, three modes) equals tests/data/adaln_launch_configs.json, written
from the measured configuration at 4a30506 (before the tuning lab left suite/): names fix the
machine code (NVRTC instantiates exactly them; lab/kernel_code_diff.py compares the code), the
launch fields fix the grid. And the configuration rules where the H200 measurements put them."""

import json
from pathlib import Path

from suite.ops.kernel_config import MODE_AFFINE, MODE_SAMPLE, MODE_TOKEN, KernelConfig, all_configs

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
        pdl=c.bwd_pdl,
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


def test_round7_backward_is_the_default_only_where_it_measured_faster():
    def r7(tx, ty, D, mode=MODE_SAMPLE):
        c = KernelConfig(tx, "float", ty, D, mode)
        return c.bwd_r7, c.bwd_sacc_on, c.bwd_msh_on

    assert r7("bf16", "bf16", 1536) == (True, True, True)
    assert r7("bf16", "bf16", 3072) == (True, True, True)
    assert r7("f16", "f16", 3072) == (True, True, True)
    # 320 threads: round 7 under 48 KB of static shared memory measured 5% slower; round 8 puts
    # the arrays in dynamic shared memory under a 2-CTA cap (+4% at N = 65536)
    assert r7("bf16", "bf16", 5120) == (True, True, True)
    static = KernelConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE, bwd_dyn=False)
    assert (static.bwd_r7, static.bwd_sacc_on, static.bwd_msh_on) == (False, False, False)
    assert not KernelConfig("bf16", "float", "bf16", 1000, MODE_SAMPLE).bwd_dyn_on  # 4 rows/CTA
    assert r7("bf16", "float", 1536) == (False, False, False)  # fp32 dy: measured slower
    assert r7("float", "float", 3072) == (False, False, False)
    assert r7("bf16", "bf16", 1536, MODE_TOKEN)[0] is False  # not measured per token
    assert r7("bf16", "bf16", 1536, MODE_AFFINE)[0] is False


def test_multiplier_in_shared_memory_only_where_it_fits_beside_the_sums_and_reductions():
    for D, fits in ((1536, True), (3072, True), (5120, False)):  # 5120: 40 KB of sums + 20 KB
        c = KernelConfig(
            "bf16", "float", "bf16", D, MODE_SAMPLE, bwd_sacc=True, bwd_msh=True, bwd_dyn=False
        )
        assert c.bwd_sacc_on and c.bwd_msh_on == fits, D
    # D = 1000: 4 row groups of 64 threads, 32 KB of sums + 16 KB of multiplier = 48 KB exactly,
    # and the reductions' 128 bytes beside them overflow: ptxas refused it on the H200 (round 7)
    c = KernelConfig("bf16", "float", "bf16", 1000, MODE_SAMPLE, bwd_sacc=True, bwd_msh=True)
    assert 12 * c.bwd_slots == 48 * 1024 and c.bwd_red_bytes == 128
    assert c.bwd_sacc_on and not c.bwd_msh_on
    tok = KernelConfig("bf16", "bf16", "bf16", 1536, MODE_TOKEN, bwd_sacc=True, bwd_msh=True)
    assert not tok.bwd_msh_on  # per-token modulation: a multiplier per row, not per CTA


def test_three_ctas_per_sm_only_for_16_bit_rows_of_at_most_192_threads():
    def minb(tx, ty, D):
        name = KernelConfig(tx, "float", ty, D, MODE_SAMPLE, bwd_occ=True).bwd(True, True)
        return int(name.split(", ")[9])  # the __launch_bounds__ min-blocks argument

    assert minb("bf16", "bf16", 1536) == 3 and minb("bf16", "bf16", 3072) == 3
    assert minb("bf16", "bf16", 5120) == 2  # 320 threads: 2 CTAs, arrays in dynamic shared memory
    static = KernelConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE, bwd_occ=True, bwd_dyn=False)
    assert int(static.bwd(True, True).split(", ")[9]) == 1
    assert minb("bf16", "float", 1536) == 1 and minb("float", "float", 3072) == 1  # fp32 spills


def test_row_per_warp_forward_is_bf16_only():
    """The row-per-warp forward was measured for bf16 y; f16 x beside fp32 modulation spilled 4
    bytes in it on sm_80, so f16 keeps the 16-element forward."""
    assert KernelConfig("bf16", "float", "bf16", 1536, MODE_SAMPLE).fwd_warp_row
    assert not KernelConfig("f16", "float", "f16", 1536, MODE_SAMPLE).fwd_warp_row
    assert not KernelConfig("bf16", "float", "float", 1536, MODE_SAMPLE).fwd_warp_row
