"""Held-out validation of the step model: shapes timed in the sweep's passes, never fitted, and
the error by region (many-sample, long single-sample, launch-bound) as non-judged C3 rows."""

import numpy as np
import pandas as pd
import pytest

from suite.balance.shapebench import equal_token_grid
from suite.claims import evaluate
from suite.experiments import costmodel as exp
from suite.experiments.costmodel.sweep import HELDOUT_QUICK, M_TOK, QUICK_BUCKETS, REGIONS
from suite.rundir import RunContext, RunDir
from tests.sweep_synthetic import floored_sweep, work

GRID = equal_token_grid(QUICK_BUCKETS, M_TOK, 6_500)


def _heldout(factor=1.0, seed=1) -> pd.DataFrame:
    """shapes_heldout rows of the quick profile's held-out shapes, times x factor."""
    region = {(B, S): r for B, S, r in HELDOUT_QUICK}
    h = floored_sweep(list(region), 0.22, seed=seed)
    h["step_s"] *= factor
    return h.assign(region=[region[(B, S)] for B, S in zip(h["B"], h["S"])])


def _run(tmp_path, heldout: pd.DataFrame | None) -> dict[str, pd.DataFrame]:
    run = RunDir(tmp_path)
    run.write_table("shapes_sweep", floored_sweep(GRID, 0.22))
    if heldout is not None:
        run.write_table("shapes_heldout", heldout)
    return exp.run(RunContext(run, "cpu", "cpu"))


def test_held_out_shapes_never_enter_the_fits(tmp_path):
    base = _run(tmp_path / "a", _heldout())
    slow = _run(tmp_path / "b", _heldout(factor=10.0))
    for name in ("costmodel_fit", "costmodel_quadratic", "costmodel_table", "costmodel_residuals"):
        pd.testing.assert_frame_equal(base[name], slow[name])
    held = {(B, S) for B, S, _ in HELDOUT_QUICK}
    assert not held & set(zip(base["costmodel_table"]["B"], base["costmodel_table"]["S"]))
    # ...but their table follows their times
    h0, h1 = base["costmodel_heldout"], slow["costmodel_heldout"]
    assert h1["median_s"].to_numpy() == pytest.approx(10 * h0["median_s"].to_numpy())
    assert (h0["pred_s"] == h1["pred_s"]).all()


def test_region_table_and_rows_of_a_model_that_fits(tmp_path):
    t = _run(tmp_path, _heldout())
    tab = t["costmodel_heldout"]
    assert set(tab["region"]) == set(REGIONS) and (tab["n"] == 3).all()
    assert tab["rel_err"].abs().max() < 0.03  # the true form, 0.5% noise
    lb = tab[tab["region"] == "launch_bound"]
    # priced at the floor where the work is under it: (1, 3120) 0.16 s of work, (1, 4680) 0.23 s
    assert lb["pred_s"].to_numpy() == pytest.approx(
        np.maximum(0.22, work(lb["B"], lb["S"])), rel=0.02
    )
    rows = exp.summarize(t).set_index("metric")
    keys = {"heldout_err"} | {f"heldout_{k}_{r}" for k in ("err", "bias") for r in REGIONS}
    assert keys <= set(rows.index) and (rows.loc[sorted(keys), "claim"] == "C3").all()
    assert rows.loc["heldout_err", "value"] == pytest.approx(100 * tab["rel_err"].abs().mean())
    many = tab[tab["region"] == "many_sample"]["rel_err"]
    assert rows.loc["heldout_bias_many_sample", "value"] == pytest.approx(100 * many.mean())
    cond = rows.loc["heldout_err_launch_bound", "conditions"]
    assert "not judged" in cond and "(1, 3120)" in cond and "launch floor 0.22" in cond
    # C3 stays judged on the power law's R^2
    (c3,) = [v for v in evaluate(rows.reset_index()) if v.id == "C3"]
    assert c3.metric == "cost_fit_r2"


def test_a_slow_held_out_region_shows_as_a_negative_bias(tmp_path):
    h = _heldout()
    long = h["region"] == "long_single"
    h.loc[long, "step_s"] *= 1.10  # 10% slower than the model: predicted 9.1% fast
    rows = exp.summarize(_run(tmp_path, h)).set_index("metric")["value"]
    assert rows["heldout_bias_long_single"] == pytest.approx(-9.1, abs=1.0)
    assert rows["heldout_err_long_single"] == pytest.approx(9.1, abs=1.0)
    assert abs(rows["heldout_bias_many_sample"]) < 3


def test_runs_without_held_out_shapes_have_no_table_and_no_rows(tmp_path):
    t = _run(tmp_path, None)
    assert "costmodel_heldout" not in t
    assert not exp.summarize(t)["metric"].str.startswith("heldout").any()
