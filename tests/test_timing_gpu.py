"""GPU tests of suite/timing.py's CUDA-event timer (CudaSpan) and the median over it."""

from __future__ import annotations

import pytest
import torch

from suite.timing import CudaSpan, cuda_event_median_ms

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_span_times_the_queued_work_not_the_launch():
    torch.cuda._sleep(1000)  # warm-up
    short, long = CudaSpan(), CudaSpan()
    with short:
        torch.cuda._sleep(10_000)
    with long:  # back to back, read after one synchronize
        torch.cuda._sleep(10_000_000)
    torch.cuda.synchronize()
    assert 0 < short.ms() < long.ms()


def test_median_of_samples():
    median, samples = cuda_event_median_ms(lambda: torch.cuda._sleep(100_000), repeat=7)
    assert len(samples) == 7 and median == sorted(samples)[3] and median > 0
