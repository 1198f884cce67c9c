"""The policy comparison of the report's "Beyond the paper" section, computed from the balance
experiment's tables (and the run's metrics for the validation targets): every simulated policy
side by side per data mix at 16 and 1024 ranks, the balancing targets judged on the best policy,
and which policy to pick for each mix and scale. suite.report.beyond only formats what this
module decides.

Everything here is data: POLICY_COLUMNS says which statistic each column is, TARGETS what the suite
asks of the best policy (with the claim whose paper value a target sits beside, read from the
ledger), BETTER which way each statistic improves. The statistics come from
`balance_compare` (the comparison runs of every registry policy, one row per policy and run, the
simulator's metrics) where the run has it, else from `balance_steps` / `balance_planner` (the
claim runs of the suite's own policies). Statistics of the runs with per-sample noise, each the
mean over plan seeds (draw) of its per-seed value:
    rank_cv, rank_cv_p99   per-step std/mean of rank compute (%): mean and 99th pct over steps
    maxmean, maxmean_p99   per-step max/mean rank compute: mean and 99th percentile over steps
    bubble      mean over steps of 1 - mean/max (%)
    step_cv     std/mean of the step time across steps (%)
    throughput  total latent tokens / total step time (tokens/s)
    planner_ms  plan build time per step on the machine of the run (median over seeds)
    planner_pct planner_ms as a share of the mean step time (%)
The validation rows read `sim_emulation_error_pct` (balance: the simulator on the emulated steps)
and the training experiment's `sim_step_error_pct` / `sim_step_error_pct_quadratic` when present.
`recommend`: per (mix, ranks) the policy of the highest simulated throughput, and why.
`best_table`: per (mix, ranks) and statistic, the best policy; `peer_wins`: where a peer beats
every one of the suite's own policies (the registry's rows with own=True), in plain sentences.
`pays_from`: per policy, from which rank count of the rank sweep (`balance_sweep_compare`, 8 ... 1024
ranks) its throughput beats the baseline's at every larger rank count, in plain sentences.
"""

from __future__ import annotations

import math
import operator

import numpy as np
import pandas as pd

from suite.balance.registry import POLICIES, baseline, trait
from suite.claims import load_claims

SCALES = (16, 1024)
MIXES = ("default", "long-video")
POLICY_COLUMNS = [  # (key, label, unit, format)
    ("rank_cv", "rank compute CV", "%", "{:.1f}"),
    ("rank_cv_p99", "rank CV p99", "%", "{:.1f}"),
    ("maxmean", "max/mean", "", "{:.3f}"),
    ("maxmean_p99", "max/mean p99", "", "{:.3f}"),
    ("bubble", "bubble", "%", "{:.1f}"),
    ("step_cv", "step-time CV", "%", "{:.1f}"),
    ("throughput", "throughput", "tokens/s", "{:,.0f}"),
    ("planner_ms", "planner", "ms", "{:.2f}"),
    ("planner_pct", "planner / step", "%", "{:.3f}"),
]
# the balancing targets, judged on the best policy of the default mix: (key, ranks, op, threshold,
# the ledger's claim whose paper level the target sits beside)
TARGETS = pd.DataFrame(
    [
        ("rank_cv", 16, "<=", 1.0, "C5"),
        ("maxmean_p99", 16, "<=", 1.03, ""),
        ("step_cv", 16, "<=", 2.0, "C6"),
        ("maxmean_p99", 1024, "<=", 1.03, ""),
        ("planner_pct", 1024, "<=", 1.0, ""),
        ("sim_emulation_error_pct", 0, "<=", 10.0, ""),
        ("sim_step_error_pct", 0, "<=", 10.0, ""),
        ("sim_step_error_pct_quadratic", 0, "<=", 10.0, ""),
    ],
    columns=["key", "ranks", "op", "threshold", "claim"],
)
OPS = {"<=": operator.le, ">=": operator.ge}
BETTER = {"throughput": "max"}  # every other statistic: lower is better
# the validation rows (metrics of the run), by what they replay
VALIDATION_LABELS = {
    "sim_emulation_error_pct": "simulator step-time error on the emulated steps, "
    "a + c*B + b*B*S + d*B*S^2 fitted to the emulated model",
    "sim_step_error_pct": "simulator step-time error, cost a + b*B*S^p (trace replay)",
    "sim_step_error_pct_quadratic": "simulator step-time error, cost a + c*B + b*B*S + d*B*S^2 "
    "(trace replay)",
}
# target_table's columns other than the policies'
TARGET_META = {*TARGETS.columns, "paper", "best", "value", "met"}
_NEED = {"policy", "ranks", "step_s", "tokens", "max_s", "mean_s", "rank_cv"}


def _noisy(d: pd.DataFrame) -> pd.DataFrame:
    return d[d["noise"] == "noisy"] if "noise" in d.columns else d


def _stats(d: pd.DataFrame) -> dict[str, float]:
    """One seed's statistics (POLICY_COLUMNS but the planner's)."""
    mm, cv = (d["max_s"] / d["mean_s"]).to_numpy(float), d["rank_cv"].to_numpy(float)
    st = d["step_s"].to_numpy(float)
    return {
        "rank_cv": 100 * cv.mean(),
        "rank_cv_p99": 100 * np.percentile(cv, 99),
        "maxmean": mm.mean(),
        "maxmean_p99": np.percentile(mm, 99),
        "bubble": 100 * np.mean(1 - 1 / mm),
        "step_cv": 100 * st.std() / st.mean(),
        "throughput": float(d["tokens"].sum() / st.sum()),
        "step_s_mean": st.mean(),
    }


def _own(name: str) -> bool:
    return bool(trait(name, "own", False))


def _policy_order(names) -> list[str]:
    return [p for p in POLICIES if p in names] + sorted(set(names) - set(POLICIES))


_PERCENT = ("rank_cv", "rank_cv_p99", "bubble", "step_cv")  # fractions in balance_compare


def _compare_table(compare: pd.DataFrame, scales, mixes, cols) -> pd.DataFrame:
    """policy_table from balance_compare: each statistic the mean over draws (planner: median)."""
    d = compare[compare["steps"] > 0] if "steps" in compare.columns else compare
    d = d[d["mix"].isin(mixes) & d["ranks"].isin(scales)]
    rows = []
    for mix in mixes:
        for policy in _policy_order(set(d["policy"])):
            for R in scales:
                g = d[(d["mix"] == mix) & (d["policy"] == policy) & (d["ranks"] == R)]
                if g.empty:
                    continue
                row = {"mix": mix, "policy": policy, "ranks": int(R)}
                for k in ("rank_cv", "rank_cv_p99", "maxmean", "maxmean_p99", "bubble", "step_cv"):
                    row[k] = float(g[k].mean()) * (100 if k in _PERCENT else 1)
                row["throughput"] = float(g["throughput"].mean())
                row["planner_ms"] = float(g["planner_ms"].median())
                row["planner_pct"] = (
                    100 * row["planner_ms"] / (1e3 * float(g["step_s_mean"].mean()))
                )
                row["steps"] = int(g["steps"].iloc[0])
                rows.append(row)
    return pd.DataFrame(rows).reindex(columns=cols + ["steps"])


def not_run(tables: dict[str, pd.DataFrame]) -> list[str]:
    """The comparison's policies that did not run, each with its reason (balance_compare.note)."""
    c = tables.get("balance_compare")
    if c is None or c.empty or "note" not in c.columns:
        return []
    d = c[c["steps"] == 0]
    return [
        f"{r.policy} ({r.mix} mix, {int(r.ranks)} ranks): {r.note}"
        for r in d.itertuples(index=False)
    ]


def policy_table(tables: dict[str, pd.DataFrame], scales=SCALES, mixes=MIXES) -> pd.DataFrame:
    """One row per (mix, policy, ranks) simulated: the POLICY_COLUMNS statistics, each the mean
    over plan seeds (nan where not measured); from balance_compare where the run has it."""
    cols = ["mix", "policy", "ranks"] + [c[0] for c in POLICY_COLUMNS]
    compare = tables.get("balance_compare")
    if compare is not None and not compare.empty:
        return _compare_table(compare, scales, mixes, cols)
    steps = tables.get("balance_steps")
    if steps is None or steps.empty or not _NEED <= set(steps.columns):
        return pd.DataFrame(columns=cols)
    s = _noisy(steps)
    if "mix" not in s.columns:
        s = s.assign(mix="default")
    if "draw" not in s.columns:
        s = s.assign(draw=0)
    planner = tables.get("balance_planner")
    if planner is not None and not {"policy", "ranks", "planner_ms"} <= set(planner.columns):
        planner = None
    rows = []
    for mix in mixes:
        for policy in _policy_order(set(s["policy"])):
            for R in scales:
                d = s[(s["mix"] == mix) & (s["policy"] == policy) & (s["ranks"] == R)]
                if d.empty:
                    continue
                per = pd.DataFrame([_stats(g) for _, g in d.groupby("draw")]).mean()
                row = {"mix": mix, "policy": policy, "ranks": int(R), **per.to_dict()}
                row["planner_ms"] = math.nan
                if planner is not None:
                    p = _noisy(planner)
                    p = p[(p["policy"] == policy) & (p["ranks"] == R)]
                    if "mix" in p.columns:
                        p = p[p["mix"] == mix]
                    if len(p):
                        row["planner_ms"] = float(p["planner_ms"].median())
                row["planner_pct"] = 100 * row["planner_ms"] / (1e3 * row["step_s_mean"])
                rows.append(row)
    return pd.DataFrame(rows).reindex(columns=cols)


def _metric(metrics: pd.DataFrame | None, key: str) -> float:
    if metrics is None or metrics.empty:
        return math.nan
    v = metrics.loc[metrics["metric"] == key, "value"]
    return float(v.iloc[0]) if len(v) else math.nan


def paper_level(claim_id: str) -> float:
    """The paper's after-level of a before -> after claim of the ledger (its baseline less the
    relative reduction it states, e.g. C5: 39% less 51.54% = 18.9%); nan without a claim."""
    if not claim_id:
        return math.nan
    claim = next((c for c in load_claims() if c.id == claim_id), None)
    if claim is None or claim.reading != "reduction":
        raise ValueError(
            f"TARGETS: claim {claim_id!r} is not a before -> after claim of the ledger "
            "(reading 'reduction', suite/claims.csv)"
        )
    return claim.paper_baseline * (1 - claim.paper_value / 100)


def target_table(
    tables: dict[str, pd.DataFrame], metrics: pd.DataFrame | None = None
) -> pd.DataFrame:
    """TARGETS with the paper's level (nan where the paper gives none), every policy's value on
    the default mix, the best policy and met (True/False/None: not measured) judged on the best."""
    pol = policy_table(tables, sorted({int(r) for r in TARGETS["ranks"] if r}), ("default",))
    names = _policy_order(set(pol["policy"])) if len(pol) else list(POLICIES)
    rows = []
    for t in TARGETS.itertuples(index=False):
        vals = {}
        if t.key in VALIDATION_LABELS:
            vals["simulator"] = _metric(metrics, t.key)
        else:
            d = pol[pol["ranks"] == t.ranks] if len(pol) else pol
            vals = {p: float(d.loc[d["policy"] == p, t.key].iloc[0]) for p in d["policy"]}
        finite = {p: v for p, v in vals.items() if np.isfinite(v)}
        best = min(finite, key=finite.get) if t.op == "<=" and finite else None
        if t.op == ">=" and finite:
            best = max(finite, key=finite.get)
        v = finite.get(best, math.nan)
        rows.append(
            {
                "key": t.key,
                "ranks": int(t.ranks),
                "op": t.op,
                "threshold": float(t.threshold),
                "claim": t.claim,
                "paper": paper_level(t.claim),
                **{p: vals.get(p, math.nan) for p in names},
                "best": best or "",
                "value": v,
                "met": None if best is None else bool(OPS[t.op](v, t.threshold)),
            }
        )
    return pd.DataFrame(rows)


def recommendations(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per (mix, ranks): the policy of the highest simulated throughput, the runner-up, and the
    best policy's balance (what a practitioner acts on)."""
    pol = policy_table(tables)
    rows = []
    for (mix, R), g in pol.groupby(["mix", "ranks"], sort=False):
        g = g.sort_values("throughput", ascending=False)
        top = g.iloc[0]
        nxt = g.iloc[1] if len(g) > 1 else None
        why = f"highest simulated throughput, {top['throughput']:,.0f} tokens/s"
        if nxt is not None:
            gain = 100 * (top["throughput"] / nxt["throughput"] - 1)
            why += f" (+{gain:.1f}% over {nxt['policy']})"
        why += f"; max/mean p99 {top['maxmean_p99']:.3f}, step-time CV {top['step_cv']:.1f}%"
        rows.append({"mix": mix, "ranks": int(R), "policy": top["policy"], "why": why})
    return pd.DataFrame(rows, columns=["mix", "ranks", "policy", "why"])


def best_table(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per (mix, ranks) and POLICY_COLUMNS statistic: the best policy (BETTER), its value, the
    best of the suite's own policies and its value."""
    pol = policy_table(tables)
    rows = []
    for (mix, R), g in pol.groupby(["mix", "ranks"], sort=False):
        for key, *_ in POLICY_COLUMNS:
            v = g.dropna(subset=[key])
            if v.empty:
                continue
            pick = v[key].idxmax if BETTER.get(key) == "max" else v[key].idxmin
            own = v[v["policy"].map(_own)]
            opick = (
                (own[key].idxmax if BETTER.get(key) == "max" else own[key].idxmin)
                if len(own)
                else None
            )
            rows.append(
                {
                    "mix": mix,
                    "ranks": int(R),
                    "key": key,
                    "best": v.loc[pick(), "policy"],
                    "value": float(v.loc[pick(), key]),
                    "best_own": own.loc[opick(), "policy"] if opick else "",
                    "own_value": float(own.loc[opick(), key]) if opick else math.nan,
                }
            )
    return pd.DataFrame(
        rows, columns=["mix", "ranks", "key", "best", "value", "best_own", "own_value"]
    )


def peer_wins(tables: dict[str, pd.DataFrame]) -> list[str]:
    """Plain sentences: where the best policy of a statistic is a peer, beating every one of the
    suite's own policies (better than the best own one at the precision the table shows)."""
    fmts = {k: (label, unit, f) for k, label, unit, f in POLICY_COLUMNS}
    out = []
    for r in best_table(tables).itertuples(index=False):
        if _own(r.best) or not r.best_own or not np.isfinite(r.own_value):
            continue
        label, unit, f = fmts[r.key]
        if f.format(r.value) == f.format(r.own_value):
            continue  # a tie at the shown precision is no win
        u = f" {unit}" if unit and unit != "%" else unit
        out.append(
            f"{r.best} beats the suite's own policies on {label} ({r.mix} mix, {r.ranks} ranks): "
            f"{f.format(r.value)}{u} against {f.format(r.own_value)}{u} for {r.best_own}."
        )
    return out


def pays_from(tables: dict[str, pd.DataFrame]) -> list[str]:
    """Plain sentences from balance_sweep_compare: per policy (registry order), the smallest rank
    count from which its throughput gain over the baseline is > 0 at every rank count it ran
    (or that it does not pay in the sweep), with its gain at the largest rank count it ran."""
    sweep = tables.get("balance_sweep_compare")
    if sweep is None or sweep.empty:
        return []
    d = sweep[(sweep["steps"] > 0) & sweep["gain_pct"].notna()]
    out = []
    for p in _policy_order(set(d["policy"]) - {baseline()}):
        g = d[d["policy"] == p].sort_values("ranks")
        R, gain = g["ranks"].to_numpy(int), g["gain_pct"].to_numpy(float)
        losing = np.flatnonzero(gain <= 0)
        top = f"{gain[-1]:+.1f}% at {R[-1]} ranks"
        if len(losing) == 0:
            out.append(f"{p} pays from {R[0]} ranks on ({top}).")
        elif losing[-1] == len(R) - 1:
            out.append(f"{p} does not pay at {R[-1]} ranks ({top}).")
        else:
            out.append(f"{p} pays from {R[losing[-1] + 1]} ranks on ({top}).")
    return out
