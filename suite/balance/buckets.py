"""Buckets: samples grouped by sequence length S, and a policy's batch size per bucket, as a table."""

from __future__ import annotations

import numpy as np
import pandas as pd

BUCKET_COLUMNS = ["S", "count", "share", "B"]


def bucket_table(tokens, policy=None) -> pd.DataFrame:
    """One row per distinct sequence length: S, count, share of samples, and B under `policy`.

    `tokens` is the per-sample token count (e.g. a corpus's `tokens` column).
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.size == 0:
        raise ValueError("bucket_table needs at least one sample, got none")
    if (tokens < 1).any():
        raise ValueError(f"token counts must be >= 1, got min {tokens.min()}")
    S, count = np.unique(tokens, return_counts=True)
    df = pd.DataFrame({"S": S, "count": count, "share": count / count.sum()})
    df["B"] = policy.batch_size(S) if policy is not None else 1
    return df


def bucket_index(tokens) -> tuple[np.ndarray, np.ndarray]:
    """(distinct S values, bucket index of every sample)."""
    S, inv = np.unique(np.asarray(tokens, dtype=np.int64), return_inverse=True)
    return S, inv
