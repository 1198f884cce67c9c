"""report.pdf with matplotlib PdfPages: a title page with the verdict table, then every figure.
Deterministic: CreationDate/ModDate are None and nothing on the pages comes from the clock."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure

from suite.claims import Verdict
from suite.report.html import COLOURS, fmt_ci, fmt_num

PDF_METADATA = {
    "CreationDate": None,
    "ModDate": None,
    "Creator": "adaptiveload-suite",
    "Producer": "matplotlib",
}


def _table_page(
    fig: Figure,
    top: float,
    height: float,
    header: list[str],
    rows: list[list[str]],
    widths: list[float],
    colours: list[list[str]] | None = None,
    scale: float = 1.4,
):
    """A matplotlib table filling (0.03, top - height)..(0.97, top) of the page; returns it."""
    ax = fig.add_axes((0.03, top - height, 0.94, height))
    ax.axis("off")
    table = ax.table(
        cellText=rows,
        colLabels=header,
        cellColours=colours,
        loc="upper center",
        colWidths=widths,
        cellLoc="left",
    )
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    table.scale(1, scale)
    for (row, _), cell in table.get_celld().items():
        cell.set_edgecolor("#cccccc")
        if row == 0:
            cell.set_facecolor("#e8ebf1")
            cell.set_text_props(weight="bold")
    return table


def title_page(verdicts: list[Verdict], subtitle: str) -> Figure:
    """A landscape A4 page: title, run line, and the verdict table."""
    fig = plt.figure(figsize=(11.69, 8.27))
    fig.text(0.04, 0.95, "AdaptiveLoad reproduction report", fontsize=18, weight="bold")
    fig.text(0.04, 0.915, subtitle, fontsize=9, color="#555")
    counts = {k: sum(v.verdict == k for v in verdicts) for k in COLOURS}
    x = 0.04
    for name, n in counts.items():
        if n:
            t = fig.text(
                x,
                0.885,
                f" {n} {name} ",
                fontsize=8,
                color="white",
                weight="bold",
                bbox={"boxstyle": "round,pad=0.25", "fc": COLOURS[name], "ec": "none"},
            )
            x += 0.012 + 0.0062 * len(t.get_text())
    fig.text(
        0.04,
        0.02,
        "Verdicts recomputed from the raw tables in results/; definitions, "
        "alternatives, environment and methods are in report.html.",
        fontsize=7,
        color="#555",
    )
    header = ["ID", "Claim", "Paper", "Ours [95% CI]", "Unit", "Verdict", "Note"]
    cells, colours = [], []
    for v in verdicts:
        note = v.reason or v.conditions
        cells.append(
            [
                v.id,
                textwrap.shorten(v.claim, 58),
                textwrap.shorten(v.paper_text, 28),
                fmt_num(v.measured) + fmt_ci(v.ci_low, v.ci_high),
                v.unit,
                v.verdict,
                textwrap.shorten(note, 46),
            ]
        )
        colours.append(["white"] * 5 + [COLOURS.get(v.verdict, "#888")] + ["white"])
    table = _table_page(
        fig,
        0.85,
        0.8,
        header,
        cells,
        [0.04, 0.31, 0.13, 0.14, 0.05, 0.09, 0.24],
        colours=colours,
        scale=1.45,
    )
    for (row, col), cell in table.get_celld().items():
        if row > 0 and col == 5:  # verdict badges: white on the verdict's colour
            cell.set_text_props(color="white", weight="bold")
    return fig


def beyond_page(section: dict | None, cost: dict | None = None) -> Figure:
    """'Beyond the paper': the three policies side by side and issue 7's targets, as in the HTML,
    and the cost-form comparison (beyond.cost_forms) when the run has it."""
    fig = plt.figure(figsize=(11.69, 8.27))
    title = "Beyond the paper" + (": coordinated global balancing" if section else "")
    fig.text(0.04, 0.95, title, fontsize=16, weight="bold")
    if cost:
        lines = textwrap.wrap(f"Cost model ({cost['where']}): {cost['summary']}", 190)
        fig.text(0.04, 0.015, "\n".join(lines), fontsize=7, color="#333", va="bottom")
    if section is None:
        return fig
    fig.text(
        0.04,
        0.915,
        f"simulated with {section['cost_source']}, per-sample noise "
        f"{section['noise']}; {section['met']} of {section['n_targets']} targets met",
        fontsize=9,
        color="#555",
    )
    prows = [[r["policy"], str(r["ranks"]), *r["cells"]] for r in section["policies"]]
    n = len(section["header"])
    _table_page(
        fig,
        0.88,
        0.38,
        ["policy", "ranks", *section["header"]],
        prows,
        [0.09, 0.05] + [0.8 / n] * n,
    )
    trows = [
        [r["target"], r["ranks"], r["paper"], *r["cells"], r["met"]] for r in section["targets"]
    ]
    k = len(section["policy_names"])
    _table_page(
        fig,
        0.45,
        0.4,
        ["target", "ranks", "paper", *section["policy_names"], "met"],
        trows,
        [0.3, 0.06, 0.12] + [0.1] * k + [0.12],
    )
    return fig


def write_pdf(
    path: Path,
    verdicts: list[Verdict],
    subtitle: str,
    figures: list[tuple[str, str, Figure]],
    beyond: dict | None = None,
    cost_forms: dict | None = None,
) -> None:
    """Title page, the Beyond-the-paper page when there is one (balancing and/or cost forms),
    then each (name, caption, figure) with its caption as the page's footer."""
    tmp = Path(path).with_suffix(".pdf.tmp")
    with PdfPages(tmp, metadata=PDF_METADATA) as pdf:
        extra = [beyond_page(beyond, cost_forms)] if beyond or cost_forms else []
        pages = [title_page(verdicts, subtitle)] + extra
        for page in pages:
            pdf.savefig(page)
            plt.close(page)
        for name, caption, fig in figures:
            note = fig.text(
                0.01,
                0.005,
                textwrap.shorten(f"{name}: {caption}", 160),
                fontsize=6,
                color="#555",
                va="bottom",
            )
            pdf.savefig(fig)
            note.remove()
    tmp.replace(path)
