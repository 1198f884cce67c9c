"""balance: simulate equal-token vs dual-constraint (vs global) batching with the fitted cost model.

Claims C4, C5, C6, C9 (and simulated alternatives for C7, C8). Reads `costmodel_fit` (falls back to
the analytic Wan-14B-on-H200 model when absent, and says so in every metric's conditions).
ctx.options["balance_cost"] = "analytic" forces the analytic model: a CPU sweep of a tiny model at
S <= 1024 is not attention-bound, so its p says little about Wan at 75,600 tokens.
Fairness: equal-token gets M_tok = M_mem, the same memory cap as dual-constraint, so its batch is
B = floor(M_mem / S); dual-constraint uses M_comp = M_mem * s_cross^(p-1) with p from
costmodel_fit. Step model: where the costmodel experiment wrote `costmodel_quadratic`, the
simulated steps cost what that fit says (a + c*B + b*B*S + d*B*S^2) and each mix's s_cross is
tuned on it, as training does; the global planner still predicts with the power law. On the two
H200 references this halves the simulator's error against the emulated training gains (mean
absolute 13.9 -> 6.4 points on the quick run, 4.6 -> 2.2 on the full: tools/sim_vs_emulated.py,
reports/reference/*/sim_vs_emulated.csv).
Runs (steps: 1000 in cpu/quick, 4000 in full; per-sample noise CV 5%, seeds from ctx.seed):
    default mix at 8 and 16 ranks, noisy and noise-free ("cost": predicted costs only);
    long-video mix at 16 ranks (C9);  scaling sweep 8, 16, ..., 1024 ranks on the default mix.
    Repeated draws (issue 31): the 8/16-rank and long-video runs are repeated on DRAWS independent
    plan draws (3 in the cpu profile; option balance_draws), every policy on the same corpus draw
    and simulator seed per draw; summarize reports the mean across draws and its 95% t-interval.
    The policies (dual's s_cross) are tuned once, on draw 0's corpus.
Tables:
    balance_ranks    policy, mix, ranks, noise, step, rank, S, B, tokens, compute_s (8/16 ranks)
    balance_steps    policy, mix, ranks, noise, step, step_s, tokens, max_s, mean_s, rank_cv (all)
    balance_buckets  policy, mix, S, count, share, B (each policy's bucket table)
    balance_setup    one row per policy and mix: m_mem, m_comp, p, s_cross, cost_source,
                     step_model, noise_cv
    balance_planner  global policy only: policy, ranks, mix, noise, mean_delay_steps,
                     deferred_share, planner_ms (median planning time per step, this machine)
In balance_ranks the global policy's rows have S = 0 (a rank's batch mixes lengths).
CPU budget: about 25 s of the cpu profile (the scaling sweep and the draws; CSV writing included).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from suite.balance.buckets import bucket_table
from suite.balance.costmodel import CostModel, default_cost_model
from suite.balance.policies import DualConstraint, EqualToken, crossover_for_m_comp
from suite.balance.simulator import SimConfig, simulate, tune_s_cross
from suite.data.corpus import sample_corpus
from suite.experiments import metric_rows
from suite.rundir import RunContext

NAME = "balance"
CLAIMS = ("C4", "C5", "C6", "C7", "C8", "C9")
NEEDS = "cpu"

NOISE_CV = 0.05
SCALES = (8, 16, 32, 64, 128, 256, 512, 1024)
PLANNER_COLUMNS = [
    "policy",
    "ranks",
    "mix",
    "noise",
    "mean_delay_steps",
    "deferred_share",
    "planner_ms",
]
CORPUS_SIZE = 100_000
DRAWS = 5  # independent plan draws of the 8/16-rank and long-video runs (intervals across draws)


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


def policies(cost: CostModel, buckets: pd.DataFrame) -> dict:
    """equal-token, dual (and global when available) under one memory cap M_mem. Where the cost
    model carries the sweep's quadratic fit (CostModel.step_model), dual's s_cross is tuned on it
    for these buckets, keeping the power law's p, as training does; without one, the fit's own
    M_comp (tuned on the power law where the fit has none). The global planner predicts with the
    power law either way."""
    m_mem = cost.m_mem
    if cost.quadratic:
        s_cross, _ = tune_s_cross(buckets, cost.step_model(), m_mem, p=cost.p)
        cost = cost.with_budgets(m_mem, s_cross)
    elif not np.isfinite(cost.m_comp):
        s_cross, _ = tune_s_cross(buckets, cost, m_mem)
        cost = cost.with_budgets(m_mem, s_cross)
    pols = {
        "equal-token": EqualToken(m_tok=m_mem),
        "dual": DualConstraint(m_mem=m_mem, m_comp=cost.m_comp, p=cost.p),
    }
    try:
        from suite.balance.global_policy import GlobalPolicy
    except ImportError:
        return pols
    if buckets["S"].max() <= m_mem:  # the global planner needs every sample to fit a micro-batch
        pols["global"] = GlobalPolicy(m_mem=m_mem, planner=cost if cost.quadratic else None)
    return pols


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
) -> dict[str, pd.DataFrame]:
    """All balance tables for one cost model (pure apart from the seeded simulation); the
    simulated steps cost what cost.step_model() says (its quadratic form where it carries one).

    draws > 1 repeats the 8- and 16-rank runs and the long-video run on independent plan draws
    (draw d: corpus and simulator seed `seed + d`; every policy sees the same draw: common random
    numbers), with the policies tuned once on draw 0's corpus, as a user tunes once and then
    trains on new data; balance_steps gets a `draw` column, balance_ranks keeps draw 0 only."""
    mixes = _mixes(seed)
    truth = cost.step_model()
    by_mix = {mix: policies(cost, b) for mix, b in mixes.items()}
    pols = by_mix["default"]
    ranks, steps_t, buckets, extras = [], [], [], []
    runs = [
        ("default", 8, NOISE_CV, True),
        ("default", 16, NOISE_CV, True),
        ("default", 16, 0.0, True),
        ("long-video", 16, NOISE_CV, True),
    ]
    runs += [("default", r, NOISE_CV, False) for r in scales if r not in (8, 16)]
    for name in pols:
        for mix, b in mixes.items():
            pol = by_mix[mix].get(name)
            if hasattr(pol, "batch_size"):
                buckets.append(
                    bucket_table(b["S"].repeat(b["count"]), pol).assign(policy=name, mix=mix)
                )
        for mix, R, noise, keep_ranks in runs:
            pol = by_mix[mix].get(name)
            if pol is None:
                continue
            res = simulate(
                mixes[mix], pol, truth, SimConfig(ranks=R, steps=steps, noise_cv=noise, seed=seed)
            )
            tag = {"mix": mix, "noise": "noisy" if noise else "cost"}
            steps_t.append(res.step_frame().assign(**tag, draw=0))
            if keep_ranks:
                ranks.append(res.rank_frame().assign(**tag))
            if res.extra:
                extras.append({"policy": name, "ranks": R, **tag, **res.extra})
            for d in range(1, draws if keep_ranks else 1):
                cfg = SimConfig(ranks=R, steps=steps, noise_cv=noise, seed=seed + d)
                res = simulate(_mixes(seed + d)[mix], pol, truth, cfg)
                steps_t.append(res.step_frame().assign(**tag, draw=d))
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
        "balance_steps": _front(pd.concat(steps_t, ignore_index=True), order),
        "balance_buckets": _front(pd.concat(buckets, ignore_index=True), ["policy", "mix"]),
        "balance_setup": setup,
        "balance_planner": pd.DataFrame(extras, columns=PLANNER_COLUMNS),
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
    if ctx.options.get("balance_cost", "fit") == "analytic":  # e.g. CPU runs: see module doc
        cost, source = default_cost_model(), "analytic Wan-14B on H200 (option balance_cost)"
    else:
        cost, source = load_cost(ctx)
    if ctx.options.get("balance_cost", "fit") != "analytic" and "costmodel_fit" in source:
        from suite.experiments.costmodel import run_quadratic

        cost = cost.with_quadratic(run_quadratic(ctx.run))  # the sweep's, where there is one
    steps = 4000 if ctx.profile == "full" else 1000
    draws = int(ctx.options.get("balance_draws", 3 if ctx.profile == "cpu" else DRAWS))
    sim = f"; steps simulated with {cost.step_model().source}" if cost.quadratic else ""
    ctx.log(f"balance: simulating policies with {source}{sim}, {steps} steps, 8..1024 ranks")
    return simulate_tables(cost, source, steps=steps, seed=ctx.seed, draws=draws)


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
    per_draw = [  # the planner's table is of draw 0's runs
        _summarize_draw(steps[draw == d], setup, planner if d == 0 else None)
        for d in sorted(set(draw))
    ]
    if len(per_draw) == 1:
        return per_draw[0]
    return _across_draws(per_draw)


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
                    "conditions": f"median planning time per step, {R} ranks, "
                    "one CPU core of the machine that ran the suite; global policy",
                }
            )
        d16 = pl[(pl["ranks"] == 16) & (pl["mix"] == "default")]
        if not d16.empty:
            rows.append(
                {
                    "claim": "C6",
                    "metric": "mean_delay_global_sim",
                    "value": d16["mean_delay_steps"].iloc[0],
                    "unit": "steps",
                    "conditions": cond() + "; global policy, bounded deferral (1 step)",
                }
            )
    return [dict(r, evidence=ev) for r in rows]
