"""Statistics used by the claims: Pearson and Spearman R with seeded bootstrap 95% CIs, CV helpers,
and bootstrap_runs, the seeded step bootstrap of a statistic comparing two runs (paired or not).

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


def bootstrap_runs(
    stat,
    a: dict[str, np.ndarray],
    b: dict[str, np.ndarray],
    paired: bool,
    seed: int = 0,
    n_resamples: int = N_RESAMPLES,
) -> tuple[float, float, float]:
    """(stat(a, b), 95% percentile CI) of a statistic of two runs' per-step columns.

    `stat(A, B)` takes dicts of arrays shaped (..., steps) and reduces the last axis. paired=True
    resamples the same step indices from both runs (the units are paired: step k of each trains
    the same batches, so their common variation cancels); paired=False resamples each run's steps
    on their own (the runs trained different batches)."""
    na, nb = (len(next(iter(d.values()))) for d in (a, b))
    if paired and na != nb:
        raise ValueError(f"paired runs need as many steps, got {na} and {nb}")
    if min(na, nb) < 2:
        return float(stat(a, b)), math.nan, math.nan
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, na, (n_resamples, na))
    ib = ia if paired else rng.integers(0, nb, (n_resamples, nb))
    boot = stat({k: v[ia] for k, v in a.items()}, {k: v[ib] for k, v in b.items()})
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(stat(a, b)), float(lo), float(hi)
