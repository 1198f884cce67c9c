"""C15's loss-curve metrics (suite.experiments.training.losscurves) on hand-made curves."""

import numpy as np
import pandas as pd
import pytest

from suite.experiments.training.losscurves import loss_rows


def _run(name, loss, tokens):
    n = len(loss)
    return pd.DataFrame(
        {"run": name, "step": range(n), "loss": loss, "tokens": tokens, "layers": 1}
    )


def _table(**runs):
    return pd.concat([_run(k.replace("_", "/", 1), *v) for k, v in runs.items()])


def test_max_gap_for_numerics_final_gap_for_policies():
    base = np.full(20, 2.0)
    t = _table(
        **{
            "equal-token_wan": (base, [100] * 20),
            "equal-token_fused": (base * np.r_[np.ones(19), 1.1], [100] * 20),  # one spike
            "dual_wan": (np.linspace(2.0, 1.5, 20), [60] * 20),
            "global_wan": (np.linspace(2.0, 1.9, 20), [140] * 20),
        }
    )
    rows = {r["metric"]: r for r in loss_rows(t, 1536, 1)}
    assert set(rows) == {
        "loss_max_rel_diff",
        "loss_final_rel_diff_policy",
        "loss_final_rel_diff_global",
    }
    # the spike at the last step, averaged over 10 steps: 0.2 / 10 / 2.0 = 1%
    assert rows["loss_max_rel_diff"]["value"] == pytest.approx(1.0)
    dual_ma = np.linspace(2.0, 1.5, 20)[-10:].mean()
    assert rows["loss_final_rel_diff_policy"]["value"] == pytest.approx(100 * (2 - dual_ma) / 2)
    assert "mean tokens per step 140 vs 100" in rows["loss_final_rel_diff_global"]["conditions"]
    assert "tokens per step" not in rows["loss_max_rel_diff"]["conditions"]
    assert all(r["claim"] == "C15" for r in rows.values())


def test_identical_batches_are_flagged_and_a_missing_base_gives_nothing():
    same = _table(**{"equal-token_wan": ([2.0] * 5, [100] * 5), "dual_wan": ([2.0] * 5, [100] * 5)})
    (row,) = loss_rows(same, 1536, 1)
    assert row["conditions"].startswith("DEGENERATE")
    assert loss_rows(_table(dual_wan=([2.0] * 5, [100] * 5)), 1536, 1) == []
    assert loss_rows(None, 1536, 1) == [] and loss_rows(pd.DataFrame(), 1536, 1) == []


def _seeded(gaps_by_seed, n=20):
    """Per seed: a flat Wan run at 2.0, a fused run `gap`% above it at every step, and a dual run
    ending `gap`% below it (its own batches); seed 1's dual run trains the Wan run's batches."""
    parts = []
    for seed, gap in gaps_by_seed.items():
        dual_tokens = [100] * n if seed == 1 else [60] * n
        t = _table(
            **{
                "equal-token_wan": (np.full(n, 2.0), [100] * n),
                "equal-token_fused": (np.full(n, 2.0 * (1 + gap / 100)), [100] * n),
                "dual_wan": (np.full(n, 2.0 * (1 - gap / 100)), dual_tokens),
            }
        )
        parts.append(t.assign(seed=seed))
    return pd.concat(parts, ignore_index=True)


def test_several_seeds_give_the_mean_and_a_t_interval_over_seeds():
    gaps = {0: 0.5, 1: 1.0, 2: 1.8}
    rows = {r["metric"]: r for r in loss_rows(_seeded(gaps), 1536, 1)}
    # independently: mean 1.1, sd = sqrt(((-0.6)^2 + (-0.1)^2 + 0.7^2) / 2) = sqrt(0.43),
    # t(0.975, 2 df) = 4.302652729911275
    half = 4.302652729911275 * np.sqrt(0.43) / np.sqrt(3)
    for metric in ("loss_max_rel_diff", "loss_final_rel_diff_policy"):
        r = rows[metric]
        assert [r["value"], r["ci_low"], r["ci_high"]] == pytest.approx(
            [1.1, 1.1 - half, 1.1 + half]
        )
        assert "mean over 3 seeds (per seed: 0.5, 1, 1.8)" in r["conditions"]
        assert "Student-t over the seeds, taken as independent draws" in r["conditions"]
        assert "bootstrap" not in r["conditions"]
    # identical batches are flagged for the seed that had them, not for the others
    assert rows["loss_final_rel_diff_policy"]["conditions"].startswith(
        "DEGENERATE: both policies gave identical batches (seed 1)"
    )
    assert "DEGENERATE" not in rows["loss_max_rel_diff"]["conditions"]


def test_one_seed_reads_as_a_table_without_the_seed_column():
    base = np.full(20, 2.0)
    t = _table(
        **{
            "equal-token_wan": (base, [100] * 20),
            "equal-token_fused": (base * np.r_[np.ones(19), 1.1], [100] * 20),
            "dual_wan": (np.linspace(2.0, 1.5, 20), [60] * 20),
        }
    )
    plain = loss_rows(t, 1536, 1, "tiny")
    assert loss_rows(t.assign(seed=0), 1536, 1, "tiny") == plain
    assert loss_rows(t.assign(seed=7), 1536, 1, "tiny") == plain
    r = {x["metric"]: x for x in plain}
    assert "percentile bootstrap over steps" in r["loss_max_rel_diff"]["conditions"]
    assert np.isnan(r["loss_final_rel_diff_policy"]["ci_low"])  # one step's gap: no interval


def test_a_comparison_missing_from_some_seeds_uses_the_seeds_that_have_it():
    t = _seeded({0: 0.5, 1: 1.0, 2: 1.8})
    t = t[~((t.seed > 0) & (t.run == "equal-token/fused"))]  # fused trained in seed 0 only
    rows = {r["metric"]: r for r in loss_rows(t, 1536, 1)}
    assert rows["loss_max_rel_diff"]["value"] == pytest.approx(0.5)
    assert "bootstrap" in rows["loss_max_rel_diff"]["conditions"]  # one seed: its own reading
    assert rows["loss_final_rel_diff_policy"]["value"] == pytest.approx(1.1)


def test_the_loss_figure_draws_the_first_seed():
    from suite.report.plots import training as training_plots

    ((name, caption, figure),) = training_plots.figures(
        {"training_loss": _seeded({3: 0.5, 4: 1.0})}
    )
    assert name == "training_loss" and "first seed" in caption
    ax = figure.axes[0]
    assert "seed 3 of 2" in ax.get_title() and len(ax.lines) == 2 * 3  # 3 runs, thin + MA10
