"""Figures of the kernels experiment: GB/s against N beside the copy-bandwidth roofline for every
impl, and the C11/C12 speedups beside the paper's values."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from suite.claims import load_claims  # noqa: E402

STYLE = {
    "fused": "C0",
    "fused-f32out": "C9",
    "fused-dtile": "C1",
    "fused-dtile-f32out": "C5",
    "eager": "C2",
    "wan-eager": "C3",
    "compile-eager": "C4",
    "compile-wan": "C6",
}


def _has(t: pd.DataFrame, op: str, dtype: str) -> bool:
    return bool(((t.op == op) & (t.dtype == dtype)).any())


def bandwidth_figure(t: pd.DataFrame) -> Figure:
    t = t[t.B == t.B.min()]
    Ds = sorted(t.D.unique())
    # only the (op, dtype) rows the run measured
    rows = [(o, d) for o in ("fwd", "bwd") for d in sorted(t.dtype.unique()) if _has(t, o, d)]
    fig = Figure(figsize=(4 * len(Ds), 3.2 * len(rows)))
    axes = np.atleast_2d(fig.subplots(len(rows), len(Ds), squeeze=False))
    for i, (op, dt) in enumerate(rows):
        row = t[(t.op == op) & (t.dtype == dt)]
        measured = sorted(row.D.unique())  # left-aligned; the quick profile times fp32 at one D
        for ax in axes[i, len(measured) :]:
            fig.delaxes(ax)  # no empty panels
        for j, D in enumerate(measured):
            ax = axes[i, j]
            sel = row[row.D == D]
            for impl, g in sel.groupby("impl"):
                g = g.sort_values("N")
                ax.plot(g.N, g.gbps, "o-", ms=3, lw=1, color=STYLE.get(impl), label=impl)
            ax.axhline(sel.copy_gbps.iloc[0], color="k", ls="--", lw=0.8, label="copy BW")
            # the ceiling at each size: a copy of the fused op's own bytes (where the run timed it)
            same = sel[sel.impl == "fused"].sort_values("N")
            if "copy_same_gbps" in same and same.copy_same_gbps.notna().any():
                ax.plot(same.N, same.copy_same_gbps, ":", color="k", lw=1, label="copy, same bytes")
            ax.set(xscale="log", title=f"{op} {dt} D={D}", xlabel="N (tokens)", ylabel="GB/s")
            ax.set_ylim(bottom=0)
    axes[0, 0].legend(fontsize=6, frameon=False)
    fig.tight_layout()
    return fig


def paper_ranges() -> dict[str, tuple[float, float]]:
    """The paper's value (low, high) of C11 and C12, by their primary metric key, from the ledger."""
    out = {}
    for c in load_claims():
        if c.id in ("C11", "C12"):
            one = math.isnan(c.paper_low)  # a single value, not a range
            lo, hi = (c.paper_value, c.paper_value) if one else (c.paper_low, c.paper_high)
            out[c.primary[0]] = (lo, hi)
    return out


def speedup_figure(metrics: pd.DataFrame) -> Figure:
    m = metrics[metrics.claim.isin(["C11", "C12"])].dropna(subset=["value"])
    paper = paper_ranges()
    fig = Figure(figsize=(8, 3.5))
    ax = fig.subplots()
    y = np.arange(len(m))
    ax.barh(y, m.value, color=["C0" if c == "C11" else "C1" for c in m.claim])
    for k, key in enumerate(m.metric):
        if key in paper:
            lo, hi = paper[key]
            ax.plot([lo, hi], [k, k], "k|-", ms=12, label="paper" if k == 0 else None)
    ax.set_yticks(y, [f"{c} {k}" for c, k in zip(m.claim, m.metric)], fontsize=7)
    ax.axvline(1, color="grey", lw=0.8)
    ax.set(xscale="log", xlabel="speedup (x, log scale); black: the paper's value")
    fig.tight_layout()
    return fig


def figures(tables: dict[str, pd.DataFrame], metrics: pd.DataFrame | None):
    out = []
    t = tables.get("kernels_timings")
    if t is not None and not t.empty:
        out.append(
            (
                "kernels_bandwidth",
                "AdaLN GB/s vs sequence length for every implementation "
                "(bytes model: read x, write y; bwd: read x and dy, write dx), dashed: device "
                "copy bandwidth measured in the same run (2 GB); dotted, where measured: a copy "
                "of the fused op's own bytes at each N, the ceiling at that size.",
                bandwidth_figure(t),
            )
        )
    if metrics is not None and not metrics.empty and metrics.claim.isin(["C11", "C12"]).any():
        out.append(
            (
                "kernels_speedup",
                "C11/C12 speedups (bf16, N=65536, geometric mean over the "
                "Wan widths) beside the paper's values.",
                speedup_figure(metrics),
            )
        )
    return out
