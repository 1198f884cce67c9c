"""The report's "Beyond the paper" section: policy statistics and issue 7's targets from tables."""

from pathlib import Path

import numpy as np
import pandas as pd

from suite.report import beyond

REF = Path(__file__).resolve().parents[1] / "reports" / "reference" / "h200"


def _steps(policy, ranks, max_s, mean_s, step_s, tokens=100.0, cv=0.02):
    n = len(step_s)
    return pd.DataFrame(
        {
            "policy": policy,
            "mix": "default",
            "ranks": ranks,
            "noise": "noisy",
            "step": range(n),
            "step_s": step_s,
            "tokens": tokens,
            "max_s": max_s,
            "mean_s": mean_s,
            "rank_cv": cv,
        }
    )


def _tables(global_maxmean_16=1.02):
    steps = pd.concat(
        [
            _steps("equal-token", 16, [1.3, 1.3], [1.0, 1.0], [1.3, 1.5], cv=0.2),
            _steps("dual", 16, [1.1, 1.1], [1.0, 1.0], [1.1, 1.1], cv=0.09),
            _steps("global", 16, [global_maxmean_16] * 2, [1.0, 1.0], [1.0, 1.0], cv=0.03),
            _steps("global", 1024, [1.2, 1.2], [1.0, 1.0], [1.0, 1.0], cv=0.04),
            _steps("global", 16, [9.0, 9.0], [1.0, 1.0], [9.0, 9.0]).assign(
                noise="cost"
            ),  # ignored
        ],
        ignore_index=True,
    )
    planner = pd.DataFrame(
        {
            "policy": "global",
            "ranks": [16, 1024],
            "mix": "default",
            "noise": "noisy",
            "mean_delay_steps": [0.5, 2.0],
            "deferred_share": 0.1,
            "planner_ms": [0.1, 7.0],
        }
    )
    setup = pd.DataFrame({"policy": ["global"], "cost_source": ["test model"], "noise_cv": [0.05]})
    return {"balance_steps": steps, "balance_planner": planner, "balance_setup": setup}


def test_policy_table_statistics():
    pol = beyond.policy_table(_tables()).set_index(["policy", "ranks"])
    e = pol.loc[("equal-token", 16)]
    assert np.isclose(e.maxmean, 1.3) and np.isclose(e.rank_cv, 20)
    assert np.isclose(e.bubble, 100 * (1 - 1 / 1.3))
    assert np.isclose(e.step_cv, 100 * np.std([1.3, 1.5]) / 1.4)
    assert np.isclose(e.throughput, 200 / 2.8) and np.isnan(e.planner_ms)
    g = pol.loc[("global", 16)]
    assert np.isclose(g.maxmean, 1.02) and g.planner_ms == 0.1 and g.mean_delay_steps == 0.5
    assert ("dual", 1024) not in pol.index  # not simulated: no row


def test_targets_met_and_not_met_from_the_tables():
    metrics = pd.DataFrame(
        {"metric": ["sim_step_error_pct", "sim_step_error_pct_quadratic"], "value": [12.0, 2.5]}
    )
    t = beyond.target_table(_tables(), metrics).set_index(["key", "ranks"])
    assert t.loc[("rank_cv", 16), "met"] and t.loc[("maxmean", 16), "met"]
    assert not t.loc[("maxmean", 1024), "met"]  # 1.2 > 1.10
    assert not t.loc[("planner_ms", 1024), "met"] and not t.loc[("mean_delay_steps", 1024), "met"]
    assert t.loc[("step_cv", 16), "met"] and t.loc[("step_cv", 16), "equal-token"] > 3
    assert not t.loc[("sim_step_error_pct", 0), "met"]
    assert t.loc[("sim_step_error_pct_quadratic", 0), "met"]  # each cost form judged on its own
    assert (
        not beyond.target_table(_tables(1.06))
        .set_index(["key", "ranks"])
        .loc[("maxmean", 16), "met"]
    )
    # without the validation metric: "not measured", never "met"
    sec = beyond.section(_tables())
    val = [r for r in sec["targets"] if r["target"].startswith("simulator")][0]
    assert val["met"] == "not measured"
    assert sec["met"] == 4 and sec["n_targets"] == len(beyond.TARGETS)
    assert sec["cost_source"] == "test model" and sec["noise"] == "5%"


def test_section_absent_without_balance_tables():
    assert beyond.section({}) is None
    t = beyond.target_table({})
    assert t["met"].isna().all() and len(t) == len(beyond.TARGETS)


def test_reference_h200_global_policy_meets_issue_7_targets():
    from suite.rundir import RunDir

    tables = RunDir(REF).tables()
    metrics = pd.read_csv(REF / "metrics.csv")
    t = beyond.target_table(tables, metrics)
    # every target, the simulator's replay error with the paper's power law included in this run
    # (8.2% at s_cross 32400; 9.0% at 141c38e (28800), 5.5% at 47aa441 (9360), 5.4% at bae9965
    # (9360), 9.1% at 1e9e5e2 (28800), 6.5% at f055e77 (9360), 9.2% at 603d7a6, 8.9% at bd60510,
    # 7.7% at 6001933 (32400), 5.2% at 64bc62f, 11.4% > 10% at 2bba38c; the quadratic form 2.0%:
    # validation/README.md)
    assert list(t.loc[~t["met"], "key"]) == [], t
    assert t.set_index("key").loc["sim_step_error_pct_quadratic", "met"]
    pol = beyond.policy_table(tables).set_index(["policy", "ranks"])
    assert (
        pol.loc[("global", 16), "rank_cv"]
        < pol.loc[("dual", 16), "rank_cv"]
        < pol.loc[("equal-token", 16), "rank_cv"]
    )
    html = (REF / "report.html").read_text()
    assert '<section id="beyond">' in html and "9 of 9 met" in html


def _cost_tables(with_quadratic=True):
    fit = pd.DataFrame(
        {
            "variant": ["free", "p2"],
            "p": [1.2796, 2.0],
            "r2": [0.91193, 0.7277],
            "loo_err": [0.16852, 0.2874],
            "n": [28, 28],
            "model": "wan-1.3b",
            "device": "NVIDIA H200",
        }
    )
    quad = pd.DataFrame({"r2": [0.99887], "loo_err": [0.033842], "n": [28]})
    return {"costmodel_fit": fit} | ({"costmodel_quadratic": quad} if with_quadratic else {})


def test_cost_forms_put_the_physical_form_beside_the_papers():
    forms = beyond.cost_forms(_cost_tables())
    paper, quad = forms["rows"]
    assert (paper["r2"], paper["loo"], paper["table"]) == ("0.912", "16.9", "costmodel_fit")
    assert "p = 1.28" in paper["form"] and "judged" in paper["form"]
    assert (quad["r2"], quad["loo"], quad["table"]) == ("0.999", "3.4", "costmodel_quadratic")
    assert "not judged" in quad["form"] and forms["where"] == "wan-1.3b NVIDIA H200"
    assert "R^2 0.999" in forms["summary"] and "3.4%" in forms["summary"]
    assert "R^2 0.912" in forms["summary"] and "16.9%" in forms["summary"]


def test_cost_forms_absent_for_runs_without_the_quadratic_table():
    assert beyond.cost_forms(_cost_tables(with_quadratic=False)) is None
    assert beyond.cost_forms({}) is None
    assert beyond.cost_forms({"costmodel_quadratic": _cost_tables()["costmodel_quadratic"]}) is None
