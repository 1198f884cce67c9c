"""The fused AdaLN kernels' benchmark variants: named sets of RuleConfig fields
(lab/kernel_rules.py) that lab/device/kernel_variants.sh and suite.experiments.kernels.bench time
beside the defaults. Data only; the analysis of each round is in lab/LOG.md.
"""

from __future__ import annotations

# Benchmark-only kernel variants (lab/LOG.md, rounds 1 and 2). The op uses "default"
# unless $ADAPTIVELOAD_ADALN_VARIANT or set_variant() picks another; every variant computes the
# same function (lab/tests/test_variants_gpu.py compares each with the default). Kept: the
# designs that win somewhere, and the first reference kernels to measure the defaults against.
# Measured and dropped: 2 rows per load phase, 8 elements per thread (forward and backward), shared-memory
# sums with the prefetch alone (round 3; with the multiplier beside them and a 3-CTA cap they are
# round 7's default at D <= 3072: bwd_r7), the same without the cap at D = 5120 (round 7; with
# the cap through dynamic shared memory it is round 8's default there), cache-streaming hints on
# the streamed rows (round 10: lost 2-31%, loads and stores alike; code at commit c51ac9e).
# Retired with the template switches only they used (the shipped kernels keep one path): fwd-pfm,
# fwd-named, fwd-r18, bwd-r18, bwd-r22, bwd-r29, bwd-r31; code at commit 728903d, what each
# measured in lab/LOG.md ("Lab-only kernel switches retired").
VARIANTS: dict[str, dict] = {
    "default": {},
    # the designs of the first H200 reference (since then sharing round 4's reductions, and
    # round 19's interleaved backward rows: the contiguous runs left the kernels, code at 728903d)
    "round1": {
        "fwd_pf": False,
        "fwd_lv": 0,
        "fwd_ept": 16,
        "fwd_regs": 64,
        "bwd_pf": False,
        "bwd_sacc": False,
        "bwd_msh": False,
        "bwd_occ": False,
        "bwd_dyn": False,
        "bwd_sm2": False,
    },
    "fwd-v4": {"fwd_lv": 4},  # 4 elements per load everywhere (16-bit x)
    # column sums in shared memory and a 2-CTA register cap (the default kernel where they do not
    # fit in 48 KB of static shared memory: D > ~6000 for 16-bit x); fastest fp32 dy at D = 5120
    "bwd-sm2": {
        "bwd_sacc": True,
        "bwd_minb": 2,
        "bwd_pf": False,
        "bwd_msh": False,
        "bwd_occ": False,
        "bwd_dyn": False,
    },
    # round 5: 48 elements per thread everywhere (a D = 1536 row is one warp: the default there
    # for 16-bit y since round 5), and the round-4 forward of 16 elements per thread everywhere
    "fwd-warp": {"fwd_ept": 48, "fwd_regs": 128},
    "fwd-ept16": {"fwd_ept": 16, "fwd_regs": 64},
    # the backward default until round 7 (register column sums, no 3-CTA cap): what round 7's
    # default (bwd_r7) is measured against
    "bwd-r6": {
        "bwd_sacc": False,
        "bwd_msh": False,
        "bwd_occ": False,
        "bwd_dyn": False,
        "bwd_sm2": False,
    },
    # the backward default of round 7 (D = 5120 without round 8's dynamic shared memory): what
    # round 8's default is measured against
    "bwd-r7": {"bwd_dyn": False, "bwd_sm2": False},
    # round 8 (lab/LOG.md): round 7's design through dynamic shared memory everywhere,
    # fp32 dy and D <= 3072 included (the default at D = 5120, 16-bit dy only)
    "bwd-dyn5": {
        "bwd_sacc": True,
        "bwd_msh": True,
        "bwd_dyn": True,
        "bwd_occ": True,
        "bwd_sm2": False,
    },
    # round 9: the same two with the carveout sized to the CTAs (L1 keeps the rest) instead of
    # all-shared (bwd-carve is the default since; bwd-dyn5c measured within 1% of the default
    # at D <= 3072 for bf16 dy, where bwd-dyn5 lost 5-9%: round 8's loss was the 28 KB L1)
    "bwd-carve": {"bwd_carve": None},
    # the backward defaults of round 8 (all-shared carveout, fp32 dy at D = 5120 in one CTA):
    # what round 9's adopted defaults are measured against
    "bwd-r8": {"bwd_carve": 100, "bwd_sm2": False},
    "bwd-dyn5c": {
        "bwd_sacc": True,
        "bwd_msh": True,
        "bwd_dyn": True,
        "bwd_occ": True,
        "bwd_carve": None,
        "bwd_sm2": False,
    },
    # the forward default of round 9 (16 elements per thread at D = 5120): what fwd_wide is
    # measured against
    "fwd-r9": {"fwd_wide": False},
    # round 11: 24 elements per thread, 80-register cap (D = 1536: 3 CTAs of four 64-thread rows,
    # 24 warps per SM; D = 3072 two 128-thread rows); lost at D <= 3072, won bf16 y at 5120 by
    # 1.5% at N = 65536 and lost 3% at 4096 (variants/round11). Round 12 (the rows fetched by
    # cp.async.bulk into shared memory, adaln_fwd_tma) and round 13 (the modulation kept in
    # registers at 16 or 24 elements per thread; the prefetching forward for fp32 y) lost at
    # every N = 65536 shape, up to a third, and were removed (code at commit d2c7ae9,
    # lab/LOG.md)
    "fwd-e24": {"fwd_ept": 24, "fwd_regs": 80},
    # round 14: the backward's shared multiplier and column sums as 16-byte words (the default
    # since, where the row is <= 96 threads): what the default is measured against. (4 CTAs of
    # 80 registers without the prefetch spill at D = 1536 under ptxas: not tried)
    "bwd-r14": {"bwd_svec": False},
    # round 15 (lost 21-33% at N = 65536, removed; code at commit 5c1bb20): the forward's output
    # pass re-reading x from L1 chunk by chunk, the row statistics from the packed row in one
    # shifted pass (72 registers at D = 1536: 3 CTAs of 8 warps against 2)
    # round 16 (lost 1-16% at N = 65536, removed; code at commit 35d96ed): the forward's
    # per-sample modulation copied to shared memory once per sample, read with 16-byte shared loads
    # round 17: the backward's second pass recomputing x-hat and dy from the packed row, which
    # frees the registers round 14's words need at D = 3072 and 5120 (the default since, there):
    # what the default is measured against. Lost and removed (code at commit 8b4ad06): the
    # recomputation at D = 1536 (-4.4%), also dy * m recomputed with 4 CTAs of 192 threads at
    # D = 3072 (-4.5%; not bitwise the default's dx either)
    "bwd-r17": {"bwd_remat": False},
    # round 18 (lost 2-3% for bf16 y at N = 65536, removed; code at commit 8b4ad06): the
    # prefetching forward's x loaded with L1::no_allocate, meant to keep the modulation in L1;
    # it was already there (lab/LOG.md), and the hint made x evict-first in L2
    # round 20 (lost, removed): the prefetching forward for fp32 y with round 19's interleaved
    # rows, {"fwd_pf": True} (-1.6 to -6.4% at N = 65536), and the same with a row per warp,
    # {"fwd_pf": True, "fwd_ept": 48, "fwd_regs": 128} (-15 to -28%)
    # round 21: the forward at D = 3072 for launches of >= 49152 rows was two warps per row
    # (KernelConfig.fwd_many; since round 28 fwd_many is the pair kernel for bf16 y at >= 16384
    # rows): one kernel for every row count
    "fwd-r20": {"fwd_many_rows": None},
    # Round 23 (lost, removed; code at commit 875f5a8): the finalize folded into the row kernel
    # behind a per-sample barrier under a cooperative launch (5-15 us slower per call). Round
    # 30 (lost, removed; code at commit 66f18ae): a CTA's two row groups' column sums added into
    # one partial row (D = 1536: +1% at N <= 16384, -1.6% at 65536), and the prefetching forward
    # with one division per row carried with the prefetched row (-5 to -16% at D = 3072,
    # N = 4096 and at D = 5120)
    # Round 33 (lost, removed; code at commit e586018): the finalize launched at the row
    # kernel's start, every warp acquire-polling per-CTA ready flags (3-52% slower at N = 4096,
    # median 17%). Round 33b (lost, removed; code at 6cf28d7): one poller per finalize CTA on a
    # per-group count, no wait for the grid's completion (0-5% slower at N = 4096, median 2%).
    # Round 34 (lost, removed; code at 229a986): round 33b with 256-thread finalize CTAs that
    # wait resident beside the row CTAs (0-13% slower at N = 4096, median 4%)
    # round 31: the pair forward loading 4 elements of 16-bit x per chunk at D <= 1536
    # (adaln_fwd_r2 LV = 4, whole-sector fp32 stores; the default since): 16-byte loads, as
    # before it, what the default is measured against
    "fwd-r30": {"fwd_pair_lv": 0},
    # round 24 (no change, removed; code at commit 8e0b9e5): finalize CTAs of 8 positions instead
    # of 32 (-0.08 us median over 120 backward shapes). Round 25 (lost, removed; code at commit
    # 8e0b9e5): the row kernel in thread block clusters of 4 or 8 adding its CTAs' shared column
    # sums into one partial row (+2.7 to +20 us at N = 4096, +33-51% at 65536: a cluster launch
    # fits 360-368 CTAs at once where a plain one fits 396). Round 26 (removed; code at commit
    # 8e0b9e5): the fp32-out forward's warp stores as 512 consecutive bytes through shuffles
    # (-5.5 points at D = 1536 under the 64-register cap; at 56 registers -0.5 to +3.1 points,
    # -0.4 at B = 1, N = 65536)
    # round 27: the fp32-y forward from 16-bit x at one row per 192-thread CTA (D = 3072) under
    # a 40-register cap, 8 CTAs per SM (the default since): the 64-register cap before it, what
    # the default is measured against. Lost and removed: the same cap at D = 1536 (2 rows of 96
    # threads per CTA: 87.5 -> 70.4% of the copy at B = 1, N = 65536)
    "fwd-r26": {"fwd_f32y_regs": 64},
    # round 28: two rows of one sample per row group (adaln_fwd_r2, KernelConfig.fwd_rpt; the
    # default for fp32 x at D = 1536 and, at >= 16384 rows, bf16 y at 1024 < D <= 3072): the
    # forward before it (what the default is measured against; at D = 3072 for >= 49152 rows it
    # ran round 21's two warps per row, fwd-warp's kernel, which the pair kernel replaced), and
    # the pair kernel everywhere (fp32 y from bf16 x: each row's two 16-byte stores together,
    # after a first build that split them lost 25%). Lost and removed: the same at 56 registers
    # (6 CTAs; spilled for bf16 y, and within 0.5% of 64 registers for fp32 y)
    "fwd-r27": {"fwd_rpt": 1, "fwd_many_rows": None},
    "fwd-p2": {"fwd_rpt": 2, "fwd_ept": 16, "fwd_regs": 64},
    # Round 35 (adopted): the finalize's partial-row layout as template arguments; the generic
    # finalize it replaced (variant bwd-r34) removed in round 37, code at commit dbaf796
    # Round 36 (lost, removed; code at commit 1dced19): that finalize with 8 slots per step of a
    # lane's loop (bitwise; 0 to +2% per backward at N <= 16384), and each position's lane sums
    # as a shuffle tree (other rounding; +1 to +2%)
    # round 29 (lost, removed; code at commit 3a02174): the finalize's loads 8 or 16 slots per
    # lane at a time (+1.2 / +0.6% per backward, median over 120 shapes; up to +14% at N = 4096),
    # and at least 4 row blocks per CTA instead of 8 (396 CTAs at D = 1536, B = 1, N = 4096: no
    # change there, 39.9 vs 39.9% of the copy)
}
