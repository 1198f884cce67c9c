"""The backward's configuration rules (suite.ops.kernel_config): where round 7's design (shared
column sums and multiplier, 3 CTAs per SM) is the default, where the multiplier fits in shared
memory beside the sums and the row reductions, and that the other defaults keep their names (and
so their cached CUBINs)."""

import pytest

from suite.ops.kernel_config import MODE_AFFINE, MODE_SAMPLE, MODE_TOKEN, VARIANTS, KernelConfig


def test_round7_backward_is_the_default_only_where_it_measured_faster():
    def r7(tx, ty, D, mode=MODE_SAMPLE):
        c = KernelConfig(tx, "float", ty, D, mode)
        return c.bwd_r7, c.bwd_sacc_on, c.bwd_msh_on

    assert r7("bf16", "bf16", 1536) == (True, True, True)
    assert r7("bf16", "bf16", 3072) == (True, True, True)
    assert r7("f16", "f16", 3072) == (True, True, True)
    assert r7("bf16", "bf16", 5120) == (False, False, False)  # 320 threads: measured 5% slower
    assert r7("bf16", "float", 1536) == (False, False, False)  # fp32 dy: measured slower
    assert r7("float", "float", 3072) == (False, False, False)
    assert r7("bf16", "bf16", 1536, MODE_TOKEN)[0] is False  # not measured per token
    assert r7("bf16", "bf16", 1536, MODE_AFFINE)[0] is False


def test_multiplier_in_shared_memory_only_where_it_fits_beside_the_sums_and_reductions():
    for D, fits in ((1536, True), (3072, True), (5120, False)):  # 5120: 40 KB of sums + 20 KB
        c = KernelConfig("bf16", "float", "bf16", D, MODE_SAMPLE, bwd_sacc=True, bwd_msh=True)
        assert c.bwd_sacc_on and c.bwd_msh_on == fits, D
    # D = 1000: 4 row groups of 64 threads, 32 KB of sums + 16 KB of multiplier = 48 KB exactly,
    # and the reductions' 128 bytes beside them overflow: ptxas refused it on the H200 (round 7)
    c = KernelConfig("bf16", "float", "bf16", 1000, MODE_SAMPLE, bwd_sacc=True, bwd_msh=True)
    assert 12 * c.bwd_slots == 48 * 1024 and c.bwd_red_bytes == 128
    assert c.bwd_sacc_on and not c.bwd_msh_on
    tok = KernelConfig("bf16", "bf16", "bf16", 1536, MODE_TOKEN, bwd_sacc=True, bwd_msh=True)
    assert not tok.bwd_msh_on  # per-token modulation: a multiplier per row, not per CTA


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("D", [64, 1000, 1536, 3072, 4100, 5120, 8192])
def test_backward_static_shared_memory_fits_48_kb(variant, D):
    for tx, ty in (("bf16", "bf16"), ("bf16", "float"), ("float", "float")):
        for mode in (MODE_SAMPLE, MODE_TOKEN, MODE_AFFINE):
            c = KernelConfig(tx, "float", ty, D, mode).variant(variant)
            used = c.bwd_red_bytes + 4 * c.bwd_slots * (2 * c.bwd_sacc_on + c.bwd_msh_on)
            assert used <= 48 * 1024, (tx, ty, mode)


def test_three_ctas_per_sm_only_for_16_bit_rows_of_at_most_192_threads():
    def minb(tx, ty, D):
        name = KernelConfig(tx, "float", ty, D, MODE_SAMPLE, bwd_occ=True).bwd(True, True)
        return int(name.split(", ")[9])  # the __launch_bounds__ min-blocks argument

    assert minb("bf16", "bf16", 1536) == 3 and minb("bf16", "bf16", 3072) == 3
    assert minb("bf16", "bf16", 5120) == 1  # 320 threads
    assert minb("bf16", "float", 1536) == 1 and minb("float", "float", 3072) == 1  # fp32 spills


def test_backward_names():
    c = KernelConfig("bf16", "float", "bf16", 1536, MODE_SAMPLE)
    r7 = "adaln_bwd<bf16, float, bf16, 1536, 96, 2, 0, true, true, 3, true, true, true>"
    r6 = "adaln_bwd<bf16, float, bf16, 1536, 96, 2, 0, true, true, 1, false, true>"
    assert c.bwd(True, True) == r7
    assert c.variant("bwd-r6").bwd(True, True) == r6  # the round-6 default, name unchanged
    # where round 7 is not the default, the kernels keep their round-6 names
    wide = KernelConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE)
    assert wide.bwd(True, True) == wide.variant("bwd-r6").bwd(True, True)
    f32 = KernelConfig("float", "float", "float", 3072, MODE_SAMPLE)
    assert f32.bwd(True, True) == f32.variant("bwd-r6").bwd(True, True)
