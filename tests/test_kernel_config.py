"""Round-7 backward candidates' configuration rules (suite.ops.kernel_config): where the
multiplier fits in shared memory, where the 3-CTA cap applies, and that the default kernels keep
their names (and so their cached CUBINs)."""

from suite.ops.kernel_config import MODE_SAMPLE, MODE_TOKEN, KernelConfig


def test_multiplier_in_shared_memory_only_where_it_fits_beside_the_column_sums():
    for D, fits in ((1536, True), (3072, True), (5120, False)):  # 5120: 40 KB of sums + 20 KB
        c = KernelConfig("bf16", "float", "bf16", D, MODE_SAMPLE).variant("bwd-smpf")
        assert c.bwd_sacc_on and c.bwd_msh_on == fits, D
    tok = KernelConfig("bf16", "bf16", "bf16", 1536, MODE_TOKEN).variant("bwd-smpf")
    assert not tok.bwd_msh_on  # per-token modulation: a multiplier per row, not per CTA


def test_three_ctas_per_sm_only_for_16_bit_rows_of_at_most_192_threads():
    def minb(tx, ty, D):
        name = KernelConfig(tx, "float", ty, D, MODE_SAMPLE).variant("bwd-smpf3").bwd(True, True)
        return int(name.split(", ")[9])  # the __launch_bounds__ min-blocks argument

    assert minb("bf16", "bf16", 1536) == 3 and minb("bf16", "bf16", 3072) == 3
    assert minb("bf16", "bf16", 5120) == 1  # 320 threads
    assert minb("bf16", "float", 1536) == 1 and minb("float", "float", 3072) == 1  # fp32 spills


def test_default_backward_names_are_unchanged():
    c = KernelConfig("bf16", "float", "bf16", 1536, MODE_SAMPLE)
    assert (
        c.bwd(True, True)
        == "adaln_bwd<bf16, float, bf16, 1536, 96, 2, 0, true, true, 1, false, true>"
    )
    assert c.variant("bwd-smpf").bwd(True, True).endswith("1, true, true, true>")
