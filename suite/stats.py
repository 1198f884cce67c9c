"""Statistics used by the claims: Pearson and Spearman R with seeded bootstrap 95% CIs, CV helpers,
bootstrap_runs, the seeded step bootstrap of a statistic comparing two runs (paired or not), and
bootstrap_ci / median_ratio_ci, seeded percentile bootstraps of independent samples (a max over
steps; a geometric mean of median-time ratios over shapes), and t_interval, the Student-t interval
of a mean over independent draws (seeds).

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


def percentile_ci(
    samples, stat, *, paired: bool, seed: int = 0, n_resamples: int = N_RESAMPLES
) -> tuple[float, float]:
    """The seeded 95% percentile-bootstrap interval of the vectorized `stat(*samples, axis=-1)`
    (scipy.stats.bootstrap); `paired` resamples the same indices of every sample."""
    res = stats.bootstrap(
        tuple(samples),
        stat,
        paired=paired,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=0.95,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    lo, hi = res.confidence_interval
    return float(lo), float(hi)


def _with_ci(stat, x, y, seed: int, n_resamples: int) -> tuple[float, float, float]:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-D of one length, got {x.shape} and {y.shape}")
    if len(x) < 3:
        raise ValueError(f"a correlation needs >= 3 pairs, got {len(x)}")
    r = float(stat(x, y))
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan, math.nan
    return (r, *percentile_ci((x, y), stat, paired=True, seed=seed, n_resamples=n_resamples))


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


def bootstrap_ci(
    samples, stat, seed: int = 0, n_resamples: int = N_RESAMPLES
) -> tuple[float, float, float]:
    """(stat(*samples), 95% percentile CI), each sample resampled on its own (unpaired).

    `stat(*arrays, axis=-1)` reduces the last axis (vectorized, as scipy.stats.bootstrap wants).
    A percentile interval of a max never exceeds the observed max: it says how much the value
    rests on a few units, not what a new draw of the units could give."""
    xs = [np.asarray(x, dtype=float) for x in samples]
    if any(x.ndim != 1 or len(x) < 2 for x in xs):
        raise ValueError(f"each sample must be 1-D with >= 2 values, got {[x.shape for x in xs]}")
    value = float(stat(*xs, axis=-1))
    return (value, *percentile_ci(xs, stat, paired=False, seed=seed, n_resamples=n_resamples))


def t_interval(draws) -> tuple[float, float, float]:
    """(mean, 95% Student-t CI) of independent draws of one statistic (n - 1 degrees of freedom).

    The model: each draw (a seed's run) is an independent, roughly normal sample of the statistic;
    unlike a bootstrap over one run's steps, the interval says what another draw could give."""
    x = np.asarray(draws, dtype=float)
    if x.ndim != 1 or len(x) < 2:
        raise ValueError(f"draws must be 1-D with >= 2 values, got shape {x.shape}")
    half = float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return float(x.mean()), float(x.mean()) - half, float(x.mean()) + half


def _geomean_median_ratio(*xs, axis=-1):
    """Geometric mean over pairs (xs[0], xs[1]), (xs[2], xs[3]), ... of median(num) / median(den)."""
    logs = [
        np.log(np.median(num, axis=axis)) - np.log(np.median(den, axis=axis))
        for num, den in zip(xs[::2], xs[1::2])
    ]
    return np.exp(np.mean(logs, axis=0))


def median_ratio_ci(
    pairs, seed: int = 0, n_resamples: int = N_RESAMPLES
) -> tuple[float, float, float]:
    """(geometric mean over pairs (num, den) of median(num) / median(den), 95% percentile CI).

    Each sample (the repetitions of one impl at one shape) is resampled on its own: the harness
    times one impl's repetitions as one block, so repetition i of two impls are not paired."""
    pairs = [tuple(p) for p in pairs]
    if not pairs or any(len(p) != 2 for p in pairs):
        raise ValueError(f"pairs must be a non-empty list of (num, den) samples, got {len(pairs)}")
    return bootstrap_ci([x for p in pairs for x in p], _geomean_median_ratio, seed, n_resamples)
