"""Figures of the costmodel experiment: the fit with residuals, and latency vs tokens and B*S^2."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402


def _metric(metrics: pd.DataFrame | None, key: str) -> float:
    if metrics is None or metrics.empty:
        return np.nan
    hit = metrics[metrics["metric"] == key]
    return float(hit["value"].iloc[0]) if not hit.empty else np.nan


def fit_figure(res: pd.DataFrame, fit: pd.DataFrame) -> Figure:
    fig = Figure(figsize=(10, 4))
    ax1, ax2 = fig.subplots(1, 2)
    free = res[res["variant"] == "free"]
    f = fit.set_index("variant")
    for B, g in free.groupby("B"):
        ax1.scatter(g["S"], g["step_s"], s=14, label=f"B={B}")
        S = np.linspace(g["S"].min(), g["S"].max(), 100)
        for variant, ls in (("free", "-"), ("p2", ":")):
            if variant in f.index:
                r = f.loc[variant]
                ax1.plot(S, r["a"] + r["b"] * B * S ** r["p"], ls, color="#333", lw=0.8)
    r = f.loc["free"]
    ax1.set(
        xscale="log",
        yscale="log",
        xlabel="sequence length S (tokens)",
        ylabel="step time (s)",
        title=f"a + b*B*S^p: p = {r['p']:.2f} [{r['p_lo']:.2f}, {r['p_hi']:.2f}], "
        f"R^2 = {r['r2']:.3f} (dotted: p = 2)",
    )
    ax1.legend(fontsize=7, frameon=False)
    for variant, marker in (("free", "o"), ("p2", "x")):
        g = res[res["variant"] == variant]
        ax2.scatter(
            g["S"],
            100 * g["rel_resid"],
            s=12,
            marker=marker,
            label=f"{'p free' if variant == 'free' else 'p = 2'}",
        )
    ax2.axhline(0, color="#333", lw=0.8)
    ax2.set(
        xscale="log",
        xlabel="sequence length S (tokens)",
        ylabel="residual (% of predicted)",
        title=f"residuals; leave-one-bucket-out error {100 * r['loo_err']:.1f}%",
    )
    ax2.legend(fontsize=7, frameon=False)
    for ax in (ax1, ax2):
        ax.title.set_fontsize(8)
        ax.xaxis.set_minor_formatter(NullFormatter())
    fig.tight_layout()
    return fig


def correlation_figure(res: pd.DataFrame, metrics: pd.DataFrame | None) -> Figure:
    fig = Figure(figsize=(10, 4))
    axes = fig.subplots(1, 2)
    free = res[res["variant"] == "free"]
    for ax, col, key, label in (
        (axes[0], "tokens", "r_tokens_sweep", "batch tokens B*S"),
        (axes[1], "bs2", "r_bs2_sweep", "B*S^2"),
    ):
        ax.scatter(free[col], free["step_s"], s=12, c=np.log2(free["S"]), cmap="viridis")
        ax.set(
            xlabel=label, ylabel="step time (s)", title=f"Pearson R = {_metric(metrics, key):.3f}"
        )
    fig.tight_layout()
    return fig


def figures(tables: dict[str, pd.DataFrame], metrics: pd.DataFrame | None = None):
    res, fit = tables.get("costmodel_residuals"), tables.get("costmodel_fit")
    if res is None or fit is None or res.empty:
        return []
    return [
        (
            "costmodel_fit",
            "Cost model step_time ~ a + b*B*S^p fitted to the shape sweep (lines; "
            "dotted with p fixed at 2) and its relative residuals (C3).",
            fit_figure(res, fit),
        ),
        (
            "costmodel_correlation",
            "Step latency against batch tokens (C1) and against B*S^2 (C2) "
            "over the shape sweep; colour = log2 S.",
            correlation_figure(res, metrics),
        ),
    ]
