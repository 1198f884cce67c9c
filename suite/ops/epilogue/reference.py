"""Eager reference of the fused epilogues with the kernels' semantics (fp32 arithmetic, each
output rounded once): the CPU implementation of suite/ops/epilogue/op.py and what the GPU tests
compare against beside float64. Also the diffusers chains the benchmark times them against.

Operands: x, y [B, N, D]; gate, scale, shift fp32 [B, 1 or N, D] (or None); weight, bias fp32
[D] (or None). mean/rstd are [B, N] fp32 (mean empty for RMSNorm).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def residual(x: Tensor, y: Tensor, gate: Tensor | None) -> Tensor:
    """(x.float() + y.float() * gate).to(x.dtype); without gate, x + y (fp32 math)."""
    yf = y.float() if gate is None else y.float() * gate
    return (x.float() + yf).to(x.dtype)


def norm_forward(xs, scale, shift, weight, bias, eps: float, out_dtype, rms: bool = False):
    """normed = LN(xs) [* weight + bias] [* (1 + scale) + shift] (RMSNorm: xs * rstd * weight)
    in fp32, cast to out_dtype. Returns normed, mean (empty for RMSNorm) and rstd."""
    xf = xs.float()
    if rms:
        mean = xf.new_empty(0)
        rstd = torch.rsqrt(xf.square().mean(-1) + eps)
        a = xf * rstd[..., None]
    else:
        mean = xf.mean(-1)
        rstd = torch.rsqrt((xf - mean[..., None]).square().mean(-1) + eps)  # two-pass
        a = (xf - mean[..., None]) * rstd[..., None]
    if weight is not None:
        a = a * weight.float()
    if bias is not None:
        a = a + bias.float()
    if scale is not None:
        a = a * (1.0 + scale.float()) + shift.float()
    return a.to(out_dtype), mean, rstd


def forward(x, y, gate, scale, shift, weight, bias, eps: float, out_dtype):
    """residual_norm: (x_new, normed, mean, rstd)."""
    x_new = residual(x, y, gate)
    return (x_new, *norm_forward(x_new, scale, shift, weight, bias, eps, out_dtype))


def _sum_to(g: Tensor, like: Tensor) -> Tensor:
    """g [B, N, D] reduced over the dimensions `like` broadcasts ([B, 1, D] or [D])."""
    if like.dim() == 1:
        return g.sum((0, 1))
    return g.sum(1, keepdim=True) if like.shape[1] == 1 else g.clone()


def backward(d_xnew, d_out, xs, y, gate, scale, weight, bias, mean, rstd, rms: bool = False):
    """The kernels' formula (epilogue_bwd.cu): dx, dy (None for RMSNorm), then dgate, dscale,
    dshift, dweight, dbias (fp32, shaped like their operands; None where absent)."""
    D = xs.shape[-1]
    xf = xs.float()
    h = xf * rstd[..., None] if rms else (xf - mean[..., None]) * rstd[..., None]
    a = h if weight is None else h * weight.float()
    if bias is not None:
        a = a + bias.float()
    go = d_out.float()
    dscale = dshift = dweight = dbias = dgate = None
    ga = go
    if scale is not None:
        dscale, dshift = _sum_to(go * a, scale), _sum_to(go, scale)
        ga = go * (1.0 + scale.float())
    if bias is not None:
        dbias = _sum_to(ga, bias)
    if weight is not None:
        dweight = _sum_to(ga * h, weight)
        ga = ga * weight.float()
    m2 = (ga * h).sum(-1, keepdim=True) / D
    m1 = 0.0 if rms else ga.sum(-1, keepdim=True) / D
    dt = rstd[..., None] * (ga - m1 - h * m2)
    if rms:  # no residual
        return dt.to(xs.dtype), None, None, dscale, dshift, dweight, dbias
    dt = dt + d_xnew.float()
    dy = dt
    if gate is not None:  # y is needed (and saved) only here
        dgate = _sum_to(dt * y.float(), gate)
        dy = dt * gate
    dx = dt.to(xs.dtype, copy=True)  # never dy itself: custom-op outputs may not alias
    return dx, dy.to(xs.dtype), dgate, dscale, dshift, dweight, dbias


def rms_forward(x: Tensor, weight: Tensor, eps: float):
    """rms_norm: (y in x.dtype, rstd fp32), torch.nn.RMSNorm's arithmetic (fp32 math)."""
    y, _, rstd = norm_forward(x, None, None, weight, None, eps, x.dtype, rms=True)
    return y, rstd


# ----------------------------------------------------------------------------- diffusers chains
def diffusers_residual_norm(x, y, gate, scale, shift, weight, bias, eps: float = 1e-6):
    """WanTransformerBlock's ops as diffusers writes them (the benchmark's eager baseline): the
    gated residual in fp32, then FP32LayerNorm (+ modulation), cast back to x's dtype."""
    x_new = (x.float() + y * gate).type_as(x) if gate is not None else x + y
    D = x.shape[-1]
    w = weight.float() if weight is not None else None
    b = bias.float() if bias is not None else None
    n = F.layer_norm(x_new.float(), (D,), w, b, eps)
    if scale is not None:
        n = n * (1 + scale) + shift
    return x_new, n.type_as(x)


def torch_rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """torch.nn.RMSNorm's functional form (diffusers' attn.norm_q / norm_k)."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)
