"""The tuning lab's configuration of the fused AdaLN kernels: the shipped op's launch table
(suite/ops/fused_adaln/kernel_config.py) as rules over 20 design fields, so a benchmark variant
(lab/kernel_variants.py) is a few field values and the rules derive the rest of its design.
At its defaults a RuleConfig names and launches exactly what the shipped table does
(lab/tests/test_lab_kernel_config.py checks every width); names and launch geometry come from
suite.ops.fused_adaln.kernel_config.KernelNames, the op's one copy of them. The measurements
behind each rule are in lab/LOG.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from suite.ops.fused_adaln.kernel_config import (
    MODE_SAMPLE,
    MODE_TOKEN,
    KernelNames,
)
from suite.ops.fused_adaln.kernel_config import threads_per_row as _threads_per_row


@dataclass(frozen=True)
class RuleConfig(KernelNames):
    """One NVRTC program: the dtypes, D and mode, and the design fields that select its row
    kernels (defaults: the rules that reproduce the shipped table)."""

    tx: str  # C++ element types: "float" | "bf16" | "f16"
    tm: str
    ty: str
    D: int
    mode: int
    # Design fields. None = the rule (the property named beside it) that gives the shipped
    # table's design for that (dtype, D, mode); explicit values are variants.
    #
    # forward: elements of a row per thread (16 = 2 vectors of bf16, 4 of fp32). None: 48 (a
    # row per warp: shuffles only, no barrier) for bf16 y at 1024 < D <= 1536 (fwd_warp_row)
    fwd_ept: int | None = None
    # forward: persistent, the next row prefetched (aligned rows). None: 16-bit y only
    fwd_pf: bool | None = None
    # forward: register cap per thread (0: ptxas chooses). None: fwd_cap (64; 128 for the
    # row-per-warp forward, 2 CTAs of 8 warps per SM)
    fwd_regs: int | None = None
    # forward, fp32 y from 16-bit x with per-sample fp32 modulation, one row per CTA of 192
    # threads (2816 < D <= 3072): its cap where fwd_regs is None (40: no spills, 8 CTAs per SM;
    # 16-bit or per-token modulation spills at 40, so not there)
    fwd_f32y_regs: int = 40
    # forward: elements of x per vector load (0: 16 bytes). 4 with 16-bit x makes the fp32
    # modulation loads whole 16-byte words (half the L1 sectors). None: fwd_vec (4 for 16-bit y
    # with rows of at least a warp, and fp32 y with one row per CTA)
    fwd_lv: int | None = None
    # forward, 16-bit x: 32 elements per thread under a 96-register cap where the 16-element row
    # is one CTA of 192 < threads <= 320 (D = 5120: 4 CTAs of 160 threads per SM instead of 3
    # of 320). None: there (fwd_wide_on)
    fwd_wide: bool | None = None
    bwd_ept: int = 16  # backward: elements of a row per thread
    bwd_minb: int = 1  # backward: CTAs per SM ptxas must fit (__launch_bounds__ min blocks)
    bwd_pf: bool = True  # backward: next row's x, dy, mean, rstd prefetched (aligned rows)
    # backward: column sums in shared memory (where they fit: bwd_sacc_on); the per-sample
    # multiplier 1 + scale beside them (bwd_msh_on); 3 CTAs of <= 192 threads per SM (16-bit x
    # and dy only: 96 registers without spills). None: all three where bwd_r7 says
    bwd_sacc: bool | None = None
    bwd_msh: bool | None = None
    bwd_occ: bool | None = None
    # backward: those shared arrays in dynamic shared memory, up to 100 KB per CTA (two CTAs
    # per SM) instead of 48 KB static (D = 5120 needs 60 KB). None: bwd_dyn_on
    bwd_dyn: bool | None = None
    # backward with dynamic shared memory: the carveout, % of the SM's 228 KB given to shared
    # memory. None: the smallest that holds the CTAs the kernel is capped for (bwd_carveout)
    bwd_carve: int | None = None
    # backward, 16-bit x with fp32 dy, per-sample, one row of 192 < threads <= 320 per CTA
    # (D = 5120): shared column sums, 2 CTAs per SM, no prefetch, instead of one CTA of 164
    # registers. None: there (bwd_sm2_on)
    bwd_sm2: bool | None = None
    # backward: the shared multiplier and column sums as 16-byte words per thread. None: bf16 x
    # with fp32 modulation where the shared arrays are and the row is at most 96 threads, or
    # wider with bwd_remat (other dtypes and wider rows spill under their caps)
    bwd_svec: bool | None = None
    # backward (with prefetch): the second pass recomputes x-hat and dy from the packed row (16
    # registers fewer at 16 elements per thread: room for bwd_svec's words on rows wider than
    # 96 threads). None: there, bf16 x and dy with fp32 per-sample modulation
    bwd_remat: bool | None = None
    # forward, adaln_fwd_r2: elements of 16-bit x per load (0: 16 bytes; 4: 8 bytes, so an fp32
    # y chunk is one whole 16-byte store and one scale/shift load serves both rows). None: 4 at
    # D <= 1536, else 16 bytes (fwd_pair_vec)
    fwd_pair_lv: int | None = None
    # forward, launches of at least this many rows (B * N): fwd_many's kernel, where there is
    # one. None: never
    fwd_many_rows: int | None = 16384
    # forward, aligned rows, per-sample or affine modulation: rows per row group (2:
    # adaln_fwd_r2, two consecutive rows of one sample per thread sharing one barrier set and
    # one modulation load). None: 2 for fp32 x at 1024 < D <= 1536 (fwd_rows_per_thread), and
    # through fwd_many for bf16 x at launches of >= fwd_many_rows rows. Correct at every width
    fwd_rpt: int | None = None

    @property
    def fwd_warp_row(self) -> bool:  # the measured row-per-warp forward (see fwd_ept)
        # bf16 y only, where it was measured (f16 x beside fp32 modulation spills 4 bytes on sm_80)
        return self.fwd_ept is None and self.ty == "bf16" and 1024 < self.D <= 1536

    @property
    def fwd_many(self) -> RuleConfig | None:
        """The forward for launches of fwd_many_rows rows or more, where another one is faster
        there than at fewer rows: two rows per row group (adaln_fwd_r2, 16 elements per thread,
        64 registers) for bf16 x, fp32 per-sample modulation, bf16 y at 1024 < D <= 3072 and
        fp32 y at 1024 < D <= 1536 (at fewer rows it is slower)."""
        default = self.fwd_ept is None and self.fwd_regs is None and self.fwd_pf is None
        default = default and self.fwd_rpt is None
        widest = {"bf16": 3072, "float": 1536}.get(self.ty, 0)
        kind = self._bf16_x_fp32_mod and self.mode == MODE_SAMPLE and 1024 < self.D <= widest
        if self.fwd_many_rows is None or not default or not kind:
            return None
        return replace(self, fwd_rpt=2, fwd_ept=16, fwd_regs=64)

    @property
    def fwd_wide_on(self) -> bool:  # see fwd_wide
        if self.fwd_wide is not None:
            return self.fwd_wide and self.fwd_ept is None
        if self.fwd_ept is not None or self.tx == "float":
            return False
        return 192 < _threads_per_row(self.D, 4, 16) <= 320  # 4-element loads, 16 per thread

    @property
    def fwd_elems(self) -> int:  # forward: elements per thread
        if self.fwd_warp_row:
            return 48
        return 32 if self.fwd_wide_on else self.fwd_ept or 16

    @property
    def fwd_cap(self) -> int:  # forward: register cap per thread (0: none)
        if self.fwd_regs is not None:
            return self.fwd_regs
        if self.fwd_warp_row:
            return 128
        if self.fwd_wide_on:
            return 96
        one_row = self.fwd_rows == 1 and self.fwd_threads == 192
        sample = self.mode == MODE_SAMPLE and self.tm == "float"
        f32y = self.ty == "float" and self.tx != "float" and one_row and sample
        return self.fwd_f32y_regs if f32y else 64

    @property
    def fwd_prefetch(self) -> bool:
        return self.ty != "float" if self.fwd_pf is None else self.fwd_pf

    @property
    def bwd_prefetch(self) -> bool:
        """Past 5120 elements per CTA (D > 5120 at one row per CTA) the register cap of
        65536 / threads leaves no room for a second row: ptxas spills (D = 8192), so no prefetch.
        (At 16 elements per thread: at most 320 threads.)"""
        return self.bwd_pf and self.bwd_rows * self.D <= 5120 and not self.bwd_sm2_on

    @property
    def bwd_sm2_on(self) -> bool:  # see bwd_sm2
        if self.bwd_sm2 is not None:
            return self.bwd_sm2
        one_row = self.bwd_rows == 1 and 192 < self.bwd_threads <= 320
        return self.tx != "float" and self.ty == "float" and self.mode == MODE_SAMPLE and one_row

    @property
    def bwd_r7(self) -> bool:
        """The shared-memory backward (column sums and multiplier in shared memory, 3 CTAs of
        <= 192 threads): 16-bit x and dy, per-sample modulation, rows of <= 192 threads per CTA;
        at 192 < threads <= 320 (D = 5120) only with its arrays in dynamic shared memory under a
        2-CTA cap (bwd_dyn_on). fp32 dy keeps the register sums (slower with shared ones)."""
        if not self._r7_kind:
            return False
        return self.bwd_threads <= 192 or (self.bwd_threads <= 320 and self.bwd_dyn_on)

    @property
    def _r7_kind(self) -> bool:  # 16-bit x and dy, per-sample modulation
        return "float" not in (self.tx, self.ty) and self.mode == MODE_SAMPLE

    @property
    def bwd_dyn_on(self) -> bool:
        """bwd_r7's arrays in dynamic shared memory under a 2-CTA cap, where they pass the
        static 48 KB: 16-bit x and dy, per-sample, one row of 192 < threads <= 320 per CTA."""
        if self.bwd_dyn is not None:
            return self.bwd_dyn
        return self._r7_kind and self.bwd_rows == 1 and 192 < self.bwd_threads <= 320

    def bwd_carveout(self, accum: bool) -> int:  # see bwd_carve
        return super().bwd_carveout(accum) if self.bwd_carve is None else self.bwd_carve

    def _auto(self, field: bool | None) -> bool:
        return self.bwd_r7 if field is None else field

    @property
    def fwd_vec(self) -> int:  # elements of x per vector load in the forward
        if self.fwd_lv is not None:
            return min(self.fwd_lv or self.vec, self.vec)
        if self.fwd_rows_per_thread == 2:  # adaln_fwd_r2: threads as for 16-byte loads (its
            return self.vec  # own load width is fwd_pair_vec)
        rt = _threads_per_row(self.D, self.vec, self.fwd_elems)
        one_row = 256 // rt <= 1
        return 4 if rt >= 32 and (self.ty != "float" or one_row) else self.vec

    @property
    def bwd_rt(self) -> int:
        """Past 640 threads per row (D = 8192 at 8 elements) the backward's register cap of
        65536 / 1024 = 64 spills: such rows keep 16 elements per thread."""
        rt = _threads_per_row(self.D, self.vec, self.bwd_ept)
        return rt if rt <= 640 else _threads_per_row(self.D, self.vec, 16)

    @property
    def bwd_sacc_on(self) -> bool:
        """Shared-memory column sums: 2 fp32 per element slot of every row group, beside the row
        reductions, under the 48 KB of static shared memory (100 KB of dynamic with bwd_dyn);
        else the register sums are kept."""
        on = self._auto(self.bwd_sacc) or self.bwd_sm2_on
        return on and 8 * self.bwd_slots + self.bwd_red_bytes <= self._smem

    @property
    def _smem(self) -> int:  # shared memory a backward CTA may use for its sums and multiplier
        return (100 if self.bwd_dyn_on else 48) * 1024

    @property
    def fwd_rows_per_thread(self) -> int:  # see fwd_rpt
        if self.fwd_rpt is not None:
            return self.fwd_rpt
        fp32 = self.tx == self.tm == self.ty == "float"
        return 2 if fp32 and self.mode == MODE_SAMPLE and 1024 < self.D <= 1536 else 1

    @property
    def fwd_pair_vec(self) -> int:  # see fwd_pair_lv: adaln_fwd_r2's LV (0: 16-byte loads)
        lv = self.fwd_pair_lv
        if lv is None:
            lv = 4 if self.vec == 8 and self.D <= 1536 else 0
        return lv if 0 < lv < self.vec else 0

    def fwd_pair(self, vector: bool) -> bool:  # see fwd_rpt
        return vector and self.fwd_rows_per_thread == 2 and self.mode != MODE_TOKEN

    @property
    def bwd_msh_on(self) -> bool:
        """The multiplier in shared memory: 4 bytes per element slot of every row group, beside
        the shared column sums (8 bytes) and the row reductions, under the same limit."""
        used = self.bwd_red_bytes + (8 * self.bwd_slots if self.bwd_sacc_on else 0)
        fits = used + 4 * self.bwd_slots <= self._smem
        return self._auto(self.bwd_msh) and self.mode != MODE_TOKEN and fits

    @property
    def _bf16_x_fp32_mod(self) -> bool:  # where rounds 14 and 17 measured (f16 x or mod spills)
        return self.tx == "bf16" and self.tm == "float"

    def bwd_svec_on(self, vector: bool) -> bool:  # see bwd_svec: the shared arrays as words
        on = self._bf16_x_fp32_mod if self.bwd_svec is None else self.bwd_svec
        narrow = self.bwd_rt <= 96 or self.bwd_remat_on(vector)  # wider rows spill without RM
        return on and (self.bwd_sacc_on or self.bwd_msh_on) and narrow

    def bwd_remat_on(self, vector: bool) -> bool:  # see bwd_remat; needs the packed row (PF)
        wanted = self.bwd_rt > 96 if self.bwd_remat is None else self.bwd_remat
        kind = self._r7_kind and self._bf16_x_fp32_mod
        return kind and wanted and self.bwd_prefetch and vector

    @property
    def bwd_ctas(self) -> int:
        """CTAs per SM the backward is compiled for (__launch_bounds__ min blocks)."""
        minb = self.bwd_minb if self.bwd_sacc_on or not self._auto(self.bwd_sacc) else 1
        if self.bwd_sm2_on and self.bwd_sacc_on:
            minb = max(minb, 2)
        if self._auto(self.bwd_occ) and "float" not in (self.tx, self.ty):
            # 96 registers without spills (16-bit x and dy; fp32 dy spills): 3 CTAs of <= 192
            # threads, or with the shared arrays in dynamic memory 2 of <= 320 (D = 5120)
            if self.bwd_threads <= 192:
                minb = max(minb, 3)
            elif self.bwd_dyn_on and self.bwd_threads <= 320:
                minb = max(minb, 2)
        return minb
