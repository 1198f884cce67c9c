"""Trace-driven simulator validation (suite.balance.validate) on synthetic and reference traces."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from suite.balance.costmodel import QuadraticCost, fit_cost, fit_quadratic_cost
from suite.balance.simulator import noisy
from suite.balance.validate import (
    calibration_shapes,
    cost_models,
    error_summary,
    main,
    noise_cv_from_sweep,
    rank_noise_cv,
    refit_table,
    step_errors,
    validate,
    within_shape_cv,
)

# the quick reference at 5753865: 1-block emulated runs costed by a 30-block sweep
REF = Path(__file__).resolve().parents[1] / "reports" / "reference" / "h200" / "quick-5753865"


def _fit_row(a, b, p, layers=1):
    return pd.DataFrame(
        [
            {
                "variant": "free",
                "a": a,
                "b": b,
                "p": p,
                "p_lo": p,
                "p_hi": p,
                "r2": 1.0,
                "loo_err": 0.0,
                "n": 10,
                "m0": 0.0,
                "m1": 1.0,
                "capacity_bytes": 1e11,
                "m_mem": 1e6,
                "m_comp": 1e9,
                "s_cross": 1e4,
                "device": "x",
                "model": "m",
                "layers": layers,
            }
        ]
    )


RUNS = ("default/equal-token/wan", "default/dual/wan")


def _trace(a, b, p, cv, steps=12, ranks=8, seed=0, rank_cv=0.0, runs=RUNS):
    """Rank-batches of a + b*B*S^p with per-sample noise cv and (whole-compute) rank noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for run in runs:
        for step in range(steps):
            S = rng.choice([1000, 2000, 4000, 16000], ranks)
            B = np.maximum(1, 64000 // S)
            t = a + b * B * S.astype(float) ** p * rng.gamma(B / cv**2, cv**2 / B)
            if rank_cv > 0:  # no extra draws without it: the older tests keep their trace
                t = t * rng.gamma(1 / rank_cv**2, rank_cv**2, ranks)
            for r in range(ranks):
                rows.append(
                    {
                        "run": run,
                        "policy": run.split("/")[1],
                        "step": step,
                        "rank": r,
                        "B": B[r],
                        "S": S[r],
                        "compute_s": t[r],
                        "collective_s": 0.001,
                        "optimizer_s": 0.002,
                        "layers": 1,
                    }
                )
    return pd.DataFrame(rows)


def test_noise_cv_from_repeats():
    rng = np.random.default_rng(1)
    rows = [
        {"B": B, "S": S, "step_s": 0.01 + S * 1e-5 * rng.gamma(B / 0.04**2, 0.04**2 / B)}
        for B in (1, 4)
        for S in (1000, 4000, 8000)
        for _ in range(40)
    ]
    assert abs(noise_cv_from_sweep(pd.DataFrame(rows), 0.01) - 0.04) < 0.01


def test_replay_of_a_known_model_is_accurate():
    a, b, p = 0.01, 2e-8, 1.8
    ranks = _trace(a, b, p, cv=0.03)
    res = validate(ranks, _fit_row(a, b, p), noise_cv=0.03, draws=200)
    # B*S = 64000 in every batch of this trace: 1 and B*S are one column, so the quadratic refit
    # cannot be determined and is left out (its ValueError is caught in cost_models)
    assert set(res["model"]) == {"costmodel_fit", "costmodel_fit_calibrated", "refit"}
    assert len(res) == 3 * 2 * 12
    assert (res["rank_noise_cv"] == 0).all()  # the rank-level term is opt-in
    summ = error_summary(res)
    held = summ[summ.run == "held-out runs"].set_index("model")["mape_pct"]
    assert held["costmodel_fit"] < 3 and held["refit"] < 3
    # a wrong exponent is caught by the error
    bad = validate(ranks, _fit_row(a, b * 16000**0.6, p - 0.6), noise_cv=0.03, draws=100)
    assert (
        error_summary(bad)
        .set_index(["model", "run"])
        .loc[("costmodel_fit", "held-out runs"), "mape_pct"]
        > 10
    )


def test_step_errors_need_both_tables():
    assert step_errors({}) == {}
    assert step_errors({"training_ranks": _trace(0.01, 2e-8, 1.8, 0.03)}) == {}


def test_reference_h200_validation_table_is_reproduced():
    from suite.rundir import RunDir

    tables = RunDir(REF).tables()
    errs = step_errors(tables, draws=400)  # rank-level noise off (the default)
    committed = pd.read_csv(REF / "validation" / "errors.csv")
    held = committed[committed.run == "held-out runs"].set_index("model")["mape_pct"]
    assert (
        set(errs)
        == set(held.index)
        == {
            "costmodel_fit",
            "costmodel_fit_calibrated",
            "refit",
            "refit_quadratic",
        }
    )
    for model, v in errs.items():
        assert abs(v - held[model]) < 1e-3 * max(1, v), model
    assert (committed["rank_noise_cv"] == 0).all()
    # the default replay of the three older models is the one before the rank-level term
    before = {"costmodel_fit": 16.134, "costmodel_fit_calibrated": 6.787, "refit": 11.535}
    assert {m: round(errs[m], 3) for m in before} == before
    assert errs["refit_quadratic"] < 3 < errs["refit"]
    # --rank-noise: the sensitivity run (on this run it helps neither form: the power law's miss
    # is a bias, not scatter)
    on = step_errors(tables, draws=400, rank_noise=True)
    assert {m: round(v, 3) for m, v in on.items()} == {
        "costmodel_fit": 13.429,
        "costmodel_fit_calibrated": 8.696,
        "refit": 12.145,
        "refit_quadratic": 1.749,
    }
    # the scatter the power-law refit leaves is shape misfit: the model-free within-shape CV and
    # the quadratic's residual are smaller than what the refit would call rank noise
    res = validate(tables["training_ranks"], tables["costmodel_fit"], draws=10)
    fitted = res.attrs["rank_noise_cv_fitted"]
    assert res.attrs["within_shape_cv"] < 0.01 < 0.02 < fitted["refit"]
    assert fitted["refit_quadratic"] < 0.015
    # the committed refit coefficients (validation/refits.csv) and per-shape ratios
    models = cost_models(tables["training_ranks"], tables["costmodel_fit"])
    want = pd.read_csv(REF / "validation" / "refits.csv").set_index("model")
    got = refit_table(models).set_index("model")
    for col in ("a", "c", "b", "d", "p", "r2"):
        assert np.allclose(got[col].astype(float), want[col], rtol=1e-5, equal_nan=True), col
    shapes = calibration_shapes(tables["training_ranks"], models)
    ratio = shapes["ratio_refit_quadratic"]
    assert ratio.between(0.97, 1.02).all()
    assert (shapes["ratio_refit"] - 1).abs().max() > 2 * (ratio - 1).abs().max()


def _noisy_before(rng, base, fixed, n, cv):
    """simulator.noisy as it was before the rank-level term (a copy, to pin the old stream)."""
    if cv == 0:
        return base
    n = np.maximum(np.asarray(n, float), 1)
    return fixed + (base - fixed) * rng.gamma(n / cv**2, cv**2 / n)


def test_noisy_without_rank_noise_is_the_old_step_model():
    base = np.linspace(0.1, 0.9, 48).reshape(3, 16)
    n = np.arange(1, 49).reshape(3, 16)
    for cv in (0.0, 0.02, 0.3):
        old, new = np.random.default_rng(5), np.random.default_rng(5)
        want = _noisy_before(old, base, 0.05, n, cv)
        assert np.array_equal(noisy(new, base, 0.05, n, cv), want)
        assert np.array_equal(
            noisy(new, base, 0.05, n, cv, rank_noise_cv=0.0), _noisy_before(old, base, 0.05, n, cv)
        )
        assert old.random() == new.random()  # same stream afterwards: nothing extra was drawn


def test_rank_noise_scales_the_whole_compute():
    base = np.full((20_000, 16), 2.0)
    c = noisy(np.random.default_rng(0), base, 1.0, np.ones_like(base), 0.0, rank_noise_cv=0.1)
    assert abs(c.mean() - 2.0) < 0.01 and abs(c.std() / c.mean() - 0.1) < 0.005
    assert c.min() < 1.5  # the fixed part is scaled too, not only base - fixed


def test_rank_noise_is_recovered_and_removes_the_replay_bias():
    a, b, p = 0.01, 2e-8, 1.8
    runs = RUNS + ("long/equal-token/wan",)
    ranks = _trace(a, b, p, cv=0.02, steps=20, ranks=16, seed=3, rank_cv=0.10, runs=runs)
    res = validate(ranks, _fit_row(a, b, p), noise_cv=0.02, draws=200, rank_noise=True)
    for model in ("refit", "costmodel_fit_calibrated", "costmodel_fit"):
        assert abs(res.attrs["rank_noise_cv"][model] - 0.10) < 0.02, res.attrs["rank_noise_cv"]
    assert abs(res.attrs["within_shape_cv"] - 0.10) < 0.02  # jitter shows within a shape too
    old = validate(ranks, _fit_row(a, b, p), noise_cv=0.02, draws=200)  # the default: off
    assert (old["rank_noise_cv"] == 0).all() and old.attrs["rank_noise_cv"]["refit"] == 0
    assert abs(old.attrs["rank_noise_cv_fitted"]["refit"] - 0.10) < 0.02  # estimated all the same

    def held(r):
        return error_summary(r).set_index(["model", "run"]).loc[("refit", "held-out runs")]

    # without the term the replayed slowest of 16 ranks is too fast; with it the bias is gone
    # (MAPE stays ~5%: each measured step is one draw of a 10%-noisy max, which no replay predicts)
    assert held(old)["bias_pct"] < -6
    assert abs(held(res)["bias_pct"]) < min(2.5, abs(held(old)["bias_pct"]) / 3)
    assert held(res)["mape_pct"] < held(old)["mape_pct"] - 2
    assert set(error_summary(res)["rank_noise_cv"].round(2)) <= {0.09, 0.1, 0.11}


def test_misfit_is_not_rank_jitter():
    """A wrong cost model's residual enters rank_noise_cv, not the model-free within-shape CV."""
    ranks = _trace(0.01, 2e-8, 1.8, cv=0.02, steps=20, ranks=16, seed=4)
    calib = ranks[ranks["run"] == RUNS[0]]

    class Wrong:  # exponent 1.5 instead of 1.8, scaled to the right total
        fixed_s = 0.01

        def predict(self, B, S):
            return 0.01 + 2e-8 * 16000**0.3 * np.asarray(B) * np.asarray(S, float) ** 1.5

    assert rank_noise_cv(calib, Wrong(), 0.02) > 0.1
    assert within_shape_cv(calib) < 0.01


# Wan-like true cost (seconds): 0.3 s per step, 0.05 s per sample, 2.1e-4 s per token (linear
# layers of a 14B model at 4e14 FLOP/s), 8.75e-9 s per token^2 (attention), as in
# suite.balance.costmodel.analytic_seconds plus a per-sample term
QUAD = dict(a=0.3, c=0.05, b=2.1e-4, d=8.75e-9)
WAN_S = np.array([1560, 3600, 7800, 14040, 20280, 32760, 46800, 75600])
M_TOKENS = 226_000


def _quad_trace(cv=0.02, steps=10, ranks=16, seed=0):
    """Rank-batches of a + c*B + b*B*S + d*B*S^2 with per-sample noise cv: equal-token batches
    B = floor(M/S) on a default and a long-video mix, and a dual run whose B shrinks above
    S = 20280 (shapes the calibration run never has)."""
    rng = np.random.default_rng(seed)
    q = QuadraticCost(**QUAD)
    mixes = {
        "default": np.array([4, 4, 3, 3, 2, 2, 1, 1.0]),
        "long": np.array([1, 1, 1, 2, 2, 3, 4, 4.0]),
    }
    rows = []
    for run in RUNS + ("long/equal-token/wan",):
        mix, policy = mixes[run.split("/")[0]], run.split("/")[1]
        for step in range(steps):
            S = rng.choice(WAN_S, ranks, p=mix / mix.sum())
            B = np.maximum(1, M_TOKENS // S)
            if policy == "dual":
                B = np.maximum(1, np.floor(M_TOKENS / S * np.minimum(1, 20280 / S) ** 0.6))
            B = B.astype(np.int64)
            t = q.a + (q.predict(B, S) - q.a) * rng.gamma(B / cv**2, cv**2 / B)
            rows += [
                {
                    "run": run,
                    "policy": policy,
                    "step": step,
                    "rank": r,
                    "B": B[r],
                    "S": S[r],
                    "compute_s": t[r],
                    "collective_s": 0.05,
                    "optimizer_s": 0.1,
                    "layers": 1,
                }
                for r in range(ranks)
            ]
    return pd.DataFrame(rows)


def test_quadratic_fit_recovers_known_coefficients():
    S = np.repeat(WAN_S, 3).astype(float)
    B = np.maximum(1, np.floor(M_TOKENS / S / np.tile([1, 2, 4], len(WAN_S))))
    t = QuadraticCost(**QUAD).predict(B, S)
    q = fit_quadratic_cost(B, S, t, source="noiseless")
    for k, v in QUAD.items():
        assert abs(getattr(q, k) / v - 1) < 1e-6, (k, getattr(q, k), v)
    shapes = len(set(zip(B, S)))  # per-shape medians: 23 (B = 1 twice at S = 75600)
    assert q.fixed_s == q.a and q.n == shapes and q.r2 > 1 - 1e-12 and q.resid_cv < 1e-9
    assert np.allclose(q.predict(B, S), t, rtol=1e-9)
    # a term that is absent stays at zero (non-negative), and the others are still recovered
    t0 = QuadraticCost(**{**QUAD, "c": 0.0}).predict(B, S)
    q0 = fit_quadratic_cost(B, S, t0)
    assert q0.c >= 0 and q0.c * B.max() < 1e-6 * t0.min()
    assert abs(q0.d / QUAD["d"] - 1) < 1e-6 and abs(q0.b / QUAD["b"] - 1) < 1e-6


def test_quadratic_fit_rejects_bad_input():
    S = np.array([1560.0, 3600, 7800, 14040])
    B = np.maximum(1, np.floor(M_TOKENS / S))
    t = QuadraticCost(**QUAD).predict(B, S)
    with pytest.raises(ValueError, match="4 distinct"):
        fit_quadratic_cost(B[:3], S[:3], t[:3])
    with pytest.raises(ValueError, match="4 distinct"):  # repeats of 3 shapes are 3 shapes
        fit_quadratic_cost(np.r_[B[:3], B[:3]], np.r_[S[:3], S[:3]], np.r_[t[:3], t[:3]])
    with pytest.raises(ValueError, match="finite"):
        fit_quadratic_cost(B, S, np.r_[t[:3], np.nan])
    with pytest.raises(ValueError, match="finite"):
        fit_quadratic_cost(B, S, np.r_[t[:3], np.inf])
    with pytest.raises(ValueError, match="> 0"):
        fit_quadratic_cost(B, S, np.r_[t[:3], 0.0])
    with pytest.raises(ValueError, match="B does not vary"):  # 1 and B are one column
        fit_quadratic_cost(np.full(4, 2.0), S, t)
    with pytest.raises(ValueError, match="1-D"):
        fit_quadratic_cost(B, S, t[:3])


def test_quadratic_refit_removes_the_power_law_bias():
    """True cost a + c*B + b*B*S + d*B*S^2: the power-law refit is biased on held-out shapes (and
    its residual would pass for rank jitter), the quadratic refit replays them within ~1%."""
    ranks = _quad_trace()
    models = cost_models(ranks, _fit_row(1.0, 1e-6, 1.5))
    assert isinstance(models["refit_quadratic"], QuadraticCost)
    q = models["refit_quadratic"]
    # 2% per-sample noise: c, b, d within 10%; a (0.3 s of 50-150 s steps) is not determined
    for k in ("c", "b", "d"):
        assert abs(getattr(q, k) / QUAD[k] - 1) < 0.1, (k, getattr(q, k), QUAD[k])
    res = validate(ranks, _fit_row(1.0, 1e-6, 1.5), noise_cv=0.02, draws=200)
    summ = error_summary(res).set_index(["model", "run"])
    quad, power = (
        summ.loc[("refit_quadratic", "held-out runs")],
        summ.loc[("refit", "held-out runs")],
    )
    assert quad["mape_pct"] < 1.0 and abs(quad["bias_pct"]) < 0.5 and quad["max_error_pct"] < 3
    assert power["bias_pct"] > 2.5 and power["mape_pct"] > 3 * quad["mape_pct"]
    assert summ.loc[("refit", "default/dual/wan"), "bias_pct"] > 4  # the unseen shapes
    fitted = res.attrs["rank_noise_cv_fitted"]
    assert fitted["refit_quadratic"] < 0.005 < 0.01 < fitted["refit"]
    assert res.attrs["within_shape_cv"] < 0.01
    # the power law refit is what `refit` is (so the two rows compare two model forms)
    calib = ranks[ranks["run"] == RUNS[0]]
    p = fit_cost(calib["B"], calib["S"], calib["compute_s"])
    assert np.allclose(
        models["refit"].predict([3, 145], [68400, 1560]), p.predict([3, 145], [68400, 1560])
    )


def test_cli_rank_noise_is_opt_in(tmp_path, capsys):
    assert main([str(REF), "--out", str(tmp_path / "off"), "--draws", "20"]) == 0
    assert "not used; --rank-noise uses it" in capsys.readouterr().out
    off = pd.read_csv(tmp_path / "off" / "errors.csv")
    assert (off["rank_noise_cv"] == 0).all() and "refit_quadratic" in set(off["model"])
    refits = pd.read_csv(tmp_path / "off" / "refits.csv")
    assert list(refits["model"]) == ["refit", "refit_quadratic"]
    assert (tmp_path / "off" / "calibration_shapes.csv").exists()
    assert main([str(REF), "--out", str(tmp_path / "on"), "--draws", "20", "--rank-noise"]) == 0
    on = pd.read_csv(tmp_path / "on" / "errors.csv").set_index(["model", "run"])
    assert on.loc[("refit", "held-out runs"), "rank_noise_cv"] > 0.02
    # the old flag is accepted as the default
    assert main([str(REF), "--out", str(tmp_path / "old"), "--draws", "20", "--no-rank-noise"]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "old" / "errors.csv"), off)


def test_summary_validation_rows_keep_their_names_and_add_the_quadratic():
    from suite.experiments.training.summary import _validation_rows
    from suite.rundir import RunDir

    rows = {r["metric"]: r for r in _validation_rows(RunDir(REF).tables())}
    assert list(rows) == [
        "sim_step_error_pct",
        "sim_step_error_pct_sweep_fit",
        "sim_step_error_pct_quadratic",
    ]
    assert {r["claim"] for r in rows.values()} == {"C6"}
    # the default replay (no rank-level term): the values ../metrics.csv holds for the first two
    assert round(rows["sim_step_error_pct"]["value"], 1) == 11.5
    assert round(rows["sim_step_error_pct_sweep_fit"]["value"], 1) == 6.8
    assert rows["sim_step_error_pct_quadratic"]["value"] < 3
    assert "a + c*B + b*B*S + d*B*S^2" in rows["sim_step_error_pct_quadratic"]["conditions"]
    assert "no rank-level noise" in rows["sim_step_error_pct"]["conditions"]


def _quadratic_trace(q: QuadraticCost, cv: float, steps=10, ranks=8, seed=0, runs=RUNS):
    """Rank-batches of a quadratic step model (B and S varied) with per-sample noise cv."""
    rng = np.random.default_rng(seed)
    rows = []
    for run in runs:
        for step in range(steps):
            S = rng.choice([1000, 2000, 4000, 16000], ranks)
            B = rng.integers(1, 9, ranks)
            t = noisy(rng, q.predict(B, S), q.fixed_s, B, cv)
            rows += [
                {"run": run, "policy": run.split("/")[1], "step": step, "rank": r, "B": B[r],
                 "S": S[r], "compute_s": t[r], "collective_s": 0.001, "optimizer_s": 0.002}
                for r in range(ranks)
            ]  # fmt: skip
    return pd.DataFrame(rows)


def test_emulation_error_of_a_known_model_is_small_and_its_interval_holds_it():
    """The simulator on held-out emulated steps, with the form refitted on the baseline run's own
    rank-batches: a trace drawn from that form and noise replays within a few percent."""
    from suite.balance.validate import emulation_error

    q = QuadraticCost(a=0.05, c=2e-3, b=2e-6, d=5e-11)
    e = emulation_error(_quadratic_trace(q, 0.03), 0.03, draws=100)
    assert e["steps"] == 10 and e["runs"] == 1
    assert e["ci_low"] <= e["value"] <= e["ci_high"] and e["value"] < 3.0
    # a held-out run 30% slower than the model: the error says so
    tr = _quadratic_trace(q, 0.03)
    slow = tr["run"] != RUNS[0]
    tr.loc[slow, "compute_s"] *= 1.3
    worse = emulation_error(tr, 0.03, draws=100)
    assert 20 < worse["value"] < 30 and worse["ci_low"] > e["ci_high"]


def test_emulation_error_needs_a_baseline_and_another_run():
    from suite.balance.validate import emulation_error

    q = QuadraticCost(a=0.05, c=2e-3, b=2e-6, d=5e-11)
    assert emulation_error(_quadratic_trace(q, 0.03, runs=RUNS[:1]), 0.03) is None
    assert emulation_error(_quadratic_trace(q, 0.03, runs=RUNS[1:]), 0.03) is None
    renamed = ("16/equal-token", "16/dual")  # another naming: the equal-token run calibrates
    e = emulation_error(_quadratic_trace(q, 0.03, runs=renamed), 0.03, draws=50)
    assert e["baseline"] == "16/equal-token" and e["runs"] == 1


def test_emulation_error_on_the_reference_trace():
    """The committed H200 quick reference's emulated runs (1-block Wan 1.3B): the quadratic
    refit on its equal-token run predicts the other runs' steps to a few percent."""
    from suite.balance.validate import emulation_error

    e = emulation_error(pd.read_csv(REF / "results" / "training_ranks.csv"), 0.05)
    assert e is not None and e["runs"] >= 2 and 0 < e["value"] < 10
