"""Statistics used by the claims: Pearson and Spearman R with seeded bootstrap 95% CIs, CV helpers.

CV definitions (the ledger's): `cv` is std/mean with the population std (ddof=0), the spread of a
fixed set such as the ranks of one step; `mean_row_cv` averages the per-row CV of a (steps, ranks)
array, i.e. the per-step rank-compute CV averaged over steps.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

N_RESAMPLES = 2000


def cv(x, axis=None) -> float | np.ndarray:
    """std / mean (population std)."""
    x = np.asarray(x, dtype=float)
    return x.std(axis=axis) / x.mean(axis=axis)


def mean_row_cv(a) -> float:
    """Mean over rows of each row's CV (rows = steps, columns = ranks)."""
    return float(np.mean(cv(np.asarray(a, dtype=float), axis=1)))


def _pearson(x, y, axis=-1):
    xm = x - x.mean(axis=axis, keepdims=True)
    ym = y - y.mean(axis=axis, keepdims=True)
    num = (xm * ym).sum(axis=axis)
    den = np.sqrt((xm**2).sum(axis=axis) * (ym**2).sum(axis=axis))
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def _spearman(x, y, axis=-1):
    return _pearson(stats.rankdata(x, axis=axis), stats.rankdata(y, axis=axis), axis=axis)


def _with_ci(stat, x, y, seed: int, n_resamples: int) -> tuple[float, float, float]:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-D of one length, got {x.shape} and {y.shape}")
    if len(x) < 3:
        raise ValueError(f"a correlation needs >= 3 pairs, got {len(x)}")
    r = float(stat(x, y))
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan, math.nan
    res = stats.bootstrap(
        (x, y),
        stat,
        paired=True,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=0.95,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    lo, hi = res.confidence_interval
    return r, float(lo), float(hi)


def pearson_ci(x, y, seed: int = 0, n_resamples: int = N_RESAMPLES) -> tuple[float, float, float]:
    """(Pearson R, 95% CI low, high) with a seeded paired percentile bootstrap."""
    return _with_ci(_pearson, x, y, seed, n_resamples)


def spearman_ci(x, y, seed: int = 0, n_resamples: int = N_RESAMPLES) -> tuple[float, float, float]:
    """(Spearman rho, 95% CI low, high) with a seeded paired percentile bootstrap."""
    return _with_ci(_spearman, x, y, seed, n_resamples)
