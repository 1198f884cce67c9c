"""Fused AdaLN as a torch.library custom op:  y = LayerNorm(x, eps) * (1 + scale) + shift.

    from suite.ops import adaln, AdaLN
    y = adaln(x, scale, shift)                       # x [B, N, D]; scale/shift [B, D], [B, 1, D]
                                                     # (strided views are fine) or [B, N, D]
    y = adaln(x, e[:, 1:2], e[:, 0:1])               # rows of Wan's [B, 6, D] e: the backward
                                                     # writes e's gradient whole (2 kernels)
    y = adaln(x, scale, shift, out_dtype=torch.float32)   # official Wan numerics: fp32 output
    y = adaln(x, scale, shift, backward="dtile")     # the paper's D-tile backward reduction
    y = layer_norm_affine(x, weight, bias)           # plain affine LayerNorm (Wan's norm3)

The op is `adaln::forward` / `adaln::backward` (custom_op + register_fake + register_autograd),
so torch.compile traces it without a graph break; eager calls skip the custom-op dispatch through
an autograd.Function with the same formula. Autograd saves only x, the modulation and fp32
mean/rstd per row. On CUDA it runs the NVRTC kernels (suite/ops/fused_adaln/cuda.py); anywhere
else it runs suite/ops/fused_adaln/reference.py, the same arithmetic in eager torch.

Eager CUDA calls take a thin host path: the checks run once per call signature (shapes,
strides, dtypes, devices, arguments; _specs), launches reuse a cached plan with a packed
argument buffer (fused_cuda), a call without grad skips autograd, and Wan's table rows reach
the kernel without views. Every tensor must be on x's device: a ValueError before any launch.
The argument checks and the modulation's layout (rows of one table) are suite/ops/fused_adaln/args.py.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from suite.cuda.build import same_strides
from suite.ops.first_order import first_order
from suite.ops.fused_adaln import reference as ref
from suite.ops.fused_adaln.args import (
    DTYPES,
    _check,
    _mod_view,
    _rows_of_one_table,
    _same_device,
    _table_rows,
)
from suite.ops.fused_adaln.reference import MODE_AFFINE, MODE_SAMPLE, MODE_TOKEN

# a double backward is refused by name (suite.ops.first_order); eager_adaln: the same formula
_first_order = first_order(
    "the fused AdaLN op (suite.ops.adaln, AdaLN, layer_norm_affine)",
    "suite.ops.eager_adaln (torch.nn.functional.layer_norm for the affine form)",
)


def _use_cuda(x: Tensor) -> bool:
    return isinstance(x, Tensor) and x.is_cuda


_fused_cuda = []  # [suite.ops.fused_adaln.cuda] after the first CUDA call (it loads the driver bindings)


def _cuda():
    """suite.ops.fused_adaln.cuda, imported on first use (a per-call import statement costs ~1 us)."""
    if not _fused_cuda:
        from suite.ops.fused_adaln import cuda as fused_cuda

        _fused_cuda.append(fused_cuda)
    return _fused_cuda[0]


def _lastdim_contig(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def _forward_impl(x, scale, shift, eps: float, mode: int, out_dtype):
    if _use_cuda(x):
        x, scale, shift = (_lastdim_contig(t) for t in (x, scale, shift))
        return _cuda().forward(x, scale, shift, eps, mode, out_dtype)
    y, mean, rstd = ref.forward(x, scale, shift, eps, mode, out_dtype)
    return y.contiguous(), mean.contiguous(), rstd.contiguous()


def _backward_impl(dy, x, scale, mean, rstd, mode: int, impl: str):
    if _use_cuda(x):
        x, scale = _lastdim_contig(x), _lastdim_contig(scale)
        dx, dsc, dsh = _cuda().backward(dy.contiguous(), x, scale, mean, rstd, mode, impl)
    else:
        dx, dsc, dsh = ref.backward(dy, x, scale, mean, rstd, mode)
    shape = scale.shape
    return dx, dsc.to(scale.dtype).reshape(shape), dsh.to(scale.dtype).reshape(shape)


@torch.library.custom_op("adaln::forward", mutates_args=())
def adaln_forward(
    x: Tensor,
    scale: Tensor,
    shift: Tensor,
    eps: float,
    mode: int,
    out_dtype: torch.dtype,
    bwd_impl: str,
) -> tuple[Tensor, Tensor, Tensor]:
    return _forward_impl(x, scale, shift, eps, mode, out_dtype)


@adaln_forward.register_fake
def _(x, scale, shift, eps, mode, out_dtype, bwd_impl):
    _same_device(x, scale=scale, shift=shift)
    B, N, D = x.shape
    stat = x.new_empty((B, N), dtype=torch.float32)
    return x.new_empty((B, N, D), dtype=out_dtype), stat, torch.empty_like(stat)


@torch.library.custom_op("adaln::backward", mutates_args=())
def adaln_backward(
    dy: Tensor, x: Tensor, scale: Tensor, mean: Tensor, rstd: Tensor, mode: int, impl: str
) -> tuple[Tensor, Tensor, Tensor]:
    return _backward_impl(dy, x, scale, mean, rstd, mode, impl)


@adaln_backward.register_fake
def _(dy, x, scale, mean, rstd, mode, impl):
    return (
        torch.empty_like(x, memory_format=torch.contiguous_format),
        scale.new_empty(scale.shape),
        scale.new_empty(scale.shape),
    )


def _setup_context(ctx, inputs, output):
    x, scale, shift, eps, mode, out_dtype, bwd_impl = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, scale, mean, rstd)  # x-hat is recomputed, never stored
    ctx.mode, ctx.impl = mode, bwd_impl
    # mean/rstd are for backward only: without this, autograd would launch two fill kernels per
    # call to materialize their (unused) zero gradients.
    ctx.mark_non_differentiable(mean, rstd)
    ctx.set_materialize_grads(False)


def _grads(ctx, dy, backward_fn):
    if dy is None:  # y did not reach the loss
        return None, None, None, None, None, None, None
    x, scale, mean, rstd = ctx.saved_tensors
    dx, dsc, dsh = backward_fn(dy, x, scale, mean, rstd, ctx.mode, ctx.impl)
    return dx, dsc, dsh, None, None, None, None


@_first_order
def _autograd(ctx, dy, _dmean, _drstd):
    return _grads(ctx, dy, adaln_backward)


adaln_forward.register_autograd(_autograd, setup_context=_setup_context)


class _EagerAdaLN(torch.autograd.Function):
    """The same op and autograd formula without the custom-op dispatch layers (their Python
    layers cost more host time than the kernel takes at small N: docs/perf-notes.md, "The op's
    host path"). Eager calls with grad take this path (or _EagerAdaLNRows); under torch.compile
    the public functions call adaln_forward, which the compiler traces as one node."""

    @staticmethod
    def forward(ctx, x, scale, shift, eps, mode, out_dtype, bwd_impl):
        out = _forward_impl(x, scale, shift, eps, mode, out_dtype)
        _setup_context(ctx, (x, scale, shift, eps, mode, out_dtype, bwd_impl), out)
        return out

    @staticmethod
    @_first_order
    def backward(ctx, dy, _dmean, _drstd):
        return _grads(ctx, dy, _backward_impl)


def _c_apply(cls, tensors: int):
    """cls.apply without Function.apply's Python layer (default-argument binding, functorch's
    transform check and dead-wrapper unwrapping over every argument: ~10 us a call at 8
    arguments on the CPU stub). The C apply under it is the same call when no functorch
    transform is active and none of the first `tensors` arguments (the tensors) is a functorch
    wrapper; otherwise this defers to cls.apply."""
    c_apply = super(torch.autograd.Function, cls).apply
    active = torch._C._are_functorch_transforms_active
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor

    def apply(*args):
        if active() or any(wrapped(t) for t in args[:tensors]):
            return cls.apply(*args)
        return c_apply(*args)

    return apply


def _op(*args):
    if torch.compiler.is_compiling():
        return adaln_forward(*args)
    return _eager_apply(*args)


class _EagerAdaLNRows(torch.autograd.Function):
    """The eager op with scale and shift given as rows `si`, `hi` of one [B, K, D] tensor (Wan's
    chunked modulation): backward writes that tensor's gradient whole (zeros in the other rows),
    so autograd runs no slice backward (two fills, two copies and an add per call). `mods`: the
    (scale, shift) views themselves, in a tuple so autograd does not track them: their gradient
    reaches `table` through this function alone. Returns y only; the fp32 mean and rstd stay on
    ctx (one [2, B, N] buffer on CUDA)."""

    @staticmethod
    def forward(ctx, x, table, si, hi, mods, eps, out_dtype, bwd_impl):
        scale, shift = mods
        if _use_cuda(x):
            fc = _cuda()
            y, ctx.stats = fc.forward_stats(x, scale, shift, eps, MODE_SAMPLE, out_dtype)
            rk = (table.shape, si, hi)  # the backward's plan, built here (backward_plan)
            ctx.plan = (
                fc.backward_plan(x, out_dtype, scale, MODE_SAMPLE, bwd_impl, rk)
                if x.shape[0] * x.shape[1]
                else None
            )
        else:
            y, mean, rstd = ref.forward(x, scale, shift, eps, MODE_SAMPLE, out_dtype)
            ctx.stats = (mean, rstd)
        ctx.save_for_backward(x, table)
        ctx.scale, ctx.rows, ctx.impl = scale, (si, hi), bwd_impl
        ctx.set_materialize_grads(False)
        return y

    @staticmethod
    @_first_order
    def backward(ctx, dy):
        if dy is None:
            return (None,) * 8
        x, table = ctx.saved_tensors
        si, hi = ctx.rows
        if _use_cuda(x):
            dtable = torch.empty(table.shape, dtype=torch.float32, device=table.device)
            p, B, N = ctx.stats.data_ptr(), x.shape[0], x.shape[1]
            rows = (dtable, si, hi)  # the finalize writes rows si, hi and zeroes the others
            dx = _cuda().backward(
                dy.contiguous(), x, ctx.scale, p, p + 4 * B * N, MODE_SAMPLE, ctx.impl, rows,
                ctx.plan,
            )[0]  # fmt: skip
        else:
            mean, rstd = ctx.stats
            dtable = torch.zeros(table.shape, dtype=torch.float32)
            dx, dtable[:, si], dtable[:, hi] = ref.backward(
                dy, x, ctx.scale.reshape(x.shape[0], -1), mean, rstd, MODE_SAMPLE
            )
        if table.dtype != torch.float32:
            dtable = dtable.to(table.dtype)
        return dx, dtable, None, None, None, None, None, None


_eager_apply = _c_apply(_EagerAdaLN, 3)  # x, scale, shift
_rows_apply = _c_apply(_EagerAdaLNRows, 2)  # x, table (scale and shift are views of table)


# ----------------------------------------------------------------------------- public API
def _adaln_general(x, scale, shift, eps, out_dtype, backward) -> Tensor:
    """Every check, then the op: the path of torch.compile's trace, of CPU tensors and of the
    layouts the fast path leaves out (broadcast modulation, mismatched strides)."""
    out_dtype = _check(x, out_dtype, backward, eps)
    _same_device(x, scale=scale, shift=shift)
    if x.is_cuda:
        x = _lastdim_contig(x)  # the kernels read a row as D consecutive elements (every path)
    B, N, D = x.shape
    sc, m1 = _mod_view(scale, "scale", B, N, D)
    sh, m2 = _mod_view(shift, "shift", B, N, D)
    if m1 != m2 or sc.dtype != sh.dtype:
        raise ValueError(
            f"scale and shift must have the same shape and dtype, got "
            f"{list(scale.shape)} {scale.dtype} and {list(shift.shape)} {shift.dtype}"
        )
    if m1 == MODE_SAMPLE and (rows := _rows_of_one_table(sc, sh, B, D)) is not None:
        return _rows_apply(x, *rows, (sc, sh), float(eps), out_dtype, backward)
    if x.is_cuda and not same_strides(sc, sh):
        sc, sh = sc.contiguous(), sh.contiguous()
    return _op(x, sc, sh, float(eps), m1, out_dtype, backward)[0]


# Eager calls on CUDA: what one (shapes, strides, dtypes, devices, arguments) needs, decided
# once by _adaln_general's checks; a call then only looks it up. (out_dtype, mode, direct, plan):
# direct means scale and shift reach the kernel as given (no broadcast, last dim contiguous, one
# stride set), so no views are made; plan is the no-grad forward's launch plan, filled by the
# first such call (one signature lookup a call, not two). Bounded like the launch plans.
_specs: dict = {}


def _spec(key, x, scale, shift, eps, out_dtype, backward):
    out_dtype = _check(x, out_dtype, backward, eps)
    _same_device(x, scale=scale, shift=shift)
    B, N, D = x.shape
    sc, mode = _mod_view(scale, "scale", B, N, D)
    _, mode2 = _mod_view(shift, "shift", B, N, D)
    direct = (
        mode == mode2
        and scale.dtype == shift.dtype
        and scale.shape == shift.shape
        and same_strides(scale, shift)
        and scale.shape[0] == B
        and (scale.stride(-1) == 1 or D == 1)
        and (x.stride(-1) == 1 or D == 1)
    )
    spec = (out_dtype, mode, direct, None)
    if len(_specs) >= 4096:
        _specs.clear()
    _specs[key] = spec
    return spec


def adaln(
    x: Tensor,
    scale: Tensor,
    shift: Tensor,
    eps: float = 1e-6,
    out_dtype: torch.dtype | None = None,
    backward: str = "fused",
) -> Tensor:
    """y = LayerNorm(x, eps) * (1 + scale) + shift, fused. Returns [B, N, D] in out_dtype
    (default x's dtype; pass torch.float32 for the official Wan 2.1 numerics).

    Every tensor must be on x's device (ValueError otherwise, before any launch)."""
    if not _use_cuda(x) or torch.compiler.is_compiling():
        return _adaln_general(x, scale, shift, eps, out_dtype, backward)
    try:
        key = (x.shape, x.stride(), x.dtype, x.device, scale.shape, scale.stride(), scale.dtype,
               scale.device, shift.shape, shift.stride(), shift.dtype, shift.device, out_dtype,
               backward, eps)  # fmt: skip
    except AttributeError:  # not tensors: the general path says which argument
        return _adaln_general(x, scale, shift, eps, out_dtype, backward)
    spec = _specs.get(key) or _spec(key, x, scale, shift, eps, out_dtype, backward)
    out, mode, direct, plan = spec
    if direct:
        if not (
            torch.is_grad_enabled()
            and (x.requires_grad or scale.requires_grad or shift.requires_grad)
        ):
            if plan is None and x.shape[0] * x.shape[1]:  # an empty x launches nothing
                plan = _cuda().forward_plan(x, scale, shift, eps, mode, out)
                _specs[key] = (out, mode, direct, plan)
            return _cuda().forward_y(x, scale, shift, eps, mode, out, plan)
        if mode == MODE_SAMPLE:
            rows = _table_rows(scale, shift, x.shape[0], x.shape[2])
            if rows is not None:
                return _rows_apply(x, *rows, (scale, shift), eps, out, backward)
    return _adaln_general(x, scale, shift, eps, out_dtype, backward)


def layer_norm_affine(
    x: Tensor,
    weight: Tensor,
    bias: Tensor,
    eps: float = 1e-6,
    out_dtype: torch.dtype | None = None,
    backward: str = "fused",
) -> Tensor:
    """Affine LayerNorm y = LN(x) * weight + bias with the same fused kernels (weight, bias [D])."""
    out_dtype = _check(x, out_dtype, backward, eps)
    _same_device(x, weight=weight, bias=bias)
    D = x.shape[-1]
    if weight.shape != (D,) or bias.shape != (D,) or weight.dtype != bias.dtype:
        raise ValueError(
            f"weight and bias must both be [{D}] of one dtype, got "
            f"{list(weight.shape)} {weight.dtype} and {list(bias.shape)} {bias.dtype}"
        )
    if weight.dtype not in DTYPES:
        raise TypeError(f"weight must be float32, bfloat16 or float16, got {weight.dtype}")
    return _op(
        x, weight.contiguous(), bias.contiguous(), float(eps), MODE_AFFINE, out_dtype, backward
    )[0]


class AdaLN(nn.Module):
    """Modulated LayerNorm without affine parameters (Wan's norm1/norm2 plus modulation)."""

    def __init__(
        self,
        dim: int,
        eps: float = 1e-6,
        out_dtype: torch.dtype | None = None,
        backward: str = "fused",
    ):
        super().__init__()
        self.dim, self.eps, self.out_dtype, self.backward = dim, eps, out_dtype, backward

    def forward(self, x: Tensor, scale: Tensor, shift: Tensor) -> Tensor:
        return adaln(x, scale, shift, self.eps, self.out_dtype, self.backward)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, out_dtype={self.out_dtype}, backward={self.backward}"


class FusedLayerNorm(nn.Module):
    """Affine LayerNorm (Wan's norm3 before cross-attention) on the fused kernels."""

    def __init__(self, dim: int, eps: float = 1e-6, backward: str = "fused"):
        super().__init__()
        self.eps, self.backward = eps, backward
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm_affine(x, self.weight, self.bias, self.eps, None, self.backward)


__all__ = [
    "AdaLN",
    "FusedLayerNorm",
    "adaln",
    "layer_norm_affine",
    "MODE_SAMPLE",
    "MODE_TOKEN",
    "MODE_AFFINE",
]
