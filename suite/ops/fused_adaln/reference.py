"""Eager reference of the fused AdaLN op, with the kernels' exact semantics (fp32 arithmetic,
output rounded once). It is the CPU implementation of the op and the CUDA fallback; the tests
compare both against float64.
"""

from __future__ import annotations

import torch

from suite.ops.fused_adaln.kernel_config import MODE_AFFINE, MODE_SAMPLE, MODE_TOKEN  # noqa: F401


def _mod(t: torch.Tensor, mode: int) -> torch.Tensor:
    """Broadcastable fp32 view of scale/shift against x [B, N, D]."""
    t = t.float()
    return t[:, None, :] if mode == MODE_SAMPLE else t


def stats(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.float()
    mean = xf.mean(-1)
    var = (xf - mean[..., None]).square().mean(-1)  # two-pass, like the kernel
    return mean, torch.rsqrt(var + eps)


def forward(x, scale, shift, eps: float, mode: int, out_dtype: torch.dtype):
    mean, rstd = stats(x, eps)
    xhat = (x.float() - mean[..., None]) * rstd[..., None]
    m = _mod(scale, mode)
    if mode == MODE_AFFINE:
        y = xhat * m + _mod(shift, mode)
    else:
        y = xhat * (1.0 + m) + _mod(shift, mode)
    return y.to(out_dtype), mean, rstd


def backward(dy, x, scale, mean, rstd, mode: int):
    """dx in x.dtype; dscale/dshift in fp32 ([B, D], [B, N, D] or [D] by mode)."""
    D = x.shape[-1]
    g_out = dy.float()
    xhat = (x.float() - mean[..., None]) * rstd[..., None]
    m = _mod(scale, mode) if mode == MODE_AFFINE else 1.0 + _mod(scale, mode)
    g = g_out * m
    a1 = g.sum(-1, keepdim=True) / D
    a2 = (g * xhat).sum(-1, keepdim=True) / D
    dx = (rstd[..., None] * (g - a1 - xhat * a2)).to(x.dtype)
    if mode == MODE_TOKEN:
        return dx, g_out * xhat, g_out.clone()  # a custom op output may not alias dy
    if mode == MODE_SAMPLE:
        return dx, (g_out * xhat).sum(1), g_out.sum(1)
    return dx, (g_out * xhat).sum((0, 1)), g_out.sum((0, 1))
