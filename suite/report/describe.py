"""A figure's title and text description, read from what the matplotlib Figure draws (panel
titles, axis labels, scales and shown ranges, legend entries, marks), and the SVG labelled with them
(`<title>`, `<desc>`, role="img") so a reader without sight, or a search, meets the same content.

Nothing here is typed in: every word and number comes from the Figure, so the description follows
the plot when the plot changes. Call after the figure is drawn (savefig), when tick labels exist.
"""

from __future__ import annotations

import re
from xml.sax.saxutils import escape

from matplotlib.axes import Axes
from matplotlib.category import StrCategoryFormatter
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, LogFormatter, ScalarFormatter

from suite.report.html import fmt_num

MAX_NAMES = 12  # tick labels or legend entries listed before "and N more"


def _names(items: list[str]) -> str:
    items = list(dict.fromkeys(i for i in items if i))
    shown = ", ".join(items[:MAX_NAMES])
    return shown + (f" and {len(items) - MAX_NAMES} more" if len(items) > MAX_NAMES else "")


def _plain(text: str) -> str:
    """Text as a reader hears it: mathtext's $ and braces dropped, whitespace folded."""
    return " ".join(re.sub(r"\\mathdefault|[${}\\]", "", str(text)).split())


def _labelled(axis) -> bool:
    """Ticks named by the plot (categories, set_xticks with labels), not numbers on a scale."""
    fmt = axis.get_major_formatter()
    if isinstance(fmt, StrCategoryFormatter):
        return True
    fixed = isinstance(axis.get_major_locator(), FixedLocator)
    return fixed and not isinstance(fmt, (ScalarFormatter, LogFormatter))


def _axis(axis, label: str, lo: float, hi: float) -> str:
    """'"S (tokens)", log scale, 256 to 65,536' or '"D", labelled ticks 1536, 3072, 5120'."""
    head = f'"{_plain(label)}"' if _plain(label) else ""
    scale = "" if axis.get_scale() == "linear" else f"{axis.get_scale()} scale"
    ticks = [_plain(t.get_text()) for t in axis.get_ticklabels()]
    if _labelled(axis) and any(ticks):  # the names are the data: read them out
        what = f"labelled ticks {_names(ticks)}"
    elif any(ticks):
        lo, hi = sorted((lo, hi))
        what = f"{fmt_num(lo)} to {fmt_num(hi)}"
    else:
        what = "no tick labels"
    return ", ".join(p for p in (head, scale, what) if p)


def _colourbars(fig: Figure) -> dict[Axes, object]:
    """The colourbar of each mappable drawn, keyed by the axes it sits in."""
    bars = {}
    for ax in fig.axes:
        for m in [*ax.collections, *ax.images]:
            if getattr(m, "colorbar", None) is not None:
                bars[m.colorbar.ax] = m.colorbar
    return bars


def _marks(ax: Axes) -> str:
    """What is drawn: lines and their points, point sets, bars; unnamed ones counted."""
    lines = [
        ln
        for ln in ax.lines
        if len(ln.get_xdata()) > 1 or ln.get_marker() not in ("", "None", None)
    ]
    points = sum(len(c.get_offsets()) for c in ax.collections if hasattr(c, "get_offsets"))
    bars = sum(len(c.patches) for c in ax.containers if hasattr(c, "patches"))
    parts = []
    if lines:
        parts.append(f"{len(lines)} line{'s' * (len(lines) > 1)}")
    if points:
        parts.append(f"{points} plotted point{'s' * (points > 1)}")
    if bars:
        parts.append(f"{bars} bar{'s' * (bars > 1)}")
    words = [_plain(t.get_text()) for t in ax.texts if t.get_visible() and t.get_text().strip()]
    if words:
        parts.append(f"{len(words)} text label{'s' * (len(words) > 1)}")
    return ", ".join(parts)


def _legend(ax_or_fig) -> list[str]:
    legends = [ax_or_fig.get_legend()] if isinstance(ax_or_fig, Axes) else ax_or_fig.legends
    return [_plain(t.get_text()) for lg in legends if lg for t in lg.get_texts()]


def _panel(ax: Axes) -> str:
    parts = [
        f"x axis {_axis(ax.xaxis, ax.get_xlabel(), *ax.get_xlim())}",
        f"y axis {_axis(ax.yaxis, ax.get_ylabel(), *ax.get_ylim())}",
        _marks(ax),
    ]
    for m in [*ax.collections, *ax.images]:
        cb = getattr(m, "colorbar", None)
        if cb is not None:
            axis = cb.ax.yaxis if cb.orientation == "vertical" else cb.ax.xaxis
            parts.append(f"colour {_axis(axis, axis.get_label_text(), cb.norm.vmin, cb.norm.vmax)}")
    if names := _legend(ax):
        parts.append(f"legend: {_names(names)}")
    title = _plain(ax.get_title()) or _plain(ax.get_title("left"))
    body = "; ".join(p for p in parts if p)
    return f'"{title}": {body}' if title else body


def _panels(fig: Figure) -> list[Axes]:
    """Axes that show data: not one turned off (a table's or a legend's holder), not a colourbar
    (described with the panel whose colours it reads)."""
    bars = _colourbars(fig)
    return [ax for ax in fig.axes if ax.axison and ax not in bars]


def _first_clause(text: str) -> str:
    """Text up to its first '.', ':' or ';' outside parentheses."""
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch in "([") - (ch in ")]")
        if depth == 0 and ch in ".:;" and text[i + 1 : i + 2] in (" ", ""):
            return text[:i]
    return text


def title(fig: Figure, caption: str) -> str:
    """The figure's own title (suptitle, else its one panel's title), else the caption's first
    clause (up to its first '.', ':' or ';' outside parentheses)."""
    sup = _plain(fig.get_suptitle())
    titled = [_plain(ax.get_title()) for ax in _panels(fig) if ax.get_title()]
    if sup:
        return sup
    if len(titled) == 1 and len(_panels(fig)) == 1:
        return titled[0]
    return _plain(_first_clause(str(caption).strip()))


def describe(fig: Figure) -> str:
    """What the figure draws, panel by panel: axes with their labels, scales and shown ranges (or
    category names), the marks and the legend."""
    panels = _panels(fig)
    if not panels:
        return "A figure with no data panels."
    n = len(panels)
    out = [f"{n} panel{'s' * (n > 1)}."] if n > 1 else []
    for i, ax in enumerate(panels, 1):
        text = _panel(ax)
        out.append(f"Panel {i}: {text}." if n > 1 else f"{text[:1].upper()}{text[1:]}.")
    if names := _legend(fig):
        out.append(f"Figure legend: {_names(names)}.")
    return " ".join(out)


def label_svg(svg: str, ident: str, name: str, description: str) -> str:
    """`svg` (matplotlib's file text) with role="img", a <title> (its accessible name) and a <desc>
    (its description) as the first children of its root <svg> element, ids `<ident>-title` and
    `<ident>-desc`; `ident` must be a plain id (letters, digits, '-', '_', '.')."""
    start = svg.find("<svg")
    end = svg.find(">", start)
    if start < 0 or end < 0:
        raise ValueError("no <svg> element in the figure's SVG")
    refs = f'aria-labelledby="{ident}-title" aria-describedby="{ident}-desc"'
    head = f'{svg[:end]} role="img" {refs}>'
    labels = (
        f'<title id="{ident}-title">{escape(name)}</title>'
        f'<desc id="{ident}-desc">{escape(description)}</desc>'
    )
    return head + labels + svg[end + 1 :]
