import numpy as np
import pytest
from scipy import stats as ss

from suite.stats import cv, mean_row_cv, pearson_ci, spearman_ci, t_interval


def test_pearson_and_spearman_match_scipy_with_ci_around_them():
    rng = np.random.default_rng(0)
    x = rng.normal(size=200)
    y = 0.5 * x + rng.normal(size=200)
    r, lo, hi = pearson_ci(x, y, seed=1)
    assert r == pytest.approx(ss.pearsonr(x, y)[0])
    assert lo < r < hi and hi - lo < 0.4
    rho, lo2, hi2 = spearman_ci(x, y, seed=1)
    assert rho == pytest.approx(ss.spearmanr(x, y)[0])
    assert lo2 < rho < hi2


def test_ci_is_seeded():
    x = np.arange(30.0)
    y = x + np.random.default_rng(0).normal(0, 5, 30)
    assert pearson_ci(x, y, seed=3) == pearson_ci(x, y, seed=3)


def test_cv_helpers():
    assert cv([1, 1, 1]) == 0
    assert cv([1.0, 3.0]) == pytest.approx(0.5)
    assert mean_row_cv([[1.0, 3.0], [2.0, 2.0]]) == pytest.approx(0.25)


def test_bad_inputs():
    with pytest.raises(ValueError, match="one length"):
        pearson_ci([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match=">= 3 pairs"):
        pearson_ci([1, 2], [1, 2])


def test_t_interval_is_scipys_interval_of_the_mean():
    x = [0.5, 1.0, 1.8, 0.9]
    want = ss.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=ss.sem(x))
    assert t_interval(x) == pytest.approx((np.mean(x), *want))
    with pytest.raises(ValueError, match="draws must be 1-D with >= 2 values"):
        t_interval([1.0])
