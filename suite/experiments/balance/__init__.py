"""balance: trace-driven simulation of every registry policy on the run's measured step costs.

The primary evidence for claims C4-C9 and for the report's "Beyond the paper" comparison. Policies
are planned (plan_steps: the Plan the trainer runs) and costed (simulate_plan) on the same corpus
draws and plan seeds (common random numbers), over independent plan seeds; a claim's value is the
mean over seeds of its per-seed value (gains paired by seed), its interval the 95% percentile
interval of a hierarchical bootstrap that also resamples the sweep, refits the cost and re-tunes
dual (balance_bootstrap; without a fitted sweep, the t-interval across seeds). Step cost: the
run's shape sweep in the physical form a + c*B + b*B*S + d*B*S^2 (costmodel_quadratic, else fitted
here from shapes_sweep; an optimizer timed apart is charged once a step: sweep_step_model). The
budgets (M_mem, the power law's p) come from costmodel_fit; dual's s_cross is tuned on the step
model per mix on a 60-point geometric grid (runs.tune_dual, with a seed of its own). Per-sample
noise: the CV of the sweep's repeats around each shape's median, scaled to one sample
(validate.noise_cv_from_sweep): one GPU's repeat jitter, not GPU-to-GPU spread; NOISE_CV
(assumed) where the run has no repeated sweep. Without costmodel_fit, or with
ctx.options["balance_cost"] = "analytic", the analytic Wan-14B-on-H200 model, and every condition
says so.

Runs (runs.py; sizes per profile in PROFILES): the claim runs of the own policies (equal-token,
dual, global) at 8 and 16 ranks on the default mix and at 16 on the long-video mix (C9), every plan
seed; the comparison of every registry policy (plan seed 0) at 16 and 1024 ranks; a rank sweep
8 ... 1024 at about `rank_steps` rank-steps. A registry row's max_ranks caps it, with its reason.
The runs go to up to ctx.options["balance_workers"] processes; the tables do not depend on it.

Tables: balance_ranks (per rank-batch, seed 0, the first steps; S = 0 for a rank of several
lengths), balance_steps (per step of the claim runs), balance_buckets (each bucket policy's batch
sizes), balance_setup (one row per policy and mix: budgets, cost and noise sources),
balance_planner (plan build time per step), balance_compare and balance_sweep_compare (the
comparison and the rank sweep, one row per policy and run), balance_bootstrap (the bootstrap's
replicates: REPLICATES per profile) and balance_s_cross (dual's tuning grid with its gain over
equal-token).

One module per job: __init__ (profiles, the cost and noise the runs read, run), runs (the
simulations and dual's tuning), bootstrap, summary (the claim rows C4-C9 from the tables alone),
compare (every policy side by side, the report's "Beyond the paper").
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from suite.balance.costmodel import CostModel, default_cost_model
from suite.balance.registry import POLICIES, names
from suite.balance.simulator import NOISE_CV
from suite.experiments.balance.runs import CLAIM_POLICIES, _mixes, simulate_tables
from suite.experiments.balance.summary import summarize
from suite.rundir import RunContext

NAME = "balance"
NEEDS = "cpu"
# how its tables were obtained (suite.evidence): plans costed by this run's step-model fit
EVIDENCE = {"balance_steps": "simulated@costmodel_fit", "balance_ranks": "simulated@costmodel_fit"}
# seconds on one GPU node, the runs and the bootstrap together (reproduce --budget defers it when
# they do not fit); docs/perf-notes.md gives what a replicate costs
SECONDS = {"quick": 60, "full": 250}
__all__ = ["NAME", "NEEDS", "SECONDS", "run", "summarize"]  # the experiment contract

# profile -> (steps, plan seeds, comparison steps at 16 and 1024 ranks, sweep rank-steps,
# policies the comparison leaves out)
KK = names(slow_planner=True)  # the registry's rows whose planner is too slow for CI
KK_REASON = (
    "Karmarkar-Karp plans a 16-rank step in ~9 ms on one core: the quick and full profiles run it"
)
PROFILES = {
    "cpu": (1000, 3, (200, 12), 8_000, KK),
    "quick": (1000, 5, (300, 16), 32_000, ()),
    "full": (2000, 10, (2000, 100), 64_000, ()),
}


def load_cost(ctx: RunContext | None) -> tuple[CostModel, str]:
    """The fitted model from costmodel_fit, else the analytic default (with its source)."""
    from suite.balance.fit_table import model_from_fit

    try:
        fit = ctx.run.read_table("costmodel_fit") if ctx is not None else None
    except FileNotFoundError:
        fit = None
    if fit is not None:
        m = model_from_fit(fit)
        return m, m.source
    m = default_cost_model()
    return m, "analytic Wan-14B on H200 (costmodel_fit absent)"


def sweep_step_model(run):
    """(the run's step model in the physical form, the optimizer seconds a step pays once).
    Where the sweep timed its optimizer apart (shapes_sweep.optimizer_s), the form is fitted here
    to step_s - optimizer_s, what each micro-batch costs, and the optimizer is charged once per
    simulated step; else it is costmodel_quadratic (the whole step, optimizer included, for each
    micro-batch), else fitted here from shapes_sweep; None without either, or where the sweep
    cannot determine the form."""
    from suite.balance.costmodel import fit_quadratic_cost
    from suite.experiments.costmodel import run_quadratic

    sw = _sweep(run)
    opt = sw["optimizer_s"] if sw is not None and "optimizer_s" in sw else None
    apart = opt is not None and bool(np.isfinite(opt).all() and (opt < sw["step_s"]).all())
    if not apart and (q := run_quadratic(run)) is not None:
        return q, 0.0
    if sw is None:
        return None, 0.0
    t, src = (sw["step_s"] - opt, "optimizer apart") if apart else (sw["step_s"], "whole steps")
    try:
        q = fit_quadratic_cost(sw["B"], sw["S"], t, source=f"shapes_sweep quadratic, {src}")
    except (KeyError, ValueError):
        return None, 0.0
    return q, float(np.median(opt)) if apart else 0.0


def run(ctx: RunContext) -> dict[str, pd.DataFrame]:
    analytic = ctx.options.get("balance_cost", "fit") == "analytic"
    if analytic:  # e.g. CPU runs: see module doc
        cost, source = default_cost_model(), "analytic Wan-14B on H200 (option balance_cost)"
    else:
        cost, source = load_cost(ctx)
    optimizer_s = 0.0
    if not analytic and "costmodel_fit" in source:
        q, optimizer_s = sweep_step_model(ctx.run)  # the sweep's, where there is one
        cost = cost.with_quadratic(q)
    noise_cv, noise_source = (NOISE_CV, "assumed") if analytic else sweep_noise(ctx.run)
    steps, draws, compare, rank_steps, skip = PROFILES.get(ctx.profile, PROFILES["quick"])
    draws = int(ctx.options.get("balance_draws", draws))
    sim = f"; steps simulated with {cost.step_model().source}" if cost.quadratic else ""
    ctx.log(
        f"balance: claims on {', '.join(CLAIM_POLICIES)} with {source}{sim}, {steps} steps x {draws} plan "
        f"seeds, 8..1024 ranks, per-sample noise CV {noise_cv:.2%} ({noise_source}); "
        f"comparison of {len(POLICIES) - len(skip)} registry policies, "
        f"{compare[0]} steps at 16 ranks and {compare[1]} at 1024"
        + (f" ({', '.join(skip)} left out)" if skip else "")
    )

    def progress(i, n):
        ctx.log(f"balance: run {i}/{n} simulated")

    tables = simulate_tables(
        cost, source, steps=steps, seed=ctx.seed, draws=draws, progress=progress,
        compare_steps=compare, rank_steps=rank_steps, skip=skip, skip_reason=KK_REASON,
        noise_cv=noise_cv, noise_source=noise_source, workers=workers(ctx),
        optimizer_s=optimizer_s,
    )  # fmt: skip
    if cost.quadratic and "costmodel_fit" in source:
        tables |= uncertainty_tables(ctx, cost, steps)
    return tables


def uncertainty_tables(ctx: RunContext, cost: CostModel, steps: int) -> dict[str, pd.DataFrame]:
    """balance_bootstrap (the hierarchical bootstrap's replicates: the bootstrap module) and
    balance_s_cross (C8's gain against dual's s_cross on the full-data fit's fine grid)."""
    import time

    from suite.experiments.balance.bootstrap import REPLICATES, bootstrap_table, gain_by_s_cross

    sweep, fit = _sweep(ctx.run, marked=True), ctx.run.read_table("costmodel_fit")
    fit_row = fit[fit["variant"] == "free"].iloc[0].to_dict()
    n, short = REPLICATES.get(ctx.profile, REPLICATES["quick"])
    n = int(ctx.options.get("balance_replicates", n))
    steps = short or steps
    mixes = _mixes(ctx.seed)
    t0 = time.perf_counter()
    boot = bootstrap_table(sweep, fit_row, mixes, steps, ctx.seed, n, workers(ctx))
    ctx.log(
        f"balance: {n} bootstrap replicates of {steps} steps in {time.perf_counter() - t0:.1f} s"
    )
    return {"balance_bootstrap": boot, "balance_s_cross": gain_by_s_cross(cost, mixes["default"])}


def workers(ctx: RunContext) -> int:
    return int(ctx.options.get("balance_workers", min(16, os.cpu_count() or 1)))


def sweep_noise(run) -> tuple[float, str]:
    """(per-sample noise CV, its source): from the run's repeated shape sweep, else NOISE_CV."""
    from suite.balance.validate import noise_cv_from_sweep

    sw = _sweep(run)
    if sw is None or sw.empty or sw.groupby(["B", "S"]).size().max() < 2:
        return NOISE_CV, "assumed: no repeated shape sweep"
    cv = noise_cv_from_sweep(sw)
    if not cv > 0:
        return NOISE_CV, "assumed: the sweep's repeats are identical"
    n = int((sw.groupby(["B", "S"]).size() >= 2).sum())
    return cv, f"measured: shape sweep repeats, median over {n} shapes"


def _sweep(run, marked: bool = False) -> pd.DataFrame | None:
    """The sweep rows the cost fits take (launch-bound shapes left out: costmodel.fitted_sweep),
    so the step model and the noise price the model's work, not the launcher's; marked=True:
    every row, with column `fit` saying which (the bootstrap resamples both kinds of shape and
    fits memory on every row, as the full-data fit does)."""
    from suite.experiments.costmodel import fitted_sweep

    try:
        sweep = run.read_table("shapes_sweep")
    except FileNotFoundError:
        return None
    if not marked:
        return fitted_sweep(sweep)
    return sweep.assign(fit=sweep.index.isin(fitted_sweep(sweep).index))


def run_cost(root) -> CostModel:
    """The cost a run folder's balance experiment simulates with: costmodel_fit's free row (p,
    M_mem, the planners' power law), the sweep's physical form as the step model, and the
    optimizer charged once a step where the sweep timed it apart (sweep_step_model); M_comp left
    unset, so dual tunes s_cross on the data it is given, as this experiment tunes it per mix;
    source names the run (fit_table.run_name). `python tools/run_cost.py RUN` saves it as the
    run's cost.json, which `simulate`/`forecast --cost RUN` read."""
    import math
    from dataclasses import replace
    from pathlib import Path

    from suite.balance.fit_table import model_from_fit, run_name
    from suite.rundir import RunDir

    run = RunDir(Path(root))
    try:
        fit = run.read_table("costmodel_fit")
    except FileNotFoundError:
        raise ValueError(f"{root}: no results/costmodel_fit.csv (not a fitted run)") from None
    cost = model_from_fit(fit).with_quadratic(sweep_step_model(run)[0])
    source = f"{run_name(root)}: {cost.source}"
    return replace(
        cost, optimizer_s=sweep_step_model(run)[1], m_comp=math.inf, s_cross=math.nan, source=source
    )
