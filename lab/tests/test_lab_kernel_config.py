"""The backward's configuration rules (suite.ops.kernel_config): where round 7's design (shared
column sums and multiplier, 3 CTAs per SM) is the default, where the multiplier fits in shared
memory beside the sums and the row reductions, and that the other defaults keep their names (and
so their cached CUBINs)."""

import pytest

from lab.kernel_variants import VARIANTS
from lab.variants import variant_config
from suite.ops.kernel_config import MODE_AFFINE, MODE_SAMPLE, MODE_TOKEN, KernelConfig


def v(cfg: KernelConfig, *names: str) -> KernelConfig:
    for n in names:
        cfg = variant_config(cfg, n)
    return cfg


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("D", [64, 1000, 1536, 3072, 4100, 5120, 8192])
def test_backward_static_shared_memory_fits_48_kb(variant, D):
    for tx, ty in (("bf16", "bf16"), ("bf16", "float"), ("float", "float")):
        for mode in (MODE_SAMPLE, MODE_TOKEN, MODE_AFFINE):
            c = v(KernelConfig(tx, "float", ty, D, mode), variant)
            arrays = 4 * c.bwd_slots * (2 * c.bwd_sacc_on + c.bwd_msh_on)
            dynamic = c.bwd_dyn_bytes(accum=True)
            assert dynamic in (0, arrays if mode != MODE_TOKEN else 0), (tx, ty, mode)
            assert c.bwd_red_bytes + (0 if c.bwd_dyn_on else arrays) <= 48 * 1024, (tx, ty, mode)
            assert dynamic <= 100 * 1024  # two such CTAs fit an H200 SM's 228 KB


def test_dynamic_shared_memory_variant_at_d_5120():
    """bwd-dyn5: round 7's sums and multiplier at D = 5120 (60 KB, past the static 48 KB) in
    dynamic shared memory, 2 CTAs of 320 threads per SM for 16-bit x and dy; the launch passes
    the multiplier rows, then the sum rows (the dx-only pass of the D-tile backward: no sums)."""
    c = v(KernelConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE), "bwd-dyn5")
    assert c.bwd_sacc_on and c.bwd_msh_on and c.bwd_slots == 5120
    assert c.bwd_dyn_bytes(accum=True) == 4 * 5120 * 3 == 61440
    assert c.bwd_dyn_bytes(accum=False) == 4 * 5120
    name = "5120, 320, 1, 0, true, true, 2, true, true, true, true"
    # SV, RM, round 19's ILV, round 23's dependent finalize (PDL), round 30's LEAN, 32's EARLY
    assert c.bwd(True, True).endswith(name + ", true, true, true, true, true, true>")
    f32 = v(KernelConfig("bf16", "float", "float", 5120, MODE_SAMPLE), "bwd-dyn5")
    assert f32.bwd(True, True).split(", ")[9] == "1"  # fp32 dy spills under the 2-CTA cap
    tok = v(KernelConfig("bf16", "bf16", "bf16", 5120, MODE_TOKEN), "bwd-dyn5")
    assert tok.bwd_dyn_bytes(accum=True) == 0  # per token: no sums, no shared multiplier
    assert (
        KernelConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE, bwd_dyn=False).bwd_dyn_bytes(True)
        == 0
    )


def test_backward_names():
    lean = KernelConfig("bf16", "float", "bf16", 1536, MODE_SAMPLE)
    c = v(lean, "bwd-r29", "bwd-r31")  # rounds 30 and 32 off: names end before
    assert lean.bwd(True, True) == c.bwd(True, True)[:-1] + ", true, true>"  # LEAN, EARLY
    r7 = "adaln_bwd<bf16, float, bf16, 1536, 96, 2, 0, true, true, 3, true, true, true>"
    r6 = "adaln_bwd<bf16, float, bf16, 1536, 96, 2, 0, true, true, 1, false, true>"
    ilv = ", false, false, false, true>"  # SV, RM off, round 19's interleaved rows (ILV) on
    # round 14: the shared arrays as 16-byte words (rows of <= 96 threads, fp32 modulation)
    # DYN false, SV, ILV, PDL (round 23); without PDL (bwd-r22) round 22's name
    assert c.bwd(True, True) == r7[:-1] + ", false, true, false, true, true>"
    c = v(c, "bwd-r22")
    assert c.bwd(True, True) == r7[:-1] + ", false, true, false, true>"  # DYN false, SV, ILV
    assert v(c, "bwd-r18").bwd(True, True) == r7[:-1] + ", false, true>"  # round 14's name
    assert v(c, "bwd-r14").bwd(True, True) == r7[:-1] + ilv
    assert v(c, "bwd-r14", "bwd-r18").bwd(True, True) == r7  # round 7's name
    assert not KernelConfig("f16", "f16", "f16", 1536, MODE_SAMPLE).bwd_svec_on(True)  # spills
    assert not KernelConfig("f16", "float", "f16", 1536, MODE_SAMPLE).bwd_svec_on(True)  # spills
    wide = KernelConfig("bf16", "float", "bf16", 3072, MODE_SAMPLE)  # 192 threads: with RM only
    assert wide.bwd_svec_on(True) and not wide.bwd_svec_on(False)
    assert not v(wide, "bwd-r17").bwd_svec_on(True)
    assert v(c, "bwd-r6", "bwd-r18").bwd(True, True) == r6  # the round-6 default
    # D = 5120: round 8's default is bwd-dyn5's kernel; round 7's kept its round-6 name there
    wide = KernelConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE)
    assert wide.bwd(True, True) == v(wide, "bwd-dyn5").bwd(True, True)
    assert wide.bwd_dyn_bytes(accum=True) == 4 * 5120 * 3
    assert v(wide, "bwd-r7").bwd(True, True) == v(wide, "bwd-r6").bwd(True, True)
    assert v(wide, "bwd-r7").bwd_dyn_bytes(accum=True) == 0
    # fp32 dy keeps static memory (dynamic ran 12% slower there, round 8)
    assert KernelConfig("bf16", "float", "float", 5120, MODE_SAMPLE).bwd_dyn_bytes(True) == 0
    f32 = KernelConfig("float", "float", "float", 3072, MODE_SAMPLE)
    assert f32.bwd(True, True) == v(f32, "bwd-r6").bwd(True, True)


def test_carveout_sized_to_the_capped_ctas():
    """bwd_carve None (round 9, the default since 64bc62f): the smallest carveout % that holds the
    CTAs the kernel is compiled for, their dynamic and static shared memory and the driver's 1 KB
    each; bwd-r8 keeps round 8's all-shared 100%."""
    base = KernelConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE)
    assert v(base, "bwd-r8").bwd_carveout(True) == 100
    c = v(base, "bwd-carve")
    assert c == base
    assert c.bwd(True, True) == base.bwd(True, True)  # the same kernel
    need = 2 * (61440 + c.bwd_red_bytes + 1024)  # 2 CTAs of 320 threads
    assert c.bwd_carveout(True) == -(-100 * need // (228 * 1024)) == 54
    dx_only = 2 * (20480 + c.bwd_red_bytes + 1024)  # the D-tile's dx pass: the multiplier only
    assert c.bwd_carveout(False) == -(-100 * dx_only // (228 * 1024))
    small = v(KernelConfig("bf16", "float", "bf16", 1536, MODE_SAMPLE), "bwd-dyn5c")
    assert small.bwd_ctas == 3 and small.bwd_carveout(True) == 49  # 3 x (36 KB + 1 KB + 96 B)


def test_names_keep_non_default_ones_and_zeros():
    """A trailing template argument is dropped only where it equals that position's default
    (a generic rule had dropped every trailing "1", turning round 15's fwd-rr1 into the default
    kernel); zeros and falses at their defaults go. Round 17's rule: the backward recomputes
    x-hat and dy (RM) and takes the 16-byte words (SV) on rows wider than 96 threads, bf16 x
    with fp32 modulation only."""
    for D, sv_rm in ((1536, ", false, true>"), (3072, ", false, true, true>")):
        c = v(KernelConfig("bf16", "float", "bf16", D, MODE_SAMPLE), "bwd-r18")
        c = v(c, "bwd-r22", "bwd-r29", "bwd-r31")  # no PDL, LEAN, EARLY
        assert c.bwd(True, True).endswith(sv_rm), c.bwd(True, True)
        assert not c.bwd_remat_on(False)  # no prefetch, no packed row: nothing to recompute
    wide = v(KernelConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE), "bwd-r22")
    wide = v(wide, "bwd-r29", "bwd-r31")
    assert wide.bwd_svec_on(True) and wide.bwd_remat_on(True)
    old = v(wide, "bwd-r17")  # round 16's backward: neither
    assert not old.bwd_svec_on(True) and not old.bwd_remat_on(True)
    ilv = ", true>"  # round 19's interleaved rows, last
    assert (
        old.bwd(True, True)
        == wide.bwd(True, True).removesuffix(", true, true" + ilv) + ", false, false" + ilv
    )
    assert v(wide, "bwd-r18").bwd(True, True) == wide.bwd(True, True).removesuffix(ilv) + ">"
    f16 = KernelConfig("f16", "float", "f16", 3072, MODE_SAMPLE)  # spills: left alone
    assert not f16.bwd_remat_on(True) and not f16.bwd_svec_on(True)


def test_forward_by_row_count():
    """Round 28: aligned bf16 launches at 1024 < D <= 3072 with >= fwd_many_rows (16384) rows run
    two rows per row group (adaln_fwd_r2, 64 registers), and so does fp32 y from bf16 x at
    D = 1536; fewer rows, the unaligned fallback, other widths, dtypes and modes, and variants
    that set the forward's shape keep one kernel; fwd-r20 turns it off. fp32 x at D = 1536 runs
    the pair kernel at every row count."""
    for ty, D in (("bf16", 1536), ("bf16", 3072), ("float", 1536)):
        c = KernelConfig("bf16", "float", ty, D, MODE_SAMPLE)
        many = c.fwd_launch(True, 65536)
        # round 31: 8-byte loads of x (LV = 4) at D <= 1536, 16 bytes wider; fwd-r30 16 everywhere
        tail = ", 5, 4>" if D <= 1536 else ", 5>"
        assert many.fwd(True).startswith("adaln_fwd_r2<") and many.fwd(True).endswith(tail)
        old = v(c, "fwd-r30").fwd_launch(True, 65536)
        assert old.fwd(True).endswith(", 5>") and old.fwd_rt == many.fwd_rt
        assert many.fwd_elems == 16 and many.fwd_vec == 8 and many.fwd_pair(True)
        assert c.fwd_launch(True, 16384) == many and c.fwd_launch(True, 16383) == c
        assert c.fwd_launch(False, 10**6) == c  # no pair kernel without alignment
        assert not many.fwd_pair(False) and many.fwd(False).startswith("adaln_fwd<")
        assert many.fwd(True) in c.names() and len(set(c.names())) == len(c.names())
        assert v(c, "fwd-r20").fwd_launch(True, 10**6) == v(c, "fwd-r20")
        assert v(c, "fwd-warp").fwd_launch(True, 10**6) == v(c, "fwd-warp")
        assert v(c, "fwd-p2").fwd(True) == many.fwd(True)
    for other in (
        KernelConfig("bf16", "float", "float", 3072, MODE_SAMPLE),
        KernelConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE),
        KernelConfig("bf16", "bf16", "bf16", 3072, MODE_TOKEN),
        KernelConfig("f16", "float", "f16", 3072, MODE_SAMPLE),
        KernelConfig("bf16", "float", "bf16", 1000, MODE_SAMPLE),
    ):
        assert other.fwd_launch(True, 10**6) == other and other.fwd_many is None
        assert not other.fwd_pair(True)
    f32 = KernelConfig("float", "float", "float", 1536, MODE_SAMPLE)
    assert (
        f32.fwd_pair(True)
        and f32.fwd(True) == "adaln_fwd_r2<float, float, float, 1536, 96, 2, 0, 5>"
    )
    assert not v(f32, "fwd-r27").fwd_pair(True)
    assert not KernelConfig("float", "float", "float", 3072, MODE_SAMPLE).fwd_pair(True)
    assert not KernelConfig("float", "float", "float", 1536, MODE_AFFINE).fwd_pair(True)
