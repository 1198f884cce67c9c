"""Shared set-up for the asv benchmarks. No CUDA at import time or in `params`: a benchmark that
needs a GPU calls `require_gpu()` in its `setup`, which raises NotImplementedError (asv's skip)."""

from __future__ import annotations

import functools


@functools.cache
def gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def require_gpu() -> None:
    if not gpu_available():
        raise NotImplementedError("needs a CUDA GPU")


@functools.cache
def default_buckets(n: int = 100_000):
    from suite.balance.buckets import bucket_table
    from suite.data.corpus import sample_corpus

    return bucket_table(sample_corpus(n).tokens)
