"""A report anyone can read: no link to a file a copied report lacks, figure text as text with a
title and a description read from the figure, tables with captions and header scopes, and a PDF
whose verdict table and metadata a search finds."""

from __future__ import annotations

import html as htmllib
import io
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import matplotlib as mpl
import pytest
from matplotlib.figure import Figure
from test_reproduce import fake  # noqa: F401  (the fake-experiments fixture)

from suite import reproduce
from suite.report import describe, html, plots


class Page(HTMLParser):
    """Every link target, the ids, each <svg>'s opening attributes and first child, each <table>'s
    first child and its <th> elements' scope."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.svgs: list[dict] = []
        self.tables: list[dict] = []
        self._last: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        self.links += [v for k, v in attrs if k in ("href", "src", "xlink:href") and v]
        if self._last == "svg":
            self.svgs[-1]["first_child"] = (tag, a.get("id"))
        if self._last == "table":
            self.tables[-1]["first_child"] = tag
        if tag == "svg":
            self.svgs.append({"attrs": a})
        if tag == "table":
            self.tables.append({"th": []})
        if tag == "th" and self.tables:
            self.tables[-1]["th"].append(a.get("scope"))
        self._last = tag


@pytest.fixture
def report(fake, tmp_path):  # noqa: F811
    """A built report as a committed reference keeps it: figures/ left out."""
    run = tmp_path / "run"
    reproduce.main(["--out", str(run)])
    shutil.rmtree(run / "figures")
    return run


def page(run: Path) -> tuple[str, Page]:
    text = (run / "report.html").read_text(encoding="utf-8")
    p = Page()
    p.feed(text)
    return text, p


def test_every_link_resolves_without_the_figures_folder(report):
    _, p = page(report)
    assert p.links, "no links found: the parser saw nothing"
    for ref in p.links:
        if ref.startswith("data:"):
            continue
        if ref.startswith("#"):
            assert ref[1:] in p.ids, f"dangling anchor {ref}"
        else:
            assert (report / ref.split("#")[0]).is_file(), f"link to a missing file {ref}"


def test_figures_are_text_with_a_title_and_description(report):
    text, p = page(report)
    assert 'id="DejaVuSans-' not in text, "glyphs drawn as paths"
    names = re.findall(r'<figure id="fig-([^"]+)"', text)
    assert {"claims-overview", "fake_bars"} <= set(names)
    assert len(p.svgs) == len(names)
    for name, svg in zip(names, p.svgs):
        ident = f"fig-{name}"
        assert svg["attrs"]["role"] == "img"
        assert svg["attrs"]["aria-labelledby"] == f"{ident}-title"
        assert svg["attrs"]["aria-describedby"] == f"{ident}-desc"
        assert svg["first_child"] == ("title", f"{ident}-title")
        assert f"{ident}-desc" in p.ids

    def svg_of(name: str) -> str:
        start = text.index(f'<figure id="fig-{name}"')
        return text[start : text.index("</svg>", start)]

    def texts(svg: str) -> list[str]:
        return [htmllib.unescape(t).strip() for t in re.findall(r"<text[^>]*>([^<]+)</text>", svg)]

    assert any(t.startswith("C4") for t in texts(svg_of("claims-overview")))  # claim ids as text
    numbers = [t for t in texts(svg_of("fake_bars")) if re.fullmatch(r"[0-9.]+", t)]
    assert len(numbers) >= 3, texts(svg_of("fake_bars"))  # tick labels are text
    desc = re.search(r'<desc id="fig-fake_bars-desc">([^<]*)</desc>', svg_of("fake_bars"))
    assert "1 line" in desc.group(1) and "y axis 0.179 to 0.201" in desc.group(1)  # cv 0.18-0.2


def test_every_table_has_a_caption_and_scoped_headers(report):
    _, p = page(report)
    assert len(p.tables) > 5
    for t in p.tables:
        assert t["first_child"] == "caption", t
        assert t["th"] and all(s in ("col", "row") for s in t["th"]), t


def _figure(xs: list[float], ys: list[float]) -> Figure:
    fig = Figure()
    ax, bars = fig.subplots(1, 2)
    ax.plot(xs, ys, "o-", label="measured")
    ax.set(xscale="log", xlabel="S (tokens)", ylabel="step (s)", title="latency")
    ax.legend()
    bars.bar(["fused", "eager"], [1.0, 3.0])
    bars.set_ylabel("kernels")
    fig.canvas.draw_idle()
    return fig


def test_description_follows_the_data():
    with mpl.rc_context(plots.RC):
        small, large = _figure([256, 4096], [0.1, 0.5]), _figure([256, 65536], [0.1, 0.5])
        for fig in (small, large):
            fig.savefig(io.StringIO(), format="svg")  # drawn: tick labels exist
        a, b = describe.describe(small), describe.describe(large)
    assert a != b  # a longer sweep reads differently
    assert a.startswith("2 panels.") and '"latency"' in a and 'x axis "S (tokens)", log scale' in a
    assert "1 line" in a and "legend: measured" in a
    assert "labelled ticks fused, eager" in a and "2 bars" in a
    assert 'y axis "kernels"' in a
    assert describe.title(small, "Caption: more.") == "Caption"
    labelled = describe.label_svg('<?xml?>\n<svg a="1">\n<g/></svg>', "fig-x", "T <1>", "D & e")
    assert labelled.endswith(
        '<svg a="1" role="img" aria-labelledby="fig-x-title" aria-describedby="fig-x-desc">'
        '<title id="fig-x-title">T &lt;1&gt;</title><desc id="fig-x-desc">D &amp; e</desc>\n<g/></svg>'
    )


@pytest.mark.skipif(
    shutil.which("pdftotext") is None or shutil.which("pdfinfo") is None,
    reason="no pdftotext/pdfinfo (apt-get install poppler-utils)",
)
def test_pdf_text_finds_every_claim_verdict_and_value(report):
    out = subprocess.run(
        ["pdftotext", str(report / "report.pdf"), "-"], capture_output=True, text=True, timeout=60
    ).stdout
    words = set(out.split())
    for c in json.loads((report / "claims.json").read_text()):
        assert c["id"] in words, c["id"]
        assert c["verdict"] in out, (c["id"], c["verdict"])
        if c["measured"] is not None:
            assert html.fmt_num(c["measured"]) in out, (c["id"], c["measured"])
    assert "CV <per step> & more" in out  # a figure's caption
    info = subprocess.run(
        ["pdfinfo", str(report / "report.pdf")], capture_output=True, text=True, timeout=60
    ).stdout
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    assert fields["Title"].strip().startswith("AdaptiveLoad reproduction report")
    assert "claims of the AdaptiveLoad paper" in fields["Subject"]
    assert fields["Author"].strip() and fields["Creator"].strip()
