"""Figures: `suite/report/plots/<experiment>.py` defines

    figures(tables: dict[str, DataFrame], metrics: DataFrame) -> list[(name, caption, Figure)]

drawn from the raw tables alone (no verdict logic). `discover` finds the module of each experiment
that has tables; `opening` draws the figure a report opens with (the claims at a glance).
"""

from __future__ import annotations

import importlib
import random
import traceback
from types import ModuleType

import matplotlib
import numpy as np

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

PACKAGE = "suite.report.plots"

# Fixed style for every figure so a rebuild draws the same bytes (see suite/report/build.py).
RC = {
    "svg.hashsalt": "adaptiveload",
    "svg.fonttype": "none",  # text as <text> elements: selectable, searchable, read aloud
    "pdf.fonttype": 42,  # TrueType, not Type 3: the PDF's text extracts (pdftotext, search)
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
