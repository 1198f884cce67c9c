"""Figures: `suite/report/plots/<experiment>.py` defines

    figures(tables: dict[str, DataFrame], metrics: DataFrame) -> list[(name, caption, Figure)]

drawn from the raw tables alone (no verdict logic). `discover` finds the module of each experiment
that has tables; this package's own `overview` draws the claims-overview figure.
"""

from __future__ import annotations

import importlib
import math
import random
import traceback
from collections.abc import Iterable
from types import ModuleType

import matplotlib
import numpy as np

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from suite.report.verdicts import STYLES, style  # noqa: E402

PACKAGE = "suite.report.plots"

# Fixed style for every figure so a rebuild draws the same bytes (see suite/report/build.py).
RC = {
    "svg.hashsalt": "adaptiveload",
    "svg.fonttype": "path",
    "figure.dpi": 100,
    "savefig.dpi": 110,
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "path.simplify": True,
}


def module_for(experiment: str) -> ModuleType | None:
    """The plot module of an experiment, or None when it has none (ImportError of that module)."""
    name = f"{PACKAGE}.{experiment}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name == name:
            return None
        raise


def draw(experiment: str, tables: dict, metrics) -> tuple[list[tuple[str, str, Figure]], str]:
    """Figures of one experiment, and an error text ("" when fine). Never raises.

    The global random generators are seeded first so jitter (e.g. seaborn stripplot) draws the
    same figure every time; a plot module that bootstraps (seaborn errorbar="ci") must pass
    `seed=` itself, or the rebuild is not byte-identical.
    """
    random.seed(0)
    np.random.seed(0)
    try:
        mod = module_for(experiment)
        if mod is None:
            return [], ""
        figs = list(mod.figures(tables, metrics))
        for item in figs:
            if len(item) != 3 or not isinstance(item[2], Figure):
                raise TypeError(
                    f"{PACKAGE}.{experiment}.figures must return "
                    f"[(name, caption, Figure)], got an item {item!r:.80}"
                )
        return figs, ""
    except Exception:
        return [], traceback.format_exc()


def overview(verdicts: Iterable) -> Figure | None:
    """Ours relative to the paper's value, per claim with a measurement (CI as error bars); a
    qualitative claim (no paper number to divide by) is a row with its value written out."""
    rows = []
    for v in verdicts:
        if not math.isfinite(v.measured):
            continue
        if v.paper_value and math.isfinite(v.paper_value):
            lo = v.ci_low / v.paper_value if math.isfinite(v.ci_low) else math.nan
            hi = v.ci_high / v.paper_value if math.isfinite(v.ci_high) else math.nan
            rows.append((v.id, v.measured / v.paper_value, lo, hi, v.verdict, ""))
        else:
            note = f"{v.id}: {v.measured:.3g} {v.unit} ({v.paper_text}; no paper number)"
            rows.append((v.id, math.nan, math.nan, math.nan, v.verdict, note))
    if not rows:
        return None
    fig = plt.figure(figsize=(7, 0.35 * len(rows) + 1.4))
    ax = fig.add_subplot()
    for i, (_, r, lo, hi, verdict, note) in enumerate(reversed(rows)):
        colour = style(verdict).fill
        if note:
            ax.text(0.02, i, note, transform=ax.get_yaxis_transform(), va="center", fontsize=7,
                    color=colour, weight="bold")  # fmt: skip
            continue
        if math.isfinite(lo) and math.isfinite(hi):
            ax.plot([min(lo, hi), max(lo, hi)], [i, i], color=colour, lw=2, alpha=0.6)
        ax.plot([r], [i], "o", color=colour, ms=7)
    ax.axvline(1.0, color="#333", lw=1, ls="--")
    ax.set_yticks(range(len(rows)), [r[0] for r in reversed(rows)])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("ours / paper value (1 = the paper's number; lower is better for C5, C6, C16)")
    ax.set_title("Claims overview: measured value relative to the paper")
    shown = {r[4] for r in rows}
    handles = [
        plt.Line2D([], [], marker="o", ls="", color=st.fill, label=k)
        for k, st in STYLES.items()
        if k in shown
    ]
    ax.legend(handles=handles, loc="lower right", fontsize=7, frameon=True, framealpha=0.9)
    fig.tight_layout()
    return fig
