"""The CUDA side of the fused AdaLN op: NVRTC programs and launches of the kernels that
suite/ops/kernel_config.py names.

One NVRTC program per (x dtype, modulation dtype, output dtype, D, mode) holds every kernel that
configuration needs (forward and backward, vector and scalar variants), so a model with a few
widths compiles a handful of programs once; the CUBINs are cached on disk across processes.
"""

from __future__ import annotations

import functools
import os

import torch

from suite.cuda.compile import Program, compile_program, read_sources
from suite.ops.kernel_config import (  # noqa: F401  (re-exported: the op's public kernel names)
    DTILE_NTILE,
    DTILE_TD,
    DTILE_TR,
    MODE_AFFINE,
    MODE_SAMPLE,
    MODE_TOKEN,
    VARIANTS,
    KernelConfig,
    all_configs,
)

MAX_D = 8192  # past this the row no longer fits in registers without spills
CTYPE = {torch.float32: "float", torch.bfloat16: "bf16", torch.float16: "f16"}
SOURCES = ["adaln_common.cuh", "adaln_fwd.cu", "adaln_bwd.cu", "adaln_bwd_reduce.cu"]


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


def _grid_cap(func, threads: int, index: int, smem: int = 0) -> int:
    from suite.cuda.launch import max_blocks_per_sm, sm_count

    return sm_count(index) * max(1, max_blocks_per_sm(func, threads, smem))


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
def _fwd_plan(tx, tm, ty, D: int, mode: int, vector: bool, variant: str, idx: int, many=False):
    """many: the launch has at least fwd_many_rows rows (KernelConfig.fwd_launch)."""
    cfg = _config(tx, tm, ty, D, mode, variant)
    run = cfg.fwd_launch(vector, cfg.fwd_many_rows) if many else cfg
    func = _fn(cfg, run.fwd(vector), idx)  # every such kernel is in cfg's own program
    persistent = vector and run.fwd_prefetch and not run.fwd_pair(vector)  # one wave of CTAs
    cap = _grid_cap(func, run.fwd_threads, idx) if persistent else 2**31 - 1
    return func, run.fwd_threads, run.fwd_rows, cap, run.fwd_pair(vector)


@functools.cache
def _bwd_plan(tx, tm, ty, D: int, mode: int, vector: bool, accum: bool, variant: str, idx: int):
    from suite.cuda.launch import use_dynamic_smem

    cfg = _config(tx, tm, ty, D, mode, variant)
    func = _fn(cfg, cfg.bwd(vector, accum), idx)
    smem = cfg.bwd_dyn_bytes(accum)  # 0 unless the shared arrays are dynamic (bwd_dyn)
    carve = cfg.bwd_carveout(accum)
    if smem:
        use_dynamic_smem(func, smem, carve)
    return cfg, func, _grid_cap(func, cfg.bwd_threads, idx, smem), smem, carve


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
    many_rows = _config(x.dtype, scale.dtype, out_dtype, D, mode, _variant).fwd_many_rows
    func, threads, groups_per_cta, cap, pair = _fwd_plan(
        x.dtype,
        scale.dtype,
        out_dtype,
        D,
        mode,
        vector,
        _variant,
        idx,
        many_rows is not None and rows >= many_rows,
    )
    # One CTA per block of rows (not a grid-stride wave): at small N the hardware refills SMs as
    # CTAs finish, instead of each CTA walking several rows one dependent load after another.
    # The persistent (prefetching) kernel caps the grid at one wave.
    # adaln_fwd_r2: a row group takes a pair of rows of one sample (odd N: a sample's last pair
    # is one row), so B * ceil(N / 2) pairs
    units = B * -(-N // 2) if pair else rows
    grid = min(-(-units // groups_per_cta), cap)
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


def backward(dy, x, scale, mean, rstd, mode: int, impl: str, rows=None):
    """Returns dx [B, N, D] in x.dtype, and fp32 dscale, dshift: [B, D] (sample), [D] (affine) or
    [B, N, D] in scale.dtype (token). `rows` = (table, si, hi): per-sample gradients written as
    rows si, hi of `table`, an uninitialised contiguous fp32 [B, K, D] (the gradient of Wan's
    [B, 6, D] modulation); its other rows are zeroed by the same kernels."""
    from suite.cuda.launch import i32, i64, launch, ptr, use_dynamic_smem

    B, N, D = x.shape
    dev, idx = x.device, x.device.index
    dx = torch.empty((B, N, D), dtype=x.dtype, device=dev)
    groups, R = (1, B * N) if mode == MODE_AFFINE else (B, N)
    table, zero_rows = None, 0  # rows: the table and its other rows' bit mask
    if mode == MODE_TOKEN:
        dsc = torch.empty((B, N, D), dtype=scale.dtype, device=dev)
        dsh = torch.empty((B, N, D), dtype=scale.dtype, device=dev)
    elif rows is not None:
        table, si, hi = rows
        assert mode == MODE_SAMPLE and table.is_contiguous() and table.dtype == torch.float32
        dsc, dsh = table[:, si], table[:, hi]
        zero_rows = sum(1 << r for r in range(table.shape[1]) if r not in (si, hi))
    else:
        dsc = torch.empty((groups, D), dtype=torch.float32, device=dev)
        dsh = torch.empty((groups, D), dtype=torch.float32, device=dev)
    if B * N == 0:
        if table is not None:
            table.zero_()
        return dx, dsc.zero_(), dsh.zero_()
    smb, smn = mod_strides(scale, mode)
    vector = D % (16 // x.element_size()) == 0 and _aligned(
        (x, x.stride(0), x.stride(1)), (dy,), (scale, smb, smn), (dx,), (dsc,), (dsh,)
    )
    accum = impl == "fused" and mode != MODE_TOKEN
    cfg, func, cap, smem, carve = _bwd_plan(
        x.dtype, scale.dtype, dy.dtype, D, mode, vector, accum, _variant, idx
    )
    if smem:  # again per launch: another variant may share this kernel with another carveout
        use_dynamic_smem(func, smem, carve)
    # Persistent grid: about one wave of CTAs (occupancy API), split evenly over the groups, and
    # at least 8 row blocks per CTA so the partial rows stay small next to x and dy.
    chunks = max(1, min(-(-cap // groups), -(-R // (cfg.bwd_rows * 8))))
    slots = chunks * cfg.bwd_rows
    if accum:
        part_w, part_rt, part_vec = cfg.bwd_part_width, cfg.bwd_rt, cfg.vec  # thread-major rows
        part_s = torch.empty((groups, slots, part_w), dtype=torch.float32, device=dev)
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
        smem=smem,
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
        slots, part_w, part_rt, part_vec = n_tiles, D, 1, 1  # plain rows
    launch(
        _fn(cfg, cfg.finalize(part_rt, part_vec), idx),
        (-(-part_w // 32), groups, 1),
        1024,
        idx,
        [
            ptr(part_s),
            ptr(part_h),
            ptr(dsc),
            ptr(dsh),
            i64(dsc.stride(0) if dsc.dim() == 2 else D),
            ptr(table),
            i32(zero_rows),
            i32(slots),
        ],
        # the fused row kernel lets its finalize launch early (KernelConfig.bwd_pdl)
        dependent=cfg.bwd_pdl and impl == "fused" and _sm90(idx),
    )
    return dx, dsc, dsh


@functools.cache
def _sm90(index: int) -> bool:  # programmatic dependent launches need sm_90 or newer
    return torch.cuda.get_device_capability(index) >= (9, 0)


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
