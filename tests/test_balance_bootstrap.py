"""The balance experiment's hierarchical bootstrap (suite.experiments.balance.bootstrap) and the
fine s_cross tuner."""

import math

import numpy as np
import pandas as pd
import pytest

from suite.balance.costmodel import QuadraticCost
from suite.balance.simulator import tune_s_cross
from suite.experiments.balance import bootstrap as bb
from suite.experiments.balance import summary as bs

P_TRUE = 1.6
FIT_ROW = {"m_mem": 2e5, "s_cross": 4000.0, "budget_source": "default", "capacity_bytes": np.nan}


def synthetic_sweep(rng, shapes=10, repeats=2) -> pd.DataFrame:
    """t = a + b*B*S^P_TRUE with a shape-level error (what a re-measured sweep moves: 8%) and a
    repeat-level one (1%), on shapes of B*S = 16384."""
    S = np.geomspace(256, 16384, shapes).round()
    B = np.maximum(1, (16384 // S)).astype(int)
    rows = []
    for b, s in zip(B, S):
        shape_err = rng.normal(0, 0.08)
        for r in range(repeats):
            t = (0.01 + 2e-8 * b * s**P_TRUE) * (1 + shape_err + rng.normal(0, 0.01))
            rows.append({"B": b, "S": s, "repeat": r, "step_s": t})
    return pd.DataFrame(rows)


def test_resample_draws_shapes_then_their_repeats():
    sw = synthetic_sweep(np.random.default_rng(0))
    out = bb.resample_sweep(sw, np.random.default_rng(1))
    assert len(out) == len(sw) and out["copy"].nunique() == sw.groupby(["B", "S"]).ngroups
    for _, g in out.groupby("copy"):  # a copy holds the repeats of one shape only
        assert g[["B", "S"]].drop_duplicates().shape[0] == 1
        assert set(g["step_s"]) <= set(
            sw.loc[(sw.B == g.B.iloc[0]) & (sw.S == g.S.iloc[0]), "step_s"]
        )


def test_the_refitted_p_interval_covers_the_true_p_at_about_the_nominal_rate():
    """Over repeated synthetic sweeps (each with its own shape-level errors), the 95% percentile
    interval of the refitted p holds the true p about 95% of the time (here >= 13 of 16)."""
    held = 0
    for k in range(16):
        rng = np.random.default_rng(100 + k)
        sw = synthetic_sweep(rng)
        ps = [bb.draw_fit(sw, FIT_ROW, rng)[0].p for _ in range(25)]
        lo, hi = np.quantile(ps, [0.025, 0.975])
        held += lo <= P_TRUE <= hi
    assert held >= 13


def test_refit_keeps_the_budget_without_a_memory_fit_and_measures_the_repeats():
    sw = synthetic_sweep(np.random.default_rng(3))
    cost, opt, noise = bb.draw_fit(sw, FIT_ROW, np.random.default_rng(4))
    assert cost.m_mem == FIT_ROW["m_mem"] and opt == 0.0 and cost.quadratic
    assert 0 < noise < 0.1 and abs(cost.p - P_TRUE) < 0.3


def test_the_fine_tuner_finds_the_top_of_the_sawtooth():
    """The gain against s_cross is a sawtooth (each bucket's floor(M_comp / S^p) steps); the
    60-point geometric grid finds the best batch table that a 400-point grid finds, and simulates
    each distinct table once (equal tables: equal throughput)."""
    buckets = pd.DataFrame({"S": [1000, 2500, 6000, 14000], "share": [0.4, 0.3, 0.2, 0.1]})
    quad = QuadraticCost(a=0.05, c=0.002, b=1e-7, d=2e-11)
    kw = dict(p=1.5, steps=150, ranks=8)
    best, fine = tune_s_cross(buckets, quad, 6e4, candidates=60, spacing="geometric", **kw)
    _, dense = tune_s_cross(buckets, quad, 6e4, candidates=400, spacing="geometric", **kw)
    assert len(fine) == 60 and fine["throughput"].max() == pytest.approx(dense["throughput"].max())
    assert fine["throughput"].nunique() < 60  # teeth: runs of equal tables
    assert fine.loc[fine["s_cross"] == best, "throughput"].iloc[0] == fine["throughput"].max()
    with pytest.raises(ValueError, match="spacing"):
        tune_s_cross(buckets, quad, 6e4, spacing="linear", p=1.5)


def test_percentile_intervals_per_metric():
    """Harrell-Davis quantiles: on an even spread they sit where the plain percentiles do (within
    half a step); on replicates with a heavy tail they vary less from one replicate set to the
    next than the plain order statistic (what flipped C6 between two runs of one sweep)."""
    boot = pd.DataFrame(
        {"claim": "C8", "metric": "throughput_gain_16_sim", "value": np.arange(101.0)}
    )
    ci = bs.intervals(boot).iloc[0]
    assert ci.ci_low == pytest.approx(2.5, abs=0.5) and ci.ci_high == pytest.approx(97.5, abs=0.5)
    assert ci.n == 101 and not ci.relative
    with pytest.raises(ValueError, match="level"):
        bs.intervals(boot, level=95)
    # replicates as the s_cross sawtooth makes them: a bulk and 5% on other teeth. Over many
    # replicate sets of one sweep, the Harrell-Davis end moves less than the order statistic.
    rng = np.random.default_rng(1)
    ends = []
    for _ in range(100):
        v = rng.normal(3.0, 0.3, 60)
        far = rng.random(60) < 0.05
        v[far] += rng.uniform(1.0, 3.0, far.sum())
        hd = bs.intervals(boot.iloc[:60].assign(value=v)).ci_high.iloc[0]
        ends.append((hd, np.quantile(v, 0.975)))
    hd_sd, plain_sd = np.std(ends, axis=0)
    assert hd_sd < 0.9 * plain_sd


def test_interval_ends_carry_their_monte_carlo_error():
    """se_low / se_high: what the replicate count alone moves each end by. It shrinks about as
    1 / sqrt(replicates), matches the spread of the end over independent replicate sets, and
    the summary's conditions state it, so an end closer than that to a verdict boundary reads as
    decided by the replicates drawn."""
    rng = np.random.default_rng(3)

    def frame(v):
        return pd.DataFrame({"claim": "C8", "metric": "throughput_gain_16_sim", "value": v})

    small, large = (bs.intervals(frame(rng.normal(30.0, 4.0, n))).iloc[0] for n in (100, 1600))
    assert 0 < large.se_low < small.se_low / 2.5 and 0 < large.se_high < small.se_high / 2.5
    ends = [bs.intervals(frame(rng.normal(30.0, 4.0, 200))).ci_low.iloc[0] for _ in range(200)]
    se = bs.intervals(frame(rng.normal(30.0, 4.0, 200))).se_low.iloc[0]
    assert se == pytest.approx(np.std(ends), rel=0.5)
    row = {"claim": "C8", "metric": "throughput_gain_16_sim", "value": 30.0, "ci_low": 29.0,
           "ci_high": 31.0, "conditions": "simulated" + bs.T_WORDS}  # fmt: skip
    boot = frame(rng.normal(30.0, 4.0, 200)).assign(p=1.4)
    out = bs.with_bootstrap(bs.metric_rows([row]), boot).iloc[0]
    assert "Monte Carlo SE of its ends" in out.conditions
    c = bs.intervals(boot).iloc[0]  # the metric row carries them, for the verdict rule
    assert (out.ci_low_mcse, out.ci_high_mcse) == (c.se_low, c.se_high)
    assert math.isnan(bs.metric_rows([row]).iloc[0].ci_low_mcse)  # no bootstrap, no error


def test_a_level_with_its_baseline_gets_the_interval_of_the_ratio():
    """Each replicate re-simulates both policies: where the baseline moves with the level (the
    same refitted p), the interval is the ratio's, scaled by the full data's baseline, so a
    reduction 1 - value / baseline reads the replicates' own reductions."""
    base = np.linspace(6.0, 10.0, 41)
    boot = pd.DataFrame(
        {"claim": "C6", "metric": "step_cv_sim", "value": 0.4 * base, "baseline": base,
         "p": 1.4}
    )  # fmt: skip
    ci = bs.intervals(boot).iloc[0]
    assert ci.relative and (ci.ci_low, ci.ci_high) == pytest.approx((0.4, 0.4))
    row = {"claim": "C6", "metric": "step_cv_sim", "value": 3.1, "baseline": 7.8,
           "ci_low": 3.0, "ci_high": 3.2, "conditions": "simulated" + bs.T_WORDS}  # fmt: skip
    out = bs.with_bootstrap(bs.metric_rows([row]), boot).iloc[0]
    assert (out.ci_low, out.ci_high) == pytest.approx((0.4 * 7.8, 0.4 * 7.8))
    assert "equal-token level" in out.conditions
    plain = bs.intervals(boot.drop(columns="baseline")).iloc[0]
    assert not plain.relative and plain.ci_high - plain.ci_low > 1.0


def test_the_summary_takes_intervals_from_the_bootstrap_table():
    """Metrics the bootstrap has get its percentile interval (the value stays the full-data
    one, the t-interval's words go); the others keep theirs."""
    rows = pd.DataFrame(
        [
            {"claim": "C8", "metric": "throughput_gain_16_sim", "value": 30.0, "ci_low": 29.9,
             "ci_high": 30.1, "conditions": "simulated; mean of 3 plan draws" + bs.T_WORDS},
            {"claim": "C5", "metric": "rank_cv_global_sim", "value": 2.0, "ci_low": 1.9,
             "ci_high": 2.1, "conditions": "global" + bs.T_WORDS},
        ]
    )  # fmt: skip
    boot = pd.DataFrame(
        {"claim": "C8", "metric": "throughput_gain_16_sim", "value": np.linspace(20, 40, 41),
         "p": np.linspace(1.3, 1.5, 41)}
    )  # fmt: skip
    out = bs.with_bootstrap(bs.metric_rows(rows.to_dict("records")), boot).set_index("metric")
    c8 = out.loc["throughput_gain_16_sim"]
    assert c8.value == 30.0 and (c8.ci_low, c8.ci_high) == pytest.approx((20.5, 39.5), abs=0.25)
    assert "41 hierarchical bootstrap replicates" in c8.conditions
    assert bs.T_WORDS not in c8.conditions and "mean of 3 plan draws" in c8.conditions
    assert out.loc["rank_cv_global_sim", "ci_low"] == 1.9


def test_a_replicate_gives_every_claim_metric_of_the_own_policies():
    from suite.experiments.balance.runs import _mixes

    sw = synthetic_sweep(np.random.default_rng(5), shapes=8).assign(S=lambda d: d.S * 4)
    row = FIT_ROW | {"m_mem": 3e5}
    got = bb.replicate(sw, row, _mixes(0), steps=60, seed=0, r=0)
    assert {"imbalance_rate_reduction_sim", "rank_cv_sim", "step_cv_sim", "throughput_gain_8_sim",
            "throughput_gain_16_sim", "floor_gain_sim"} <= set(got["metric"])  # fmt: skip
    assert np.isfinite(got["value"]).all() and (got["replicate"] == 0).all()
    assert got["s_cross"].nunique() == 1 and got["p"].iloc[0] > 1


def _marked_sweep(rng) -> pd.DataFrame:
    """A synthetic sweep with peak memory m0 + m1*B*S + a per-sample term (so a fit on fewer
    shapes differs) and three launch-bound shapes (fit False, step times at a host floor) that
    the cost fits leave out and the memory fit keeps."""
    sw = synthetic_sweep(rng, shapes=10).assign(fit=True)
    small = pd.DataFrame(
        [{"B": b, "S": 64.0, "repeat": r, "step_s": 0.5, "fit": False} for b in (1, 2, 4)
         for r in range(2)]
    )  # fmt: skip
    sw = pd.concat([sw, small], ignore_index=True)
    return sw.assign(peak_mem_bytes=3e9 + 4e4 * sw.B * sw.S + 2e8 * sw.B)


def test_resample_keeps_the_launch_bound_shapes_in_their_own_stratum():
    sw = _marked_sweep(np.random.default_rng(7))
    for seed in range(20):
        out = bb.resample_sweep(sw, np.random.default_rng(seed))
        per_copy = out.groupby("copy")["fit"].first()
        assert per_copy.sum() == 10 and (~per_copy).sum() == 3
        assert (out.loc[~out.fit, "S"] == 64).all()


def test_the_identity_replicate_refits_the_full_data_fit():
    """Centring: without resampling, a replicate's refit is the full-data fit (p and the step
    model from the fitted shapes, M_mem from the memory fit over every row, launch-bound shapes
    included), so the bootstrap's spread is around the value it qualifies."""
    from suite.balance.costmodel import fit_cost, fit_memory, fit_quadratic_cost, memory_budget

    sw = _marked_sweep(np.random.default_rng(8))
    row = dict(FIT_ROW, budget_source="memory fit", capacity_bytes=80e9, safety=0.1)
    cost, _ = bb.refit(bb.identity_sweep(sw), row)
    fitted = sw[sw.fit]
    law = fit_cost(fitted.B, fitted.S, fitted.step_s, loo=False)
    m0, m1, _ = fit_memory(sw.B, sw.S, sw.peak_mem_bytes)
    quad = fit_quadratic_cost(fitted.B, fitted.S, fitted.step_s)
    assert cost.p == pytest.approx(law.p, rel=1e-6)
    assert cost.m_mem == pytest.approx(memory_budget(m0, m1, 80e9, 0.1), rel=1e-9)
    fitted_only = fit_memory(fitted.B, fitted.S, fitted.peak_mem_bytes)
    assert cost.m_mem != pytest.approx(memory_budget(*fitted_only[:2], 80e9, 0.1), rel=1e-3)
    got, want = cost.step_model(), quad
    assert got.predict(2, 4096) == pytest.approx(want.predict(2, 4096), rel=1e-6)
