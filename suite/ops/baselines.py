"""Baselines the fused op is measured against (same call signature as suite.ops.adaln):

- eager:      F.layer_norm + modulate, all in x's dtype (one kernel per op, intermediates in HBM)
- wan:        the official Wan 2.1 path: LayerNorm in fp32 on x.float(), cast back to x's dtype,
              then modulation in fp32 (fp32 output), as WanLayerNorm + the block's modulate
- compile_*:  torch.compile of each (Inductor fuses them into one or two Triton kernels)
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor


def _bcast(t: Tensor) -> Tensor:
    return t[:, None, :] if t.dim() == 2 else t  # [B, D] per sample -> [B, 1, D]


def eager_adaln(x: Tensor, scale: Tensor, shift: Tensor, eps: float = 1e-6) -> Tensor:
    y = F.layer_norm(x, (x.shape[-1],), eps=eps)
    return y * (1 + _bcast(scale).to(x.dtype)) + _bcast(shift).to(x.dtype)


def wan_adaln(x: Tensor, scale: Tensor, shift: Tensor, eps: float = 1e-6) -> Tensor:
    y = F.layer_norm(x.float(), (x.shape[-1],), eps=eps).type_as(x)  # WanLayerNorm
    return y.float() * (1 + _bcast(scale).float()) + _bcast(shift).float()


@functools.cache
def compiled(name: str):
    """torch.compile of a baseline, built once per process ("eager" or "wan")."""
    fn = {"eager": eager_adaln, "wan": wan_adaln}[name]
    return torch.compile(fn, fullgraph=True)


def compile_eager_adaln(x, scale, shift, eps: float = 1e-6):
    return compiled("eager")(x, scale, shift, eps)


def compile_wan_adaln(x, scale, shift, eps: float = 1e-6):
    return compiled("wan")(x, scale, shift, eps)
