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
