"""Trace-driven simulator validation (suite.balance.validate) on synthetic and reference traces."""

from pathlib import Path

import numpy as np
import pandas as pd

from suite.balance.validate import error_summary, noise_cv_from_sweep, step_errors, validate

REF = Path(__file__).resolve().parents[1] / "reports" / "reference" / "h200"


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


def _trace(a, b, p, cv, steps=12, ranks=8, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for run in ("default/equal-token/wan", "default/dual/wan"):
        for step in range(steps):
            S = rng.choice([1000, 2000, 4000, 16000], ranks)
            B = np.maximum(1, 64000 // S)
            t = a + b * B * S.astype(float) ** p * rng.gamma(B / cv**2, cv**2 / B)
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
    assert set(res["model"]) == {"costmodel_fit", "costmodel_fit_calibrated", "refit"}
    assert len(res) == 3 * 2 * 12
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
    errs = step_errors(tables, draws=400)
    committed = pd.read_csv(REF / "validation" / "errors.csv")
    held = committed[committed.run == "held-out runs"].set_index("model")["mape_pct"]
    for model, v in errs.items():
        assert abs(v - held[model]) < 1e-3 * max(1, v), model
    assert errs["refit"] < 10
