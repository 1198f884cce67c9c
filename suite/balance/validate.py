"""Trace-driven validation of the cluster simulator against a measured run.

Input: a run's `training_ranks` table (one row per step and rank: B, S, measured compute_s of that
rank's batch, optimizer_s, collective_s, the composed step_s = max rank compute + collective +
optimizer), its `costmodel_fit` and its `shapes_sweep` (for the noise model). For every measured
step the same batches (B, S per rank) are replayed through the simulator's step model
(suite.balance.simulator.noisy: rank compute = fixed part + variable part x the mean of B per-sample
Gamma factors), `draws` Monte-Carlo times; the predicted step time is the mean over draws of
max over ranks of the simulated compute, plus the step's collective and optimizer times (taken from
the row: they are not what the simulator is asked to predict). Error: |predicted - measured| /
measured per step, and its mean (MAPE) per cost model and run.

Cost models (the sweep of a run may use another layer count than its training runs, so the fit's
absolute scale need not carry over; each variant says what it assumes):
- `costmodel_fit`: the run's fit a + b*B*S^p as is, scaled by layers_train / layers_fit
  (both parts; a model of identical blocks);
- `costmodel_fit_calibrated`: the fit's shape (p and a/b) with one scale factor, the ratio of measured
  to predicted compute summed over the calibration run's rank-batches (the baseline run; what the
  online calibration of the global policy does); the other runs are held out;
- `refit`: a + b*B*S^p fitted (suite.balance.costmodel.fit_cost) to the calibration run's
  rank-batches alone, predicting the other runs;
- `refit_quadratic`: a + c*B + b*B*S + d*B*S^2 (per-step, per-sample, linear and quadratic
  attention token work; suite.balance.costmodel.fit_quadratic_cost, non-negative least squares)
  fitted to the calibration run's rank-batches alone, predicting the other runs, as `refit`.
Noise: per-sample CV from the sweep's repeats: per shape the relative deviation of each repeat's
variable time (t - a) from the shape's median, times sqrt(B) (the mean of B per-sample factors has
CV cv/sqrt(B)); the median over shapes.
Rank-level noise (opt-in: `rank_noise=True`, CLI `--rank-noise`; off by default), for timing
jitter of whole rank-batches, which per-sample noise cannot stand for (it does not shrink with B):
every replayed rank is also multiplied by one Gamma(mean 1, CV c_rank) factor
(noisy(..., rank_noise_cv)). c_rank is fitted per cost model on the calibration run's
rank-batches alone: with r = measured / predicted compute and w = 1 - fixed_s / predicted (the
variable fraction, which the per-sample noise scales),
    c_rank^2 = max(0, var(r / mean(r)) - mean(w^2 * noise_cv^2 / B))   (var with ddof 1);
r is divided by its mean so that a model's scale error is not taken for noise; the residual also
holds the model's shape misfit on that run, which the term then absorbs: with a wrong cost model
c_rank is mostly misfit recast as noise, and a replay with it can look right for the wrong reason
(it is off by default for that reason; attrs["rank_noise_cv_fitted"] always holds the estimate).
`costmodel_fit` keeps its as-is scale but takes its c_rank from the calibration run too.
Check, model-free: `within_shape_cv` = the pooled CV of the calibration run's compute among its
rank-batches of one (B, S). Rank-level jitter shows there as well; a cost model's misfit does not.
If it is far below c_rank, the term is standing in for misfit.
Rows of micro-batched policies (registry trait: mixed sequence lengths per rank, e.g. global) are
left out: their rank rows do not carry per-sample lengths.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from suite.balance.registry import baseline as baseline_policy
from suite.balance.registry import trait
from suite.balance.simulator import noisy

BASELINE_RUN = "default/equal-token/wan"
RESULT_COLUMNS = [
    "model",
    "run",
    "step",
    "ranks",
    "held_out",
    "measured_step_s",
    "predicted_step_s",
    "measured_compute_max_s",
    "predicted_compute_max_s",
    "signed_error_pct",
    "error_pct",
    "rank_noise_cv",
]


def noise_cv_from_sweep(sweep: pd.DataFrame, fixed_s: float = 0.0) -> float:
    """Per-sample CV of compute around the per-shape median, from repeated sweep measurements."""
    cvs = []
    for (B, _S), d in sweep.groupby(["B", "S"]):
        t = d["step_s"].to_numpy(float) - fixed_s
        med = float(np.median(t))
        if len(t) >= 2 and med > 0:
            cvs.append(float(np.std(t / med - 1, ddof=1)) * np.sqrt(float(B)))
    return float(np.median(cvs)) if cvs else 0.0


class _Scaled:
    """a + b*B*S^p times a factor (both parts), as the simulator's cost interface."""

    def __init__(self, cost, factor: float) -> None:
        self.cost, self.factor = cost, float(factor)
        self.fixed_s = float(cost.a) * self.factor

    def predict(self, B, S) -> np.ndarray:
        return np.asarray(self.cost.predict(B, S), float) * self.factor


def rank_noise_cv(calib: pd.DataFrame, cost, noise_cv: float) -> float:
    """Rank-level CV of compute around `cost` on the rank-batches `calib` (see the module doc).

    It is the residual scatter beyond per-sample noise, so it measures timing jitter only when
    `cost` has the right shape: a cost model that misfits the shapes (e.g. a + b*B*S^p on batches
    whose cost is a + c*B + b*B*S + d*B*S^2) leaves a residual that this estimate absorbs as
    "noise". Compare with within_shape_cv, which a misfit does not enter.
    """
    B = calib["B"].to_numpy(float)
    pred = np.asarray(cost.predict(calib["B"].to_numpy(np.int64), calib["S"].to_numpy(np.int64)))
    r = calib["compute_s"].to_numpy(float) / pred
    if len(r) < 2:
        return 0.0
    w = 1 - float(cost.fixed_s) / pred
    var = float(np.var(r / r.mean(), ddof=1)) - float(np.mean(w**2 * noise_cv**2 / B))
    return float(np.sqrt(max(var, 0.0)))


def within_shape_cv(calib: pd.DataFrame) -> float:
    """Pooled CV of compute_s around its (B, S) mean over shapes seen >= 2 times (nan if none)."""
    g = calib.groupby(["B", "S"])["compute_s"]
    n = g.transform("size")
    dev = (calib["compute_s"] / g.transform("mean") - 1)[n > 1]
    dof = len(dev) - int((g.size() > 1).sum())
    return float(np.sqrt((dev**2).sum() / dof)) if dof > 0 else float("nan")


def _trace(ranks: pd.DataFrame) -> pd.DataFrame:
    r = ranks.copy()
    if "run" not in r.columns:
        r["run"] = r["policy"].astype(str)
    if "policy" in r.columns:  # micro-batched rows mix lengths on a rank (module doc)
        r = r[~r["policy"].map(lambda p: bool(trait(p, "micro_batched", False)))]
    for col in ("collective_s", "optimizer_s"):
        if col not in r.columns:
            r[col] = 0.0
    return r


def cost_models(ranks: pd.DataFrame, fit: pd.DataFrame, baseline: str = BASELINE_RUN) -> dict:
    """{name: cost with predict(B, S) and fixed_s} for the four variants (see the module doc)."""
    from suite.balance.costmodel import fit_cost, fit_quadratic_cost
    from suite.balance.fit_table import model_from_fit

    cm = model_from_fit(fit)
    row = fit[fit["variant"] == "free"].iloc[0]
    r = _trace(ranks)
    layers_run = float(r["layers"].iloc[0]) if "layers" in r.columns else np.nan
    layers_fit = float(row["layers"]) if "layers" in fit.columns else np.nan
    ratio = layers_run / layers_fit if np.isfinite(layers_run) and np.isfinite(layers_fit) else 1.0
    base = r[r["run"] == baseline] if (r["run"] == baseline).any() else r
    factor = float(base["compute_s"].sum() / np.sum(cm.predict(base["B"], base["S"])))
    out = {"costmodel_fit": _Scaled(cm, ratio), "costmodel_fit_calibrated": _Scaled(cm, factor)}
    try:  # needs >= 4 shapes over >= 3 sequence lengths in the calibration run
        out["refit"] = _Scaled(
            fit_cost(
                base["B"].to_numpy(float),
                base["S"].to_numpy(float),
                base["compute_s"].to_numpy(float),
                source=f"refit on {baseline}",
            ),
            1.0,
        )
    except ValueError:
        pass
    try:  # needs >= 4 shapes over >= 3 sequence lengths, B varying, in the calibration run
        out["refit_quadratic"] = fit_quadratic_cost(
            base["B"].to_numpy(float),
            base["S"].to_numpy(float),
            base["compute_s"].to_numpy(float),
            source=f"quadratic refit on {baseline}",
        )
    except ValueError:
        pass
    return out


def replay(
    trace: pd.DataFrame, cost, noise_cv: float, rank_cv: float = 0.0, draws: int = 400, seed=0
) -> list[dict]:
    """Each measured (run, step) of `trace` (_trace rows) replayed through the simulator's step
    model (`noisy`) `draws` times: predicted step = mean over draws of max over ranks + the
    row's collective + optimizer. One dict per step (run, step, ranks, measured/predicted step
    and compute max, signed and absolute error in %)."""
    rng = np.random.default_rng(seed)
    rows = []
    for (run, step), d in trace.groupby(["run", "step"], sort=True):
        B, S = d["B"].to_numpy(np.int64), d["S"].to_numpy(np.int64)
        base = np.broadcast_to(cost.predict(B, S), (draws, len(d)))
        n = np.broadcast_to(B, (draws, len(d)))
        comp = noisy(rng, base, cost.fixed_s, n, noise_cv, rank_cv)
        pred_max = float(comp.max(axis=1).mean())
        extra = float(d["collective_s"].max() + d["optimizer_s"].max())
        measured = float(d["compute_s"].max()) + extra
        pred = pred_max + extra
        rows.append(
            {
                "run": run,
                "step": int(step),
                "ranks": len(d),
                "measured_step_s": measured,
                "predicted_step_s": pred,
                "measured_compute_max_s": float(d["compute_s"].max()),
                "predicted_compute_max_s": pred_max,
                "signed_error_pct": 100 * (pred - measured) / measured,
                "error_pct": 100 * abs(pred - measured) / measured,
            }
        )
    return rows


def emulation_error(
    ranks: pd.DataFrame,
    noise_cv: float,
    *,
    draws: int = 200,
    seed: int = 0,
    baseline: str = BASELINE_RUN,
    resamples: int = 2000,
) -> dict | None:
    """The simulator's error on the emulated runs' step times, with a model of the model the
    emulation ran: a + c*B + b*B*S + d*B*S^2 fitted (fit_quadratic_cost) to the calibration
    run's own rank-batches (its blocks, dtype, checkpointing), predicting the other runs' steps
    (held out). {value: mean over held-out steps of |sim / emulated - 1| (%), ci_low, ci_high:
    95% percentile bootstrap over those steps (seeded), steps, runs, baseline}; the baseline is
    `baseline`, else the first equal-token run; None where the trace cannot determine the form
    or holds no other run."""
    from suite.balance.costmodel import fit_quadratic_cost

    r = _trace(ranks)
    r = r[r["S"] > 0] if "S" in r.columns else r
    if not (r["run"] == baseline).any() and "policy" in r.columns:  # runs named otherwise
        eq = sorted(r.loc[r["policy"] == baseline_policy(), "run"].unique())
        baseline = eq[0] if eq else baseline
    if r.empty or not (r["run"] == baseline).any() or (r["run"] != baseline).sum() == 0:
        return None
    base = r[r["run"] == baseline]
    try:
        cost = fit_quadratic_cost(
            base["B"].to_numpy(float), base["S"].to_numpy(float), base["compute_s"].to_numpy(float)
        )
    except ValueError:
        return None
    rows = replay(r[r["run"] != baseline], cost, noise_cv, 0.0, draws, seed)
    err = np.array([x["error_pct"] for x in rows])
    boot = np.random.default_rng(seed).choice(err, (resamples, len(err))).mean(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return {
        "value": float(err.mean()),
        "ci_low": float(lo),
        "ci_high": float(hi),
        "steps": len(err),
        "runs": int(r.loc[r["run"] != baseline, "run"].nunique()),
        "baseline": baseline,
    }


def validate(
    ranks: pd.DataFrame,
    fit: pd.DataFrame,
    sweep: pd.DataFrame | None = None,
    *,
    noise_cv: float | None = None,
    draws: int = 400,
    seed: int = 0,
    baseline: str = BASELINE_RUN,
    rank_noise: bool = False,
) -> pd.DataFrame:
    """Predicted vs measured step time per (cost model, run, step): RESULT_COLUMNS.

    rank_noise=False (the default) replays with the per-sample noise alone; True adds the
    rank-level term, which also absorbs the cost model's misfit (module doc). attrs: noise_cv,
    rank_noise_cv ({model: c_rank used}, 0 when off), rank_noise_cv_fitted ({model: c_rank
    estimate}, also when off), within_shape_cv.
    """
    r = _trace(ranks)
    if r.empty:
        return pd.DataFrame(columns=RESULT_COLUMNS)
    models = cost_models(ranks, fit, baseline)
    if noise_cv is None:
        noise_cv = noise_cv_from_sweep(sweep, float(fit["a"].iloc[0])) if sweep is not None else 0.0
    calib = r[r["run"] == baseline] if (r["run"] == baseline).any() else r  # as cost_models
    fitted = {name: rank_noise_cv(calib, cost, noise_cv) for name, cost in models.items()}
    rank_cvs = {name: fitted[name] if rank_noise else 0.0 for name in models}
    rows = []
    for name, cost in models.items():
        for row in replay(r, cost, noise_cv, rank_cvs[name], draws, seed):
            rows.append(
                {
                    "model": name,
                    **row,
                    "held_out": name == "costmodel_fit" or row["run"] != baseline,
                    "rank_noise_cv": rank_cvs[name],
                }
            )
    out = pd.DataFrame(rows, columns=RESULT_COLUMNS)
    out.attrs["noise_cv"] = noise_cv
    out.attrs["rank_noise_cv"] = rank_cvs
    out.attrs["rank_noise_cv_fitted"] = fitted
    out.attrs["within_shape_cv"] = within_shape_cv(calib)
    return out


def refit_table(models: dict) -> pd.DataFrame:
    """The coefficients of the calibration-run refits in `models` (from cost_models)."""
    rows = []
    if "refit" in models:
        c = models["refit"].cost
        rows.append(dict(model="refit", form="a + b*B*S^p", a=c.a, b=c.b, p=c.p, r2=c.r2, n=c.n))
    if "refit_quadratic" in models:
        q = models["refit_quadratic"]
        rows.append(
            dict(
                model="refit_quadratic",
                form="a + c*B + b*B*S + d*B*S^2",
                a=q.a,
                c=q.c,
                b=q.b,
                d=q.d,
                r2=q.r2,
                resid_cv=q.resid_cv,
                n=q.n,
            )
        )
    cols = ["model", "form", "a", "c", "b", "d", "p", "r2", "resid_cv", "n"]
    return pd.DataFrame(rows, columns=cols)


def calibration_shapes(ranks: pd.DataFrame, models: dict, baseline: str = BASELINE_RUN):
    """Per (B, S) of the calibration run: rank-batches, mean measured compute and its ratio to
    each model's prediction (where a model misfits the shapes, the ratio moves with the shape)."""
    r = _trace(ranks)
    calib = r[r["run"] == baseline] if (r["run"] == baseline).any() else r
    g = calib.groupby(["B", "S"], sort=True)["compute_s"]
    out = pd.DataFrame({"rank_batches": g.size(), "compute_s": g.mean()}).reset_index()
    for name, cost in models.items():
        out[f"ratio_{name}"] = out["compute_s"] / np.asarray(cost.predict(out["B"], out["S"]))
    return out


def error_summary(result: pd.DataFrame) -> pd.DataFrame:
    """Mean absolute percentage error per (model, run) and over held-out steps per model."""
    cols = ["model", "run", "steps", "mape_pct", "bias_pct", "max_error_pct", "rank_noise_cv"]
    if result.empty:
        return pd.DataFrame(columns=cols)
    if "rank_noise_cv" not in result.columns:  # a result from before the rank-level term
        result = result.assign(rank_noise_cv=0.0)
    g = result.groupby(["model", "run"], sort=True)
    agg = dict(
        steps=("step", "size"),
        mape_pct=("error_pct", "mean"),
        bias_pct=("signed_error_pct", "mean"),
        max_error_pct=("error_pct", "max"),
        rank_noise_cv=("rank_noise_cv", "first"),
    )
    per_run = g.agg(**agg).reset_index()
    held = result[result["held_out"]].groupby("model", sort=True).agg(**agg).reset_index()
    held["run"] = "held-out runs"
    return pd.concat([per_run, held[per_run.columns]], ignore_index=True)


def step_errors(
    tables: dict[str, pd.DataFrame], draws: int = 200, rank_noise: bool = False
) -> dict[str, float]:
    """{cost model: MAPE (%) over its held-out steps} of a run's tables ({} without them)."""
    ranks, fit = tables.get("training_ranks"), tables.get("costmodel_fit")
    if ranks is None or fit is None or ranks.empty or fit.empty:
        return {}
    res = validate(ranks, fit, tables.get("shapes_sweep"), draws=draws, rank_noise=rank_noise)
    if res.empty or (res["held_out"] & ~res["model"].eq("costmodel_fit")).sum() == 0:
        return {}
    held = res[res["held_out"]]
    return {m: float(d["error_pct"].mean()) for m, d in held.groupby("model", sort=True)}


def main(argv: list[str] | None = None) -> int:
    """python -m suite.balance.validate RUN_DIR [--out DIR]: writes validation.csv, errors.csv,
    refits.csv (the calibration-run refits' coefficients) and calibration_shapes.csv."""
    import argparse
    from pathlib import Path

    from suite.rundir import RunDir

    ap = argparse.ArgumentParser(
        prog="python -m suite.balance.validate", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "run", help="a run folder with results/training_ranks, costmodel_fit, shapes_sweep"
    )
    ap.add_argument("--out", help="output folder (default RUN/validation)")
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument(
        "--rank-noise",
        action="store_true",
        help="also draw a rank-level noise factor per replayed rank, its CV fitted to the "
        "calibration run's residuals (absorbs cost-model misfit; off by default)",
    )
    # the default since the rank-level term became opt-in; accepted so older commands still run
    ap.add_argument(
        "--no-rank-noise", dest="rank_noise", action="store_false", help=argparse.SUPPRESS
    )
    a = ap.parse_args(argv)
    run = RunDir(Path(a.run))
    tables = {k: run.read_table(k) for k in ("training_ranks", "costmodel_fit", "shapes_sweep")}
    res = validate(
        tables["training_ranks"],
        tables["costmodel_fit"],
        tables["shapes_sweep"],
        draws=a.draws,
        rank_noise=a.rank_noise,
    )
    out = Path(a.out or Path(a.run) / "validation")
    out.mkdir(parents=True, exist_ok=True)
    res.round(6).to_csv(out / "validation.csv", index=False)
    summ = error_summary(res)
    summ.round(3).to_csv(out / "errors.csv", index=False)
    models = cost_models(tables["training_ranks"], tables["costmodel_fit"])
    refit_table(models).to_csv(out / "refits.csv", index=False, float_format="%.6g")
    shapes = calibration_shapes(tables["training_ranks"], models)
    shapes.round(6).to_csv(out / "calibration_shapes.csv", index=False)
    print(f"noise_cv (per sample, from the sweep repeats) = {res.attrs['noise_cv']:.4f}")
    ranks_cv = ", ".join(f"{m} {v:.4f}" for m, v in res.attrs["rank_noise_cv_fitted"].items())
    used = "used" if a.rank_noise else "not used; --rank-noise uses it"
    print(f"rank_noise_cv (per rank-batch, fitted on the calibration run; {used}) = {ranks_cv}")
    print(
        "within_shape_cv (calibration run, same (B, S), model-free) = "
        f"{res.attrs.get('within_shape_cv', float('nan')):.4f}"
    )
    print(summ.round(2).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
