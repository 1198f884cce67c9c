"""Fused block epilogues as torch.library custom ops: the memory-bound work around Wan's
attention and FFN (diffusers' WanTransformerBlock).

    x, n2 = residual_norm(x, attn1_out, gate_msa, weight=w2, bias=b2)       # x + a * g, norm2
    x, n3 = residual_norm(x, attn2_out, scale=c_scale, shift=c_shift)      # x + a, norm3 + mod
    x, n1 = residual_norm(x, ffn_out, c_gate, scale=s_next, shift=h_next)  # into the next block
    q = rms_norm(q, attn.norm_q.weight)                                     # qk norm

residual_norm: x_new = (x.float() + y.float() * gate).to(x.dtype) (x + y without gate), then
normed = LN(x_new.float()) [* weight + bias] [* (1 + scale) + shift], cast to out_dtype (default
x's dtype). One kernel reads x, y, gate, scale, shift and writes x_new and normed; the backward
kernel takes (d_x_new, d_normed) and writes dx, dy and the operand gradients; per-sample and [D]
gradients are column sums finished by a second small kernel in a fixed order (deterministic).
rms_norm: torch.nn.RMSNorm's arithmetic (fp32 math, output in x's dtype), forward and backward.

Byte floors (E = B*N*D elements, s = bytes of an x element, o = of normed; fp32 operands):
  residual_norm fwd: read x, y (2 s E) [+ 4 E per-token gate, + 8 E per-token scale/shift],
                     write x_new, normed ((s + o) E), + 8 B*N of mean/rstd.
  residual_norm bwd: read x_new, d_x_new, d_normed ((2 s + o) E) [+ s E of y with a gate,
                     + 4 E per-token gate, + 4 E per-token scale], write dx, dy (2 s E)
                     [+ 4 E per-token dgate, + 8 E per-token dscale/dshift].
  rms_norm fwd: read x, write y (2 s E); bwd: read x, dy, write dx (3 s E).
(per-sample and [D] operands and their gradients are B*D or D elements: left out.) The benchmark
(lab/ops/epilogue_bench.py) reports GB/s over these floors and the fraction of a measured
device-to-device copy of the same bytes.

On CUDA the ops run the NVRTC kernels (suite/ops/epilogue/cuda.py); elsewhere the eager
reference (suite/ops/epilogue/reference.py). Eager calls go through an autograd.Function with
the same formula as the registered autograd (no custom-op dispatch on the host path); under
torch.compile the custom ops are traced as single nodes, without graph breaks.
"""

from __future__ import annotations

import torch
from torch import Tensor

from suite.ops.epilogue import reference as ref
from suite.ops.epilogue.cuda import (
    BIAS,
    GATE,
    GATE_TOK,
    MOD,
    MOD_TOK,
    RESID,
    RMS,
    WEIGHT,
    check_d,
)
from suite.ops.first_order import first_order

DTYPES = (torch.float32, torch.bfloat16)
OPERAND_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _flags(gate, scale, weight, bias, rms: bool = False) -> int:
    f = RMS if rms else RESID
    if gate is not None:
        f |= GATE | (GATE_TOK if gate.shape[1] != 1 else 0)
    if scale is not None:
        f |= MOD | (MOD_TOK if scale.shape[1] != 1 else 0)
    return f | (WEIGHT if weight is not None else 0) | (BIAS if bias is not None else 0)


def _per_sample(g: Tensor, like: Tensor | None) -> Tensor:
    """The kernels' [B, D] column sums back in their operand's [B, 1, D] shape."""
    return g.unsqueeze(1) if like is not None and like.shape[1] == 1 and g.dim() == 2 else g


# ----------------------------------------------------------------------------- implementations
def _rn_forward_impl(x, y, gate, scale, shift, weight, bias, eps: float, out_dtype):
    if x.is_cuda:
        from suite.ops.epilogue import cuda as epilogue_cuda

        flags = _flags(gate, scale, weight, bias)
        return epilogue_cuda.forward(x, y, gate, scale, shift, weight, bias, eps, out_dtype, flags)
    x_new, out, mean, rstd = ref.forward(x, y, gate, scale, shift, weight, bias, eps, out_dtype)
    return x_new, out, mean.contiguous(), rstd.contiguous()


def _rn_backward_impl(d_xnew, d_out, x_new, y, gate, scale, shift, weight, bias, mean, rstd):
    if x_new.is_cuda:
        from suite.ops.epilogue import cuda as epilogue_cuda

        flags = _flags(gate, scale, weight, bias)
        dx, dy, dg, ds, dh, dw, db = epilogue_cuda.backward(
            d_xnew.contiguous(), d_out.contiguous(), x_new, y, gate, scale, weight, bias,
            mean, rstd, flags,
        )  # fmt: skip
        dg, ds, dh = _per_sample(dg, gate), _per_sample(ds, scale), _per_sample(dh, shift)
    else:
        dx, dy, dg, ds, dh, dw, db = ref.backward(
            d_xnew, d_out, x_new, y, gate, scale, weight, bias, mean, rstd
        )
    e = x_new.new_empty(0, dtype=torch.float32)  # absent gradients: each its own empty tensor
    return tuple(t if t is not None else e.clone() for t in (dx, dy, dg, ds, dh, dw, db))


def _rms_forward_impl(x, weight, eps: float):
    if x.is_cuda:
        from suite.ops.epilogue import cuda as epilogue_cuda

        flags = _flags(None, None, weight, None, rms=True)
        _, y, _, rstd = epilogue_cuda.forward(
            x, None, None, None, None, weight, None, eps, x.dtype, flags
        )
        return y, rstd
    return ref.rms_forward(x, weight, eps)


def _rms_backward_impl(dy, x, weight, rstd):
    if x.is_cuda:
        from suite.ops.epilogue import cuda as epilogue_cuda

        flags = _flags(None, None, weight, None, rms=True)
        dx, _, _, _, _, dw, _ = epilogue_cuda.backward(
            None, dy.contiguous(), x, None, None, None, weight, None, rstd.new_empty(0), rstd,
            flags,
        )  # fmt: skip
        return dx, dw
    dx, _, _, _, _, dw, _ = ref.backward(
        None, dy, x, None, None, None, weight, None, None, rstd, rms=True
    )
    return dx, dw


# ----------------------------------------------------------------------------- custom ops
@torch.library.custom_op("epilogue::residual_norm", mutates_args=())
def residual_norm_op(
    x: Tensor,
    y: Tensor,
    gate: Tensor | None,
    scale: Tensor | None,
    shift: Tensor | None,
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    out_dtype: torch.dtype,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return _rn_forward_impl(x, y, gate, scale, shift, weight, bias, eps, out_dtype)


@residual_norm_op.register_fake
def _(x, y, gate, scale, shift, weight, bias, eps, out_dtype):
    B, N, D = x.shape
    stat = x.new_empty((B, N), dtype=torch.float32)
    return x.new_empty((B, N, D)), x.new_empty((B, N, D), dtype=out_dtype), stat, stat.clone()


@torch.library.custom_op("epilogue::residual_norm_backward", mutates_args=())
def residual_norm_backward_op(
    d_xnew: Tensor,
    d_out: Tensor,
    x_new: Tensor,
    y: Tensor | None,
    gate: Tensor | None,
    scale: Tensor | None,
    shift: Tensor | None,
    weight: Tensor | None,
    bias: Tensor | None,
    mean: Tensor,
    rstd: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    return _rn_backward_impl(d_xnew, d_out, x_new, y, gate, scale, shift, weight, bias, mean, rstd)


@residual_norm_backward_op.register_fake
def _(d_xnew, d_out, x_new, y, gate, scale, shift, weight, bias, mean, rstd):
    def like(t):
        if t is None:
            return x_new.new_empty(0, dtype=torch.float32)
        return x_new.new_empty(t.shape, dtype=torch.float32)

    full = x_new.new_empty(x_new.shape)
    return full, full.clone(), like(gate), like(scale), like(shift), like(weight), like(bias)


@torch.library.custom_op("epilogue::rms_norm", mutates_args=())
def rms_norm_op(x: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    return _rms_forward_impl(x, weight, eps)


@rms_norm_op.register_fake
def _(x, weight, eps):
    return x.new_empty(x.shape), x.new_empty(x.shape[:2], dtype=torch.float32)


@torch.library.custom_op("epilogue::rms_norm_backward", mutates_args=())
def rms_norm_backward_op(
    dy: Tensor, x: Tensor, weight: Tensor, rstd: Tensor
) -> tuple[Tensor, Tensor]:
    return _rms_backward_impl(dy, x, weight, rstd)


@rms_norm_backward_op.register_fake
def _(dy, x, weight, rstd):
    return x.new_empty(x.shape), weight.new_empty(weight.shape, dtype=torch.float32)


# ----------------------------------------------------------------------------- autograd
def _rn_setup(ctx, inputs, output):
    x, y, gate, scale, shift, weight, bias, eps, out_dtype = inputs
    x_new, _, mean, rstd = output
    # y only feeds dgate; x-hat is recomputed from x_new, never stored
    saved_y = y if gate is not None else None
    ctx.save_for_backward(x_new, saved_y, gate, scale, weight, bias, mean, rstd)
    ctx.shift_none = shift is None
    ctx.mark_non_differentiable(mean, rstd)


def _rn_grads(ctx, d_xnew, d_out, backward_fn):
    x_new, y, gate, scale, weight, bias, mean, rstd = ctx.saved_tensors
    if d_xnew is None:
        d_xnew = torch.zeros_like(x_new)
    if d_out is None:
        d_out = torch.zeros_like(x_new)
    shift = None if ctx.shift_none else scale
    g = backward_fn(d_xnew, d_out, x_new, y, gate, scale, shift, weight, bias, mean, rstd)
    dx, dy, dg, ds, dh, dw, db = g
    keep = (gate, scale, shift, weight, bias)
    dg, ds, dh, dw, db = (d if t is not None else None for d, t in zip((dg, ds, dh, dw, db), keep))
    return dx, dy, dg, ds, dh, dw, db, None, None


# a double backward is refused by name (suite.ops.first_order), naming the eager equivalents
_rn_first_order = first_order(
    "suite.ops.epilogue.residual_norm", "suite.ops.epilogue.reference.diffusers_residual_norm"
)
_rms_first_order = first_order(
    "suite.ops.epilogue.rms_norm", "suite.ops.epilogue.reference.torch_rms_norm"
)


@_rn_first_order
def _rn_autograd(ctx, d_xnew, d_out, _dmean, _drstd):
    return _rn_grads(ctx, d_xnew, d_out, residual_norm_backward_op)


residual_norm_op.register_autograd(_rn_autograd, setup_context=_rn_setup)


def _rms_setup(ctx, inputs, output):
    x, weight, _ = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.mark_non_differentiable(output[1])


def _rms_grads(ctx, dy, backward_fn):
    x, weight, rstd = ctx.saved_tensors
    if dy is None:
        dy = torch.zeros_like(x)
    dx, dw = backward_fn(dy, x, weight, rstd)
    return dx, dw, None


@_rms_first_order
def _rms_autograd(ctx, dy, _drstd):
    return _rms_grads(ctx, dy, rms_norm_backward_op)


rms_norm_op.register_autograd(_rms_autograd, setup_context=_rms_setup)


class _EagerResidualNorm(torch.autograd.Function):
    """residual_norm's op and autograd formula without the custom-op dispatch (host time)."""

    @staticmethod
    def forward(ctx, *inputs):
        out = _rn_forward_impl(*inputs)
        _rn_setup(ctx, inputs, out)
        return out

    @staticmethod
    @_rn_first_order
    def backward(ctx, d_xnew, d_out, _dmean, _drstd):
        return _rn_grads(ctx, d_xnew, d_out, _rn_backward_impl)


class _EagerRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        out = _rms_forward_impl(x, weight, eps)
        _rms_setup(ctx, (x, weight, eps), out)
        return out

    @staticmethod
    @_rms_first_order
    def backward(ctx, dy, _drstd):
        return _rms_grads(ctx, dy, _rms_backward_impl)


# ----------------------------------------------------------------------------- public API
def _check_device(name: str, t: Tensor, x: Tensor) -> None:
    if t.device != x.device:
        raise ValueError(f"{name} is on {t.device} but x is on {x.device}: put both on one device")


def _check_x(x: Tensor) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in DTYPES:
        raise TypeError(f"x must be float32 or bfloat16, got {x.dtype}")
    if x.is_cuda:
        check_d(x.shape[-1])


def _operand(name: str, t: Tensor | None, x: Tensor) -> Tensor | None:
    """gate/scale/shift: [B, D], [B or 1, 1, D] or [B or 1, N, D] -> fp32 [B, 1 or N, D] view
    (last dim contiguous; batch-1 operands broadcast with stride 0)."""
    if t is None:
        return None
    B, N, D = x.shape
    _check_device(name, t, x)
    if t.dtype not in OPERAND_DTYPES:
        raise TypeError(f"{name} must be float32, bfloat16 or float16, got {t.dtype}")
    if t.dim() == 2:
        t = t.unsqueeze(1)
    if t.dim() != 3 or t.shape[0] not in (1, B) or t.shape[1] not in (1, N) or t.shape[2] != D:
        raise ValueError(
            f"{name} must be [B, D], [B, 1, D] or [B, N, D] with B={B}, N={N}, D={D} (batch 1 "
            f"broadcasts), got {list(t.shape)}"
        )
    t = t.float()
    if t.stride(-1) != 1:
        t = t.contiguous()
    return t.expand(B, t.shape[1], D)


def _affine(name: str, t: Tensor | None, x: Tensor) -> Tensor | None:
    if t is None:
        return None
    _check_device(name, t, x)
    D = x.shape[-1]
    if t.dtype not in OPERAND_DTYPES:
        raise TypeError(f"{name} must be float32, bfloat16 or float16, got {t.dtype}")
    if tuple(t.shape) != (D,):
        raise ValueError(f"{name} must be [D] = [{D}], got {list(t.shape)}")
    return t.float().contiguous()


def _lastdim(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def residual_norm(
    x: Tensor,
    y: Tensor,
    gate: Tensor | None = None,
    *,
    scale: Tensor | None = None,
    shift: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-6,
    out_dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """(x_new, normed): x_new = (x.float() + y.float() * gate).to(x.dtype) (x + y without gate),
    normed = LN(x_new.float(), eps) [* weight + bias] [* (1 + scale) + shift] in out_dtype
    (default x's dtype). x, y [B, N, D] of one dtype (float32 or bfloat16); gate, scale, shift
    [B, 1, D] (strided views such as rows of Wan's [B, 6, D] are fine) or [B, N, D]; weight,
    bias [D]. scale and shift come together."""
    _check_x(x)
    if x.dim() != 3:
        raise ValueError(f"x must be [B, N, D], got shape {list(x.shape)}")
    if not isinstance(y, Tensor):
        raise TypeError(f"y must be a torch.Tensor, got {type(y).__name__}")
    _check_device("y", y, x)
    if y.shape != x.shape or y.dtype != x.dtype:
        raise ValueError(
            f"y must match x: x is {list(x.shape)} {x.dtype}, y is {list(y.shape)} {y.dtype}"
        )
    if (scale is None) != (shift is None):
        raise ValueError("scale and shift come together: pass both or neither")
    out_dtype = x.dtype if out_dtype is None else out_dtype
    if out_dtype not in DTYPES:
        raise TypeError(f"out_dtype must be float32 or bfloat16, got {out_dtype}")
    gate = _operand("gate", gate, x)
    scale, shift = _operand("scale", scale, x), _operand("shift", shift, x)
    if scale is not None and (scale.shape != shift.shape or scale.stride() != shift.stride()):
        if scale.shape != shift.shape:
            raise ValueError(
                f"scale and shift must have one shape, got {list(scale.shape)} and "
                f"{list(shift.shape)}"
            )
        scale, shift = scale.contiguous(), shift.contiguous()  # the kernel shares their strides
    weight, bias = _affine("weight", weight, x), _affine("bias", bias, x)
    args = (_lastdim(x), _lastdim(y), gate, scale, shift, weight, bias, float(eps), out_dtype)
    if torch.compiler.is_compiling():
        out = residual_norm_op(*args)
    else:
        out = _EagerResidualNorm.apply(*args)
    return out[0], out[1]


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """torch.nn.RMSNorm's y = x * rsqrt(mean(x^2) + eps) * weight over the last dim, fp32 math,
    in x's dtype (float32 or bfloat16); weight [D] (any float dtype, used in fp32)."""
    _check_x(x)
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"x must have a non-empty last dimension, got shape {list(x.shape)}")
    if not isinstance(weight, Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    w = _affine("weight", weight, x)
    D = x.shape[-1]
    x3 = x.reshape(1, -1, D).contiguous()  # the backward reads the saved rows D apart
    if torch.compiler.is_compiling():
        y = rms_norm_op(x3, w, float(eps))[0]
    else:
        y = _EagerRMSNorm.apply(x3, w, float(eps))[0]
    return y.view(x.shape)


__all__ = ["residual_norm", "rms_norm"]
