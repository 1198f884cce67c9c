"""tools/verdict_stability.py: verdicts compared across runs of one GPU, and how often one run's
interval holds another run's value (per claim, over ordered pairs, pooled, per GPU)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pandas as pd
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
    df = tool.table([a, b, c])
    by_claim = df.set_index("claim")
    # C4: a holds b's 10.5, b does not hold a's 10.0; c measured another metric: not paired
    assert (by_claim.loc["C4", "held"], by_claim.loc["C4", "pairs"]) == (1, 2)
    # C5: only c has an interval; it holds neither a's nor b's 1.0
    assert (by_claim.loc["C5", "held"], by_claim.loc["C5", "pairs"]) == (0, 2)
    assert tool.pooled(df).startswith("pooled coverage: 1/4 (25%) of ordered run pairs, over 2")
    # C4 at 1/2 is not under half; C5 at 0/2 is
    assert tool.verdict(df)["claims under half"] == "C5"
    assert tool.verdict(df)["acceptance"] == "NOT met"


def test_a_split_names_the_boundary_the_intervals_end_at(tool, tmp_path):
    """C5 (exceeded above 1.1 x 51.54 = 56.69): intervals that agree but end either side of that
    boundary differ in verdict; the table says where, and says nothing where they agree."""
    a = _run(tmp_path, "a.json", C5=("rank_cv_sim", 68.3, 56.5, 74.4), C4=("k", 56.6, 43, 72))
    b = _run(tmp_path, "b.json", C5=("rank_cv_sim", 68.4, 56.8, 74.4), C4=("k", 56.8, 43, 72))
    for name, ends in (("a.json", (56.5, 74.4)), ("b.json", (56.8, 74.4))):  # as judged
        rows = json.loads((tmp_path / name).read_text())
        rows[0]["verdict"] = "exceeded" if ends[0] > 56.69 else "inconclusive"
        (tmp_path / name).write_text(json.dumps(rows))
    df = tool.table([a, b]).set_index("claim")
    assert df.loc["C5", "same"] == "NO" and df.loc["C5", "how"] == "inconclusive vs exceeded"
    assert df.loc["C5", "split at"] == "exceeded above 56.69; nearest ends 56.5, 56.8"
    assert df.loc["C4", "split at"] == "" and df.loc["C4", "how"] == ""


def test_decisive_verdicts_that_differ_contradict(tool):
    assert tool.how_they_differ(["exceeded", "exceeded"]) == ""
    assert tool.how_they_differ(["inconclusive", "reproduced", "inconclusive"]) == (
        "inconclusive vs reproduced"
    )
    assert tool.how_they_differ(["reproduced", "exceeded", "inconclusive"]) == "contradict"
    assert tool.how_they_differ(["reproduced", "not-run"]) == "not run in some"


def test_ends_within_their_monte_carlo_reach_no_longer_split(tool):
    """Old behaviour: C5's lower ends on the three H100 sweeps (56.5, 56.8, 56.9, each +-0.8-1.2
    Monte Carlo SE over 200 replicates) straddled the exceeded boundary 56.69, so the runs split
    exceeded / inconclusive on the replicates drawn. The rule now reads an end within its Monte
    Carlo reach of a boundary as inconclusive: the three agree, and each says why."""
    h100 = ROOT / "reports/reference/h100"
    runs = [str(h100 / "stability-85dc565/bootstrap-cpu" / r) for r in ("run1", "run2")]
    runs.append(str(h100 / "c1c3-0e6e473/balance-cpu"))
    df = tool.table(runs).set_index("claim")
    assert df.loc["C5", "same"] == "yes" and df.loc["C5", "split at"] == ""
    c5 = [next(c for c in tool.load(r) if c["id"] == "C5") for r in runs]
    assert all(c["verdict"] == "inconclusive" and c["point_verdict"] == "exceeded" for c in c5)
    assert all("exceeded above 56.69" in c["reason"] for c in c5)
    assert "straddles" in c5[0]["reason"]  # 56.54: inside, as before
    assert all("Monte Carlo SE" in c["reason"] for c in c5[1:])  # 56.83, 56.9: within reach


def test_committed_stability_runs_are_judged_under_todays_rules(tool):
    runs = [str(ROOT / "reports/reference/h200/stability-5753865" / f"run{i}") for i in (1, 2, 3)]
    df = tool.table(runs).set_index("claim")
    assert df.loc["C4", "metric"] == "imbalance_rate_reduction_sim"  # today's primary
    assert df.loc["C11", "pairs"] == 6 and df.loc["C4", "held"] == 0  # plan seeds only


STABILITY = ROOT / "reports/reference/h200/stability-5753865"


@pytest.mark.parametrize(
    "runs, committed",
    [
        ([f"run{i}" for i in (1, 2, 3)], "table.csv"),
        (["bootstrap-cpu/" + r for r in ("quick-5753865", "full-dd54683", "full-attempt-db196e6")],
         "bootstrap-cpu/coverage.csv"),
    ],
)  # fmt: skip
def test_reproduces_the_committed_coverage(tool, runs, committed):
    """The committed tables' per-claim coverage and verdict agreement, from their runs."""
    groups = tool.by_gpu([str(STABILITY / r) for r in runs])
    assert len(groups) == 1  # one GPU (the re-simulations carry no env.json: one unknown GPU)
    _, rows, per_gpu = tool.report(groups)
    want = pd.read_csv(STABILITY / committed).set_index("claim")
    got = rows.set_index("claim")
    for col in ("held", "pairs", "same"):
        assert got[col].tolist() == want[col].tolist(), col
    assert per_gpu.loc[0, "held"] == want["held"].sum()
    assert per_gpu.loc[0, "pairs"] == want["pairs"].sum()


def test_stability_runs_per_gpu_and_acceptance(tool, tmp_path):
    """Runs group by the GPU in their env.json; each GPU gets its own coverage and acceptance."""
    runs = []
    for i in (1, 2, 3):
        src = STABILITY / f"run{i}"
        for gpu in ("H200", "H100"):
            dst = tmp_path / gpu / f"run{i}"
            dst.mkdir(parents=True)
            shutil.copy2(src / "metrics.csv", dst / "metrics.csv")
            env = json.loads((src / "env.json").read_text())
            env["torch"]["device_name"] = f"NVIDIA {gpu}"
            (dst / "env.json").write_text(json.dumps(env))
            runs.append(str(dst))
    out = tmp_path / "stability.md"
    assert tool.main([*runs, "--out", str(out)]) == 1  # C6 differs between runs of one GPU
    summary = pd.read_csv(tmp_path / "stability-summary.csv").set_index("gpu")
    assert list(summary.index) == ["H200", "H100"] and (summary.runs == 3).all()
    assert (summary.held == 48).all() and (summary.pairs == 84).all()  # table.md's 48/84
    assert (summary.acceptance == "NOT met").all()
    assert summary.loc["H200", "claims under half"] == "C4, C5, C6, C8, C9, C15, C17"
    rows = pd.read_csv(tmp_path / "stability.csv")
    assert len(rows) == 2 * 18 and set(rows.gpu) == {"H200", "H100"}
    text = out.read_text()
    assert "### H200 (3 runs)" in text and "### H100 (3 runs)" in text and "### Per GPU" in text
