"""balance: trace-driven simulation of every registry policy on the run's measured step costs.

The primary evidence for claims C4-C9 (issue 31). Every policy of suite.balance.registry is
planned (plan_steps: the Plan the trainer runs) and costed (simulate_plan) on the same corpus
draws with the same plan seeds (common random numbers), for thousands of steps, repeated over
PROFILES' independent plan seeds; a claim's value is the mean over seeds of its per-seed value (a
gain compares the same seed's runs: paired), its interval the 95% t-interval across seeds.
Step cost: the run's shape sweep of the real model (table shapes_sweep) in the physical form
a + c*B + b*B*S + d*B*S^2 (the costmodel experiment's costmodel_quadratic; fitted here from
shapes_sweep where that table is absent), with per-sample noise CV 5%; the policies' budgets
(M_mem, the power law's p) come from costmodel_fit and dual's s_cross is tuned on the step model
per mix (its seed differs from the evaluation seeds). Without costmodel_fit: the analytic
Wan-14B-on-H200 model (and every condition says so); ctx.options["balance_cost"] = "analytic"
forces it (a CPU sweep of a tiny model is not attention-bound).
Validation (not judged): where the run also has the emulated training trace (training_ranks),
the simulator's error on its held-out step times (suite.balance.validate.emulation_error).
Runs per plan seed (steps: PROFILES; per-sample noise CV 5%):
    default mix at 8 and 16 ranks, noisy and (16) noise-free ("cost"); long-video mix at 16
    ranks (C9); C7 is judged on the 8-rank runs' own plans.
    scaling sweep 32 ... 1024 ranks on the default mix, seed 0 only, scale_steps(R) steps
    (fewer at many ranks, where a global step plans in ~10-20 ms on one core).
Tables:
    balance_ranks    policy, mix, ranks, noise, step, rank, S, B, tokens, compute_s (8/16 ranks,
                     seed 0, the first RANK_ROWS_STEPS steps)
    balance_steps    policy, mix, ranks, noise, draw, step, step_s, tokens, max_s, mean_s, rank_cv
    balance_buckets  policy, mix, S, count, share, B (each bucket policy's batch sizes)
    balance_setup    one row per policy and mix: m_mem, m_comp, p, s_cross, cost_source,
                     step_model, noise_cv, a, b
    balance_planner  policy, ranks, mix, noise, draw, planner_ms (plan build time per step, this
                     machine, one core)
In balance_ranks a rank of several lengths has S = 0.
CPU budget: about 25 s of the cpu profile.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from suite.balance.buckets import bucket_table
from suite.balance.costmodel import CostModel, default_cost_model
from suite.balance.policies import crossover_for_m_comp
from suite.balance.registry import POLICIES, make_policy
from suite.balance.simulator import (
    SimConfig,
    corpus_size,
    draw_corpus,
    samples_per_rank_step,
    simulate,
)
from suite.data.corpus import sample_corpus
from suite.experiments import metric_rows
from suite.rundir import RunContext

NAME = "balance"
CLAIMS = ("C4", "C5", "C6", "C7", "C8", "C9")
NEEDS = "cpu"

NOISE_CV = 0.05
SCALES = (8, 16, 32, 64, 128, 256, 512, 1024)
PLANNER_COLUMNS = ["policy", "ranks", "mix", "noise", "draw", "planner_ms"]
CORPUS_SIZE = 100_000  # samples of each mix's bucket table
PROFILES = {"cpu": (1000, 3), "quick": (2000, 5), "full": (4000, 10)}  # (steps, plan seeds)
RANK_ROWS_STEPS = 1000
# (mix, ranks, noise CV, every plan seed): the claim runs; the scaling sweep is added per SCALES
RUNS = (
    ("default", 8, NOISE_CV),
    ("default", 16, NOISE_CV),
    ("default", 16, 0.0),
    ("long-video", 16, NOISE_CV),
)


def scale_steps(ranks: int, steps: int) -> int:
    """Steps of a scaling-sweep run: `steps`, fewer past 64 ranks (about 64,000 rank-steps, at
    least steps / 10: 100 / 200 / 400 at 1024 ranks in the cpu / quick / full profile)."""
    return int(min(steps, max(steps // 10, 64_000 // ranks)))


def load_cost(ctx: RunContext | None) -> tuple[CostModel, str]:
    """The fitted model from costmodel_fit, else the analytic default (with its source)."""
    from suite.experiments.costmodel import model_from_fit

    try:
        fit = ctx.run.read_table("costmodel_fit") if ctx is not None else None
    except FileNotFoundError:
        fit = None
    if fit is not None:
        m = model_from_fit(fit)
        return m, m.source
    m = default_cost_model()
    return m, "analytic Wan-14B on H200 (costmodel_fit absent)"


def sweep_quadratic(run):
    """The run's step model in the physical form: costmodel_quadratic, else fitted here from
    shapes_sweep (None without either, or where the sweep cannot determine the form)."""
    from suite.balance.costmodel import fit_quadratic_cost
    from suite.experiments.costmodel import run_quadratic

    q = run_quadratic(run)
    if q is not None:
        return q
    try:
        sw = run.read_table("shapes_sweep")
        return fit_quadratic_cost(sw["B"], sw["S"], sw["step_s"], source="shapes_sweep quadratic")
    except (FileNotFoundError, KeyError, ValueError):
        return None


def policies(cost: CostModel, buckets: pd.DataFrame) -> dict:
    """Every registry policy that applies to `buckets`, under one memory cap M_mem. Where the
    cost carries the sweep's quadratic fit, dual's s_cross is tuned on it for these buckets
    (keeping the power law's p), as training does; otherwise the fit's own M_comp (tuned on
    the power law where the fit has none)."""
    tune = CostModel(**{**cost.__dict__, "m_comp": math.nan}) if cost.quadratic else cost
    out = {}
    for name in POLICIES:
        try:
            out[name] = make_policy(name, tune, buckets)
        except ValueError:
            continue  # e.g. a sample longer than the global policy's cap
    return out


def _mixes(seed: int) -> dict[str, pd.DataFrame]:
    return {
        m: bucket_table(sample_corpus(CORPUS_SIZE, m, seed=seed).tokens)
        for m in ("default", "long-video")
    }


def simulate_tables(
    cost: CostModel,
    source: str,
    steps: int = 1000,
    seed: int = 0,
    scales=SCALES,
    draws: int = 1,
    progress=None,
) -> dict[str, pd.DataFrame]:
    """All balance tables for one cost model (pure apart from the seeded simulation and the
    planner's wall time); steps cost what cost.step_model() says.

    Plan seed d (0 .. draws-1) of a run: one corpus drawn from the mix's bucket table by
    seed + d, planned with seed + d by every policy (common random numbers); the scaling sweep
    runs seed 0 only. Policies are tuned once, on the mixes' bucket tables."""
    mixes = _mixes(seed)
    truth = cost.step_model()
    by_mix = {mix: policies(cost, b) for mix, b in mixes.items()}
    runs = [(mix, R, noise, draws, steps) for mix, R, noise in RUNS]
    runs += [("default", R, NOISE_CV, 1, scale_steps(R, steps)) for R in scales if R not in (8, 16)]
    ranks, steps_t, planner = [], [], []
    for i, (mix, R, noise, n_draws, n_steps) in enumerate(runs):
        pols = by_mix[mix]
        for d in range(n_draws):
            cfg = SimConfig(ranks=R, steps=n_steps, noise_cv=noise, seed=seed + d)
            per = max(samples_per_rank_step(p, mixes[mix]) for p in pols.values())
            tokens = draw_corpus(mixes[mix], corpus_size(mixes[mix], cfg, per), seed + d)
            tag = {"mix": mix, "noise": "noisy" if noise else "cost", "draw": d}
            for name, pol in pols.items():
                res = simulate(tokens, pol, truth, cfg)
                steps_t.append(res.step_frame().assign(**tag))
                if d == 0 and R in (8, 16):
                    rf = res.rank_frame()
                    ranks.append(rf[rf["step"] < RANK_ROWS_STEPS].assign(**tag))
                planner.append({"policy": name, "ranks": R, **tag, **res.extra})
        if progress:
            progress(i + 1, len(runs))
    buckets = [
        bucket_table(b["S"].repeat(b["count"]), pol).assign(policy=name, mix=mix)
        for mix, b in mixes.items()
        for name, pol in by_mix[mix].items()
        if hasattr(pol, "batch_size")
    ]
    setup = pd.DataFrame(
        [
            {
                "policy": name,
                "mix": mix,
                "m_mem": cost.m_mem,
                "m_comp": getattr(pol, "m_comp", np.nan),
                "p": cost.p,
                "s_cross": _s_cross(pol, cost),
                "cost_source": source,
                "step_model": truth.source if cost.quadratic else source,
                "noise_cv": NOISE_CV,
                "a": cost.a,
                "b": cost.b,
            }
            for mix, mpols in by_mix.items()
            for name, pol in mpols.items()
        ]
    )
    order = ["policy", "mix", "ranks", "noise"]
    return {
        "balance_ranks": _front(pd.concat(ranks, ignore_index=True), order),
        "balance_steps": _front(pd.concat(steps_t, ignore_index=True), order + ["draw"]),
        "balance_buckets": _front(pd.concat(buckets, ignore_index=True), ["policy", "mix"]),
        "balance_setup": setup,
        "balance_planner": pd.DataFrame(planner, columns=PLANNER_COLUMNS),
    }


def _s_cross(pol, cost: CostModel) -> float:
    """dual's crossover length M_comp = M_mem * s_cross^(p-1) solved for s_cross; the cost
    model's for the other policies."""
    m_comp = getattr(pol, "m_comp", None)
    if m_comp is None or cost.p == 1:
        return cost.s_cross
    return crossover_for_m_comp(cost.m_mem, cost.p, m_comp)


def _front(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return df[cols + [c for c in df.columns if c not in cols]]


def run(ctx: RunContext) -> dict[str, pd.DataFrame]:
    analytic = ctx.options.get("balance_cost", "fit") == "analytic"
    if analytic:  # e.g. CPU runs: see module doc
        cost, source = default_cost_model(), "analytic Wan-14B on H200 (option balance_cost)"
    else:
        cost, source = load_cost(ctx)
    if not analytic and "costmodel_fit" in source:
        cost = cost.with_quadratic(sweep_quadratic(ctx.run))  # the sweep's, where there is one
    steps, draws = PROFILES.get(ctx.profile, PROFILES["quick"])
    draws = int(ctx.options.get("balance_draws", draws))
    sim = f"; steps simulated with {cost.step_model().source}" if cost.quadratic else ""
    ctx.log(
        f"balance: simulating {', '.join(POLICIES)} with {source}{sim}, {steps} steps x "
        f"{draws} plan seeds, 8..1024 ranks"
    )

    def progress(i, n):
        ctx.log(f"balance: run {i}/{n} simulated")

    return simulate_tables(cost, source, steps=steps, seed=ctx.seed, draws=draws, progress=progress)


# ---------------------------------------------------------------- summarize: pure, from tables
def step_metrics(steps: pd.DataFrame) -> dict[str, float]:
    """The simulator's metrics from a per-step table of one run."""
    st, tok = steps["step_s"].to_numpy(float), steps["tokens"].to_numpy(float)
    per_tok = st / tok
    cvs = steps["rank_cv"].to_numpy(float)
    mm = (steps["max_s"] / steps["mean_s"]).to_numpy(float)
    return {
        "rank_cv": cvs.mean(),
        "rank_cv_se": cvs.std() / np.sqrt(len(cvs)),
        "maxmean": mm.mean(),
        "bubble": np.mean(1 - 1 / mm),
        "step_cv": st.std() / st.mean(),
        "step_cv_per_token": per_tok.std() / per_tok.mean(),
        "throughput": tok.sum() / st.sum(),
        "floor_p5": np.percentile(tok / st, 5),
    }


def summarize(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Metric rows; with several plan draws (balance_steps.draw), each metric is the mean over the
    draws of its per-draw value with the 95% t-interval of that mean across draws (this interval
    replaces any within-draw one); tables of one draw keep the within-draw rows as they are."""
    steps, setup = tables.get("balance_steps"), tables.get("balance_setup")
    if steps is None or setup is None:
        return metric_rows([])
    draw = steps["draw"] if "draw" in steps else pd.Series(0, index=steps.index)
    planner = tables.get("balance_planner")
    if planner is not None and "draw" in planner.columns:
        planner = planner[planner["draw"] == 0]
    per_draw = [  # the planner's times are of seed 0's runs
        _summarize_draw(steps[draw == d], setup, planner if d == 0 else None)
        for d in sorted(set(draw))
    ]
    out = per_draw[0] if len(per_draw) == 1 else _across_draws(per_draw)
    val = _validation_rows(tables)
    return pd.concat([out, val], ignore_index=True) if len(val) else out


def _validation_rows(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """C8, not judged (unit "% error"): the simulator's error on the emulated training steps
    (suite.balance.validate.emulation_error: a + c*B + b*B*S + d*B*S^2 fitted to the emulated
    baseline run's own rank-batches, the model and blocks the emulation ran, predicting the
    other emulated runs); nothing without the training experiment's trace."""
    from suite.balance.validate import emulation_error

    ranks = tables.get("training_ranks")
    if ranks is None or ranks.empty or not {"B", "S", "compute_s", "step"} <= set(ranks.columns):
        return metric_rows([])
    e = emulation_error(ranks, NOISE_CV)
    if e is None:
        return metric_rows([])
    return metric_rows(
        [
            {
                "claim": "C8",
                "metric": "sim_emulation_error_pct",
                "value": e["value"],
                "ci_low": e["ci_low"],
                "ci_high": e["ci_high"],
                "unit": "% error",
                "conditions": f"validation of the simulator, not judged: mean |simulated / "
                f"emulated - 1| step time over {e['steps']} held-out steps of {e['runs']} "
                f"emulated runs; step model a + c*B + b*B*S + d*B*S^2 fitted to "
                f"{e['baseline']}'s own rank-batches (the emulated model's blocks), per-sample "
                f"noise CV {NOISE_CV:.0%}; 95% percentile bootstrap over steps",
                "evidence": "training_ranks",
            }
        ]
    )


def _across_draws(per_draw: list[pd.DataFrame]) -> pd.DataFrame:
    """Rows of draw 0 with value, baseline and CI taken across the draws that have the metric."""
    first = per_draw[0]
    keys = ["claim", "metric"]
    stack = pd.concat([d.assign(_d=i) for i, d in enumerate(per_draw)], ignore_index=True)
    out = []
    for _, row in first.iterrows():
        got = stack[(stack.claim == row.claim) & (stack.metric == row.metric)]
        v = got["value"].to_numpy(float)
        if len(v) < 2:
            out.append(row.to_dict())
            continue
        half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
        out.append(
            row.to_dict()
            | {
                "value": v.mean(),
                "ci_low": v.mean() - half,
                "ci_high": v.mean() + half,
                "baseline": got["baseline"].astype(float).mean(),
                "conditions": f"{row.conditions}; mean of {len(v)} plan draws, 95% t-interval "
                f"across draws",
            }
        )
    return metric_rows(out).drop_duplicates(keys)


def _summarize_draw(steps: pd.DataFrame, setup: pd.DataFrame, planner) -> pd.DataFrame:
    src = str(setup["cost_source"].iloc[0])
    p = float(setup["p"].iloc[0])
    if "step_model" in setup and str(setup["step_model"].iloc[0]) not in ("", "nan", src):
        src += f"; steps simulated with {setup['step_model'].iloc[0]}, dual's s_cross tuned on it"
    m = {k: step_metrics(g) for k, g in steps.groupby(["policy", "mix", "ranks", "noise"])}

    def get(policy, mix="default", R=16, noise="noisy"):
        return m.get((policy, mix, R, noise))

    def cond(mix="default", R=16, noise="noisy"):
        what = "predicted costs, no noise" if noise == "cost" else f"noise CV {NOISE_CV:.0%}"
        return (
            f"simulated, {R} ranks, {mix} mix, {what}; cost model: {src} (p={p:.3f}); "
            f"equal-token M_tok = M_mem"
        )

    ev = "balance_steps, balance_ranks; figure balance_policies"
    rows = []

    def add(claim, key, value, unit, c, baseline=np.nan, lo=np.nan, hi=np.nan, evidence=ev):
        rows.append(
            {
                "claim": claim,
                "metric": key,
                "value": value,
                "ci_low": lo,
                "ci_high": hi,
                "baseline": baseline,
                "unit": unit,
                "conditions": c,
                "evidence": evidence,
            }
        )

    eq, du = get("equal-token"), get("dual")
    if eq and du:
        add("C4", "cv_reduction_sim", 100 * (1 - du["rank_cv"] / eq["rank_cv"]), "%", cond())
        add(
            "C4",
            "imbalance_rate_reduction_sim",
            100 * (1 - du["bubble"] / eq["bubble"]),
            "%",
            cond() + "; imbalance rate (max-mean)/max",
        )
        add(
            "C4",
            "maxmean_excess_reduction_sim",
            100 * (1 - (du["maxmean"] - 1) / (eq["maxmean"] - 1)),
            "%",
            cond() + "; max/mean - 1",
        )
        se = du["rank_cv_se"]
        add(
            "C5",
            "rank_cv_sim",
            100 * du["rank_cv"],
            "%",
            cond(),
            100 * eq["rank_cv"],
            100 * (du["rank_cv"] - 1.96 * se),
            100 * (du["rank_cv"] + 1.96 * se),
        )
        add("C5", "rank_maxmean_sim", du["maxmean"], "x", cond(), eq["maxmean"])
        add("C6", "step_cv_sim", 100 * du["step_cv"], "%", cond(), 100 * eq["step_cv"])
        add(
            "C6",
            "step_cv_per_token_sim",
            100 * du["step_cv_per_token"],
            "%",
            cond() + "; step time per latent token",
            100 * eq["step_cv_per_token"],
        )
        add(
            "C8",
            "throughput_gain_16_sim",
            100 * (du["throughput"] / eq["throughput"] - 1),
            "%",
            cond() + f"; {eq['throughput']:.0f} -> {du['throughput']:.0f} tokens/s",
        )
    eqc, duc = get("equal-token", noise="cost"), get("dual", noise="cost")
    if eqc and duc:
        add(
            "C4",
            "cv_reduction_cost_sim",
            100 * (1 - duc["rank_cv"] / eqc["rank_cv"]),
            "%",
            cond(noise="cost"),
        )
        add(
            "C5",
            "rank_cv_cost_sim",
            100 * duc["rank_cv"],
            "%",
            cond(noise="cost"),
            100 * eqc["rank_cv"],
        )
    eq8, du8 = get("equal-token", R=8), get("dual", R=8)
    if eq8 and du8:
        add("C5", "rank_cv_sim_8", 100 * du8["rank_cv"], "%", cond(R=8), 100 * eq8["rank_cv"])
        add("C6", "step_cv_sim_8", 100 * du8["step_cv"], "%", cond(R=8), 100 * eq8["step_cv"])
        add(
            "C7",
            "throughput_gain_8_sim",
            100 * (du8["throughput"] / eq8["throughput"] - 1),
            "%",
            cond(R=8) + f"; {eq8['throughput']:.0f} -> {du8['throughput']:.0f} tokens/s",
        )
    eqw, duw = get("equal-token", "long-video"), get("dual", "long-video")
    if eqw and duw:
        add(
            "C9",
            "floor_gain_sim",
            100 * (duw["floor_p5"] / eqw["floor_p5"] - 1),
            "%",
            cond("long-video") + "; 5th-percentile step throughput "
            f"{eqw['floor_p5']:.0f} -> {duw['floor_p5']:.0f} tokens/s",
        )
    rows += _global_rows(get, cond, ev, planner)
    return metric_rows(rows)


def _global_rows(get, cond, ev, planner: pd.DataFrame | None) -> list[dict]:
    """Extra alternatives for the coordinated global policy (issue 7), when it was simulated."""
    g, eq = get("global"), get("equal-token")
    if not g or not eq:
        return []
    rows = [
        {
            "claim": "C5",
            "metric": "rank_cv_global_sim",
            "value": 100 * g["rank_cv"],
            "baseline": 100 * eq["rank_cv"],
            "unit": "%",
            "conditions": cond() + "; global policy",
        },
        {
            "claim": "C6",
            "metric": "step_cv_global_sim",
            "value": 100 * g["step_cv"],
            "baseline": 100 * eq["step_cv"],
            "unit": "%",
            "conditions": cond() + "; global policy",
        },
        {
            "claim": "C4",
            "metric": "maxmean_global_sim_16",
            "value": g["maxmean"],
            "baseline": eq["maxmean"],
            "unit": "x",
            "conditions": cond() + "; global policy",
        },
    ]
    g1k, eq1k = get("global", R=1024), get("equal-token", R=1024)
    if g1k and eq1k:
        rows.append(
            {
                "claim": "C4",
                "metric": "maxmean_global_sim_1024",
                "value": g1k["maxmean"],
                "baseline": eq1k["maxmean"],
                "unit": "x",
                "conditions": cond(R=1024) + "; global policy",
            }
        )
    for R, claim in ((8, "C7"), (16, "C8")):
        gr, er = get("global", R=R), get("equal-token", R=R)
        if gr and er:
            rows.append(
                {
                    "claim": claim,
                    "metric": f"throughput_gain_global_{R}_sim",
                    "value": 100 * (gr["throughput"] / er["throughput"] - 1),
                    "unit": "%",
                    "conditions": cond(R=R) + f"; global policy; {er['throughput']:.0f} -> "
                    f"{gr['throughput']:.0f} tokens/s",
                }
            )
    if planner is not None and not planner.empty:
        pl = planner[(planner["policy"] == "global") & (planner["noise"] == "noisy")]
        top = pl[pl["ranks"] == pl["ranks"].max()]
        if not top.empty:
            R = int(top["ranks"].iloc[0])
            rows.append(
                {
                    "claim": "C6",
                    "metric": "planner_ms",
                    "value": top["planner_ms"].iloc[0],
                    "unit": "ms",
                    "conditions": f"plan build time per step (epoch_plan, steps chained), {R} "
                    "ranks, one CPU core of the machine that ran the suite; global policy",
                }
            )
    return [dict(r, evidence=ev) for r in rows]
