"""The fused AdaLN (LayerNorm-Modulate) op: op.py (custom op, autograd, modules), args.py (its
argument checks and the modulation's layout), cuda.py (NVRTC programs and launches),
kernel_config.py (the frozen launch table) and reference.py (the eager reference, the CPU path).
Named fused_adaln so that no module shares a name with the function `suite.ops.adaln`."""

from suite.ops.fused_adaln.op import AdaLN, FusedLayerNorm, adaln, layer_norm_affine

__all__ = ["AdaLN", "FusedLayerNorm", "adaln", "layer_norm_affine"]
