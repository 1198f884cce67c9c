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


def bucket_members(tokens) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct S values ascending, every sample's index grouped by bucket, group starts): bucket
    k's samples are members[starts[k]:starts[k + 1]] in ascending index order, what
    np.flatnonzero(bucket_index(tokens)[1] == k) gives, from one stable sort."""
    t = np.asarray(tokens, np.int64)
    members = np.argsort(t, kind="stable")
    st = t[members]
    first = np.flatnonzero(np.r_[True, st[1:] != st[:-1]]) if len(st) else np.zeros(0, np.int64)
    return st[first], members, np.r_[first, len(st)].astype(np.int64)
