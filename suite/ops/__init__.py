"""Fused AdaLN (LayerNorm-Modulate) op and its baselines."""

from suite.ops.adaln import AdaLN, FusedLayerNorm, adaln, layer_norm_affine
from suite.ops.baselines import compile_eager_adaln, compile_wan_adaln, eager_adaln, wan_adaln

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
