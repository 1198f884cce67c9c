"""Figures of the costmodel experiment: the fit with residuals, and latency vs tokens and B*S^2.
Where the run has costmodel_quadratic, the fit figure also shows a + c*B + b*B*S + d*B*S^2
(dashed, not judged); runs without that table draw the power law alone."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

QUADRATIC = "a + c*B + b*B*S + d*B*S^2"


def _metric(metrics: pd.DataFrame | None, key: str) -> float:
    if metrics is None or metrics.empty:
        return np.nan
    hit = metrics[metrics["metric"] == key]
    return float(hit["value"].iloc[0]) if not hit.empty else np.nan


def _quadratic(quad: pd.DataFrame, B, S) -> np.ndarray:
    q = quad.iloc[0]
    S = np.asarray(S, float)
    return q["a"] + np.asarray(B, float) * (q["c"] + q["b"] * S + q["d"] * S**2)


def fit_figure(res: pd.DataFrame, fit: pd.DataFrame, quad: pd.DataFrame | None = None) -> Figure:
    fig = Figure(figsize=(10, 4))
    ax1, ax2 = fig.subplots(1, 2)
    free = res[res["variant"] == "free"]
    f = fit.set_index("variant")
    quad = quad if quad is not None and not quad.empty else None
    for B, g in free.groupby("B"):
        ax1.scatter(g["S"], g["step_s"], s=14, label=f"B={B}")
        S = np.linspace(g["S"].min(), g["S"].max(), 100)
        for variant, ls in (("free", "-"), ("p2", ":")):
            if variant in f.index:
                r = f.loc[variant]
                ax1.plot(S, r["a"] + r["b"] * B * S ** r["p"], ls, color="#333", lw=0.8)
        if quad is not None:
            ax1.plot(S, _quadratic(quad, B, S), "--", color="#c0392b", lw=0.8)
    r = f.loc["free"]
    quad_title = (
        f"\ndashed: {QUADRATIC}, R^2 = {quad['r2'].iloc[0]:.3f}" if quad is not None else ""
    )
    ax1.set(
        xscale="log",
        yscale="log",
        xlabel="sequence length S (tokens)",
        ylabel="step time (s)",
        title=f"a + b*B*S^p: p = {r['p']:.2f} [{r['p_lo']:.2f}, {r['p_hi']:.2f}], "
        f"R^2 = {r['r2']:.3f} (dotted: p = 2){quad_title}",
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
    loo = f"leave-one-bucket-out error {100 * r['loo_err']:.1f}%"
    if quad is not None:
        ax2.scatter(
            free["S"],
            100 * (free["step_s"] / _quadratic(quad, free["B"], free["S"]) - 1),
            s=12,
            marker="^",
            color="#c0392b",
            label="quadratic (not judged)",
        )
        loo += f" (quadratic {100 * quad['loo_err'].iloc[0]:.1f}%)"
    ax2.axhline(0, color="#333", lw=0.8)
    ax2.set(
        xscale="log",
        xlabel="sequence length S (tokens)",
        ylabel="residual (% of predicted)",
        title=f"residuals; {loo}",
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
    quad = tables.get("costmodel_quadratic")
    if res is None or fit is None or res.empty:
        return []
    beside = (
        f"; dashed and triangles: {QUADRATIC} (per-sample, linear token and attention terms), "
        "shown beside the paper's form, not judged"
        if quad is not None and not quad.empty
        else ""
    )
    return [
        (
            "costmodel_fit",
            "Cost model step_time ~ a + b*B*S^p fitted to the shape sweep (lines; "
            f"dotted with p fixed at 2) and its relative residuals (C3){beside}.",
            fit_figure(res, fit, quad),
        ),
        (
            "costmodel_correlation",
            "Step latency against batch tokens (C1) and against B*S^2 (C2) "
            "over the shape sweep; colour = log2 S.",
            correlation_figure(res, metrics),
        ),
    ]
