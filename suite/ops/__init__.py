"""Fused AdaLN (LayerNorm-Modulate) op and its baselines."""

from suite.ops.baselines import compile_eager_adaln, compile_wan_adaln, eager_adaln, wan_adaln
from suite.ops.fused_adaln import AdaLN, FusedLayerNorm, adaln, layer_norm_affine

__all__ = [
    "AdaLN",
    "FusedLayerNorm",
    "adaln",
    "layer_norm_affine",
    "eager_adaln",
    "wan_adaln",
    "compile_eager_adaln",
    "compile_wan_adaln",
]
