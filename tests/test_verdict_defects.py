"""Issue 31's audit defects, each on the committed H200 quick reference's raw tables (or a small
hand-made one): C10 per-step peak, C17's paired interval, C3's two R^2, the step intervals of
C4-C6/C9, and the tuned equal-token budget."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from suite.experiments import costmodel, training
from suite.rundir import RunDir
from suite.stats import bootstrap_runs
from suite.train.peakmem import tuned_token_budget
from suite.train.runstats import STATS

# the quick reference at 5753865 (the 30-block sweep; 1-block emulated training runs)
REF = Path(__file__).resolve().parents[1] / "reports" / "reference" / "h200" / "quick-5753865"


@pytest.fixture(scope="module")
def tables():
    return RunDir(REF).tables()


@pytest.fixture(scope="module")
def metrics(tables):
    return training.summarize(tables).set_index("metric")


def test_c10_is_the_mean_of_per_step_peaks_not_of_rank_batches(tables, metrics):
    """Old: the mean over rank-batches (-26.0% on this run); the ledger says per-step peak."""
    r = tables["training_ranks"]
    step_peak = r.groupby(["run", "step"]).peak_mem_bytes.max().groupby("run").mean()
    want = 100 * (step_peak["default/dual/wan"] / step_peak["default/equal-token/wan"] - 1)
    row = metrics.loc["peak_vram_util_gain"]
    assert row.value == pytest.approx(want) and row.value == pytest.approx(3.048, abs=0.001)
    assert row.ci_low < row.value < row.ci_high
    old = metrics.loc["peak_vram_util_gain_rankbatch"].value
    assert old == pytest.approx(-25.968, abs=0.001)  # the old reading, kept as an alternative


def test_c10_tuned_equal_token_budget(metrics):
    assert tuned_token_budget(4.134e6, 1.2795, 75600) == 2 * 75600  # B = 2 at the longest S
    assert tuned_token_budget(1.0, 2.0, 75600) == 75600  # never below one sample
    row = metrics.loc["peak_vram_util_gain_tuned"]
    assert "M_tok 75600" in row.conditions and row.value == pytest.approx(103.1, abs=0.1)


def test_c17_interval_is_paired_over_the_same_steps(tables, metrics):
    """Old: each run's steps resampled on their own, an interval 12x as wide on this run."""
    row = metrics.loc["fused_throughput_gain"]
    assert "paired" in row.conditions
    assert row.ci_low == pytest.approx(3.811, abs=0.01) and row.ci_high == pytest.approx(
        6.756, abs=0.01
    )
    r = tables["training_ranks"]

    def steps(run):
        g = r[r.run == run].groupby("step")
        return {"tokens": g.tokens.sum().to_numpy(float), "step_s": g.step_s.first().to_numpy()}

    a, b = steps("default/dual/wan"), steps("default/dual/fused")
    _, ulo, uhi = bootstrap_runs(STATS["throughput_gain"], a, b, paired=False)
    assert (uhi - ulo) > 8 * (row.ci_high - row.ci_low)  # the old width over the paired width


def test_paired_bootstrap_cancels_the_common_step_variation():
    rng = np.random.default_rng(1)
    step_s = rng.uniform(0.5, 2.0, 50)  # steps of very different cost, trained by both runs
    a = {"tokens": np.full(50, 1e5), "step_s": step_s}
    b = {"tokens": np.full(50, 1e5), "step_s": step_s / 1.05 * rng.normal(1, 0.002, 50)}
    g, lo, hi = bootstrap_runs(STATS["throughput_gain"], a, b, paired=True)
    _, ulo, uhi = bootstrap_runs(STATS["throughput_gain"], a, b, paired=False)
    assert lo < g < hi and hi - lo < 0.5 and uhi - ulo > 10 * (hi - lo)
    with pytest.raises(ValueError, match="as many steps"):
        bootstrap_runs(STATS["throughput_gain"], a, {k: v[:3] for k, v in b.items()}, paired=True)


@pytest.mark.parametrize(
    "key", ["cv_reduction_emulated", "rank_cv_emulated", "step_cv_emulated", "floor_gain_emulated"]
)
def test_emulated_balance_metrics_carry_a_step_interval(metrics, key):
    """Old: no interval, so their verdicts read the point alone."""
    row = metrics.loc[key]
    assert np.isfinite(row.ci_low) and row.ci_low <= row.value <= row.ci_high, key


def test_c3_reports_r2_in_both_spaces_with_intervals(tables):
    """Old: only the absolute-space R^2, without an interval, while the fit minimises relative error."""
    m = costmodel.summarize(tables).set_index("metric")
    r2, rel = m.loc["cost_fit_r2"], m.loc["cost_fit_r2_rel"]
    assert r2.value == pytest.approx(0.9376, abs=1e-4) and rel.value == pytest.approx(
        0.9167, abs=1e-4
    )
    for row in (r2, rel):
        assert row.ci_low < row.value < row.ci_high
    assert "absolute space" in r2.conditions and "relative residuals" in rel.conditions


def test_r2_pair_weights():
    t = np.array([1.0, 2.0, 4.0, 8.0])
    assert costmodel.r2_pair(t, t) == (1.0, 1.0)
    abs_r2, rel_r2 = costmodel.r2_pair(t, t + 0.3)  # one offset: 30% of the shortest step
    assert rel_r2 < abs_r2  # relative space weighs the short steps as much as the long ones
    w = 1 / t**2
    want = 1 - np.sum(w * 0.3**2) / np.sum(w * (t - np.sum(w * t) / np.sum(w)) ** 2)
    assert rel_r2 == pytest.approx(want)
