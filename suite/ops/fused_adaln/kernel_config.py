"""Which fused AdaLN kernels run and how they launch: a frozen table of launch configurations,
looked up by (x dtype, modulation dtype, output dtype, modulation mode, D), and the C++ name
expressions of one NVRTC program built from them. No CUDA here: suite/ops/fused_adaln/cuda.py builds
and launches them. The rows are the designs the H200 measured fastest (docs/perf-notes.md);
tests/test_kernel_config.py pins every name and launch shape they produce. The tuning lab
(lab/kernel_rules.py) derives other designs from rules and names them through KernelNames.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

MODE_SAMPLE, MODE_TOKEN, MODE_AFFINE = 0, 1, 2
ALL_MODES = (MODE_SAMPLE, MODE_TOKEN, MODE_AFFINE)
# The kernels' template defaults after their fixed arguments (names drop trailing defaults):
FWD_PF_DEFAULTS = ["1", "0"]  # adaln_fwd_pf: MINB, LV
FWD_DEFAULTS = ["false", "0", "1"]  # adaln_fwd: VECTOR, LV, MINB
BWD_DEFAULTS = ["1"] + ["false"] * 6  # adaln_bwd: MINB, SACC, PF, MSH, DYN, SV, RM
DTILE_TD, DTILE_TR, DTILE_NTILE = 32, 8, 512  # the paper's (d_tile, n_tile) layout
MANY_ROWS = 16384  # launches of at least this many rows (B * N) take a row's `many` forward


def threads_per_row(D: int, vec: int, ept: int) -> int:
    """Threads per row for about `ept` elements per thread (a whole number of `vec`-element
    vectors): a power of two below a warp (xor-shuffles stay inside the row), else a whole
    number of warps."""
    nvec = -(-D // vec)
    need = -(-nvec // max(1, ept // vec))
    if need <= 32:
        return max(4, 1 << (need - 1).bit_length())
    return min(1024, -(-need // 32) * 32)


def _trailing(args: list[str], defaults: list[str], keep: int = 0) -> str:
    """Template arguments after the fixed ones: the first `keep` always, the rest only up to the
    last that differs from the kernel's default for its position."""
    args = list(args)
    while len(args) > keep and args[-1] == defaults[len(args) - 1]:
        args.pop()
    return "".join(", " + a for a in args)


def _b(v: bool) -> str:
    return "true" if v else "false"


# ----------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Fwd:
    """A forward kernel's design. kernel (aligned rows; unaligned ones always take adaln_fwd):
    "prefetch" = adaln_fwd_pf, persistent, the next row loaded while this one is written;
    "row" = adaln_fwd, one CTA per block of rows; "pair" = adaln_fwd_r2, two consecutive rows of
    one sample per row group sharing one modulation load (not per-token modulation)."""

    kernel: str
    ept: int = 16  # elements of a row per thread
    load: int = 0  # elements of x per vector load (0: 16 bytes); sets the thread layout
    regs: int = 64  # register cap per thread (0: ptxas chooses); none past 320 threads per CTA
    pair_load: int = 0  # adaln_fwd_r2: elements of 16-bit x per load (0: 16 bytes)


@dataclass(frozen=True)
class Bwd:
    """A backward row kernel's design (the unaligned fallback drops prefetch, recomputation and
    the interleaved rows: they need aligned 16-byte vectors)."""

    ctas: int = 1  # CTAs per SM ptxas must fit (__launch_bounds__ min blocks)
    sums: bool = False  # column sums in shared memory (else in registers)
    mult: bool = False  # the per-sample multiplier 1 + scale in shared memory
    dynamic: bool = False  # those arrays in dynamic shared memory (past the static 48 KB)
    words: bool = False  # the shared arrays read as 16-byte words
    remat: bool = False  # second pass recomputes x-hat and dy from the packed (prefetched) row
    prefetch: bool = True  # the next row's x, dy, mean, rstd loaded during this one


X16, F32, BF16, ANY = ("bf16", "f16"), ("float",), ("bf16",), ("float", "bf16", "f16")


@dataclass(frozen=True)
class Row:
    """Where a design applies: x, modulation and output (dy) dtypes, modes, above < D <= upto.
    A table is read top to bottom; the first matching row wins (narrow rows come first)."""

    x: tuple[str, ...]
    mod: tuple[str, ...]
    y: tuple[str, ...]
    modes: tuple[int, ...]
    above: int
    upto: int
    design: Fwd | Bwd
    many: Fwd | None = None  # forward: aligned launches of >= MANY_ROWS rows run this one

    def matches(self, tx: str, tm: str, ty: str, D: int, mode: int) -> bool:
        return (
            tx in self.x and tm in self.mod and ty in self.y and mode in self.modes
        ) and self.above < D <= self.upto


S = (MODE_SAMPLE,)
PAIR, PAIR4 = Fwd("pair"), Fwd("pair", pair_load=4)  # 4: an fp32 y chunk is one 16-byte store
WARP_ROW = dict(ept=48, regs=128)  # D = 1536 as one warp per row: shuffles only, no barrier
WIDE = dict(ept=32, regs=96)  # 32 elements per thread: 4 CTAs of 160 threads at D = 5120

FORWARD: tuple[Row, ...] = (
    # fp32 x: 16-byte loads are 4 elements, so one layout at every width
    Row(F32, F32, F32, S, 1024, 1536, Fwd("pair")),
    Row(F32, ANY, F32, ALL_MODES, 0, 8192, Fwd("row")),
    Row(F32, ANY, BF16, ALL_MODES, 1024, 1536, Fwd("prefetch", **WARP_ROW)),
    Row(F32, ANY, X16, ALL_MODES, 0, 8192, Fwd("prefetch")),
    # 16-bit x, fp32 y: no prefetch (its registers go to the wider output); 4-element loads where
    # a row of 16-byte loads would be one row per CTA (fp32 modulation in whole 16-byte words)
    Row(BF16, F32, F32, S, 1024, 1536, Fwd("row"), many=PAIR4),
    Row(X16, ANY, F32, ALL_MODES, 0, 2048, Fwd("row")),
    Row(X16, F32, F32, S, 2560, 3072, Fwd("row", load=4, regs=40)),  # 8 CTAs of 192, no spills
    Row(X16, ANY, F32, ALL_MODES, 2048, 3072, Fwd("row", load=4)),
    Row(X16, ANY, F32, ALL_MODES, 3072, 4096, Fwd("row", **WIDE)),
    Row(X16, ANY, F32, ALL_MODES, 4096, 5120, Fwd("row", load=4, **WIDE)),
    Row(X16, ANY, F32, ALL_MODES, 5120, 8192, Fwd("row", load=4)),
    # 16-bit x and y: the prefetching forward; 4-element loads once a row spans a warp
    Row(X16, ANY, X16, ALL_MODES, 0, 256, Fwd("prefetch")),
    Row(BF16, F32, BF16, S, 1024, 1536, Fwd("prefetch", load=4, **WARP_ROW), many=PAIR4),
    Row(BF16, F32, BF16, S, 1536, 3072, Fwd("prefetch", load=4), many=PAIR),
    Row(X16, ANY, BF16, ALL_MODES, 1024, 1536, Fwd("prefetch", load=4, **WARP_ROW)),
    Row(X16, ANY, X16, ALL_MODES, 256, 3072, Fwd("prefetch", load=4)),
    Row(X16, ANY, X16, ALL_MODES, 3072, 5120, Fwd("prefetch", load=4, **WIDE)),
    Row(X16, ANY, X16, ALL_MODES, 5120, 8192, Fwd("prefetch", load=4)),
)

# The shared-memory backward (3 CTAs of <= 192 threads, 96 registers without spills) exists for
# 16-bit x and dy with per-sample modulation, where a CTA's sums and multiplier fit: one row per
# CTA at 1024 < D <= 1536 and 2048 < D <= 3072, and at 3072 < D <= 5120 in dynamic memory under
# a 2-CTA cap. The words and the recomputation: bf16 x with fp32 modulation (f16 spills).
SHARED = dict(sums=True, mult=True)
BACKWARD: tuple[Row, ...] = (
    # past 5120 elements per CTA the register cap of 65536 / threads leaves no room for a second
    # row: ptxas spills (D = 8192)
    Row(ANY, ANY, ANY, ALL_MODES, 5120, 8192, Bwd(prefetch=False)),
    Row(BF16, F32, X16, S, 1024, 1536, Bwd(ctas=3, words=True, **SHARED)),
    Row(BF16, F32, X16, S, 1536, 2048, Bwd(remat=True)),
    Row(BF16, F32, X16, S, 2048, 3072, Bwd(ctas=3, words=True, remat=True, **SHARED)),
    Row(BF16, F32, X16, S, 3072, 5120, Bwd(ctas=2, dynamic=True, words=True, remat=True, **SHARED)),
    Row(X16, ANY, X16, S, 1024, 1536, Bwd(ctas=3, **SHARED)),
    Row(X16, ANY, X16, S, 2048, 3072, Bwd(ctas=3, **SHARED)),
    Row(X16, ANY, X16, S, 3072, 5120, Bwd(ctas=2, dynamic=True, **SHARED)),
    # fp32 dy beside 16-bit x, one row of 320 threads: shared sums, 2 CTAs, no prefetch
    Row(X16, ANY, F32, S, 3072, 5120, Bwd(ctas=2, sums=True, prefetch=False)),
    Row(ANY, ANY, ANY, ALL_MODES, 0, 5120, Bwd()),
)


def lookup(table: tuple[Row, ...], tx: str, tm: str, ty: str, D: int, mode: int) -> Row:
    """The first row of `table` for these dtypes (C++ names), mode and width."""
    for row in table:
        if row.matches(tx, tm, ty, D, mode):
            return row
    raise ValueError(
        f"no fused AdaLN launch configuration for {tx}/{tm}/{ty}, D={D}, mode={mode}: the table "
        f"covers dtypes float, bf16, f16, modes {ALL_MODES} and 1 <= D <= 8192"
    )


# ----------------------------------------------------------------------------- names, geometry
class KernelNames:
    """Kernel names and launch geometry of one configuration from its design properties, which
    a subclass provides: fwd_vec, fwd_elems, fwd_cap, fwd_prefetch, fwd_pair(vector),
    fwd_pair_vec, fwd_many; bwd_ctas, bwd_sacc_on, bwd_msh_on, bwd_dyn_on, bwd_prefetch,
    bwd_svec_on(vector), bwd_remat_on(vector)."""

    tx: str
    tm: str
    ty: str
    D: int
    mode: int
    fwd_many_rows: int | None = MANY_ROWS

    @property
    def vec(self) -> int:  # elements of x in one 16-byte load
        return 4 if self.tx == "float" else 8

    @property
    def fwd_rt(self) -> int:
        return threads_per_row(self.D, self.fwd_vec, self.fwd_elems)

    @property
    def fwd_rows(self) -> int:  # row groups per CTA, ~256 threads per CTA
        return max(1, 256 // self.fwd_rt)

    @property
    def fwd_threads(self) -> int:
        return self.fwd_rt * self.fwd_rows

    def fwd_launch(self, vector: bool, rows: int):
        """The configuration whose fwd(vector) runs a launch of `rows` rows (B * N): fwd_many's
        for aligned launches of at least fwd_many_rows rows, where there is one, else this."""
        many = self.fwd_many if vector else None
        return many if many and rows >= self.fwd_many_rows else self

    def fwd(self, vector: bool) -> str:
        head = f"{self.tx}, {self.tm}, {self.ty}, {self.D}, {self.fwd_rt}, {self.fwd_rows}, {self.mode}"
        lv = str(self.fwd_vec if vector and self.fwd_vec != self.vec else 0)
        # the register cap as the CTAs per SM it allows; none past 320 threads per CTA
        # (D > 5120), where 64 registers spill
        capped = self.fwd_cap and self.fwd_threads <= 320
        nb = str(max(1, 65536 // (self.fwd_cap * self.fwd_threads)) if capped else 1)
        if self.fwd_pair(vector):
            return f"adaln_fwd_r2<{head}{_trailing([nb, str(self.fwd_pair_vec)], ['1', '0'])}>"
        if vector and self.fwd_prefetch:
            return f"adaln_fwd_pf<{head}{_trailing([nb, lv], FWD_PF_DEFAULTS)}>"
        return f"adaln_fwd<{head}{_trailing([_b(vector), lv, nb], FWD_DEFAULTS, 1)}>"

    @property
    def bwd_rt(self) -> int:  # threads per row of the backward: 16 elements per thread
        return threads_per_row(self.D, self.vec, 16)

    @property
    def bwd_rows(self) -> int:
        return max(1, 256 // self.bwd_rt)

    @property
    def bwd_threads(self) -> int:
        return self.bwd_rt * self.bwd_rows

    @property
    def bwd_red_bytes(self) -> int:
        """Static shared memory of the backward's row reductions (Red<RT> in adaln_common.cuh)."""
        warps = self.bwd_rt // 32 if self.bwd_rt > 32 else 1
        return 4 * self.bwd_rows * 2 * 2 * warps

    @property
    def bwd_part_width(self) -> int:
        """Width of a partial column-sum row of the fused backward: D padded to whole chunks of
        vec * bwd_rt (its thread-major layout, kernels/adaln_bwd.cu)."""
        step = self.vec * self.bwd_rt
        return -(-self.D // step) * step

    @property
    def bwd_slots(self) -> int:
        """Element slots of a CTA's row groups (the padded row, thread-major: bwd_part_width)."""
        return self.bwd_part_width * self.bwd_rows

    def bwd_dyn_bytes(self, accum: bool) -> int:
        """Dynamic shared memory of the backward launch: the multiplier rows, then the column-sum
        rows (kernels/adaln_bwd.cu DYN); 0 without dynamic shared arrays. The D-tile pass's dx
        kernel (accum False) keeps no sums."""
        if not self.bwd_dyn_on or self.mode == MODE_TOKEN:
            return 0
        return 4 * self.bwd_slots * (self.bwd_msh_on + 2 * (self.bwd_sacc_on and accum))

    def bwd_carveout(self, accum: bool) -> int:
        """Carveout % for a dynamic-shared backward launch: the smallest that holds bwd_ctas CTAs
        of dynamic + static shared memory + the 1 KB the driver reserves per CTA, of the 228 KB
        an H100/H200 SM has (the driver rounds up to a size it supports); L1 keeps the rest."""
        need = self.bwd_ctas * (self.bwd_dyn_bytes(accum) + self.bwd_red_bytes + 1024)
        return min(100, -(-100 * need // (228 * 1024)))

    def bwd(self, vector: bool, accum: bool) -> str:
        pf = self.bwd_prefetch and vector
        tail = [str(self.bwd_ctas), _b(self.bwd_sacc_on), _b(pf), _b(self.bwd_msh_on)]
        tail.append(_b(self.bwd_dyn_on and (self.bwd_sacc_on or self.bwd_msh_on)))
        tail += [_b(self.bwd_svec_on(vector)), _b(self.bwd_remat_on(vector))]
        return (
            f"adaln_bwd<{self.tx}, {self.tm}, {self.ty}, {self.D}, {self.bwd_rt}, "
            f"{self.bwd_rows}, {self.mode}, {_b(vector)}, {_b(accum)}"
            f"{_trailing(tail, BWD_DEFAULTS)}>"
        )

    def finalize(self, rt: int, vec: int) -> str:
        """The finalize of partial rows in layout (rt, vec): the fused row kernel's (bwd_rt, vec),
        or (1, 1) for the D-tile pass's plain rows; the layout is a template argument so the
        index arithmetic folds at compile time."""
        return f"adaln_bwd_finalize_t<{self.D}, {rt}, {vec}>"

    def dtile(self) -> str:
        return f"adaln_bwd_dtile<{self.tx}, {self.ty}, {DTILE_TD}, {DTILE_TR}>"

    def names(self) -> list[str]:
        out = [self.fwd(v) for v in (True, False)]
        if self.fwd_many:  # aligned rows only: the unaligned fallback keeps one forward
            out.append(self.fwd_many.fwd(True))
        accs = (False,) if self.mode == MODE_TOKEN else (True, False)
        out += [self.bwd(v, a) for v in (True, False) for a in accs]
        if self.mode != MODE_TOKEN:
            out += [self.dtile(), self.finalize(1, 1), self.finalize(self.bwd_rt, self.vec)]
        return out


@dataclass(frozen=True)
class KernelConfig(KernelNames):
    """One NVRTC program of the shipped op: dtypes (C++ names "float" | "bf16" | "f16"), D and
    mode, with its designs from FORWARD and BACKWARD. `large`: the configuration of the forward
    for launches of >= MANY_ROWS rows (fwd_many), where the row has one."""

    tx: str
    tm: str
    ty: str
    D: int
    mode: int
    large: bool = False

    @functools.cached_property
    def _fwd_row(self) -> Row:
        return lookup(FORWARD, self.tx, self.tm, self.ty, self.D, self.mode)

    @functools.cached_property
    def _bwd(self) -> Bwd:
        return lookup(BACKWARD, self.tx, self.tm, self.ty, self.D, self.mode).design

    @property
    def _fwd(self) -> Fwd:
        return self._fwd_row.many if self.large else self._fwd_row.design

    @property
    def fwd_many(self) -> KernelConfig | None:
        return replace(self, large=True) if self._fwd_row.many and not self.large else None

    @property
    def fwd_vec(self) -> int:  # elements of x per vector load in the forward
        return self._fwd.load or self.vec

    @property
    def fwd_elems(self) -> int:
        return self._fwd.ept

    @property
    def fwd_cap(self) -> int:
        return self._fwd.regs

    @property
    def fwd_prefetch(self) -> bool:
        return self._fwd.kernel == "prefetch"

    def fwd_pair(self, vector: bool) -> bool:
        return vector and self._fwd.kernel == "pair" and self.mode != MODE_TOKEN

    @property
    def fwd_pair_vec(self) -> int:
        return self._fwd.pair_load

    @property
    def bwd_ctas(self) -> int:
        return self._bwd.ctas

    @property
    def bwd_sacc_on(self) -> bool:
        return self._bwd.sums

    @property
    def bwd_msh_on(self) -> bool:
        return self._bwd.mult

    @property
    def bwd_dyn_on(self) -> bool:
        return self._bwd.dynamic

    @property
    def bwd_prefetch(self) -> bool:
        return self._bwd.prefetch

    def bwd_svec_on(self, vector: bool) -> bool:
        # without recomputation (the fallback has no packed row) wider rows spill the words
        return self._bwd.words and (vector or not self._bwd.remat)

    def bwd_remat_on(self, vector: bool) -> bool:
        return self._bwd.remat and vector


def all_configs(widths=(64, 1000, 1536, 3072, 4100, 5120, 8192)) -> list[KernelConfig]:
    """Every (dtype, modulation dtype, output dtype, D, mode) the tests and benchmark use."""
    out = set()
    for tx in ("bf16", "float", "f16"):
        for tm in ("float", tx):
            for ty in (tx, "float"):
                for D in widths:
                    for mode in ALL_MODES:
                        out.add(KernelConfig(tx, tm, ty, D, mode))
    return sorted(out, key=str)
