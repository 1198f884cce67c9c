"""Metrics across experiments (suite.derived): overall_throughput_gain_sim compounds the
simulated balance gain and the measured fused-op gain, its interval widening with either
factor's; C18 is judged on the end-to-end training runs, the compound shown beside as a model."""

from __future__ import annotations

import math

import pytest

from suite.claims import evaluate
from suite.derived import derive
from suite.experiments import metric_rows


def _metrics(bal=(38.0, 37.0, 39.0), fused=(5.0, 4.0, 6.0), emulated=(35.0, 17.0, 56.0)):
    rows = [
        dict(claim="C8", metric="throughput_gain_16_sim", value=bal[0], ci_low=bal[1],
             ci_high=bal[2], unit="%", conditions="sim"),
        dict(claim="C17", metric="e2e_gain_eager_adaln_v81x480", value=fused[0],
             ci_low=fused[1], ci_high=fused[2], unit="%", conditions="e2e"),
        dict(claim="C18", metric="overall_throughput_gain", value=emulated[0],
             ci_low=emulated[1], ci_high=emulated[2], unit="%", conditions="emulated"),
    ]  # fmt: skip
    return metric_rows(rows)


def test_gains_compound_and_intervals_add_in_log_space():
    (row,) = derive(_metrics())
    assert row["claim"] == "C18" and row["metric"] == "overall_throughput_gain_sim"
    assert row["value"] == pytest.approx(100 * (1.38 * 1.05 - 1))
    assert row["ci_low"] < row["value"] < row["ci_high"]
    # wider than either factor's alone (in log space), narrower than their sum
    half = math.log1p(row["ci_high"] / 100) - math.log1p(row["value"] / 100)
    h1 = (math.log1p(0.39) - math.log1p(0.37)) / 2
    h2 = (math.log1p(0.06) - math.log1p(0.04)) / 2
    assert max(h1, h2) < half < h1 + h2
    (wider,) = derive(_metrics(fused=(5.0, 1.0, 9.0)))
    assert wider["ci_high"] - wider["ci_low"] > row["ci_high"] - row["ci_low"]


def test_c18_is_judged_end_to_end_and_shows_the_compound_as_a_model():
    """Old: judged on the compound (44.9% [43.2, 46.6]: exceeded), the measurement an alternative."""
    m = _metrics()
    both = metric_rows(m.to_dict("records") + derive(m))
    (c18,) = [v for v in evaluate(both) if v.id == "C18"]
    assert c18.metric == "overall_throughput_gain"
    assert c18.verdict == "inconclusive"  # 35% [17, 56] straddles 27.2 * (1 +- 0.1)
    (alt,) = c18.alternatives
    assert alt["metric"] == "overall_throughput_gain_sim" and alt["verdict"] == "exceeded"


@pytest.mark.parametrize("fused", [None, (5.0, math.nan, math.nan)])
def test_without_the_fused_factor_there_is_no_compound_and_c18_stands(fused):
    m = _metrics() if fused is None else _metrics(fused=fused)
    if fused is None:
        m = m[m.metric != "e2e_gain_eager_adaln_v81x480"]
    assert derive(m) == []
    (c18,) = [v for v in evaluate(m) if v.id == "C18"]
    assert c18.metric == "overall_throughput_gain" and c18.verdict == "inconclusive"


def test_c18_needs_the_training_runs_not_the_e2e_experiment():
    m = _metrics()
    m = m[m.metric != "e2e_gain_eager_adaln_v81x480"]
    (c18,) = [v for v in evaluate(m, {"e2e": "failed: boom"}) if v.id == "C18"]
    assert c18.metric == "overall_throughput_gain" and not c18.alternatives
    m = m[m.metric != "overall_throughput_gain"]  # a failed training run gives no rows
    (c18,) = [v for v in evaluate(m, {"training": "failed: boom"}) if v.id == "C18"]
    assert c18.verdict == "not-run" and "training failed" in c18.reason
