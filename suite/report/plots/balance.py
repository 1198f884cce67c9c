"""Figures of the balance experiment: per-policy distributions at 16 ranks and scaling to 1024."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

COLOURS = {"equal-token": "#c0392b", "dual": "#2e86c1", "global": "#1b7f3b"}
OTHERS = ("#8e44ad", "#d68910", "#566573", "#17a589", "#a04000")  # policies added later


def _names(policies) -> list[str]:
    """Known policies in their order, then the others (the registry may grow)."""
    return [p for p in COLOURS if p in policies] + sorted(set(policies) - set(COLOURS))


def _colour(name: str, names: list[str]) -> str:
    extra = [n for n in names if n not in COLOURS]
    return COLOURS.get(name) or OTHERS[extra.index(name) % len(OTHERS)]


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


def figures(tables: dict[str, pd.DataFrame], metrics: pd.DataFrame | None = None):
    steps = tables.get("balance_steps")
    if steps is None or steps.empty:
        return []
    return [
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
