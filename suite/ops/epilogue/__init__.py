"""The fused block epilogues (residual_norm, rms_norm): op.py (custom ops, autograd, argument
checks), cuda.py (launch configurations, NVRTC programs and launches) and reference.py (the eager
reference, the CPU path)."""

from suite.ops.epilogue.op import residual_norm, rms_norm

__all__ = ["residual_norm", "rms_norm"]
