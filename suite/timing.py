"""Timers that tell the truth about asynchronous CUDA work.

pytest-benchmark's default timer reads the host clock right after the launch returns, which
measures the launch, not the kernel (7.7 us against 17 us for one kernel on the H200). Pass
`--benchmark-timer suite.timing.cuda_synced_perf_counter`: it must be a module-level function.
CudaSpan is the one CUDA-event timer of the measurements (the kernel benchmark, the host-path
and epilogue benchmarks); training steps are timed by suite/train/instrument.py.
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


class CudaSpan:
    """Device time of the work queued inside `with CudaSpan() as span:` (two CUDA timing events
    around it); span.ms() once the work has completed (after a synchronize, or it waits for the
    end event). Spans may be opened back to back and read after one synchronize."""

    def __init__(self):
        import torch

        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def __enter__(self) -> CudaSpan:
        self.start.record()
        return self

    def __exit__(self, *exc) -> None:
        self.end.record()

    def ms(self) -> float:
        return self.start.elapsed_time(self.end)


def cuda_event_median_ms(fn, *, warmup: int = 5, repeat: int = 50) -> tuple[float, list[float]]:
    """Median and raw samples (ms) of `fn()` timed with CUDA events after warm-up, one at a
    time (each sample waits for its end event)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        with CudaSpan() as span:
            fn()
        span.end.synchronize()
        samples.append(span.ms())
    ordered = sorted(samples)
    return ordered[len(ordered) // 2], samples
