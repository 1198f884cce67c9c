"""The lab's configuration rules (lab/kernel_rules.py): at their defaults they give the shipped
table's configuration at every width; where round 7's design (shared
column sums and multiplier, 3 CTAs per SM) is the default, where the multiplier fits in shared
memory beside the sums and the row reductions, and how the kernel names carry each design."""

import pytest

from lab.kernel_rules import RuleConfig
from lab.kernel_variants import VARIANTS
from lab.variants import variant_config
from suite.ops.fused_adaln.kernel_config import MODE_AFFINE, MODE_SAMPLE, MODE_TOKEN, KernelConfig


def v(cfg: RuleConfig, *names: str) -> RuleConfig:
    for n in names:
        cfg = variant_config(cfg, n)
    return cfg


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("D", [64, 1000, 1536, 3072, 4100, 5120, 8192])
def test_backward_static_shared_memory_fits_48_kb(variant, D):
    for tx, ty in (("bf16", "bf16"), ("bf16", "float"), ("float", "float")):
        for mode in (MODE_SAMPLE, MODE_TOKEN, MODE_AFFINE):
            c = v(RuleConfig(tx, "float", ty, D, mode), variant)
            arrays = 4 * c.bwd_slots * (2 * c.bwd_sacc_on + c.bwd_msh_on)
            dynamic = c.bwd_dyn_bytes(accum=True)
            assert dynamic in (0, arrays if mode != MODE_TOKEN else 0), (tx, ty, mode)
            assert c.bwd_red_bytes + (0 if c.bwd_dyn_on else arrays) <= 48 * 1024, (tx, ty, mode)
            assert dynamic <= 100 * 1024  # two such CTAs fit an H200 SM's 228 KB


def test_dynamic_shared_memory_variant_at_d_5120():
    """bwd-dyn5: round 7's sums and multiplier at D = 5120 (60 KB, past the static 48 KB) in
    dynamic shared memory, 2 CTAs of 320 threads per SM for 16-bit x and dy; the launch passes
    the multiplier rows, then the sum rows (the dx-only pass of the D-tile backward: no sums)."""
    c = v(RuleConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE), "bwd-dyn5")
    assert c.bwd_sacc_on and c.bwd_msh_on and c.bwd_slots == 5120
    assert c.bwd_dyn_bytes(accum=True) == 4 * 5120 * 3 == 61440
    assert c.bwd_dyn_bytes(accum=False) == 4 * 5120
    name = "5120, 320, 1, 0, true, true, 2, true, true, true, true"
    assert c.bwd(True, True).endswith(name + ", true, true>")  # SV, RM
    f32 = v(RuleConfig("bf16", "float", "float", 5120, MODE_SAMPLE), "bwd-dyn5")
    assert f32.bwd(True, True).split(", ")[9] == "1"  # fp32 dy spills under the 2-CTA cap
    tok = v(RuleConfig("bf16", "bf16", "bf16", 5120, MODE_TOKEN), "bwd-dyn5")
    assert tok.bwd_dyn_bytes(accum=True) == 0  # per token: no sums, no shared multiplier
    assert (
        RuleConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE, bwd_dyn=False).bwd_dyn_bytes(True)
        == 0
    )


def test_backward_names():
    c = RuleConfig("bf16", "float", "bf16", 1536, MODE_SAMPLE)
    r7 = "adaln_bwd<bf16, float, bf16, 1536, 96, 2, 0, true, true, 3, true, true, true>"
    r6 = "adaln_bwd<bf16, float, bf16, 1536, 96, 2, 0, true, true, 1, false, true>"
    # round 14: the shared arrays as 16-byte words (rows of <= 96 threads, fp32 modulation)
    assert c.bwd(True, True) == r7[:-1] + ", false, true>"  # DYN false, SV
    assert v(c, "bwd-r14").bwd(True, True) == r7  # round 7's name
    assert not RuleConfig("f16", "f16", "f16", 1536, MODE_SAMPLE).bwd_svec_on(True)  # spills
    assert not RuleConfig("f16", "float", "f16", 1536, MODE_SAMPLE).bwd_svec_on(True)  # spills
    wide = RuleConfig("bf16", "float", "bf16", 3072, MODE_SAMPLE)  # 192 threads: with RM only
    assert wide.bwd_svec_on(True) and not wide.bwd_svec_on(False)
    assert not v(wide, "bwd-r17").bwd_svec_on(True)
    assert v(c, "bwd-r6").bwd(True, True) == r6  # the round-6 default
    # D = 5120: round 8's default is bwd-dyn5's kernel; round 7's kept its round-6 name there
    wide = RuleConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE)
    assert wide.bwd(True, True) == v(wide, "bwd-dyn5").bwd(True, True)
    assert wide.bwd_dyn_bytes(accum=True) == 4 * 5120 * 3
    assert v(wide, "bwd-r7").bwd(True, True) == v(wide, "bwd-r6").bwd(True, True)
    assert v(wide, "bwd-r7").bwd_dyn_bytes(accum=True) == 0
    # fp32 dy keeps static memory (dynamic ran 12% slower there, round 8)
    assert RuleConfig("bf16", "float", "float", 5120, MODE_SAMPLE).bwd_dyn_bytes(True) == 0
    f32 = RuleConfig("float", "float", "float", 3072, MODE_SAMPLE)
    assert f32.bwd(True, True) == v(f32, "bwd-r6").bwd(True, True)


def test_carveout_sized_to_the_capped_ctas():
    """bwd_carve None (round 9, the default since 64bc62f): the smallest carveout % that holds the
    CTAs the kernel is compiled for, their dynamic and static shared memory and the driver's 1 KB
    each; bwd-r8 keeps round 8's all-shared 100%."""
    base = RuleConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE)
    assert v(base, "bwd-r8").bwd_carveout(True) == 100
    c = v(base, "bwd-carve")
    assert c == base
    assert c.bwd(True, True) == base.bwd(True, True)  # the same kernel
    need = 2 * (61440 + c.bwd_red_bytes + 1024)  # 2 CTAs of 320 threads
    assert c.bwd_carveout(True) == -(-100 * need // (228 * 1024)) == 54
    dx_only = 2 * (20480 + c.bwd_red_bytes + 1024)  # the D-tile's dx pass: the multiplier only
    assert c.bwd_carveout(False) == -(-100 * dx_only // (228 * 1024))
    small = v(RuleConfig("bf16", "float", "bf16", 1536, MODE_SAMPLE), "bwd-dyn5c")
    assert small.bwd_ctas == 3 and small.bwd_carveout(True) == 49  # 3 x (36 KB + 1 KB + 96 B)


def test_names_keep_non_default_ones_and_zeros():
    """A trailing template argument is dropped only where it equals that position's default
    (a generic rule had dropped every trailing "1", turning round 15's fwd-rr1 into the default
    kernel); zeros and falses at their defaults go. Round 17's rule: the backward recomputes
    x-hat and dy (RM) and takes the 16-byte words (SV) on rows wider than 96 threads, bf16 x
    with fp32 modulation only."""
    for D, sv_rm in ((1536, ", false, true>"), (3072, ", false, true, true>")):
        c = RuleConfig("bf16", "float", "bf16", D, MODE_SAMPLE)
        assert c.bwd(True, True).endswith(sv_rm), c.bwd(True, True)
        assert not c.bwd_remat_on(False)  # no prefetch, no packed row: nothing to recompute
    wide = RuleConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE)
    assert wide.bwd_svec_on(True) and wide.bwd_remat_on(True)
    old = v(wide, "bwd-r17")  # round 16's backward: neither, so both falses leave its name
    assert not old.bwd_svec_on(True) and not old.bwd_remat_on(True)
    assert old.bwd(True, True) == wide.bwd(True, True).removesuffix(", true, true>") + ">"
    f16 = RuleConfig("f16", "float", "f16", 3072, MODE_SAMPLE)  # spills: left alone
    assert not f16.bwd_remat_on(True) and not f16.bwd_svec_on(True)


def test_forward_by_row_count():
    """Round 28: aligned bf16 launches at 1024 < D <= 3072 with >= fwd_many_rows (16384) rows run
    two rows per row group (adaln_fwd_r2, 64 registers), and so does fp32 y from bf16 x at
    D = 1536; fewer rows, the unaligned fallback, other widths, dtypes and modes, and variants
    that set the forward's shape keep one kernel; fwd-r20 turns it off. fp32 x at D = 1536 runs
    the pair kernel at every row count."""
    for ty, D in (("bf16", 1536), ("bf16", 3072), ("float", 1536)):
        c = RuleConfig("bf16", "float", ty, D, MODE_SAMPLE)
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
        RuleConfig("bf16", "float", "float", 3072, MODE_SAMPLE),
        RuleConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE),
        RuleConfig("bf16", "bf16", "bf16", 3072, MODE_TOKEN),
        RuleConfig("f16", "float", "f16", 3072, MODE_SAMPLE),
        RuleConfig("bf16", "float", "bf16", 1000, MODE_SAMPLE),
    ):
        assert other.fwd_launch(True, 10**6) == other and other.fwd_many is None
        assert not other.fwd_pair(True)
    f32 = RuleConfig("float", "float", "float", 1536, MODE_SAMPLE)
    assert (
        f32.fwd_pair(True)
        and f32.fwd(True) == "adaln_fwd_r2<float, float, float, 1536, 96, 2, 0, 5>"
    )
    assert not v(f32, "fwd-r27").fwd_pair(True)
    assert not RuleConfig("float", "float", "float", 3072, MODE_SAMPLE).fwd_pair(True)
    assert not RuleConfig("float", "float", "float", 1536, MODE_AFFINE).fwd_pair(True)


def test_round7_backward_is_the_default_only_where_it_measured_faster():
    def r7(tx, ty, D, mode=MODE_SAMPLE):
        c = RuleConfig(tx, "float", ty, D, mode)
        return c.bwd_r7, c.bwd_sacc_on, c.bwd_msh_on

    assert r7("bf16", "bf16", 1536) == (True, True, True)
    assert r7("bf16", "bf16", 3072) == (True, True, True)
    assert r7("f16", "f16", 3072) == (True, True, True)
    # 320 threads: round 7 under 48 KB of static shared memory measured 5% slower; round 8 puts
    # the arrays in dynamic shared memory under a 2-CTA cap (+4% at N = 65536)
    assert r7("bf16", "bf16", 5120) == (True, True, True)
    static = RuleConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE, bwd_dyn=False)
    assert (static.bwd_r7, static.bwd_sacc_on, static.bwd_msh_on) == (False, False, False)
    assert not RuleConfig("bf16", "float", "bf16", 1000, MODE_SAMPLE).bwd_dyn_on  # 4 rows/CTA
    assert r7("bf16", "float", 1536) == (False, False, False)  # fp32 dy: measured slower
    assert r7("float", "float", 3072) == (False, False, False)
    assert r7("bf16", "bf16", 1536, MODE_TOKEN)[0] is False  # not measured per token
    assert r7("bf16", "bf16", 1536, MODE_AFFINE)[0] is False


def test_multiplier_in_shared_memory_only_where_it_fits_beside_the_sums_and_reductions():
    for D, fits in ((1536, True), (3072, True), (5120, False)):  # 5120: 40 KB of sums + 20 KB
        c = RuleConfig(
            "bf16", "float", "bf16", D, MODE_SAMPLE, bwd_sacc=True, bwd_msh=True, bwd_dyn=False
        )
        assert c.bwd_sacc_on and c.bwd_msh_on == fits, D
    # D = 1000: 4 row groups of 64 threads, 32 KB of sums + 16 KB of multiplier = 48 KB exactly,
    # and the reductions' 128 bytes beside them overflow: ptxas refused it on the H200 (round 7)
    c = RuleConfig("bf16", "float", "bf16", 1000, MODE_SAMPLE, bwd_sacc=True, bwd_msh=True)
    assert 12 * c.bwd_slots == 48 * 1024 and c.bwd_red_bytes == 128
    assert c.bwd_sacc_on and not c.bwd_msh_on
    tok = RuleConfig("bf16", "bf16", "bf16", 1536, MODE_TOKEN, bwd_sacc=True, bwd_msh=True)
    assert not tok.bwd_msh_on  # per-token modulation: a multiplier per row, not per CTA


def test_three_ctas_per_sm_only_for_16_bit_rows_of_at_most_192_threads():
    def minb(tx, ty, D):
        name = RuleConfig(tx, "float", ty, D, MODE_SAMPLE, bwd_occ=True).bwd(True, True)
        return int(name.split(", ")[9])  # the __launch_bounds__ min-blocks argument

    assert minb("bf16", "bf16", 1536) == 3 and minb("bf16", "bf16", 3072) == 3
    assert minb("bf16", "bf16", 5120) == 2  # 320 threads: 2 CTAs, arrays in dynamic shared memory
    static = RuleConfig("bf16", "float", "bf16", 5120, MODE_SAMPLE, bwd_occ=True, bwd_dyn=False)
    assert int(static.bwd(True, True).split(", ")[9]) == 1
    assert minb("bf16", "float", 1536) == 1 and minb("float", "float", 3072) == 1  # fp32 spills


def test_row_per_warp_forward_is_bf16_only():
    """The row-per-warp forward was measured for bf16 y; f16 x beside fp32 modulation spilled 4
    bytes in it on sm_80, so f16 keeps the 16-element forward."""
    assert RuleConfig("bf16", "float", "bf16", 1536, MODE_SAMPLE).fwd_warp_row
    assert not RuleConfig("f16", "float", "f16", 1536, MODE_SAMPLE).fwd_warp_row
    assert not RuleConfig("bf16", "float", "float", 1536, MODE_SAMPLE).fwd_warp_row


def _launch(c) -> tuple:
    """Everything the op takes from a configuration: kernel names and launch shapes (a pair
    forward's prefetch flag is unused: fused_cuda launches it per row block)."""
    m = c.fwd_many
    runs = [c.fwd_launch(True, r) for r in (1, 10**6)]
    return (
        c.names(),
        m and (m.fwd(True), m.fwd_threads, m.fwd_rows),
        c.fwd_many_rows,
        (c.fwd_threads, c.fwd_rows, c.bwd_threads, c.bwd_rows, c.bwd_part_width),
        [(c.bwd_dyn_bytes(a), c.bwd_carveout(a)) for a in (True, False)],
        [(r.fwd_prefetch and not r.fwd_pair(True), r.fwd_pair(True)) for r in runs],
    )


# every table boundary and its neighbours, and a stride through the rest
EDGES = {b + o for b in (256, 1024, 1536, 2048, 2560, 3072, 4096, 5120) for o in (-1, 0, 1)}
WIDTHS = sorted(EDGES | set(range(1, 8193, 97)) | {8192})


@pytest.mark.parametrize("tx", ["float", "bf16", "f16"])
def test_default_rules_are_the_shipped_table(tx):
    """The shipped table (suite/ops/fused_adaln/kernel_config.py) was written from these rules: at their
    defaults they name and launch the same kernels, every dtype combination, mode and width."""
    bad = []
    for tm in ("float", "bf16", "f16"):
        for ty in ("float", "bf16", "f16"):
            for mode in (MODE_SAMPLE, MODE_TOKEN, MODE_AFFINE):
                for D in WIDTHS:
                    key = (tx, tm, ty, D, mode)
                    if _launch(RuleConfig(*key)) != _launch(KernelConfig(*key)):
                        bad.append(key)
    assert not bad, f"{len(bad)} differ, e.g. {bad[:3]}"
