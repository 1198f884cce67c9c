"""Figures of the training experiment: latency vs tokens and B*S^2, per-policy rank CV and step
times, throughput over steps, loss curves."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from suite.train.logs import step_table  # noqa: E402

BASE = "default/equal-token/wan"


def _metric(metrics, key):
    if metrics is None or metrics.empty or key not in set(metrics["metric"]):
        return np.nan
    return float(metrics.loc[metrics["metric"] == key, "value"].iloc[0])


def _latency(ranks, metrics) -> Figure:
    b = ranks[ranks["run"] == BASE]
    fig = Figure(figsize=(10, 4))
    ax1, ax2 = fig.subplots(1, 2)
    for ax, x, label, key in (
        (ax1, b.tokens, "batch tokens B*S", "r_tokens_steps"),
        (ax2, b.B * b.S.astype(float) ** 2, "B*S^2", "r_bs2_steps"),
    ):
        sc = ax.scatter(x, b.compute_s, c=np.log10(b.S), s=14, cmap="viridis")
        ax.set(
            xlabel=label,
            ylabel="rank-batch compute time (s)",
            title=f"Pearson R = {_metric(metrics, key):.2f}",
        )
    fig.colorbar(sc, ax=ax2, label="log10 S")
    fig.tight_layout()
    return fig


def _distributions(steps) -> Figure:
    fig = Figure(figsize=(10, 4))
    ax1, ax2 = fig.subplots(1, 2)
    runs = list(steps["run"].unique())
    ax1.boxplot([100 * steps.loc[steps.run == r, "rank_cv"] for r in runs], showmeans=True)
    ax1.set_xticks(range(1, len(runs) + 1), runs, rotation=25, ha="right", fontsize=7)
    ax1.set(ylabel="rank compute CV within a step (%)", title="per-step rank compute CV")
    ax2.boxplot([steps.loc[steps.run == r, "step_s"] for r in runs], showmeans=True)
    ax2.set_xticks(range(1, len(runs) + 1), runs, rotation=25, ha="right", fontsize=7)
    ax2.set(ylabel="synchronous step time (s)", title="composed step times")
    fig.tight_layout()
    return fig


def _throughput(steps) -> Figure:
    fig = Figure(figsize=(10, 4))
    ax = fig.subplots()
    for r, d in steps.groupby("run"):
        ax.plot(
            d["step"],
            d["throughput"],
            "o-",
            ms=3,
            label=f"{r}: {d.tokens.sum() / d.step_s.sum():,.0f} tok/s",
        )
    ax.set(xlabel="step", ylabel="global tokens/s", title="throughput per step (emulated ranks)")
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def _first_seed(loss: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The loss runs of the first seed (the runs of one seed are paired; the metrics use every
    seed) and the words that say which, when the table holds several."""
    if "seed" not in loss.columns or loss["seed"].nunique() < 2:
        return loss, ""
    first = loss["seed"].min()
    return loss[loss["seed"] == first], f" (seed {first} of {loss['seed'].nunique()})"


def _loss(loss) -> Figure:
    fig = Figure(figsize=(10, 4))
    ax = fig.subplots()
    loss, which = _first_seed(loss)
    for r, d in loss.groupby("run"):
        d = d.sort_values("step")
        ax.plot(d["step"], d["loss"], lw=0.7, alpha=0.5)
        ax.plot(d["step"], d["loss"].rolling(10, min_periods=1).mean(), lw=1.5, label=f"{r} (MA10)")
    ax.set(
        xlabel="step", ylabel="flow-matching loss", title=f"loss curves, same seed and data{which}"
    )
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def figures(tables: dict[str, pd.DataFrame], metrics: pd.DataFrame | None = None) -> list:
    out = []
    ranks = tables.get("training_ranks")
    if ranks is not None and not ranks.empty:
        steps = step_table(ranks, keys=["run"])
        R = int(ranks["world"].max())
        if (ranks["run"] == BASE).any():
            out.append(
                (
                    "training_latency",
                    "Each rank-batch's measured compute time of the equal-token "
                    "run against its tokens B*S and against B*S^2 (colour: sequence length).",
                    _latency(ranks, metrics),
                )
            )
        out.append(
            (
                "training_rank_cv",
                f"Per-policy distributions over steps of the rank compute CV "
                f"and of the composed synchronous step time, {R} emulated ranks.",
                _distributions(steps),
            )
        )
        out.append(
            (
                "training_throughput",
                "Global latent tokens/s of every step, per run "
                "(legend: total tokens / total time).",
                _throughput(steps),
            )
        )
    loss = tables.get("training_loss")
    if loss is not None and not loss.empty:
        several = (
            " (the first seed's runs; C15's rows use every seed)" if _first_seed(loss)[1] else ""
        )
        out.append(
            (
                "training_loss",
                "Loss per step (thin) and its 10-step moving average (thick), "
                f"same seed and data: AdaLN paths and batching policies{several}.",
                _loss(loss),
            )
        )
    return out
