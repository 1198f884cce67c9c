"""tools/verdict_stability.py: verdicts compared across runs, and how often one run's interval
holds another run's value (per claim, over ordered pairs, and pooled)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tool():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import verdict_stability
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return verdict_stability


def _run(tmp_path, name, **claims):
    rows = [
        {"id": cid, "verdict": "reproduced", "metric": metric, "measured": v, "ci_low": lo,
         "ci_high": hi}
        for cid, (metric, v, lo, hi) in claims.items()
    ]  # fmt: skip
    (tmp_path / name).write_text(json.dumps(rows))
    return str(tmp_path / name)


def test_coverage_counts_ordered_pairs_of_the_same_metric(tool, tmp_path):
    a = _run(tmp_path, "a.json", C4=("k", 10.0, 9.0, 11.0), C5=("k", 1.0, None, None))
    b = _run(tmp_path, "b.json", C4=("k", 10.5, 10.4, 10.6), C5=("k", 1.0, None, None))
    c = _run(tmp_path, "c.json", C4=("other", 10.0, 9.0, 11.0), C5=("k", 2.0, 1.5, 2.5))
    df = tool.table([a, b, c]).set_index("claim")
    # C4: a holds b's 10.5, b does not hold a's 10.0; c measured another metric: not paired
    assert (df.loc["C4", "held"], df.loc["C4", "pairs"]) == (1, 2)
    # C5: only c has an interval; it holds neither a's nor b's 1.0
    assert (df.loc["C5", "held"], df.loc["C5", "pairs"]) == (0, 2)
    assert tool.pooled(df).startswith("pooled coverage: 1/4 (25%) of ordered run pairs, over 2")


def test_committed_stability_runs_are_judged_under_todays_rules(tool):
    runs = [str(ROOT / "reports/reference/h200/stability-5753865" / f"run{i}") for i in (1, 2, 3)]
    df = tool.table(runs).set_index("claim")
    assert df.loc["C4", "metric"] == "imbalance_rate_reduction_sim"  # today's primary
    assert df.loc["C11", "pairs"] == 6 and df.loc["C4", "held"] == 0  # plan seeds only
