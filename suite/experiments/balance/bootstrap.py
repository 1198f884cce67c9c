"""Hierarchical bootstrap of the balance experiment's simulated claims (C4-C9): intervals that
carry what moves a simulated value between runs, not only the plan seeds.

One replicate (`replicate`):
    1. resample the shape sweep: its shapes with replacement, the shapes the cost fits take and
       the launch-bound ones (column `fit`, costmodel.fit_rows on the whole sweep) each among
       themselves, then each drawn shape's repeats with replacement (`resample_sweep`; each drawn
       copy is its own point, its repeats' median);
    2. refit the cost model on it (`refit`) the way the full data were fitted: the power law's p
       (fit_cost) and the step model a + c*B + b*B*S + d*B*S^2 (on step_s - optimizer_s where the
       sweep timed the optimizer apart) on the fitted shapes' copies; M_mem from the memory fit
       over every drawn row, launch-bound shapes included (costmodel.fit_tables fits memory on
       every row: a launch-bound shape's peak memory is the model's), where the run's budget came
       from one (else the run's M_mem); the per-sample noise CV as the median of the drawn fitted
       shapes' own CVs (draw_fit; a resample the fits cannot determine is drawn again). Without
       resampling (`identity_sweep`) a replicate refits the full-data p, M_mem, step model and
       s_cross exactly: the bootstrap is centred on the value it qualifies;
    3. re-tune dual's s_cross on the refitted step model (runs.tune_dual: a 60-point
       geometric grid, each distinct batch table simulated once: a grid, not golden-section
       or Brent, because the throughput is a piecewise-constant sawtooth in s_cross with many
       local maxima, which a bracketing search assumes away);
    4. re-simulate the claim runs (runs.RUNS) of equal-token and dual with a new plan
       seed and noise draw (one draw, the profile's steps) and read the claim metrics as the
       summary does (summary.summarize_draw).
A metric's interval is the 95% percentile interval over the replicates (`summary.intervals`:
Harrell-Davis quantiles; a level read against the equal-token level gets the interval of its
ratio to the replicate's own equal-token level, scaled to the full data's); its value
stays the full-data one (the mean over the plan seeds). The model of the variation: the sweep's
shapes are a sample of the shapes the cost depends on and its repeats a sample of each shape's
timing, so resampling both and refitting gives the spread of what a re-measured sweep would
fit; the plan seed and the noise draw are redrawn in each replicate.
The global policy is not re-simulated (its planner dominates the cost): its alternative rows keep
the t-interval across plan seeds. The tables are plain numpy / pandas / scipy (no torch).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suite.balance.costmodel import fit_cost, fit_memory, fit_quadratic_cost, memory_budget
from suite.balance.registry import names
from suite.balance.simulator import NOISE_CV
from suite.balance.validate import noise_cv_from_sweep

# profile -> (replicates, simulated steps per replicate; None: the profile's claim steps). The
# cpu profile's are few and short, for CI's time: its intervals say how the machinery works, not
# what a run's data support.
REPLICATES = {"cpu": (8, 200), "quick": (200, None), "full": (400, None)}
SEED_OFFSET = 100_000  # replicate r plans with seed + SEED_OFFSET + r: apart from the claim seeds
POLICIES = ("equal-token", "dual")


def resample_sweep(sweep: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """One two-level resample of a shape sweep: shapes (B, S) with replacement, within each
    stratum of column `fit` where there is one (as many fitted and launch-bound shapes as the
    sweep has), then the rows (repeats) of each drawn shape with replacement. Column `copy`
    numbers the drawn shapes, so a shape drawn twice counts twice in the fits; `shape` is the
    drawn shape's index in (B, S) order."""
    groups = [g for _, g in sweep.groupby(["B", "S"], sort=True)]
    strata = {}
    for i, g in enumerate(groups):
        strata.setdefault(_fitted(g), []).append(i)
    out, k = [], 0
    for members in strata.values():
        for i in rng.choice(members, len(members)):
            g = groups[i]
            out.append(g.iloc[rng.integers(0, len(g), len(g))].assign(copy=k, shape=i))
            k += 1
    return pd.concat(out, ignore_index=True)


def identity_sweep(sweep: pd.DataFrame) -> pd.DataFrame:
    """The sweep as one replicate without resampling: every shape once, its repeats as measured."""
    groups = [g for _, g in sweep.groupby(["B", "S"], sort=True)]
    return pd.concat([g.assign(copy=i, shape=i) for i, g in enumerate(groups)], ignore_index=True)


def per_copy(sweep: pd.DataFrame, column: str) -> np.ndarray:
    """The median of `column` over each drawn copy's repeats (order of `copy`)."""
    key = sweep["copy"] if "copy" in sweep else sweep.groupby(["B", "S"]).ngroup()
    return sweep.groupby(key)[column].median().to_numpy(float)


def refit(sweep: pd.DataFrame, fit_row: dict):
    """(CostModel with its quadratic step model, optimizer seconds) refitted on a (resampled)
    sweep; fit_row is the run's costmodel_fit[free] row (capacity, safety, budget source and
    M_mem, s_cross to fall back on). The cost fits take the copies of fitted shapes (column
    `fit`; every copy without it), the memory fit every row."""
    fitted = sweep[sweep["fit"].astype(bool)] if "fit" in sweep else sweep
    cols = ["B", "S", "step_s"] + [c for c in ("optimizer_s",) if c in sweep]
    B, S, t = (per_copy(fitted, c) for c in ("B", "S", "step_s"))
    med = {c: per_copy(fitted, c) for c in cols}
    law = fit_cost(B, S, t, source="bootstrap refit", aggregate=False, loo=False)
    m_mem = float(fit_row["m_mem"])
    if str(fit_row.get("budget_source", "")) == "memory fit" and "peak_mem_bytes" in sweep:
        m0, m1, _ = fit_memory(sweep["B"], sweep["S"], sweep["peak_mem_bytes"])
        m_mem = memory_budget(m0, m1, float(fit_row["capacity_bytes"]), float(fit_row["safety"]))
    opt = med.get("optimizer_s")
    apart = opt is not None and bool(np.isfinite(opt).all() and (opt < t).all())
    work = t - opt if apart else t
    quad = fit_quadratic_cost(B, S, work, source="bootstrap refit quadratic", aggregate=False)
    cost = law.with_budgets(m_mem, float(fit_row["s_cross"])).with_quadratic(quad)
    return cost, float(np.median(opt)) if apart else 0.0


def _fitted(shape_rows: pd.DataFrame) -> bool:
    return "fit" not in shape_rows or bool(shape_rows["fit"].iloc[0])


def shape_noise(sweep: pd.DataFrame) -> np.ndarray:
    """Per shape (in (B, S) order), the per-sample noise CV of its repeats
    (validate.noise_cv_from_sweep of that shape alone; NaN for a shape with one repeat, and for a
    launch-bound one: the experiment's noise is the fitted shapes')."""
    return np.array(
        [
            noise_cv_from_sweep(g) if len(g) >= 2 and _fitted(g) else math.nan
            for _, g in sweep.groupby(["B", "S"], sort=True)
        ]
    )


def draw_fit(sweep: pd.DataFrame, fit_row: dict, rng: np.random.Generator, tries: int = 20):
    """(cost, optimizer seconds, noise CV) refitted on a resample of `sweep`; a resample the fits
    cannot determine (e.g. fewer than 4 distinct shapes) is drawn again, up to `tries` times.
    The noise CV is the median of the drawn shapes' own repeat CVs (shape_noise): a shape's CV
    is one observation of the noise, and resampling its few repeats would bias it to 0 (a
    resample of two repeats is one repeat twice half the time); NOISE_CV (assumed) where no
    shape has repeats, as the experiment does."""

    cvs = shape_noise(sweep)
    for k in range(tries):
        sample = resample_sweep(sweep, rng)
        try:
            cost, opt = refit(sample, fit_row)
        except (ValueError, RuntimeError):  # degenerate resample, or curve_fit did not converge
            if k == tries - 1:
                raise
            continue
        drawn = cvs[sample.groupby("copy")["shape"].first().to_numpy()]
        drawn = drawn[np.isfinite(drawn)]
        return cost, opt, float(np.median(drawn)) if len(drawn) else NOISE_CV


def replicate(sweep: pd.DataFrame, fit_row: dict, mixes: dict, steps: int, seed: int, r: int):
    """Metric rows of replicate r (module doc): claim, metric, value, baseline (the replicate's
    equal-token level, where the metric is a level read against it), replicate, p, m_mem,
    s_cross (dual's, default mix), noise_cv."""
    from suite.experiments.balance.runs import RUNS, _claim_run, _setup, policies
    from suite.experiments.balance.summary import summarize_draw

    rng = np.random.default_rng([seed, r])
    cost, opt_s, noise_cv = draw_fit(sweep, fit_row, rng)
    truth = cost.step_model()
    by_mix = {mix: policies(cost, b, POLICIES) for mix, b in mixes.items()}
    plan_seed = seed + SEED_OFFSET + r
    frames = []
    for mix, R, noisy in RUNS:
        pols = by_mix[mix]
        noise = noise_cv if noisy else 0.0
        frames += _claim_run(
            pols, pols, mixes[mix], truth, mix, R, noise, 1, steps, plan_seed, opt_s
        )[0]
    setup = _setup(cost, "bootstrap", truth, by_mix, noise_cv, "bootstrap", opt_s)
    rows = summarize_draw(pd.concat(frames, ignore_index=True), setup, None, "")
    dual = setup[setup["policy"].isin(names(tunes_s_cross=True)) & (setup["mix"] == "default")]
    return rows[["claim", "metric", "value", "baseline"]].assign(
        replicate=r,
        p=cost.p,
        m_mem=cost.m_mem,
        s_cross=float(dual["s_cross"].iloc[0]),
        noise_cv=noise_cv,
    )


def bootstrap_table(
    sweep: pd.DataFrame,
    fit_row: dict,
    mixes: dict,
    steps: int,
    seed: int,
    replicates: int,
    workers: int = 1,
) -> pd.DataFrame:
    """balance_bootstrap: every replicate's metric rows (see replicate), in replicate order;
    `workers` processes (the table does not depend on it: each replicate is seeded by r)."""
    from suite.experiments.balance.runs import _map

    jobs = [(replicate, (sweep, fit_row, mixes, steps, seed, r)) for r in range(replicates)]
    return pd.concat(_map(jobs, workers, None), ignore_index=True)


def gain_by_s_cross(cost, buckets: pd.DataFrame) -> pd.DataFrame:
    """balance_s_cross: the tuning grid of dual on `buckets` (runs.tune_dual) with the
    throughput gain over equal-token at the tuner's configuration (16 ranks, its seed and
    steps), gain_pct, and the chosen point (chosen)."""
    from suite.balance.registry import PolicyInputs, make_policy
    from suite.balance.simulator import SimConfig, simulate
    from suite.experiments.balance.runs import tune_dual

    best, grid = tune_dual(cost, buckets)
    eq = make_policy("equal-token", PolicyInputs.from_cost(cost, buckets))
    base = simulate(buckets, eq, cost.step_model(), SimConfig(16, 300, seed=10_007)).metrics()
    grid = grid.assign(
        gain_pct=100 * (grid["throughput"] / base["throughput"] - 1),
        chosen=np.isclose(grid["s_cross"], best),
        p=cost.p,
    )
    return grid
