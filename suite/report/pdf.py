"""report.pdf with matplotlib PdfPages: the claims at a glance (the opening figure), a title page
with the summary and the verdict table, the Beyond-the-paper page, then every other figure.

Text is wrapped to the width it is given, measured with the renderer (not guessed from character
counts), and table rows grow to their tallest cell, so nothing crosses its cell or the page;
`layout_problems` checks that on any page. Deterministic: CreationDate/ModDate are None and nothing
on the pages comes from the clock.

Every table is text, not an image, in TrueType (plots.RC: pdf.fonttype 42), so a search or
pdftotext finds each claim, verdict and value; the document info names title, subject and author.
PdfPages writes no structure tags, so the PDF is not a tagged PDF: report.html is the accessible
form (figures titled and described, tables with headers)."""

from __future__ import annotations

import functools
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.table import Table

from suite.report import verdicts

AUTHOR = "adaptiveload-suite"
PAGE = (11.69, 8.27)  # landscape A4, inches
FONT = 7  # table text, points
LINE = 1.25  # line height, in font sizes
SLACK = 0.96  # measured widths are taken 4% wider: Agg's metrics against the PDF's


def _renderer(fig: Figure):
    """An Agg renderer for measuring text (a bare Figure's canvas has none; attaching one is
    what savefig does too)."""
    canvas = fig.canvas if hasattr(fig.canvas, "get_renderer") else FigureCanvasAgg(fig)
    return canvas.get_renderer()


def _width(fig: Figure, text: str, prop: FontProperties) -> float:
    """Pixels of `text` in `prop` at the figure's dpi: the sum of its words' widths and spaces
    (each word measured once; kerning across a space is nil), taken SLACK wider."""
    key = (prop.get_size_in_points(), prop.get_weight(), fig.dpi)
    words = text.split(" ")
    space = _word_width(" x", key) - _word_width("x", key)
    return (sum(_word_width(w, key) for w in words) + space * (len(words) - 1)) / SLACK


@functools.lru_cache(maxsize=65536)
def _word_width(word: str, key: tuple) -> float:
    size, weight, dpi = key
    prop = FontProperties(size=size, weight=weight)
    return _measurer(dpi).get_text_width_height_descent(word, prop, ismath=False)[0]


@functools.lru_cache(maxsize=8)
def _measurer(dpi: float):
    return FigureCanvasAgg(Figure(figsize=(1, 1), dpi=dpi)).get_renderer()


def wrap(fig: Figure, text: str, width_px: float, prop: FontProperties, max_lines: int) -> str:
    """`text` broken into lines no wider than width_px (a word too long is cut at characters);
    past max_lines the last line ends in '…'."""
    lines: list[str] = []
    for word in str(text).split():
        cand = f"{lines[-1]} {word}" if lines else word
        if lines and _width(fig, cand, prop) <= width_px:
            lines[-1] = cand
            continue
        while _width(fig, word, prop) > width_px and len(word) > 1:
            cut = max(k for k in range(1, len(word)) if _width(fig, word[:k], prop) <= width_px)
            lines.append(word[:cut])
            word = word[cut:]
        lines.append(word)
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        while lines[-1] and _width(fig, lines[-1] + " …", prop) > width_px:
            lines[-1] = lines[-1][:-1]
        lines[-1] += " …"
    return "\n".join(lines)


def paragraph(fig: Figure, x: float, y: float, text: str, size: float, **kw) -> None:
    """Text from (x, y) (figure fraction, top-left) wrapped to the page's right margin."""
    prop = FontProperties(size=size, weight=kw.get("weight", "normal"))
    width = (0.96 - x) * fig.bbox.width
    fig.text(
        x, y, wrap(fig, text, width, prop, 12), fontsize=size, va="top", parse_math=False, **kw
    )


def _table(
    fig: Figure,
    top: float,
    header: list[str],
    rows: list[list[str]],
    widths: list[float],
    colours: list[list[str]] | None = None,
    max_lines: int = 3,
    bold_cols: tuple[int, ...] = (),
) -> Table:
    """A table hanging from `top` (figure fraction) across the page; cell text wrapped to its
    column, each row as tall as its tallest cell."""
    ax = fig.add_axes((0.03, 0.0, 0.94, top))
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
    table.set_fontsize(FONT)
    px_per_pt = fig.dpi / 72
    line = FONT * LINE * px_per_pt / ax.bbox.height  # one text line, in axes fraction
    heights: dict[int, int] = {}
    for (row, col), cell in table.get_celld().items():
        cell.PAD = 0.03  # of the cell's width, each side (matplotlib's 0.1 wastes a fifth)
        cell.set_edgecolor("#cccccc")
        text = cell.get_text()
        text.set_parse_math(False)
        if row == 0:
            cell.set_facecolor("#e8ebf1")
        if row == 0 or col in bold_cols:  # before wrapping: bold text is wider
            text.set_weight("bold")
        avail = cell.get_width() * ax.bbox.width * (1 - 2 * cell.PAD)
        prop = text.get_fontproperties()
        text.set_text(wrap(fig, text.get_text(), avail, prop, max_lines))
        heights[row] = max(heights.get(row, 1), text.get_text().count("\n") + 1)
    for (row, _), cell in table.get_celld().items():
        cell.set_height(line * (heights[row] + 0.6))
    return table


def title_page(rows: list[dict], subtitle: str, summary: str) -> Figure:
    """A landscape A4 page: title, run line, the run's summary paragraph and the verdict table
    (html.claim_rows), each verdict cell naming its evidence kind."""
    fig = plt.figure(figsize=PAGE)
    fig.text(0.04, 0.95, "AdaptiveLoad reproduction report", fontsize=18, weight="bold")
    fig.text(0.04, 0.925, subtitle, fontsize=9, color="#555")
    paragraph(fig, 0.04, 0.91, summary, 8)
    paragraph(
        fig,
        0.04,
        0.045,
        "Verdicts recomputed from the raw tables in results/; definitions, alternatives, "
        "environment and methods are in report.html. " + legend(),
        6.5,
        color="#555",
    )
    header = ["ID", "Claim", "Paper", "Ours [95% CI]", "Unit", "Verdict (evidence)", "Note"]
    cells, colours = [], []
    for r in rows:
        cells.append(
            [
                r["id"],
                r["claim"],
                r["paper"],
                r["ours"] + r["ci"],
                r["unit"],
                f"{r['verdict']} ({r['kind']})" if r["kind"] else r["verdict"],
                "; ".join(
                    x
                    for x in (
                        r.get("compile"),
                        r.get("reading_note"),
                        r["reason"] or r["conditions"],
                    )
                    if x
                ),
            ]
        )
        colours.append(["white"] * 5 + [verdicts.style(r["verdict"]).fill] + ["white"])
    table = _table(
        fig,
        0.8,
        header,
        cells,
        [0.035, 0.25, 0.11, 0.12, 0.05, 0.165, 0.27],
        colours=colours,
        max_lines=2,
        bold_cols=(5,),
    )
    for (row, col), cell in table.get_celld().items():
        if row > 0 and col == 5:  # verdict badges: the verdict's ink on its colour
            cell.get_text().set_color(verdicts.style(rows[row - 1]["verdict"]).ink)
    return fig


def legend() -> str:
    return "Verdicts: " + "; ".join(f"{k}: {st.meaning}" for k, st in verdicts.STYLES.items()) + "."


def beyond_page(section: dict | None, cost: dict | None = None) -> Figure:
    """'Beyond the paper': the three policies side by side and the balancing targets, as in the HTML,
    and the cost-form comparison (beyond.cost_forms) when the run has it."""
    fig = plt.figure(figsize=PAGE)
    title = "Beyond the paper" + (": coordinated global balancing" if section else "")
    fig.text(0.04, 0.95, title, fontsize=16, weight="bold")
    if cost:
        paragraph(fig, 0.04, 0.06, f"Cost model ({cost['where']}): {cost['summary']}", 7)
    if section is None:
        return fig
    paragraph(
        fig,
        0.04,
        0.925,
        f"simulated with {section['cost_source']}, per-sample noise "
        f"{section['noise']}; {section['met']} of {section['n_targets']} targets met",
        9,
        color="#555",
    )
    prows = [[r["policy"], str(r["ranks"]), *r["cells"]] for r in section["policies"]]
    n = len(section["header"])
    _table(fig, 0.88, ["policy", "ranks", *section["header"]], prows, [0.1, 0.06] + [0.84 / n] * n)
    trows = [
        [r["target"], r["ranks"], r["paper"], *r["cells"], r["met"]] for r in section["targets"]
    ]
    k = len(section["policy_names"])
    _table(
        fig,
        0.5,
        ["target", "ranks", "paper", *section["policy_names"], "met"],
        trows,
        [0.36, 0.06, 0.1] + [0.38 / k] * k + [0.1],
    )
    return fig


def layout_problems(fig: Figure) -> list[str]:
    """Text that crosses its table cell or the page, and axes with nothing drawn in them: the
    defects a reader sees on a page. [] when the page is clean."""
    r = _renderer(fig)
    fig.draw(r)
    page = fig.bbox
    out = []
    texts = [*fig.texts]
    for ax in fig.axes:  # tick labels are left out: matplotlib keeps unused ones off the view
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
        texts += [*ax.texts, *(ax.get_legend().get_texts() if ax.get_legend() else [])]
    for t in texts:
        if not t.get_visible() or not str(t.get_text()).strip():
            continue
        b = t.get_window_extent(r)
        if b.x0 < page.x0 - 1 or b.x1 > page.x1 + 1 or b.y0 < page.y0 - 1 or b.y1 > page.y1 + 1:
            out.append(f"text off the page: {t.get_text()[:60]!r}")
    for ax in fig.axes:
        for table in (c for c in ax.get_children() if isinstance(c, Table)):
            for (row, col), cell in table.get_celld().items():
                cb, tb = cell.get_window_extent(r), cell.get_text().get_window_extent(r)
                if tb.x0 < cb.x0 - 1 or tb.x1 > cb.x1 + 1 or tb.y0 < cb.y0 - 1 or tb.y1 > cb.y1 + 1:
                    out.append(f"cell ({row}, {col}) overflows: {cell.get_text().get_text()!r}")
        for t in fig.texts:  # page text (title, summary, footer) must not run into a table
            tb = t.get_window_extent(r)
            for table in (c for c in ax.get_children() if isinstance(c, Table)):
                if t.get_text().strip() and tb.overlaps(table.get_window_extent(r)):
                    out.append(f"text runs into a table: {t.get_text()[:60]!r}")
        if ax.axison and not (ax.lines or ax.collections or ax.patches or ax.images):
            out.append(f"empty panel: {ax.get_title()!r}")
    return out


def metadata(rows: list[dict], subtitle: str) -> dict:
    """The document information a PDF reader and a search index show: title, subject (the verdict
    counts), author and tools; no dates, so a rebuild gives the same bytes."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    verdict_text = ", ".join(f"{n} {k}" for k, n in counts.items())
    return {
        "Title": f"AdaptiveLoad reproduction report: {subtitle}",
        "Subject": f"Verdicts on {len(rows)} claims of the AdaptiveLoad paper ({verdict_text}), "
        "recomputed from the run's raw tables",
        "Author": AUTHOR,
        "Keywords": "AdaptiveLoad; reproduction; " + ", ".join(r["id"] for r in rows),
        "Creator": f"{AUTHOR}: python -m suite report",
        "Producer": "matplotlib",
        "CreationDate": None,
        "ModDate": None,
    }


def write_pdf(
    path: Path,
    rows: list[dict],
    subtitle: str,
    summary: str,
    figures: list[tuple[str, str, Figure]],
    beyond: dict | None = None,
    cost_forms: dict | None = None,
    opening: str = "claims-overview",
) -> None:
    """The opening figure (the claims at a glance, `opening`; the first of `figures` when it is
    that one) as the first page, the title page, the Beyond-the-paper page when there is one
    (balancing and/or cost forms), then each other (name, caption, figure) with its caption as the
    page's footer."""
    first = [f for f in figures[:1] if f[0] == opening]
    tmp = Path(path).with_suffix(".pdf.tmp")
    with PdfPages(tmp, metadata=metadata(rows, subtitle)) as pdf:
        for item in first:
            figure_page(pdf, *item)
        extra = [beyond_page(beyond, cost_forms)] if beyond or cost_forms else []
        for page in [title_page(rows, subtitle, summary), *extra]:
            pdf.savefig(page)
            plt.close(page)
        for item in figures[len(first) :]:
            figure_page(pdf, *item)
    tmp.replace(path)


def figure_page(pdf: PdfPages, name: str, caption: str, fig: Figure) -> None:
    """A figure as a page of its own size, its caption as the footer."""
    prop = FontProperties(size=6)
    text = wrap(fig, f"{name}: {caption}", 0.98 * fig.bbox.width, prop, 2)
    # below the figure's own bottom edge (the tight box grows to hold it): clear of its x label
    note = fig.text(0.01, -0.005, text, fontsize=6, color="#555", va="top")
    pdf.savefig(fig, bbox_inches="tight", pad_inches=0.15)  # nothing cut at the edge
    note.remove()
