"""Timers that tell the truth about asynchronous CUDA work.

pytest-benchmark's default timer reads the host clock right after the launch returns, which
measures the launch, not the kernel (7.7 us against 17 us for one kernel on the H200). Pass
`--benchmark-timer suite.timing.cuda_synced_perf_counter`: it must be a module-level function.
"""

from __future__ import annotations

import time


def _sync() -> None:
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def cuda_synced_perf_counter() -> float:
    """time.perf_counter() after waiting for all queued CUDA work (no-op without CUDA)."""
    _sync()
    return time.perf_counter()


def cuda_event_median_ms(fn, *, warmup: int = 5, repeat: int = 50) -> tuple[float, list[float]]:
    """Median and raw samples (ms) of `fn()` timed with CUDA events after warm-up."""
    import torch

    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    ordered = sorted(samples)
    return ordered[len(ordered) // 2], samples
