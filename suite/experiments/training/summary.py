"""Metrics of the training experiment from its raw tables alone (pandas/numpy, no torch): one
row builder per claim group; two runs are compared by runstats, C10's memory rows are
peakmem's.

Definitions (the ledger's keys; every percentage is in %):
- C1/C2 r_tokens_steps, r_bs2_steps (+ spearman_*): Pearson R between each rank-batch's measured
  compute time (forward + backward) and its tokens B*S or B*S^2, over the equal-token baseline's
  rank-batches on the default mix (16 emulated ranks); 95% bootstrap CI. Alternatives only: B*S is
  held near M_tok by equal-token batching, so these are near-degenerate (the ledger's C1/C2 are
  judged over the shape sweep, suite.experiments.costmodel).
- C5 rank_cv_emulated: per-step std/mean of rank compute, averaged over steps, 16 ranks (dual;
  baseline equal-token). C4 cv_reduction_emulated = 1 - CV_dual / CV_equal-token.
- C6 step_cv_emulated: std/mean across steps of the composed step time (max rank compute +
  gradient all-reduce + optimizer), 16 ranks.
- C7/C8 throughput_gain_{8,16}_emulated: total tokens / total step time, dual over equal-token.
  8 ranks: the pair's own 8-rank plans (runs default/equal-token/wan@8, default/dual/wan@8), not
  halves of the 16-rank steps.
- Intervals (C4-C10, C17, C18): 95% percentile bootstrap over steps (N_BOOT resamples,
  suite.stats.bootstrap_runs). Paired (the same step indices drawn from both runs) where the two
  runs trained the same batches at every step and rank (same_batches: C17's dual + fused over
  dual + Wan, or two policies that happened to give identical batches); otherwise each run's steps
  are resampled on their own. The conditions say which.
- C5/C8 alternatives rank_cv_global_emulated, throughput_gain_global_16_emulated: the same for the
  global policy's run (default/global/wan; baseline and reference equal-token), when it ran;
  C7 alternative throughput_gain_global_8_emulated: the global policy planned for 8 ranks
  (default/global/wan@8) over equal-token's 8-rank run.
- C9 floor_gain_emulated: 5th percentile of per-step tokens/s, long-video mix, 16 ranks.
- C10 peak_vram_util_gain: each step's peak allocated bytes (max over its ranks and their
  micro-batches), averaged over steps, dual over equal-token (relative %); budgets as the run set
  them (equal-token M_tok = M_mem: the largest budget whose worst bucket fits).
  _tuned_measured (C10's primary): the same over equal-token trained at the M_tok tuned for
  balance (tuned_token_budget; run default/equal-token-tuned/wan, training_info m_tok_tuned), the
  paper's baseline; _tuned: that baseline's peaks modelled from this run's own memory fit on the
  plain equal-token run (not measured); _rankbatch: the mean over rank-batches
  (the earlier definition); _reserved: the same per-step mean of max reserved; _pp: the
  difference in % of device memory.
- C14 max_seq_gain: longest single-sample S within the Wan path's peak at the reference length,
  fused over Wan; max_seq_tokens_fused: that S.
- C15 (losscurves) loss_max_rel_diff: max over steps of |MA10(fused) - MA10(wan)| / MA10(wan);
  loss_final_rel_diff_policy: |MA10(dual) - MA10(equal-token)| / MA10(equal-token) at the last step;
  loss_final_rel_diff_global: the same for the global policy.
- C17 fused_throughput_gain: dual + fused over dual + Wan (same policy and data).
- C18 overall_throughput_gain: dual + fused over equal-token + Wan.
"""

from __future__ import annotations

import pandas as pd

from suite.experiments.training.losscurves import loss_rows
from suite.experiments.training.peakmem import TUNED, memory_rows, tuned_measured_row, tuned_row
from suite.experiments.training.runstats import compare, paired_runs, pairing_note, run_summaries
from suite.metrics import metric_rows
from suite.stats import pearson_ci, spearman_ci

BASE, DUAL = "default/equal-token/wan", "default/dual/wan"
FUSED, GLOBAL = "default/dual/fused", "default/global/wan"
LONG_BASE, LONG_DUAL = "long/equal-token/wan", "long/dual/wan"
TUNED_BASE = f"default/{TUNED}/wan"  # C10's baseline: equal-token at the M_tok tuned for balance
RANK_CV_EVIDENCE = "training_ranks; figure training_rank_cv"
DEGENERATE = "DEGENERATE: both policies gave identical batches; "


def summarize(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The training experiment's metric rows (the definitions above) from its raw tables."""
    ranks, info = tables.get("training_ranks"), tables.get("training_info")
    if ranks is None or info is None or ranks.empty:
        return metric_rows([])
    i = info.iloc[0]
    cond = _conditions(i, ranks)
    R = int(ranks["world"].max())
    summ = run_summaries(ranks)
    rows = _shape_rows(ranks, cond.format(R=R))
    rows += _balance_rows(ranks, summ, R, i, cond)
    rows += _global_rows(ranks, summ, R, cond)
    rows += _floor_rows(tables, ranks, summ, R, cond)
    rows += _fused_rows(ranks, summ, R, cond)
    rows += _maxseq_rows(tables.get("training_maxseq"), i)
    rows += loss_rows(tables.get("training_loss"), i["dim"], i["layers"], _model(i))
    rows += _validation_rows(tables)
    out = metric_rows(rows)
    out["value"] = out["value"].astype(float)
    return out


def _model(i: pd.Series) -> str:
    """What trained, for the conditions of the probes (C14, C15): architecture, checkpointing,
    dtype."""
    ckpt = "gradient checkpointing" if i.get("checkpointing", False) else "no checkpointing"
    return f"{i['model']} (diffusers WanTransformer3DModel), {ckpt}, {i['dtype']}"


def _conditions(i: pd.Series, ranks: pd.DataFrame) -> str:
    """The run's conditions, with an {R} placeholder for the ranks a metric is over."""
    S = ranks["S"]
    return (
        f"{i['model']} (diffusers WanTransformer3DModel) width D={i['dim']}, {i['layers']} blocks"
        f"{', gradient checkpointing' if i.get('checkpointing', False) else ''}, {i['dtype']}, "
        f"S {int(S.min())}-"
        f"{int(S.max())}, {{R}} ranks emulated on one {i['device']}; M_mem={i['m_mem']:.0f}, "
        f"M_comp={i['m_comp']:.3g}, p={i['p']:.2f} ({i['budget_source']})"
    )


def _shape_rows(ranks: pd.DataFrame, cond: str) -> list[dict]:
    """C1/C2 alternatives: R of rank-batch compute time against B*S and B*S^2 (equal-token)."""
    b = ranks[ranks["run"] == BASE]
    rows = []
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
                    "conditions": "per rank-batch compute time of the equal-token run, " + cond,
                }
            )
    return rows


def _gain_row(
    summ: dict, claim: str, metric: str, base, new, who: str, conditions: str, paired: bool
) -> dict:
    """A throughput-gain metric row of run-and-world key `new` over `base` (keys of summ)."""
    g, lo, hi = compare(summ, base, new, "throughput_gain", paired)
    return {
        "claim": claim,
        "metric": metric,
        "value": g,
        "ci_low": lo,
        "ci_high": hi,
        "unit": "%",
        "conditions": conditions
        + f"; tokens/s {who} {summ[new][1].throughput:.0f} vs {summ[base][1].throughput:.0f}; "
        + pairing_note(paired),
        "evidence": "training_ranks; figure training_throughput",
    }


def _balance_rows(ranks, summ: dict, R: int, i: pd.Series, cond: str) -> list[dict]:
    """Dual over equal-token: C4-C6 at R ranks, C7/C8 throughput at 8 and 16, C10 memory."""
    base, dual = (BASE, R), (DUAL, R)
    if base not in summ or dual not in summ:
        return []
    e = summ[base][1]
    same = paired_runs(ranks, BASE, DUAL)
    c = (DEGENERATE if same else "") + cond.format(R=R)
    rows = []
    for claim, key, stat, baseline, evid in (
        ("C4", "cv_reduction_emulated", "cv_reduction", None, RANK_CV_EVIDENCE),
        ("C5", "rank_cv_emulated", "rank_cv", 100 * e.rank_cv, RANK_CV_EVIDENCE),
        ("C6", "step_cv_emulated", "step_cv", 100 * e.step_cv, "training_ranks; figure training_step_time"),
    ):  # fmt: skip
        v, lo, hi = compare(summ, base, dual, stat, same)
        rows.append(
            {
                "claim": claim,
                "metric": key,
                "value": v,
                "ci_low": lo,
                "ci_high": hi,
                "baseline": baseline,
                "unit": "%",
                "conditions": c + "; " + pairing_note(same),
                "evidence": evid,
            }
        )
    for claim, world, sfx in (("C7", 8, "@8"), ("C8", 16, "")):
        b_, d_ = (BASE + sfx, world), (DUAL + sfx, world)
        if b_ in summ and d_ in summ:
            metric, cw = f"throughput_gain_{world}_emulated", cond.format(R=world)
            pw = paired_runs(ranks, b_[0], d_[0])
            cw = (DEGENERATE if pw else "") + cw
            if sfx:
                cw = "own 8-rank plans; " + cw
            rows.append(_gain_row(summ, claim, metric, b_, d_, "dual", cw, pw))
    rows += memory_rows(ranks, summ, base, dual, float(i["capacity_bytes"]), c, same)
    tuned = (TUNED_BASE, R)
    paired = tuned in summ and paired_runs(ranks, TUNED_BASE, DUAL)
    rows += tuned_measured_row(summ, tuned, dual, i, cond.format(R=R), paired)
    rows += tuned_row(ranks, summ, base, dual, i, c)
    return rows


def _global_rows(ranks, summ: dict, R: int, cond: str) -> list[dict]:
    """The global policy's C5 and C8 alternatives at R ranks, its C7 one planned for 8 ranks."""
    rows = []
    base, glob = (BASE, R), (GLOBAL, R)
    if base in summ and glob in summ:
        e, g_ = summ[base][1], summ[glob][1]
        c = "global policy; " + cond.format(R=R)
        rows.append(
            {
                "claim": "C5",
                "metric": "rank_cv_global_emulated",
                "value": 100 * g_.rank_cv,
                "baseline": 100 * e.rank_cv,
                "unit": "%",
                "conditions": c,
                "evidence": RANK_CV_EVIDENCE,
            }
        )
        if R == 16:
            metric = "throughput_gain_global_16_emulated"
            paired = paired_runs(ranks, BASE, GLOBAL)
            rows.append(_gain_row(summ, "C8", metric, base, glob, "global", c, paired))
    b8, g8 = (BASE + "@8", 8), (GLOBAL + "@8", 8)
    if b8 in summ and g8 in summ:
        c8 = "global policy planned for 8 ranks vs equal-token's 8-rank plan; " + cond.format(R=8)
        metric = "throughput_gain_global_8_emulated"
        rows.append(_gain_row(summ, "C7", metric, b8, g8, "global", c8, False))
    return rows


def _floor_rows(tables, ranks, summ: dict, R: int, cond: str) -> list[dict]:
    """C9: the long-video mix's p5 of step tokens/s, dual over equal-token."""
    lb, ld = (LONG_BASE, R), (LONG_DUAL, R)
    if lb not in summ or ld not in summ:
        return []
    e, d = summ[lb][1], summ[ld][1]
    paired = paired_runs(ranks, LONG_BASE, LONG_DUAL)
    v, lo, hi = compare(summ, lb, ld, "floor_gain", paired)
    return [
        {
            "claim": "C9",
            "metric": "floor_gain_emulated",
            "value": v,
            "ci_low": lo,
            "ci_high": hi,
            "unit": "%",
            "evidence": "training_ranks; figure training_throughput",
            "conditions": f"long-video mix, p5 of step tokens/s {d.floor_p5:.0f} vs {e.floor_p5:.0f}"
            + _long_budget(tables)
            + "; "
            + cond.format(R=R)
            + "; "
            + pairing_note(paired),
        }
    ]


def _fused_rows(ranks, summ: dict, R: int, cond: str) -> list[dict]:
    """C17 dual + fused over dual + Wan, C18 dual + fused over equal-token + Wan."""
    rows = []
    for claim, key, num, den in (
        ("C17", "fused_throughput_gain", FUSED, DUAL),
        ("C18", "overall_throughput_gain", FUSED, BASE),
    ):
        if (num, R) in summ and (den, R) in summ:
            paired = paired_runs(ranks, den, num)
            g, lo, hi = compare(summ, (den, R), (num, R), "throughput_gain", paired)
            rows.append(
                {
                    "claim": claim,
                    "metric": key,
                    "value": g,
                    "ci_low": lo,
                    "ci_high": hi,
                    "unit": "%",
                    "evidence": "training_ranks",
                    "conditions": f"{num} over {den}; "
                    + cond.format(R=R)
                    + "; "
                    + pairing_note(paired),
                }
            )
    return rows


def _maxseq_rows(ms: pd.DataFrame | None, i: pd.Series) -> list[dict]:
    """C14: the longest single sample within the Wan path's peak, fused over Wan."""
    if ms is None or ms.empty:
        return []
    mx = ms[ms["kind"] == "max"].set_index("adaln")["S"]
    ml = int(ms["layers"].iloc[0]) if "layers" in ms.columns else i["layers"]
    if "wan" not in mx or "fused" not in mx:
        return []
    return [
        {
            "claim": "C14",
            "metric": "max_seq_gain",
            "value": 100 * (mx["fused"] / mx["wan"] - 1),
            "unit": "%",
            "evidence": "training_maxseq",
            "conditions": f"one sample, full step, within the Wan path's peak at S={int(mx['wan'])}; "
            f"D={i['dim']} L={ml}, {_model(i)}",
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


def _long_budget(tables) -> str:
    """The long-video mix's own s_cross and M_comp where the run tuned one (training_info)."""
    info = tables.get("training_info")
    if info is None or "s_cross_long" not in info or pd.isna(info["s_cross_long"].iloc[0]):
        return ""
    i = info.iloc[0]
    return (
        f" (dual: s_cross {i['s_cross_long']:.0f} tuned on this mix, M_comp={i['m_comp_long']:.3g})"
    )


def _validation_rows(tables: dict[str, pd.DataFrame]) -> list[dict]:
    """sim_step_error_pct: the simulator's step-time error against this run's measured
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
