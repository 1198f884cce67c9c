"""The figure a report opens with: per claim one row, our value over the paper's on a log axis
(1 = the paper's number) with the 95% interval as a bar, the marker's colour its verdict and its
shape the GPU, one mark per run. Drawn from suite.report.pergpu's tidy rows (one run or several);
no verdict logic here: the verdicts come with the rows.

A claim without a paper number to divide by (a qualitative one) gives its value in words at its
row; a not-run claim is named in grey at its row. A value or interval end at or below zero has no
place on a log axis: it is drawn at the axis' left edge as an open triangle.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from suite.report.verdicts import STYLES, style

NAME = "claims-overview"
CAPTION = (
    "Per claim, our value divided by the paper's (log axis; the dashed line at 1 is the paper's "
    "number, the arrow after the id says which way is better) with its 95% interval as a bar; "
    "colour: the verdict, marker: the GPU, one mark per run; grey: not run; claims without a "
    "paper number give their value in words."
)
MARKERS = ("o", "s", "^", "D", "v", "P", "X")  # one per GPU, in suite.report.pergpu.gpus order
ARROWS = {"higher": "↑", "lower": "↓", "match": "↔"}
NOT_RUN = STYLES["not-run"].fill
ROW_SPREAD = 0.5  # the marks of one claim's runs share this much of its row


def _ratio(x: float, paper: float) -> float:
    return x / paper if math.isfinite(x) else math.nan


def _limits(ratios: list[float]) -> tuple[float, float]:
    """Log-axis limits holding every positive ratio and 1, with a margin."""
    pos = [r for r in ratios if math.isfinite(r) and r > 0] + [1.0]
    return min(pos) / 1.6, max(pos) * 1.6


def figure(long: pd.DataFrame) -> Figure | None:
    """The opening figure of suite.report.pergpu rows (one or more runs); None without rows."""
    if long.empty:
        return None
    ids = list(dict.fromkeys(long["id"]))  # the rows' order: the ledger's
    long = long.sort_values(["gpu", "run"], kind="stable")  # marks and words in GPU order
    gpus = sorted(long["gpu"].unique())
    runs = list(dict.fromkeys(long["run"]))
    marker = {g: MARKERS[i % len(MARKERS)] for i, g in enumerate(gpus)}
    numeric = long["paper_value"].notna() & (long["paper_value"] != 0)
    ratios = []
    for col in ("measured", "ci_low", "ci_high"):
        ratios += list(long.loc[numeric, col] / long.loc[numeric, "paper_value"])
    xmin, xmax = _limits(ratios)

    height = 0.32 * len(ids) * max(1, len(runs) ** 0.5) + 1.6
    fig = plt.figure(figsize=(8, height), layout="constrained")  # room for the legends outside
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_xlim(xmin, xmax)
    row_of = {cid: len(ids) - 1 - i for i, cid in enumerate(ids)}  # first claim on top
    spread = ROW_SPREAD if len(runs) > 1 else 0.0  # runs top to bottom within their claim's row
    offset = {r: spread / 2 - k * spread / max(1, len(runs) - 1) for k, r in enumerate(runs)}
    words: dict[str, list[tuple[str, str]]] = {}
    for r in long.itertuples(index=False):
        y = row_of[r.id] + offset[r.run]
        colour = style(r.verdict).fill
        if r.verdict == "not-run" or not math.isfinite(r.measured):
            words.setdefault(r.id, []).append((f"{r.gpu}: not run", NOT_RUN))
            continue
        if not (math.isfinite(r.paper_value) and r.paper_value != 0):
            text = f"{r.gpu}: {r.measured:.3g} {r.unit} (paper: {r.paper_text})"
            words.setdefault(r.id, []).append((text, colour))
            continue
        value = _ratio(r.measured, r.paper_value)
        lo, hi = sorted((_ratio(r.ci_low, r.paper_value), _ratio(r.ci_high, r.paper_value)))
        if math.isfinite(lo) and math.isfinite(hi):
            ax.plot([max(lo, xmin), max(hi, xmin)], [y, y], color=colour, lw=2.5, alpha=0.55,
                    solid_capstyle="butt")  # fmt: skip
            if lo <= xmin:
                ax.plot([xmin], [y], marker="<", ms=6, mfc="none", color=colour, clip_on=False)
        edge = value <= xmin
        ax.plot([max(value, xmin)], [y], marker="<" if edge else marker[r.gpu], ls="",
                ms=7, color=colour, mec="#1d2330", mew=0.6, clip_on=False,
                label=f"mark {r.run} {r.id}")  # fmt: skip
    for cid, items in words.items():
        text = "; ".join(t for t, _ in items)
        colour = items[0][1] if len({c for _, c in items}) == 1 else "#1d2330"
        ax.text(0.01, row_of[cid], text, transform=ax.get_yaxis_transform(), va="center",
                fontsize=7, color=colour, weight="bold")  # fmt: skip
    ax.axvline(1.0, color="#333", lw=1, ls="--")
    direction = long.drop_duplicates("id").set_index("id")["direction"]
    labels = [f"{cid} {ARROWS.get(direction.get(cid, ''), '')}".strip() for cid in ids]
    ax.set_yticks([row_of[c] for c in ids], labels)
    for cid, tick in zip(ids, ax.get_yticklabels()):
        if (long.loc[long["id"] == cid, "verdict"] == "not-run").all():
            tick.set_color(NOT_RUN)
    ax.set_ylim(-0.7, len(ids) - 0.3)
    ax.set_xlabel("ours / paper's value (log; 1 = the paper's number)")
    ax.set_title(f"The claims at a glance: ours against the paper ({', '.join(gpus)})")
    shown = set(long["verdict"])
    colours = [
        plt.Line2D([], [], marker="s", ls="", color=st.fill, label=k)
        for k, st in STYLES.items()
        if k in shown
    ]
    shapes = [
        plt.Line2D([], [], marker=marker[g], ls="", color="#666", mec="#1d2330", label=g)
        for g in gpus
    ]
    fig.legend(handles=colours + shapes, loc="outside right upper", fontsize=7, frameon=False)
    return fig
