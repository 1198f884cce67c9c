"""The CUDA side of the fused AdaLN op: NVRTC programs and launches of the kernels that
suite/ops/fused_adaln/kernel_config.py names.

One NVRTC program per (x dtype, modulation dtype, output dtype, D, mode) holds every kernel that
configuration needs (forward and backward, vector and scalar variants), so a model with a few
widths compiles a handful of programs once; the CUBINs are cached on disk across processes.
"""

from __future__ import annotations

import ctypes
import functools
from threading import get_ident

import torch

from suite.cuda import launch as L
from suite.cuda.build import OpKernels, check_rows, same_strides
from suite.ops.fused_adaln.kernel_config import (  # noqa: F401  (re-exported: the op's public kernel names)
    DTILE_NTILE,
    DTILE_TD,
    DTILE_TR,
    MODE_AFFINE,
    MODE_SAMPLE,
    MODE_TOKEN,
    KernelConfig,
    all_configs,
)

MAX_D = 8192  # past this the row no longer fits in registers without spills
CTYPE = {torch.float32: "float", torch.bfloat16: "bf16", torch.float16: "f16"}
SOURCES = ("adaln_common.cuh", "adaln_fwd.cu", "adaln_bwd.cu", "adaln_bwd_reduce.cu")
MAIN = '#include "adaln_fwd.cu"\n#include "adaln_bwd.cu"\n'


KERNELS = OpKernels("fused AdaLN", SOURCES, MAIN, MAX_D)
check_d, build, prebuild = KERNELS.check_d, KERNELS.build, KERNELS.prebuild
_fn = KERNELS.function  # (cfg, kernel name, device index) -> CUfunction, looked up once


def _grid_cap(func, threads: int, index: int, smem: int = 0) -> int:
    from suite.cuda.launch import max_blocks_per_sm, sm_count

    return sm_count(index) * max(1, max_blocks_per_sm(func, threads, smem))


def config_for(
    x: torch.Tensor, scale: torch.Tensor, mode: int, out_dtype: torch.dtype
) -> KernelConfig:
    return _config(x.dtype, scale.dtype, out_dtype, x.shape[-1], mode)


@functools.cache
def _config(tx, tm, ty, D: int, mode: int) -> KernelConfig:
    return KernelConfig(CTYPE[tx], CTYPE[tm], CTYPE[ty], D, mode)


def mod_strides(scale: torch.Tensor, mode: int) -> tuple[int, int]:
    if mode == MODE_SAMPLE:
        return scale.stride(0), 0
    if mode == MODE_TOKEN:
        return scale.stride(0), scale.stride(1)
    return 0, 0


def _layout_ok(es: int, D: int, *strides: int) -> bool:
    """16-byte vectors: D a whole number of them and every row stride keeping rows on 16 bytes
    (pointers are checked per call: they change, the plan does not)."""
    return D % (16 // es) == 0 and all((s * es) % 16 == 0 for s in strides)


# A launch plan per (shapes, strides, dtypes, mode, device): the kernel, grid and, per thread, a
# packed argument buffer whose pointer slots each call rewrites (per thread because the buffer is
# rewritten in place between the slot writes and the launch; a new thread's buffer is plain
# ctypes, no driver call, so a plan built before a CUDA-graph capture is safe inside it). Bounded:
# a run with many distinct shapes (variable sequence lengths) rebuilds plans (~0.1 ms each).
_PLANS_MAX = 4096
_fwd_plans: dict = {}
_bwd_plans: dict = {}


def clear_plans() -> None:
    _fwd_plans.clear()
    _bwd_plans.clear()


class _Launch:
    __slots__ = ("func", "grid", "block", "smem", "template", "by_thread")

    def __init__(self, func, grid, block: int, smem: int, args: list):
        self.func, self.grid, self.block, self.smem = func, grid, block, smem
        self.template, self.by_thread = args, {}

    @property
    def args(self):
        """This thread's PackedArgs (made on its first launch, which also binds torch's primary
        context to the thread: a plan built on one thread is launched from autograd's device
        thread, where no driver call may have made a context current yet)."""
        a = self.by_thread.get(get_ident())
        if a is None:
            if L.has_gpu():
                L.bind_thread_context(torch.cuda.current_device())
            a = self.by_thread[get_ident()] = L.PackedArgs(self.template)
        return a


def _fwd_launch(cfg: KernelConfig, vector: bool, idx, B, N, D, strides, eps) -> _Launch:
    from suite.cuda.launch import f32, i64

    rows = B * N
    run = cfg.fwd_launch(vector, rows)
    func = _fn(cfg, run.fwd(vector), idx)  # every such kernel is in cfg's own program
    pair = run.fwd_pair(vector)
    persistent = vector and run.fwd_prefetch and not pair  # one wave of CTAs
    cap = _grid_cap(func, run.fwd_threads, idx) if persistent else 2**31 - 1
    # One CTA per block of rows (not a grid-stride wave): at small N the hardware refills SMs as
    # CTAs finish. adaln_fwd_r2: a row group is a pair of rows of one sample (odd N: a sample's
    # last pair is one row), so B * ceil(N / 2) pairs.
    units = B * -(-N // 2) if pair else rows
    grid = (min(-(-units // run.fwd_rows), cap), 1, 1)
    sx0, sx1, smb, smn = strides
    p = (0, ctypes.c_void_p)
    args = [p, i64(sx0), i64(sx1), p, p, i64(smb), i64(smn), p, p, p, i64(rows), i64(N), f32(eps)]
    return _Launch(func, grid, run.fwd_threads, 0, args)


def _fwd_plan(key, x, scale, shift, eps, mode, out_dtype):
    B, N, D = x.shape
    if not same_strides(scale, shift):
        raise ValueError(
            "scale and shift must have the same strides (e.g. both chunks of one tensor)"
        )
    check_d(D)
    check_rows(D, x=x, scale=scale, shift=shift)
    idx = x.device.index
    cfg = _config(x.dtype, scale.dtype, out_dtype, D, mode)
    smb, smn = mod_strides(scale, mode)
    strides = (x.stride(0), x.stride(1), smb, smn)
    ok = _layout_ok(x.element_size(), D, x.stride(0), x.stride(1)) and _layout_ok(
        scale.element_size(), D, smb, smn
    )
    scalar = _fwd_launch(cfg, False, idx, B, N, D, strides, eps)
    vec = _fwd_launch(cfg, True, idx, B, N, D, strides, eps) if ok else None
    # y like x: x contiguous and of y's dtype, so torch.empty_like(x) is y's layout and costs the
    # host ~0.8 us less than torch.empty's shape / dtype / device parsing
    like_x = x.is_contiguous() and x.dtype == out_dtype
    plan = ((B, N, D), (B, N), idx, vec, scalar, like_x)
    if len(_fwd_plans) >= _PLANS_MAX:
        _fwd_plans.clear()
    _fwd_plans[key] = plan
    return plan


def forward_plan(x, scale, shift, eps: float, mode: int, out_dtype):
    """The cached launch plan of the forward for these inputs' layout (built on first use)."""
    key = (x.shape, x.stride(), scale.stride(), shift.stride(), x.dtype, scale.dtype, out_dtype,
           mode, x.device, eps)  # fmt: skip
    return _fwd_plans.get(key) or _fwd_plan(key, x, scale, shift, eps, mode, out_dtype)


def launch_forward(plan, x, scale, shift, y, mean_ptr: int, rstd_ptr: int) -> None:
    """Launch `plan` (from forward_plan, for these inputs' layout) writing y and the fp32 mean /
    rstd at the given device addresses (both 0: no statistics written)."""
    xp, sp, hp, yp = x.data_ptr(), scale.data_ptr(), shift.data_ptr(), y.data_ptr()
    run = plan[3] if plan[3] is not None and not (xp | sp | hp | yp) & 15 else plan[4]
    args = run.args
    a = args.slots
    a[0], a[3], a[4], a[7], a[8], a[9] = xp, sp, hp, yp, mean_ptr, rstd_ptr
    L.launch_packed(run.func, run.grid, run.block, 0, L.current_stream_handle(plan[2]), args)


def _y(x, scale, shift, eps: float, mode: int, out_dtype, mean_ptr: int, rstd_ptr: int, plan=None):
    """Allocate y and launch the forward into it, writing the fp32 mean / rstd at the given
    device addresses (both 0: no statistics written); an empty x launches nothing. `plan`:
    forward_plan's for these inputs where the caller has it cached. y is allocated like x where
    that is its layout (the plan says; torch.empty parses shape, dtype and device every call)."""
    if plan is None:
        B, N, D = x.shape
        if not B * N:
            return torch.empty((B, N, D), dtype=out_dtype, device=x.device)
        plan = forward_plan(x, scale, shift, eps, mode, out_dtype)
    y = torch.empty_like(x) if plan[5] else torch.empty(plan[0], dtype=out_dtype, device=x.device)
    launch_forward(plan, x, scale, shift, y, mean_ptr, rstd_ptr)
    return y


def forward(x, scale, shift, eps: float, mode: int, out_dtype):
    """x [B, N, D] (last dim contiguous), scale/shift as `mode` says (last dim contiguous).
    Returns y [B, N, D] contiguous in out_dtype, mean and rstd [B, N] fp32."""
    B, N, _ = x.shape
    mean = torch.empty((B, N), dtype=torch.float32, device=x.device)
    rstd = torch.empty((B, N), dtype=torch.float32, device=x.device)
    y = _y(x, scale, shift, eps, mode, out_dtype, mean.data_ptr(), rstd.data_ptr())
    return y, mean, rstd


def forward_y(x, scale, shift, eps: float, mode: int, out_dtype, plan=None):
    """forward without the statistics (null pointers: the kernel writes none), for calls no
    backward follows; one allocation fewer on the host path. `plan`: forward_plan's for these
    inputs, when the caller has it cached (saves the second signature lookup). Returns y."""
    return _y(x, scale, shift, eps, mode, out_dtype, 0, 0, plan)


def forward_stats(x, scale, shift, eps: float, mode: int, out_dtype):
    """forward with mean and rstd in one fp32 [2, B, N] buffer (one allocation, no views): the
    eager path's. Returns y and that buffer."""
    B, N, _ = x.shape
    stats = torch.empty((2, B, N), dtype=torch.float32, device=x.device)
    p = stats.data_ptr()
    return _y(x, scale, shift, eps, mode, out_dtype, p, p + 4 * B * N), stats


class _BwdPlan:
    __slots__ = ("idx", "shape", "part", "vec", "scalar", "fin", "dtile", "pdl", "groups", "mode",
                 "zero_rows", "tok", "dsc_shape", "dsc_dtype", "dy_dtype")  # fmt: skip


def _bwd_launches(cfg, vector, accum, idx, B, N, D, groups, R, strides, mode, ld, zero_rows):
    from suite.cuda.launch import i32, i64, use_dynamic_smem

    func = _fn(cfg, cfg.bwd(vector, accum), idx)
    smem = cfg.bwd_dyn_bytes(accum)  # 0 unless the shared arrays are dynamic (bwd_dyn)
    if smem:
        use_dynamic_smem(func, smem, cfg.bwd_carveout(accum))
    cap = _grid_cap(func, cfg.bwd_threads, idx, smem)
    # Persistent grid: about one wave of CTAs (occupancy API), split evenly over the groups, and
    # at least 8 row blocks per CTA so the partial rows stay small next to x and dy.
    chunks = max(1, min(-(-cap // groups), -(-R // (cfg.bwd_rows * 8))))
    slots = chunks * cfg.bwd_rows
    sx0, sx1, smb, smn = strides
    p = (0, ctypes.c_void_p)
    row = _Launch(
        func, (chunks, groups, 1), cfg.bwd_threads, smem,
        [p, i64(sx0), i64(sx1), p, p, i64(smb), i64(smn), p, p, p, p, p, p, p, i64(R), i64(N)],
    )  # fmt: skip
    part_numel = groups * slots * cfg.bwd_part_width if accum else 0
    fin = None
    if mode != MODE_TOKEN and accum:
        fin = _Launch(
            _fn(cfg, cfg.finalize(cfg.bwd_rt, cfg.vec), idx), (-(-cfg.bwd_part_width // 32), groups, 1),
            1024, 0, [p, p, p, p, i64(ld), p, i32(zero_rows), i32(slots)],
        )  # fmt: skip
    return row, part_numel, fin


def _bwd_key(x, dy_dtype, scale, mode: int, impl: str, rk):
    return (x.shape, x.stride(), scale.stride(), x.dtype, scale.dtype, dy_dtype, mode, impl,
            x.device, rk)  # fmt: skip


def backward_plan(x, dy_dtype, scale, mode: int, impl: str, rk=None) -> _BwdPlan:
    """The backward's launch plan for these operands, built (or found) now: the forward of an
    op that needs a gradient calls it, so its backward (on autograd's device thread, maybe
    inside a CUDA-graph capture) makes no driver call but the launches and no key lookup.
    rk: (shape, si, hi) of the gradient table `rows` names (contiguous fp32), or None."""
    key = _bwd_key(x, dy_dtype, scale, mode, impl, rk)
    return _bwd_plans.get(key) or _bwd_plan(key, x, dy_dtype, scale, mode, impl, rk)


def _bwd_plan(key, x, dy_dtype, scale, mode, impl, rk):
    from suite.cuda.launch import i32, i64

    B, N, D = x.shape
    check_d(D)
    check_rows(D, x=x, scale=scale)
    idx = x.device.index
    groups, R = (1, B * N) if mode == MODE_AFFINE else (B, N)
    cfg = _config(x.dtype, scale.dtype, dy_dtype, D, mode)
    smb, smn = mod_strides(scale, mode)
    strides = (x.stride(0), x.stride(1), smb, smn)
    zero_rows, ld = 0, D
    if rk is not None:
        shape, si, hi = rk
        if mode != MODE_SAMPLE:
            raise ValueError(f"rows: a gradient table needs per-sample modulation, got mode {mode}")
        zero_rows = sum(1 << r for r in range(shape[1]) if r not in (si, hi))
        ld = shape[1] * shape[2]  # contiguous [B, K, D]
    accum = impl == "fused" and mode != MODE_TOKEN
    es = x.element_size()
    ok = (
        _layout_ok(es, D, x.stride(0), x.stride(1))
        and _layout_ok(scale.element_size(), D, smb, smn)
        and (rk is None or (ld * 4) % 16 == 0)
    )
    pl = _BwdPlan()
    pl.idx, pl.shape, pl.groups, pl.mode, pl.zero_rows = idx, (B, N, D), groups, mode, zero_rows
    pl.tok = mode == MODE_TOKEN
    pl.dsc_shape = (B, N, D) if pl.tok else (groups, D)
    pl.dsc_dtype = scale.dtype if pl.tok else torch.float32
    pl.dy_dtype = dy_dtype
    pl.scalar = _bwd_launches(
        cfg, False, accum, idx, B, N, D, groups, R, strides, mode, ld, zero_rows
    )
    pl.vec = (
        _bwd_launches(cfg, True, accum, idx, B, N, D, groups, R, strides, mode, ld, zero_rows)
        if ok else None
    )  # fmt: skip
    pl.part = None
    # the fused row kernel lets its finalize launch early (kernels/adaln_bwd.cu)
    pl.pdl = impl == "fused" and _sm90(idx)
    pl.dtile = None
    if impl == "dtile" and not pl.tok:  # the paper's column-owned reduction: a second pass
        n_tiles = -(-R // DTILE_NTILE)
        p = (0, ctypes.c_void_p)
        dt = _Launch(
            _fn(cfg, cfg.dtile(), idx), (-(-D // DTILE_TD), n_tiles, groups), DTILE_TD * DTILE_TR,
            0, [p, i64(x.stride(0)), i64(x.stride(1)), p, p, p, p, p, i64(R), i64(N), i32(D),
                i32(DTILE_NTILE)],
        )  # fmt: skip
        fin = _Launch(
            _fn(cfg, cfg.finalize(1, 1), idx), (-(-D // 32), groups, 1), 1024, 0,
            [p, p, p, p, i64(ld), p, i32(zero_rows), i32(n_tiles)],
        )  # fmt: skip
        pl.dtile = (dt, fin, groups * n_tiles * D)
    if len(_bwd_plans) >= _PLANS_MAX:
        _bwd_plans.clear()
    _bwd_plans[key] = pl
    return pl


def backward(dy, x, scale, mean, rstd, mode: int, impl: str, rows=None, plan=None):
    """Returns dx [B, N, D] in x.dtype, and fp32 dscale, dshift: [B, D] (sample), [D] (affine) or
    [B, N, D] in scale.dtype (token). `rows` = (table, si, hi): per-sample gradients written as
    rows si, hi of `table`, an uninitialised contiguous fp32 [B, K, D] (the gradient of Wan's
    [B, 6, D] modulation); its other rows are zeroed by the same kernels; dscale, dshift are then
    None. mean and rstd: tensors, or device addresses (ints). plan: backward_plan's for these
    operands (its table rows the same as `rows`'), or None to look it up."""
    B, N, D = x.shape
    dev = x.device
    if B * N == 0:  # nothing to launch (and no plan: its grid divides by B)
        dx = torch.empty((B, N, D), dtype=x.dtype, device=dev)
        if rows is not None:
            rows[0].zero_()
            return dx, None, None
        shape = (B, N, D) if mode == MODE_TOKEN else (1 if mode == MODE_AFFINE else B, D)
        dtype = scale.dtype if mode == MODE_TOKEN else torch.float32
        return (
            dx,
            torch.zeros(shape, dtype=dtype, device=dev),
            torch.zeros(shape, dtype=dtype, device=dev),
        )
    pl = plan if plan is not None and plan.dy_dtype is dy.dtype else None
    if pl is None:
        rk = None
        if rows is not None:
            table = rows[0]
            if not (table.is_contiguous() and table.dtype == torch.float32):
                raise ValueError(
                    "rows: the gradient table must be a contiguous fp32 [B, K, D] tensor, got "
                    f"{table.dtype} with strides {table.stride()}"
                )
            rk = (table.shape, rows[1], rows[2])
        pl = backward_plan(x, dy.dtype, scale, mode, impl, rk)
    dx = torch.empty(pl.shape, dtype=x.dtype, device=dev)
    if rows is not None:
        table, si, hi = rows
        tp = table.data_ptr()
        row_bytes = 4 * D
        dsc = dsh = None
        dsc_p, dsh_p = tp + si * row_bytes, tp + hi * row_bytes
    else:
        tp = 0
        dsc = torch.empty(pl.dsc_shape, dtype=pl.dsc_dtype, device=dev)
        dsh = torch.empty(pl.dsc_shape, dtype=pl.dsc_dtype, device=dev)
        dsc_p, dsh_p = dsc.data_ptr(), dsh.data_ptr()
    mp = mean if isinstance(mean, int) else mean.data_ptr()
    rp = rstd if isinstance(rstd, int) else rstd.data_ptr()
    xp, gp, sp, dxp = x.data_ptr(), dy.data_ptr(), scale.data_ptr(), dx.data_ptr()
    aligned = not (xp | gp | sp | dxp | dsc_p | dsh_p) & 15
    row, part_numel, fin = pl.vec if pl.vec is not None and aligned else pl.scalar
    stream = L.current_stream_handle(pl.idx)
    ps = ph = 0
    if part_numel:
        part = torch.empty(2 * part_numel, dtype=torch.float32, device=dev)
        ps = part.data_ptr()
        ph = ps + 4 * part_numel
    tok = pl.tok
    args = row.args
    a = args.slots
    a[0], a[3], a[4], a[7], a[8], a[9] = xp, gp, sp, mp, rp, dxp
    a[10], a[11] = (dsc_p, dsh_p) if tok else (0, 0)
    a[12], a[13] = ps, ph
    L.launch_packed(row.func, row.grid, row.block, row.smem, stream, args)
    if tok:
        return dx, dsc, dsh
    if pl.dtile is not None:
        dt, fin, n = pl.dtile
        part = torch.empty(2 * n, dtype=torch.float32, device=dev)
        ps = part.data_ptr()
        ph = ps + 4 * n
        dargs = dt.args
        b = dargs.slots
        b[0], b[3], b[4], b[5], b[6], b[7] = xp, gp, mp, rp, ps, ph
        L.launch_packed(dt.func, dt.grid, dt.block, 0, stream, dargs)
    fargs = fin.args
    f = fargs.slots
    f[0], f[1], f[2], f[3], f[5] = ps, ph, dsc_p, dsh_p, tp
    if pl.pdl and pl.dtile is None:
        config = L.dependent_config(fin.grid, fin.block, 0, stream)
        L.launch_packed_dependent(fin.func, config, fargs)
    else:
        L.launch_packed(fin.func, fin.grid, fin.block, 0, stream, fargs)
    return dx, dsc, dsh


@functools.cache
def _sm90(index: int) -> bool:  # programmatic dependent launches need sm_90 or newer
    return torch.cuda.get_device_capability(index) >= (9, 0)
