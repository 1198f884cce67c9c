"""The CUDA side of the fused AdaLN op: kernel configuration, NVRTC programs, launches.

One NVRTC program per (x dtype, modulation dtype, output dtype, D, mode) holds every kernel that
configuration needs (forward and backward, vector and scalar variants), so a model with a few
widths compiles a handful of programs once; the CUBINs are cached on disk across processes.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace

import torch

from suite.cuda.compile import Program, compile_program, read_sources

MODE_SAMPLE, MODE_TOKEN, MODE_AFFINE = 0, 1, 2
MAX_D = 8192  # past this the row no longer fits in registers without spills
CTYPE = {torch.float32: "float", torch.bfloat16: "bf16", torch.float16: "f16"}
SOURCES = ["adaln_common.cuh", "adaln_fwd.cu", "adaln_bwd.cu"]
DTILE_TD, DTILE_TR, DTILE_NTILE = 32, 8, 512  # the paper's (d_tile, n_tile) layout


def _threads_per_row(D: int, vec: int, ept: int) -> int:
    """Threads per row for about `ept` elements per thread (a whole number of 16-byte vectors):
    a power of two below a warp (xor-shuffles stay inside the row), else a whole number of warps."""
    nvec = -(-D // vec)
    need = -(-nvec // max(1, ept // vec))
    if need <= 32:
        return max(4, 1 << (need - 1).bit_length())
    return min(1024, -(-need // 32) * 32)


def _trailing(args: list[str], keep: int = 0) -> str:
    """Template arguments after the fixed ones: the first `keep` always, the rest only up to the
    last non-default ("0", "1", "false" are the kernels' defaults), so default kernels keep their
    names (and cached CUBINs)."""
    args = list(args)
    while len(args) > keep and args[-1] in ("0", "1", "false"):
        args.pop()
    return "".join(", " + a for a in args)


@dataclass(frozen=True)
class KernelConfig:
    """One NVRTC program. The fields after `mode` select the row kernels' design; their defaults
    are the fastest measured on the H200 (docs/perf-notes.md, round 2 of 2026-12-01)."""

    tx: str  # C++ element types: "float" | "bf16" | "f16"
    tm: str
    ty: str
    D: int
    mode: int
    fwd_ept: int = 16  # forward: elements of a row per thread (16 = 2 vectors of bf16, 4 of fp32)
    # forward: persistent with the next row prefetched (aligned rows). None: where it measured
    # faster, i.e. 16-bit y (+2-14% at N = 65536); fp32 y ran 2-7% slower with it.
    fwd_pf: bool | None = None
    fwd_mreg: bool = False  # forward (with prefetch): per-sample modulation kept in registers
    fwd_regs: int = 64  # forward: register cap per thread (0: ptxas chooses)
    # forward: elements of x per vector load (0: 16 bytes). 4 with 16-bit x makes the fp32
    # modulation loads whole 16-byte words, coalesced: half the L1 sectors. None: 4 where it
    # measured faster (round 4): 16-bit y with rows of at least a warp (+0-8%), fp32 y with one
    # row per CTA (D >= 3072, +1-7%); D = 1536 fp32 y ran 8-10 points slower with it.
    fwd_lv: int | None = None
    # forward without prefetch (fp32 y): a named barrier per row group instead of the CTA's
    # (measured slower there: round 4)
    fwd_named: bool = False
    bwd_ept: int = 16  # backward: elements of a row per thread
    bwd_minb: int = 1  # backward: CTAs per SM ptxas must fit (__launch_bounds__ min blocks)
    bwd_sacc: bool = False  # backward: column sums in shared memory (where they fit in 48 KB)
    bwd_pf: bool = True  # backward: next row's x, dy, mean, rstd prefetched (aligned rows)

    @property
    def fwd_prefetch(self) -> bool:
        return self.ty != "float" if self.fwd_pf is None else self.fwd_pf

    @property
    def bwd_prefetch(self) -> bool:
        """Past 320 threads per CTA (D > 5120 at 16 elements per thread) the register cap of
        65536 / threads leaves no room for a second row: ptxas spills (D = 8192), so no prefetch."""
        return self.bwd_pf and self.bwd_threads <= 320

    @property
    def vec(self) -> int:  # elements of x in one 16-byte load
        return 4 if self.tx == "float" else 8

    @property
    def rt(self) -> int:
        """Threads per row of the default kernels: about 16 elements per thread."""
        return _threads_per_row(self.D, self.vec, 16)

    @property
    def rows(self) -> int:  # rows per CTA, ~256 threads per CTA
        return max(1, 256 // self.rt)

    @property
    def threads(self) -> int:
        return self.rt * self.rows

    @property
    def fwd_vec(self) -> int:  # elements of x per vector load in the forward
        if self.fwd_lv is not None:
            return min(self.fwd_lv or self.vec, self.vec)
        rt = _threads_per_row(self.D, self.vec, self.fwd_ept)
        one_row = 256 // rt <= 1
        return 4 if rt >= 32 and (self.ty != "float" or one_row) else self.vec

    @property
    def fwd_rt(self) -> int:
        return _threads_per_row(self.D, self.fwd_vec, self.fwd_ept)

    @property
    def fwd_rows(self) -> int:  # row groups per CTA, ~256 threads per CTA
        return max(1, 256 // self.fwd_rt)

    @property
    def fwd_threads(self) -> int:
        return self.fwd_rt * self.fwd_rows

    @property
    def bwd_rt(self) -> int:
        """Past 640 threads per row (D = 8192 at 8 elements) the backward's register cap of
        65536 / 1024 = 64 spills: such rows keep 16 elements per thread."""
        rt = _threads_per_row(self.D, self.vec, self.bwd_ept)
        return rt if rt <= 640 else _threads_per_row(self.D, self.vec, 16)

    @property
    def bwd_rows(self) -> int:
        return max(1, 256 // self.bwd_rt)

    @property
    def bwd_threads(self) -> int:
        return self.bwd_rt * self.bwd_rows

    @property
    def bwd_sacc_on(self) -> bool:
        """Shared-memory column sums: 2 fp32 per element slot of every row group, under the 48 KB
        of static shared memory (else the register sums are kept)."""
        nch = -(-self.D // (self.vec * self.bwd_rt))
        return self.bwd_sacc and 8 * nch * self.vec * self.bwd_rt * self.bwd_rows <= 48 * 1024

    def fwd(self, vector: bool) -> str:
        head = f"{self.tx}, {self.tm}, {self.ty}, {self.D}, {self.fwd_rt}, {self.fwd_rows}, {self.mode}"
        lv = str(self.fwd_vec if vector and self.fwd_vec != self.vec else 0)
        # register cap: the CTAs per SM that fwd_regs registers per thread allow; none past 320
        # threads per CTA (D > 5120), where 64 registers spill (as in bwd_prefetch)
        capped = self.fwd_regs and self.fwd_threads <= 320
        nb = str(max(1, 65536 // (self.fwd_regs * self.fwd_threads)) if capped else 1)
        if vector and self.fwd_prefetch:
            tail = [str(self.fwd_mreg).lower(), nb, lv]
            return f"adaln_fwd_pf<{head}{_trailing(tail, 1)}>"
        tail = [str(vector).lower(), lv, nb, str(self.fwd_named).lower()]
        return f"adaln_fwd<{head}{_trailing(tail, 1)}>"

    def bwd(self, vector: bool, accum: bool) -> str:
        minb = self.bwd_minb if self.bwd_sacc_on or not self.bwd_sacc else 1
        tail = [str(minb), str(self.bwd_sacc_on).lower(), str(self.bwd_prefetch and vector).lower()]
        return (
            f"adaln_bwd<{self.tx}, {self.tm}, {self.ty}, {self.D}, {self.bwd_rt}, "
            f"{self.bwd_rows}, {self.mode}, {str(vector).lower()}, {str(accum).lower()}"
            f"{_trailing(tail)}>"
        )

    def dtile(self) -> str:
        return f"adaln_bwd_dtile<{self.tx}, {self.ty}, {DTILE_TD}, {DTILE_TR}>"

    def names(self) -> list[str]:
        out = [self.fwd(v) for v in (True, False)]
        accs = (False,) if self.mode == MODE_TOKEN else (True, False)
        out += [self.bwd(v, a) for v in (True, False) for a in accs]
        if self.mode != MODE_TOKEN:
            out += [self.dtile(), "adaln_bwd_finalize"]
        return out

    def variant(self, name: str) -> KernelConfig:
        """This configuration with the fields of benchmark variant `name` (see VARIANTS)."""
        return replace(self, **VARIANTS[name])


# Benchmark-only kernel variants (docs/perf-notes.md, rounds 1 and 2). The op uses "default"
# unless $ADAPTIVELOAD_ADALN_VARIANT or set_variant() picks another; every variant computes the
# same function (tests/test_adaln_gpu.py runs the suite on each). Kept: the designs that win
# somewhere, and the first reference kernels to measure the defaults against. Measured and
# dropped: 2 rows per load phase, 8 elements per thread (forward and backward), shared-memory
# sums with the prefetch.
VARIANTS: dict[str, dict] = {
    "default": {},
    # the designs of the first H200 reference (since then sharing round 4's reductions)
    "round1": {"fwd_pf": False, "bwd_pf": False, "fwd_lv": 0},
    "fwd-v4": {"fwd_lv": 4},  # 4 elements per load everywhere (16-bit x)
    "fwd-pfm": {"fwd_pf": True, "fwd_mreg": True, "fwd_regs": 0},  # fastest bf16 y at D = 5120
    # column sums in shared memory and a 2-CTA register cap (the default kernel where they do not
    # fit in 48 KB of static shared memory: D > ~6000 for 16-bit x); fastest fp32 dy at D = 5120
    "bwd-sm2": {"bwd_sacc": True, "bwd_minb": 2, "bwd_pf": False},
    # round 4: the fp32-y forward with a named barrier per row group (the bf16-y one gained)
    "fwd-named": {"fwd_named": True},
}
VARIANT_ENV = "ADAPTIVELOAD_ADALN_VARIANT"


def _check_variant(name: str) -> str:
    if name not in VARIANTS:
        raise ValueError(f"unknown AdaLN kernel variant {name!r}; known: {sorted(VARIANTS)}")
    return name


_variant = _check_variant(os.environ.get(VARIANT_ENV) or "default")
ENV_VARIANT = _variant  # the process's choice; suite.ops.bench's plain "fused" impls use it


def set_variant(name: str) -> str:
    """Select the kernel variant for later calls (benchmarking only); returns the previous one.
    A backward uses the variant selected when it runs, not the one its forward ran with."""
    global _variant
    prev, _variant = _variant, _check_variant(name)
    return prev


def get_variant() -> str:
    return _variant


def check_d(D: int) -> None:
    if not 1 <= D <= MAX_D:
        raise ValueError(
            f"fused AdaLN supports 1 <= D <= {MAX_D} (the row is held in registers), got D={D}"
        )


def build(cfg: KernelConfig, arch: str, use_cache: bool = True) -> Program:
    """Compile every kernel of `cfg` for `arch` (works without a GPU: NVRTC only)."""
    check_d(cfg.D)
    src = read_sources(SOURCES)
    main = '#include "adaln_fwd.cu"\n#include "adaln_bwd.cu"\n'
    return compile_program(main, src, cfg.names(), arch, use_cache=use_cache)


@functools.cache
def _program(cfg: KernelConfig, arch: str) -> Program:
    return build(cfg, arch)


# ----------------------------------------------------------------------------- launches (GPU)
def _aligned(*pairs) -> bool:
    """Every (tensor, element strides...) starts on 16 bytes and every stride keeps it there."""
    for t, *strides in pairs:
        es = t.element_size()
        if t.data_ptr() % 16 or any((s * es) % 16 for s in strides):
            return False
    return True


@functools.cache  # one lookup per (program, kernel, device), not per launch
def _fn(cfg: KernelConfig, name: str, index: int):
    from suite.cuda.launch import device_arch, get_function

    return get_function(_program(cfg, device_arch(index)), name, index)


def _grid_cap(func, threads: int, index: int) -> int:
    from suite.cuda.launch import max_blocks_per_sm, sm_count

    return sm_count(index) * max(1, max_blocks_per_sm(func, threads))


def config_for(
    x: torch.Tensor, scale: torch.Tensor, mode: int, out_dtype: torch.dtype
) -> KernelConfig:
    return _config(x.dtype, scale.dtype, out_dtype, x.shape[-1], mode, _variant)


@functools.cache
def _config(tx, tm, ty, D: int, mode: int, variant: str) -> KernelConfig:
    cfg = KernelConfig(CTYPE[tx], CTYPE[tm], CTYPE[ty], D, mode)
    return cfg if variant == "default" else cfg.variant(variant)


# Launch plans, cached per (dtypes, D, mode, layout, variant, device): building the configuration
# and the kernel's name expression cost ~13 us per call (tools/adaln_host_path.py --breakdown).
@functools.cache
def _fwd_plan(tx, tm, ty, D: int, mode: int, vector: bool, variant: str, idx: int):
    cfg = _config(tx, tm, ty, D, mode, variant)
    func = _fn(cfg, cfg.fwd(vector), idx)
    persistent = vector and cfg.fwd_prefetch  # one wave, each CTA a contiguous run of rows
    cap = _grid_cap(func, cfg.fwd_threads, idx) if persistent else 2**31 - 1
    return func, cfg.fwd_threads, cfg.fwd_rows, cap


@functools.cache
def _bwd_plan(tx, tm, ty, D: int, mode: int, vector: bool, accum: bool, variant: str, idx: int):
    cfg = _config(tx, tm, ty, D, mode, variant)
    func = _fn(cfg, cfg.bwd(vector, accum), idx)
    return cfg, func, _grid_cap(func, cfg.bwd_threads, idx)


def mod_strides(scale: torch.Tensor, mode: int) -> tuple[int, int]:
    if mode == MODE_SAMPLE:
        return scale.stride(0), 0
    if mode == MODE_TOKEN:
        return scale.stride(0), scale.stride(1)
    return 0, 0


def forward(x, scale, shift, eps: float, mode: int, out_dtype):
    """x [B, N, D] (last dim contiguous), scale/shift as `mode` says (last dim contiguous).
    Returns y [B, N, D] contiguous in out_dtype, mean and rstd [B, N] fp32."""
    from suite.cuda.launch import f32, i64, launch, ptr

    B, N, D = x.shape
    y = torch.empty((B, N, D), dtype=out_dtype, device=x.device)
    mean = torch.empty((B, N), dtype=torch.float32, device=x.device)
    rstd = torch.empty((B, N), dtype=torch.float32, device=x.device)
    rows = B * N
    if rows == 0:
        return y, mean, rstd
    smb, smn = mod_strides(scale, mode)
    vector = D % (16 // x.element_size()) == 0 and _aligned(
        (x, x.stride(0), x.stride(1)), (scale, smb, smn), (shift, smb, smn), (y,)
    )
    if shift.stride()[: scale.dim()] != scale.stride():
        raise ValueError(
            "scale and shift must have the same strides (e.g. both chunks of one tensor)"
        )
    idx = x.device.index
    func, threads, rows_per_cta, cap = _fwd_plan(
        x.dtype, scale.dtype, out_dtype, D, mode, vector, _variant, idx
    )
    # One CTA per block of rows (not a grid-stride wave): at small N the hardware refills SMs as
    # CTAs finish, instead of each CTA walking several rows one dependent load after another.
    # The persistent (prefetching) kernel caps the grid at one wave.
    grid = min(-(-rows // rows_per_cta), cap)
    launch(
        func,
        (grid, 1, 1),
        threads,
        idx,
        [
            ptr(x),
            i64(x.stride(0)),
            i64(x.stride(1)),
            ptr(scale),
            ptr(shift),
            i64(smb),
            i64(smn),
            ptr(y),
            ptr(mean),
            ptr(rstd),
            i64(rows),
            i64(N),
            f32(eps),
        ],
    )
    return y, mean, rstd


def backward(dy, x, scale, mean, rstd, mode: int, impl: str):
    """Returns dx [B, N, D] in x.dtype, and fp32 dscale, dshift: [B, D] (sample), [D] (affine) or
    [B, N, D] in scale.dtype (token)."""
    from suite.cuda.launch import i32, i64, launch, ptr

    B, N, D = x.shape
    dev, idx = x.device, x.device.index
    dx = torch.empty((B, N, D), dtype=x.dtype, device=dev)
    groups, R = (1, B * N) if mode == MODE_AFFINE else (B, N)
    if mode == MODE_TOKEN:
        dsc = torch.empty((B, N, D), dtype=scale.dtype, device=dev)
        dsh = torch.empty((B, N, D), dtype=scale.dtype, device=dev)
    else:
        dsc = torch.empty((groups, D), dtype=torch.float32, device=dev)
        dsh = torch.empty((groups, D), dtype=torch.float32, device=dev)
    if B * N == 0:
        return dx, dsc.zero_(), dsh.zero_()
    smb, smn = mod_strides(scale, mode)
    vector = D % (16 // x.element_size()) == 0 and _aligned(
        (x, x.stride(0), x.stride(1)), (dy,), (scale, smb, smn), (dx,), (dsc,), (dsh,)
    )
    accum = impl == "fused" and mode != MODE_TOKEN
    cfg, func, cap = _bwd_plan(
        x.dtype, scale.dtype, dy.dtype, D, mode, vector, accum, _variant, idx
    )
    # Persistent grid: about one wave of CTAs (occupancy API), split evenly over the groups, and
    # at least 8 row blocks per CTA so the partial rows stay small next to x and dy.
    chunks = max(1, min(-(-cap // groups), -(-R // (cfg.bwd_rows * 8))))
    slots = chunks * cfg.bwd_rows
    if accum:
        part_s = torch.empty((groups, slots, D), dtype=torch.float32, device=dev)
        part_h = torch.empty_like(part_s)
    else:
        part_s = part_h = None
    tok = mode == MODE_TOKEN
    launch(
        func,
        (chunks, groups, 1),
        cfg.bwd_threads,
        idx,
        [
            ptr(x),
            i64(x.stride(0)),
            i64(x.stride(1)),
            ptr(dy),
            ptr(scale),
            i64(smb),
            i64(smn),
            ptr(mean),
            ptr(rstd),
            ptr(dx),
            ptr(dsc if tok else None),
            ptr(dsh if tok else None),
            ptr(part_s),
            ptr(part_h),
            i64(R),
            i64(N),
        ],
    )
    if tok:
        return dx, dsc, dsh
    if impl == "dtile":  # the paper's column-owned reduction: a second read of x and dy
        n_tiles = -(-R // DTILE_NTILE)
        part_s = torch.empty((groups, n_tiles, D), dtype=torch.float32, device=dev)
        part_h = torch.empty_like(part_s)
        f = _fn(cfg, cfg.dtile(), idx)
        launch(
            f,
            (-(-D // DTILE_TD), n_tiles, groups),
            DTILE_TD * DTILE_TR,
            idx,
            [
                ptr(x),
                i64(x.stride(0)),
                i64(x.stride(1)),
                ptr(dy),
                ptr(mean),
                ptr(rstd),
                ptr(part_s),
                ptr(part_h),
                i64(R),
                i64(N),
                i32(D),
                i32(DTILE_NTILE),
            ],
        )
        slots = n_tiles
    fin = _fn(cfg, "adaln_bwd_finalize", idx)
    launch(
        fin,
        (-(-D // 32), groups, 1),
        512,
        idx,
        [ptr(part_s), ptr(part_h), ptr(dsc), ptr(dsh), i32(slots), i32(D)],
    )
    return dx, dsc, dsh


def _build_one(args) -> str:
    cfg, arch = args
    build(cfg, arch)
    return f"{cfg} {arch}"


def prebuild(configs: list[KernelConfig], arch: str, workers: int = 8) -> int:
    """Fill the on-disk CUBIN cache for `configs` in parallel processes (NVRTC is single-threaded
    per program); later processes load the CUBINs instead of compiling."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers) as ex:
        return len(list(ex.map(_build_one, [(c, arch) for c in configs])))


def all_configs(widths=(64, 1000, 1536, 3072, 4100, 5120, 8192)) -> list[KernelConfig]:
    """Every (dtype, modulation dtype, output dtype, D, mode) the tests and benchmark use."""
    out = set()
    for tx in ("bf16", "float", "f16"):
        for tm in ("float", tx):
            for ty in (tx, "float"):
                for D in widths:
                    for mode in (MODE_SAMPLE, MODE_TOKEN, MODE_AFFINE):
                        out.add(KernelConfig(tx, tm, ty, D, mode))
    return sorted(out, key=str)
