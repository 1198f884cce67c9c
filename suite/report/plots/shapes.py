"""Figures of the shapes experiment: the measured (B, S) sweep, latency and memory."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402


def figures(tables: dict[str, pd.DataFrame], metrics: pd.DataFrame | None = None) -> list:
    sw = tables.get("shapes_sweep")
    if sw is None or sw.empty:
        return []
    med = sw.groupby(["B", "S"], as_index=False).agg(
        step_s=("step_s", "median"), peak=("peak_mem_bytes", "max")
    )
    measured = bool((med["peak"] > 0).any())  # CPU runs record no peak memory
    fig = Figure(figsize=(10, 4) if measured else (6, 4))
    axes = fig.subplots(1, 2 if measured else 1, squeeze=False)[0]
    ax1 = axes[0]
    for B, g in med.groupby("B"):
        ax1.plot(g["S"], g["step_s"] * 1e3, "o-", ms=3, label=f"B={B}")
        if measured:
            axes[1].plot(g["B"] * g["S"], g["peak"] / 2**30, "o", ms=4, label=f"B={B}")
    r = sw.iloc[0]
    ax1.set(
        xscale="log",
        yscale="log",
        xlabel="sequence length S (tokens)",
        ylabel="step time (ms)",
        title=f"{r['model']} D={r['dim']} L={r['layers']} on {r['device']}",
    )
    ax1.xaxis.set_minor_formatter(NullFormatter())  # the log axis's minor labels overlap
    ax1.legend(fontsize=7, frameon=False, ncol=2)
    if measured:
        axes[1].set(
            xlabel="batch tokens B*S", ylabel="peak allocated (GiB)", title="peak memory per step"
        )
        axes[1].legend(fontsize=7, frameon=False, ncol=2)
    fig.tight_layout()
    caption = (
        "Shape sweep: median step time (forward + backward + AdamW) of each (B, S) and the peak "
        "allocated memory of the step against the batch's tokens; raw repeats in shapes_sweep."
        if measured
        else "Shape sweep: median step time (forward + backward + AdamW) of each (B, S); peak "
        "memory: not measured on this machine (no CUDA device); raw repeats in shapes_sweep."
    )
    return [("shapes_sweep", caption, fig)]
