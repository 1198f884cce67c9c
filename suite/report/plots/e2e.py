"""Figures of the e2e experiment: step-time speedup over diffusers eager, peak memory, and the
GPU-time split by kernel family, per variant and shape (from the e2e tables alone)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

BASELINE = "eager"


def _grouped_bars(ax, table: pd.DataFrame) -> None:
    """table: index = shape, columns = variant."""
    shapes, variants = list(table.index), list(table.columns)
    w = 0.8 / max(len(variants), 1)
    for i, v in enumerate(variants):
        ax.bar(np.arange(len(shapes)) + i * w, table[v].to_numpy(), w, label=v)
    ax.set_xticks(np.arange(len(shapes)) + w * (len(variants) - 1) / 2, shapes)
    ax.legend(fontsize=7, frameon=False)


def _order(df: pd.DataFrame, col: str) -> list:
    return list(dict.fromkeys(df[col]))  # first-seen order: the run's order


def figures(tables: dict[str, pd.DataFrame], metrics: pd.DataFrame | None):
    out = []
    s = tables.get("e2e_steps")
    if s is not None and not s.empty and (s.variant == BASELINE).any():
        mean = s.groupby(["shape", "variant"]).seconds.mean().unstack("variant")
        speed = mean.rdiv(mean[BASELINE], axis=0).loc[_order(s, "shape"), _order(s, "variant")]
        fig = Figure(figsize=(7, 3.5))
        ax = fig.subplots()
        _grouped_bars(ax, speed)
        ax.axhline(1.25, color="grey", lw=0.8, ls="--")
        ax.set(
            ylabel=f"step-time speedup over {BASELINE}", title="Wan 2.1 1.3B fwd+bwd (C17: > 1.25x)"
        )
        fig.tight_layout()
        out.append(("e2e_steps", "Mean step time of diffusers eager over each variant's, per "
                    "shape (paired, interleaved repeats; dashed: the paper's 1.25x).", fig))  # fmt: skip
    m = tables.get("e2e_memory")
    if m is not None and not m.empty and "peak_gib" in m:
        ok = m.dropna(subset=["peak_gib"])
        peak = ok.pivot(index="shape", columns="variant", values="peak_gib")
        peak = peak.loc[_order(ok, "shape"), _order(ok, "variant")]
        fig = Figure(figsize=(7, 3.5))
        ax = fig.subplots()
        _grouped_bars(ax, peak)
        ax.set(ylabel="peak GiB (max_memory_allocated)", title="peak memory of one step")
        fig.tight_layout()
        out.append(("e2e_memory", "Peak allocated memory of a training step per variant "
                    "(other variants' parameters subtracted).", fig))  # fmt: skip
    p = tables.get("e2e_profile")
    if p is not None and not p.empty:
        shapes = _order(p, "shape")
        fig = Figure(figsize=(7, 2.6 * len(shapes)))
        axes = np.atleast_1d(fig.subplots(len(shapes), 1))
        for ax, shape in zip(axes, shapes, strict=True):
            g = p[p["shape"] == shape]
            t = g.groupby(["variant", "family"]).gpu_us.sum().unstack("family").fillna(0) / 1e3
            t = t.loc[_order(g, "variant")]
            left = np.zeros(len(t))
            for fam in t.columns:
                ax.barh(t.index, t[fam], left=left, label=fam)
                left += t[fam].to_numpy()
            ax.set(xlabel="GPU ms per step", title=shape)
            ax.legend(fontsize=6, frameon=False, ncol=4)
        fig.tight_layout()
        out.append(("e2e_profile", "GPU time of one step by kernel family (torch.profiler, "
                    "classified by kernel name).", fig))  # fmt: skip
    return out
