"""balance: trace-driven simulation of every registry policy on the run's measured step costs.

The primary evidence for claims C4-C9 and the policy comparison of the report's "Beyond the
paper" section. Policies are planned (plan_steps: the Plan the trainer
runs) and costed (simulate_plan) on the same corpus draws with the same plan seeds (common random
numbers), repeated over independent plan seeds; a claim's value is the mean over seeds of its
per-seed value (a gain compares the same seed's runs: paired), its interval the 95% percentile
interval of a hierarchical bootstrap that also resamples the sweep, refits the cost and re-tunes
dual (table balance_bootstrap; where the run has no fitted sweep, the 95% t-interval across
seeds, which a re-measured sweep moves beyond: reports/reference/h200/stability-5753865). Step cost: the run's shape sweep of the real model
(table shapes_sweep) in the physical form a + c*B + b*B*S + d*B*S^2 (the costmodel experiment's
costmodel_quadratic; fitted here from shapes_sweep where that table is absent; where the sweep
timed the optimizer apart, fitted here to step_s - optimizer_s, with the optimizer charged once a
step: a policy that runs several micro-batches a rank pays it once, as a real step does:
sweep_step_model); the policies' budgets (M_mem, the power law's p) come from costmodel_fit and
dual's s_cross is tuned on the step model per mix on a 60-point geometric grid
(runs.tune_dual; its seed differs from the evaluation seeds).
Per-sample noise: the CV of the sweep's repeats around each shape's median, scaled to one sample
(validate.noise_cv_from_sweep;
0.25-0.83% in three H200 quick runs of the 30-block model: one GPU's repeat jitter, not
GPU-to-GPU spread, which one GPU cannot measure); NOISE_CV = 5% (assumed) where the run has no
repeated sweep or uses the analytic model. Without costmodel_fit: the analytic Wan-14B-on-H200
model (and every condition says so); ctx.options["balance_cost"] = "analytic" forces it (a CPU
sweep of a tiny model is not attention-bound). The runs are simulated in up to
ctx.options["balance_workers"] processes (default: the machine's cores, at most 16); the tables
do not depend on it.
Validation (not judged): where the run also has the emulated training trace (training_ranks),
the simulator's error on its held-out step times (suite.balance.validate.emulation_error).

Runs (suite.experiments.balance.runs), per profile (PROFILES: steps, plan seeds, comparison
steps at 16 / 1024 ranks, scaling-sweep rank-steps):
    claims, own policies (equal-token, dual, global), every plan seed: default mix at 8 and 16
    ranks, noisy and (16) noise-free ("cost"); long-video mix at 16 ranks (C9); C7 is judged on
    the 8-rank runs' own plans. Scaling sweep 32 ... 1024 ranks on the default mix, seed 0,
    scale_steps(R) steps (about `rank_steps` rank-steps: 50 steps at 1024 ranks in quick).
    comparison, every registry policy (own and peers), plan seed 0: the claim runs of the
    default and long-video mix at 16 ranks and the sweep's 1024-rank run, their first n steps
    (a registry row's max_ranks caps it, with its reason; the cpu profile leaves out the rows
    whose planner is slow, for CI's time). Rank sweep, every registry policy, plan seed 0, default mix, at 8 ... 1024
    ranks: the comparison's 16-rank steps, fewer at many ranks (about `rank_steps`
    rank-steps: runs.scale_steps; quick: 300 steps up to 64 ranks, 31 at 1024).
    cpu    1000 steps x 3 seeds; comparison 200 / 12 steps; sweep 8,000 rank-steps
    quick  1000 steps x 5 seeds; comparison 300 / 16 steps; sweep 32,000 rank-steps
    full   2000 steps x 10 seeds; comparison 2000 / 100 steps; sweep 64,000 rank-steps
Tables:
    balance_ranks    policy, mix, ranks, noise, step, rank, S, B, tokens, compute_s (8/16 ranks,
                     seed 0, the first RANK_ROWS_STEPS steps)
    balance_steps    policy, mix, ranks, noise, draw, step, step_s, tokens, max_s, mean_s, rank_cv
                     (claim runs)
    balance_buckets  policy, mix, S, count, share, B (each bucket policy's batch sizes)
    balance_setup    one row per policy and mix: m_mem, m_comp, p, s_cross, cost_source,
                     step_model, noise_cv, noise_source, a, b, optimizer_s
    balance_planner  policy, ranks, mix, noise, draw, planner_ms (plan build time per step, this
                     machine, one core; claim runs)
    balance_compare  policy, mix, ranks, steps, draw, rank_cv, rank_cv_p99, maxmean,
                     maxmean_p99, bubble, step_cv, throughput, planner_ms, step_s_mean (the
                     comparison: one row per policy and run)
    balance_sweep_compare  the balance_compare columns and gain_pct (throughput gain over
                     the registry's baseline, equal-token, at the same ranks; %) for the
                     rank sweep (mix default)
    balance_bootstrap  replicate, claim, metric, value, baseline, p, m_mem, s_cross, noise_cv: the
                     hierarchical bootstrap of the claim metrics (bootstrap module; REPLICATES
                     per profile: cpu 8 of 200 steps, quick 200 and full 400 of the profile's
                     steps, one plan seed each), whose percentile intervals the claim rows
                     carry; with a fitted sweep and its quadratic step model only
    balance_s_cross  s_cross, throughput, rank_cv, gain_pct, chosen, p: dual's fine tuning grid
                     on the default mix (16 ranks, the tuner's seed) with the gain over equal-token
In balance_ranks a rank of several lengths has S = 0.
Time on the 2-core CPU machine with the H200 reference tables: see docs/perf-notes.md.

The package, one module per job:
    __init__    profiles, the cost and noise the runs read, run (writes the tables)
    runs        the simulations: claim runs, comparison, rank sweep, dual's s_cross tuning
    bootstrap   the hierarchical bootstrap's replicates (balance_bootstrap, balance_s_cross)
    summary     summarize: the claim rows C4-C9 from the tables alone
    compare     every policy side by side, the balancing targets, recommendations (the report's
                "Beyond the paper" section draws them)
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from suite.balance.costmodel import CostModel, default_cost_model
from suite.balance.registry import POLICIES, names
from suite.balance.simulator import NOISE_CV
from suite.experiments.balance.runs import _mixes, simulate_tables
from suite.experiments.balance.summary import summarize
from suite.rundir import RunContext

NAME = "balance"
NEEDS = "cpu"
# how its tables were obtained (suite.evidence): plans costed by this run's step-model fit
EVIDENCE = {"balance_steps": "simulated@costmodel_fit", "balance_ranks": "simulated@costmodel_fit"}
# seconds on one GPU node (reproduce --budget defers it when they do not fit): the runs measured
# there (16 cores: 10-26 / 79 s) plus the bootstrap, from its measured 11.4-24.9 s for quick's 60
# replicates of 1000 steps on 8 workers (H100 and H200 nodes, 85dc565), since cut to 0.46x a
# replicate (one sort per epoch plan, one corpus draw per tuning grid): 17-38 s for 200 on 8
# workers, up to half that on 16; four times that for full's 400 x 2000
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
        f"balance: claims on {', '.join(names(own=True))} with {source}{sim}, {steps} steps x {draws} plan "
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
