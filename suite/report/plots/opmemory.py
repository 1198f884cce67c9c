"""Figures of the opmemory experiment: bytes saved for backward (C13) and CUDA kernels per call
(C16) for eager, the Wan 2.1 path and the fused op."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

IMPLS = ("eager", "wan-eager", "fused")


def _bars(ax, df: pd.DataFrame, value: str, groups: str, scale: float = 1.0):
    keys = sorted(df[groups].unique())
    w = 0.8 / len(IMPLS)
    for i, impl in enumerate(IMPLS):
        vals = [df[(df.impl == impl) & (df[groups] == k)][value].sum() * scale for k in keys]
        ax.bar(np.arange(len(keys)) + i * w, vals, w, label=impl)
    ax.set_xticks(np.arange(len(keys)) + w, [str(k) for k in keys])
    ax.legend(fontsize=7, frameon=False)


def figures(tables: dict[str, pd.DataFrame], metrics: pd.DataFrame | None):
    out = []
    m = tables.get("opmemory_saved")
    if m is not None and not m.empty:
        fig = Figure(figsize=(6, 3.5))
        ax = fig.subplots()
        _bars(ax, m, "saved_bytes", "D", 1e-9)
        ax.set(
            xlabel="D",
            ylabel="GB saved for backward",
            title=f"bf16 x, N={int(m.N.iloc[0])} (paper: ~4.8 GB, -61.9%)",
        )
        fig.tight_layout()
        out.append(
            (
                "opmemory_saved",
                "Bytes saved for backward (saved_tensors_hooks, distinct "
                "storages) per implementation and width.",
                fig,
            )
        )
    k = tables.get("opmemory_kernels")
    if k is not None and not k.empty:
        fig = Figure(figsize=(6, 3.5))
        ax = fig.subplots()
        _bars(ax, k[k.D == k.D.max()], "kernels", "op")
        ax.set(ylabel="CUDA kernels per call", title="kernels launched (paper: 5-8 -> 1)")
        fig.tight_layout()
        out.append(
            (
                "opmemory_kernels",
                "CUDA kernels launched by one forward and one backward call (torch.profiler).",
                fig,
            )
        )
    return out
