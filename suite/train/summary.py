"""Metrics of the training experiment from its raw tables alone (pandas/numpy, no torch).

Definitions (the ledger's keys; every percentage is in %):
- C1/C2 r_tokens_steps, r_bs2_steps (+ spearman_*): Pearson R between each rank-batch's measured
  compute time (forward + backward) and its tokens B*S or B*S^2, over the equal-token baseline's
  rank-batches on the default mix (16 emulated ranks); 95% bootstrap CI.
- C5 rank_cv_emulated: per-step std/mean of rank compute, averaged over steps, 16 ranks (dual;
  baseline equal-token). C4 cv_reduction_emulated = 1 - CV_dual / CV_equal-token.
- C6 step_cv_emulated: std/mean across steps of the composed step time (max rank compute +
  gradient all-reduce + optimizer), 16 ranks.
- C7/C8 throughput_gain_{8,16}_emulated: total tokens / total step time, dual over equal-token;
  CI by resampling steps (2000 bootstrap resamples). 8-rank steps: halves of the 16-rank steps.
- C5/C8 alternatives rank_cv_global_emulated, throughput_gain_global_16_emulated: the same for the
  global policy's run (default/global/wan; baseline and reference equal-token), when it ran;
  C7 alternative throughput_gain_global_8_emulated: the global policy planned for 8 ranks
  (default/global/wan@8) over equal-token's 8-rank halves.
- C9 floor_gain_emulated: 5th percentile of per-step tokens/s, long-video mix, 16 ranks.
- C10 peak_vram_util_gain: mean over rank-batches of peak allocated bytes, dual over equal-token
  (relative %); _reserved: the same with max reserved; _pp: the difference in % of device memory.
- C14 max_seq_gain: longest single-sample S within the Wan path's peak at the reference length,
  fused over Wan; max_seq_tokens_fused: that S.
- C15 (suite.train.losscurves) loss_max_rel_diff: max over steps of |MA10(fused) - MA10(wan)| / MA10(wan);
  loss_final_rel_diff_policy: |MA10(dual) - MA10(equal-token)| / MA10(equal-token) at the last step;
  loss_final_rel_diff_global: the same for the global policy (issue 7).
- C17 fused_throughput_gain: dual + fused over dual + Wan (same policy and data).
- C18 overall_throughput_gain: dual + fused over equal-token + Wan.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from suite.experiments import metric_rows
from suite.stats import pearson_ci, spearman_ci
from suite.train.logs import step_table, summary_table
from suite.train.losscurves import loss_rows, same_batches

N_BOOT = 2000


def regroup(rows: pd.DataFrame, world: int) -> pd.DataFrame:
    """Split each R-rank step into R/world steps of `world` ranks and recompose the step times."""
    R = int(rows["world"].iloc[0])
    if R % world:
        raise ValueError(f"cannot split {R} ranks into steps of {world}")
    k = R // world
    r = rows.copy()
    r["step"] = r["step"] * k + r["rank"] // world
    r["rank"] = r["rank"] % world
    r["world"] = world
    coll = (
        2 * (world - 1) / world * r["grad_bytes"] / (r["busbw_gbps"] * 1e9) + 30e-6
        if world > 1
        else 0.0
    )
    slowest = r.groupby(["run", "step"])["compute_s"].transform("max")
    r["collective_s"] = coll
    r["collective_wait_s"] = slowest - r["compute_s"] + coll
    r["step_s"] = slowest + coll + r["optimizer_s"]
    return r


def _steps(ranks: pd.DataFrame, run: str, world: int) -> pd.DataFrame:
    r = ranks[ranks["run"] == run]
    if r.empty or int(r["world"].iloc[0]) % world:  # a run of fewer ranks cannot be regrouped up
        return pd.DataFrame()
    if world != int(r["world"].iloc[0]):
        r = regroup(r, world)
    return step_table(r, keys=["run"])


def _gain(a: pd.DataFrame, b: pd.DataFrame, seed: int = 0) -> tuple[float, float, float]:
    """(gain %, CI low, CI high) of throughput b over a; CI by resampling each run's steps."""
    thr = lambda d: d.tokens.sum() / d.step_s.sum()  # noqa: E731
    g = 100 * (thr(b) / thr(a) - 1)
    rng = np.random.default_rng(seed)
    ta, sa, tb, sb = (d[c].to_numpy(float) for d in (a, b) for c in ("tokens", "step_s"))
    ia = rng.integers(0, len(a), (N_BOOT, len(a)))
    ib = rng.integers(0, len(b), (N_BOOT, len(b)))
    boot = 100 * ((tb[ib].sum(1) / sb[ib].sum(1)) / (ta[ia].sum(1) / sa[ia].sum(1)) - 1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(g), float(lo), float(hi)


def _gain_row(summ: dict, claim: str, metric: str, base, new, who: str, conditions: str) -> dict:
    """A throughput-gain metric row of run-and-world key `new` over `base` (keys of summ)."""
    g, lo, hi = _gain(summ[base][0], summ[new][0])
    return {
        "claim": claim,
        "metric": metric,
        "value": g,
        "ci_low": lo,
        "ci_high": hi,
        "unit": "%",
        "conditions": conditions
        + f"; tokens/s {who} {summ[new][1].throughput:.0f} vs {summ[base][1].throughput:.0f}",
        "evidence": "training_ranks; figure training_throughput",
    }


def _long_budget(tables) -> str:
    """The long-video mix's own s_cross and M_comp where the run tuned one (training_info)."""
    info = tables.get("training_info")
    if info is None or "s_cross_long" not in info or pd.isna(info["s_cross_long"].iloc[0]):
        return ""
    i = info.iloc[0]
    return (
        f" (dual: s_cross {i['s_cross_long']:.0f} tuned on this mix, M_comp={i['m_comp_long']:.3g})"
    )


def summarize(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    ranks, info = tables.get("training_ranks"), tables.get("training_info")
    if ranks is None or info is None or ranks.empty:
        return metric_rows([])
    i = info.iloc[0]
    S = ranks["S"]
    cond = (
        f"{i['model']} width D={i['dim']}, {i['layers']} layers, {i['dtype']}, S {int(S.min())}-"
        f"{int(S.max())}, {{R}} ranks emulated on one {i['device']}; M_mem={i['m_mem']:.0f}, "
        f"M_comp={i['m_comp']:.3g}, p={i['p']:.2f} ({i['budget_source']})"
    )
    R = int(ranks["world"].max())
    base, dual = "default/equal-token/wan", "default/dual/wan"
    fused = "default/dual/fused"
    rows: list[dict] = []
    ev = "training_ranks; figure training_rank_cv"

    b = ranks[ranks["run"] == base]
    for claim, key, x in (("C1", "tokens", b.tokens), ("C2", "bs2", b.B * b.S.astype(float) ** 2)):
        for stat, fn in (("r", pearson_ci), ("spearman", spearman_ci)):
            v, lo, hi = fn(x.to_numpy(float), b.compute_s.to_numpy(float), seed=0)
            rows.append(
                {
                    "claim": claim,
                    "metric": f"{stat}_{key}_steps",
                    "value": v,
                    "ci_low": lo,
                    "ci_high": hi,
                    "unit": "R",
                    "evidence": "training_ranks; figure training_latency",
                    "conditions": "per rank-batch compute time of the equal-token run, "
                    + cond.format(R=R),
                }
            )

    summ = {}
    for world in sorted({R, 8} & set(range(1, R + 1))):
        for run in ranks["run"].unique():
            st = _steps(ranks, run, world)
            if not st.empty:
                summ[(run, world)] = (st, summary_table(st, keys=["run"]).iloc[0])
    if (base, R) in summ and (dual, R) in summ:
        e, d = summ[(base, R)][1], summ[(dual, R)][1]
        c = cond.format(R=R)
        same = same_batches(ranks[ranks["run"] == base], ranks[ranks["run"] == dual])
        flag = "DEGENERATE: both policies gave identical batches; " if same else ""
        c = flag + c
        rows += [
            {
                "claim": "C4",
                "metric": "cv_reduction_emulated",
                "value": 100 * (1 - d.rank_cv / e.rank_cv),
                "unit": "%",
                "conditions": c,
                "evidence": ev,
            },
            {
                "claim": "C5",
                "metric": "rank_cv_emulated",
                "value": 100 * d.rank_cv,
                "baseline": 100 * e.rank_cv,
                "unit": "%",
                "conditions": c,
                "evidence": ev,
            },
            {
                "claim": "C6",
                "metric": "step_cv_emulated",
                "value": 100 * d.step_cv,
                "baseline": 100 * e.step_cv,
                "unit": "%",
                "conditions": c,
                "evidence": "training_ranks; figure training_step_time",
            },
        ]
        for claim, world in (("C7", 8), ("C8", 16)):
            if (base, world) in summ and (dual, world) in summ:
                metric, cw = f"throughput_gain_{world}_emulated", flag + cond.format(R=world)
                rows.append(
                    _gain_row(summ, claim, metric, (base, world), (dual, world), "dual", cw)
                )
        pe, pd_ = b.peak_mem_bytes.mean(), ranks[ranks["run"] == dual].peak_mem_bytes.mean()
        if pe > 0:
            re_ = b.peak_reserved_bytes.mean()
            rd = ranks[ranks["run"] == dual].peak_reserved_bytes.mean()
            cap = float(i["capacity_bytes"])
            rows += [
                {
                    "claim": "C10",
                    "metric": "peak_vram_util_gain",
                    "value": 100 * (pd_ / pe - 1),
                    "unit": "%",
                    "evidence": "training_ranks",
                    "conditions": f"mean peak allocated {pd_ / 2**30:.1f} vs {pe / 2**30:.1f} GiB; "
                    + c,
                },
                {
                    "claim": "C10",
                    "metric": "peak_vram_util_gain_reserved",
                    "value": 100 * (rd / re_ - 1),
                    "unit": "%",
                    "evidence": "training_ranks",
                    "conditions": "max reserved; " + c,
                },
                {
                    "claim": "C10",
                    "metric": "peak_vram_util_gain_pp",
                    "value": 100 * (pd_ - pe) / cap,
                    "unit": "pp",
                    "evidence": "training_ranks",
                    "conditions": "% of device memory; " + c,
                },
            ]
    glob = "default/global/wan"
    if (base, R) in summ and (glob, R) in summ:
        e, g_ = summ[(base, R)][1], summ[(glob, R)][1]
        c = "global policy; " + cond.format(R=R)
        rows.append(
            {
                "claim": "C5",
                "metric": "rank_cv_global_emulated",
                "value": 100 * g_.rank_cv,
                "baseline": 100 * e.rank_cv,
                "unit": "%",
                "conditions": c,
                "evidence": ev,
            }
        )
        if R == 16:
            metric = "throughput_gain_global_16_emulated"
            rows.append(_gain_row(summ, "C8", metric, (base, R), (glob, R), "global", c))
    g8 = "default/global/wan@8"
    if (base, 8) in summ and (g8, 8) in summ and R > 8:
        c8 = "global policy planned for 8 ranks vs equal-token's 8-rank halves; " + cond.format(R=8)
        metric = "throughput_gain_global_8_emulated"
        rows.append(_gain_row(summ, "C7", metric, (base, 8), (g8, 8), "global", c8))
    lb, ld = ("long/equal-token/wan", R), ("long/dual/wan", R)
    if lb in summ and ld in summ:
        e, d = summ[lb][1], summ[ld][1]
        rows.append(
            {
                "claim": "C9",
                "metric": "floor_gain_emulated",
                "value": 100 * (d.floor_p5 / e.floor_p5 - 1),
                "unit": "%",
                "evidence": "training_ranks; figure training_throughput",
                "conditions": f"long-video mix, p5 of step tokens/s {d.floor_p5:.0f} vs {e.floor_p5:.0f}"
                + _long_budget(tables)
                + "; "
                + cond.format(R=R),
            }
        )
    for claim, key, num, den in (
        ("C17", "fused_throughput_gain", fused, dual),
        ("C18", "overall_throughput_gain", fused, base),
    ):
        if (num, R) in summ and (den, R) in summ:
            g, lo, hi = _gain(summ[(den, R)][0], summ[(num, R)][0])
            rows.append(
                {
                    "claim": claim,
                    "metric": key,
                    "value": g,
                    "ci_low": lo,
                    "ci_high": hi,
                    "unit": "%",
                    "evidence": "training_ranks",
                    "conditions": f"{num} over {den}; " + cond.format(R=R),
                }
            )

    ms = tables.get("training_maxseq")
    if ms is not None and not ms.empty:
        mx = ms[ms["kind"] == "max"].set_index("adaln")["S"]
        ml = int(ms["layers"].iloc[0]) if "layers" in ms.columns else i["layers"]
        if "wan" in mx and "fused" in mx:
            rows += [
                {
                    "claim": "C14",
                    "metric": "max_seq_gain",
                    "value": 100 * (mx["fused"] / mx["wan"] - 1),
                    "unit": "%",
                    "evidence": "training_maxseq",
                    "conditions": f"one sample, full step, within the Wan path's peak at S={int(mx['wan'])}; "
                    f"{i['model']} D={i['dim']} L={ml} {i['dtype']}",
                },
                {
                    "claim": "C14",
                    "metric": "max_seq_tokens_fused",
                    "value": float(mx["fused"]),
                    "unit": "tokens",
                    "evidence": "training_maxseq",
                    "conditions": f"D={i['dim']} L={ml}",
                },
            ]
    rows += loss_rows(tables.get("training_loss"), i["dim"], i["layers"])
    rows += _validation_rows(tables)
    out = metric_rows(rows)
    out["value"] = out["value"].astype(float)
    return out


def _validation_rows(tables: dict[str, pd.DataFrame]) -> list[dict]:
    """sim_step_error_pct (issue 7): the simulator's step-time error against this run's measured
    steps (suite.balance.validate), when the run also has costmodel_fit; _sweep_fit: with the
    sweep's fit scaled by one calibration factor instead of a refit on the baseline run;
    _quadratic: with a + c*B + b*B*S + d*B*S^2 refit on the baseline run (not judged)."""
    from suite.balance.validate import BASELINE_RUN, step_errors

    errs = step_errors(tables)
    out = []
    for key, model, how in (
        ("sim_step_error_pct", "refit", "a + b*B*S^p refit"),
        (
            "sim_step_error_pct_sweep_fit",
            "costmodel_fit_calibrated",
            "costmodel_fit's shape, one calibration factor",
        ),
        (
            "sim_step_error_pct_quadratic",
            "refit_quadratic",
            "a + c*B + b*B*S + d*B*S^2 (per-sample, linear and attention token terms) "
            "refit by non-negative least squares",
        ),
    ):
        if model in errs:
            out.append(
                {
                    "claim": "C6",
                    "metric": key,
                    "value": errs[model],
                    "unit": "%",
                    "evidence": "training_ranks, costmodel_fit, shapes_sweep",
                    "conditions": f"mean |predicted - measured| / measured step time over the "
                    f"steps of runs other than {BASELINE_RUN} (trace replay of the same batches, "
                    f"per-sample noise from the sweep repeats, no rank-level noise term); "
                    f"cost: {how} on {BASELINE_RUN}",
                }
            )
    return out
