"""The reference trainer (torchrun), per-rank instrumentation, one-GPU virtual-rank emulation and
the step function used by shape sweeps."""
