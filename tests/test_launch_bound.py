"""Launch-bound shapes: named from the sweep's own data, left out of the fits (so the host's mode
does not steer p), priced at the launch floor by the step model."""

import numpy as np
import pytest

from suite.balance.costmodel import CostModel, fit_cost
from suite.balance.shapebench import LAUNCH_MARGIN, equal_token_grid, launch_bound
from suite.experiments import costmodel as exp
from suite.experiments.costmodel.sweep import M_TOK, QUICK_BUCKETS
from tests.sweep_synthetic import floored_sweep, work

GRID = equal_token_grid(QUICK_BUCKETS, M_TOK, 12_000)  # the old quick grid: 9 small shapes


@pytest.mark.parametrize("floor", [0.22, 0.45])  # the H200 node's fast and slow host modes
def test_launch_bound_names_the_shapes_whose_work_is_under_the_floor(floor):
    sw = floored_sweep(GRID, floor)
    lb = launch_bound(sw["B"], sw["S"], sw["step_s"])
    truth = {(B, S) for B, S in GRID if work(B, S) < LAUNCH_MARGIN * floor}
    assert set(zip(lb.loc[lb["launch_bound"], "B"], lb.loc[lb["launch_bound"], "S"])) == truth
    assert len(truth) >= 5 and lb["floor_s"].iloc[0] == pytest.approx(floor, rel=0.02)
    assert (lb["n"] == 3).all() and (lb["tokens"] == lb["B"] * lb["S"]).all()
    # the predicted work above the floor is the true work (the form is fitted above it)
    above = ~lb["launch_bound"]
    assert lb.loc[above, "work_s"].to_numpy() == pytest.approx(
        work(lb.loc[above, "B"], lb.loc[above, "S"]), rel=0.02
    )


def test_a_sweep_without_a_launch_floor_loses_only_its_fastest_shape():
    sw = floored_sweep(GRID, floor=0.0)
    lb = launch_bound(sw["B"], sw["S"], sw["step_s"])
    assert lb.loc[lb["launch_bound"], ["B", "S"]].values.tolist() == [[1, 1560]]


def test_the_hosts_mode_no_longer_steers_p():
    """Fast (0.22 s) against slow (0.45 s) launch floor: p of all shapes moves by ~0.06 (the
    H200 references: 1.405 against 1.462), the fit without the launch-bound shapes by a third of
    that at most, and the per-sample term stays near the true one."""
    fits, raw = {}, {}
    for floor in (0.22, 0.45):
        sw = floored_sweep(GRID, floor)
        t = exp.fit_tables(sw)
        fits[floor] = (t["costmodel_fit"].iloc[0], t["costmodel_quadratic"].iloc[0])
        raw[floor] = fit_cost(sw["B"], sw["S"], sw["step_s"]).p
        lb = t["costmodel_launch_bound"]
        assert fits[floor][0]["launch_bound_shapes"] == lb["excluded"].sum() >= 5
        res = t["costmodel_residuals"]
        left = set(zip(res.loc[res["launch_bound"], "B"], res.loc[res["launch_bound"], "S"]))
        assert left == set(zip(lb.loc[lb["excluded"], "B"], lb.loc[lb["excluded"], "S"]))
        assert fits[floor][0]["n"] == len(lb) - len(left) == fits[floor][1]["n"]
        assert fits[floor][1]["c"] == pytest.approx(0.0019, abs=0.001)
    moved = abs(fits[0.22][0]["p"] - fits[0.45][0]["p"])
    assert abs(raw[0.22] - raw[0.45]) > 0.05 and moved < abs(raw[0.22] - raw[0.45]) / 3


def test_the_step_model_prices_launch_bound_shapes_at_the_floor():
    t = exp.fit_tables(floored_sweep(GRID, 0.22, noise=0.0))
    quad = t["costmodel_quadratic"].iloc[0]
    assert quad["floor_s"] == pytest.approx(0.22) and quad["launch_bound_shapes"] >= 5
    q = exp.model_from_quadratic(t["costmodel_quadratic"])
    assert q.floor_s == pytest.approx(0.22)
    assert q.predict([1, 24, 1], [1560, 1560, 75_600]) == pytest.approx(
        [0.22, *work([24, 1], [1560, 75_600])], rel=0.01
    )
    # the latency table marks them, and its quadratic column is floored too
    tab = t["costmodel_table"].set_index(["B", "S"])
    assert tab.loc[(1, 1560), "launch_bound"] and not tab.loc[(48, 1560), "launch_bound"]
    assert tab.loc[(1, 1560), "quad_s"] == pytest.approx(0.22)
    # a cost JSON keeps the floor (fit-cost writes it; simulate steps with it)
    cm = CostModel(a=0.1, b=1e-6, p=1.4).with_quadratic(q)
    back = CostModel.from_json(cm.to_json()).step_model()
    assert back.floor_s == pytest.approx(0.22) and back.predict(1, 1560) == pytest.approx(0.22)


def test_fitted_sweep_holds_the_rows_the_fits_take():
    sw = floored_sweep(GRID, 0.45)
    t = exp.fit_tables(sw)
    kept = exp.fitted_sweep(sw)
    lb = t["costmodel_launch_bound"]
    assert set(zip(kept["B"], kept["S"])) == set(
        zip(lb.loc[~lb["excluded"], "B"], lb.loc[~lb["excluded"], "S"])
    )
    assert len(kept) == 3 * t["costmodel_fit"].iloc[0]["n"]
    assert fit_cost(kept["B"], kept["S"], kept["step_s"]).p == pytest.approx(
        t["costmodel_fit"].iloc[0]["p"]
    )


def test_every_shape_is_fitted_where_the_rest_cannot_determine_the_fits():
    few = [(1, 1560), (2, 1560), (4, 1560), (1, 3600), (1, 75_600), (2, 32_760)]
    t = exp.fit_tables(floored_sweep(few, 0.45))
    lb, fit = t["costmodel_launch_bound"], t["costmodel_fit"].iloc[0]
    assert lb["launch_bound"].sum() >= 3 and not lb["excluded"].any()
    assert fit["launch_bound_shapes"] == 0 and fit["n"] == len(few)
    assert not t["costmodel_residuals"]["launch_bound"].any()


def test_c3_rows_say_what_was_left_out_and_old_tables_summarize_as_before():
    t = exp.fit_tables(floored_sweep(GRID, 0.45))
    rows = exp.summarize(t).set_index("metric")
    n = int(t["costmodel_fit"].iloc[0]["launch_bound_shapes"])
    assert f"{n} launch-bound shapes left out of the fits" in rows.loc["cost_fit_r2", "conditions"]
    # tables from before the launch-bound columns: every residual fitted, no such words
    old = {k: v for k, v in t.items() if k not in ("costmodel_launch_bound",)}
    old["costmodel_fit"] = t["costmodel_fit"].drop(columns=["launch_bound_shapes"])
    old["costmodel_residuals"] = t["costmodel_residuals"].drop(columns=["launch_bound"])
    before = exp.summarize(old).set_index("metric")
    assert "launch-bound" not in before.loc["cost_fit_r2", "conditions"]
    assert before.index.tolist() == rows.index.tolist()
    # R^2 of relative residuals over the fitted shapes only: the launch-bound ones would lower it
    assert rows.loc["cost_fit_r2_rel", "value"] > before.loc["cost_fit_r2_rel", "value"]
    assert np.isfinite(rows.loc["cost_fit_r2", ["ci_low", "ci_high"]].astype(float)).all()
