"""Figures of the balance experiment: per-policy distributions at 16 ranks, scaling to 1024, and
every policy's throughput gain over the baseline against the rank count. Colours and order are the
registry's (suite.balance.registry: each row's colour)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from suite.balance.registry import POLICIES, baseline, trait  # noqa: E402

OTHERS = ("#34495e", "#a04000", "#16a085", "#7d3c98")  # names the registry no longer holds


def _names(policies) -> list[str]:
    """The registry's policies in its order, then the others (an older run's)."""
    return [p for p in POLICIES if p in policies] + sorted(set(policies) - set(POLICIES))


def _colour(name: str, names: list[str]) -> str:
    extra = [n for n in names if n not in POLICIES]
    return trait(name, "colour") or OTHERS[extra.index(name) % len(OTHERS)]


def policies_figure(steps: pd.DataFrame) -> Figure:
    fig = Figure(figsize=(12, 4))
    ax1, ax2, ax3 = fig.subplots(1, 3)
    sel = steps[(steps["mix"] == "default") & (steps["ranks"] == 16) & (steps["noise"] == "noisy")]
    if "draw" in sel.columns:
        sel = sel[sel["draw"] == 0]
    names = _names(set(sel["policy"]))
    data_cv = [100 * sel.loc[sel["policy"] == p, "rank_cv"].to_numpy() for p in names]
    data_st = [sel.loc[sel["policy"] == p, "step_s"].to_numpy() for p in names]
    data_pt = [
        1e6 * (g["step_s"] / g["tokens"]).to_numpy()
        for g in (sel[sel["policy"] == p] for p in names)
    ]
    for ax, data, label in (
        (ax1, data_cv, "per-step rank compute CV (%)"),
        (ax2, data_st, "step time (s)"),
        (ax3, data_pt, "step time per million latent tokens (s)"),
    ):
        parts = ax.violinplot(data, showmedians=True)
        for body, p in zip(parts["bodies"], names):
            body.set_facecolor(_colour(p, names))
        ax.set_xticks(range(1, len(names) + 1), names)
        ax.set_ylabel(label)
    ax1.set_title("rank compute CV per step, 16 ranks, default mix")
    ax2.set_title("synchronous step time, 16 ranks, default mix")
    ax3.set_title("step time per token (policies move different work per step)")
    for ax in (ax1, ax2, ax3):
        ax.title.set_fontsize(8)
    fig.tight_layout()
    return fig


def scaling_figure(steps: pd.DataFrame) -> Figure:
    sel = steps[(steps["mix"] == "default") & (steps["noise"] == "noisy")]
    if "draw" in sel.columns:
        sel = sel[sel["draw"] == 0]
    names = _names(set(sel["policy"]))
    rows = []
    for (p, R), g in sel.groupby(["policy", "ranks"]):
        mm = g["max_s"] / g["mean_s"]
        rows.append(
            {
                "policy": p,
                "ranks": R,
                "cv": 100 * g["rank_cv"].mean(),
                "maxmean": mm.mean(),
                "maxmean_p99": np.percentile(mm, 99),
                "bubble": 100 * np.mean(1 - 1 / mm),
                "tput": g["tokens"].sum() / g["step_s"].sum() / R,
            }
        )
    df = pd.DataFrame(rows)
    fig = Figure(figsize=(10, 7))
    axes = fig.subplots(2, 2).ravel()
    for ax, (col, label) in zip(
        axes,
        (
            ("cv", "rank compute CV (%)"),
            ("maxmean_p99", "max/mean, 99th percentile over steps"),
            ("bubble", "bubble fraction (%)"),
            ("tput", "throughput per rank (tokens/s)"),
        ),
    ):
        for p, g in df.groupby("policy"):
            g = g.sort_values("ranks")
            ax.plot(g["ranks"], g[col], "o-", color=_colour(p, names), label=p)
        ax.set(xscale="log", xlabel="ranks", ylabel=label)
        ax.set_xticks(sorted(df["ranks"].unique()), [str(r) for r in sorted(df["ranks"].unique())])
    axes[0].legend(frameon=False)
    fig.suptitle("Simulated scaling, default mix, 5% per-sample noise, plan seed 0")
    fig.tight_layout()
    return fig


def rank_sweep_figure(sweep: pd.DataFrame) -> Figure:
    """Throughput gain over the baseline (balance_sweep_compare.gain_pct) against the rank count,
    one line per policy; the suite's own policies solid, the peers dashed."""
    d = sweep[(sweep["steps"] > 0) & sweep["gain_pct"].notna()]
    names = _names(set(d["policy"]))
    fig = Figure(figsize=(11, 5.5))
    ax = fig.subplots()
    for p in names:
        g = d[d["policy"] == p].sort_values("ranks")
        ls = "o-" if trait(p, "own", False) else "s--"
        ax.plot(g["ranks"], g["gain_pct"], ls, color=_colour(p, names), label=p, ms=4, lw=1.2)
    ax.axhline(0, color="#333", lw=0.8)
    R = sorted(d["ranks"].unique())
    ax.set(xscale="log", xlabel="ranks", ylabel=f"throughput gain over {baseline()} (%)")
    ax.set_xticks(R, [str(int(r)) for r in R])
    ax.legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    steps = d.groupby("ranks")["steps"].max()
    ax.set_title(
        "Simulated throughput gain against rank count, default mix, plan seed 0 "
        f"({int(steps.iloc[0])} steps at {int(R[0])} ranks, {int(steps.iloc[-1])} at {int(R[-1])})",
        fontsize=8,
    )
    fig.tight_layout()
    return fig


def uncertainty_figure(grid: pd.DataFrame, boot: pd.DataFrame | None) -> Figure:
    """C8's simulated gain against dual's s_cross on the full-data fit's fine grid
    (balance_s_cross; the tuner's pick marked) and against the power law's p over the hierarchical
    bootstrap's refits (balance_bootstrap; the replicates' own re-tuned s_cross as colour)."""
    fig = Figure(figsize=(11, 4))
    ax1, ax2 = fig.subplots(1, 2)
    g = grid.sort_values("s_cross")
    ax1.step(g["s_cross"], g["gain_pct"], where="mid", color="#2c7fb8", lw=1.2)
    ax1.plot(g["s_cross"], g["gain_pct"], ".", color="#2c7fb8", ms=3)
    pick = g[g["chosen"].astype(bool)]
    ax1.plot(pick["s_cross"], pick["gain_pct"], "o", mfc="none", mec="#c0392b", ms=9,
             label="tuned s_cross")  # fmt: skip
    ax1.set(xscale="log", xlabel="dual's s_cross (tokens)", ylabel="gain over equal-token (%)")
    ax1.xaxis.set_minor_formatter(NullFormatter())  # the log axis's minor labels overlap
    ax1.legend(frameon=False, fontsize=7)
    ax1.set_title(
        f"Tuning grid: {len(g)} points, 16 ranks, default mix, p = {g['p'].iloc[0]:.3f}",
        fontsize=8,
    )
    if boot is not None and not boot.empty:
        c8 = boot[boot["metric"] == "throughput_gain_16_sim"]
        sc = ax2.scatter(c8["p"], c8["value"], c=np.log10(c8["s_cross"]), cmap="viridis", s=14)
        fig.colorbar(sc, ax=ax2, label="log10 re-tuned s_cross")
        ax2.set(xlabel="refitted p", ylabel="C8: simulated gain at 16 ranks (%)")
        ax2.set_title(f"Hierarchical bootstrap: {len(c8)} refits of the sweep", fontsize=8)
    else:
        ax2.set_axis_off()
    fig.tight_layout()
    return fig


def figures(tables: dict[str, pd.DataFrame], metrics: pd.DataFrame | None = None):
    out = []
    steps = tables.get("balance_steps")
    if steps is not None and not steps.empty:
        out += [
            (
                "balance_policies",
                "Per-policy distributions of the per-step rank compute CV, the "
                "step time and the step time per token, 16 simulated ranks (C5, C6).",
                policies_figure(steps),
            ),
            (
                "balance_scaling",
                "Simulated rank CV, max/mean (99th percentile over steps), bubble and per-rank "
                "throughput from 8 to 1024 ranks for each policy.",
                scaling_figure(steps),
            ),
        ]
    sweep = tables.get("balance_sweep_compare")
    if sweep is not None and len(sweep) and (sweep["steps"] > 0).any():
        out.append(
            (
                "balance_sweep_compare",
                f"Throughput gain of every registry policy over the baseline ({baseline()}) "
                "against the rank count, 8 to 1024 simulated ranks: where each policy starts to "
                "pay (the suite's own policies solid, the peers dashed).",
                rank_sweep_figure(sweep),
            )
        )
    grid = tables.get("balance_s_cross")
    if grid is not None and not grid.empty:
        out.append(
            (
                "balance_s_cross",
                "C8's simulated throughput gain of dual over equal-token against dual's s_cross "
                "(the fine tuning grid of the full-data fit: a sawtooth, one tooth per floor() "
                "step of a bucket's batch size) and against the power law's p across the "
                "hierarchical bootstrap's refits of the shape sweep (the spread C8's interval "
                "carries).",
                uncertainty_figure(grid, tables.get("balance_bootstrap")),
            )
        )
    return out
