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


def pin_width(x: Tensor, *mods: Tensor) -> None:
    """The shape policy of the compiled baselines, as in a model trained on buckets: the sequence
    length (x's dim 1) dynamic, batch and width static. Without it Dynamo's automatic dynamic
    shapes make D (and B) symbolic at the first recompile for a new width, and the graph every
    later width gets is a dynamic-width kernel, several times slower at wide D."""
    for t in (x, *mods):  # per-token modulation [B, N, D] follows x's N
        if t.dim() == 3 and t.shape[1] == x.shape[1] > 1:
            torch._dynamo.maybe_mark_dynamic(t, 1)
        for d in (0, t.dim() - 1):
            torch._dynamo.mark_static(t, d)


@functools.cache
def compiled(name: str, backend: str = "inductor"):
    """torch.compile of a baseline ("eager" or "wan"), built once per process; call it through
    compile_eager_adaln / compile_wan_adaln, which apply the shape policy (pin_width)."""
    fn = {"eager": eager_adaln, "wan": wan_adaln}[name]
    return torch.compile(fn, fullgraph=True, backend=backend)


def compile_eager_adaln(x, scale, shift, eps: float = 1e-6):
    pin_width(x, scale, shift)
    return compiled("eager")(x, scale, shift, eps)


def compile_wan_adaln(x, scale, shift, eps: float = 1e-6):
    pin_width(x, scale, shift)
    return compiled("wan")(x, scale, shift, eps)
