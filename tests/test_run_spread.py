"""The kernel speedups' and the e2e gains' intervals hold the between-run spread of the GPU model:
each side at least 1.96 x the committed tau in log space, pooled over the run_spread rows of every
commit but the run's own, where the run names a GPU with such rows; the run's own interval alone,
said so, where it does not. CPU: committed references' tables."""

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from suite import spread
from suite.experiments import e2e, kernels

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "reports" / "reference" / "h100" / "quick-c2036da" / "results"
H100 = "NVIDIA H100 80GB HBM3"


def _tables(gpu: str | None) -> dict[str, pd.DataFrame]:
    t = pd.read_csv(RESULTS / "kernels_timings.csv")
    s = pd.read_csv(RESULTS / "kernels_samples.csv")
    t = t.drop(columns="gpu")  # the tables as a run that did not name its GPU wrote them
    return {"kernels_timings": t if gpu is None else t.assign(gpu=gpu), "kernels_samples": s}


def test_widen_keeps_the_wider_side_and_nan():
    lo, hi = spread.widen(10.0, 9.99, 10.5, 0.01)
    assert lo == pytest.approx(10.0 / math.exp(1.96 * 0.01)) and hi == 10.5
    assert spread.widen(10.0, 9.0, 11.0, 0.001) == (9.0, 11.0)
    lo, hi = spread.widen(10.0, math.nan, math.nan, 0.01)
    assert math.isnan(lo) and math.isnan(hi)


def test_pooled_tau_centres_each_metric_on_its_own_mean():
    runs = pd.DataFrame({"a": [2.0, 8.0], "b": [2.0 * math.e**0.01, 8.0 * math.e**-0.01]})
    tau, df = spread.pooled_tau(runs)
    assert df == 2 and tau == pytest.approx(math.sqrt(2 * 2 * 0.005**2 / 2))
    with pytest.raises(ValueError):
        spread.pooled_tau(runs[["a"]])


def test_a_named_gpu_with_a_row_widens_the_speedups():
    plain = kernels.summarize(_tables(None)).set_index("metric")
    wide = kernels.summarize(_tables(H100)).set_index("metric")
    speedups = plain.index[plain["unit"] == "x"]
    for m in speedups:
        row = spread.spread_for(H100, spread.kernel_family(m))  # no commit named: every row
        reach = math.exp(1.96 * row["tau_log"])
        v = wide.loc[m, "value"]
        assert v == plain.loc[m, "value"]
        assert wide.loc[m, "ci_low"] <= min(plain.loc[m, "ci_low"], v / reach) * (1 + 1e-12)
        assert wide.loc[m, "ci_high"] >= max(plain.loc[m, "ci_high"], v * reach) * (1 - 1e-12)
        assert "between-run log SD" in wide.loc[m, "conditions"]
    # the H100's C11 interval of a c2036da run now holds 85dc565's run 3 (8.804x, another unit)
    assert plain.loc["fwd_speedup_wan", "ci_high"] < 8.804 < wide.loc["fwd_speedup_wan", "ci_high"]


@pytest.mark.parametrize("gpu", [None, "NVIDIA B200"])
def test_without_a_row_the_bootstrap_stays_and_says_so(gpu):
    plain = kernels.summarize(_tables(None))
    got = kernels.summarize(_tables(gpu))
    np.testing.assert_array_equal(got["ci_low"].to_numpy(), plain["ci_low"].to_numpy())
    cond = got.loc[got["metric"] == "fwd_speedup_wan", "conditions"].iloc[0]
    assert "between runs: not included" in cond and (gpu is None or gpu in cond)


def test_the_kernel_families_split_the_speedups_by_their_baseline():
    m = pd.read_csv(RESULTS.parent / "metrics.csv")
    eager, compiled = (m[spread.FAMILIES[f].holds(m)] for f in ("kernels", "kernels-compile"))
    assert set(eager.metric) & set(compiled.metric) == set()
    assert set(eager.metric) | set(compiled.metric) == set(m[m.claim.isin(["C11", "C12"])].metric)
    assert {"fwd_speedup_compile_wan", "bwd_fused_speedup_compile_wan"} <= set(compiled.metric)
    assert {"fwd_speedup_wan", "bwd_dtile_speedup_wan"} <= set(eager.metric)


@pytest.mark.parametrize(
    "row",
    spread.spreads().to_dict("records"),
    ids=lambda r: f"{r['gpu']}-{r['family']}-{r['commit']}",
)
def test_committed_rows_follow_from_their_runs(row):
    runs = [REPO / p.strip() for p in row["source"].split(";")]
    tool = str(REPO / "tools" / "run_spread.py")
    out = subprocess.run(
        [sys.executable, tool, row["family"], *map(str, runs), "--check"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_measured_tables_name_their_gpu(monkeypatch):
    """run() and the asv benchmark build their tables with tables_of, so both widen alike."""
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: H100)
    t = pd.read_csv(RESULTS / "kernels_timings.csv").to_dict("records")
    s = pd.read_csv(RESULTS / "kernels_samples.csv").to_dict("records")
    tables = kernels.tables_of(s, t)
    assert set(tables["kernels_timings"]["gpu"]) == {H100}
    got = kernels.summarize(tables).set_index("metric")
    assert "between-run log SD" in got.loc["fwd_speedup_wan", "conditions"]


def _e2e(env: dict | None) -> dict[str, pd.DataFrame]:
    t = {"e2e_steps": pd.read_csv(RESULTS / "e2e_steps.csv")}
    return t if env is None else t | {spread.RUN_ENV: spread.run_env(env)}


def _env(gpu: str, sha: str) -> dict:
    return {"torch": {"device_name": gpu}, "git": {"sha": sha}}


def test_the_e2e_gains_widen_as_speedups_from_the_runs_env():
    row = spread.spread_for(H100, "e2e", "c2036da")
    assert "c2036da" not in row["commit"] and "85dc565" in row["commit"]
    plain = e2e.summarize(_e2e(None)).set_index("metric")
    wide = e2e.summarize(_e2e(_env(H100, "c2036da"))).set_index("metric")
    reach = math.exp(1.96 * row["tau_log"])
    for m in plain.index:
        v = 1 + wide.loc[m, "value"] / 100
        assert wide.loc[m, "value"] == plain.loc[m, "value"]
        assert 1 + wide.loc[m, "ci_low"] / 100 <= v / reach * (1 + 1e-12)
        assert 1 + wide.loc[m, "ci_high"] / 100 >= v * reach * (1 - 1e-12)
        assert wide.loc[m, "ci_low"] <= plain.loc[m, "ci_low"]
        assert wide.loc[m, "ci_high"] >= plain.loc[m, "ci_high"]
        assert "between-run log SD" in wide.loc[m, "conditions"]
    assert "not name its GPU" in plain["conditions"].iloc[0]


def _table(*rows) -> pd.DataFrame:
    return pd.DataFrame(
        [dict(gpu=H100, family="e2e", commit=c, runs=3, units=2, df=df, tau_log=tau, source=c)
         for c, df, tau in rows]
    )  # fmt: skip


def test_a_run_is_widened_by_every_commit_but_its_own(monkeypatch):
    monkeypatch.setattr(
        spread, "spreads", lambda: _table(("aaa1111", 4, 0.01), ("bbb2222", 12, 0.02))
    )
    own = spread.spread_for(H100, "e2e", "aaa1111ff")  # a longer sha of a row's commit
    assert own["tau_log"] == 0.02 and own["commit"] == "bbb2222" and own["df"] == 12
    new = spread.spread_for(H100, "e2e", "ccc3333")
    assert new["tau_log"] == pytest.approx(math.sqrt((4 * 0.01**2 + 12 * 0.02**2) / 16))
    assert new["df"] == 16 and new["runs"] == 6 and new["commit"] == "aaa1111, bbb2222"
    wide = e2e.summarize(_e2e(_env(H100, "aaa1111"))).set_index("metric")
    assert "0.02% of" not in wide["conditions"].iloc[0] and "2.00% of" in wide["conditions"].iloc[0]


def test_a_run_of_the_only_estimating_commit_is_not_widened(monkeypatch):
    monkeypatch.setattr(spread, "spreads", lambda: _table(("85dc565", 4, 0.01)))
    plain = e2e.summarize(_e2e(None))
    own = e2e.summarize(_e2e(_env(H100, "85dc565ab")))
    np.testing.assert_array_equal(own["ci_low"].to_numpy(), plain["ci_low"].to_numpy())
    assert "only this run's commit" in own["conditions"].iloc[0]


def test_run_env_reads_the_gpu_from_torch_or_nvidia_smi():
    smi = {"nvidia_smi": [{"name": "NVIDIA H200"}], "git": {"sha": "abc1234"}}
    assert spread.run_env(smi).iloc[0].to_dict() == {"gpu": "NVIDIA H200", "commit": "abc1234"}
    assert spread.run_env({"torch": {"device_name": None}}).empty
